//! The pass the steps share: what a step tells the driver ([`Flow`], [`Outcome`]), the
//! [`Pass`] itself with the status it builds, and the rules of when to come back.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use gantry_api::conditions::types;
use gantry_api::{Bundle, BundleStatus, ProvisionerClass};
use gantry_rules::conditions::{ConditionStatus, find, is_true};
use gantry_rules::health_policy::EffectiveHealth;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::timing;
use crate::error::Result;
use crate::source::registry::is_digest_reference;
use crate::state::Context;
use crate::state::forbidden::Identity;
use crate::status::{self, Facts, Hold, set_condition};

/// What a step tells the driver.
pub(crate) enum Flow<T> {
    /// Go on with the next step, which needs this.
    Continue(T),
    /// The pass ends here.
    Stop(Outcome),
}

/// How a pass ended (failures are `Err`).
pub(crate) enum Outcome {
    /// Not ours: nothing was read or written.
    Untouched,
    /// Uninstalled; the finalizer is gone.
    Gone,
    /// Finished, or waiting for a person; come back as the action says.
    Done(Action),
    /// Waiting for a change no retry brings (a denied digest): the step set `Stalled`.
    Stalled(Action),
}

/// One pass over one bundle: what the steps read, and the status they build.
pub(crate) struct Pass<'a> {
    pub bundle: &'a Bundle,
    pub ctx: &'a Context,
    pub name: String,
    pub generation: Option<i64>,
    /// The status being built.
    pub status: BundleStatus,
    /// What the API server holds: progress writes update it.
    pub written: BundleStatus,
    /// What held the bundle back (suspended, waiting for dependencies): reported on `Ready`.
    pub hold: Option<Hold>,
    /// The health policy of the bundle and its class (the bundle's alone until the class is
    /// selected): whether `Ready` waits for `Healthy`.
    pub health: EffectiveHealth,
    /// The CEL health rules of the bundle and its class (`healthCheckExprs`), once the class
    /// is selected.
    pub health_check_exprs: Vec<gantry_api::HealthCheckExpr>,
    /// Whom the objects are applied as, once chosen.
    pub identity: Option<Identity>,
    /// New content or spec awaits an approver (or was denied): nothing of it is written.
    pub awaiting_approval: bool,
    /// The apply began writing: a failure from here on may have left part of it applied.
    pub writing: bool,
}

impl<'a> Pass<'a> {
    /// A pass over `bundle`, starting from the status the API server holds.
    pub(crate) fn new(bundle: &'a Bundle, ctx: &'a Context) -> Self {
        let current = bundle.status.clone().unwrap_or_default();
        Pass {
            bundle,
            ctx,
            name: bundle.name_any(),
            generation: bundle.metadata.generation,
            status: current.clone(),
            written: current,
            hold: None,
            health: EffectiveHealth::of(None, bundle.spec.health.as_ref()),
            health_check_exprs: bundle.spec.health_check_exprs.clone(),
            identity: None,
            awaiting_approval: false,
            writing: false,
        }
    }
}

impl Pass<'_> {
    /// Sets a condition of the status being built, at the bundle's generation.
    pub(crate) fn set_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        set_condition(
            &mut self.status.conditions,
            type_,
            ok,
            reason,
            message,
            self.generation,
        );
    }

    /// Shows work in progress (`Unpacking`, `Installing`) before a long step.
    pub(crate) async fn show_progress(&mut self) -> Result<()> {
        let mut written = std::mem::take(&mut self.written);
        let shown = status::show_progress(
            self.bundle,
            self.ctx,
            &self.status,
            &self.facts(),
            &mut written,
        )
        .await;
        self.written = written;
        shown
    }

    /// What the summary needs besides the conditions.
    pub(crate) fn facts(&self) -> Facts<'_> {
        Facts {
            generation: self.generation,
            deleting: self.bundle.metadata.deletion_timestamp.is_some(),
            hold: self.hold.as_ref(),
            health: self.health,
        }
    }
}

/// The value of the annotation `gantry.dev/reconcile-requested-at`, if any.
pub(crate) fn reconcile_requested(bundle: &Bundle) -> Option<&str> {
    bundle
        .annotations()
        .get(gantry_api::RECONCILE_REQUESTED_ANNOTATION)
        .map(String::as_str)
}

/// Whether this pass handles a `kubectl bundle reconcile --force` request: one to reconcile
/// that no pass handled yet, which the force annotation names. It corrects drift even with
/// `spec.drift: Report`.
pub(crate) fn correction_forced(pass: &Pass<'_>) -> bool {
    reconcile_pending(pass)
        && pass
            .bundle
            .annotations()
            .get(gantry_api::RECONCILE_FORCE_ANNOTATION)
            .map(String::as_str)
            == reconcile_requested(pass.bundle)
}

/// Whether the bundle carries a request to reconcile that no pass handled yet.
pub(crate) fn reconcile_pending(pass: &Pass<'_>) -> bool {
    reconcile_requested(pass.bundle).is_some_and(|requested| {
        pass.status.last_handled_reconcile_at.as_deref() != Some(requested)
    })
}

/// When to come back without a trigger: for tags, to resolve again (the bundle's
/// `spec.interval`, else `--resolve-interval`); for all, to check drift.
pub(crate) fn next_visit(bundle: &Bundle, ctx: &Context) -> Duration {
    let interval = if is_digest_reference(&bundle.spec.image) {
        ctx.settings.resync_interval
    } else {
        timing::resolve_interval(bundle, &ctx.settings).min(ctx.settings.resync_interval)
    };
    interval.mul_f64(rand::random_range(0.9..1.1))
}

/// What an installed bundle looked like: `None` unless it is installed at its generation with
/// `resolved_image`. Equal fingerprints mean a new reconcile would find nothing to change.
pub(crate) fn installed_fingerprint(
    bundle: &Bundle,
    class: &ProvisionerClass,
    resolved_image: &str,
    status: &BundleStatus,
) -> Option<u64> {
    let generation = bundle.metadata.generation;
    let installed = find(&status.conditions, types::INSTALLED)
        .is_some_and(|c| c.status == ConditionStatus::True && c.observed_generation == generation);
    let approved = is_true(&status.conditions, types::APPROVED);
    if !installed || !approved || status.resolved_image.as_deref() != Some(resolved_image) {
        return None;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    generation.hash(&mut hasher);
    resolved_image.hash(&mut hasher);
    status.content_digest.hash(&mut hasher);
    class.name_any().hash(&mut hasher);
    class.metadata.generation.hash(&mut hasher);
    serde_json::to_string(&status.approval)
        .unwrap_or_default()
        .hash(&mut hasher);
    Some(hasher.finish())
}
