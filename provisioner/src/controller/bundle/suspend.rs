//! `spec.suspend`, and what holds a bundle back (suspension, dependencies): a [`Hold`] is
//! reported on `Ready` over the summary of the other conditions, which it leaves as they are.

use gantry_api::conditions::{reasons, types};
use gantry_api::{BundlePhase, BundleStatus};
use kube::runtime::controller::Action;

use super::{Flow, Outcome, Pass};
use crate::controller::error::Result;
use crate::controller::status::{condition, set_condition};

/// Why a pass stopped before doing anything, as `Ready` reports it.
pub(crate) struct Hold {
    pub reason: &'static str,
    pub message: String,
    /// Whether `Ready` keeps the status the summary gives it (a suspended bundle that was
    /// Ready stays Ready); otherwise it is False.
    pub keep_ready: bool,
    /// The phase to report; the summary's when `None`.
    pub phase: Option<BundlePhase>,
}

impl Hold {
    /// Sets `Ready` (and the phase) of a summarised status.
    pub fn report(&self, status: &mut BundleStatus, generation: Option<i64>) {
        let ready = self.keep_ready
            && condition(&status.conditions, types::READY).is_some_and(|c| c.status == "True");
        if let Some(phase) = self.phase {
            status.phase = Some(phase);
        }
        set_condition(
            &mut status.conditions,
            types::READY,
            ready,
            self.reason,
            self.message.clone(),
            generation,
        );
    }
}

/// Stops the pass of a suspended bundle: nothing is read from the registry, applied, pruned or
/// repaired until `spec.suspend` is false again.
pub(super) fn check(pass: &mut Pass<'_>) -> Result<Flow<()>> {
    if !pass.bundle.spec.suspend {
        return Ok(Flow::Continue(()));
    }
    pass.hold = Some(Hold {
        reason: reasons::SUSPENDED,
        message:
            "reconciliation is suspended (spec.suspend): nothing is applied, pruned or repaired"
                .to_string(),
        keep_ready: true,
        phase: None,
    });
    // A change of the bundle (resuming it) brings it back.
    Ok(Flow::Stop(Outcome::Done(Action::await_change())))
}
