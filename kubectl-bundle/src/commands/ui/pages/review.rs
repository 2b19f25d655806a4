//! The review of a pending digest: a summary and the decision first, then what it changes.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use gantry_api::conditions::types;
use gantry_api::{Bundle, RequestedPermissions};
use gantry_rules::conditions::is_true;
use kube::ResourceExt;
use maud::{Markup, html};

use super::bundle::{applied_as, highlights, permissions, state_panel};
use super::diff::{changes_section, count};
use super::{Live, layout, open_bundle, page};
use crate::commands::review::{
    approval_state, config_changed_text, config_sources, configured, rendered_by, resolved_digest,
    short,
};
use crate::commands::ui::changes::{Change, ObjectChange};
use crate::commands::ui::{Ui, auth::Session};

/// What rendered the content and from which configuration: the provisioner, the source, the
/// configuration's digest and where it comes from (names and keys, never a value), and, marked,
/// that it changed since the last decision.
fn rendering(bundle: &Bundle) -> Markup {
    let status = bundle.status.clone().unwrap_or_default();
    let sources = config_sources(&bundle.spec);
    html! {
        @if let Some(rendered) = &status.rendered {
            p #rendered {
                "Rendered by " code { (rendered_by(rendered)) }
                @if let Some(source) = &rendered.source { " from " code { (source) } }
            }
            @if !rendered.warnings.is_empty() {
                ul.warnings {
                    @for warning in &rendered.warnings { li { span.badge.warn { "Warning" } " " (warning) } }
                }
            }
        }
        @if configured(bundle) {
            p #configuration {
                "Configuration " code { (status.config_digest.as_deref().unwrap_or("-")) }
                @if sources.is_empty() {
                    " (none given: an empty mapping)"
                } @else {
                    " from "
                    @for (i, source) in sources.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (source) }
                    }
                    " (later ones win)"
                }
            }
        }
        @if let Some(changed) = config_changed_text(&status) {
            p #config-changed.changed-config {
                span.badge.warn { "Configuration changed" } " " (changed)
            }
        }
    }
}

/// The digest at a glance: what rendered it, what it changes, how much needs attention, who
/// applies it.
fn review_summary(
    bundle: &Bundle,
    changes: &anyhow::Result<Vec<ObjectChange>>,
    permissions: Option<&RequestedPermissions>,
) -> Markup {
    let flagged = permissions.map_or(0, |p| p.highlights.len());
    html! {
        section.card #summary aria-label="Summary" {
            h2 { "Summary" }
            @if let Some(version) = gantry_rules::version_range::version_line(bundle) {
                p #version { "Version: " (version) }
            }
            (rendering(bundle))
            @if let Ok(changes) = changes {
                p {
                    strong { (changes.len()) " objects" } ": "
                    @for (i, (change, label)) in [
                        (Change::Created, "new"),
                        (Change::Changed, "changed"),
                        (Change::Pruned, "pruned"),
                        (Change::Unchanged, "unchanged"),
                        (Change::Failed, "not compared"),
                    ].into_iter().filter(|(change, _)| count(changes, *change) > 0).enumerate() {
                        @if i > 0 { ", " }
                        (count(changes, change)) " " (label)
                    }
                    @let crds = changes.iter().filter(|c| c.crd.is_some()).count();
                    @if crds > 0 { "; " (crds) " CustomResourceDefinitions" }
                }
            }
            p {
                @if flagged > 0 {
                    span.badge.warn { "Needs attention: " (flagged) } " listed under Needs attention"
                } @else {
                    "Nothing among the requested permissions needs particular attention."
                }
            }
            @if let Some(p) = permissions { (applied_as(p)) }
        }
    }
}

fn decision(name: &str, digest: &str, session: &Session) -> Markup {
    html! {
        section.card #decide aria-label="Decision" {
            h2 { "Decide on " code { (digest) } }
            p.hint { "The decision applies to this digest only; a new digest needs a new one." }
            div.decide {
                form method="post" action={ "/bundles/" (name) "/approve" } {
                    input type="hidden" name="csrf" value=(session.csrf);
                    input type="hidden" name="digest" value=(digest);
                    label for="approve-reason" { "Reason (optional)" }
                    textarea #approve-reason name="reason" maxlength="1024" {}
                    button.primary #approve type="submit" { "Approve" }
                }
                form method="post" action={ "/bundles/" (name) "/deny" } {
                    input type="hidden" name="csrf" value=(session.csrf);
                    input type="hidden" name="digest" value=(digest);
                    label for="deny-reason" { "Reason (required)" }
                    textarea #deny-reason name="reason" maxlength="1024" required {}
                    button.danger #deny type="submit" { "Deny" }
                }
            }
        }
    }
}

/// The review's content once the digest is unpacked: the decision with what it is about at
/// the top, so that no object's content stands between the reader and the buttons; the
/// bundle's state, the permissions and the changes below.
fn review_content(
    bundle: &Bundle,
    digest: &str,
    changes: &anyhow::Result<Vec<ObjectChange>>,
    session: &Session,
) -> Markup {
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let requested = status.requested_permissions.as_ref();
    html! {
        div.review-top {
            (review_summary(bundle, changes, requested))
            (decision(&name, digest, session))
            (highlights(requested))
        }
        (state_panel(bundle))
        (permissions(requested))
        (changes_section(changes, approval_state(&status) == "Pending"))
    }
}

pub async fn review(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Response {
    let (since, flash, bundle) = match open_bundle(&ui, &session, &name).await {
        Ok(opened) => opened,
        Err(page) => return page,
    };
    let status = bundle.status.clone().unwrap_or_default();
    let unpacked = is_true(&status.conditions, types::UNPACKED);
    let digest = resolved_digest(&status)
        .filter(|_| unpacked)
        .map(str::to_string);
    let changes = match &digest {
        Some(_) => Some(crate::commands::ui::changes::changes(&ui, &bundle).await),
        None => None,
    };
    let content = html! {
        p.crumbs { a href="/" { "Bundles" } " / " a href={ "/bundles/" (name) } { (name) } " /" }
        h1 { "Review " @if let Some(d) = &digest { code { (short(d)) } } " of " (name) }
        p #changed-notice.changed-notice.flash role="status" {
            "The bundle changed since this review was shown. A decision still applies to "
            (digest.as_deref().unwrap_or("-")) " only; reload to review what it is now."
        }
        @match (&digest, &changes) {
            (Some(digest), Some(changes)) => (review_content(&bundle, digest, changes, &session)),
            _ => {
                (state_panel(&bundle))
                p.card { "Bundle " (name) " is not unpacked yet: there is nothing to review." }
            }
        }
    };
    let live = Live {
        bundle: Some(&name),
        source: Some(format!("/bundles/{name}")),
        since: Some(since),
    };
    let title = format!("Review {name}");
    page(StatusCode::OK, layout(&ui, &title, live, flash, content))
}

#[cfg(test)]
mod tests {
    use super::super::diff::tests::prometheus_crd;
    use super::*;
    use crate::commands::ui::changes::Change;
    use gantry_api::{Bundle, BundleSpec, BundleStatus, PermissionHighlight};

    #[test]
    fn the_decision_and_the_highlights_come_before_the_content() {
        let mut bundle = Bundle::new(
            "prometheus-operator",
            BundleSpec {
                image: "r/prometheus-operator:v1".into(),
                ..Default::default()
            },
        );
        bundle.status = Some(BundleStatus {
            requested_permissions: Some(RequestedPermissions {
                highlights: [
                    ("rbac.authorization.k8s.io", "ClusterRole", "prometheus-operator", "grants verbs [*] on resources [alertmanagers,prometheuses] in groups [monitoring.coreos.com]"),
                    ("apiextensions.k8s.io", "CustomResourceDefinition", "alertmanagers.monitoring.coreos.com", "defines a new API"),
                    ("apiextensions.k8s.io", "CustomResourceDefinition", "prometheuses.monitoring.coreos.com", "defines a new API"),
                ]
                .map(|(group, kind, name, reason)| PermissionHighlight {
                    group: group.into(),
                    kind: kind.into(),
                    namespace: None,
                    name: name.into(),
                    reason: reason.into(),
                })
                .into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let changes = Ok((0..16)
            .map(|i| prometheus_crd(Change::Created, vec![format!("defines a new API {i}")]))
            .collect());
        let session = Session {
            id: "s".into(),
            csrf: "c".into(),
        };
        let html = review_content(&bundle, "sha256:aa", &changes, &session).into_string();
        let at = |id: &str| {
            html.find(&format!("id=\"{id}\""))
                .unwrap_or_else(|| panic!("#{id}"))
        };
        assert!(at("summary") < at("approve") && at("approve") < at("attention"));
        assert!(at("attention") < at("state") && at("state") < at("changes"));
        assert!(html.contains("<strong>16 objects</strong>: 16 new; 16 CustomResourceDefinitions"));
        // Objects of a kind flagged for one reason are one line.
        assert!(
            html.contains("<code>CustomResourceDefinition.apiextensions.k8s.io alertmanagers.monitoring.coreos.com, prometheuses.monitoring.coreos.com</code>: defines a new API</li>"),
            "{html}"
        );
        // The lists of a reason break between their items.
        assert!(
            html.contains("resources <span class=\"list\">[alertmanagers, prometheuses]</span>"),
            "{html}"
        );
    }

    #[test]
    fn the_summary_says_which_version_is_installed_and_which_waits() {
        let mut bundle = crate::commands::history::tests::ranged_bundle_waiting("^1");
        let html = review_summary(&bundle, &Ok(Vec::new()), None).into_string();
        assert!(
            html.contains("<p id=\"version\">Version: 1.4.2 installed, 1.5.0 waiting for approval (spec.ref.semver ^1)</p>"),
            "{html}"
        );
        bundle.spec.r#ref = None;
        let html = review_summary(&bundle, &Ok(Vec::new()), None).into_string();
        assert!(!html.contains("id=\"version\""), "{html}");
    }

    #[test]
    fn the_summary_names_the_rendering_and_marks_a_configuration_change() {
        let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let mut bundle = Bundle::new(
            "argocd",
            BundleSpec {
                image: "r/argocd-operator-bundle:v0.6.0".into(),
                config: Some(
                    serde_json::json!({ "watchNamespace": "argocd-system" })
                        .as_object()
                        .unwrap()
                        .clone(),
                ),
                config_from: serde_json::from_value(serde_json::json!([
                    { "kind": "Secret", "name": "operator-values", "optional": true },
                ]))
                .unwrap(),
                ..Default::default()
            },
        );
        let mut approval =
            gantry_api::Approval::of(gantry_api::ApprovalDecision::Approved, &digest('a'));
        approval.config_digest = Some(digest('c'));
        bundle.status = Some(BundleStatus {
            phase: Some(gantry_api::BundlePhase::AwaitingApproval),
            config_digest: Some(digest('d')),
            rendered: Some(gantry_api::Rendered {
                provisioner: "gantry.dev/registry".into(),
                version: "0.1.0".into(),
                source: Some("argocd-operator.v0.6.0".into()),
                input_digest: digest('e'),
                notes: None,
                warnings: vec!["<b>not bold</b>".into()],
            }),
            approval: Some(approval),
            ..Default::default()
        });
        let html = review_summary(&bundle, &Ok(Vec::new()), None).into_string();
        assert!(
            html.contains("<p id=\"rendered\">Rendered by <code>gantry.dev/registry 0.1.0</code> from <code>argocd-operator.v0.6.0</code></p>"),
            "{html}"
        );
        assert!(
            html.contains(&format!(
                "<p id=\"configuration\">Configuration <code>{}</code> from <code>Secret/operator-values[values.yaml] (optional)</code>, <code>spec.config</code> (later ones win)</p>",
                digest('d')
            )),
            "{html}"
        );
        assert!(
            html.contains("<p class=\"changed-config\" id=\"config-changed\"><span class=\"badge warn\">Configuration changed</span> the configuration changed since the last decision (decided with sha256:cccccccccccc, now sha256:dddddddddddd): awaiting a new one</p>"),
            "{html}"
        );
        assert!(html.contains("&lt;b&gt;not bold&lt;/b&gt;"), "{html}");
        assert!(!html.contains("argocd-system"), "never a value: {html}");
        let at = |text: &str| html.find(text).unwrap_or_else(|| panic!("{text}: {html}"));
        assert!(at("id=\"summary\"") < at("id=\"rendered\""));

        // Decided with this configuration: nothing marked.
        let status = bundle.status.as_mut().unwrap();
        status.approval.as_mut().unwrap().config_digest = Some(digest('d'));
        let html = review_summary(&bundle, &Ok(Vec::new()), None).into_string();
        assert!(
            html.contains("id=\"configuration\"") && !html.contains("config-changed"),
            "{html}"
        );

        // Plain content: nothing about rendering.
        let html = review_summary(
            &Bundle::new("plain", BundleSpec::default()),
            &Ok(Vec::new()),
            None,
        )
        .into_string();
        assert!(
            !html.contains("id=\"rendered\"") && !html.contains("id=\"configuration\""),
            "{html}"
        );
    }
}
