//! The ProvisionerClass reconcile: `Accepted` says whether its parameters are valid.

use std::sync::Arc;

use gantry_api::conditions::{reasons, types};
use gantry_api::{FIELD_MANAGER, PLAIN_PROVISIONER, ProvisionerClass, ProvisionerClassStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::class::validate;
use super::context::Context;
use super::error::Result;
use super::status::set_condition;

pub async fn reconcile(class: Arc<ProvisionerClass>, ctx: Arc<Context>) -> Result<Action> {
    if class.spec.provisioner != PLAIN_PROVISIONER {
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
    if !same(&current, &status) {
        let patch = json!({
            "apiVersion": ProvisionerClass::api_version(&()),
            "kind": ProvisionerClass::kind(&()),
            "metadata": { "name": class.name_any() },
            "status": status,
        });
        let classes: Api<ProvisionerClass> = Api::all(ctx.client.clone());
        classes
            .patch_status(
                &class.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
    }
    Ok(Action::await_change())
}

fn same(a: &ProvisionerClassStatus, b: &ProvisionerClassStatus) -> bool {
    let key = |s: &ProvisionerClassStatus| {
        (
            s.observed_generation,
            s.conditions
                .iter()
                .map(|c| {
                    (
                        c.type_.clone(),
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    key(a) == key(b)
}
