//! HTTP routes: the bundle API, health endpoints and metrics.

use std::convert::Infallible;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures::StreamExt;
use futures::future::{BoxFuture, Either, Ready, ready};
use gantry_api::storage::{BUNDLES_PREFIX, BundleName, Digest, Listing, PutResponse, Target};
use http::header::{
    ACCEPT_RANGES, ALLOW, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    IF_NONE_MATCH, IF_RANGE, RANGE, WWW_AUTHENTICATE,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use hyper::body::Incoming;

use crate::auth::{Authorizer, Decision};
use crate::metrics::{AuthLabels, CONTENT_TYPE as METRICS_CONTENT_TYPE, Metrics};
use crate::range::{RangeOutcome, parse_range};
use crate::store::{Content, PutOutcome, Store, StoreError, TransferLimits};

type Request<B = Body> = http::Request<B>;

/// Chunk size when streaming a large body.
const STREAM_CHUNK: u64 = 128 * 1024;

pub struct AppState {
    pub store: Arc<Store>,
    /// `None` when authentication is disabled (`--insecure-no-auth`).
    pub auth: Option<Authorizer>,
    pub metrics: Arc<Metrics>,
    /// Set once the start-up check of the store is done.
    pub ready: AtomicBool,
    pub max_body_bytes: u64,
    /// How slow a download may be (uploads: the store's own copy).
    pub transfer: TransferLimits,
}

/// The HTTP service of one connection: every request is counted, then answered.
///
/// A GET or HEAD of a tarball held in the memory cache, by a client whose decision is cached
/// (or with authentication disabled), is answered in `call` itself, without a future to build,
/// move and box. Everything else runs as a future through the same checks.
#[derive(Clone)]
pub struct App {
    state: Arc<AppState>,
}

impl App {
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }
}

impl hyper::service::Service<Request<Incoming>> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        Ready<Result<Response, Infallible>>,
        BoxFuture<'static, Result<Response, Infallible>>,
    >;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let s = self.state.clone();
        let method = req.method().clone();
        if let Some(resp) = answer_from_memory(&s, &req) {
            s.metrics.count_request(&method, resp.status());
            return Either::Left(ready(Ok(resp)));
        }
        Either::Right(Box::pin(async move {
            let resp = route(&s, req.map(Body::new)).await;
            s.metrics.count_request(&method, resp.status());
            Ok(resp)
        }))
    }
}

async fn route(s: &Arc<AppState>, req: Request) -> Response {
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    match req.uri().path() {
        "/healthz" | "/readyz" | "/metrics" if !get => {
            let mut resp = StatusCode::METHOD_NOT_ALLOWED.into_response();
            resp.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET,HEAD"));
            resp
        }
        "/healthz" => healthz(),
        "/readyz" => readyz(s),
        "/metrics" => metrics(s),
        _ => bundles(s.clone(), req).await,
    }
}

fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut msg = msg.into();
    msg.push('\n');
    (
        status,
        [(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        msg,
    )
        .into_response()
}

fn healthz() -> Response {
    text(StatusCode::OK, "ok")
}

fn readyz(s: &AppState) -> Response {
    if s.ready.load(Ordering::Acquire) {
        text(StatusCode::OK, "ok")
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: checking stored tarballs",
        )
    }
}

fn metrics(s: &AppState) -> Response {
    (
        [(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE))],
        s.metrics.encode(),
    )
        .into_response()
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The outcome of [`preflight`].
enum Preflight {
    /// Go on with the target and the verb to authorise.
    Go(Target, &'static str),
    /// Refused before anything is read.
    Refused(Response),
}

/// What `/bundles/...` requests are checked for before anything is read: the path, the
/// method and readiness.
fn preflight(s: &AppState, method: &Method, path: &str) -> Preflight {
    if !path.starts_with(BUNDLES_PREFIX) || path == BUNDLES_PREFIX {
        return Preflight::Refused(text(
            StatusCode::NOT_FOUND,
            format!("no such endpoint: {path}"),
        ));
    }
    let target = match Target::parse(path) {
        Ok(t) => t,
        Err(e) => return Preflight::Refused(text(StatusCode::BAD_REQUEST, e.to_string())),
    };
    let verb = match (method, &target) {
        (&Method::GET | &Method::HEAD, _) => "get",
        (&Method::PUT, Target::Tarball(..)) => "put",
        (&Method::DELETE, _) => "delete",
        _ => {
            let allow = match target {
                Target::Bundle(_) => "GET, HEAD, DELETE",
                Target::Tarball(..) => "GET, HEAD, PUT, DELETE",
            };
            let mut resp = text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on {path}"),
            );
            resp.headers_mut()
                .insert(ALLOW, HeaderValue::from_static(allow));
            return Preflight::Refused(resp);
        }
    };
    if !s.ready.load(Ordering::Acquire) {
        return Preflight::Refused(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: checking stored tarballs",
        ));
    }
    Preflight::Go(target, verb)
}

/// Counts an authentication decision and turns a refusal into its answer (`None`: allowed).
fn enforce(
    s: &AppState,
    (decision, cached): (Decision, bool),
    path: &str,
    verb: &'static str,
) -> Option<Response> {
    s.metrics
        .auth_decisions
        .get_or_create(&AuthLabels {
            decision: decision.label(),
            cached,
        })
        .inc();
    match decision {
        Decision::Allowed { user } => {
            tracing::debug!(%user, path, verb, cached, "allowed");
            None
        }
        Decision::Unauthenticated { reason } => {
            tracing::info!(path, verb, %reason, "unauthenticated request");
            let mut resp = text(
                StatusCode::UNAUTHORIZED,
                format!("unauthenticated: {reason}"),
            );
            resp.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            Some(resp)
        }
        Decision::Forbidden { user, reason } => {
            tracing::info!(%user, path, verb, %reason, "forbidden request");
            Some(text(
                StatusCode::FORBIDDEN,
                format!("{user} may not {verb} {path}: {reason}"),
            ))
        }
    }
}

/// Answers a GET or HEAD of a tarball without waiting for anything: when the memory cache
/// holds it and authentication needs no review. `None`: the request goes through [`bundles`],
/// which makes the same checks in the same order.
fn answer_from_memory(s: &AppState, req: &Request<Incoming>) -> Option<Response> {
    let method = req.method();
    let head = match *method {
        Method::GET => false,
        Method::HEAD => true,
        _ => return None,
    };
    let path = req.uri().path();
    if !path.starts_with(BUNDLES_PREFIX) {
        return None;
    }
    let (bundle, digest, verb) = match preflight(s, method, path) {
        Preflight::Go(Target::Tarball(bundle, digest), verb) => (bundle, digest, verb),
        Preflight::Go(Target::Bundle(_), _) => return None,
        Preflight::Refused(refused) => return Some(refused),
    };
    if let Some(auth) = &s.auth {
        let known = auth.decided(bearer_token(req.headers()), path, verb)?;
        if let Some(refused) = enforce(s, known, path, verb) {
            return Some(refused);
        }
    }
    let content = s.store.cached_content(&bundle, &digest)?;
    Some(tarball_response(s, content, &digest, req.headers(), head))
}

/// Everything under `/bundles/`; paths are parsed from the raw request URI so that no
/// decoding or normalisation happens first.
async fn bundles(s: Arc<AppState>, req: Request) -> Response {
    let path = req.uri().path();
    let method = req.method().clone();
    let (target, verb) = match preflight(&s, &method, path) {
        Preflight::Go(target, verb) => (target, verb),
        Preflight::Refused(refused) => return refused,
    };
    if let Some(auth) = &s.auth {
        let token = bearer_token(req.headers());
        let known = match auth.check(token, path, verb).await {
            Ok(d) => d,
            Err(e) => {
                s.metrics
                    .auth_decisions
                    .get_or_create(&AuthLabels {
                        decision: "error",
                        cached: false,
                    })
                    .inc();
                tracing::warn!(error = %e, path, verb, "authentication unavailable");
                return text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("authentication unavailable: {e}"),
                );
            }
        };
        if let Some(refused) = enforce(&s, known, path, verb) {
            return refused;
        }
    }
    match (method, target) {
        (Method::GET, Target::Tarball(b, d)) => get_tarball(s, b, d, req.headers(), false).await,
        (Method::HEAD, Target::Tarball(b, d)) => get_tarball(s, b, d, req.headers(), true).await,
        (Method::HEAD, Target::Bundle(b)) => list(s, b, true).await,
        (Method::PUT, Target::Tarball(b, d)) => put(s, b, d, req).await,
        (Method::DELETE, Target::Tarball(b, d)) => delete_tarball(s, b, d).await,
        (Method::DELETE, Target::Bundle(b)) => delete_bundle(s, b).await,
        (_, Target::Bundle(b)) => list(s, b, false).await,
        (_, Target::Tarball(b, d)) => text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method not allowed on {b}/{d}.tar.gz"),
        ),
    }
}

fn store_error(e: StoreError) -> Response {
    let status = match &e {
        StoreError::TarballNotFound { .. } | StoreError::BundleNotFound(_) => StatusCode::NOT_FOUND,
        StoreError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        StoreError::DigestMismatch { .. } | StoreError::Body(_) => StatusCode::BAD_REQUEST,
        StoreError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
        StoreError::NoSpace { .. } => {
            tracing::error!(error = %e, "storage volume full");
            StatusCode::INSUFFICIENT_STORAGE
        }
        StoreError::Io { .. } | StoreError::NotADirectory(_) | StoreError::Task(_) => {
            tracing::error!(error = %e, "storage error");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    text(status, e.to_string())
}

/// Weak comparison (RFC 9110 8.8.3.2) of an `If-None-Match` list with our ETag.
fn none_match(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(|t| t.trim())
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

async fn get_tarball(
    s: Arc<AppState>,
    bundle: BundleName,
    digest: Digest,
    headers: &HeaderMap,
    head: bool,
) -> Response {
    let content = match s.store.open_content(&bundle, &digest).await {
        Ok(c) => c,
        Err(e) => return store_error(e),
    };
    tarball_response(&s, content, &digest, headers, head)
}

/// The answer to a GET or HEAD of a tarball whose content is at hand.
fn tarball_response(
    s: &AppState,
    content: Content,
    digest: &Digest,
    headers: &HeaderMap,
    head: bool,
) -> Response {
    // Built without the formatting machinery: this runs for every download.
    let mut etag = String::with_capacity(digest.as_str().len() + 2);
    etag.push('"');
    etag.push_str(digest.as_str());
    etag.push('"');
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let not_modified = header(IF_NONE_MATCH).is_some_and(|h| none_match(h, &etag));
    let size = content.size();
    // A Range applies only while the client's copy is still current (If-Range);
    // we have no Last-Modified, so a date in If-Range never matches.
    let range = match header(RANGE)
        .filter(|_| !not_modified && header(IF_RANGE).is_none_or(|v| v.trim() == etag))
        .map(|r| parse_range(r, size))
    {
        None | Some(RangeOutcome::Full) => Ok(None),
        Some(RangeOutcome::Partial { start, end }) => Ok(Some((start, end))),
        Some(RangeOutcome::Unsatisfiable) => Err(()),
    };
    let mut out = HeaderMap::with_capacity(8);
    let answer = |status, headers, body| {
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        resp
    };
    // A digest is hex, always a valid header value.
    if let Ok(v) = HeaderValue::try_from(etag) {
        out.insert(ETAG, v);
    }
    out.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if not_modified {
        return answer(StatusCode::NOT_MODIFIED, out, Body::empty());
    }
    let Ok(range) = range else {
        if let Ok(v) = HeaderValue::try_from(format!("bytes */{size}")) {
            out.insert(CONTENT_RANGE, v);
        }
        return answer(StatusCode::RANGE_NOT_SATISFIABLE, out, Body::empty());
    };
    let (start, len) = range.map_or((0, size), |(start, end)| (start, end - start + 1));
    out.insert(CONTENT_TYPE, HeaderValue::from_static("application/gzip"));
    let status = match range {
        Some((start, end)) => {
            if let Ok(v) = HeaderValue::try_from(format!("bytes {start}-{end}/{size}")) {
                out.insert(CONTENT_RANGE, v);
            }
            StatusCode::PARTIAL_CONTENT
        }
        None => StatusCode::OK,
    };
    out.insert(CONTENT_LENGTH, HeaderValue::from(len));
    let body = match content {
        _ if head => Body::empty(),
        Content::Whole(data) => {
            s.metrics.sent_bytes.inc_by(len);
            // Offsets are within `size`, which is `data.len()`.
            Body::from(data.slice(start as usize..(start + len) as usize))
        }
        Content::File { file, .. } => stream_file(file, start, len, s.metrics.clone(), s.transfer),
    };
    answer(status, out, body)
}

/// Streams `len` bytes from offset `start`, one blocking positional read per chunk.
///
/// The buffer is allocated on the async side and reused once hyper has written the
/// previous chunk, so a download costs at most two chunks of memory and the blocking
/// threads never allocate (which keeps glibc from spreading buffers over its arenas).
///
/// A client reading too slowly is cut off: hyper asks for the next chunk only once the
/// previous one is written, so a download still running past `transfer`'s deadline for its
/// length fails there (a client that reads nothing at all is cut off by the connection's
/// write timeout, since then nothing asks for a chunk).
fn stream_file(
    file: File,
    start: u64,
    len: u64,
    metrics: Arc<Metrics>,
    transfer: TransferLimits,
) -> Body {
    let buf = BytesMut::with_capacity(len.min(STREAM_CHUNK) as usize);
    let deadline = transfer.deadline(tokio::time::Instant::now(), len);
    let stream = futures::stream::try_unfold(
        (file, start, start + len, buf),
        move |(file, pos, end, mut buf)| async move {
            if pos >= end {
                return Ok(None);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "download slower than the minimum of {} bytes a second",
                        transfer.min_rate
                    ),
                ));
            }
            let n = (end - pos).min(STREAM_CHUNK) as usize;
            buf.clear();
            buf.reserve(n);
            buf.resize(n, 0);
            let (file, mut buf) = tokio::task::spawn_blocking(move || {
                let mut buf = buf;
                file.read_exact_at(&mut buf[..n], pos).map(|()| (file, buf))
            })
            .await
            .map_err(std::io::Error::other)??;
            let chunk = buf.split_to(n).freeze();
            Ok::<_, std::io::Error>(Some((chunk, (file, pos + n as u64, end, buf))))
        },
    )
    .inspect(move |chunk| {
        if let Ok(c) = chunk {
            metrics.sent_bytes.inc_by(c.len() as u64);
        }
    });
    Body::from_stream(stream)
}

async fn list(s: Arc<AppState>, bundle: BundleName, head: bool) -> Response {
    let tarballs = match s.store.list(&bundle).await {
        Ok(t) => t,
        Err(e) => return store_error(e),
    };
    let json = serde_json::to_vec(&Listing {
        bundle: bundle.to_string(),
        tarballs,
    })
    .unwrap_or_default();
    let len = json.len();
    let body = if head {
        Body::empty()
    } else {
        s.metrics.sent_bytes.inc_by(len as u64);
        Body::from(json)
    };
    Response::builder()
        .header(CONTENT_TYPE, "application/json")
        .header(CONTENT_LENGTH, len)
        .body(body)
        .unwrap_or_default()
}

async fn put(s: Arc<AppState>, bundle: BundleName, digest: Digest, req: Request) -> Response {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared.filter(|len| *len > s.max_body_bytes) {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body of {len} bytes is larger than the limit of {} bytes",
                s.max_body_bytes
            ),
        );
    }
    let metrics = s.metrics.clone();
    let body = req.into_body().into_data_stream().inspect(move |chunk| {
        if let Ok(c) = chunk {
            metrics.received_bytes.inc_by(c.len() as u64);
        }
    });
    match s.store.put(&bundle, &digest, body, s.max_body_bytes).await {
        Ok(PutOutcome { created, size }) => {
            tracing::info!(%bundle, %digest, size, created, "stored tarball");
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let json = serde_json::to_vec(&PutResponse {
                digest: digest.to_string(),
                size,
                created,
            })
            .unwrap_or_default();
            Response::builder()
                .status(status)
                .header(ETAG, format!("\"{digest}\""))
                .header(CONTENT_TYPE, "application/json")
                .body(Body::from(json))
                .unwrap_or_default()
        }
        Err(e) => {
            tracing::info!(%bundle, %digest, error = %e, "upload rejected");
            store_error(e)
        }
    }
}

async fn delete_tarball(s: Arc<AppState>, bundle: BundleName, digest: Digest) -> Response {
    match s.store.delete_tarball(&bundle, &digest).await {
        Ok(()) => {
            tracing::info!(%bundle, %digest, "deleted tarball");
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn delete_bundle(s: Arc<AppState>, bundle: BundleName) -> Response {
    match s.store.delete_bundle(&bundle).await {
        Ok(n) => {
            tracing::info!(%bundle, tarballs = n, "deleted bundle");
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => store_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer abc.def"));
        assert_eq!(bearer_token(&h), Some("abc.def"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("bearer  xyz "));
        assert_eq!(bearer_token(&h), Some("xyz"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic dXNlcjpw"));
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn if_none_match() {
        let etag = "\"abc\"";
        assert!(none_match("\"abc\"", etag));
        assert!(none_match("W/\"abc\"", etag));
        assert!(none_match("\"x\", \"abc\"", etag));
        assert!(none_match("*", etag));
        assert!(!none_match("\"abd\"", etag));
        assert!(!none_match("abc", etag));
    }
}
