//! The pages, rendered on the server: the bundles list, one bundle, and the review of its
//! pending digest. Regions marked `data-live` are refreshed by the script when the watch says
//! the bundle changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gantry_api::conditions::types;
use gantry_api::{
    Bundle, BundleStatus, Condition, HistoryEntry, InventoryEntry, RequestedPermissions,
};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::Ui;
use super::auth::{Flash, Session};
use super::changes::{Change, ObjectChange};
use crate::commands::cluster::get_bundle;
use crate::commands::output::age;
use crate::commands::review::{approval_state, class_name, decision_text, resolved_digest, short};
use crate::commands::{causes, health, history, inspect};

/// What the page's `<body>` tells the script.
#[derive(Default)]
struct Live<'a> {
    /// Only this bundle's changes refresh the page (all bundles' when `None`).
    bundle: Option<&'a str>,
    /// Where the live regions are fetched from (the page itself when `None`).
    source: Option<String>,
    /// The live watch's count of changes before the page read what it shows: a change after
    /// it that happened before the script listens still refreshes the page.
    since: Option<u64>,
}

fn layout(ui: &Ui, title: &str, live: Live, flash: Option<Flash>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Gantry" }
                link rel="stylesheet" href="/assets/ui.css";
                link rel="icon" href="/assets/favicon.svg" type="image/svg+xml";
                script src="/assets/ui.js" defer {}
            }
            body data-bundle=[live.bundle] data-live-src=[live.source] data-live-since=[live.since] {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { "Gantry" }
                    nav aria-label="Sections" { a href="/" { "Bundles" } }
                    span.server title="The API server, reached with your kubeconfig credentials" {
                        "as you on " (ui.server)
                    }
                }
                main #main {
                    @if let Some(flash) = flash {
                        div.flash.ok[flash.ok].bad[!flash.ok] role=(if flash.ok { "status" } else { "alert" }) #flash {
                            (flash.text)
                        }
                    }
                    (content)
                }
            }
        }
    }
}

fn page(status: StatusCode, markup: Markup) -> Response {
    (status, markup).into_response()
}

fn condition<'a>(status: &'a BundleStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// A condition's status as a coloured badge: True, False, Unknown or `-`.
fn status_badge(condition: Option<&Condition>) -> Markup {
    match condition.map(|c| c.status.as_str()) {
        Some("True") => html! { span.badge.ok { "True" } },
        Some("False") => html! { span.badge.bad { "False" } },
        Some(other) => html! { span.badge.warn { (other) } },
        None => html! { span.badge.none { "-" } },
    }
}

fn phase_badge(status: &BundleStatus) -> Markup {
    let phase = status.phase.map(|p| p.as_str()).unwrap_or("Pending");
    let class = match phase {
        "Installed" => "ok",
        "Failing" | "UpdateFailing" | "Denied" => "bad",
        _ => "warn",
    };
    html! { span class={ "badge " (class) } { (phase) } }
}

fn when(time: Timestamp) -> Markup {
    html! { time datetime=(time.to_string()) title=(time.to_string()) { (age(time)) " ago" } }
}

fn kind_of(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

// --- the bundles list -----------------------------------------------------------------------

#[derive(Deserialize, Default)]
pub struct Filter {
    #[serde(default)]
    q: String,
    #[serde(default)]
    class: String,
    #[serde(default)]
    state: String,
    /// 1-based.
    #[serde(default)]
    page: usize,
}

/// Rows per page of the list: a browser lays out a page of them in a few tens of
/// milliseconds, where thousands of rows take half a second.
const PAGE_ROWS: usize = 200;

impl Filter {
    /// The list's address with this filter, at `page`.
    fn href(&self, page: usize) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (key, value) in [
            ("q", &self.q),
            ("class", &self.class),
            ("state", &self.state),
        ] {
            if !value.is_empty() {
                query.append_pair(key, value);
            }
        }
        query.append_pair("page", &page.to_string());
        format!("/?{}", query.finish())
    }
}

/// The states the list filters on: value, label, test.
const STATES: [(&str, &str); 8] = [
    ("", "Any state"),
    ("review", "Awaiting review"),
    ("ready", "Ready"),
    ("not-ready", "Not ready"),
    ("unhealthy", "Not healthy"),
    ("failing", "Failing"),
    ("denied", "Denied"),
    ("suspended", "Suspended"),
];

fn in_state(bundle: &Bundle, status: &BundleStatus, state: &str) -> bool {
    let ready = condition(status, types::READY).map(|c| c.status.as_str());
    let phase = status.phase.map(|p| p.as_str()).unwrap_or("");
    match state {
        "review" => approval_state(status) == "Pending",
        "ready" => ready == Some("True"),
        "not-ready" => ready != Some("True"),
        "unhealthy" => condition(status, types::HEALTHY).is_some_and(|c| c.status != "True"),
        "failing" => matches!(phase, "Failing" | "UpdateFailing"),
        "denied" => phase == "Denied",
        "suspended" => bundle.spec.suspend,
        _ => true,
    }
}

fn matches_text(bundle: &Bundle, status: &BundleStatus, text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    let text = text.to_lowercase();
    let message = condition(status, types::READY)
        .map(|c| c.message.as_str())
        .unwrap_or("");
    [
        bundle.name_any().as_str(),
        bundle.spec.image.as_str(),
        status.resolved_image.as_deref().unwrap_or(""),
        message,
    ]
    .iter()
    .any(|field| field.to_lowercase().contains(&text))
}

pub async fn list(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Query(filter): Query<Filter>,
) -> Response {
    let since = ui.live.changes_seen();
    let flash = ui.auth.take_flash(&session);
    let bundles = match ui.live.bundles(&ui.client).await {
        Ok(bundles) => bundles,
        Err(error) => {
            let content = html! {
                h1 { "Bundles" }
                div.flash.bad role="alert" { (causes(&error)) }
            };
            return page(
                StatusCode::BAD_GATEWAY,
                layout(&ui, "Bundles", Live::default(), flash, content),
            );
        }
    };
    let mut classes: Vec<String> = bundles.iter().map(|b| class_name(b)).collect();
    classes.sort();
    classes.dedup();
    let total = bundles.len();
    let mut shown: Vec<(&Bundle, BundleStatus)> = bundles
        .iter()
        .map(|b| (b.as_ref(), b.status.clone().unwrap_or_default()))
        .filter(|(b, s)| {
            (filter.class.is_empty() || class_name(b) == filter.class)
                && in_state(b, s, &filter.state)
                && matches_text(b, s, filter.q.trim())
        })
        .collect();
    // What waits for a reviewer comes first.
    shown.sort_by_key(|(b, s)| (approval_state(s) != "Pending", b.name_any()));
    let matching = shown.len();
    let pages = matching.div_ceil(PAGE_ROWS).max(1);
    let page_number = filter.page.clamp(1, pages);
    let from = (page_number - 1) * PAGE_ROWS;
    let rows = &shown[from..matching.min(from + PAGE_ROWS)];
    let awaiting = bundles
        .iter()
        .filter(|b| approval_state(&b.status.clone().unwrap_or_default()) == "Pending")
        .count();
    let content = html! {
        h1 { "Bundles" }
        form.card.filters method="get" action="/" role="search" {
            label.grow {
                "Search (press /)"
                input #filter-text type="search" name="q" value=(filter.q)
                    placeholder="name, image or message";
            }
            label {
                "Class"
                select name="class" data-autosubmit {
                    option value="" selected[filter.class.is_empty()] { "Any class" }
                    @for class in &classes {
                        option value=(class) selected[*class == filter.class] { (class) }
                    }
                }
            }
            label {
                "State"
                select name="state" data-autosubmit {
                    @for (value, label) in STATES {
                        option value=(value) selected[value == filter.state] { (label) }
                    }
                }
            }
            button.primary type="submit" { "Filter" }
        }
        section #bundles data-live {
            p.count {
                (matching) " of " (total) " bundles match"
                @if pages > 1 {
                    " · showing " (from + 1) "–" (from + rows.len()) ", page " (page_number) " of " (pages)
                }
                @if awaiting > 0 {
                    " · " a href="/?state=review" { (awaiting) " awaiting review" }
                }
            }
            @if shown.is_empty() {
                p.card { "No bundle matches." }
            } @else {
                div.card {
                    table.stack {
                        thead {
                            tr {
                                th scope="col" { "Name" }
                                th scope="col" { "Ready" }
                                th scope="col" { "Healthy" }
                                th scope="col" { "Class" }
                                th scope="col" { "Digest" }
                                th scope="col" { "Age" }
                                th scope="col" { "Message" }
                            }
                        }
                        tbody {
                            @for (bundle, status) in rows {
                                (list_row(bundle, status))
                            }
                        }
                    }
                }
                @if pages > 1 {
                    nav.pager aria-label="Pages" {
                        @if page_number > 1 {
                            a #previous-page href=(filter.href(page_number - 1)) rel="prev" { "← Previous" }
                        }
                        span { "Page " (page_number) " of " (pages) }
                        @if page_number < pages {
                            a #next-page href=(filter.href(page_number + 1)) rel="next" { "Next →" }
                        }
                    }
                }
            }
        }
    };
    let live = Live {
        since: Some(since),
        ..Live::default()
    };
    page(StatusCode::OK, layout(&ui, "Bundles", live, flash, content))
}

fn list_row(bundle: &Bundle, status: &BundleStatus) -> Markup {
    let name = bundle.name_any();
    let ready = condition(status, types::READY);
    let digest = resolved_digest(status);
    let message = ready
        .map(|c| health::table_message(c).to_string())
        .unwrap_or_default();
    html! {
        tr {
            td data-label="Name" {
                span {
                    a href={ "/bundles/" (name) } { (name) }
                    @if approval_state(status) == "Pending" {
                        a.badge.warn.review-link href={ "/bundles/" (name) "/review" } { "Review" }
                    }
                    @if bundle.spec.suspend { " " span.badge.none { "suspended" } }
                }
            }
            td data-label="Ready" { (status_badge(ready)) }
            td data-label="Healthy" { (status_badge(condition(status, types::HEALTHY))) }
            td data-label="Class" { (class_name(bundle)) }
            td data-label="Digest" {
                @match digest {
                    Some(d) => code title=(d) { (short(d)) },
                    None => span { "-" },
                }
            }
            td data-label="Age" {
                @match bundle.creation_timestamp() {
                    Some(t) => (when(t.0)),
                    None => "-",
                }
            }
            td.message data-label="Message" { (message) }
        }
    }
}

// --- one bundle -----------------------------------------------------------------------------

/// The bundle's state at a glance; live on the bundle and review pages.
fn state_panel(bundle: &Bundle) -> Markup {
    let status = bundle.status.clone().unwrap_or_default();
    let name = bundle.name_any();
    let ready = condition(&status, types::READY);
    html! {
        section.card #state data-live aria-label="State" {
            div.grid {
                dl.facts {
                    dt { "Phase" } dd { (phase_badge(&status)) }
                    dt { "Ready" } dd { (status_badge(ready)) " " (ready.map(|c| c.reason.as_str()).unwrap_or("")) }
                    dt { "Healthy" } dd { (status_badge(condition(&status, types::HEALTHY))) }
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
                    li.ok[c.status == "True"].bad[c.status == "False"] {
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

fn permissions(permissions: Option<&RequestedPermissions>) -> Markup {
    let Some(p) = permissions else {
        return html! {
            section.card #permissions {
                h2 { "Requested permissions" }
                p.hint { "Not known until the content is unpacked." }
            }
        };
    };
    html! {
        @if !p.highlights.is_empty() {
            section.card.attention #attention aria-label="Needs attention" {
                h2 { "Needs attention" }
                ul {
                    @for h in &p.highlights {
                        li {
                            code {
                                (kind_of(&h.group, &h.kind)) " "
                                @if let Some(ns) = &h.namespace { (ns) "/" }
                                (h.name)
                            }
                            ": " (h.reason)
                        }
                    }
                }
            }
        }
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
            p.hint {
                @match &p.service_account {
                    Some(account) => { "Applied as ServiceAccount " code { (account.namespace) "/" (account.name) } },
                    None => "Applied with the provisioner's own identity.",
                }
            }
        }
    }
}

/// The inventory by namespace, each object with the health the `Healthy` condition gives it.
fn objects(status: &BundleStatus) -> Markup {
    let healthy = condition(status, types::HEALTHY);
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
        let title = match &entry.namespace {
            Some(ns) => format!("{kind} {ns}/{}", entry.name),
            None => format!("{kind} {}", entry.name),
        };
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

/// When an Event last happened.
fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or(event.last_timestamp.as_ref().map(|t| t.0))
        .or(event.event_time.as_ref().map(|t| t.0))
        .or(event.metadata.creation_timestamp.as_ref().map(|t| t.0))
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

async fn read_bundle(ui: &Ui, name: &str) -> Result<Bundle, anyhow::Error> {
    if !super::valid_name(name) {
        anyhow::bail!("{name:?} is not a bundle name");
    }
    get_bundle(&Api::all(ui.client.clone()), name).await
}

fn not_found(ui: &Ui, name: &str, error: anyhow::Error, flash: Option<Flash>) -> Response {
    let text = causes(&error);
    let status = if text.contains("not found") || text.contains("not a bundle name") {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::BAD_GATEWAY
    };
    let content = html! {
        p.crumbs { a href="/" { "Bundles" } }
        h1 { (name) }
        div.flash.bad role="alert" { (text) }
    };
    page(status, layout(ui, name, Live::default(), flash, content))
}

pub async fn bundle(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Response {
    let since = ui.live.changes_seen();
    let flash = ui.auth.take_flash(&session);
    let bundle = match read_bundle(&ui, &name).await {
        Ok(bundle) => bundle,
        Err(error) => return not_found(&ui, &name, error, flash),
    };
    let status = bundle.status.clone().unwrap_or_default();
    let events = inspect::bundle_events(&ui.client, &bundle, true).await;
    let content = html! {
        p.crumbs { a href="/" { "Bundles" } " /" }
        h1 { (name) }
        (state_panel(&bundle))
        div.grid {
            div { (timeline(&status)) (objects(&status)) }
            div { (permissions(status.requested_permissions.as_ref())) (history_section(&name, &status, &session)) }
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

// --- the review of a pending digest ---------------------------------------------------------

fn diff_lines(text: &str) -> Markup {
    html! {
        pre {
            @for line in text.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") || line.starts_with('#') {
                    "head"
                } else if line.starts_with("@@") {
                    "hunk"
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else {
                    ""
                };
                span class=(class) { (line) "\n" }
            }
        }
    }
}

fn change_badge(change: Change) -> Markup {
    let class = match change {
        Change::Created => "ok",
        Change::Changed => "warn",
        Change::Pruned | Change::Failed => "bad",
        Change::Unchanged => "none",
    };
    html! { span class={ "badge " (class) } { (change.label()) } }
}

fn changes_section(changes: anyhow::Result<Vec<ObjectChange>>) -> Markup {
    html! {
        section #changes aria-label="Changes" {
            h2 { "What it changes" }
            @match changes {
                Err(error) => div.flash.bad role="alert" {
                    "The diff could not be made: " (causes(&error))
                },
                Ok(changes) => {
                    @let changed = changes.iter().filter(|c| c.change != Change::Unchanged).count();
                    p.count { (changed) " of " (changes.len()) " objects change; objects that need attention first." }
                    @for c in &changes {
                        details.diff open[c.change != Change::Unchanged] {
                            summary {
                                (change_badge(c.change))
                                @if !c.attention.is_empty() { span.badge.warn { "needs attention" } }
                                span.title { (c.title) }
                                @for reason in &c.attention { span.reason { (reason) } }
                            }
                            @if !c.text.is_empty() { (diff_lines(&c.text)) }
                        }
                    }
                }
            }
        }
    }
}

pub async fn review(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Response {
    let since = ui.live.changes_seen();
    let flash = ui.auth.take_flash(&session);
    let bundle = match read_bundle(&ui, &name).await {
        Ok(bundle) => bundle,
        Err(error) => return not_found(&ui, &name, error, flash),
    };
    let status = bundle.status.clone().unwrap_or_default();
    let unpacked = condition(&status, types::UNPACKED).is_some_and(|c| c.status == "True");
    let digest = resolved_digest(&status)
        .filter(|_| unpacked)
        .map(str::to_string);
    let changes = match &digest {
        Some(_) => Some(super::changes::changes(&ui, &bundle).await),
        None => None,
    };
    let content = html! {
        p.crumbs { a href="/" { "Bundles" } " / " a href={ "/bundles/" (name) } { (name) } " /" }
        h1 { "Review " @if let Some(d) = &digest { code { (short(d)) } } " of " (name) }
        p #changed-notice.changed-notice.flash role="status" {
            "The bundle changed since this review was shown. A decision still applies to "
            (digest.as_deref().unwrap_or("-")) " only; reload to review what it is now."
        }
        (state_panel(&bundle))
        @match (&digest, changes) {
            (None, _) | (_, None) => p.card {
                "Bundle " (name) " is not unpacked yet: there is nothing to review."
            },
            (Some(digest), Some(changes)) => {
                (permissions(status.requested_permissions.as_ref()))
                (changes_section(changes))
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
    };
    let live = Live {
        bundle: Some(&name),
        source: Some(format!("/bundles/{name}")),
        since: Some(since),
    };
    let title = format!("Review {name}");
    page(StatusCode::OK, layout(&ui, &title, live, flash, content))
}
