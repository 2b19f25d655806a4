//! One bundle: its state, conditions, objects, permissions, history and Events.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use gantry_api::conditions::types;
use gantry_api::{
    Bundle, BundleStatus, Condition, HistoryEntry, InventoryEntry, PermissionHighlight,
    RequestedPermissions,
};
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use maud::{Markup, html};

use super::{Live, layout, open_bundle, page, phase_badge, reason_text, status_badge, when};
use crate::commands::review::{
    approval_state, class_name, decision_text, kind_of, resolved_digest, short,
};
use crate::commands::ui::{Ui, auth::Session};
use crate::commands::{causes, diff::object::title, health, history, inspect, inspect::last_seen};

/// The bundle's state at a glance; live on the bundle and review pages.
pub(super) fn state_panel(bundle: &Bundle) -> Markup {
    let status = bundle.status.clone().unwrap_or_default();
    let name = bundle.name_any();
    let ready = find(&status.conditions, types::READY);
    html! {
        section.card #state data-live aria-label="State" {
            div.grid {
                dl.facts {
                    dt { "Phase" } dd { (phase_badge(&status)) }
                    dt { "Ready" } dd { (status_badge(ready)) " " (ready.map(|c| c.reason.as_str()).unwrap_or("")) }
                    dt { "Healthy" } dd { (status_badge(find(&status.conditions, types::HEALTHY))) }
                    dt { "Approval" } dd #approval-state {
                        (approval_state(&status))
                        @if let Some(approval) = &status.approval {
                            br;
                            span.mono {
                                // A decision on another digest does not count for this one.
                                @if Some(approval.digest.as_str()) != resolved_digest(&status) { "Earlier: " }
                                (decision_text(approval))
                            }
                        }
                    }
                }
                dl.facts {
                    dt { "Image" } dd { code { (bundle.spec.image) } }
                    dt { "Resolved" } dd { code { (status.resolved_image.as_deref().unwrap_or("-")) } }
                    dt { "Installed" } dd { code { (status.installed_image.as_deref().unwrap_or("-")) } }
                    dt { "Class" } dd { (class_name(bundle)) }
                }
            }
            @if let Some(ready) = ready {
                p.lede #ready-message { (health::table_message(ready)) }
            }
            @if approval_state(&status) == "Pending" {
                a.button.primary href={ "/bundles/" (name) "/review" } { "Review " (resolved_digest(&status).map(short).unwrap_or_default()) }
            }
        }
    }
}

fn timeline(status: &BundleStatus) -> Markup {
    let mut conditions: Vec<&Condition> = status.conditions.iter().collect();
    conditions.sort_by_key(|c| std::cmp::Reverse(c.last_transition_time.0));
    html! {
        section.card #conditions data-live {
            h2 { "Conditions" }
            @if conditions.is_empty() {
                p.hint { "None yet." }
            }
            ol.timeline {
                @for c in conditions {
                    li.ok[c.status == ConditionStatus::True].bad[c.status == ConditionStatus::False] {
                        strong { (c.type_) } " " (status_badge(Some(c))) " "
                        span.mono { (c.reason) } " "
                        span.when { (when(c.last_transition_time.0)) }
                        @if !c.message.is_empty() { p.msg { (c.message) } }
                    }
                }
            }
        }
    }
}

/// What needs an approver's attention first: the highlights of the requested permissions,
/// objects of one kind flagged for the same reason (a bundle's CRDs, say) on one line.
pub(super) fn highlights(permissions: Option<&RequestedPermissions>) -> Markup {
    let Some(p) = permissions.filter(|p| !p.highlights.is_empty()) else {
        return html! {};
    };
    let mut grouped: Vec<(&PermissionHighlight, Vec<String>)> = Vec::new();
    for h in &p.highlights {
        let name = match &h.namespace {
            Some(ns) => format!("{ns}/{}", h.name),
            None => h.name.clone(),
        };
        match grouped
            .iter_mut()
            .find(|(g, _)| (&g.group, &g.kind, &g.reason) == (&h.group, &h.kind, &h.reason))
        {
            Some((_, names)) => names.push(name),
            None => grouped.push((h, vec![name])),
        }
    }
    html! {
        section.card.attention #attention aria-label="Needs attention" {
            h2 { "Needs attention (" (p.highlights.len()) ")" }
            ul {
                @for (h, names) in &grouped {
                    li {
                        code { (kind_of(&h.group, &h.kind)) " " (names.join(", ")) }
                        ": " (reason_text(&h.reason))
                    }
                }
            }
        }
    }
}

pub(super) fn permissions(permissions: Option<&RequestedPermissions>) -> Markup {
    let Some(p) = permissions else {
        return html! {
            section.card #permissions {
                h2 { "Requested permissions" }
                p.hint { "Not known until the content is unpacked." }
            }
        };
    };
    html! {
        section.card #permissions {
            h2 { "Requested permissions" }
            table.stack {
                thead { tr { th scope="col" { "Scope" } th scope="col" { "Kind" } th scope="col" { "Count" } } }
                tbody {
                    @for k in &p.cluster_scoped {
                        tr {
                            td data-label="Scope" { "cluster" }
                            td data-label="Kind" { code { (kind_of(&k.group, &k.kind)) } }
                            td data-label="Count" { (k.count) }
                        }
                    }
                    @for ns in &p.namespaced {
                        @for k in &ns.kinds {
                            tr {
                                td data-label="Scope" { "namespace " (ns.namespace) }
                                td data-label="Kind" { code { (kind_of(&k.group, &k.kind)) } }
                                td data-label="Count" { (k.count) }
                            }
                        }
                    }
                }
            }
            (applied_as(p))
        }
    }
}

/// Whose identity applies the objects.
pub(super) fn applied_as(p: &RequestedPermissions) -> Markup {
    html! {
        p.hint {
            @match &p.service_account {
                Some(account) => { "Applied as ServiceAccount " code { (account.namespace) "/" (account.name) } },
                None => "Applied with the provisioner's own identity.",
            }
        }
    }
}

/// The inventory by namespace, each object with the health the `Healthy` condition gives it.
fn objects(status: &BundleStatus) -> Markup {
    let healthy = find(&status.conditions, types::HEALTHY);
    let unhealthy = health::unhealthy_objects(status);
    let mut by_namespace: BTreeMap<Option<&str>, Vec<&InventoryEntry>> = BTreeMap::new();
    for entry in &status.inventory {
        by_namespace
            .entry(entry.namespace.as_deref())
            .or_default()
            .push(entry);
    }
    let health_of = |entry: &InventoryEntry| -> (Markup, Option<String>) {
        let kind = kind_of(&entry.group, &entry.kind);
        let title = title(&kind, entry.namespace.as_deref(), &entry.name);
        let why = unhealthy
            .iter()
            .find_map(|line| line.strip_prefix(&format!("{title}: ")));
        match (healthy, why) {
            (_, Some(why)) => (
                html! { span.badge.bad { "not healthy" } },
                Some(why.to_string()),
            ),
            (Some(_), None) => (html! { span.badge.ok { "healthy" } }, None),
            (None, None) => (html! { span.badge.none { "-" } }, None),
        }
    };
    html! {
        section.card #objects data-live {
            h2 { "Objects (" (status.inventory.len()) ")" }
            @if status.inventory.is_empty() {
                p.hint { "Nothing installed yet." }
            }
            ul.tree {
                @for (namespace, entries) in &by_namespace {
                    li {
                        strong { @match namespace { Some(ns) => { "namespace " (ns) }, None => "cluster-scoped" } }
                        ul {
                            @for entry in entries {
                                @let (badge, why) = health_of(entry);
                                li {
                                    (badge) " " code { (kind_of(&entry.group, &entry.kind)) "/" (entry.name) }
                                    @if let Some(why) = why { br; span.why { (why) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn history_section(name: &str, status: &BundleStatus, session: &Session) -> Markup {
    let entries: &[HistoryEntry] = &status.history;
    html! {
        section.card #history data-live {
            h2 { "History" }
            @if entries.is_empty() {
                p.hint { "Nothing installed yet." }
            } @else {
                table.stack {
                    thead { tr { th scope="col" { "Digest" } th scope="col" { "Installed" } th scope="col" { "Approval" } th scope="col" { span.skip { "Action" } } } }
                    tbody {
                        @for entry in entries {
                            @let current = status.installed_image.as_deref() == Some(entry.image.as_str());
                            tr {
                                td data-label="Digest" {
                                    code title=(entry.image) { (short(&entry.digest)) }
                                    @if current { " " span.badge.ok { "installed" } }
                                }
                                td data-label="Installed" { (when(entry.installed_at.0)) }
                                td data-label="Approval" { (history::approval(entry)) }
                                td data-label="" {
                                    @if !current {
                                        form method="post" action={ "/bundles/" (name) "/rollback" }
                                            data-confirm={ "Roll bundle " (name) " back to " (entry.digest) "? spec.image is pinned to it." } {
                                            input type="hidden" name="csrf" value=(session.csrf);
                                            input type="hidden" name="to" value=(entry.digest);
                                            button.small type="submit" { "Roll back to " (short(&entry.digest)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn events_section(events: anyhow::Result<Vec<Event>>) -> Markup {
    html! {
        section.card #events data-live {
            h2 { "Events" }
            @match events {
                Err(error) => p.hint { "Cannot list them: " (causes(&error)) },
                Ok(events) if events.is_empty() => p.hint { "None." },
                Ok(events) => {
                    table.stack {
                        thead { tr { th scope="col" { "Last seen" } th scope="col" { "Type" } th scope="col" { "Reason" } th scope="col" { "Object" } th scope="col" { "Message" } } }
                        tbody {
                            // The latest twenty, newest first.
                            @for e in events.iter().rev().take(20) {
                                tr {
                                    td data-label="Last seen" { @match last_seen(e) { Some(t) => (when(t)), None => "-" } }
                                    td data-label="Type" {
                                        @if e.type_.as_deref() == Some("Warning") { span.badge.warn { "Warning" } }
                                        @else { (e.type_.as_deref().unwrap_or("")) }
                                    }
                                    td data-label="Reason" { (e.reason.as_deref().unwrap_or("")) }
                                    td data-label="Object" {
                                        code { (e.involved_object.kind.as_deref().unwrap_or("").to_lowercase()) "/" (e.involved_object.name.as_deref().unwrap_or("")) }
                                    }
                                    td.message data-label="Message" { (e.message.as_deref().unwrap_or("")) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub async fn bundle(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Response {
    let (since, flash, bundle) = match open_bundle(&ui, &session, &name).await {
        Ok(opened) => opened,
        Err(page) => return page,
    };
    let status = bundle.status.clone().unwrap_or_default();
    let events = inspect::bundle_events(&ui.client, &bundle, true).await;
    let content = html! {
        p.crumbs { a href="/" { "Bundles" } " /" }
        h1 { (name) }
        (state_panel(&bundle))
        div.grid {
            div { (timeline(&status)) (objects(&status)) }
            div {
                (highlights(status.requested_permissions.as_ref()))
                (permissions(status.requested_permissions.as_ref()))
                (history_section(&name, &status, &session))
            }
        }
        (events_section(events))
    };
    let live = Live {
        bundle: Some(&name),
        source: None,
        since: Some(since),
    };
    page(StatusCode::OK, layout(&ui, &name, live, flash, content))
}
