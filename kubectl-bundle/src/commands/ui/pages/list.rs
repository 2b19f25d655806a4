//! The bundles list: filtered, paged, what awaits review first.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use gantry_api::conditions::types;
use gantry_api::{Bundle, BundleStatus};
use gantry_rules::conditions::{ConditionStatus, find, is_true};
use kube::ResourceExt;
use maud::{Markup, html};
use serde::Deserialize;

use super::{Live, layout, page, status_badge, when};
use crate::commands::review::{approval_state, class_name, resolved_digest, short};
use crate::commands::ui::{Ui, auth::Session};
use crate::commands::{causes, health};

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
    let ready = is_true(&status.conditions, types::READY);
    let phase = status.phase.map(|p| p.as_str()).unwrap_or("");
    match state {
        "review" => approval_state(status) == "Pending",
        "ready" => ready,
        "not-ready" => !ready,
        "unhealthy" => find(&status.conditions, types::HEALTHY)
            .is_some_and(|c| c.status != ConditionStatus::True),
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
    let message = find(&status.conditions, types::READY)
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
    let ready = find(&status.conditions, types::READY);
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
            td data-label="Healthy" { (status_badge(find(&status.conditions, types::HEALTHY))) }
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
