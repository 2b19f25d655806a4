//! What a pending digest would change, per object, for the review page: `kubectl bundle
//! diff`'s own dry run and comparison, object by object, with the objects the requested
//! permissions flag first.

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use gantry_api::Bundle;
use kube::ResourceExt;

use super::Ui;
use crate::commands::diff;

/// What applying the content does to one object.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Change {
    Created,
    Changed,
    Pruned,
    Unchanged,
    /// It could not be compared (the text says why).
    Failed,
}

impl Change {
    pub fn label(self) -> &'static str {
        match self {
            Self::Created => "new",
            Self::Changed => "changed",
            Self::Pruned => "pruned",
            Self::Unchanged => "no change",
            Self::Failed => "not compared",
        }
    }
}

pub struct ObjectChange {
    /// `Kind namespace/name`.
    pub title: String,
    pub change: Change,
    /// The unified diff, or why it could not be made.
    pub text: String,
    /// Why the requested permissions flag this object, if they do.
    pub attention: Vec<String>,
    /// The object's size in the bundle (compact JSON), or its diff's for a pruned object.
    pub size: usize,
    /// What a CustomResourceDefinition defines, read from the bundle's object.
    pub crd: Option<CrdSummary>,
}

/// A CRD as an approver reads it: the API it defines, not its schema.
#[derive(Debug, PartialEq, Eq)]
pub struct CrdSummary {
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub scope: String,
    /// Each version with whether it is served and whether it is the storage version.
    pub versions: Vec<(String, bool, bool)>,
}

impl CrdSummary {
    /// The summary of `object` if it is a CustomResourceDefinition.
    pub fn of(object: &serde_json::Value) -> Option<Self> {
        let crd = object
            .get("apiVersion")?
            .as_str()?
            .starts_with("apiextensions.k8s.io/")
            && object.get("kind")? == "CustomResourceDefinition";
        if !crd {
            return None;
        }
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(|v| v.as_str())
                .unwrap_or("-")
                .to_string()
        };
        let flag = |v: &serde_json::Value, field: &str| v.get(field) == Some(&true.into());
        Some(Self {
            group: text("/spec/group"),
            kind: text("/spec/names/kind"),
            plural: text("/spec/names/plural"),
            scope: text("/spec/scope"),
            versions: object
                .pointer("/spec/versions")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .map(|v| {
                    let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("-");
                    (name.to_string(), flag(v, "served"), flag(v, "storage"))
                })
                .collect(),
        })
    }
}

/// How many objects are compared at once.
const CONCURRENCY: usize = 8;

/// The changes of the bundle's stored content, flagged objects first, then new, changed and
/// pruned ones, unchanged ones last.
pub async fn changes(ui: &Ui, bundle: &Bundle) -> anyhow::Result<Vec<ObjectChange>> {
    let client = ui.client.clone();
    let name = bundle.name_any();
    let objects = diff::content::stored_content(&ui.content, &client, bundle).await?;
    let status = bundle.status.clone().unwrap_or_default();
    let highlights = status
        .requested_permissions
        .map(|p| p.highlights)
        .unwrap_or_default();
    let planned = diff::object::plan(&client, bundle, objects).await?;
    let compared: Vec<(diff::ObjectKey, ObjectChange)> =
        // By index: a stream of borrowed objects makes the page's future not `Send`.
        futures::stream::iter(0..planned.plan.objects.len())
            .map(|index| {
                let (client, planned) = (client.clone(), &planned);
                async move {
                    let object = &planned.plan.objects[index];
                    let value = object.value();
                    let title = diff::object::describe_value(&value);
                    let (size, crd) = (object.object.get().len(), CrdSummary::of(&value));
                    let found = diff::object::diff_object(&client, bundle, planned, object).await;
                    anyhow::Ok(match found {
                        Ok(diff::object::ObjectDiff { key, text }) => {
                            let title = title_of(&key);
                            let change = match &text {
                                None => Change::Unchanged,
                                Some(text) if created(text) => Change::Created,
                                Some(_) => Change::Changed,
                            };
                            let text = text.unwrap_or_default();
                            (
                                key,
                                ObjectChange {
                                    title,
                                    change,
                                    text,
                                    attention: Vec::new(),
                                    size,
                                    crd,
                                },
                            )
                        }
                        Err(error) => (
                            (String::new(), String::new(), None, title.clone()),
                            ObjectChange {
                                title,
                                change: Change::Failed,
                                text: crate::commands::causes(&error),
                                attention: Vec::new(),
                                size,
                                crd,
                            },
                        ),
                    })
                }
            })
            .buffered(CONCURRENCY)
            .try_collect()
            .await
            .with_context(|| format!("reading the content of bundle {name}"))?;
    let desired: Vec<&diff::ObjectKey> = compared.iter().map(|(key, _)| key).collect();
    let mut changes = Vec::new();
    for entry in &status.inventory {
        let key = diff::key_of(entry);
        if desired.contains(&&key) {
            continue;
        }
        let title = diff::object::describe_entry(entry);
        match diff::object::pruned(&client, entry, &name).await {
            Ok(Some(text)) => changes.push((
                key,
                ObjectChange {
                    title,
                    change: Change::Pruned,
                    size: text.len(),
                    text,
                    attention: Vec::new(),
                    crd: None,
                },
            )),
            Ok(None) => {}
            Err(error) => changes.push((
                key,
                ObjectChange {
                    title,
                    change: Change::Failed,
                    text: crate::commands::causes(&error),
                    attention: Vec::new(),
                    size: 0,
                    crd: None,
                },
            )),
        }
    }
    let mut all: Vec<ObjectChange> = compared
        .into_iter()
        .chain(changes)
        .map(|((group, kind, namespace, name), mut change)| {
            change.attention = highlights
                .iter()
                .filter(|h| {
                    h.group == group && h.kind == kind && h.name == name && h.namespace == namespace
                })
                .map(|h| h.reason.clone())
                .collect();
            change
        })
        .collect();
    // Stable: within each rank, the order of the bundle's files.
    all.sort_by_key(|c| {
        (
            c.attention.is_empty(),
            match c.change {
                Change::Failed => 0,
                Change::Created | Change::Changed | Change::Pruned => 1,
                Change::Unchanged => 2,
            },
        )
    });
    Ok(all)
}

fn title_of((_, kind, namespace, name): &diff::ObjectKey) -> String {
    diff::object::title(kind, namespace.as_deref(), name)
}

/// Whether a unified diff starts from nothing: an object that does not exist yet.
fn created(text: &str) -> bool {
    text.lines().any(|l| l.starts_with("@@ -0,0 "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_from_nothing_is_a_new_object() {
        assert!(created(
            "--- a (live)\n+++ a (after apply)\n@@ -0,0 +1,3 @@\n+kind: ConfigMap\n"
        ));
        assert!(!created(
            "--- a (live)\n+++ a (after apply)\n@@ -1,3 +1,3 @@\n-x\n+y\n"
        ));
    }

    #[test]
    fn a_crd_is_summarised_by_its_api() {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": "prometheuses.monitoring.coreos.com" },
            "spec": { "group": "monitoring.coreos.com", "scope": "Namespaced",
                "names": { "kind": "Prometheus", "plural": "prometheuses" },
                "versions": [
                    { "name": "v1", "served": true, "storage": true, "schema": {} },
                    { "name": "v1alpha1", "served": false, "storage": false }
                ] }
        });
        assert_eq!(
            CrdSummary::of(&crd),
            Some(CrdSummary {
                group: "monitoring.coreos.com".into(),
                kind: "Prometheus".into(),
                plural: "prometheuses".into(),
                scope: "Namespaced".into(),
                versions: vec![("v1".into(), true, true), ("v1alpha1".into(), false, false)],
            })
        );
        let config_map = serde_json::json!({ "apiVersion": "v1", "kind": "ConfigMap" });
        assert_eq!(CrdSummary::of(&config_map), None);
    }
}
