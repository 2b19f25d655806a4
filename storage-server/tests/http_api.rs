//! The bundle API against the real binary (authentication off, loopback).

mod common;

use std::os::unix::fs::symlink;

use common::*;
use http::{Method, StatusCode};

#[tokio::test]
async fn round_trip_head_and_idempotent_put() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    let data = content(10_000, 1);
    let path = tarball_path("demo", &data);
    let digest = sha256_hex(&data);

    assert_eq!(server.get(&path).await.status, StatusCode::NOT_FOUND);
    let put = server.put(&path, &data).await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.text());
    assert_eq!(put.json()["size"], 10_000);
    assert_eq!(
        dir.path()
            .join("demo")
            .join(format!("{digest}.tar.gz"))
            .metadata()
            .unwrap()
            .len(),
        10_000
    );

    let get = server.get(&path).await;
    assert_eq!(get.status, StatusCode::OK);
    assert_eq!(&get.body[..], &data[..]);
    assert_eq!(get.header("etag"), Some(format!("\"{digest}\"").as_str()));
    assert_eq!(get.header("content-length"), Some("10000"));
    assert_eq!(get.header("content-type"), Some("application/gzip"));

    let head = server.request(Method::HEAD, &path, &[], empty()).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), Some("10000"));
    assert_eq!(head.header("etag"), Some(format!("\"{digest}\"").as_str()));

    let etag = format!("\"{digest}\"");
    let cached = server
        .request(Method::GET, &path, &[("if-none-match", &etag)], empty())
        .await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert!(cached.body.is_empty());

    // Same digest again: accepted, nothing changes.
    let again = server.put(&path, &data).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());
    assert_eq!(again.json()["created"], false);
    assert_eq!(
        tree(dir.path()),
        vec!["demo".to_string(), format!("demo/{digest}.tar.gz")]
    );
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(1.0)
    );
    assert_eq!(
        server.metric("gantry_storage_stored_bytes").await,
        Some(10_000.0)
    );
    assert_eq!(
        server
            .metric("gantry_storage_http_requests_total{method=\"PUT\",code=\"201\"}")
            .await,
        Some(1.0)
    );
    assert!(
        server
            .metric("gantry_storage_http_received_bytes_total")
            .await
            .unwrap()
            >= 20_000.0
    );
    assert!(
        server
            .metric("gantry_storage_http_sent_bytes_total")
            .await
            .unwrap()
            >= 10_000.0
    );
}

#[tokio::test]
async fn large_tarball_streams_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    // Larger than the server's read-at-once threshold, sent chunked.
    let data = content(3 * 1024 * 1024 + 17, 2);
    let path = tarball_path("big", &data);
    let (tx, body) = channel_body();
    let sender = {
        let data = data.clone();
        tokio::spawn(async move {
            for chunk in data.chunks(100_000) {
                tx.send(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
            }
        })
    };
    let put = server.request(Method::PUT, &path, &[], body).await;
    sender.await.unwrap();
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.text());
    let get = server.get(&path).await;
    assert_eq!(get.status, StatusCode::OK);
    assert_eq!(get.body.len(), data.len());
    assert!(get.body[..] == data[..], "content differs");
    // A range crossing the server's streaming chunk boundary.
    let start = 256 * 1024 - 10;
    let end = 2 * 1024 * 1024;
    let range = format!("bytes={start}-{end}");
    let part = server
        .request(Method::GET, &path, &[("range", &range)], empty())
        .await;
    assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
    assert!(part.body[..] == data[start..=end], "range content differs");
}

#[tokio::test]
async fn digest_mismatch_and_size_cap_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--max-body-bytes", "1000"]);
    server.wait_ready().await;

    let data = content(500, 3);
    let wrong = tarball_path("demo", b"something else");
    let resp = server.put(&wrong, &data).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST);
    assert!(resp.text().contains(&sha256_hex(&data)), "{}", resp.text());

    // Over the cap, announced by Content-Length.
    let big = content(2000, 4);
    let resp = server.put(&tarball_path("demo", &big), &big).await;
    assert_eq!(resp.status, StatusCode::PAYLOAD_TOO_LARGE);

    // Over the cap, discovered while streaming a chunked body.
    let (tx, body) = channel_body();
    let sender = tokio::spawn(async move {
        for chunk in big.chunks(300) {
            if tx.send(bytes::Bytes::copy_from_slice(chunk)).await.is_err() {
                break;
            }
        }
    });
    let resp = server
        .request(
            Method::PUT,
            &tarball_path("demo", &content(2000, 4)),
            &[],
            body,
        )
        .await;
    assert_eq!(resp.status, StatusCode::PAYLOAD_TOO_LARGE);
    sender.await.unwrap();

    // No tarball and no temporary file anywhere: at most the empty bundle directory.
    let files: Vec<_> = tree(dir.path())
        .into_iter()
        .filter(|p| p != "demo")
        .collect();
    assert!(files.is_empty(), "left behind: {files:?}");
    let list = server.get("/bundles/demo").await;
    assert_eq!(list.json()["tarballs"], serde_json::json!([]));
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(0.0)
    );
}

#[tokio::test]
async fn concurrent_puts_of_the_same_digest() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    let data = content(2 * 1024 * 1024, 5);
    let path = tarball_path("demo", &data);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (addr, path, data) = (server.addr, path.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            send(addr, Method::PUT, &path, &[], full(&data))
                .await
                .status
        }));
    }
    let mut created = 0;
    for t in tasks {
        let status = t.await.unwrap();
        assert!(
            status == StatusCode::CREATED || status == StatusCode::OK,
            "{status}"
        );
        created += usize::from(status == StatusCode::CREATED);
    }
    assert_eq!(created, 1, "exactly one upload creates the tarball");
    let digest = sha256_hex(&data);
    assert_eq!(
        tree(dir.path()),
        vec!["demo".to_string(), format!("demo/{digest}.tar.gz")]
    );
    let get = server.get(&path).await;
    assert!(get.body[..] == data[..]);
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(1.0)
    );
    assert_eq!(
        server.metric("gantry_storage_stored_bytes").await,
        Some(data.len() as f64)
    );
}

#[tokio::test]
async fn range_requests() {
    // From the memory cache, and from the file with the cache off.
    range_requests_with(&[]).await;
    range_requests_with(&["--cache-bytes", "0"]).await;
}

async fn range_requests_with(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), args);
    server.wait_ready().await;
    let data = content(1000, 6);
    let path = tarball_path("demo", &data);
    assert_eq!(server.put(&path, &data).await.status, StatusCode::CREATED);
    let etag = format!("\"{}\"", sha256_hex(&data));

    let get = |headers: Vec<(&'static str, String)>| {
        let (server, path) = (&server, &path);
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.request(Method::GET, path, &h, empty()).await
        }
    };

    let r = get(vec![("range", "bytes=10-19".into())]).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(r.header("content-length"), Some("10"));
    assert_eq!(&r.body[..], &data[10..20]);

    let r = get(vec![("range", "bytes=-5".into())]).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.header("content-range"), Some("bytes 995-999/1000"));
    assert_eq!(&r.body[..], &data[995..]);

    let r = get(vec![("range", "bytes=990-".into())]).await;
    assert_eq!(&r.body[..], &data[990..]);

    let r = get(vec![("range", "bytes=1000-".into())]).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.header("content-range"), Some("bytes */1000"));

    // Several ranges: the header is ignored and the whole content sent.
    let r = get(vec![("range", "bytes=0-1,5-6".into())]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.len(), 1000);

    // If-Range: the range applies only while the ETag matches.
    let r = get(vec![
        ("range", "bytes=0-9".into()),
        ("if-range", etag.clone()),
    ])
    .await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    let r = get(vec![
        ("range", "bytes=0-9".into()),
        ("if-range", "\"other\"".into()),
    ])
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.len(), 1000);

    let head = server
        .request(Method::HEAD, &path, &[("range", "bytes=100-199")], empty())
        .await;
    assert_eq!(head.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(head.header("content-length"), Some("100"));
    assert!(head.body.is_empty());
}

#[tokio::test]
async fn answers_from_memory_match_answers_from_the_file() {
    // The same requests against a server that keeps small tarballs in memory (answered
    // without a disk read after the first) and one that reads the file every time.
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let memory = Server::start(dirs[0].path(), &[]);
    let file = Server::start(dirs[1].path(), &["--cache-bytes", "0"]);
    memory.wait_ready().await;
    file.wait_ready().await;
    let data = content(4096, 21);
    let path = tarball_path("demo", &data);
    let etag = format!("\"{}\"", sha256_hex(&data));
    for server in [&memory, &file] {
        assert_eq!(server.put(&path, &data).await.status, StatusCode::CREATED);
    }
    let ok = "gantry_storage_http_requests_total{method=\"GET\",code=\"200\"}";
    let not_modified = "gantry_storage_http_requests_total{method=\"GET\",code=\"304\"}";
    let sent = "gantry_storage_http_sent_bytes_total";
    // Each read of the metrics is itself a GET answered 200, counted once it is encoded.
    let ok_before = memory.metric(ok).await.unwrap_or(0.0) + 1.0;
    let sent_before = memory.metric(sent).await.unwrap_or(0.0);
    let ok_before = ok_before + 1.0;
    let requests: Vec<(Method, Vec<(&str, &str)>)> = vec![
        (Method::GET, vec![]),
        (Method::GET, vec![]),
        (Method::HEAD, vec![]),
        (Method::GET, vec![("if-none-match", etag.as_str())]),
        (Method::GET, vec![("range", "bytes=4000-")]),
        (Method::GET, vec![("range", "bytes=5000-")]),
        (Method::PUT, vec![]),
    ];
    for (method, headers) in &requests {
        let m = memory
            .request(method.clone(), &path, headers, empty())
            .await;
        let f = file.request(method.clone(), &path, headers, empty()).await;
        assert_eq!(m.status, f.status, "{method} {headers:?}");
        assert_eq!(m.body, f.body, "{method} {headers:?}");
        for name in [
            "etag",
            "accept-ranges",
            "content-type",
            "content-length",
            "content-range",
            "allow",
        ] {
            assert_eq!(
                m.header(name),
                f.header(name),
                "{name} of {method} {headers:?}"
            );
        }
    }
    // Answers from memory are counted like any other: two 200s, one 304, 2 x 4096 + 96 bytes.
    assert_eq!(memory.metric(ok).await, Some(ok_before + 2.0));
    assert_eq!(memory.metric(not_modified).await, Some(1.0));
    assert_eq!(
        memory.metric(sent).await,
        Some(sent_before + 2.0 * 4096.0 + 96.0)
    );
    // A tarball deleted is gone from memory too, and an upload brings it back.
    assert_eq!(memory.delete(&path).await.status, StatusCode::NO_CONTENT);
    assert_eq!(memory.get(&path).await.status, StatusCode::NOT_FOUND);
    assert_eq!(memory.put(&path, &data).await.status, StatusCode::CREATED);
    let again = memory.get(&path).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(&again.body[..], &data[..]);

    // Health endpoints and metrics answer GET and HEAD only.
    for endpoint in ["/healthz", "/readyz", "/metrics"] {
        let r = memory.request(Method::POST, endpoint, &[], empty()).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{endpoint}");
        assert_eq!(r.header("allow"), Some("GET,HEAD"), "{endpoint}");
        let r = memory.request(Method::HEAD, endpoint, &[], empty()).await;
        assert_eq!(r.status, StatusCode::OK, "{endpoint}");
    }
}

#[tokio::test]
async fn deleted_content_is_not_served_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    let data = content(1000, 13);
    let path = tarball_path("demo", &data);
    for _ in 0..2 {
        assert_eq!(server.put(&path, &data).await.status, StatusCode::CREATED);
        // Read twice: the second read may come from memory.
        for _ in 0..2 {
            let get = server.get(&path).await;
            assert_eq!(get.status, StatusCode::OK);
            assert_eq!(&get.body[..], &data[..]);
        }
        assert_eq!(server.delete(&path).await.status, StatusCode::NO_CONTENT);
        assert_eq!(server.get(&path).await.status, StatusCode::NOT_FOUND);
        let head = server.request(Method::HEAD, &path, &[], empty()).await;
        assert_eq!(head.status, StatusCode::NOT_FOUND);
    }
    assert_eq!(server.put(&path, &data).await.status, StatusCode::CREATED);
    assert_eq!(server.get(&path).await.status, StatusCode::OK);
    assert_eq!(
        server.delete("/bundles/demo").await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(server.get(&path).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn list_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    let a = content(100, 7);
    let b = content(200, 8);
    let other = content(300, 9);
    for (bundle, data) in [("demo", &a), ("demo", &b), ("other", &other)] {
        let r = server.put(&tarball_path(bundle, data), data).await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let mut want = vec![
        serde_json::json!({"digest": sha256_hex(&a), "size": 100}),
        serde_json::json!({"digest": sha256_hex(&b), "size": 200}),
    ];
    want.sort_by_key(|v| v["digest"].as_str().unwrap().to_owned());
    let list = server.get("/bundles/demo").await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.header("content-type"), Some("application/json"));
    assert_eq!(list.json()["bundle"], "demo");
    assert_eq!(list.json()["tarballs"], serde_json::Value::Array(want));
    assert_eq!(
        server.get("/bundles/never-stored").await.json()["tarballs"],
        serde_json::json!([])
    );

    // One tarball.
    assert_eq!(
        server.delete(&tarball_path("demo", &a)).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server.get(&tarball_path("demo", &a)).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.delete(&tarball_path("demo", &a)).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.get("/bundles/demo").await.json()["tarballs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A whole bundle; the other bundle is untouched.
    assert_eq!(
        server.delete("/bundles/demo").await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server.get(&tarball_path("demo", &b)).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.delete("/bundles/demo").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.get(&tarball_path("other", &other)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        tree(dir.path()),
        vec![
            "other".to_string(),
            format!("other/{}.tar.gz", sha256_hex(&other))
        ]
    );
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(1.0)
    );
    assert_eq!(
        server.metric("gantry_storage_stored_bytes").await,
        Some(300.0)
    );

    // Methods that mean nothing here.
    let r = server
        .request(Method::POST, &tarball_path("other", &other), &[], empty())
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    let r = server
        .request(Method::PUT, "/bundles/other", &[], empty())
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn traversal_attempts_never_touch_anything_outside_the_root() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = content(64, 10);
    let hex = sha256_hex(&secret);
    // A tarball-shaped file outside the root, at every place a traversal could aim.
    std::fs::write(outside.join(format!("{hex}.tar.gz")), &secret).unwrap();
    std::fs::write(base.path().join(format!("{hex}.tar.gz")), &secret).unwrap();
    let server = Server::start(&root, &[]);
    server.wait_ready().await;
    let before = tree(base.path());

    let long = "a".repeat(254);
    let very_long = "b".repeat(8000);
    let paths = [
        format!("/bundles/../outside/{hex}.tar.gz"),
        format!("/bundles/../{hex}.tar.gz"),
        format!("/bundles/..%2foutside/{hex}.tar.gz"),
        format!("/bundles/%2e%2e/{hex}.tar.gz"),
        format!("/bundles/%2E%2E/{hex}.tar.gz"),
        format!("/bundles/%2e%2e%2foutside/{hex}.tar.gz"),
        format!("/bundles/demo/..%2f..%2f{hex}.tar.gz"),
        format!("/bundles/demo/%2e%2e%2f%2e%2e%2foutside%2f{hex}.tar.gz"),
        format!("/bundles/demo/../../outside/{hex}.tar.gz"),
        format!("/bundles/./{hex}.tar.gz"),
        format!("/bundles//{hex}.tar.gz"),
        format!("/bundles/{}/{hex}.tar.gz", outside.display()),
        format!(
            "/bundles/%2f{}/{hex}.tar.gz",
            outside.display().to_string().trim_start_matches('/')
        ),
        format!("/bundles/outside%00/{hex}.tar.gz"),
        "/bundles/demo/%2e%2e".to_string(),
        format!("/bundles/{long}/{hex}.tar.gz"),
        format!("/bundles/{very_long}"),
        format!("/bundles/demo/{}.tar.gz", "c".repeat(300)),
        format!("/bundles/demo/{hex}{hex}.tar.gz"),
        format!("/bundles/demo%5c..%5c..%5coutside/{hex}.tar.gz"),
        "/bundles/..".to_string(),
        "/bundles/.".to_string(),
        "/bundles/".to_string(),
        "/bundles".to_string(),
        "//etc/passwd".to_string(),
        "/etc/passwd".to_string(),
        "/../../etc/passwd".to_string(),
    ];
    for path in &paths {
        for method in [Method::GET, Method::HEAD, Method::DELETE] {
            let r = server.request(method.clone(), path, &[], empty()).await;
            assert!(
                r.status == StatusCode::BAD_REQUEST || r.status == StatusCode::NOT_FOUND,
                "{method} {path}: {}",
                r.status
            );
        }
        // A body whose digest matches the name, so only the path could stop it.
        let r = server.put(path, &secret).await;
        assert!(
            r.status.is_client_error(),
            "PUT {path}: {} {}",
            r.status,
            r.text()
        );
    }

    // Request lines no client library would send.
    for raw in [
        format!("GET ../outside/{hex}.tar.gz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        format!(
            "GET http://127.0.0.1/bundles/../outside/{hex}.tar.gz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        ),
        "DELETE http://127.0.0.1/bundles/%2e%2e HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            .to_string(),
        "GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(),
    ] {
        let status = raw_status(server.addr, raw.as_bytes()).await;
        assert!(status == 400 || status == 404, "{raw:?} answered {status}");
    }

    assert_eq!(
        tree(base.path()),
        before,
        "something outside the API changed"
    );
    assert!(tree(&root).is_empty(), "the root gained {:?}", tree(&root));
    assert_eq!(
        std::fs::read(outside.join(format!("{hex}.tar.gz"))).unwrap(),
        secret
    );
}

#[tokio::test]
async fn symlinks_are_never_followed() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let secret = content(64, 11);
    let hex = sha256_hex(&secret);
    let target = outside.join(format!("{hex}.tar.gz"));
    std::fs::write(&target, &secret).unwrap();
    // A bundle directory that is a symlink, and a tarball that is one.
    symlink(&outside, root.join("linked")).unwrap();
    symlink(&target, root.join("demo").join(format!("{hex}.tar.gz"))).unwrap();

    let server = Server::start(&root, &[]);
    server.wait_ready().await;
    let path_linked = format!("/bundles/linked/{hex}.tar.gz");
    let path_demo = format!("/bundles/demo/{hex}.tar.gz");
    assert_eq!(server.get(&path_linked).await.status, StatusCode::NOT_FOUND);
    assert_eq!(server.get(&path_demo).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        server.get("/bundles/linked").await.json()["tarballs"],
        serde_json::json!([])
    );
    assert_eq!(
        server.get("/bundles/demo").await.json()["tarballs"],
        serde_json::json!([])
    );
    assert_eq!(
        server.delete(&path_linked).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.delete(&path_demo).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server.delete("/bundles/linked").await.status,
        StatusCode::NOT_FOUND
    );
    let other = content(10, 12);
    let r = server.put(&tarball_path("linked", &other), &other).await;
    assert!(
        !r.status.is_success(),
        "PUT through a symlinked bundle: {}",
        r.status
    );
    // The start-up check reported both links and left them alone.
    server.wait_for_log("ignoring unexpected entry").await;

    // Deleting the bundle holding a symlink removes the link, not its target.
    assert_eq!(
        server.delete("/bundles/demo").await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(tree(&outside), vec![format!("{hex}.tar.gz")]);
    assert_eq!(std::fs::read(&target).unwrap(), secret);
}

#[tokio::test]
async fn health_endpoints_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);
    assert_eq!(server.get("/readyz").await.status, StatusCode::OK);
    let m = server.get("/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    assert!(
        m.header("content-type")
            .unwrap()
            .contains("openmetrics-text"),
        "{:?}",
        m.header("content-type")
    );
    let text = m.text();
    for family in [
        "gantry_storage_http_requests_total",
        "gantry_storage_http_received_bytes_total",
        "gantry_storage_http_sent_bytes_total",
        "gantry_storage_stored_bytes",
        "gantry_storage_stored_tarballs",
        "gantry_storage_corrupt_tarballs_total",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    assert!(
        server
            .metric("gantry_storage_http_requests_total{method=\"GET\",code=\"200\"}")
            .await
            .unwrap()
            >= 2.0
    );
}

#[test]
fn authentication_is_required_unless_disabled() {
    // Without --insecure-no-auth the server needs Kubernetes credentials and says so.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gantry-storage"))
        .arg("--root")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
}
