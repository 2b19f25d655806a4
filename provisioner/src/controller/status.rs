//! Conditions, and the summary (`Ready`, `phase`) derived from them in one place.

use gantry_api::conditions::{reasons, types};
use gantry_api::{BundlePhase, BundleStatus, Condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Sets condition `type_`, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let message = message.into();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = now();
        }
        existing.status = status;
        existing.reason = reason.to_string();
        existing.message = message;
        existing.observed_generation = generation;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: now(),
    });
}

/// Removes condition `type_`.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// Finds condition `type_`.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    condition(conditions, type_).is_some_and(|c| c.status == "True")
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// Derives `Ready` and `phase` from the other conditions; the only place that does.
pub fn summarize(status: &mut BundleStatus, generation: Option<i64>) {
    let conditions = &status.conditions;
    let failing = [types::UNPACKED, types::APPROVED, types::INSTALLED]
        .into_iter()
        .filter_map(|t| condition(conditions, t))
        .find(|c| c.status == "False" && !is_progress_reason(&c.reason))
        .cloned();
    let waiting = [types::UNPACKED, types::APPROVED, types::INSTALLED]
        .into_iter()
        .filter_map(|t| condition(conditions, t))
        .find(|c| c.status != "True")
        .cloned();

    let (phase, ready, reason, message) = if let Some(c) = &failing {
        let phase = if c.reason == reasons::DENIED {
            BundlePhase::Denied
        } else {
            BundlePhase::Failing
        };
        (phase, false, c.reason.clone(), c.message.clone())
    } else if is_true(conditions, types::INSTALLED)
        && is_true(conditions, types::APPROVED)
        && is_true(conditions, types::UNPACKED)
    {
        (
            BundlePhase::Installed,
            true,
            reasons::INSTALL_SUCCEEDED.to_string(),
            condition(conditions, types::INSTALLED)
                .map(|c| c.message.clone())
                .unwrap_or_default(),
        )
    } else if let Some(c) = &waiting {
        let phase = match c.reason.as_str() {
            reasons::AWAITING_APPROVAL => BundlePhase::AwaitingApproval,
            reasons::UNPACKING => BundlePhase::Unpacking,
            reasons::INSTALLING => BundlePhase::Installing,
            _ => BundlePhase::Pending,
        };
        (phase, false, c.reason.clone(), c.message.clone())
    } else {
        (
            BundlePhase::Pending,
            false,
            reasons::PENDING.to_string(),
            "work on the bundle has not started".to_string(),
        )
    };
    status.phase = Some(phase);
    set_condition(
        &mut status.conditions,
        types::READY,
        ready,
        &reason,
        message,
        generation,
    );
}

/// Reasons that say "in progress" or "waiting", not "failed".
fn is_progress_reason(reason: &str) -> bool {
    matches!(
        reason,
        reasons::UNPACKING | reasons::AWAITING_APPROVAL | reasons::INSTALLING | reasons::PENDING
    )
}

/// Whether two statuses differ in what the controller writes (everything but `approval`,
/// and condition times, which only move when a status flips).
pub fn differs(current: &BundleStatus, desired: &BundleStatus) -> bool {
    let strip = |s: &BundleStatus| {
        let mut s = s.clone();
        s.approval = None;
        s.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(current) != strip(desired)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with(conditions: &[(&str, bool, &str)]) -> BundleStatus {
        let mut status = BundleStatus::default();
        for (t, s, r) in conditions {
            set_condition(&mut status.conditions, t, *s, r, "", Some(1));
        }
        status
    }

    #[test]
    fn all_true_is_installed_and_ready() {
        let mut status = status_with(&[
            (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
            (types::APPROVED, true, reasons::AUTOMATIC_APPROVAL),
            (types::INSTALLED, true, reasons::INSTALL_SUCCEEDED),
        ]);
        summarize(&mut status, Some(1));
        assert_eq!(status.phase, Some(BundlePhase::Installed));
        assert_eq!(
            condition(&status.conditions, types::READY).unwrap().status,
            "True"
        );
    }

    #[test]
    fn a_failure_wins_over_progress_and_names_its_reason() {
        let mut status = status_with(&[
            (types::UNPACKED, false, reasons::PULL_FAILED),
            (types::INSTALLED, false, reasons::INSTALLING),
        ]);
        summarize(&mut status, Some(1));
        assert_eq!(status.phase, Some(BundlePhase::Failing));
        let ready = condition(&status.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reasons::PULL_FAILED)
        );
    }

    #[test]
    fn waiting_for_approval_and_denial_have_their_phases() {
        let mut status = status_with(&[
            (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
            (types::APPROVED, false, reasons::AWAITING_APPROVAL),
        ]);
        summarize(&mut status, Some(1));
        assert_eq!(status.phase, Some(BundlePhase::AwaitingApproval));
        set_condition(
            &mut status.conditions,
            types::APPROVED,
            false,
            reasons::DENIED,
            "no",
            Some(1),
        );
        summarize(&mut status, Some(1));
        assert_eq!(status.phase, Some(BundlePhase::Denied));
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, "X", false, "A", "", None);
        conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        set_condition(&mut conditions, "X", false, "B", "other", None);
        assert_eq!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        set_condition(&mut conditions, "X", true, "C", "", None);
        assert_ne!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
    }

    #[test]
    fn differs_ignores_approval_and_times() {
        let a = status_with(&[(types::UNPACKED, true, reasons::UNPACK_SUCCEEDED)]);
        let mut b = a.clone();
        b.conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        b.approval = Some(gantry_api::Approval {
            decision: gantry_api::ApprovalDecision::Approved,
            digest: "sha256:00".into(),
            reason: None,
            time: None,
        });
        assert!(!differs(&a, &b));
        b.phase = Some(BundlePhase::Installed);
        assert!(differs(&a, &b));
    }
}
