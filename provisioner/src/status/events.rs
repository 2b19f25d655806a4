//! Events on bundles: the outcome of a change of `Ready`, and what steps announce.

use gantry_api::conditions::{ReasonKind, reasons, types};
use gantry_api::{Bundle, BundleStatus};
use gantry_rules::conditions::{ConditionStatus, find};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::message::without_retry_note;
use crate::state::Context;

/// The Event a change of `Ready` (its status or reason) deserves: `Warning` for a failure.
/// The steps of a pass under way (`Unpacking`, `Installing`) are shown in status only: their
/// outcome is the Event.
pub(super) fn ready_transition(
    current: &BundleStatus,
    desired: &BundleStatus,
) -> Option<(EventType, String, String)> {
    let before = find(&current.conditions, types::READY).map(|c| (&c.status, &c.reason));
    let after = find(&desired.conditions, types::READY)?;
    if [reasons::UNPACKING, reasons::INSTALLING].contains(&after.reason.as_str()) {
        return None;
    }
    if before == Some((&after.status, &after.reason)) {
        return None;
    }
    let type_ = if after.status != ConditionStatus::True
        && ReasonKind::of(&after.reason) == ReasonKind::Failure
    {
        EventType::Warning
    } else {
        EventType::Normal
    };
    Some((type_, after.reason.clone(), after.message.clone()))
}

/// Records an Event on the bundle; a failure to do so is only logged.
pub async fn publish(
    ctx: &Context,
    bundle: &Bundle,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        // The same failure retried is one Event counted again, not one per attempt.
        note: Some(without_retry_note(message).chars().take(1024).collect()),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &bundle.object_ref(&())).await {
        tracing::debug!(bundle = %bundle.name_any(), %error, "publishing an event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::status::{Facts, status_with, summarize};

    #[test]
    fn a_change_of_ready_is_an_event_warning_only_for_failures() {
        let mut before = BundleStatus::default();
        summarize(&mut before, &Facts::default());
        let mut installing = status_with(&[(types::INSTALLED, false, reasons::INSTALLING)]);
        summarize(&mut installing, &Facts::default());
        assert!(
            ready_transition(&before, &installing).is_none(),
            "a step under way is no Event"
        );
        let mut installed = status_with(&[
            (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
            (types::APPROVED, true, reasons::AUTOMATIC_APPROVAL),
            (types::INSTALLED, true, reasons::INSTALL_SUCCEEDED),
        ]);
        summarize(&mut installed, &Facts::default());
        let (type_, reason, _) = ready_transition(&installing, &installed).unwrap();
        assert_eq!(
            (type_, reason.as_str()),
            (EventType::Normal, reasons::INSTALL_SUCCEEDED)
        );

        let mut failing = status_with(&[(types::INSTALLED, false, reasons::CONFLICT)]);
        summarize(&mut failing, &Facts::default());
        let (type_, reason, _) = ready_transition(&installing, &failing).unwrap();
        assert_eq!(
            (type_, reason.as_str()),
            (EventType::Warning, reasons::CONFLICT)
        );
        assert!(
            ready_transition(&failing, &failing).is_none(),
            "no change, no Event"
        );
    }
}
