//! Tag lists: every page is read, following the `Link` headers, within the limits. The
//! registry here is a small stand-in on loopback that pages its tags two at a time unless
//! asked for another page size, as the distribution specification lets a registry do.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_image::{ImageError, RegistryClient, RegistryOptions, TagListing};

struct Fake {
    tags: Vec<String>,
    /// The `Link` target's origin: empty for a path on the same registry.
    link_origin: String,
    pages: AtomicUsize,
}

#[derive(serde::Deserialize)]
struct Page {
    n: Option<usize>,
    last: Option<String>,
}

async fn list(State(fake): State<Arc<Fake>>, Query(page): Query<Page>) -> Response {
    fake.pages.fetch_add(1, Ordering::SeqCst);
    let n = page.n.unwrap_or(2);
    let start = match &page.last {
        Some(last) => match fake.tags.iter().position(|t| t == last) {
            Some(i) => i + 1,
            None => return StatusCode::BAD_REQUEST.into_response(),
        },
        None => 0,
    };
    let tags: Vec<&String> = fake.tags.iter().skip(start).take(n).collect();
    let body = serde_json::json!({"name": "app", "tags": tags}).to_string();
    let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    if start + n < fake.tags.len()
        && let Some(last) = tags.last()
    {
        let link = format!(
            r#"<{}/v2/app/tags/list?last={last}&n={n}>; rel="next""#,
            fake.link_origin
        );
        response
            .headers_mut()
            .insert(header::LINK, link.parse().unwrap());
    }
    response
}

/// Links that name the stand-in's own origin.
const OWN: &str = "own";

async fn serve(count: usize, link_origin: &str) -> (String, Arc<Fake>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let fake = Arc::new(Fake {
        tags: (0..count).map(|i| format!("1.{i}.0")).collect(),
        link_origin: match link_origin {
            OWN => format!("http://{host}"),
            other => other.to_string(),
        },
        pages: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/v2/", get(|| async { "{}" }))
        .route("/v2/app/tags/list", get(list))
        .with_state(fake.clone());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (host, fake)
}

fn client(host: &str) -> RegistryClient {
    gantry_tests::init_crypto();
    RegistryClient::new(RegistryOptions {
        insecure_registries: vec![host.to_string()],
        ..Default::default()
    })
    .unwrap()
}

#[tokio::test]
async fn every_page_is_read() {
    let (host, fake) = serve(7, "").await;
    let tags = client(&host)
        .list_tags(&format!("{host}/app"), TagListing::default())
        .await
        .unwrap();
    assert_eq!(tags, fake.tags);
    assert_eq!(fake.pages.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_page_size_asked_for_is_used() {
    let (host, fake) = serve(7, "").await;
    let listing = TagListing {
        page_size: Some(3),
        ..Default::default()
    };
    let tags = client(&host)
        .list_tags(&format!("{host}/app:ignored"), listing)
        .await
        .unwrap();
    assert_eq!(tags, fake.tags);
    assert_eq!(fake.pages.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn absolute_links_on_the_registry_are_followed() {
    let (host, fake) = serve(5, OWN).await;
    let tags = client(&host)
        .list_tags(&format!("{host}/app"), TagListing::default())
        .await
        .unwrap();
    assert_eq!(tags, fake.tags);
}

#[tokio::test]
async fn links_to_another_host_are_refused() {
    let (host, _) = serve(5, "http://127.0.0.2:9").await;
    let error = client(&host)
        .list_tags(&format!("{host}/app"), TagListing::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ImageError::Registry { detail, .. } if detail.contains("is not on")),
        "{error}"
    );
}

#[tokio::test]
async fn the_limits_hold() {
    let (host, _) = serve(9, "").await;
    let few = TagListing {
        max_tags: 4,
        ..Default::default()
    };
    let error = client(&host)
        .list_tags(&format!("{host}/app"), few)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("more than 4 tags"), "{error}");
    let small = TagListing {
        max_bytes: 60,
        ..Default::default()
    };
    let error = client(&host)
        .list_tags(&format!("{host}/app"), small)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("more than 60 bytes"), "{error}");
}

#[tokio::test]
async fn a_missing_repository_is_not_found() {
    let (host, _) = serve(1, "").await;
    let error = client(&host)
        .list_tags(&format!("{host}/other"), TagListing::default())
        .await
        .unwrap_err();
    assert!(matches!(error, ImageError::NotFound { .. }), "{error}");
}
