//! One object: as the provisioner would apply it, dry-run applied and compared with the live
//! one; and the inventory objects the content no longer has.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use gantry_api::patches::Patches;
use gantry_api::{BUNDLE_LABEL, Bundle, FIELD_MANAGER, InventoryEntry};
use gantry_image::BundleObject;
use gantry_rules::plan::{Kind, Plan, PlannedObject, gvk_of, plan_patched};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::ObjectKey;
use super::text::{clean, mask_secrets, unified};

pub(crate) struct ObjectDiff {
    pub(crate) key: ObjectKey,
    /// The unified diff; `None` when applying changes nothing.
    pub(crate) text: Option<String>,
}

/// A bundle's content as the provisioner plans it (`gantry_rules::plan`: kinds resolved,
/// namespaces defaulted, `spec.patches` applied, the bundle label added, `spec.images`
/// rewritten), with the kinds the API server serves.
pub(crate) struct Planned {
    pub(crate) plan: Plan,
    /// The patches of `spec.patches` that selected no object.
    pub(crate) unmatched: Vec<String>,
    served: HashMap<GroupVersionKind, Kind>,
}

/// Plans `objects` for `bundle`, asking discovery once per kind.
pub(crate) async fn plan(
    client: &Client,
    bundle: &Bundle,
    objects: Vec<BundleObject>,
) -> anyhow::Result<Planned> {
    let mut served = HashMap::new();
    for gvk in objects.iter().map(gvk_of).collect::<HashSet<_>>() {
        if let Ok((resource, capabilities)) = kube::discovery::pinned_kind(client, &gvk).await {
            let namespaced = capabilities.scope == Scope::Namespaced;
            served.insert(
                gvk,
                Kind {
                    resource,
                    namespaced,
                },
            );
        }
    }
    planned_with(bundle, objects, served)
}

/// [`plan`] with the served kinds known.
fn planned_with(
    bundle: &Bundle,
    objects: Vec<BundleObject>,
    served: HashMap<GroupVersionKind, Kind>,
) -> anyhow::Result<Planned> {
    let patches = Patches::parse(&bundle.spec.patches)
        .map_err(|e| anyhow::anyhow!("bundle {}: {e}", bundle.name_any()))?;
    let (mut plan, unmatched) = plan_patched(
        objects,
        &bundle.name_any(),
        bundle.spec.install_namespace.as_deref(),
        &patches,
        |gvk| served.get(gvk).cloned(),
    )?;
    plan.rewrite_images(&bundle.spec.images)?;
    Ok(Planned {
        plan,
        unmatched,
        served,
    })
}

/// Dry-runs the apply of one planned object, as the provisioner would apply it, and compares
/// the result with the live object.
pub(crate) async fn diff_object(
    client: &Client,
    bundle: &Bundle,
    planned: &Planned,
    object: &PlannedObject,
) -> anyhow::Result<ObjectDiff> {
    let PlannedObject {
        gvk,
        namespace,
        name,
        ..
    } = object;
    let key = (
        gvk.group.clone(),
        gvk.kind.clone(),
        namespace.clone(),
        name.clone(),
    );
    let title = title(&gvk.kind, namespace.as_deref(), name);
    let mut desired = object.value();
    if !planned.served.contains_key(gvk) {
        // A kind this very bundle defines (its CRD is not installed yet): created as it is.
        let note = "kind not served yet: a CRD of the bundle defines it";
        return Ok(ObjectDiff {
            key,
            text: Some(unified(&title, None, Some(&desired), note)),
        });
    }
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &object.resource),
        None => Api::all_with(client.clone(), &object.resource),
    };
    let live = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {title}"))?
        .map(|live| serde_json::to_value(live).unwrap_or(Value::Null));
    // Fields `spec.ignore` leaves to other controllers go out with their live values, as the
    // provisioner sends them: they are no change.
    let ignored = gantry_api::ignore::ignored_paths(&bundle.spec.ignore, &desired);
    if !ignored.is_empty() {
        let removed = gantry_api::ignore::remove_fields(&mut desired, &ignored);
        gantry_api::ignore::restore_fields(&mut desired, &removed, live.as_ref());
    }
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let (after, note) = match api.patch(name, &params, &Patch::Apply(&desired)).await {
        Ok(applied) => (serde_json::to_value(applied).unwrap_or(Value::Null), ""),
        // Its namespace is created by the bundle and does not exist yet.
        Err(kube::Error::Api(status)) if status.code == 404 && live.is_none() => {
            (desired, "its namespace does not exist yet")
        }
        Err(error) => return Err(error).with_context(|| format!("dry-run apply of {title}")),
    };
    let mut before = live.map(clean);
    let mut after = clean(after);
    if gvk.kind == "Secret" && gvk.group.is_empty() {
        mask_secrets(before.as_mut(), &mut after);
    }
    let text = (before.as_ref() != Some(&after))
        .then(|| unified(&title, before.as_ref(), Some(&after), note));
    Ok(ObjectDiff { key, text })
}

/// An inventory object the new content lacks, shown as removed (if it is still there and
/// still the bundle's).
pub(crate) async fn pruned(
    client: &Client,
    entry: &InventoryEntry,
    bundle: &str,
) -> anyhow::Result<Option<String>> {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let Ok((resource, _)) = kube::discovery::pinned_kind(client, &gvk).await else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = match &entry.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let Some(live) = api.get_opt(&entry.name).await? else {
        return Ok(None);
    };
    if live.labels().get(BUNDLE_LABEL).map(String::as_str) != Some(bundle) {
        return Ok(None);
    }
    let mut live = clean(serde_json::to_value(live)?);
    if entry.kind == "Secret" && entry.group.is_empty() {
        let mut none = Value::Null;
        mask_secrets(Some(&mut live), &mut none);
    }
    let title = title(&entry.kind, entry.namespace.as_deref(), &entry.name);
    Ok(Some(unified(&title, Some(&live), None, "pruned")))
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(crate) fn title(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

pub(crate) fn describe_value(object: &Value) -> String {
    title(
        str_at(object, "/kind"),
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str),
        str_at(object, "/metadata/name"),
    )
}

pub(crate) fn describe_entry(entry: &InventoryEntry) -> String {
    title(&entry.kind, entry.namespace.as_deref(), &entry.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_rules::plan::testing::object;
    use serde_json::json;
    #[test]
    fn the_objects_are_planned_as_the_provisioner_plans_them() {
        let bundle = Bundle::new(
            "metrics",
            gantry_api::BundleSpec {
                image: "r/metrics:v1".into(),
                install_namespace: Some("kube-system".into()),
                images: vec![gantry_api::ImageOverride {
                    name: "r/sidecar".into(),
                    new_tag: Some("v2".into()),
                    ..Default::default()
                }],
                patches: vec![
                    gantry_api::BundlePatch {
                        patch: "- {op: add, path: /spec/template/spec/containers/-, value: {name: side, image: r/sidecar:v1}}\n- {op: remove, path: /spec/replicas}".into(),
                        target: gantry_api::ObjectSelector {
                            kind: Some("Deployment".into()),
                            namespace: Some("kube-system".into()),
                            ..Default::default()
                        },
                    },
                    gantry_api::BundlePatch {
                        patch: "[{op: replace, path: /metadata/namespace, value: other}]".into(),
                        target: gantry_api::ObjectSelector {
                            kind: Some("ConfigMap".into()),
                            ..Default::default()
                        },
                    },
                ],
                ..Default::default()
            },
        );
        let kind = |group: &str, version: &str, kind: &str, plural: &str, namespaced: bool| {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let resource = kube::core::ApiResource::from_gvk_with_plural(&gvk, plural);
            (
                gvk,
                Kind {
                    resource,
                    namespaced,
                },
            )
        };
        let served: HashMap<_, _> = [
            kind("apps", "v1", "Deployment", "deployments", true),
            kind("", "v1", "ConfigMap", "configmaps", true),
            kind(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRole",
                "clusterroles",
                false,
            ),
        ]
        .into();
        let deployment = object(
            "a.yaml",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "server" },
                "spec": { "replicas": 2, "template": { "spec": { "containers": [
                    { "name": "server", "image": "r/server:v1" },
                ]}}},
            }),
        );
        let config = object(
            "b.yaml",
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } }),
        );
        let role = object(
            "c.yaml",
            json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": { "name": "r", "namespace": "ignored" } }),
        );
        let planned = planned_with(
            &bundle,
            vec![deployment, config.clone(), role],
            served.clone(),
        )
        .unwrap();
        assert!(planned.unmatched.is_empty(), "{:?}", planned.unmatched);
        let [object, config_map, cluster_role] = &planned.plan.objects[..] else {
            panic!("three objects planned");
        };
        let object = object.value();
        assert_eq!(
            object.pointer("/spec/replicas"),
            None,
            "matched in the namespace it is applied in"
        );
        assert_eq!(
            object.pointer("/spec/template/spec/containers/1/image"),
            Some(&json!("r/sidecar:v2")),
            "a container a patch adds gets its image rewritten"
        );
        assert_eq!(object["metadata"]["labels"][BUNDLE_LABEL], "metrics");
        assert_eq!(config_map.namespace.as_deref(), Some("other"));
        assert_eq!(cluster_role.namespace, None);
        assert_eq!(cluster_role.value()["metadata"].get("namespace"), None);

        let mut broken = bundle.clone();
        broken.spec.patches = vec![gantry_api::BundlePatch {
            patch: "[{op: remove, path: /spec/paused}]".into(),
            target: Default::default(),
        }];
        let error = planned_with(&broken, vec![config], served).err().unwrap();
        assert!(
            error.to_string().contains("spec.patches[0]: operation 0 (remove /spec/paused) failed on v1 ConfigMap kube-system/c"),
            "{error}"
        );
    }
}
