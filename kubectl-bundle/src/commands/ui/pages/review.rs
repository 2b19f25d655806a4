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
use crate::commands::review::{approval_state, resolved_digest, short};
use crate::commands::ui::changes::{Change, ObjectChange};
use crate::commands::ui::{Ui, auth::Session};

/// The digest at a glance: what it changes, how much needs attention, who applies it.
fn review_summary(
    changes: &anyhow::Result<Vec<ObjectChange>>,
    permissions: Option<&RequestedPermissions>,
) -> Markup {
    let flagged = permissions.map_or(0, |p| p.highlights.len());
    html! {
        section.card #summary aria-label="Summary" {
            h2 { "Summary" }
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
            (review_summary(changes, requested))
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
}
