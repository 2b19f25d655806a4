//! What an approval covers: the digest it names, and the fields of the spec and the
//! configuration it was given with. Shared by the provisioner (which applies only approved
//! objects) and `kubectl bundle approve` (which says when an approval already holds).

use gantry_api::{Approval, BundleSpec};

/// The fields that differ from the ones `approval` was given with (`spec.patches`,
/// `spec.images`, `spec.ignore`, the configuration), named as messages name them. Empty when
/// the approval covers the objects `spec` and `config_digest` make.
pub fn differing(
    approval: &Approval,
    spec: &BundleSpec,
    config_digest: Option<&str>,
) -> Vec<&'static str> {
    let mut fields = Vec::new();
    if approval.patches != spec.patches {
        fields.push("spec.patches");
    }
    if approval.images != spec.images {
        fields.push("spec.images");
    }
    if approval.ignore != spec.ignore {
        fields.push("spec.ignore");
    }
    if approval.config_digest.as_deref() != config_digest {
        fields.push("the configuration (spec.config, spec.configFrom)");
    }
    fields
}

/// Whether `approval` approves `digest` with exactly this spec and configuration.
pub fn approves(
    approval: &Approval,
    digest: &str,
    spec: &BundleSpec,
    config_digest: Option<&str>,
) -> bool {
    approval.digest == digest
        && approval.decision == gantry_api::ApprovalDecision::Approved
        && differing(approval, spec, config_digest).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::ApprovalDecision;

    #[test]
    fn an_approval_covers_its_digest_spec_fields_and_configuration() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let config = format!("sha256:{}", "c".repeat(64));
        let mut approval = Approval::of(ApprovalDecision::Approved, &digest);
        approval.config_digest = Some(config.clone());
        let spec = BundleSpec::default();
        assert!(approves(&approval, &digest, &spec, Some(&config)));
        assert_eq!(
            differing(
                &approval,
                &spec,
                Some(&format!("sha256:{}", "d".repeat(64)))
            ),
            ["the configuration (spec.config, spec.configFrom)"]
        );
        assert!(!approves(&approval, &digest, &spec, None));
        assert!(!approves(&approval, &"b".repeat(64), &spec, Some(&config)));
        let mut patched = spec.clone();
        patched.patches.push(gantry_api::BundlePatch {
            patch: "[]".into(),
            target: Default::default(),
        });
        assert_eq!(
            differing(&approval, &patched, Some(&config)),
            ["spec.patches"]
        );
        approval.decision = ApprovalDecision::Denied;
        assert!(!approves(&approval, &digest, &spec, Some(&config)));
    }
}
