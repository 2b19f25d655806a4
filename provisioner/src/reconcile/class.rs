//! The ProvisionerClass reconcile: `Accepted` says whether its parameters are valid.

use std::sync::Arc;

use gantry_api::ProvisionerClass;
use gantry_api::conditions::{reasons, types};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::error::Result;
use crate::state::Context;
use crate::status::{set_condition, write_class_status};
use gantry_rules::class_selection::{ProvisionerKind, validate};

/// How often a class of a plugin asks whether its plugin is ready.
const PLUGIN_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

#[tracing::instrument(name = "reconcile_class", skip_all, fields(class = %class.name_any()))]
pub async fn reconcile(class: Arc<ProvisionerClass>, ctx: Arc<Context>) -> Result<Action> {
    let served = ctx.served();
    let Some(kind) = served.kind(&class.spec.provisioner) else {
        return Ok(Action::await_change());
    };
    let current = class.status.clone().unwrap_or_default();
    let mut status = current.clone();
    let generation = class.metadata.generation;
    // A plugin's readiness is asked again now and then: its probe may change without its
    // Service changing.
    let mut next = Action::await_change();
    let plugin = match kind {
        ProvisionerKind::Plugin => {
            next = Action::requeue(PLUGIN_RECHECK);
            Some(
                ctx.plugins
                    .ready(&ctx.client, &class.spec.provisioner)
                    .await,
            )
        }
        _ => None,
    };
    let (accepted, reason, message) = match (validate(&class), &plugin) {
        (Err(message), _) => (false, reasons::INVALID_PARAMETERS, message),
        (Ok(()), Some(Err(failure))) => {
            (false, reasons::PROVISIONER_NOT_READY, failure.to_string())
        }
        (Ok(()), Some(Ok((connection, identity)))) => (
            true,
            reasons::ACCEPTED,
            format!(
                "parameters are valid; plugin {} {} at {} is ready",
                identity.id, identity.version, connection.url
            ),
        ),
        (Ok(()), None) => (true, reasons::ACCEPTED, "parameters are valid".to_string()),
    };
    set_condition(
        &mut status.conditions,
        types::ACCEPTED,
        accepted,
        reason,
        message,
        generation,
    );
    status.observed_generation = generation;
    write_class_status(&class, &ctx, &current, &status).await?;
    Ok(next)
}
