//! Step 1: the class that serves the bundle, its parameters, and the finalizer.

use std::sync::Arc;

use crate::cluster::writes::own_patch;
use gantry_api::{Bundle, ProvisionerClass, UNINSTALL_FINALIZER};
use kube::ResourceExt;
use kube::api::{Api, Patch};
use serde_json::json;

use gantry_api::health::effective_health_check_exprs;
use gantry_rules::health_policy::EffectiveHealth;

use crate::error::{Error, Result};
use crate::reconcile::pass::{Flow, Outcome, Pass};
use gantry_rules::class_selection::{Selection, select, validate};
use gantry_rules::health_rules;

/// Picks the class; a class of another provisioner stops the pass before anything is written.
/// Records the class in `status.className`, the default one included.
pub(crate) async fn class(pass: &mut Pass<'_>) -> Result<Flow<Arc<ProvisionerClass>>> {
    let class = match select(pass.bundle, &pass.ctx.classes.state(), &pass.ctx.served()) {
        Selection::NotOurs => return Ok(Flow::Stop(Outcome::Untouched)),
        Selection::Missing(error) => return Err(error.into()),
        Selection::Serve(class) => class,
    };
    pass.status.class_name = Some(class.name_any());
    pass.health = EffectiveHealth::of(class.spec.health.as_ref(), pass.bundle.spec.health.as_ref());
    validate(&class).map_err(|message| Error::InvalidClass {
        class: class.name_any(),
        message,
    })?;
    health_rules::validate(
        "spec.healthCheckExprs",
        &pass.bundle.spec.health_check_exprs,
    )?;
    pass.health_check_exprs = effective_health_check_exprs(
        &class.spec.health_check_exprs,
        &pass.bundle.spec.health_check_exprs,
    );
    ensure_finalizer(pass).await?;
    Ok(Flow::Continue(class))
}

async fn ensure_finalizer(pass: &Pass<'_>) -> Result<()> {
    let bundle = pass.bundle;
    if bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(());
    }
    let mut finalizers = bundle.finalizers().to_vec();
    finalizers.push(UNINSTALL_FINALIZER.to_string());
    let patch = json!({ "metadata": { "finalizers": finalizers, "resourceVersion": bundle.resource_version() } });
    let bundles: Api<Bundle> = Api::all(pass.ctx.client.clone());
    let patched = bundles
        .patch(&pass.name, &own_patch(), &Patch::Merge(&patch))
        .await?;
    pass.ctx
        .written
        .record(&pass.name, patched.metadata.resource_version.as_deref());
    Ok(())
}
