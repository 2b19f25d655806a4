//! `status.history`: the digests installed, newest first, with how each was approved.

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalDecision, BundleStatus, HISTORY_LIMIT, HistoryApproval, HistoryEntry};
use gantry_rules::conditions::find;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::source::registry::digest_of;

/// Puts `image`, just installed, first in `status.history` (how it was approved comes from
/// `Approved` and the approver's decision), dropping an older entry of the same digest and
/// the oldest beyond [`HISTORY_LIMIT`].
pub fn record_history(status: &mut BundleStatus, image: &str, installed_at: Time) {
    let Some(digest) = digest_of(image) else {
        return;
    };
    let mut entry = HistoryEntry {
        image: image.to_string(),
        digest: digest.to_string(),
        tag: status
            .resolved_tag
            .clone()
            .filter(|_| status.resolved_image.as_deref() == Some(image)),
        installed_at,
        approval: HistoryApproval::Automatic,
        approved_at: None,
        approval_reason: None,
        approved_by: None,
    };
    approve(&mut entry, status);
    status.history.retain(|e| e.digest != digest);
    status.history.insert(0, entry);
    status.history.truncate(HISTORY_LIMIT);
}

/// Brings the entry of `image`, installed already and applied again, up to date with how it
/// is approved now: a digest installed automatically and then approved by hand (its bundle
/// moved to a class with `approval: Manual`), or approved anew (its patches changed), says
/// who approved it. When it was installed stays.
pub fn refresh_history_approval(status: &mut BundleStatus, image: &str) {
    let mut history = std::mem::take(&mut status.history);
    if let Some(entry) = history.iter_mut().find(|e| e.image == image) {
        approve(entry, status);
    }
    status.history = history;
}

/// Sets how `entry` was approved from `Approved` and the approver's decision on its digest.
fn approve(entry: &mut HistoryEntry, status: &BundleStatus) {
    let automatic = find(&status.conditions, types::APPROVED)
        .is_some_and(|c| c.reason == reasons::AUTOMATIC_APPROVAL);
    let decision = status.approval.as_ref().filter(|a| {
        !automatic && a.digest == entry.digest && a.decision == ApprovalDecision::Approved
    });
    entry.approval = if automatic {
        HistoryApproval::Automatic
    } else {
        HistoryApproval::Manual
    };
    entry.approved_at = decision.and_then(|a| a.time.clone());
    entry.approval_reason = decision.and_then(|a| a.reason.clone());
    entry.approved_by = decision.and_then(|a| a.approved_by.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{set_condition, status_with};
    use gantry_api::Approval;
    use k8s_openapi::jiff::Timestamp;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn history_is_newest_first_bounded_and_without_repeats() {
        let mut status = status_with(&[(types::APPROVED, true, reasons::APPROVED)]);
        status.approval = Some(Approval {
            reason: Some("reviewed".into()),
            time: Some(Time(Timestamp::UNIX_EPOCH)),
            approved_by: Some("alice".into()),
            ..Approval::of(ApprovalDecision::Approved, &digest('a'))
        });
        let image = |c| format!("r.test/app@{}", digest(c));
        record_history(&mut status, &image('a'), Time(Timestamp::now()));
        let first = &status.history[0];
        assert_eq!(first.approval, HistoryApproval::Manual);
        assert_eq!(first.approval_reason.as_deref(), Some("reviewed"));
        assert_eq!(first.approved_by.as_deref(), Some("alice"));
        for c in "bcdefghijklm".chars() {
            record_history(&mut status, &image(c), Time(Timestamp::now()));
        }
        assert_eq!(status.history.len(), HISTORY_LIMIT);
        assert_eq!(status.history[0].digest, digest('m'));
        record_history(&mut status, &image('f'), Time(Timestamp::now()));
        assert_eq!(status.history[0].digest, digest('f'));
        assert_eq!(
            status
                .history
                .iter()
                .filter(|e| e.digest == digest('f'))
                .count(),
            1
        );
    }

    #[test]
    fn a_digest_approved_by_hand_after_its_install_says_so() {
        let image = format!("r.test/app@{}", digest('a'));
        let installed_at = Time(Timestamp::UNIX_EPOCH);
        let mut status = status_with(&[(types::APPROVED, true, reasons::AUTOMATIC_APPROVAL)]);
        record_history(&mut status, &image, installed_at.clone());
        assert_eq!(status.history[0].approval, HistoryApproval::Automatic);
        // Its bundle moved to a class with `approval: Manual`, and alice approved the digest.
        set_condition(
            &mut status.conditions,
            types::APPROVED,
            true,
            reasons::APPROVED,
            "",
            Some(1),
        );
        status.approval = Some(Approval {
            reason: Some("reviewed".into()),
            time: Some(Time(Timestamp::now())),
            approved_by: Some("alice".into()),
            ..Approval::of(ApprovalDecision::Approved, &digest('a'))
        });
        refresh_history_approval(&mut status, &image);
        let entry = &status.history[0];
        assert_eq!(entry.approval, HistoryApproval::Manual);
        assert_eq!(entry.approved_by.as_deref(), Some("alice"));
        assert_eq!(entry.approval_reason.as_deref(), Some("reviewed"));
        assert_eq!(
            entry.installed_at, installed_at,
            "when it was installed stays"
        );
    }
}
