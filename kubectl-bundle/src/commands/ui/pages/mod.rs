//! The pages, rendered on the server: the bundles list, one bundle, and the review of its
//! pending digest. Regions marked `data-live` are refreshed by the script when the watch says
//! the bundle changed. This module holds what they share: the layout, badges, the bundle read.

pub(super) mod bundle;
mod diff;
pub(super) mod list;
pub(super) mod review;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gantry_api::{Bundle, BundleStatus, Condition};
use gantry_rules::conditions::ConditionStatus;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use maud::{DOCTYPE, Markup, html};

use super::Ui;
use super::auth::{Flash, Session};
use crate::commands::{causes, cluster::read_bundle, output::age};

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

/// A condition's status as a coloured badge: True, False, Unknown or `-`.
fn status_badge(condition: Option<&Condition>) -> Markup {
    let Some(condition) = condition else {
        return html! { span.badge.none { "-" } };
    };
    let class = match ConditionStatus::from(condition) {
        ConditionStatus::True => "ok",
        ConditionStatus::False => "bad",
        ConditionStatus::Unknown => "warn",
    };
    html! { span class={ "badge " (class) } { (condition.status) } }
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

/// What a bundle's pages start from: the live watch's count of changes before the read, the
/// flash, and the bundle; or, when it cannot be read, the page that says why.
async fn open_bundle(
    ui: &Ui,
    session: &Session,
    name: &str,
) -> Result<(u64, Option<Flash>, Bundle), Response> {
    let since = ui.live.changes_seen();
    let flash = ui.auth.take_flash(session);
    let read = if super::valid_name(name) {
        read_bundle(&Api::all(ui.client.clone()), name)
            .await
            .map_err(anyhow::Error::from)
    } else {
        Err(anyhow::anyhow!("{name:?} is not a bundle name"))
    };
    match read {
        Ok(bundle) => Ok((since, flash, bundle)),
        Err(error) => Err(not_found(ui, name, error, flash)),
    }
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
