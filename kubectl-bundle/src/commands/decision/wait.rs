//! `--wait` of `approve` and `deny`: what became of the decision written, read from the
//! bundle's status alone ([`after_approval`]), until it settles.

use std::time::Duration;

use anyhow::{Context, bail};
use gantry_api::conditions::{reasons, types};
use gantry_api::{Approval, ApprovalDecision, Bundle, BundlePhase};
use gantry_rules::conditions::{ConditionStatus, find};
use kube::Client;
use kube::api::Api;

use crate::commands::review::{decision_text, resolved_digest};

/// Where a bundle stands, as far as one approval is concerned.
#[derive(Debug, PartialEq, Eq)]
enum AfterApproval {
    /// The provisioner has not acted on the approval yet, or is applying the content.
    Waiting,
    /// Ready with the approved digest.
    Ready,
    /// The provisioner handled this denial: phase `Denied`, and `Approved` False with reason
    /// `Denied` for this digest and this decision's reason.
    Denied,
    /// The approved content failed: the phase and the `Ready` condition.
    Failed(String),
    /// Another decision replaced this one before the outcome.
    Replaced(String),
    /// The bundle resolves to another digest now.
    Moved(String),
    Deleted,
}

/// What the status says about `approval`, the decision this command wrote.
///
/// The phase and `Ready` alone cannot tell: right after the approval was written they are still
/// what the previous decision left (`Denied` after a `deny` of the same digest), and a pass of
/// the provisioner that started before the approval may still write them afterwards, so neither
/// a newer `resourceVersion` nor a status written after the approval's time (second-grained,
/// and the plugin's clock) proves the provisioner saw it. Approvals are written through the
/// status subresource, so no `observedGeneration` moves either. What does prove it is the
/// `Approved` condition: the provisioner derives it from `status.approval` in the same pass,
/// and writes it with the phase and `Ready` of that pass. It says "approved" for this digest
/// only once a pass has read an approval of it, and this command refuses to run when one was on
/// record already. So the outcome counts once `Approved` is `True` with reason `Approved` for
/// this digest, as long as `status.approval` is still this decision and the digest still the
/// resolved one.
///
/// A denial is handled once `Approved` is False with reason `Denied` and the message the
/// provisioner derives from this denial (its digest and reason), and the phase is `Denied`.
fn after_approval(bundle: Option<&Bundle>, approval: &Approval) -> AfterApproval {
    let Some(bundle) = bundle else {
        return AfterApproval::Deleted;
    };
    let status = bundle.status.clone().unwrap_or_default();
    match &status.approval {
        Some(now) if now == approval => {}
        Some(now) => {
            return AfterApproval::Replaced(decision_text(now));
        }
        None => return AfterApproval::Replaced("the approval was removed".into()),
    }
    let digest = approval.digest.as_str();
    if resolved_digest(&status) != Some(digest) {
        return AfterApproval::Moved(
            status
                .resolved_image
                .clone()
                .unwrap_or_else(|| "another digest".into()),
        );
    }
    if approval.decision == ApprovalDecision::Denied {
        let expected = match approval.reason.as_deref().filter(|r| !r.is_empty()) {
            Some(reason) => format!("{digest} denied: {reason}"),
            None => format!("{digest} denied"),
        };
        let handled = find(&status.conditions, types::APPROVED).is_some_and(|c| {
            c.status == ConditionStatus::False
                && c.reason == reasons::DENIED
                && c.message == expected
        });
        return if handled && status.phase == Some(BundlePhase::Denied) {
            AfterApproval::Denied
        } else {
            AfterApproval::Waiting
        };
    }
    let seen = find(&status.conditions, types::APPROVED).is_some_and(|c| {
        c.status == ConditionStatus::True
            && c.reason == reasons::APPROVED
            && c.message.starts_with(&format!("{digest} approved"))
    });
    if !seen {
        return AfterApproval::Waiting;
    }
    let ready = find(&status.conditions, types::READY);
    if ready.is_some_and(|c| {
        c.status == ConditionStatus::True && c.observed_generation == bundle.metadata.generation
    }) {
        return AfterApproval::Ready;
    }
    match status.phase {
        Some(phase @ (BundlePhase::Failing | BundlePhase::UpdateFailing | BundlePhase::Denied)) => {
            AfterApproval::Failed(format!(
                "phase {phase}{}",
                ready
                    .map(|c| format!(", {}: {}", c.reason, c.message))
                    .unwrap_or_default()
            ))
        }
        _ => AfterApproval::Waiting,
    }
}

/// Waits for the outcome of `approval`: for an approval, the bundle Ready with its digest, or
/// failing; for a denial, the provisioner having handled it.
pub(super) async fn wait_decided(
    client: &Client,
    name: &str,
    approval: &Approval,
    timeout: Duration,
) -> anyhow::Result<()> {
    let bundles: &Api<Bundle> = &Api::all(client.clone());
    let settled =
        |bundle: Option<&Bundle>| after_approval(bundle, approval) != AfterApproval::Waiting;
    let denial = approval.decision == ApprovalDecision::Denied;
    if denial {
        eprintln!(
            "waiting up to {timeout:?} for the provisioner to handle the denial of bundle {name}"
        );
    } else {
        eprintln!("waiting up to {timeout:?} for bundle {name} to be Ready");
    }
    let outcome = tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(bundles.clone(), name, settled),
    )
    .await;
    let bundle = match outcome {
        Err(_) if denial => {
            let now = bundles.get_opt(name).await.ok().flatten();
            let status = now.as_ref().and_then(|b| b.status.as_ref());
            bail!(
                "the provisioner has not handled the denial of bundle {name} after {timeout:?}{}{}: is it running? See `kubectl bundle check` and `kubectl bundle status {name}`",
                status
                    .and_then(|s| s.phase)
                    .map(|p| format!(" (phase {p}"))
                    .unwrap_or_else(|| " (".into()),
                status
                    .and_then(|s| find(&s.conditions, types::APPROVED))
                    .map(|c| format!(", Approved {}: {}: {})", c.status, c.reason, c.message))
                    .unwrap_or_else(|| ")".into())
            )
        }
        Err(_) => {
            let now = bundles.get_opt(name).await.ok().flatten();
            bail!(
                "bundle {name} is not Ready after {timeout:?}{}: see `kubectl bundle status {name}` and `kubectl bundle events {name}`",
                now.as_ref()
                    .and_then(|b| b.status.as_ref())
                    .and_then(|s| find(&s.conditions, types::READY))
                    .map(|c| format!(" (Ready {}: {}: {})", c.status, c.reason, c.message))
                    .unwrap_or_default()
            )
        }
        Ok(result) => result.with_context(|| format!("watching bundle {name}"))?,
    };
    match after_approval(bundle.as_ref(), approval) {
        AfterApproval::Ready => {
            println!("bundle {name} is Ready");
            Ok(())
        }
        AfterApproval::Denied => {
            println!(
                "bundle {name} is Denied: the provisioner handled the denial of {}, which will not be installed",
                approval.digest
            );
            Ok(())
        }
        AfterApproval::Failed(why) => bail!("bundle {name} failed: {why}"),
        AfterApproval::Replaced(by) => {
            bail!(
                "a later decision replaced this {} of bundle {name}: {by}",
                if denial { "denial" } else { "approval" }
            )
        }
        AfterApproval::Moved(to) => {
            bail!("bundle {name} moved to {to} while waiting: that digest needs its own decision")
        }
        AfterApproval::Deleted => bail!("bundle {name} was deleted while waiting"),
        AfterApproval::Waiting => bail!("bundle {name}: no outcome"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testing::condition;
    use gantry_api::{BundleStatus, Condition};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn condition_(type_: &str, ok: bool, reason: &str, message: &str) -> Condition {
        let status = if ok { "True" } else { "False" };
        condition(type_, status, reason, message, Some(1))
    }

    /// A bundle resolving to sha256:aa with `approval` on record and these conditions.
    fn decided(approval: &Approval, phase: BundlePhase, conditions: Vec<Condition>) -> Bundle {
        let mut bundle = Bundle::new("b", Default::default());
        bundle.metadata.generation = Some(1);
        bundle.status = Some(BundleStatus {
            resolved_image: Some("127.0.0.1:5000/app@sha256:aa".into()),
            approval: Some(approval.clone()),
            phase: Some(phase),
            conditions,
            ..Default::default()
        });
        bundle
    }

    #[test]
    fn an_approval_waits_for_the_status_written_after_it() {
        let approval = Approval {
            reason: Some("ok".into()),
            time: Some(Time(Timestamp::UNIX_EPOCH)),
            approved_by: Some("alice".into()),
            ..Approval::of(ApprovalDecision::Approved, "sha256:aa")
        };
        // Right after a deny, the status is the deny's: not this approval's outcome.
        let denied_before = decided(
            &approval,
            BundlePhase::Denied,
            vec![
                condition_(
                    types::APPROVED,
                    false,
                    reasons::DENIED,
                    "sha256:aa denied: no",
                ),
                condition_(types::READY, false, reasons::DENIED, "sha256:aa denied: no"),
            ],
        );
        assert_eq!(
            after_approval(Some(&denied_before), &approval),
            AfterApproval::Waiting
        );
        // Once the provisioner read it: installing, then Ready or failing.
        let seen = |phase, ready: Condition| {
            decided(
                &approval,
                phase,
                vec![
                    condition_(
                        types::APPROVED,
                        true,
                        reasons::APPROVED,
                        "sha256:aa approved: ok",
                    ),
                    ready,
                ],
            )
        };
        let installing = seen(
            BundlePhase::Installing,
            condition_(types::READY, false, reasons::INSTALLING, "applying"),
        );
        assert_eq!(
            after_approval(Some(&installing), &approval),
            AfterApproval::Waiting
        );
        let ready = seen(
            BundlePhase::Installed,
            condition_(types::READY, true, reasons::INSTALL_SUCCEEDED, "done"),
        );
        assert_eq!(
            after_approval(Some(&ready), &approval),
            AfterApproval::Ready
        );
        let failing = seen(
            BundlePhase::Failing,
            condition_(types::READY, false, reasons::APPLY_FAILED, "cm: forbidden"),
        );
        assert_eq!(
            after_approval(Some(&failing), &approval),
            AfterApproval::Failed("phase Failing, ApplyFailed: cm: forbidden".into())
        );
        // Another decision, or another digest, ends the wait; so does a deletion.
        let mut replaced = ready.clone();
        replaced.status.as_mut().unwrap().approval = Some(Approval {
            decision: ApprovalDecision::Denied,
            ..approval.clone()
        });
        assert!(matches!(
            after_approval(Some(&replaced), &approval),
            AfterApproval::Replaced(_)
        ));
        let mut moved = ready.clone();
        moved.status.as_mut().unwrap().resolved_image = Some("r/app@sha256:bb".into());
        assert_eq!(
            after_approval(Some(&moved), &approval),
            AfterApproval::Moved("r/app@sha256:bb".into())
        );
        assert_eq!(after_approval(None, &approval), AfterApproval::Deleted);
    }

    #[test]
    fn a_denial_waits_until_the_provisioner_handled_it() {
        let denial = Approval {
            reason: Some("not now".into()),
            time: Some(Time(Timestamp::UNIX_EPOCH)),
            approved_by: Some("alice".into()),
            ..Approval::of(ApprovalDecision::Denied, "sha256:aa")
        };
        assert_eq!(decision_text(&denial), "Denied sha256:aa by alice: not now");
        // Still awaiting approval: the provisioner has not read the denial.
        let awaiting = decided(
            &denial,
            BundlePhase::AwaitingApproval,
            vec![condition_(
                types::APPROVED,
                false,
                reasons::AWAITING_APPROVAL,
                "waiting for an approver to approve sha256:aa",
            )],
        );
        assert_eq!(
            after_approval(Some(&awaiting), &denial),
            AfterApproval::Waiting
        );
        // An earlier denial of the same digest, for another reason, is not this one's outcome.
        let denied = |message: &str| {
            decided(
                &denial,
                BundlePhase::Denied,
                vec![condition_(types::APPROVED, false, reasons::DENIED, message)],
            )
        };
        assert_eq!(
            after_approval(Some(&denied("sha256:aa denied: too big")), &denial),
            AfterApproval::Waiting
        );
        assert_eq!(
            after_approval(Some(&denied("sha256:aa denied: not now")), &denial),
            AfterApproval::Denied
        );
        // The condition written, the phase not yet.
        let mut half = denied("sha256:aa denied: not now");
        half.status.as_mut().unwrap().phase = Some(BundlePhase::AwaitingApproval);
        assert_eq!(after_approval(Some(&half), &denial), AfterApproval::Waiting);
        // A later approval replaces it.
        let mut replaced = denied("sha256:aa denied: not now");
        replaced.status.as_mut().unwrap().approval = Some(Approval {
            decision: ApprovalDecision::Approved,
            ..denial.clone()
        });
        assert!(matches!(
            after_approval(Some(&replaced), &denial),
            AfterApproval::Replaced(_)
        ));
    }
}
