//! Kinds to API resources, cached: one group-version lookup per kind not seen before; and the
//! API of a kind's objects.

use std::collections::HashMap;

use gantry_image::BundleObject;
use std::sync::Mutex;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};

use crate::cluster::errors::is_not_found;
use gantry_rules::plan::{Kind, PlannedObject, bundle_crd_kinds, gvk_of};

/// Cache of kinds the API server serves.
#[derive(Default)]
pub struct KindCache {
    kinds: Mutex<HashMap<GroupVersionKind, Kind>>,
}

impl KindCache {
    /// Looks `gvk` up, asking the API server on a miss. `Ok(None)` when it is not served.
    pub async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> kube::Result<Option<Kind>> {
        if let Some(kind) = self.get(gvk) {
            return Ok(Some(kind));
        }
        match pinned_kind(client, gvk).await {
            Ok((resource, capabilities)) => {
                let kind = Kind {
                    resource,
                    namespaced: capabilities.scope == Scope::Namespaced,
                };
                self.insert(gvk.clone(), kind.clone());
                Ok(Some(kind))
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn get(&self, gvk: &GroupVersionKind) -> Option<Kind> {
        self.kinds.lock().ok()?.get(gvk).cloned()
    }

    pub fn insert(&self, gvk: GroupVersionKind, kind: Kind) {
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.insert(gvk, kind);
        }
    }

    /// Forgets a kind (its CRD went away or changed).
    pub fn forget(&self, gvk: &GroupVersionKind) {
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.remove(gvk);
        }
    }
}

/// The served kinds of `objects` that no CRD of the bundle defines, asked of the API server
/// through `kinds`; a kind it does not serve is left out (planning then names it).
pub async fn served_kinds(
    client: &Client,
    kinds: &KindCache,
    objects: &[BundleObject],
) -> kube::Result<HashMap<GroupVersionKind, Kind>> {
    let bundled = bundle_crd_kinds(objects);
    let mut served: HashMap<GroupVersionKind, Kind> = HashMap::new();
    for gvk in objects.iter().map(gvk_of) {
        if bundled.contains_key(&gvk) || served.contains_key(&gvk) {
            continue;
        }
        if let Some(kind) = kinds.resolve(client, &gvk).await? {
            served.insert(gvk, kind);
        }
    }
    Ok(served)
}

/// The API of `kind`'s objects in `namespace` (ignored for cluster-scoped kinds).
pub fn kind_api(client: &Client, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    api(client, &kind.resource, kind.namespaced, namespace)
}

/// The API of `object`'s kind, in its namespace.
pub fn object_api(client: &Client, object: &PlannedObject) -> Api<DynamicObject> {
    api(
        client,
        &object.resource,
        object.namespaced,
        object.namespace.as_deref(),
    )
}

fn api(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace.filter(|_| namespaced) {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}
