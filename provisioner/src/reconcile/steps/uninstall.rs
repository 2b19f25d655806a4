//! On deletion: remove the inventory's objects in waves (custom resources, CRDs, the rest,
//! Namespaces; each in reverse apply order), each wave waited for until its objects are gone
//! (finalizers, CRDs whose custom resources are cleaned up) before the next is deleted, so an
//! operator still runs while its custom resources are finalized; then remove the stored
//! content, then the finalizer. `spec.deletionPolicy` decides what removing means: `Delete`
//! counts a terminating Namespace as gone, `WaitForTermination` waits until it is, and `Orphan`
//! deletes nothing and only takes the bundle's label off each object.

use std::time::Duration;

use crate::cluster::writes::own_patch;
use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, DeletionPolicy, InventoryEntry, UNINSTALL_FINALIZER};
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::cluster::errors::is_not_found;
use crate::cluster::identity::Applier;
use crate::cluster::inventory::{Wave, still_present, uninstall_waves};
use crate::error::{Error, Result};
use crate::reconcile::objects::remove_objects;
use crate::reconcile::pass::{Outcome, Pass};
use crate::reconcile::timing;
use crate::status::publish;
use gantry_rules::class_selection::{Selection, select};
use gantry_rules::identity::{ServiceAccountRefused, service_account_for};

/// How often a bundle whose objects are still being deleted looks again.
const UNINSTALL_RECHECK: Duration = Duration::from_secs(2);

/// How many of the objects still there a waiting message names; it counts them all.
const NAMED_LEFT: usize = 5;

/// `entries` that are still there, described with their finalizers.
async fn remaining(
    pass: &Pass<'_>,
    applier: &Applier,
    entries: &[InventoryEntry],
    policy: DeletionPolicy,
) -> Result<Vec<String>> {
    let mut remaining = Vec::new();
    for entry in entries {
        let present = still_present(&applier.client, &pass.ctx.kinds, entry, &pass.name, policy)
            .await
            .map_err(|(object, message)| Error::Uninstall {
                object,
                message: format!("{message} (as {})", applier.describe()),
            })?;
        remaining.extend(present);
    }
    Ok(remaining)
}

/// The wave an uninstall waits for, and what is left of it.
struct Waiting {
    wave: Wave,
    /// Whether a later wave waits for this one.
    before_more: bool,
    left: Vec<String>,
}

/// Deletes the waves in order, stopping at the first whose objects are not all gone (under
/// `policy`): returns that wave with what is left of it.
async fn remove_in_waves(
    pass: &Pass<'_>,
    applier: &Applier,
    policy: DeletionPolicy,
) -> Result<Option<Waiting>> {
    let waves = uninstall_waves(&pass.status.inventory);
    let count = waves.len();
    for (index, (wave, entries)) in waves.into_iter().enumerate() {
        remove_objects(pass, applier, entries.iter(), policy)
            .await
            .map_err(|(object, message)| Error::Uninstall { object, message })?;
        let left = remaining(pass, applier, &entries, policy).await?;
        if !left.is_empty() {
            return Ok(Some(Waiting {
                wave,
                before_more: index + 1 < count,
                left,
            }));
        }
    }
    Ok(None)
}

/// Takes every object of the inventory out of the bundle's hands, deleting none.
async fn orphan_all(pass: &Pass<'_>, applier: &Applier) -> Result<()> {
    remove_objects(
        pass,
        applier,
        pass.status.inventory.iter().rev(),
        DeletionPolicy::Orphan,
    )
    .await
    .map_err(|(object, message)| Error::Uninstall { object, message })
}

/// What a bundle waiting for `waiting` says: the wave, how many of its objects are left, and
/// the first few of them.
fn waiting_message(waiting: &Waiting) -> String {
    let left = &waiting.left;
    let mut named = left
        .iter()
        .take(NAMED_LEFT)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if left.len() > NAMED_LEFT {
        named.push_str(&format!(" and {} more", left.len() - NAMED_LEFT));
    }
    let next = if waiting.before_more {
        " before the next objects are"
    } else {
        ""
    };
    format!(
        "waiting for {} of the {} to be deleted{next}: {named}",
        left.len(),
        waiting.wave.describe()
    )
}

/// When a bundle still waiting `overdue` past its uninstall deadline looks again: after half
/// that long, from the usual recheck up to `ceiling`, so that an uninstall stuck for hours is
/// not read every 2 s. The objects' watches still wake it as soon as they go.
fn recheck_after(overdue: Option<Duration>, ceiling: Duration) -> Duration {
    match overdue {
        None => UNINSTALL_RECHECK,
        Some(overdue) => (overdue / 2).clamp(UNINSTALL_RECHECK, ceiling.max(UNINSTALL_RECHECK)),
    }
}

pub(crate) async fn uninstall(pass: &mut Pass<'_>) -> Result<Outcome> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    if !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(Outcome::Gone);
    }
    // Another installation's bundle is that installation's to remove (its finalizer has the
    // same name). A bundle whose class is gone is removed by whichever serves it now.
    if matches!(
        select(bundle, &ctx.classes.state(), &ctx.served()),
        Selection::NotOurs
    ) {
        return Ok(Outcome::Untouched);
    }
    let name = &pass.name.clone();
    let policy = bundle.spec.deletion_policy.unwrap_or_default();
    // Nothing installed (a bundle refused before its first apply): no identity is needed.
    let waiting = if pass.status.inventory.is_empty() {
        None
    } else {
        let applier = uninstall_applier(pass)?;
        match policy {
            DeletionPolicy::Orphan => {
                orphan_all(pass, &applier).await?;
                None
            }
            DeletionPolicy::Delete | DeletionPolicy::WaitForTermination => {
                remove_in_waves(pass, &applier, policy).await?
            }
        }
    };
    if let Some(waiting) = waiting {
        let deadline = timing::apply_timeout(bundle, &ctx.settings);
        let message = waiting_message(&waiting);
        let overdue = overdue(bundle, deadline);
        if overdue.is_some() {
            let needed = if waiting.wave == Wave::Namespaces {
                "the namespace controller must be running and able to delete what they hold"
            } else {
                "whatever removes their finalizers must be running"
            };
            // Still waiting: giving up would leave objects behind that nothing tracks.
            pass.set_condition(
                types::INSTALLED,
                false,
                reasons::UNINSTALL_FAILED,
                format!(
                    "not done within {} (the bundle's spec.timeout, else --apply-timeout), still {message}; {needed}",
                    gantry_rules::duration::GoDuration(deadline)
                ),
            );
        } else {
            pass.set_condition(types::INSTALLED, false, reasons::UNINSTALLING, message);
        }
        // The objects' watches wake the bundle when they go; the requeue is a safety net.
        let ceiling = timing::retry_ceiling(bundle).unwrap_or(ctx.settings.backoff_cap);
        return Ok(Outcome::Done(Action::requeue(recheck_after(
            overdue, ceiling,
        ))));
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
        .patch(name, &own_patch(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.resolved.forget(name);
    ctx.checked.forget(name);
    ctx.written.forget(name);
    let note = match policy {
        DeletionPolicy::Orphan => {
            "objects orphaned (spec.deletionPolicy: Orphan) and stored content removed"
        }
        DeletionPolicy::Delete | DeletionPolicy::WaitForTermination => {
            "objects and stored content removed"
        }
    };
    publish(ctx, bundle, EventType::Normal, reasons::UNINSTALLED, note).await;
    Ok(Outcome::Gone)
}

/// How long past `deadline` after its deletion was requested the bundle is, if it is.
fn overdue(bundle: &Bundle, deadline: Duration) -> Option<Duration> {
    let at = bundle.metadata.deletion_timestamp.as_ref()?;
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(at.0);
    if elapsed.as_secs() < 0 {
        return None;
    }
    elapsed.unsigned_abs().checked_sub(deadline)
}

/// Who removes the objects: the identity the bundle's class names now (as installs use it);
/// when the class is gone, the ServiceAccount recorded when the content was planned.
fn uninstall_applier(pass: &Pass<'_>) -> Result<Applier> {
    let ctx = pass.ctx;
    let account = match select(pass.bundle, &ctx.classes.state(), &ctx.served()) {
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
                return Err(ServiceAccountRefused::Required {
                    class: pass
                        .bundle
                        .spec
                        .provisioner_class_name
                        .clone()
                        .unwrap_or_else(|| "(default)".into()),
                }
                .into());
            }
            recorded
        }
    };
    Applier::as_account(account, &ctx.appliers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(wave: Wave, before_more: bool, left: usize) -> Waiting {
        Waiting {
            wave,
            before_more,
            left: (1..=left).map(|i| format!("ConfigMap app/c{i}")).collect(),
        }
    }

    #[test]
    fn a_waiting_message_names_the_first_objects_and_counts_them_all() {
        assert_eq!(
            waiting_message(&waiting(Wave::Others, true, 2)),
            "waiting for 2 of the workloads, RBAC and other objects to be deleted before the next objects are: ConfigMap app/c1, ConfigMap app/c2"
        );
        assert_eq!(
            waiting_message(&waiting(Wave::Others, false, 7)),
            "waiting for 7 of the workloads, RBAC and other objects to be deleted: ConfigMap app/c1, ConfigMap app/c2, ConfigMap app/c3, ConfigMap app/c4, ConfigMap app/c5 and 2 more"
        );
        assert!(
            waiting_message(&waiting(Wave::Namespaces, false, 5))
                .ends_with("to be deleted: ConfigMap app/c1, ConfigMap app/c2, ConfigMap app/c3, ConfigMap app/c4, ConfigMap app/c5")
        );
    }

    #[test]
    fn an_overdue_uninstall_looks_again_less_often_up_to_the_ceiling() {
        let ceiling = Duration::from_secs(300);
        let secs = Duration::from_secs;
        assert_eq!(recheck_after(None, ceiling), UNINSTALL_RECHECK);
        assert_eq!(recheck_after(Some(secs(0)), ceiling), UNINSTALL_RECHECK);
        assert_eq!(recheck_after(Some(secs(60)), ceiling), secs(30));
        assert_eq!(recheck_after(Some(secs(3600)), ceiling), ceiling);
        // A ceiling below the usual recheck does not make it more frequent.
        assert_eq!(
            recheck_after(Some(secs(3600)), Duration::from_secs(1)),
            UNINSTALL_RECHECK
        );
    }

    #[test]
    fn overdue_counts_from_the_deletion_request() {
        let mut bundle = Bundle::new("b", gantry_api::BundleSpec::default());
        let deadline = Duration::from_secs(60);
        assert_eq!(overdue(&bundle, deadline), None);
        let ago = |secs: i64| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now()
                    - k8s_openapi::jiff::SignedDuration::from_secs(secs),
            )
        };
        bundle.metadata.deletion_timestamp = Some(ago(10));
        assert_eq!(overdue(&bundle, deadline), None);
        bundle.metadata.deletion_timestamp = Some(ago(90));
        let past = overdue(&bundle, deadline).expect("overdue");
        assert!(
            past >= Duration::from_secs(30) && past < Duration::from_secs(35),
            "{past:?}"
        );
    }
}
