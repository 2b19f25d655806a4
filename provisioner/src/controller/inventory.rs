//! Removing objects a bundle no longer has (prune) or that it had (uninstall).

use gantry_api::{BUNDLE_LABEL, InventoryEntry, PRUNE_ANNOTATION, PRUNE_DISABLED};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::apply::api_message;
use super::discovery::KindCache;
use super::plan::describe;

/// What happened to one object being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Deleted,
    /// Annotated `gantry.dev/prune: disabled`: left in place, no longer labelled as managed.
    Orphaned,
    /// Already gone, or managed by someone else now.
    Skipped,
}

/// Removes `entry` if it is still managed by `bundle`. Errors carry the object's description.
pub async fn remove(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
    bundle: &str,
) -> Result<Removal, (String, String)> {
    let object = describe(entry);
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let kind = match kinds.resolve(client, &gvk).await {
        Ok(Some(kind)) => kind,
        // The kind is gone (its CRD was removed): so are its objects.
        Ok(None) => return Ok(Removal::Skipped),
        Err(e) => return Err((object, api_message(&e))),
    };
    let api = kind.api(client, entry.namespace.as_deref());
    let live = match api.get_opt(&entry.name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(Removal::Skipped),
        Err(e) => return Err((object, api_message(&e))),
    };
    if live.labels().get(BUNDLE_LABEL).map(String::as_str) != Some(bundle) {
        return Ok(Removal::Skipped);
    }
    if live.annotations().get(PRUNE_ANNOTATION).map(String::as_str) == Some(PRUNE_DISABLED) {
        let patch = json!({ "metadata": { "labels": { BUNDLE_LABEL: null } } });
        return api
            .patch(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| Removal::Orphaned)
            .map_err(|e| (object, api_message(&e)));
    }
    match api.delete(&entry.name, &DeleteParams::background()).await {
        Ok(_) => Ok(Removal::Deleted),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Removal::Skipped),
        Err(e) => Err((object, api_message(&e))),
    }
}
