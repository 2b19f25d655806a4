//! On deletion: remove the inventory's objects in reverse order, wait until they are gone
//! (finalizers, CRDs whose custom resources are cleaned up), then remove the stored content,
//! then the finalizer.

use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, UNINSTALL_FINALIZER};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::cluster::errors::is_not_found;
use crate::cluster::identity::Applier;
use crate::cluster::inventory::still_present;
use crate::error::{Error, Result};
use crate::policy::class_selection::{Selection, select};
use crate::policy::identity::service_account_for;
use crate::reconcile::{Outcome, Pass, remove_objects};
use crate::status::publish;

/// How often a bundle whose objects are still being deleted looks again.
const UNINSTALL_RECHECK: Duration = Duration::from_secs(2);

/// The inventory's objects that are still there, described with their finalizers.
async fn remaining(pass: &Pass<'_>, applier: &Applier) -> Result<Vec<String>> {
    let mut remaining = Vec::new();
    for entry in &pass.status.inventory {
        let present = still_present(&applier.client, &pass.ctx.kinds, entry, &pass.name)
            .await
            .map_err(|(object, message)| Error::Uninstall {
                object,
                message: format!("{message} (as {})", applier.describe()),
            })?;
        remaining.extend(present);
    }
    Ok(remaining)
}

pub(crate) async fn uninstall(pass: &mut Pass<'_>) -> Result<Outcome> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    if !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(Outcome::Gone);
    }
    let name = &pass.name.clone();
    // Nothing installed (a bundle refused before its first apply): no identity is needed.
    let remaining = if pass.status.inventory.is_empty() {
        Vec::new()
    } else {
        let applier = uninstall_applier(pass)?;
        remove_objects(pass, &applier, pass.status.inventory.iter().rev())
            .await
            .map_err(|(object, message)| Error::Uninstall { object, message })?;
        remaining(pass, &applier).await?
    };
    if !remaining.is_empty() {
        pass.set_condition(
            types::INSTALLED,
            false,
            reasons::UNINSTALLING,
            format!(
                "waiting for {} object(s) to be deleted: {}",
                remaining.len(),
                remaining.join(", ")
            ),
        );
        // The objects' watches wake the bundle when they go; the requeue is a safety net.
        return Ok(Outcome::Done(Action::requeue(UNINSTALL_RECHECK)));
    }
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
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.resolved.forget(name);
    ctx.checked.forget(name);
    ctx.written.forget(name);
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

/// Who removes the objects: the identity the bundle's class names now (as installs use it);
/// when the class is gone, the ServiceAccount recorded when the content was planned.
fn uninstall_applier(pass: &Pass<'_>) -> Result<Applier> {
    let ctx = pass.ctx;
    let account = match select(pass.bundle, &ctx.classes.state()) {
        Selection::Serve(class) => {
            service_account_for(pass.bundle, &class, &ctx.settings.service_accounts)?
        }
        Selection::NotOurs | Selection::Missing(_) => {
            let recorded = pass
                .status
                .requested_permissions
                .as_ref()
                .and_then(|p| p.service_account.clone())
                .or_else(|| ctx.settings.service_accounts.default.clone());
            if recorded.is_none() && ctx.settings.service_accounts.required {
                return Err(Error::ServiceAccountRequired {
                    class: pass
                        .bundle
                        .spec
                        .provisioner_class_name
                        .clone()
                        .unwrap_or_else(|| "(default)".into()),
                });
            }
            recorded
        }
    };
    Applier::as_account(account, &ctx.appliers)
}
