//! The table, row by row: each test names the rule it shows winning.

use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{BundlePhase, BundleStatus};
use gantry_rules::health_policy::EffectiveHealth;

use super::*;
use crate::status::{set_condition, status_with};

const NO_WAIT: EffectiveHealth = EffectiveHealth {
    wait: false,
    timeout: Duration::from_secs(300),
};
const WAIT: EffectiveHealth = EffectiveHealth {
    wait: true,
    timeout: Duration::from_secs(300),
};

fn installed() -> BundleStatus {
    status_with(&[
        (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
        (types::APPROVED, true, reasons::AUTOMATIC_APPROVAL),
        (types::INSTALLED, true, reasons::INSTALL_SUCCEEDED),
    ])
}

fn facts(health: EffectiveHealth) -> Facts<'static> {
    Facts {
        generation: Some(1),
        deleting: false,
        hold: None,
        health,
    }
}

/// The winning rule, and the phase, Ready and reason `summarize` writes.
fn outcome(status: &BundleStatus, facts: &Facts<'_>) -> (&'static str, BundlePhase, bool, String) {
    let (rule, _) = decide(status, facts, RULES);
    let mut written = status.clone();
    summarize(&mut written, facts);
    let ready = find(&written.conditions, types::READY).unwrap();
    (
        rule,
        written.phase.unwrap(),
        ready.status == "True",
        ready.reason.clone(),
    )
}

/// Asserts the [`outcome`] of `status`.
#[track_caller]
fn assert_outcome(
    status: &BundleStatus,
    facts: &Facts<'_>,
    expected: (&str, BundlePhase, bool, &str),
) {
    let (rule, phase, ready, reason) = outcome(status, facts);
    assert_eq!((rule, phase, ready, reason.as_str()), expected);
}

#[test]
fn every_rule_is_in_the_table_once_in_order() {
    let names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        [
            "deleting",
            "held",
            "failed step",
            "waiting",
            "health gate",
            "installed",
            "pending"
        ]
    );
}

#[test]
fn deleting_wins_over_everything() {
    let mut status = installed();
    let hold = Hold {
        reason: reasons::SUSPENDED,
        message: "suspended".into(),
        keep_ready: true,
        phase: None,
    };
    let deleting = Facts {
        deleting: true,
        hold: Some(&hold),
        ..facts(NO_WAIT)
    };
    assert_outcome(
        &status,
        &deleting,
        (
            "deleting",
            BundlePhase::Deleting,
            false,
            reasons::UNINSTALLING,
        ),
    );
    set_condition(
        &mut status.conditions,
        types::INSTALLED,
        false,
        reasons::UNINSTALL_FAILED,
        "cannot delete",
        Some(1),
    );
    assert_eq!(
        outcome(&status, &deleting).3,
        reasons::UNINSTALL_FAILED,
        "the uninstall's own failure is the reason"
    );
}

#[test]
fn a_suspended_bundle_keeps_ready_a_dependency_hold_does_not() {
    let status = installed();
    let suspended = Hold {
        reason: reasons::SUSPENDED,
        message: "suspended".into(),
        keep_ready: true,
        phase: None,
    };
    let held = Facts {
        hold: Some(&suspended),
        ..facts(NO_WAIT)
    };
    assert_outcome(
        &status,
        &held,
        ("held", BundlePhase::Installed, true, reasons::SUSPENDED),
    );
    // Suspended before it was ever installed: not Ready.
    let fresh = BundleStatus::default();
    assert!(!outcome(&fresh, &held).2);

    let waiting = Hold {
        reason: reasons::DEPENDENCY_NOT_READY,
        message: "db is not Ready".into(),
        keep_ready: false,
        phase: Some(BundlePhase::Pending),
    };
    let held = Facts {
        hold: Some(&waiting),
        ..facts(NO_WAIT)
    };
    assert_outcome(
        &status,
        &held,
        (
            "held",
            BundlePhase::Pending,
            false,
            reasons::DEPENDENCY_NOT_READY,
        ),
    );
}

#[test]
fn a_failed_step_wins_over_progress_and_names_its_reason() {
    let status = status_with(&[
        (types::UNPACKED, false, reasons::PULL_FAILED),
        (types::INSTALLED, false, reasons::INSTALLING),
    ]);
    assert_outcome(
        &status,
        &facts(NO_WAIT),
        (
            "failed step",
            BundlePhase::Failing,
            false,
            reasons::PULL_FAILED,
        ),
    );
}

#[test]
fn a_new_digest_failing_over_installed_content_is_update_failing() {
    let mut status = installed();
    set_condition(
        &mut status.conditions,
        types::UNPACKED,
        false,
        reasons::INVALID_BUNDLE,
        "too many objects",
        Some(2),
    );
    status.installed_image = Some("r.test/app@sha256:old".into());
    let mut written = status.clone();
    summarize(&mut written, &facts(NO_WAIT));
    assert_eq!(written.phase, Some(BundlePhase::UpdateFailing));
    let ready = find(&written.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, reasons::INVALID_BUNDLE);
    assert!(
        ready
            .message
            .ends_with("r.test/app@sha256:old stays installed"),
        "{}",
        ready.message
    );

    // A failure of the apply itself leaves nothing intact to speak of.
    set_condition(
        &mut status.conditions,
        types::INSTALLED,
        false,
        reasons::APPLY_FAILED,
        "",
        Some(2),
    );
    set_condition(
        &mut status.conditions,
        types::UNPACKED,
        true,
        reasons::UNPACK_SUCCEEDED,
        "",
        Some(2),
    );
    assert_eq!(outcome(&status, &facts(NO_WAIT)).1, BundlePhase::Failing);
}

#[test]
fn a_denial_is_its_own_phase() {
    let status = status_with(&[
        (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
        (types::APPROVED, false, reasons::DENIED),
    ]);
    assert_outcome(
        &status,
        &facts(NO_WAIT),
        ("failed step", BundlePhase::Denied, false, reasons::DENIED),
    );
}

#[test]
fn waiting_steps_have_their_phases() {
    for (conditions, phase) in [
        (
            vec![
                (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
                (types::APPROVED, false, reasons::AWAITING_APPROVAL),
            ],
            BundlePhase::AwaitingApproval,
        ),
        (
            vec![(types::UNPACKED, false, reasons::UNPACKING)],
            BundlePhase::Unpacking,
        ),
        (
            vec![
                (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
                (types::APPROVED, true, reasons::AUTOMATIC_APPROVAL),
                (types::INSTALLED, false, reasons::INSTALLING),
            ],
            BundlePhase::Installing,
        ),
    ] {
        let status = status_with(&conditions);
        let (rule, got, ready, _) = outcome(&status, &facts(WAIT));
        assert_eq!((rule, got, ready), ("waiting", phase, false));
    }
    // Steps not reached yet set no condition: nothing is waited for, the bundle is pending.
    let status = status_with(&[(types::UNPACKED, true, reasons::UNPACK_SUCCEEDED)]);
    assert_eq!(outcome(&status, &facts(WAIT)).0, "pending");
}

#[test]
fn the_health_gate_holds_ready_only_when_the_policy_waits() {
    let mut status = installed();
    // Not assessed yet.
    assert_outcome(
        &status,
        &facts(WAIT),
        (
            "health gate",
            BundlePhase::Installed,
            false,
            reasons::PROGRESSING,
        ),
    );
    assert_eq!(outcome(&status, &facts(NO_WAIT)).0, "installed");

    set_condition(
        &mut status.conditions,
        types::HEALTHY,
        false,
        reasons::HEALTH_CHECK_FAILED,
        "1 of 1 object not healthy",
        Some(1),
    );
    assert_outcome(
        &status,
        &facts(WAIT),
        (
            "health gate",
            BundlePhase::Failing,
            false,
            reasons::HEALTH_CHECK_FAILED,
        ),
    );
    assert!(outcome(&status, &facts(NO_WAIT)).2, "no wait: Ready");

    set_condition(
        &mut status.conditions,
        types::HEALTHY,
        true,
        reasons::HEALTHY,
        "1 object healthy",
        Some(1),
    );
    assert_outcome(
        &status,
        &facts(WAIT),
        (
            "installed",
            BundlePhase::Installed,
            true,
            reasons::INSTALL_SUCCEEDED,
        ),
    );
}

#[test]
fn nothing_started_is_pending() {
    assert_outcome(
        &BundleStatus::default(),
        &facts(WAIT),
        ("pending", BundlePhase::Pending, false, reasons::PENDING),
    );
}
