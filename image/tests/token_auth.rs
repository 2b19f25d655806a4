//! Token exchange: a registry that answers with a bearer challenge gets the credentials of
//! the docker config at its token endpoint, then the token. The registry here is a small
//! stand-in on loopback (the harness's docker-registry speaks basic auth only) that serves
//! one image and insists on the token for every request.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use base64::Engine;
use common::*;
use gantry_image::{Credential, DockerConfig, ImageError};

const TOKEN: &str = "token-for-app";

struct Fake {
    host: String,
    manifest: Vec<u8>,
    /// Serve an endless manifest instead, counting the bytes handed out.
    endless: bool,
    served: Arc<AtomicUsize>,
    blobs: Vec<(String, Vec<u8>)>,
    token_requests: AtomicUsize,
    /// Requests of `/v2/`, the probe for the challenge.
    probes: AtomicUsize,
    /// Bumped to revoke every token handed out so far.
    generation: AtomicUsize,
}

impl Fake {
    /// The token the registry accepts now, and its token endpoint hands out.
    fn token(&self) -> String {
        match self.generation.load(Ordering::SeqCst) {
            0 => TOKEN.to_string(),
            n => format!("{TOKEN}-{n}"),
        }
    }
}

fn challenge(fake: &Fake) -> Response {
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(
            header::WWW_AUTHENTICATE,
            format!(
                r#"Bearer realm="http://{}/token",service="fake-registry""#,
                fake.host
            ),
        )
        .body(Body::from(
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}"#,
        ))
        .unwrap()
}

fn has_token(fake: &Fake, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {}", fake.token()))
}

async fn base(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Response {
    fake.probes.fetch_add(1, Ordering::SeqCst);
    if has_token(&fake, &headers) {
        return Response::new(Body::from("{}"));
    }
    challenge(&fake)
}

async fn token(
    State(fake): State<Arc<Fake>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    fake.token_requests.fetch_add(1, Ordering::SeqCst);
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("robot:t0ken-pw")
    );
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(expected.as_str());
    let scoped = query.get("scope").map(String::as_str) == Some("repository:app:pull")
        && query.get("service").map(String::as_str) == Some("fake-registry");
    if !(authorized && scoped) {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .body(Body::from("bad credentials"))
            .unwrap();
    }
    Response::new(Body::from(format!(r#"{{"token":"{}"}}"#, fake.token())))
}

async fn serve_manifest(
    State(fake): State<Arc<Fake>>,
    Path(_reference): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !has_token(&fake, &headers) {
        return challenge(&fake);
    }
    if fake.endless {
        let served = fake.served.clone();
        let chunks = futures::stream::repeat_with(move || {
            served.fetch_add(64 << 10, Ordering::SeqCst);
            Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 64 << 10]))
        });
        return Response::new(Body::from_stream(chunks));
    }
    Response::builder()
        .header(
            header::CONTENT_TYPE,
            "application/vnd.oci.image.manifest.v1+json",
        )
        .header("Docker-Content-Digest", sha256(&fake.manifest))
        .body(Body::from(fake.manifest.clone()))
        .unwrap()
}

async fn serve_blob(
    State(fake): State<Arc<Fake>>,
    Path(digest): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !has_token(&fake, &headers) {
        return challenge(&fake);
    }
    match fake.blobs.iter().find(|(d, _)| *d == digest) {
        Some((_, data)) => Response::new(Body::from(data.clone())),
        None => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from(
                r#"{"errors":[{"code":"BLOB_UNKNOWN","message":"?"}]}"#,
            ))
            .unwrap(),
    }
}

/// Serves one image at `HOST/app:v1` (`foreign` adds a layer that only other hosts have).
async fn serve_image(foreign: Option<&str>) -> Arc<Fake> {
    serve_with(foreign, false).await
}

async fn serve_with(foreign: Option<&str>, endless: bool) -> Arc<Fake> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let layer = Tar::default().file("manifests/a.yaml", CONFIGMAP).gzip();
    let config =
        br#"{"os":"linux","architecture":"amd64","rootfs":{"type":"layers","diff_ids":[]}}"#
            .to_vec();
    let mut layers = vec![
        serde_json::json!({"mediaType": GZIP_LAYER, "digest": sha256(&layer), "size": layer.len()}),
    ];
    if let Some(url) = foreign {
        layers.push(serde_json::json!({
            "mediaType": GZIP_LAYER,
            "digest": sha256(b"elsewhere"),
            "size": 9,
            "urls": [url],
        }));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": layers,
    }))
    .unwrap();
    let fake = Arc::new(Fake {
        host,
        manifest,
        endless,
        served: Arc::new(AtomicUsize::new(0)),
        blobs: vec![(sha256(&config), config), (sha256(&layer), layer)],
        token_requests: AtomicUsize::new(0),
        probes: AtomicUsize::new(0),
        generation: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/v2/", get(base))
        .route("/token", get(token))
        .route("/v2/app/manifests/{reference}", get(serve_manifest))
        .route("/v2/app/blobs/{digest}", get(serve_blob))
        .with_state(fake.clone());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    fake
}

async fn serve() -> Arc<Fake> {
    serve_image(None).await
}

/// The docker config of user `robot` with its right password.
fn robot(host: &str) -> DockerConfig {
    robot_with_password(host, "t0ken-pw")
}

fn robot_with_password(host: &str, password: &str) -> DockerConfig {
    let mut credentials = DockerConfig::default();
    credentials.insert(
        host,
        Credential {
            username: "robot".into(),
            password: password.into(),
        },
    );
    credentials
}

#[tokio::test]
async fn layers_are_never_fetched_from_the_urls_a_manifest_names() {
    // A host that would serve the missing layer, and counts who asks.
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/blob", elsewhere.local_addr().unwrap());
    let contacted = Arc::new(AtomicUsize::new(0));
    let counter = contacted.clone();
    tokio::spawn(async move {
        while let Ok((_socket, _)) = elsewhere.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let fake = serve_image(Some(&url)).await;
    let host = fake.host.clone();
    match client_with(robot(&host), None, &[&host])
        .pull(&request(&format!("{host}/app:v1"), None))
        .await
    {
        Err(ImageError::NotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(contacted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn credentials_are_exchanged_for_a_bearer_token() {
    let fake = serve().await;
    let host = fake.host.clone();
    let bundle = client_with(robot(&host), None, &[&host])
        .pull(&request(&format!("{host}/app:v1"), None))
        .await
        .unwrap();
    assert_eq!(bundle.objects.len(), 1);
    assert_eq!(bundle.image.digest, sha256(&fake.manifest));
    assert!(fake.token_requests.load(Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn a_token_serves_every_request_of_its_repository_until_refused() {
    let fake = serve().await;
    let host = fake.host.clone();
    let client = client_with(robot(&host), None, &[&host]);
    let reference = format!("{host}/app:v1");
    for _ in 0..5 {
        let resolved = client.resolve(&reference).await.unwrap();
        assert_eq!(resolved.digest, sha256(&fake.manifest));
    }
    let bundle = client.pull(&request(&reference, None)).await.unwrap();
    assert_eq!(bundle.objects.len(), 1);
    // One probe and one token for five resolves and a pull, not one of each per request.
    assert_eq!(fake.probes.load(Ordering::SeqCst), 1);
    assert_eq!(fake.token_requests.load(Ordering::SeqCst), 1);

    // The registry revokes the token: the request it refuses fails, and the next one
    // authenticates again.
    fake.generation.fetch_add(1, Ordering::SeqCst);
    match client.resolve(&reference).await {
        Err(ImageError::AuthRefused { registry, .. }) => assert_eq!(registry, host),
        other => panic!("{other:?}"),
    }
    let resolved = client.resolve(&reference).await.unwrap();
    assert_eq!(resolved.digest, sha256(&fake.manifest));
    assert_eq!(fake.token_requests.load(Ordering::SeqCst), 2);
    client.pull(&request(&reference, None)).await.unwrap();
    assert_eq!(fake.token_requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_refused_token_request_is_an_authentication_error() {
    let fake = serve().await;
    let host = fake.host.clone();
    let reference = format!("{host}/app:v1");
    match client_with(robot_with_password(&host, "wrong"), None, &[&host])
        .pull(&request(&reference, None))
        .await
    {
        Err(ImageError::AuthRefused {
            registry,
            reference: r,
            ..
        }) => {
            assert_eq!(registry, host);
            assert_eq!(r, reference);
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.token_requests.load(Ordering::SeqCst) >= 1);
    // Anonymous: no token, so the registry refuses the manifest.
    match plain_client(&host).pull(&request(&reference, None)).await {
        Err(ImageError::AuthRefused { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_endless_manifest_is_cut_off() {
    let fake = serve_with(None, true).await;
    let host = fake.host.clone();
    match client_with(robot(&host), None, &[&host])
        .pull(&request(&format!("{host}/app:v1"), None))
        .await
    {
        Err(ImageError::InvalidManifest { reason, .. }) => {
            assert!(reason.contains("larger than"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Read up to the limit, plus what sits in buffers: nowhere near all of it.
    let served = fake.served.load(Ordering::SeqCst);
    assert!(served < 64 << 20, "served {served} bytes");
}
