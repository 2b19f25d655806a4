//! Kinds to API resources, cached: one group-version lookup per kind not seen before.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};

/// A served kind: how to reach it and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

impl Kind {
    /// The API of this kind's objects in `namespace` (ignored for cluster-scoped kinds).
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }
}

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
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
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
