//! `status.history`: the digests installed, newest first, with how each was approved.

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalDecision, BundleStatus, HISTORY_LIMIT, HistoryApproval, HistoryEntry};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::condition;
use crate::source::registry::digest_of;

/// Puts `image`, just installed, first in `status.history` (how it was approved comes from
/// `Approved` and the approver's decision), dropping an older entry of the same digest and
/// the oldest beyond [`HISTORY_LIMIT`].
pub fn record_history(status: &mut BundleStatus, image: &str, installed_at: Time) {
    let Some(digest) = digest_of(image) else {
        return;
    };
    let automatic = condition(&status.conditions, types::APPROVED)
        .is_some_and(|c| c.reason == reasons::AUTOMATIC_APPROVAL);
    let decision = status
        .approval
        .as_ref()
        .filter(|a| !automatic && a.digest == digest && a.decision == ApprovalDecision::Approved);
    let entry = HistoryEntry {
        image: image.to_string(),
        digest: digest.to_string(),
        installed_at,
        approval: if automatic {
            HistoryApproval::Automatic
        } else {
            HistoryApproval::Manual
        },
        approved_at: decision.and_then(|a| a.time.clone()),
        approval_reason: decision.and_then(|a| a.reason.clone()),
        approved_by: decision.and_then(|a| a.approved_by.clone()),
    };
    status.history.retain(|e| e.digest != digest);
    status.history.insert(0, entry);
    status.history.truncate(HISTORY_LIMIT);
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::Approval;
    use k8s_openapi::jiff::Timestamp;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn history_is_newest_first_bounded_and_without_repeats() {
        let mut status = BundleStatus::default();
        crate::status::set_condition(
            &mut status.conditions,
            types::APPROVED,
            true,
            reasons::APPROVED,
            "",
            Some(1),
        );
        status.approval = Some(Approval {
            decision: ApprovalDecision::Approved,
            digest: digest('a'),
            reason: Some("reviewed".into()),
            time: Some(Time(Timestamp::UNIX_EPOCH)),
            approved_by: Some("alice".into()),
            images: Vec::new(),
            patches: Vec::new(),
            ignore: Vec::new(),
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
}
