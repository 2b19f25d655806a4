//! The page's actions, made with the user's credentials by the parts the plugin's commands are
//! made of: Approve and Deny decide as `kubectl bundle approve NAME --yes --digest D` and
//! `kubectl bundle deny NAME --digest D --reason R` do, Roll back pins as `kubectl bundle
//! rollback NAME --to D` does. So they write what those write and are refused where those are
//! (an Automatic class, a digest that moved, RBAC), with the same message.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use gantry_api::ApprovalDecision;
use serde::Deserialize;

use super::Ui;
use super::auth::{Flash, Session, refuse};
use crate::commands::decision::{self, DecisionError};
use crate::commands::{causes, rollback};

#[derive(Deserialize)]
pub struct Decision {
    csrf: String,
    /// The digest the review showed: the decision is refused if the bundle moved since.
    digest: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
pub struct Rollback {
    csrf: String,
    to: String,
}

/// Refuses a form whose CSRF token is not the session's, and names a bundle that cannot exist.
fn check(ui: &Ui, session: &Session, csrf: &str, name: &str) -> Option<Response> {
    if !ui.auth.csrf_ok(session, csrf) {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            "refused: the form's CSRF token is not this session's; reload the page and try again"
                .into(),
        ));
    }
    if !super::valid_name(name) {
        return Some(refuse(
            StatusCode::NOT_FOUND,
            format!("{name:?} is not a bundle name"),
        ));
    }
    None
}

/// Records the outcome for the next page and goes there: the bundle after a success, `back`
/// after a refusal.
fn outcome<T, E: std::error::Error + Send + Sync + 'static>(
    ui: &Ui,
    session: &Session,
    result: Result<T, E>,
    done: String,
    name: &str,
    back: String,
) -> Response {
    let (flash, to) = match result {
        Ok(_) => (
            Flash {
                ok: true,
                text: done,
            },
            format!("/bundles/{name}"),
        ),
        Err(error) => (
            Flash {
                ok: false,
                text: causes(&error.into()),
            },
            back,
        ),
    };
    ui.auth.set_flash(session, flash);
    Redirect::to(&to).into_response()
}

pub async fn approve(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    Form(form): Form<Decision>,
) -> Response {
    if let Some(refused) = check(&ui, &session, &form.csrf, &name) {
        return refused;
    }
    let reason = Some(form.reason.trim()).filter(|r| !r.is_empty());
    let approving = ApprovalDecision::Approved;
    let result = decision::record(&ui.client, &name, approving, Some(&form.digest), reason).await;
    let done = format!("Approved {} of bundle {name}", form.digest);
    let back = format!("/bundles/{name}/review");
    outcome(&ui, &session, result, done, &name, back)
}

pub async fn deny(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    Form(form): Form<Decision>,
) -> Response {
    if let Some(refused) = check(&ui, &session, &form.csrf, &name) {
        return refused;
    }
    let reason = form.reason.trim();
    let result = if reason.is_empty() {
        Err(DecisionError::NoReason)
    } else {
        let denying = ApprovalDecision::Denied;
        decision::record(&ui.client, &name, denying, Some(&form.digest), Some(reason)).await
    };
    let done = format!("Denied {} of bundle {name}: {reason}", form.digest);
    let back = format!("/bundles/{name}/review");
    outcome(&ui, &session, result, done, &name, back)
}

pub async fn rollback(
    State(ui): State<Arc<Ui>>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    Form(form): Form<Rollback>,
) -> Response {
    if let Some(refused) = check(&ui, &session, &form.csrf, &name) {
        return refused;
    }
    let result = rollback::roll_back(&ui.client, &name, Some(&form.to), false).await;
    let done = format!("Bundle {name} is pinned to {}: it rolls back now", form.to);
    let back = format!("/bundles/{name}");
    outcome(&ui, &session, result, done, &name, back)
}
