//! The ProvisionerClass reconcile: `Accepted` says whether its parameters are valid.

use std::sync::Arc;

use gantry_api::ProvisionerClass;
use gantry_api::conditions::{reasons, types};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::error::Result;
use crate::state::Context;
use crate::status::{set_condition, write_class_status};
use gantry_rules::class_selection::validate;

#[tracing::instrument(name = "reconcile_class", skip_all, fields(class = %class.name_any()))]
pub async fn reconcile(class: Arc<ProvisionerClass>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.settings.provisioners.serves(&class.spec.provisioner) {
        return Ok(Action::await_change());
    }
    let current = class.status.clone().unwrap_or_default();
    let mut status = current.clone();
    let generation = class.metadata.generation;
    match validate(&class) {
        Ok(()) => set_condition(
            &mut status.conditions,
            types::ACCEPTED,
            true,
            reasons::ACCEPTED,
            "parameters are valid",
            generation,
        ),
        Err(message) => set_condition(
            &mut status.conditions,
            types::ACCEPTED,
            false,
            reasons::INVALID_PARAMETERS,
            message,
            generation,
        ),
    }
    status.observed_generation = generation;
    write_class_status(&class, &ctx, &current, &status).await?;
    Ok(Action::await_change())
}
