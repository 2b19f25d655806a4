//! Removing objects a bundle no longer has (prune) or that it had (uninstall).

use gantry_api::{BUNDLE_LABEL, InventoryEntry, PRUNE_ANNOTATION, PRUNE_DISABLED};
use kube::api::{Api, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cluster::discovery::KindCache;
use crate::cluster::errors::api_message;
use crate::cluster::errors::is_not_found;
use crate::policy::plan::describe;

/// What happened to one object being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Deleted,
    /// Annotated `gantry.dev/prune: disabled`: left in place, no longer labelled as managed.
    Orphaned,
    /// Already gone, or managed by someone else now.
    Skipped,
    /// Its deletion was requested before and waits for finalizers: not asked again.
    Deleting,
}

/// Removes `entry` if it is still managed by `bundle`. Errors carry the object's description.
pub async fn remove(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
    bundle: &str,
) -> Result<Removal, (String, String)> {
    let object = describe(entry);
    let Some((api, live)) = live_object(client, kinds, entry).await? else {
        return Ok(Removal::Skipped);
    };
    if live.labels().get(BUNDLE_LABEL).map(String::as_str) != Some(bundle) {
        return Ok(Removal::Skipped);
    }
    if live.metadata.deletion_timestamp.is_some() {
        return Ok(Removal::Deleting);
    }
    if live.annotations().get(PRUNE_ANNOTATION).map(String::as_str) == Some(PRUNE_DISABLED) {
        let patch = json!({ "metadata": { "labels": { BUNDLE_LABEL: null } } });
        return api
            .patch_metadata(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| Removal::Orphaned)
            .map_err(|e| (object, api_message(&e)));
    }
    match api.delete(&entry.name, &DeleteParams::background()).await {
        Ok(_) => Ok(Removal::Deleted),
        Err(e) if is_not_found(&e) => Ok(Removal::Skipped),
        Err(e) => Err((object, api_message(&e))),
    }
}

/// What keeps a removed object from being gone: `None` when it is gone or no longer managed by
/// `bundle`, else its description with its finalizers. A Namespace counts as gone once its
/// deletion started: the namespace controller empties it, which may take long and is not the
/// bundle's to wait for.
pub async fn still_present(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
    bundle: &str,
) -> Result<Option<String>, (String, String)> {
    let object = describe(entry);
    let Some((_, live)) = live_object(client, kinds, entry).await? else {
        return Ok(None);
    };
    let managed = live.labels().get(BUNDLE_LABEL).map(String::as_str) == Some(bundle);
    let namespace_going = entry.group.is_empty()
        && entry.kind == "Namespace"
        && live.metadata.deletion_timestamp.is_some();
    if !managed || namespace_going {
        return Ok(None);
    }
    let finalizers = live.finalizers();
    Ok(Some(if finalizers.is_empty() {
        object
    } else {
        format!("{object} (finalizers: {})", finalizers.join(", "))
    }))
}

/// The live object of `entry` with the API that reaches it; `None` when it is gone (its kind
/// too: a removed CRD takes its objects along).
async fn live_object(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
) -> Result<Option<(Api<DynamicObject>, PartialObjectMeta<DynamicObject>)>, (String, String)> {
    let failed = |e: kube::Error| (describe(entry), api_message(&e));
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let Some(kind) = kinds.resolve(client, &gvk).await.map_err(failed)? else {
        return Ok(None);
    };
    let api = kind.api(client, entry.namespace.as_deref());
    // Only metadata counts here; a CRD's whole body would weigh megabytes.
    match api.get_metadata_opt(&entry.name).await {
        Ok(live) => Ok(live.map(|live| (api, live))),
        // A plain 404: the kind is not served any more (its CRD is being deleted), so its
        // objects are going too.
        Err(e) if is_not_found(&e) => {
            kinds.forget(&gvk);
            Ok(None)
        }
        Err(e) => Err(failed(e)),
    }
}
