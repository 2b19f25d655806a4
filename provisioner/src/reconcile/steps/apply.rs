//! Steps 6 and 7: apply the plan, then prune what the new content no longer has, and record
//! the inventory.

use std::collections::HashSet;

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    Bundle, CRD_UPGRADE_ALLOWED_ANNOTATION, DeletionPolicy, DriftMode, InstalledSpec,
    InventoryEntry, ProvisionerClass,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::unpack::Content;
use crate::cluster::apply::{ApplySettings, JobWaits, Observed, check, write_waves};
use crate::cluster::identity::Applier;
use crate::error::{Error, Result};
use crate::reconcile::crd_findings;
use crate::reconcile::objects::{
    count_and_watch, object_policies, remove_objects, without_ignored,
};
use crate::reconcile::pass::{Flow, Outcome, Pass, correction_forced, installed_fingerprint};
use crate::reconcile::timing;
use crate::state::Context;
use crate::status::{publish, record_history, refresh_history_approval, remove_condition};
use gantry_rules::conditions::{ConditionStatus, find, is_true};
use gantry_rules::object_policy::Ssa;
use gantry_rules::objects;
use gantry_rules::plan::Plan;

/// Applies, prunes, records the inventory and sets `Installed`. Continues with, per object of
/// the inventory, whether the API server said it is being deleted.
pub(crate) async fn apply_and_prune(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    content: &Content,
    plan: &Plan,
    applier: &Applier,
) -> Result<Flow<Vec<Observed>>> {
    let ctx = pass.ctx;
    // Before anything else, so that a value Gantry does not know writes nothing.
    let policies = object_policies(plan)?;
    // `Ignore` objects are neither applied nor recorded (so neither health-checked nor
    // uninstalled); the prune below leaves them alone too.
    let ignored: Vec<InventoryEntry> = plan
        .objects
        .iter()
        .zip(&policies)
        .filter(|(_, policy)| policy.ssa == Ssa::Ignore)
        .map(|(object, _)| object.inventory_entry())
        .collect();
    let (plan, policies) = without_ignored(plan, policies);
    let plan = plan.as_ref();
    // Objects live as desired are skipped only when this exact content (and spec) was
    // installed before: a new content or spec is written in full, so fields it dropped go away.
    let installed_before = find(&pass.status.conditions, types::INSTALLED).is_some_and(|c| {
        c.status == ConditionStatus::True && c.observed_generation == pass.generation
    });
    // Compared with what is installed, not with what this pass found: content unpacked by an
    // earlier pass (approved since, or interrupted by a restart) is new content too.
    let write_all = !installed_before
        || content.content_before != pass.status.content_digest
        || pass.status.installed_image.as_deref() != Some(content.resolved_image.as_str());
    check_install_namespace(pass, plan).await?;
    // Only new content (or spec) can change a CRD: a pass that repairs drift of what was
    // checked when it was installed reads no CRD here.
    if write_all {
        check_crd_upgrades(
            ctx,
            plan,
            accepted_digest(pass.bundle, &content.resolved_image),
        )
        .await?;
    }
    let planned: Vec<InventoryEntry> = plan.objects.iter().map(|o| o.inventory_entry()).collect();
    if write_all {
        // Shown with the first status write below, once the checks passed.
        pass.set_condition(
            types::INSTALLED,
            false,
            reasons::INSTALLING,
            format!("applying {}", objects(plan.objects.len())),
        );
    }
    let timeout = timing::apply_timeout(pass.bundle, &ctx.settings);
    let settings = ApplySettings {
        concurrency: ctx.settings.apply_concurrency,
        crd_timeout: ctx.settings.crd_timeout,
        write_all,
    };
    // Rendered content goes out wave by wave, each once the Jobs of the one before completed;
    // only new content or spec waits: a pass over what is installed does not wait again.
    let jobs = (write_all && pass.status.rendered.is_some()).then_some(JobWaits {
        timeout: pass.health.timeout,
    });
    let (name, identity) = (pass.name.clone(), applier.describe());
    let claimed: Vec<Option<String>> = planned
        .iter()
        .map(|entry| ctx.claims.claimant(entry, &name))
        .collect();
    // `spec.drift: Report`: a pass over what is installed reads and compares, and writes
    // nothing, unless new content or spec is applied or a forced reconcile asks for it.
    let report_only =
        pass.bundle.spec.drift == Some(DriftMode::Report) && !write_all && !correction_forced(pass);
    let mut drift: Option<(Vec<String>, usize)> = None;
    let applying = async {
        let checked = check(
            &applier.client,
            plan,
            &policies,
            &name,
            &claimed,
            &identity,
            &settings,
            &ctx.access,
        )
        .await?;
        // Only objects the identity may write are recorded, so that nothing refused is ever
        // pruned or uninstalled. The same write shows `Installing`.
        record_before_applying(pass, &planned).await?;
        if report_only {
            drift = Some(checked.drift(plan));
            return Ok(checked.left_as_is());
        }
        pass.writing = true;
        write_waves(
            &applier.client,
            &ctx.kinds,
            plan,
            &identity,
            settings,
            checked,
            jobs,
        )
        .await
    };
    let outcome = tokio::time::timeout(timeout, applying)
        .await
        .map_err(|_| Error::Apply {
            object: objects(plan.objects.len()),
            message: format!(
                "not done within {} (the bundle's spec.timeout, else --apply-timeout)",
                gantry_rules::duration::GoDuration(timeout)
            ),
        })??;
    count_and_watch(ctx, applier, &outcome, plan).await;
    // A Job of a wave is not complete: the pass ends here, and the next one (woken by the
    // Job's change through the drift watch, or looking again shortly) goes on from it.
    if let Some(waiting) = &outcome.waiting {
        pass.set_condition(
            types::INSTALLED,
            false,
            reasons::INSTALLING,
            format!(
                "{} of {} applied; {}",
                outcome.written + outcome.unchanged,
                objects(plan.objects.len()),
                waiting.message()
            ),
        );
        return Ok(Flow::Stop(Outcome::Done(Action::requeue(
            waiting.look_again(),
        ))));
    }

    report_drift(pass, drift).await;
    prune(pass, applier, &planned, &ignored).await?;
    pass.status.inventory = planned;
    let installed = content.resolved_image.clone();
    pass.set_condition(
        types::INSTALLED,
        true,
        reasons::INSTALL_SUCCEEDED,
        format!("{} of {installed} installed", objects(plan.objects.len())),
    );
    if pass.status.installed_image.as_deref() != Some(installed.as_str()) {
        record_history(&mut pass.status, &installed, Time(Timestamp::now()));
    } else {
        refresh_history_approval(&mut pass.status, &installed);
    }
    pass.status.installed_image = Some(installed);
    // What drift repair restores from while a later content or spec fails.
    pass.status.installed_content_digest = pass.status.content_digest.clone();
    pass.status.installed_spec = Some(InstalledSpec::of(&pass.bundle.spec));
    // On every full pass, not only when this pass unpacked new content: content unpacked by an
    // earlier pass (awaiting approval, or interrupted by a restart) and removals that failed
    // are cleaned up too. Until the cleanup succeeds, the install is not recorded as checked,
    // so the next visit tries again.
    let cleaned =
        remove_older_content(ctx, &pass.name, pass.status.content_digest.as_deref()).await;
    if cleaned
        && let Some(check) =
            installed_fingerprint(pass.bundle, class, &content.resolved_image, &pass.status)
    {
        ctx.checked.record(&pass.name, check);
    }
    Ok(Flow::Continue(outcome.observed))
}

/// The `Drifted` condition of a bundle with `spec.drift: Report`: what a reporting pass found
/// (`drift`: the lines and how many objects), or, after a pass that applied, nothing left. An
/// Event announces drift when it is first found. Without `Report`, no such condition.
async fn report_drift(pass: &mut Pass<'_>, drift: Option<(Vec<String>, usize)>) {
    if pass.bundle.spec.drift != Some(DriftMode::Report) {
        remove_condition(&mut pass.status.conditions, types::DRIFTED);
        return;
    }
    match drift {
        Some((lines, count)) if count > 0 => {
            let listed: String = lines.iter().map(|l| format!("\n- {l}")).collect();
            let more = if count > lines.len() {
                format!("\n- … and {} more", count - lines.len())
            } else {
                String::new()
            };
            let message = format!(
                "{} drifted, left as they are (spec.drift: Report; `kubectl bundle reconcile --force {}` corrects them):{listed}{more}",
                objects(count),
                pass.name
            );
            let announced = is_true(&pass.written.conditions, types::DRIFTED);
            pass.set_condition(
                types::DRIFTED,
                true,
                reasons::DRIFT_DETECTED,
                message.clone(),
            );
            if !announced {
                publish(
                    pass.ctx,
                    pass.bundle,
                    kube::runtime::events::EventType::Warning,
                    reasons::DRIFT_DETECTED,
                    &message,
                )
                .await;
            }
        }
        _ => pass.set_condition(
            types::DRIFTED,
            false,
            reasons::NO_DRIFT,
            "every live object holds what the bundle applied",
        ),
    }
}

/// Adds the objects this content has and the inventory lacks to the recorded inventory before
/// any is applied, and shows the progress so far. An apply cut short after writing them (a crash, a lost status write) would
/// otherwise leave objects no inventory names, which no later prune or uninstall would remove.
async fn record_before_applying(pass: &mut Pass<'_>, planned: &[InventoryEntry]) -> Result<()> {
    let recorded: HashSet<ObjectKey> = pass.status.inventory.iter().map(object_key).collect();
    let unrecorded: Vec<InventoryEntry> = planned
        .iter()
        .filter(|entry| !recorded.contains(&object_key(entry)))
        .cloned()
        .collect();
    pass.status.inventory.extend(unrecorded);
    // Written only when something changed: new entries, or `Installing`.
    pass.show_progress().await
}

/// Removes, in reverse order, the objects of the recorded inventory that `keep` no longer has,
/// except those the content still has as `Ignore` (`ignored`): Gantry never deletes them.
/// An object is the same whatever version names it: one that moved to another version of its
/// kind is kept.
async fn prune(
    pass: &Pass<'_>,
    applier: &Applier,
    keep: &[InventoryEntry],
    ignored: &[InventoryEntry],
) -> Result<()> {
    let keep: HashSet<ObjectKey> = keep.iter().chain(ignored).map(object_key).collect();
    let gone = pass
        .status
        .inventory
        .iter()
        .rev()
        .filter(|entry| !keep.contains(&object_key(entry)))
        .collect::<Vec<_>>();
    // Collected first: a filtering iterator held across the removals' awaits would make the
    // reconcile future not `Send` for all lifetimes.
    // A prune deletes: only `gantry.dev/prune: disabled` keeps an object the content dropped.
    remove_objects(pass, applier, gone, DeletionPolicy::Delete)
        .await
        .map_err(|(object, message)| Error::Prune { object, message })
}

/// What identifies an object on the API server: group, kind, namespace and name.
type ObjectKey<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

fn object_key(entry: &InventoryEntry) -> ObjectKey<'_> {
    (
        &entry.group,
        &entry.kind,
        entry.namespace.as_deref(),
        &entry.name,
    )
}

/// An install namespace that objects use must exist, unless the bundle creates it.
async fn check_install_namespace(pass: &Pass<'_>, plan: &Plan) -> Result<()> {
    let Some(namespace) = pass.bundle.spec.install_namespace.as_deref() else {
        return Ok(());
    };
    let used = plan
        .objects
        .iter()
        .any(|o| o.namespace.as_deref() == Some(namespace));
    if !used || plan.created_namespaces().any(|n| n == namespace) {
        return Ok(());
    }
    let namespaces: Api<Namespace> = Api::all(pass.ctx.client.clone());
    match namespaces.get_opt(namespace).await? {
        Some(_) => Ok(()),
        None => Err(Error::NamespaceNotFound(namespace.to_string())),
    }
}

/// The digest of `resolved` (`repo@sha256:...`) when the bundle's annotation
/// `gantry.dev/crd-upgrade-allowed` accepts its unsafe CRD changes.
fn accepted_digest<'a>(bundle: &Bundle, resolved: &'a str) -> Option<&'a str> {
    let digest = resolved.rsplit_once('@').map(|(_, d)| d)?;
    (bundle
        .annotations()
        .get(CRD_UPGRADE_ALLOWED_ANNOTATION)
        .map(String::as_str)
        == Some(digest))
    .then_some(digest)
}

/// Before anything is written: every CRD of the plan that exists live is compared with its new
/// content ([`crd_findings::findings`]), and unsafe changes refuse the whole apply. A CRD annotated
/// `gantry.dev/crd-upgrade: unsafe-allowed`, or every CRD when the bundle accepted this
/// `digest` (`gantry.dev/crd-upgrade-allowed`), is applied anyway; its findings are logged.
async fn check_crd_upgrades(ctx: &Context, plan: &Plan, accepted: Option<&str>) -> Result<()> {
    let (mut refused, mut findings) = (Vec::new(), Vec::new());
    for crd in crd_findings::findings(ctx, plan).await? {
        if crd.allowed_by_crd {
            tracing::warn!(crd = %crd.name, findings = %crd.findings.join("; "), "unsafe CRD change applied: the CRD allows it");
            continue;
        }
        if let Some(digest) = accepted {
            tracing::warn!(crd = %crd.name, %digest, findings = %crd.findings.join("; "), "unsafe CRD change applied: the bundle accepts it for this digest");
            continue;
        }
        refused.push(crd.name);
        findings.extend(crd.findings);
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Error::UnsafeCrdUpgrade {
            crds: refused,
            findings,
        })
    }
}

/// Once content is installed, the tarballs of any other content are of no use: remove them.
/// A failure here only costs space, so it is logged, not reported on the bundle; returns
/// whether nothing but the current content is left.
async fn remove_older_content(ctx: &Context, bundle: &str, current: Option<&str>) -> bool {
    let current = current.map(|d| d.trim_start_matches("sha256:"));
    let stored = match ctx.storage.list(bundle).await {
        Ok(stored) => stored,
        Err(error) => {
            tracing::warn!(%bundle, %error, "listing stored content failed; older tarballs stay");
            return false;
        }
    };
    let mut cleaned = true;
    for hex in stored.iter().filter(|hex| Some(hex.as_str()) != current) {
        if let Err(error) = ctx.storage.delete(bundle, hex).await {
            tracing::warn!(%bundle, digest = %hex, %error, "removing older content failed");
            cleaned = false;
        }
    }
    cleaned
}
