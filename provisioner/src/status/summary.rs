//! The one place that decides `Ready` and `phase`: an ordered table of rules, the first that
//! applies wins. Every status the provisioner writes (a pass's end, progress shown before a
//! long step) is summarised here, from the step conditions and the facts of the pass.
//!
//! | rule | when | Ready | phase |
//! |---|---|---|---|
//! | deleting | the bundle is being deleted | False | Deleting |
//! | held | suspended, or waiting for dependencies | kept if suspended, else False | the hold's, else the rules below |
//! | failed step | Unpacked, Approved or Installed is False with a failure reason | False | Denied, UpdateFailing or Failing |
//! | waiting | a step condition is not True (unpacking, approval, installing) | False | Unpacking, AwaitingApproval, Installing, Pending |
//! | health gate | installed, the health policy waits and `Healthy` is not True | False | Failing if the check failed, else Installed |
//! | installed | every step condition is True | True | Installed |
//! | pending | nothing has started | False | Pending |
//!
//! Which reason is a success, a progress or a failure comes from the one table in
//! `gantry_api::conditions`.

use gantry_api::conditions::{ReasonKind, reasons, types};
use gantry_api::{BundlePhase, BundleStatus, Condition};
use gantry_rules::conditions::{ConditionStatus, find, is_true};
use gantry_rules::health_policy::EffectiveHealth;

use super::{set_condition, set_short_message};

/// What held a pass back before it did anything (suspended, waiting for dependencies).
#[derive(Clone, Debug)]
pub struct Hold {
    pub reason: &'static str,
    pub message: String,
    /// Whether `Ready` keeps the status the rules below give it (a suspended bundle that was
    /// Ready stays Ready); otherwise it is False.
    pub keep_ready: bool,
    /// The phase to report; the rules below decide when `None`.
    pub phase: Option<BundlePhase>,
}

/// The facts of a pass the step conditions do not hold.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts<'a> {
    pub generation: Option<i64>,
    pub deleting: bool,
    pub hold: Option<&'a Hold>,
    /// The health policy of the bundle and its class: whether `Ready` waits for `Healthy`.
    pub health: EffectiveHealth,
}

/// What the rules decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub phase: BundlePhase,
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

/// One row of the table: its name (for tests and readers) and when it applies.
struct Rule {
    name: &'static str,
    decide: fn(&[Condition], &BundleStatus, &Facts<'_>) -> Option<Summary>,
}

/// The table, in order of precedence.
const RULES: &[Rule] = &[
    Rule {
        name: "deleting",
        decide: deleting,
    },
    Rule {
        name: "held",
        decide: held,
    },
    Rule {
        name: "failed step",
        decide: failed_step,
    },
    Rule {
        name: "waiting",
        decide: waiting,
    },
    Rule {
        name: "health gate",
        decide: health_gate,
    },
    Rule {
        name: "installed",
        decide: installed,
    },
    Rule {
        name: "pending",
        decide: |_, _, _| Some(pending()),
    },
];

/// The step conditions, in the order of the steps.
const STEPS: [&str; 3] = [types::UNPACKED, types::APPROVED, types::INSTALLED];

/// Sets `Ready`, `phase` and the short message of `status` by the first rule that applies.
pub fn summarize(status: &mut BundleStatus, facts: &Facts<'_>) {
    let (_, summary) = decide(status, facts, RULES);
    status.phase = Some(summary.phase);
    set_condition(
        &mut status.conditions,
        types::READY,
        summary.ready,
        &summary.reason,
        summary.message,
        facts.generation,
    );
    set_short_message(status);
}

/// The first rule of `rules` that applies, and what it decides.
fn decide(
    status: &BundleStatus,
    facts: &Facts<'_>,
    rules: &'static [Rule],
) -> (&'static str, Summary) {
    rules
        .iter()
        .find_map(|rule| (rule.decide)(&status.conditions, status, facts).map(|s| (rule.name, s)))
        .unwrap_or_else(|| ("pending", pending()))
}

/// What the rules below `name` decide.
fn below(name: &str, status: &BundleStatus, facts: &Facts<'_>) -> Summary {
    let at = RULES
        .iter()
        .position(|r| r.name == name)
        .map_or(0, |i| i + 1);
    decide(status, facts, &RULES[at..]).1
}

fn deleting(conditions: &[Condition], _: &BundleStatus, facts: &Facts<'_>) -> Option<Summary> {
    if !facts.deleting {
        return None;
    }
    let (reason, message) = match find(conditions, types::INSTALLED) {
        Some(c) if c.status != ConditionStatus::True => (c.reason.clone(), c.message.clone()),
        _ => (
            reasons::UNINSTALLING.to_string(),
            "deletion requested: removing the bundle's objects".to_string(),
        ),
    };
    Some(Summary {
        phase: BundlePhase::Deleting,
        ready: false,
        reason,
        message,
    })
}

fn held(_: &[Condition], status: &BundleStatus, facts: &Facts<'_>) -> Option<Summary> {
    let hold = facts.hold?;
    let below = below("held", status, facts);
    Some(Summary {
        phase: hold.phase.unwrap_or(below.phase),
        ready: hold.keep_ready && below.ready,
        reason: hold.reason.to_string(),
        message: hold.message.clone(),
    })
}

fn failed_step(conditions: &[Condition], status: &BundleStatus, _: &Facts<'_>) -> Option<Summary> {
    let failed = STEPS
        .into_iter()
        .filter_map(|t| find(conditions, t))
        .find(|c| {
            c.status == ConditionStatus::False && ReasonKind::of(&c.reason) != ReasonKind::Progress
        })?;
    // New content that failed before it was applied leaves the previous content in place:
    // `UpdateFailing`, and `Ready` says what stays installed.
    let previous = status
        .installed_image
        .as_deref()
        .filter(|_| is_true(conditions, types::INSTALLED));
    let (phase, message) = match previous {
        _ if failed.reason == reasons::DENIED => (BundlePhase::Denied, failed.message.clone()),
        Some(previous) if failed.type_ != types::INSTALLED => (
            BundlePhase::UpdateFailing,
            format!("{}; {previous} stays installed", failed.message),
        ),
        _ => (BundlePhase::Failing, failed.message.clone()),
    };
    Some(Summary {
        phase,
        ready: false,
        reason: failed.reason.clone(),
        message,
    })
}

fn waiting(conditions: &[Condition], _: &BundleStatus, _: &Facts<'_>) -> Option<Summary> {
    if STEPS.into_iter().all(|t| is_true(conditions, t)) {
        return None;
    }
    let waiting = STEPS
        .into_iter()
        .filter_map(|t| find(conditions, t))
        .find(|c| c.status != ConditionStatus::True)?;
    let phase = match waiting.reason.as_str() {
        reasons::AWAITING_APPROVAL => BundlePhase::AwaitingApproval,
        reasons::UNPACKING => BundlePhase::Unpacking,
        reasons::INSTALLING => BundlePhase::Installing,
        _ => BundlePhase::Pending,
    };
    Some(Summary {
        phase,
        ready: false,
        reason: waiting.reason.clone(),
        message: waiting.message.clone(),
    })
}

fn health_gate(conditions: &[Condition], _: &BundleStatus, facts: &Facts<'_>) -> Option<Summary> {
    if !facts.health.wait || !STEPS.into_iter().all(|t| is_true(conditions, t)) {
        return None;
    }
    let (reason, message) = match find(conditions, types::HEALTHY) {
        Some(c) if c.status == ConditionStatus::True => return None,
        Some(c) => (c.reason.clone(), c.message.clone()),
        None => (
            reasons::PROGRESSING.to_string(),
            "the objects' health was not assessed yet".to_string(),
        ),
    };
    let phase = if reason == reasons::HEALTH_CHECK_FAILED {
        BundlePhase::Failing
    } else {
        BundlePhase::Installed
    };
    Some(Summary {
        phase,
        ready: false,
        reason,
        message,
    })
}

fn installed(conditions: &[Condition], _: &BundleStatus, _: &Facts<'_>) -> Option<Summary> {
    if !STEPS.into_iter().all(|t| is_true(conditions, t)) {
        return None;
    }
    Some(Summary {
        phase: BundlePhase::Installed,
        ready: true,
        reason: reasons::INSTALL_SUCCEEDED.to_string(),
        message: find(conditions, types::INSTALLED)
            .map(|c| c.message.clone())
            .unwrap_or_default(),
    })
}

fn pending() -> Summary {
    Summary {
        phase: BundlePhase::Pending,
        ready: false,
        reason: reasons::PENDING.to_string(),
        message: "work on the bundle has not started".to_string(),
    }
}

#[cfg(test)]
mod tests;
