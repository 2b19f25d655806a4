//! What an approval covers: the digest it names, and the fields of the spec and the
//! configuration it was given with. Shared by the provisioner (which applies only approved
//! objects) and `kubectl bundle approve` (which says when an approval already holds).

use gantry_api::{Approval, BundleSpec};

/// What a decision is checked against besides the digest: the configuration's digest
/// (`status.configDigest`) and, for content a provisioner rendered, the rendered content's
/// digest (`status.contentDigest`); `None` for plain content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rendering<'a> {
    pub config_digest: Option<&'a str>,
    pub content_digest: Option<&'a str>,
}

impl<'a> Rendering<'a> {
    /// The rendering `status` describes.
    pub fn of(status: &'a gantry_api::BundleStatus) -> Self {
        Rendering {
            config_digest: status.config_digest.as_deref(),
            content_digest: status
                .rendered
                .as_ref()
                .and(status.content_digest.as_deref()),
        }
    }
}

/// The fields that differ from the ones `approval` was given with (`spec.patches`,
/// `spec.images`, `spec.ignore`, the configuration, the rendered content), named as messages
/// name them. Empty when the approval covers the objects `spec` and `rendering` make.
pub fn differing(
    approval: &Approval,
    spec: &BundleSpec,
    rendering: Rendering<'_>,
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
    if approval.config_digest.as_deref() != rendering.config_digest {
        fields.push("the configuration (spec.config, spec.configFrom)");
    }
    // Other objects from the same configuration: the provisioner renders others now.
    if approval.config_digest.as_deref() == rendering.config_digest
        && approval.content_digest.as_deref() != rendering.content_digest
    {
        fields.push("the rendered objects (the provisioner renders others now)");
    }
    fields
}

/// Whether `approval` approves `digest` with exactly this spec and configuration.
pub fn approves(
    approval: &Approval,
    digest: &str,
    spec: &BundleSpec,
    rendering: Rendering<'_>,
) -> bool {
    approval.digest == digest
        && approval.decision == gantry_api::ApprovalDecision::Approved
        && differing(approval, spec, rendering).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::ApprovalDecision;

    fn rendering<'a>(config: Option<&'a str>, content: Option<&'a str>) -> Rendering<'a> {
        Rendering {
            config_digest: config,
            content_digest: content,
        }
    }

    #[test]
    fn an_approval_covers_its_digest_spec_fields_configuration_and_rendered_objects() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let config = format!("sha256:{}", "c".repeat(64));
        let content = format!("sha256:{}", "e".repeat(64));
        let mut approval = Approval::of(ApprovalDecision::Approved, &digest);
        approval.config_digest = Some(config.clone());
        approval.content_digest = Some(content.clone());
        let spec = BundleSpec::default();
        let same = rendering(Some(&config), Some(&content));
        assert!(approves(&approval, &digest, &spec, same));
        let other = format!("sha256:{}", "d".repeat(64));
        assert_eq!(
            differing(&approval, &spec, rendering(Some(&other), Some(&content))),
            ["the configuration (spec.config, spec.configFrom)"]
        );
        assert_eq!(
            differing(&approval, &spec, rendering(Some(&config), Some(&other))),
            ["the rendered objects (the provisioner renders others now)"]
        );
        assert!(!approves(&approval, &digest, &spec, Rendering::default()));
        assert!(!approves(&approval, &"b".repeat(64), &spec, same));
        let mut patched = spec.clone();
        patched.patches.push(gantry_api::BundlePatch {
            patch: "[]".into(),
            target: Default::default(),
        });
        assert_eq!(differing(&approval, &patched, same), ["spec.patches"]);
        approval.decision = ApprovalDecision::Denied;
        assert!(!approves(&approval, &digest, &spec, same));
    }

    #[test]
    fn plain_content_is_covered_by_its_digest_alone() {
        let mut status = gantry_api::BundleStatus {
            content_digest: Some(format!("sha256:{}", "e".repeat(64))),
            ..Default::default()
        };
        assert_eq!(Rendering::of(&status), Rendering::default());
        status.rendered = Some(Default::default());
        assert_eq!(
            Rendering::of(&status).content_digest,
            status.content_digest.as_deref()
        );
    }
}
