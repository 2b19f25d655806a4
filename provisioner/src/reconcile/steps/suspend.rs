//! `spec.suspend`: a suspended bundle's pass stops with a [`Hold`], which the summary reports
//! on `Ready` over the other conditions, leaving them as they are.

use gantry_api::conditions::reasons;
use kube::runtime::controller::Action;

use crate::error::Result;
use crate::reconcile::pass::{Flow, Outcome, Pass};
use crate::status::Hold;

/// Stops the pass of a suspended bundle: nothing is read from the registry, applied, pruned or
/// repaired until `spec.suspend` is false again.
pub(crate) fn check(pass: &mut Pass<'_>) -> Result<Flow<()>> {
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
