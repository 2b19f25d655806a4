//! On deletion: remove the inventory's objects in reverse order, then the stored content, then
//! the finalizer.

use gantry_api::conditions::reasons;
use gantry_api::{Bundle, UNINSTALL_FINALIZER};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;

use super::{Outcome, Pass, remove_objects};
use crate::controller::error::{Error, Result};
use crate::controller::status::publish;

pub(super) async fn uninstall(pass: &mut Pass<'_>) -> Result<Outcome> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    if !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(Outcome::Gone);
    }
    let name = pass.name.as_str();
    remove_objects(pass, pass.status.inventory.iter().rev())
        .await
        .map_err(|(object, message)| Error::Uninstall { object, message })?;
    ctx.storage.delete_bundle(name).await?;
    let finalizers: Vec<String> = bundle
        .finalizers()
        .iter()
        .filter(|f| *f != UNINSTALL_FINALIZER)
        .cloned()
        .collect();
    let patch = json!({ "metadata": { "finalizers": finalizers, "resourceVersion": bundle.resource_version() } });
    let bundles: Api<Bundle> = Api::all(ctx.client.clone());
    match bundles
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.resolved.forget(name);
    ctx.checked.forget(name);
    publish(
        ctx,
        bundle,
        EventType::Normal,
        reasons::UNINSTALLED,
        "objects and stored content removed",
    )
    .await;
    Ok(Outcome::Gone)
}
