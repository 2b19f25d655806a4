//! Step 5: approval, bound to the resolved digest.

use gantry_api::conditions::{reasons, types};
use gantry_api::{Approval, ApprovalDecision, ApprovalPolicy, BundleSpec, ProvisionerClass};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::unpack::Content;
use crate::error::Result;
use crate::reconcile::crd_findings;
use crate::reconcile::pass::{Flow, Outcome, Pass, next_visit};
use crate::source::registry::digest_of;
use crate::status::publish;
use gantry_rules::approval::Rendering;
use gantry_rules::conditions::find;
use gantry_rules::plan::Plan;

/// Sets `Approved`. Content that is not approved (yet) stops the pass; a tag may still move
/// while a person decides, so the bundle comes back to resolve it again.
pub(crate) async fn approve(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    content: &Content,
    plan: &Plan,
) -> Result<Flow<()>> {
    let digest = digest_of(&content.resolved_image).unwrap_or_default();
    let verdict = verdict(
        class.spec.approval,
        &class.name_any(),
        &pass.name,
        digest,
        &Changes {
            spec: &pass.bundle.spec,
            rendering: Rendering::of(&pass.status),
        },
        pass.status.approval.as_ref(),
    );
    // A denial is announced once, not on every visit.
    let announce = verdict.reason == reasons::DENIED
        && !find(&pass.status.conditions, types::APPROVED)
            .is_some_and(|c| c.reason == reasons::DENIED && c.message == verdict.message);
    pass.set_condition(
        types::APPROVED,
        verdict.approved,
        verdict.reason,
        verdict.message.clone(),
    );
    if announce {
        publish(
            pass.ctx,
            pass.bundle,
            EventType::Warning,
            reasons::DENIED,
            &verdict.message,
        )
        .await;
    }
    let visit = Action::requeue(next_visit(pass.bundle, pass.ctx));
    pass.awaiting_approval = !verdict.approved;
    if verdict.approved {
        Ok(Flow::Continue(()))
    } else if verdict.reason == reasons::DENIED {
        // Only an approver or another digest brings a denied bundle on.
        pass.set_condition(
            types::STALLED,
            true,
            reasons::DENIED,
            format!(
                "{}; no retry can fix this until an approver approves it or the image resolves to another digest",
                verdict.message
            ),
        );
        Ok(Flow::Stop(Outcome::Stalled(visit)))
    } else {
        // Awaiting an approver: the unsafe CRD changes the apply would refuse (or apply, where
        // the CRD accepts them) come first among the highlights they review.
        let highlights: Vec<_> = crd_findings::findings(pass.ctx, plan)
            .await?
            .iter()
            .flat_map(|crd| crd.highlights().collect::<Vec<_>>())
            .collect();
        if let Some(permissions) = pass.status.requested_permissions.as_mut() {
            permissions.highlights.splice(0..0, highlights);
        }
        Ok(Flow::Stop(Outcome::Done(visit)))
    }
}

/// What makes the objects of a digest what they are besides the content: a decision covers
/// the spec fields and configuration it was given with.
#[derive(Clone, Copy, Debug)]
struct Changes<'a> {
    spec: &'a BundleSpec,
    rendering: Rendering<'a>,
}

impl Changes<'_> {
    /// The fields of the spec that differ from the ones `approval` was given with.
    fn differing(&self, approval: &Approval) -> Vec<&'static str> {
        gantry_rules::approval::differing(approval, self.spec, self.rendering)
    }
}

/// What the class's policy and an approver's decision say about `digest`.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    approved: bool,
    reason: &'static str,
    message: String,
}

/// Decides approval. Only a decision about `digest` itself counts: an approval of another
/// digest does not carry over, and the message says so for as long as the bundle waits.
fn verdict(
    policy: ApprovalPolicy,
    class: &str,
    bundle: &str,
    digest: &str,
    changes: &Changes<'_>,
    approval: Option<&Approval>,
) -> Verdict {
    if policy == ApprovalPolicy::Automatic {
        return Verdict {
            approved: true,
            reason: reasons::AUTOMATIC_APPROVAL,
            message: format!("ProvisionerClass {class} approves every digest"),
        };
    }
    let with_reason = |what: &str, reason: Option<&str>| match reason.filter(|r| !r.is_empty()) {
        Some(reason) => format!("{digest} {what}: {reason}"),
        None => format!("{digest} {what}"),
    };
    // A decision covers the objects it was given for: the digest, the patches and the image
    // rewrites.
    let changed = approval
        .filter(|a| a.digest == digest)
        .map(|a| (a, changes.differing(a)))
        .filter(|(_, fields)| !fields.is_empty());
    if let Some((a, fields)) = changed {
        return Verdict {
            approved: false,
            reason: reasons::AWAITING_APPROVAL,
            message: format!(
                "{} changed since {digest} was {}: the objects to apply are not the ones decided on; waiting for an approver (kubectl bundle approve {bundle})",
                fields.join(" and "),
                match a.decision {
                    ApprovalDecision::Approved => "approved",
                    ApprovalDecision::Denied => "denied",
                }
            ),
        };
    }
    match approval.filter(|a| a.digest == digest) {
        Some(a) if a.decision == ApprovalDecision::Approved => Verdict {
            approved: true,
            reason: reasons::APPROVED,
            message: with_reason("approved", a.reason.as_deref()),
        },
        Some(a) => Verdict {
            approved: false,
            reason: reasons::DENIED,
            message: with_reason("denied", a.reason.as_deref()),
        },
        None => Verdict {
            approved: false,
            reason: reasons::AWAITING_APPROVAL,
            message: if approval.is_some() {
                format!(
                    "{digest} is new: the approval of another digest does not carry over; waiting for an approver"
                )
            } else {
                format!(
                    "waiting for an approver to approve {digest} (kubectl bundle approve {bundle})"
                )
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::{BundlePatch, ImageOverride};

    fn decision(decision: ApprovalDecision, digest: &str, reason: Option<&str>) -> Approval {
        Approval {
            reason: reason.map(Into::into),
            ..Approval::of(decision, digest)
        }
    }

    /// The verdict on `sha256:new` of bundle `b` under a manual policy, the spec changing
    /// `changes`.
    fn manual_with(changes: Changes<'_>, approval: Option<&Approval>) -> Verdict {
        verdict(
            ApprovalPolicy::Manual,
            "reviewed",
            "b",
            "sha256:new",
            &changes,
            approval,
        )
    }

    fn manual(approval: Option<&Approval>) -> Verdict {
        manual_with(
            Changes {
                spec: &BundleSpec::default(),
                rendering: Rendering::default(),
            },
            approval,
        )
    }

    #[test]
    fn automatic_approves_every_digest() {
        let v = verdict(
            ApprovalPolicy::Automatic,
            "plain",
            "b",
            "sha256:x",
            &Changes {
                spec: &BundleSpec::default(),
                rendering: Rendering::default(),
            },
            None,
        );
        assert!(v.approved);
        assert_eq!(v.reason, reasons::AUTOMATIC_APPROVAL);
    }

    #[test]
    fn a_decision_counts_for_its_own_digest_only() {
        let approved = decision(ApprovalDecision::Approved, "sha256:new", Some("looks fine"));
        let v = manual(Some(&approved));
        assert_eq!(
            (v.approved, v.reason, v.message.as_str()),
            (true, reasons::APPROVED, "sha256:new approved: looks fine")
        );

        let old = decision(ApprovalDecision::Approved, "sha256:old", None);
        let v = manual(Some(&old));
        assert_eq!((v.approved, v.reason), (false, reasons::AWAITING_APPROVAL));
        assert!(v.message.contains("does not carry over"), "{}", v.message);

        let v = manual(None);
        assert!(
            v.message.contains("kubectl bundle approve b"),
            "{}",
            v.message
        );
    }

    #[test]
    fn a_denial_stops_with_its_reason() {
        let denied = decision(ApprovalDecision::Denied, "sha256:new", None);
        assert_eq!(
            manual(Some(&denied)),
            Verdict {
                approved: false,
                reason: reasons::DENIED,
                message: "sha256:new denied".into()
            }
        );
    }

    #[test]
    fn a_decision_covers_the_image_rewrites_it_was_given_with() {
        let mirror = ImageOverride {
            name: "quay.io/op".into(),
            new_name: Some("127.0.0.1:5000/op".into()),
            ..Default::default()
        };
        let mut approved = decision(ApprovalDecision::Approved, "sha256:new", None);
        approved.images = vec![mirror.clone()];
        let with = |images: &[ImageOverride]| {
            let spec = BundleSpec {
                images: images.to_vec(),
                ..BundleSpec::default()
            };
            let changes = Changes {
                spec: &spec,
                rendering: Rendering::default(),
            };
            manual_with(changes, Some(&approved))
        };
        assert!(with(std::slice::from_ref(&mirror)).approved);
        let changed = ImageOverride {
            new_name: Some("127.0.0.1:5000/elsewhere/op".into()),
            ..mirror
        };
        let v = with(&[changed]);
        assert_eq!((v.approved, v.reason), (false, reasons::AWAITING_APPROVAL));
        assert!(v.message.contains("spec.images changed"), "{}", v.message);
        assert!(!with(&[]).approved, "rewrites removed: a new decision too");
    }

    #[test]
    fn a_decision_covers_the_patches_it_was_given_with() {
        let remove_replicas = BundlePatch {
            patch: "[{op: remove, path: /spec/replicas}]".into(),
            target: gantry_api::ObjectSelector {
                kind: Some("Deployment".into()),
                ..Default::default()
            },
        };
        let mut approved = decision(ApprovalDecision::Approved, "sha256:new", None);
        approved.patches = vec![remove_replicas.clone()];
        let with = |patches: &[BundlePatch], images: &[ImageOverride]| {
            let spec = BundleSpec {
                images: images.to_vec(),
                patches: patches.to_vec(),
                ..BundleSpec::default()
            };
            let changes = Changes {
                spec: &spec,
                rendering: Rendering::default(),
            };
            manual_with(changes, Some(&approved))
        };
        assert!(with(std::slice::from_ref(&remove_replicas), &[]).approved);
        let other_target = BundlePatch {
            target: gantry_api::ObjectSelector::default(),
            ..remove_replicas.clone()
        };
        let v = with(&[other_target], &[]);
        assert_eq!((v.approved, v.reason), (false, reasons::AWAITING_APPROVAL));
        assert!(
            v.message
                .starts_with("spec.patches changed since sha256:new was approved"),
            "{}",
            v.message
        );
        assert!(
            !with(&[], &[]).approved,
            "patches removed: a new decision too"
        );
        let image = ImageOverride {
            name: "quay.io/op".into(),
            new_tag: Some("v2".into()),
            ..Default::default()
        };
        let v = with(&[], &[image]);
        assert!(
            v.message
                .starts_with("spec.patches and spec.images changed"),
            "{}",
            v.message
        );
    }

    #[test]
    fn a_decision_covers_the_configuration_it_was_given_with() {
        let (old, new) = (
            format!("sha256:{}", "1".repeat(64)),
            format!("sha256:{}", "2".repeat(64)),
        );
        let mut approved = decision(ApprovalDecision::Approved, "sha256:new", None);
        approved.config_digest = Some(old.clone());
        let spec = BundleSpec::default();
        let with = |config_digest: &str| {
            let changes = Changes {
                spec: &spec,
                rendering: Rendering {
                    config_digest: Some(config_digest),
                    content_digest: None,
                },
            };
            manual_with(changes, Some(&approved))
        };
        assert!(with(&old).approved);
        let v = with(&new);
        assert_eq!((v.approved, v.reason), (false, reasons::AWAITING_APPROVAL));
        assert!(
            v.message.starts_with(
                "the configuration (spec.config, spec.configFrom) changed since sha256:new was approved"
            ),
            "{}",
            v.message
        );
    }
}
