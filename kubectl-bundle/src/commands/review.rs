//! What a bundle's status and spec say to a reviewer, shared by `list`, `status`, the
//! decisions and the review page: the digest it resolves to, where its approval stands, a
//! decision in one line, its class, the changes its spec makes to the content, and what
//! rendered it from which configuration.

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    Approval, ApprovalDecision, Bundle, BundlePhase, BundleSpec, BundleStatus, RequestedPermissions,
};
use gantry_rules::conditions::find;

use super::output::{header, table};

pub(crate) fn resolved_digest(status: &BundleStatus) -> Option<&str> {
    status
        .resolved_image
        .as_deref()?
        .rsplit_once('@')
        .map(|(_, digest)| digest)
}

pub(crate) fn short(digest: &str) -> String {
    digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect()
}

/// `Approved`, `Denied`, `Pending` (an approval is awaited) or `-`.
pub(crate) fn approval_state(status: &BundleStatus) -> &'static str {
    let digest = resolved_digest(status);
    // A decision also covers the configuration and the rendered objects it was given with.
    let rendering = gantry_rules::approval::Rendering::of(status);
    let decided_on_these = |a: &Approval| {
        a.config_digest.as_deref() == rendering.config_digest
            && a.content_digest.as_deref() == rendering.content_digest
    };
    match status
        .approval
        .as_ref()
        .filter(|a| Some(a.digest.as_str()) == digest)
    {
        Some(a) if !decided_on_these(a) => match find(&status.conditions, types::APPROVED) {
            Some(c) if c.reason == reasons::AUTOMATIC_APPROVAL => "Automatic",
            _ => "Pending",
        },
        Some(a) if a.decision == ApprovalDecision::Approved => "Approved",
        Some(_) => "Denied",
        None => match find(&status.conditions, types::APPROVED) {
            Some(c) if c.reason == reasons::AUTOMATIC_APPROVAL => "Automatic",
            Some(c) if c.reason == reasons::AWAITING_APPROVAL => "Pending",
            _ => "-",
        },
    }
}

/// A decision in one line: `Approved sha256:... by alice: reason`.
pub(crate) fn decision_text(approval: &Approval) -> String {
    format!(
        "{:?} {}{}{}",
        approval.decision,
        approval.digest,
        approval
            .approved_by
            .as_deref()
            .map(|who| format!(" by {who}"))
            .unwrap_or_default(),
        approval
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

/// Where `spec` takes its configuration from, in the order it is merged (later ones win):
/// each `spec.configFrom[i]` as `Secret/name[key]`, `(optional)` when so, then `spec.config`.
/// Names and keys only, never a value: a Secret's values are not the reviewer's to read here.
pub(crate) fn config_sources(spec: &BundleSpec) -> Vec<String> {
    spec.config_from
        .iter()
        .map(|source| {
            if source.optional {
                format!("{} (optional)", source.describe())
            } else {
                source.describe()
            }
        })
        .chain(spec.config.as_ref().map(|_| "spec.config".to_string()))
        .collect()
}

/// Whether the bundle has a configuration to show: a digest of it, or sources of it.
pub(crate) fn configured(bundle: &Bundle) -> bool {
    bundle
        .status
        .as_ref()
        .is_some_and(|s| s.config_digest.is_some())
        || bundle.spec.config.is_some()
        || !bundle.spec.config_from.is_empty()
}

/// `provisioner version`, as `Rendered by:` says it.
pub(crate) fn rendered_by(rendered: &gantry_api::Rendered) -> String {
    format!("{} {}", rendered.provisioner, rendered.version)
}

/// When the bundle awaits a decision and the decision on record was given with another
/// configuration than `status.configDigest` (so that it no longer holds, see
/// `gantry_rules::approval`): the digest it was given with (`None`: none recorded).
pub(crate) fn config_changed(status: &BundleStatus) -> Option<Option<&str>> {
    let awaiting = status.phase == Some(BundlePhase::AwaitingApproval)
        || find(&status.conditions, types::APPROVED)
            .is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL);
    let approval = status.approval.as_ref().filter(|_| awaiting)?;
    (approval.config_digest != status.config_digest).then_some(approval.config_digest.as_deref())
}

/// [`config_changed`] in one line: `the configuration changed since the last decision (…)`.
pub(crate) fn config_changed_text(status: &BundleStatus) -> Option<String> {
    let decided = config_changed(status)?;
    let digest = |d: Option<&str>| d.map_or("none".to_string(), |d| format!("sha256:{}", short(d)));
    Some(format!(
        "the configuration changed since the last decision (decided with {}, now {}): awaiting a new one",
        digest(decided),
        digest(status.config_digest.as_deref())
    ))
}

/// The class serving the bundle, as the controller recorded it; before it did, the class the
/// bundle names, else `<default>`.
pub(crate) fn class_name(bundle: &Bundle) -> String {
    bundle
        .status
        .as_ref()
        .and_then(|s| s.class_name.clone())
        .or_else(|| bundle.spec.provisioner_class_name.clone())
        .unwrap_or_else(|| "<default>".into())
}

/// A kind as kubectl names it with its group: `Deployment.apps`, `ConfigMap` (the core group).
pub(crate) fn kind_of(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// The requested permissions as a readable table, flagged objects last.
pub(super) fn permissions_table(permissions: &RequestedPermissions) -> String {
    let mut rows = vec![header(&["SCOPE", "KIND", "COUNT"])];
    for k in &permissions.cluster_scoped {
        rows.push(vec![
            "cluster".into(),
            kind_of(&k.group, &k.kind),
            k.count.to_string(),
        ]);
    }
    for ns in &permissions.namespaced {
        for k in &ns.kinds {
            rows.push(vec![
                format!("namespace {}", ns.namespace),
                kind_of(&k.group, &k.kind),
                k.count.to_string(),
            ]);
        }
    }
    let mut out: String = table(&rows)
        .lines()
        .map(|row| format!("  {row}\n"))
        .collect();
    if !permissions.highlights.is_empty() {
        out.push_str("\n  Needs attention:\n");
        for h in &permissions.highlights {
            let object = match &h.namespace {
                Some(ns) => format!("{} {ns}/{}", kind_of(&h.group, &h.kind), h.name),
                None => format!("{} {}", kind_of(&h.group, &h.kind), h.name),
            };
            out.push_str(&format!("  ! {object}: {}\n", h.reason));
        }
    }
    match &permissions.service_account {
        Some(account) => out.push_str(&format!(
            "\n  Applied as ServiceAccount {account} ({})\n",
            account.username()
        )),
        None => out.push_str("\n  Applied as the provisioner's own identity\n"),
    }
    out
}

/// `spec.ignore`: one rule per line, `PATHS of TARGET`.
pub(super) fn ignore_lines(rules: &[gantry_api::IgnoreRule]) -> String {
    rules
        .iter()
        .map(|rule| {
            let target = rule
                .target
                .as_ref()
                .map(|t| serde_json::to_string(t).unwrap_or_default())
                .unwrap_or_else(|| "every object".into());
            format!("  {} of {target}\n", rule.paths.join(", "))
        })
        .collect()
}

/// `spec.patches`: each patch's target, then its operations with their values, indented.
pub(super) fn patches_lines(patches: &[gantry_api::BundlePatch]) -> String {
    let mut out = String::new();
    for (index, patch) in patches.iter().enumerate() {
        out.push_str(&format!("  [{index}] {}:\n", patch.target));
        match patch.operation_lines() {
            Ok(lines) => {
                for line in lines {
                    out.push_str(&format!("      {line}\n"));
                }
            }
            Err(e) => out.push_str(&format!("      (does not parse: {e})\n")),
        }
    }
    out
}

/// `spec.images`, one rewrite per line: `NAME -> NEW`.
pub(super) fn images_lines(images: &[gantry_api::ImageOverride]) -> String {
    images
        .iter()
        .map(|image| {
            let name = image.new_name.as_deref().unwrap_or(&image.name);
            let target = match (&image.digest, &image.new_tag) {
                (Some(digest), _) => format!("{name}@{digest}"),
                (None, Some(tag)) => format!("{name}:{tag}"),
                (None, None) => format!("{name} (tag or digest kept)"),
            };
            format!("  {} -> {target}\n", image.name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::{KindCount, NamespacePermissions, PermissionHighlight};

    fn status(resolved: &str, approval: Option<(ApprovalDecision, &str)>) -> BundleStatus {
        BundleStatus {
            resolved_image: Some(format!("127.0.0.1:5000/app@{resolved}")),
            approval: approval.map(|(decision, digest)| Approval::of(decision, digest)),
            ..Default::default()
        }
    }

    #[test]
    fn an_approval_counts_only_for_the_resolved_digest() {
        assert_eq!(
            approval_state(&status(
                "sha256:aa",
                Some((ApprovalDecision::Approved, "sha256:aa"))
            )),
            "Approved"
        );
        assert_eq!(
            approval_state(&status(
                "sha256:aa",
                Some((ApprovalDecision::Denied, "sha256:aa"))
            )),
            "Denied"
        );
        assert_eq!(
            approval_state(&status(
                "sha256:bb",
                Some((ApprovalDecision::Approved, "sha256:aa"))
            )),
            "-"
        );
    }

    #[test]
    fn a_decision_on_another_configuration_leaves_the_bundle_pending() {
        let (old, new) = (
            format!("sha256:{}", "1".repeat(64)),
            format!("sha256:{}", "2".repeat(64)),
        );
        let mut changed = status("sha256:aa", Some((ApprovalDecision::Approved, "sha256:aa")));
        changed.approval.as_mut().unwrap().config_digest = Some(old.clone());
        changed.config_digest = Some(new);
        assert_eq!(approval_state(&changed), "Pending");
        changed.config_digest = Some(old);
        assert_eq!(approval_state(&changed), "Approved");
        // Rendered content: the decision names the objects it was given for.
        changed.rendered = Some(Default::default());
        changed.content_digest = Some(format!("sha256:{}", "3".repeat(64)));
        assert_eq!(approval_state(&changed), "Pending");
    }

    #[test]
    fn the_permissions_table_lists_scopes_and_highlights() {
        let table = permissions_table(&RequestedPermissions {
            cluster_scoped: vec![KindCount {
                group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                count: 1,
            }],
            namespaced: vec![NamespacePermissions {
                namespace: "app".into(),
                kinds: vec![KindCount {
                    group: "".into(),
                    kind: "ConfigMap".into(),
                    count: 3,
                }],
            }],
            highlights: vec![PermissionHighlight {
                group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                namespace: None,
                name: "all".into(),
                reason: "grants verbs [*]".into(),
            }],
            service_account: Some(gantry_api::ServiceAccountReference {
                namespace: "team".into(),
                name: "deployer".into(),
            }),
        });
        assert!(
            table.contains("cluster") && table.contains("ClusterRole.rbac.authorization.k8s.io")
        );
        assert!(
            table.contains("namespace app") && table.contains("ConfigMap") && table.contains('3')
        );
        assert!(table.contains("! ClusterRole.rbac.authorization.k8s.io all: grants verbs [*]"));
        assert!(
            table.contains(
                "Applied as ServiceAccount team/deployer (system:serviceaccount:team:deployer)"
            ),
            "{table}"
        );
    }

    #[test]
    fn a_configuration_change_counts_while_a_decision_is_awaited() {
        let mut status = status("sha256:aa", Some((ApprovalDecision::Approved, "sha256:aa")));
        status.config_digest = Some("sha256:new".into());
        // Installed meanwhile (an Automatic class records no decision): nothing awaited.
        status.phase = Some(BundlePhase::Installed);
        assert_eq!(config_changed(&status), None);
        status.phase = Some(BundlePhase::AwaitingApproval);
        assert_eq!(
            config_changed(&status),
            Some(None),
            "decided before any configuration"
        );
        status.approval.as_mut().unwrap().config_digest = Some("sha256:old".into());
        assert_eq!(config_changed(&status), Some(Some("sha256:old")));
        status.approval.as_mut().unwrap().config_digest = Some("sha256:new".into());
        assert_eq!(config_changed(&status), None, "decided with this one");
        assert_eq!(
            config_sources(&BundleSpec {
                config: Some(Default::default()),
                config_from: serde_json::from_value(serde_json::json!([
                    { "kind": "ConfigMap", "name": "a", "key": "k" },
                    { "kind": "Secret", "name": "b", "optional": true },
                ]))
                .unwrap(),
                ..Default::default()
            }),
            [
                "ConfigMap/a[k]",
                "Secret/b[values.yaml] (optional)",
                "spec.config"
            ]
        );
    }
}
