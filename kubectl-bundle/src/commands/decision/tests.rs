//! [`decide`](super::decide) without a cluster.

use super::*;
use crate::commands::testing::condition;
use gantry_api::conditions::reasons;
use gantry_api::{BundleStatus, ProvisionerClassSpec};

/// Bundle `b` resolving to sha256:aa, unpacked or not, served by a class of `approval`.
fn shown(unpacked: bool, approval: Option<ApprovalPolicy>) -> Shown {
    let mut bundle = Bundle::new("b", Default::default());
    bundle.status = Some(BundleStatus {
        resolved_image: Some("r.test/app@sha256:aa".into()),
        conditions: vec![condition(
            types::UNPACKED,
            if unpacked { "True" } else { "False" },
            reasons::UNPACK_SUCCEEDED,
            "",
            None,
        )],
        ..Default::default()
    });
    let class = approval.map(|approval| {
        let mut class = ProvisionerClass::new("standard", ProvisionerClassSpec::default());
        class.spec.approval = approval;
        class
    });
    Shown { bundle, class }
}

#[test]
fn a_decision_needs_a_manual_class_and_the_digest_reviewed() {
    let (approve, deny) = (ApprovalDecision::Approved, ApprovalDecision::Denied);
    let manual = shown(true, Some(ApprovalPolicy::Manual));
    assert_eq!(
        decide(&manual, approve, Some("sha256:aa")).unwrap(),
        "sha256:aa"
    );
    // No class to be found decides nothing either way: the provisioner waits for one.
    assert_eq!(decide(&shown(true, None), deny, None).unwrap(), "sha256:aa");
    let automatic = decide(&shown(true, Some(ApprovalPolicy::Automatic)), deny, None);
    assert_eq!(
        automatic.unwrap_err().to_string(),
        "bundle b is served by the default class standard, whose approval is Automatic: every digest is installed without a decision, so there is nothing to deny. Decisions apply to classes with `approval: Manual`"
    );
    assert!(matches!(
        decide(&shown(false, Some(ApprovalPolicy::Manual)), approve, None),
        Err(DecisionError::NotUnpacked(name)) if name == "b"
    ));
    let moved = decide(&manual, deny, Some("sha256:bb")).unwrap_err();
    assert_eq!(
        moved.to_string(),
        "bundle b resolves to sha256:aa, not sha256:bb: review the new content before deciding"
    );
}

#[test]
fn an_approval_on_record_is_not_made_again_but_can_be_denied() {
    let mut manual = shown(true, Some(ApprovalPolicy::Manual));
    let status = manual.bundle.status.as_mut().unwrap();
    status.approval = Some(Approval::of(ApprovalDecision::Approved, "sha256:aa"));
    assert!(matches!(
        decide(&manual, ApprovalDecision::Approved, None),
        Err(DecisionError::AlreadyApproved { digest, .. }) if digest == "sha256:aa"
    ));
    assert!(decide(&manual, ApprovalDecision::Denied, None).is_ok());
    // Approved with other image rewrites: the approval does not cover the spec now.
    manual.bundle.spec.images = vec![gantry_api::ImageOverride {
        name: "app".into(),
        new_name: None,
        new_tag: Some("v2".into()),
        digest: None,
    }];
    assert!(decide(&manual, ApprovalDecision::Approved, None).is_ok());
    assert_eq!(
        recorded_line(
            "b",
            &Recorded {
                approval: manual.bundle.status.unwrap().approval.unwrap(),
                approved_by: Some("alice".into()),
            }
        ),
        "bundle b approved for sha256:aa by alice"
    );
}
