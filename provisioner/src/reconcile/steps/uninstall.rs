//! On deletion: remove the inventory's objects in waves (custom resources, CRDs, the rest,
//! Namespaces; each in reverse apply order), each wave waited for until its objects are gone
//! (finalizers, CRDs whose custom resources are cleaned up) before the next is deleted, so an
//! operator still runs while its custom resources are finalized; then remove the stored
//! content, then the finalizer.

use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, InventoryEntry, UNINSTALL_FINALIZER};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::cluster::errors::is_not_found;
use crate::cluster::identity::Applier;
use crate::cluster::inventory::{Wave, still_present, uninstall_waves};
use crate::error::{Error, Result};
use crate::policy::class_selection::{Selection, select};
use crate::policy::identity::service_account_for;
use crate::reconcile::{Outcome, Pass, remove_objects, timing};
use crate::status::publish;

/// How often a bundle whose objects are still being deleted looks again.
const UNINSTALL_RECHECK: Duration = Duration::from_secs(2);

/// `entries` that are still there, described with their finalizers.
async fn remaining(
    pass: &Pass<'_>,
    applier: &Applier,
    entries: &[InventoryEntry],
) -> Result<Vec<String>> {
    let mut remaining = Vec::new();
    for entry in entries {
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

/// Deletes the waves in order, stopping at the first whose objects are not all gone: returns
/// that wave with what is left of it.
async fn remove_in_waves(
    pass: &Pass<'_>,
    applier: &Applier,
) -> Result<Option<(Wave, Vec<String>)>> {
    for (wave, entries) in uninstall_waves(&pass.status.inventory) {
        remove_objects(pass, applier, entries.iter())
            .await
            .map_err(|(object, message)| Error::Uninstall { object, message })?;
        let left = remaining(pass, applier, &entries).await?;
        if !left.is_empty() {
            return Ok(Some((wave, left)));
        }
    }
    Ok(None)
}

pub(crate) async fn uninstall(pass: &mut Pass<'_>) -> Result<Outcome> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    if !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(Outcome::Gone);
    }
    let name = &pass.name.clone();
    // Nothing installed (a bundle refused before its first apply): no identity is needed.
    let waiting = if pass.status.inventory.is_empty() {
        None
    } else {
        let applier = uninstall_applier(pass)?;
        remove_in_waves(pass, &applier).await?
    };
    if let Some((wave, left)) = waiting {
        let deadline = timing::apply_timeout(bundle, &ctx.settings);
        let message = format!(
            "waiting for {} of the {} to be deleted before the next objects are: {}",
            left.len(),
            wave.describe(),
            left.join(", ")
        );
        if overdue(bundle, deadline) {
            // Still waiting: giving up would leave objects behind that nothing tracks.
            pass.set_condition(
                types::INSTALLED,
                false,
                reasons::UNINSTALL_FAILED,
                format!(
                    "not done within {} (the bundle's spec.timeout, else --apply-timeout), still {message}; whatever removes their finalizers must be running",
                    super::apply::humantime(deadline)
                ),
            );
        } else {
            pass.set_condition(types::INSTALLED, false, reasons::UNINSTALLING, message);
        }
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

/// Whether the bundle's deletion was requested more than `deadline` ago.
fn overdue(bundle: &Bundle, deadline: Duration) -> bool {
    bundle
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|at| {
            let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(at.0);
            elapsed.as_secs() >= 0 && elapsed.unsigned_abs() >= deadline
        })
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
