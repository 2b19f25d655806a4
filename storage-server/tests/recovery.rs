//! Crash safety and the start-up check, with the real binary killed and restarted.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Method, StatusCode};

#[tokio::test]
async fn kill_during_upload_leaves_no_partial_file_and_keeps_earlier_content() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.wait_ready().await;

    let earlier = content(300_000, 20);
    let earlier_path = tarball_path("demo", &earlier);
    assert_eq!(
        server.put(&earlier_path, &earlier).await.status,
        StatusCode::CREATED
    );

    // A 64 MiB upload of which only the first 8 MiB ever arrive.
    let large = content(64 * 1024 * 1024, 21);
    let large_path = tarball_path("demo", &large);
    let (tx, body) = channel_body();
    let (addr, path) = (server.addr, large_path.clone());
    let upload = tokio::spawn(async move { try_send(addr, Method::PUT, &path, &[], body).await });
    for chunk in large[..8 * 1024 * 1024].chunks(256 * 1024) {
        tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    let bundle_dir = dir.path().join("demo");
    let temp = gantry_tests::wait_until(
        "the upload's temporary file to hold data",
        START_TIMEOUT,
        || {
            let bundle_dir = bundle_dir.clone();
            async move {
                std::fs::read_dir(&bundle_dir)
                    .ok()?
                    .flatten()
                    .find(|e| {
                        e.file_name().to_string_lossy().starts_with(".tmp-")
                            && e.metadata()
                                .map(|m| m.len() >= 1024 * 1024)
                                .unwrap_or(false)
                    })
                    .map(|e| e.path())
            }
        },
    )
    .await;

    server.kill();
    let outcome = upload.await.unwrap();
    assert!(
        outcome.is_err(),
        "the interrupted upload got an answer: {outcome:?}"
    );
    drop(tx);
    let large_file = bundle_dir.join(format!("{}.tar.gz", sha256_hex(&large)));
    assert!(
        !large_file.exists(),
        "a partial upload is visible under its final name"
    );
    assert!(
        temp.exists(),
        "the crash left its temporary file (the restart must remove it)"
    );

    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    assert!(!temp.exists(), "the restart removed {}", temp.display());
    assert_eq!(
        tree(dir.path()),
        vec![
            "demo".to_string(),
            format!("demo/{}.tar.gz", sha256_hex(&earlier))
        ]
    );
    assert_eq!(server.get(&large_path).await.status, StatusCode::NOT_FOUND);
    let get = server.get(&earlier_path).await;
    assert_eq!(get.status, StatusCode::OK);
    assert!(get.body[..] == earlier[..], "earlier content changed");
    let list = server.get("/bundles/demo").await.json();
    assert_eq!(
        list["tarballs"],
        serde_json::json!([{"digest": sha256_hex(&earlier), "size": 300_000}])
    );
    assert_eq!(
        server
            .metric("gantry_storage_removed_temp_files_total")
            .await,
        Some(1.0)
    );
    server
        .wait_for_log("removed temporary file of an interrupted upload")
        .await;

    // The store still works after the restart.
    assert_eq!(
        server.put(&large_path, &large).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        server
            .request(Method::HEAD, &large_path, &[], empty())
            .await
            .header("content-length"),
        Some("67108864")
    );
}

#[tokio::test]
async fn corrupt_tarball_is_detected_at_start_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let good = content(5000, 30);
    let bad = content(5000, 31);
    {
        let server = Server::start(dir.path(), &[]);
        server.wait_ready().await;
        for data in [&good, &bad] {
            assert_eq!(
                server.put(&tarball_path("demo", data), data).await.status,
                StatusCode::CREATED
            );
        }
    }
    // Flip one byte of a stored tarball while the server is down.
    let bad_file = dir
        .path()
        .join("demo")
        .join(format!("{}.tar.gz", sha256_hex(&bad)));
    let mut bytes = std::fs::read(&bad_file).unwrap();
    bytes[2500] ^= 0xff;
    std::fs::write(&bad_file, &bytes).unwrap();

    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    assert_eq!(
        server.get(&tarball_path("demo", &bad)).await.status,
        StatusCode::NOT_FOUND
    );
    assert!(!bad_file.exists());
    let get = server.get(&tarball_path("demo", &good)).await;
    assert_eq!(get.status, StatusCode::OK);
    assert!(get.body[..] == good[..]);
    assert_eq!(
        server.get("/bundles/demo").await.json()["tarballs"],
        serde_json::json!([{"digest": sha256_hex(&good), "size": 5000}])
    );
    // Moved aside, not deleted, and reported.
    let quarantined = tree(&dir.path().join(".quarantine").join("demo"));
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert!(quarantined[0].starts_with(&format!("{}.tar.gz.", sha256_hex(&bad))));
    let logs = server.wait_for_log("corrupt tarball").await;
    assert!(logs.contains(&sha256_hex(&bad)), "{logs}");
    assert_eq!(
        server.metric("gantry_storage_corrupt_tarballs_total").await,
        Some(1.0)
    );
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(1.0)
    );
    assert_eq!(
        server.metric("gantry_storage_stored_bytes").await,
        Some(5000.0)
    );

    // The good content can be uploaded again after the corrupt copy was moved aside.
    assert_eq!(
        server.put(&tarball_path("demo", &bad), &bad).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    gantry_tests::wait_until(
        "the server to log its shutdown",
        Duration::from_secs(15),
        || {
            let logs = server.logs();
            async move { logs.contains("shutting down").then_some(()) }
        },
    )
    .await;
}
