//! One object: as the provisioner would apply it, dry-run applied and compared with the live
//! one; and the inventory objects the content no longer has.

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context, bail};
use gantry_api::patches::Patches;
use gantry_api::{BUNDLE_LABEL, Bundle, FIELD_MANAGER, InventoryEntry};
use gantry_image::BundleObject;
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

/// The object as the provisioner applies it: its namespace defaulted (`scope`: `None` for a
/// kind not served yet, whose object keeps the namespace it has), the patches that select it
/// applied (a patch may rename it or move it), its images rewritten, and the bundle label
/// added, so that the label is no change. Also the patches applied (their indexes).
fn desired_object(
    mut object: Value,
    bundle: &Bundle,
    patches: &Patches,
    scope: Option<&Scope>,
) -> anyhow::Result<(Value, Vec<usize>)> {
    let default_namespace = |object: &mut Value| -> anyhow::Result<()> {
        let metadata = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .context("the object has no metadata")?;
        match scope {
            None => {}
            Some(Scope::Cluster) => {
                metadata.remove("namespace");
            }
            Some(Scope::Namespaced) => {
                let namespace = metadata
                    .get("namespace")
                    .and_then(Value::as_str)
                    .filter(|ns| !ns.is_empty())
                    .map(str::to_string)
                    .or_else(|| bundle.spec.install_namespace.clone())
                    .context("a namespaced object carries no namespace and the bundle sets no installNamespace")?;
                metadata.insert("namespace".into(), Value::String(namespace));
            }
        }
        Ok(())
    };
    default_namespace(&mut object)?;
    let applied = patches.apply(&mut object)?;
    if !applied.is_empty() {
        default_namespace(&mut object)?;
    }
    // Images as the provisioner rewrites them (`spec.images`), after the patches: what would
    // run is compared.
    gantry_api::images::rewrite_images(&mut object, &bundle.spec.images);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(BUNDLE_LABEL.into(), Value::String(bundle.name_any()));
        }
    }
    Ok((object, applied))
}

/// `spec.patches` of the bundle, parsed; an error names the bundle and the patch.
pub(super) fn bundle_patches(bundle: &Bundle) -> anyhow::Result<Patches> {
    Patches::parse(&bundle.spec.patches)
        .map_err(|e| anyhow::anyhow!("bundle {}: {e}", bundle.name_any()))
}

/// The patches of `spec.patches` that select no object of `objects`, as [`diff_object`]
/// applies them: `spec.patches[1] (kind=Job)`. Each kind is looked up once.
pub(super) async fn unmatched_patches(
    client: &Client,
    bundle: &Bundle,
    patches: &Patches,
    objects: &[BundleObject],
) -> Vec<String> {
    if patches.is_empty() {
        return Vec::new();
    }
    let mut scopes: HashMap<GroupVersionKind, Option<Scope>> = HashMap::new();
    let mut applied = BTreeSet::new();
    for object in objects {
        let Ok(value) = object.value() else {
            continue;
        };
        let Ok((group, version)) = group_version(&value) else {
            continue;
        };
        let gvk = GroupVersionKind::gvk(&group, &version, str_at(&value, "/kind"));
        if !scopes.contains_key(&gvk) {
            let scope = kube::discovery::pinned_kind(client, &gvk)
                .await
                .ok()
                .map(|(_, capabilities)| capabilities.scope);
            scopes.insert(gvk.clone(), scope);
        }
        let scope = scopes.get(&gvk).and_then(Option::as_ref);
        if let Ok((_, indexes)) = desired_object(value, bundle, patches, scope) {
            applied.extend(indexes);
        }
    }
    patches.unmatched(&applied)
}

/// Dry-runs the apply of one object, as the provisioner would apply it, and compares the
/// result with the live object.
pub(crate) async fn diff_object(
    client: &Client,
    bundle: &Bundle,
    object: Value,
) -> anyhow::Result<ObjectDiff> {
    let (group, version) = group_version(&object)?;
    let kind = str_at(&object, "/kind").to_string();
    let gvk = GroupVersionKind::gvk(&group, &version, &kind);
    let discovered = kube::discovery::pinned_kind(client, &gvk).await;
    let scope = discovered.as_ref().ok().map(|(_, c)| &c.scope);
    let (object, _) = desired_object(object, bundle, &bundle_patches(bundle)?, scope)?;
    let name = str_at(&object, "/metadata/name").to_string();
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let Ok((resource, _)) = discovered else {
        // A kind this very bundle defines (its CRD is not installed yet): created as it is.
        let namespace = namespace.or_else(|| bundle.spec.install_namespace.clone());
        let key = (group, kind.clone(), namespace.clone(), name.clone());
        let title = title(&kind, namespace.as_deref(), &name);
        let note = "kind not served yet: a CRD of the bundle defines it";
        return Ok(ObjectDiff {
            key,
            text: Some(unified(&title, None, Some(&object), note)),
        });
    };
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let key = (group, kind.clone(), namespace.clone(), name.clone());
    let title = title(&kind, namespace.as_deref(), &name);
    let live = api
        .get_opt(&name)
        .await
        .with_context(|| format!("reading {title}"))?
        .map(|live| serde_json::to_value(live).unwrap_or(Value::Null));
    // Fields `spec.ignore` leaves to other controllers go out with their live values, as the
    // provisioner sends them: they are no change.
    let mut object = object;
    let ignored = gantry_api::ignore::ignored_paths(&bundle.spec.ignore, &object);
    if !ignored.is_empty() {
        let removed = gantry_api::ignore::remove_fields(&mut object, &ignored);
        gantry_api::ignore::restore_fields(&mut object, &removed, live.as_ref());
    }
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let (after, note) = match api.patch(&name, &params, &Patch::Apply(&object)).await {
        Ok(applied) => (serde_json::to_value(applied).unwrap_or(Value::Null), ""),
        // Its namespace is created by the bundle and does not exist yet.
        Err(kube::Error::Api(status)) if status.code == 404 && live.is_none() => {
            (object, "its namespace does not exist yet")
        }
        Err(error) => return Err(error).with_context(|| format!("dry-run apply of {title}")),
    };
    let mut before = live.map(clean);
    let mut after = clean(after);
    if kind == "Secret" && key.0.is_empty() {
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

fn group_version(object: &Value) -> anyhow::Result<(String, String)> {
    let api_version = str_at(object, "/apiVersion");
    Ok(match api_version.split_once('/') {
        Some((group, version)) => (group.to_string(), version.to_string()),
        None if !api_version.is_empty() => (String::new(), api_version.to_string()),
        None => bail!("the object has no apiVersion"),
    })
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
    use serde_json::json;
    #[test]
    fn the_desired_object_is_patched_then_rewritten_and_labelled() {
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
        let patches = Patches::parse(&bundle.spec.patches).unwrap();
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "server" },
            "spec": { "replicas": 2, "template": { "spec": { "containers": [
                { "name": "server", "image": "r/server:v1" },
            ]}}},
        });
        let (object, applied) =
            desired_object(deployment, &bundle, &patches, Some(&Scope::Namespaced)).unwrap();
        assert_eq!(applied, [0], "matched in the namespace it is applied in");
        assert_eq!(object.pointer("/spec/replicas"), None);
        assert_eq!(
            object.pointer("/spec/template/spec/containers/1/image"),
            Some(&json!("r/sidecar:v2")),
            "a container a patch adds gets its image rewritten"
        );
        assert_eq!(object["metadata"]["labels"][BUNDLE_LABEL], "metrics");

        let config =
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } });
        let (object, applied) =
            desired_object(config, &bundle, &patches, Some(&Scope::Namespaced)).unwrap();
        assert_eq!(
            (applied, &object["metadata"]["namespace"]),
            (vec![1], &json!("other"))
        );

        let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": { "name": "r", "namespace": "ignored" } });
        let (object, applied) =
            desired_object(role, &bundle, &patches, Some(&Scope::Cluster)).unwrap();
        assert!(applied.is_empty());
        assert_eq!(object["metadata"].get("namespace"), None);

        let broken = Patches::parse(&[gantry_api::BundlePatch {
            patch: "[{op: remove, path: /spec/paused}]".into(),
            target: Default::default(),
        }])
        .unwrap();
        let config =
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } });
        let error = desired_object(config, &bundle, &broken, Some(&Scope::Namespaced)).unwrap_err();
        assert!(
            error.to_string().contains("spec.patches[0]: operation 0 (remove /spec/paused) failed on v1 ConfigMap kube-system/c"),
            "{error}"
        );
    }
}
