//! Writing to the cluster: discovery of each manifest's kind, server-side apply, deletion.

use std::collections::HashMap;
use std::fmt::Debug;

use anyhow::Context;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::discovery::{Scope, pinned_kind};
use kube::runtime::wait::{await_condition, conditions::is_deleted};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;

use super::manifests::{display, name_of};

/// The field manager of everything `install` applies.
const FIELD_MANAGER: &str = "kubectl-bundle";

/// The API of `object`'s kind, found by discovery once per kind.
pub(super) struct Apis {
    client: Client,
    pub(super) known: HashMap<(String, String), (ApiResource, bool)>,
}

impl Apis {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            known: HashMap::new(),
        }
    }

    /// The API for `object`; `None` when the cluster does not serve its kind.
    pub(super) async fn api(
        &mut self,
        object: &Value,
    ) -> anyhow::Result<Option<Api<DynamicObject>>> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let key = (api_version.to_string(), kind.to_string());
        if !self.known.contains_key(&key) {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            match pinned_kind(&self.client, &gvk).await {
                Ok((resource, capabilities)) => {
                    self.known.insert(
                        key.clone(),
                        (resource, capabilities.scope == Scope::Namespaced),
                    );
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                Err(kube::Error::Discovery(_)) => return Ok(None),
                Err(e) => {
                    return Err(e).with_context(|| format!("discovering {kind}.{api_version}"));
                }
            }
        }
        let (resource, namespaced) = &self.known[&key];
        let (_, namespace) = name_of(object);
        Ok(Some(match namespace {
            Some(ns) if *namespaced => Api::namespaced_with(self.client.clone(), ns, resource),
            _ => Api::all_with(self.client.clone(), resource),
        }))
    }
}

/// Applies one object with server-side apply; what that did.
pub(super) async fn apply(apis: &mut Apis, object: &Value) -> anyhow::Result<&'static str> {
    let what = display(object);
    let (name, _) = name_of(object);
    let api = apis
        .api(object)
        .await?
        .with_context(|| format!("{what}: the cluster does not serve its kind"))?;
    let before = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {what}"))?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let after = api
        .patch(name, &params, &Patch::Apply(object))
        .await
        .with_context(|| format!("applying {what}"))?;
    Ok(match before {
        None => "created",
        Some(before) if comparable(&before) == comparable(&after) => "unchanged",
        Some(_) => "configured",
    })
}

/// An object without what changes on every write (its resource version, and when each
/// manager last wrote): a write that left the rest alone changed nothing.
fn comparable(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
        if let Some(managers) = metadata
            .get_mut("managedFields")
            .and_then(Value::as_array_mut)
        {
            for manager in managers.iter_mut().filter_map(Value::as_object_mut) {
                manager.remove("time");
            }
        }
    }
    value
}

/// An object being deleted.
pub(super) struct Deleted<K = DynamicObject> {
    pub(super) api: Api<K>,
    pub(super) name: String,
    pub(super) what: String,
    pub(super) uid: String,
}

/// Deletes one object (its dependents in the background); `kind/name deleted` or `... not
/// found`.
pub(super) async fn delete(
    apis: &mut Apis,
    object: &Value,
    deleted: &mut Vec<Deleted>,
) -> anyhow::Result<String> {
    let what = display(object);
    let (name, _) = name_of(object);
    let Some(api) = apis.api(object).await? else {
        return Ok(format!("{what} not found"));
    };
    match api.delete(name, &DeleteParams::background()).await {
        Ok(either) => {
            // Gone at once (`Right`), or being deleted: waited for by its uid.
            if let Some(uid) = either.left().and_then(|o| o.uid()) {
                deleted.push(Deleted {
                    api,
                    name: name.to_string(),
                    what: what.clone(),
                    uid,
                });
            }
            Ok(format!("{what} deleted"))
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(format!("{what} not found")),
        Err(e) => Err(e).with_context(|| format!("deleting {what}")),
    }
}

/// Waits until every object of `deleted` is gone; `None` when `deadline` comes first.
pub(super) async fn wait_deleted<K>(
    deleted: &[Deleted<K>],
    deadline: Instant,
) -> Option<anyhow::Result<()>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let gone = async {
        for d in deleted {
            await_condition(d.api.clone(), &d.name, is_deleted(&d.uid))
                .await
                .with_context(|| format!("watching {}", d.what))?;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout_at(deadline, gone).await.ok()
}
