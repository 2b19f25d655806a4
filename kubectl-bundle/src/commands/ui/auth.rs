//! Who may use the page: requests to the served address only (Host), from the page itself
//! only (Origin), with the session cookie that the one-time token in the printed URL sets, and
//! a CSRF token in every form. What a signed-in user may then do is the API server's decision:
//! every request to it carries the user's own kubeconfig credentials.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};

use super::Ui;

/// A signed-in browser: its cookie value and the CSRF token its forms carry.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub csrf: String,
}

/// The outcome of an action, shown once on the next page.
#[derive(Clone, Debug)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

pub struct Auth {
    /// `host:port` values a request may name in `Host`.
    hosts: Vec<String>,
    /// The URL the page is served at, for messages.
    base: String,
    /// The cookie's name carries the port: browsers share cookies between the ports of a host.
    cookie: String,
    /// Given once; `None` once a browser exchanged it for a session.
    token: Mutex<Option<String>>,
    sessions: Mutex<HashMap<String, (String, Option<Flash>)>>,
}

fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Compares secrets in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Auth {
    /// The gate of the page served at `served`, and its one-time token.
    pub fn new(served: SocketAddr) -> (Self, String) {
        let mut hosts = vec![served.to_string()];
        if served.ip().is_loopback() {
            hosts.push(format!("localhost:{}", served.port()));
        }
        let token = random_hex();
        let auth = Self {
            base: format!("http://{}", hosts[0]),
            hosts,
            cookie: format!("gantry-ui-{}", served.port()),
            token: Mutex::new(Some(token.clone())),
            sessions: Mutex::new(HashMap::new()),
        };
        (auth, token)
    }

    /// The URL the page is served at (`http://127.0.0.1:PORT`).
    pub fn base(&self) -> &str {
        &self.base
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.hosts
            .iter()
            .any(|host| origin == format!("http://{host}"))
    }

    fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let jar = CookieJar::from_headers(headers);
        let id = jar.get(&self.cookie)?.value().to_string();
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .iter()
            .find(|(known, _)| same(known, &id))
            .map(|(id, (csrf, _))| Session {
                id: id.clone(),
                csrf: csrf.clone(),
            })
    }

    /// Exchanges the one-time token for a new session; `None` when it is not the token, or
    /// was used already.
    fn exchange(&self, given: &str) -> Option<Session> {
        let mut token = self.token.lock().unwrap_or_else(|e| e.into_inner());
        if !token.as_deref().is_some_and(|t| same(t, given)) {
            return None;
        }
        *token = None;
        let session = Session {
            id: random_hex(),
            csrf: random_hex(),
        };
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.id.clone(), (session.csrf.clone(), None));
        Some(session)
    }

    /// Whether a form's CSRF token is the session's.
    pub fn csrf_ok(&self, session: &Session, given: &str) -> bool {
        same(&session.csrf, given)
    }

    pub fn set_flash(&self, session: &Session, flash: Flash) {
        if let Some(entry) = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&session.id)
        {
            entry.1 = Some(flash);
        }
    }

    pub fn take_flash(&self, session: &Session) -> Option<Flash> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&session.id)
            .and_then(|entry| entry.1.take())
    }
}

/// A refusal: a status and a plain sentence saying why.
pub fn refuse(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

/// Checks Host, Origin and the session of every request; exchanges the token of the printed
/// URL for a session cookie and sends the browser on to the URL without it.
pub async fn guard(State(ui): State<Arc<Ui>>, mut request: Request, next: Next) -> Response {
    let mut response = match gate(&ui.auth, &mut request) {
        Some(stop) => stop,
        None => next.run(request).await,
    };
    secure(response.headers_mut());
    response
}

/// `Some(response)` when the request stops at the gate (refused, or the token exchanged).
fn gate(auth: &Auth, request: &mut Request) -> Option<Response> {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // A page of another site reaching this port through a DNS name of its own (DNS
    // rebinding) names that name here.
    if !auth.hosts.iter().any(|h| h == host) {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            format!(
                "refused: this page is served at {} only, and the request is for host {host:?}",
                auth.base
            ),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !auth.origin_allowed(origin) {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "refused: a request from origin {origin:?}; this page accepts requests from {} only",
                    auth.base
                ),
            ));
        }
    }
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    if let Some((_, token)) = query.iter().find(|(k, _)| k == "token") {
        let Some(session) = auth.exchange(token) else {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                "refused: this token is not valid, or was used already (each token signs in one browser once): run `kubectl bundle ui` again for a new URL".into(),
            ));
        };
        let rest: Vec<&(String, String)> = query.iter().filter(|(k, _)| k != "token").collect();
        let mut clean = request.uri().path().to_string();
        if !rest.is_empty() {
            clean.push('?');
            clean.push_str(
                &url::form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(rest)
                    .finish(),
            );
        }
        let cookie = Cookie::build((auth.cookie.clone(), session.id))
            .http_only(true)
            .same_site(SameSite::Strict)
            .path("/")
            .build();
        let mut response = Redirect::to(&clean).into_response();
        if let Ok(value) = HeaderValue::from_str(&cookie.to_string()) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        return Some(response);
    }
    match auth.session(headers) {
        Some(session) => {
            request.extensions_mut().insert(session);
            None
        }
        None => Some(refuse(
            StatusCode::UNAUTHORIZED,
            "not signed in: open the URL `kubectl bundle ui` printed, with its token".into(),
        )),
    }
}

/// Headers that keep the page to itself: no framing, no scripts or styles but its own, no
/// referrer to other sites, nothing cached.
fn secure(headers: &mut HeaderMap) {
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it, browsers send `Origin: null` on the page's own forms.
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_signs_in_once() {
        let (auth, token) = Auth::new("127.0.0.1:4000".parse().unwrap());
        assert_eq!(token.len(), 64);
        assert!(auth.exchange("wrong").is_none());
        let session = auth.exchange(&token).expect("the token signs in");
        assert!(auth.exchange(&token).is_none(), "once");
        assert!(auth.csrf_ok(&session, &session.csrf));
        assert!(!auth.csrf_ok(&session, "0000"));
        auth.set_flash(
            &session,
            Flash {
                ok: true,
                text: "done".into(),
            },
        );
        assert_eq!(
            auth.take_flash(&session).map(|f| f.text),
            Some("done".into())
        );
        assert!(auth.take_flash(&session).is_none(), "shown once");
    }

    #[test]
    fn only_the_served_address_is_a_host_or_origin() {
        let (auth, _) = Auth::new("127.0.0.1:4000".parse().unwrap());
        assert_eq!(auth.hosts, ["127.0.0.1:4000", "localhost:4000"]);
        assert!(auth.origin_allowed("http://127.0.0.1:4000"));
        assert!(auth.origin_allowed("http://localhost:4000"));
        assert!(!auth.origin_allowed("http://127.0.0.1:4001"));
        assert!(!auth.origin_allowed("https://127.0.0.1:4000"));
        assert!(!auth.origin_allowed("null"));
        let (other, _) = Auth::new("192.0.2.7:4000".parse().unwrap());
        assert_eq!(
            other.hosts,
            ["192.0.2.7:4000"],
            "localhost only on loopback"
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }
}
