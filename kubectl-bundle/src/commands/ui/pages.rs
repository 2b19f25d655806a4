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
    Bundle, BundleStatus, Condition, HistoryEntry, InventoryEntry, PermissionHighlight,
    RequestedPermissions,
};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::Ui;
use super::auth::{Flash, Session};
use super::changes::{Change, CrdSummary, ObjectChange};
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

/// A highlight's reason, its bracketed lists (`[get,list,watch]`) as lists that wrap between
/// their items.
fn reason_text(reason: &str) -> Markup {
    let mut pieces = Vec::new();
    let mut rest = reason;
    while let Some((text, tail)) = rest.split_once('[')
        && let Some((list, tail)) = tail.split_once(']')
    {
        pieces.push((text, Some(list)));
        rest = tail;
    }
    pieces.push((rest, None));
    html! {
        @for (text, list) in pieces {
            (text)
            @if let Some(list) = list {
                span.list { "[" @for (i, item) in list.split(',').enumerate() { @if i > 0 { ", " } (item) } "]" }
            }
        }
    }
}

/// What needs an approver's attention first: the highlights of the requested permissions,
/// objects of one kind flagged for the same reason (a bundle's CRDs, say) on one line.
fn highlights(permissions: Option<&RequestedPermissions>) -> Markup {
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

// --- the review of a pending digest ---------------------------------------------------------

/// Diffs longer than this many lines are folded: a CRD's schema, say, is thousands.
const OPEN_DIFF_LINES: usize = 200;

/// The prefix of the CRD upgrade check's findings among the highlights.
const UNSAFE_CRD: &str = "unsafe CRD upgrade: ";

fn size_text(bytes: usize) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

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

/// A new object as it would be created: the diff's added lines without their `+`, in one
/// text (a bundle's first install is all new objects, thousands of lines each for CRDs).
fn created_text(text: &str) -> Markup {
    let (head, body) = match text.split_once("\n@@ ") {
        Some((head, rest)) => (head, rest.split_once('\n').map_or("", |(_, body)| body)),
        None => (text, ""),
    };
    let mut object = String::with_capacity(body.len());
    for line in body.lines() {
        object.push_str(line.strip_prefix('+').unwrap_or(line));
        object.push('\n');
    }
    html! {
        @for note in head.lines().filter_map(|l| l.strip_prefix("# ")) { p.hint.note { (note) } }
        pre.object { (object) }
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

fn crd_versions(crd: &CrdSummary) -> String {
    let versions: Vec<String> = crd
        .versions
        .iter()
        .map(|(name, served, storage)| match (served, storage) {
            (true, true) => format!("{name} (served, storage)"),
            (true, false) => format!("{name} (served)"),
            (false, true) => format!("{name} (storage, not served)"),
            (false, false) => format!("{name} (not served)"),
        })
        .collect();
    versions.join(", ")
}

/// A CRD by the API it defines; for a changed one, the upgrade check's verdict.
fn crd_facts(crd: &CrdSummary, c: &ObjectChange, awaiting: bool) -> Markup {
    let unsafe_changes: Vec<&str> = c
        .attention
        .iter()
        .filter_map(|r| r.strip_prefix(UNSAFE_CRD))
        .collect();
    html! {
        dl.facts.crd {
            dt { "Group" } dd { code { (crd.group) } }
            dt { "Kind" } dd { code { (crd.kind) } " / " code { (crd.plural) } }
            dt { "Versions" } dd { (crd_versions(crd)) }
            dt { "Scope" } dd { (crd.scope) }
            @if c.change == Change::Changed && (awaiting || !unsafe_changes.is_empty()) {
                dt { "Upgrade check" }
                dd.verdict {
                    @if unsafe_changes.is_empty() {
                        span.badge.ok { "safe" } " no unsafe change found"
                    } @else {
                        span.badge.bad { "unsafe" }
                        ul { @for finding in &unsafe_changes { li { (finding) } } }
                    }
                }
            }
        }
    }
}

/// One object: a one-line summary (kind, name, namespace, size) that opens on what changes.
/// New objects, unchanged ones and long diffs start folded; a CRD shows the API it defines,
/// its schema only on demand.
fn object_change(c: &ObjectChange, awaiting: bool) -> Markup {
    let lines = c.text.lines().count();
    let open = match c.change {
        Change::Failed => true,
        Change::Changed | Change::Pruned => c.crd.is_some() || lines <= OPEN_DIFF_LINES,
        Change::Created | Change::Unchanged => false,
    };
    let text = html! {
        @if c.change == Change::Created { (created_text(&c.text)) } @else { (diff_lines(&c.text)) }
    };
    html! {
        details.diff open[open] {
            summary {
                (change_badge(c.change))
                @if !c.attention.is_empty() { span.badge.warn { "needs attention" } }
                span.title { (c.title) }
                span.meta {
                    @if c.size > 0 { (size_text(c.size)) }
                    @if c.size > 0 && lines > 0 { " · " }
                    @if lines > 0 { (lines) " lines" }
                }
                @if let Some(crd) = &c.crd {
                    span.meta { (crd.group) " · " (crd.kind) "/" (crd.plural) " · " (crd.scope) }
                }
            }
            @if !c.attention.is_empty() {
                ul.reasons { @for reason in &c.attention { li { (reason_text(reason)) } } }
            }
            @if let Some(crd) = &c.crd {
                div.body { (crd_facts(crd, c, awaiting)) }
                @if !c.text.is_empty() {
                    details.schema {
                        summary {
                            @if c.change == Change::Created { "Schema and definition" } @else { "The diff, schema included" }
                            " (" (lines) " lines)"
                        }
                        (text)
                    }
                }
            } @else if !c.text.is_empty() {
                (text)
            }
        }
    }
}

/// How many objects are in `change`.
fn count(changes: &[ObjectChange], change: Change) -> usize {
    changes.iter().filter(|c| c.change == change).count()
}

fn changes_section(changes: &anyhow::Result<Vec<ObjectChange>>, awaiting: bool) -> Markup {
    html! {
        section #changes aria-label="Changes" {
            h2 { "What it changes" }
            @match changes {
                Err(error) => div.flash.bad role="alert" {
                    "The diff could not be made: " (causes(error))
                },
                Ok(changes) => {
                    p.count {
                        (changes.len() - count(changes, Change::Unchanged)) " of " (changes.len())
                        " objects change; objects that need attention first. New objects and long diffs are folded: open them to read them."
                    }
                    @for c in changes { (object_change(c, awaiting)) }
                }
            }
        }
    }
}

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
            @if let Some(p) = permissions {
                p.hint {
                    @match &p.service_account {
                        Some(account) => { "Applied as ServiceAccount " code { (account.namespace) "/" (account.name) } },
                        None => "Applied with the provisioner's own identity.",
                    }
                }
            }
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
    use super::*;
    use gantry_api::BundleSpec;

    fn change(title: &str, change: Change, text: String) -> ObjectChange {
        ObjectChange {
            title: title.into(),
            change,
            size: text.len(),
            text,
            attention: Vec::new(),
            crd: None,
        }
    }

    /// A unified diff of `lines` lines, all added when `created`.
    fn diff_text(lines: usize, created: bool) -> String {
        let mut text = format!(
            "--- t (live)\n+++ t (after apply)\n@@ -{} +1,{lines} @@\n",
            if created { "0,0" } else { "1,1" }
        );
        for i in 0..lines {
            text.push_str(&format!("+  key{i}: value\n"));
        }
        text
    }

    fn prometheus_crd(change: Change, attention: Vec<String>) -> ObjectChange {
        ObjectChange {
            attention,
            crd: Some(CrdSummary {
                group: "monitoring.coreos.com".into(),
                kind: "Prometheus".into(),
                plural: "prometheuses".into(),
                scope: "Namespaced".into(),
                versions: vec![("v1".into(), true, true), ("v1alpha1".into(), false, false)],
            }),
            ..self::change(
                "CustomResourceDefinition prometheuses.monitoring.coreos.com",
                change,
                diff_text(11_371, change == Change::Created),
            )
        }
    }

    /// The `<details>` element of the object `title`, as rendered.
    fn details_of<'a>(html: &'a str, title: &str) -> &'a str {
        let at = html
            .find(title)
            .unwrap_or_else(|| panic!("{title} in {html}"));
        let start = html[..at].rfind("<details class=\"diff\"").unwrap();
        &html[start..at]
    }

    #[test]
    fn new_objects_and_long_diffs_are_folded_short_diffs_are_not() {
        let changes = Ok(vec![
            change("ConfigMap app/new", Change::Created, diff_text(3, true)),
            change(
                "ConfigMap app/short",
                Change::Changed,
                diff_text(OPEN_DIFF_LINES - 10, false),
            ),
            change(
                "ConfigMap app/long",
                Change::Changed,
                diff_text(OPEN_DIFF_LINES + 10, false),
            ),
            change("ConfigMap app/same", Change::Unchanged, String::new()),
        ]);
        let html = changes_section(&changes, true).into_string();
        assert!(
            !details_of(&html, "ConfigMap app/new").contains(" open"),
            "{html}"
        );
        assert!(
            details_of(&html, "ConfigMap app/short").contains(" open"),
            "{html}"
        );
        assert!(
            !details_of(&html, "ConfigMap app/long").contains(" open"),
            "{html}"
        );
        assert!(
            !details_of(&html, "ConfigMap app/same").contains(" open"),
            "{html}"
        );
        // The one-line summary names the size; a new object reads as it will be created.
        assert!(
            html.contains("ConfigMap app/new</span><span class=\"meta\">"),
            "{html}"
        );
        assert!(
            html.contains(&format!("{} lines", OPEN_DIFF_LINES + 10 + 3)),
            "{html}"
        );
        assert!(
            html.contains("<pre class=\"object\">  key0: value\n  key1: value\n"),
            "{html}"
        );
    }

    #[test]
    fn a_crd_shows_the_api_it_defines_and_its_schema_on_demand() {
        let html = changes_section(&Ok(vec![prometheus_crd(Change::Created, Vec::new())]), true)
            .into_string();
        for fact in [
            "monitoring.coreos.com",
            "<code>Prometheus</code> / <code>prometheuses</code>",
            "v1 (served, storage), v1alpha1 (not served)",
            "Namespaced",
        ] {
            assert!(html.contains(fact), "{fact} in the CRD's summary");
        }
        // Folded twice: the object, then its schema within it.
        assert!(!html.contains(" open>"), "{}", &html[..2000]);
        assert!(
            html.contains("<details class=\"schema\"><summary>Schema and definition (11374 lines)")
        );
        assert!(
            !html.contains("Upgrade check"),
            "a new CRD upgrades nothing"
        );

        // A changed CRD: open on its summary and the upgrade check's verdict, the diff folded.
        let finding = "prometheuses.monitoring.coreos.com v1 spec.versions[v1].schema.openAPIV3Schema.properties.spec.properties.color: property removed";
        let unsafe_crd = prometheus_crd(Change::Changed, vec![format!("{UNSAFE_CRD}{finding}")]);
        let html = changes_section(&Ok(vec![unsafe_crd]), true).into_string();
        assert!(
            html.contains("<details class=\"diff\" open>"),
            "{}",
            &html[..2000]
        );
        assert!(
            html.contains("<span class=\"badge bad\">unsafe</span>"),
            "{}",
            &html[..2000]
        );
        assert!(
            html.contains(&format!("<li>{finding}</li>")),
            "{}",
            &html[..2000]
        );
        assert!(html.contains("<details class=\"schema\"><summary>The diff"));
        let safe = changes_section(&Ok(vec![prometheus_crd(Change::Changed, Vec::new())]), true)
            .into_string();
        assert!(safe.contains("no unsafe change found"), "{}", &safe[..2000]);
    }

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

    /// The review of 2,000 objects, 5 MB of content, renders in time that docs/ui.md gives.
    #[test]
    fn the_changes_of_2000_objects_render() {
        let changes = Ok((0..2000)
            .map(|i| {
                change(
                    &format!("ConfigMap app/config-{i}"),
                    Change::Created,
                    diff_text(160, true),
                )
            })
            .collect::<Vec<_>>());
        let bytes: usize = changes.as_ref().unwrap().iter().map(|c| c.text.len()).sum();
        assert!(bytes > 5_000_000, "{bytes} bytes");
        let started = std::time::Instant::now();
        let html = changes_section(&changes, true).into_string();
        let took = started.elapsed();
        eprintln!(
            "2,000 objects, {} KiB of diffs: {} KiB of HTML in {took:?}",
            bytes / 1024,
            html.len() / 1024
        );
        assert_eq!(html.matches("<details class=\"diff\">").count(), 2000);
    }
}
