//! The Bundle reconcile driver: runs the steps in order (select the class, resolve, verify the
//! signature, unpack and store, plan, approve, apply and prune; uninstall on deletion), records
//! the outcome, writes the status once (through [`crate::status`]) and decides when to come
//! back.
//!
//! Each step (`steps/`, a file each) is a function that returns a [`Flow`]: `Continue` with
//! what the next step needs, or `Stop` with the [`Outcome`] of the pass (as Flux's
//! sub-reconcilers do). What the steps share lives beside the driver, not in it: the pass and
//! its rules of when to come back (`pass.rs`), their work on objects (`objects.rs`), the CRD
//! upgrade findings against the cluster (`crd_findings.rs`) and the bundle's own timing
//! (`timing.rs`).

pub mod class;
pub mod controllers;
mod crd_findings;
mod objects;
mod pass;
mod steps;
mod timing;

use pass::{Flow, Outcome, Pass, next_visit, reconcile_requested};
use steps::{
    apply, approve, dependencies, health, plan, repair, resolve, select, suspend, uninstall,
    unpack, verify,
};

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_api::{Bundle, ProvisionerClass};
use gantry_rules::duration::GoDuration;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::cluster::apply::Observed;
use crate::cluster::identity::Applier;
use crate::error::{Failure, Result, Stall, Step, at};
use crate::source::render::{Configuration, configuration};
use crate::state::Context;
use crate::state::metrics::{ReasonLabels, ResultLabels};
use crate::status::{self, remove_condition, summarize};
use gantry_api::conditions::types;
use gantry_rules::allowed_images;
use gantry_rules::class_selection::ProvisionerKind;

/// How soon a pass that found the bundle store behind the provisioner's last write looks again.
const STORE_CATCH_UP: Duration = Duration::from_millis(100);

/// Unwraps a step's [`Flow`]: its value, or the end of the pass; a failure is tagged with
/// the step.
macro_rules! proceed {
    ($step:expr, $result:expr) => {
        match $result.map_err(at($step))? {
            Flow::Continue(value) => value,
            Flow::Stop(outcome) => return Ok(outcome),
        }
    };
}

/// Entry point for kube-runtime: runs the steps, records the outcome in status, and decides
/// when to come back. Failures are handled here (backoff per bundle), so this returns `Err`
/// only when the status itself cannot be written. The duration is recorded on every path.
#[tracing::instrument(
    name = "reconcile_bundle",
    skip_all,
    fields(bundle = %bundle.name_any(), digest = tracing::field::Empty)
)]
pub async fn reconcile(bundle: Arc<Bundle>, ctx: Arc<Context>) -> Result<Action> {
    tracing::debug!(version = ?bundle.metadata.resource_version, "pass begins");
    if ctx.shard.is_some() {
        // A replica whose shard Lease is not current does nothing: its bundles may be another
        // replica's by now. Its controllers restart once the Lease is renewed.
        if !ctx.fence.is_open() {
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }
    // With sharding, only a bundle of a slot this replica serves, in a turn of the shard's
    // share of the reconcile concurrency; the pass holds its slot, which is not reported let go
    // until the pass has ended.
    let _pass = match &ctx.slots {
        Some(slots) => {
            let turn = slots.turn().await;
            match slots.enter(&bundle) {
                Some(pass) => Some((turn, pass)),
                None => return Ok(Action::await_change()),
            }
        }
        None => None,
    };
    let started = Instant::now();
    let result = reconcile_pass(&bundle, &ctx).await;
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_pass(bundle: &Bundle, ctx: &Context) -> Result<Action> {
    let name = bundle.name_any();
    let deleting = bundle.metadata.deletion_timestamp.is_some();
    let fingerprint = fingerprint(bundle, ctx);
    // A changed source of the configuration may be what a failure waited for.
    if ctx.drift.take_reconfigured(&name) {
        ctx.backoff.success(&name);
    }
    if let Some(wait) = ctx.backoff.pending(&name, fingerprint) {
        // New content or spec held back waits out its failure; drift of what is installed is
        // repaired meanwhile, as promptly as ever.
        if !deleting
            && !bundle.spec.suspend
            && ctx.held_updates.is_held(&name)
            && ctx.drift.take_dirty(&name)
        {
            repair_between_attempts(bundle, ctx).await;
        }
        return Ok(Action::requeue(wait));
    }
    // A copy older than the provisioner's own last write would redo what that write recorded
    // as done. The watch delivers the write within moments; it wakes nothing (the provisioner's
    // own writes do not trigger passes), so look again shortly.
    if ctx
        .written
        .is_behind(&name, bundle.metadata.resource_version.as_deref())
    {
        return Ok(Action::requeue(STORE_CATCH_UP));
    }
    let mut pass = Pass::new(bundle, ctx);

    let outcome = if deleting {
        uninstall::uninstall(&mut pass)
            .await
            .map_err(at(Step::Uninstall))
    } else {
        install(&mut pass).await
    };
    let count = |result: &'static str| {
        ctx.metrics
            .reconciles
            .get_or_create(&ResultLabels { result })
            .inc()
    };
    if !matches!(&outcome, Err(failure) if failure.error.stall() == Some(Stall::Access)) {
        ctx.forbidden.clear(&name);
    }
    let action = match outcome {
        Ok(Outcome::Untouched) => {
            count("untouched");
            return Ok(Action::await_change());
        }
        Ok(Outcome::Gone) => {
            ctx.backoff.success(&name);
            count("deleted");
            return Ok(Action::await_change());
        }
        Ok(Outcome::Done(action)) => {
            ctx.backoff.success(&name);
            count("success");
            remove_condition(&mut pass.status.conditions, types::STALLED);
            action
        }
        Ok(Outcome::Stalled(action)) => {
            ctx.backoff.success(&name);
            count("stalled");
            action
        }
        Err(failure) => {
            count("failure");
            record_failure(&mut pass, fingerprint, &failure)
        }
    };

    let mut status = std::mem::take(&mut pass.status);
    if !deleting {
        status.observed_generation = pass.generation;
        status.last_handled_reconcile_at = reconcile_requested(bundle).map(str::to_string);
    }
    summarize(&mut status, &pass.facts());
    status::write_bundle_status(bundle, ctx, &pass.written, &status).await?;
    Ok(action)
}

/// Reports a failure on the condition of its step, and schedules the retry: with backoff
/// when a retry can help; otherwise the bundle is `Stalled` and waits for what must change.
fn record_failure(pass: &mut Pass<'_>, fingerprint: u64, failure: &Failure) -> Action {
    let ctx = pass.ctx;
    // The status now reports this failure: the next pass must be a whole one, which reports
    // what it finds, not the shortcut for a bundle unchanged since its last full check (that
    // writes nothing, and would leave the failure in place until the next resync).
    ctx.checked.forget(&pass.name);
    let (type_, reason) = failure.condition();
    ctx.metrics
        .failures
        .get_or_create(&ReasonLabels { reason })
        .inc();
    let Some(stall) = failure.error.stall() else {
        let ceiling = timing::retry_ceiling(pass.bundle);
        let (attempt, delay) = ctx.backoff.failure(&pass.name, fingerprint, ceiling);
        tracing::warn!(reason, attempt, retry_in = %GoDuration(delay), "{failure}");
        pass.set_condition(
            type_,
            false,
            reason,
            format!(
                "{failure} (attempt {attempt}, next retry in {:.1}s)",
                delay.as_secs_f64()
            ),
        );
        remove_condition(&mut pass.status.conditions, types::STALLED);
        return Action::requeue(delay);
    };
    // A change of the bundle or its class wakes it at once (the watches, and the backoff's
    // fingerprint); the visit below is for what is not watched.
    let (retry_in, recheck) = match stall {
        Stall::Spec => (ctx.settings.resync_interval, String::new()),
        Stall::Digest | Stall::Tags => (next_visit(pass.bundle, ctx), String::new()),
        Stall::Access => {
            // Woken by an RBAC change and still refused: the API server may not have applied
            // the change yet, so it is looked at again shortly, once.
            let woken = pass
                .identity
                .clone()
                .is_some_and(|identity| ctx.forbidden.stalled(&pass.name, identity));
            let cap = ctx.settings.backoff_cap;
            let recheck = format!(
                " (a change of RBAC that may concern it wakes it; otherwise it is checked again every {})",
                GoDuration(cap)
            );
            (
                if woken {
                    ctx.settings.backoff_base
                } else {
                    cap
                },
                recheck,
            )
        }
    };
    ctx.backoff.stall(&pass.name, fingerprint, retry_in);
    tracing::warn!(reason, stalled = stall.until(), "{failure}");
    pass.set_condition(type_, false, reason, failure.to_string());
    pass.set_condition(
        types::STALLED,
        true,
        reason,
        format!(
            "{failure}; no retry can fix this until {}{recheck}",
            stall.until()
        ),
    );
    Action::requeue(retry_in)
}

/// The steps of an install, in order. While new content or a new spec is held back before
/// anything of it is written (it failed, or awaits an approver), drift of the installed content
/// is repaired.
async fn install(pass: &mut Pass<'_>) -> Result<Outcome, Failure> {
    let class = proceed!(Step::Select, select::class(pass).await);
    proceed!(Step::Suspend, suspend::check(pass));
    proceed!(Step::Dependencies, dependencies::check(pass).await);
    // Before anything is fetched: whose permissions the objects will be applied with.
    let applier = Applier::of(
        pass.bundle,
        &class,
        &pass.ctx.settings.service_accounts,
        &pass.ctx.appliers,
    )
    .map_err(at(Step::Identity))?;
    pass.identity = Some(applier.account.clone());
    let updated = update(pass, &class, &applier).await;
    let ctx = pass.ctx;
    let held = match &updated {
        Err(_) => !pass.writing,
        Ok(_) => pass.awaiting_approval,
    };
    if !held {
        ctx.held_updates.forget(&pass.name);
        return updated;
    }
    ctx.held_updates.hold(&pass.name);
    let moved = ctx.drift.take_dirty(&pass.name);
    let due = ctx
        .held_updates
        .due(&pass.name, ctx.settings.resync_interval);
    if moved || due {
        repair_installed(pass, &class, &applier).await;
    }
    updated
}

/// Drift repair of the installed content ([`repair::installed_content`]). A failure of it is
/// logged: the pass reports the failure of the new content or spec.
async fn repair_installed(pass: &Pass<'_>, class: &ProvisionerClass, applier: &Applier) {
    match repair::installed_content(pass, class, applier).await {
        Ok(true) => pass.ctx.held_updates.repaired(&pass.name),
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(bundle = %pass.name, %error, "repairing drift of the installed content failed");
        }
    }
}

/// A drift mark while a held-back update waits out its failure's backoff: only the repair,
/// with the class and identity of a full pass; no status is written (the failure's stays).
async fn repair_between_attempts(bundle: &Bundle, ctx: &Context) {
    let mut pass = Pass::new(bundle, ctx);
    let Ok(Flow::Continue(class)) = select::class(&mut pass).await else {
        return;
    };
    let settings = &ctx.settings.service_accounts;
    if let Ok(applier) = Applier::of(bundle, &class, settings, &ctx.appliers) {
        repair_installed(&pass, &class, &applier).await;
    }
}

/// The steps of new content or spec, from the image to the health of what was applied.
async fn update(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    applier: &Applier,
) -> Result<Outcome, Failure> {
    // Before anything is fetched: whether the image is one, and may be used at all.
    resolve::check_reference(&pass.bundle.spec.image).map_err(at(Step::Resolve))?;
    allowed_images::check(pass.bundle, class).map_err(at(Step::AllowedImages))?;
    let resolved = match proceed!(Step::Resolve, resolve::resolve(pass, class).await) {
        resolve::Resolution::Resolved(resolved) => resolved,
        // Nothing to install, and no managed object moved since the last assessment (a change
        // would have woken a full pass through the drift watches): the verdict stands until
        // the health timeout passes, and nothing is read before. Then only the health of what
        // is installed is looked at again, without reading the content.
        resolve::Resolution::Unhealthy => {
            let now = k8s_openapi::jiff::Timestamp::now();
            let timeout = pass.health.timeout;
            if let health::Unchanged::Holds(wake) =
                health::unchanged(&pass.status.conditions, now, timeout)
            {
                return Ok(come_back(pass, wake));
            }
            // A deletion since would have woken a full pass (drift): objects of kinds without
            // status are current, and only the others are read.
            let observed = vec![Observed::default(); pass.status.inventory.len()];
            return Ok(assess_health(pass, applier, &observed).await);
        }
    };
    let resolved = verify::verify(pass, class, resolved)
        .await
        .map_err(at(Step::Verify))?;
    let configuration = configure(pass, class, applier)
        .await
        .map_err(at(Step::Unpack))?;
    let mut content = proceed!(
        Step::Unpack,
        unpack::unpack_and_store(pass, class, resolved, configuration.as_ref()).await
    );
    let plan = proceed!(Step::Plan, plan::plan(pass, &mut content, applier).await);
    proceed!(
        Step::Approve,
        approve::approve(pass, class, &content, &plan).await
    );
    let observed = proceed!(
        Step::Apply,
        apply::apply_and_prune(pass, class, &content, &plan, applier).await
    );
    Ok(assess_health(pass, applier, &observed).await)
}

/// The bundle's configuration for its class's provisioner, read with the bundle's identity;
/// its digest goes to `status.configDigest`, which an approval records.
async fn configure(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    applier: &Applier,
) -> Result<Option<Configuration>> {
    let provisioner = &class.spec.provisioner;
    let kind = pass
        .ctx
        .served()
        .kind(provisioner)
        .unwrap_or(ProvisionerKind::Plain);
    let limits = gantry_image::EffectiveLimits::from_api(class.spec.limits.as_ref());
    if !pass.bundle.spec.config_from.is_empty()
        && let Some(namespace) = pass.bundle.spec.install_namespace.as_deref()
    {
        let ctx = pass.ctx;
        ctx.drift
            .ensure_config_sources(applier, namespace, &ctx.config_sources);
    }
    let configuration =
        configuration(pass.bundle, kind, provisioner, &applier.client, &limits).await?;
    pass.status.config_digest = configuration.as_ref().map(|c| c.digest.clone());
    Ok(configuration)
}

/// The last step: the health of what is installed, and when to come back (the next visit, or
/// the end of the health timeout if sooner).
async fn assess_health(pass: &mut Pass<'_>, applier: &Applier, observed: &[Observed]) -> Outcome {
    let wake = health::check(pass, &applier.client, observed).await;
    come_back(pass, wake)
}

/// The end of a pass over installed content: back at the next visit, or at `wake` (the end of
/// the health timeout) if sooner.
fn come_back(pass: &Pass<'_>, wake: Option<Duration>) -> Outcome {
    let visit = next_visit(pass.bundle, pass.ctx);
    Outcome::Done(Action::requeue(wake.map_or(visit, |w| w.min(visit))))
}

/// What, when it changes, must let a bundle through its backoff: its spec, its approval, its
/// deletion, a request to reconcile, and its class (the named one, or the default classes).
fn fingerprint(bundle: &Bundle, ctx: &Context) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bundle.metadata.generation.hash(&mut hasher);
    reconcile_requested(bundle).hash(&mut hasher);
    bundle
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    if let Some(approval) = bundle.status.as_ref().and_then(|s| s.approval.as_ref()) {
        serde_json::to_string(approval)
            .unwrap_or_default()
            .hash(&mut hasher);
    }
    let relevant = |class: &ProvisionerClass| match &bundle.spec.provisioner_class_name {
        Some(name) => class.name_any() == *name,
        None => class
            .annotations()
            .get(gantry_api::DEFAULT_CLASS_ANNOTATION)
            .is_some_and(|v| v == "true"),
    };
    let mut classes: Vec<(String, Option<i64>)> = ctx
        .classes
        .state()
        .iter()
        .filter(|c| relevant(c))
        .map(|c| (c.name_any(), c.metadata.generation))
        .collect();
    classes.sort();
    classes.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests;
