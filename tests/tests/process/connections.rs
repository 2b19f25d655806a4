//! How the provisioner talks to the API server: it offers HTTP/2, as client-go does, so the
//! requests it has in flight share a few connections instead of holding one each.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gantry_tests::e2e::*;
use gantry_tests::sockets::established_to;
use gantry_tests::{control_plane, unique_name};

/// Bundles installed at once, and ConfigMaps in each: with 8 passes of 8 applies at once, a
/// client with a connection per request in flight holds dozens.
const BUNDLES: usize = 16;
const OBJECTS: usize = 20;

/// Connections the provisioner may hold to the API server: its own client (Leases, the
/// sharder) and its controllers' client, one HTTP/2 connection each, and one more that a
/// client may open beside the first while it does not know yet that the server speaks HTTP/2.
const MOST_CONNECTIONS: usize = 4;

#[tokio::test]
async fn requests_in_flight_share_a_few_connections_to_the_api_server() {
    const ID: &str = "gantry.dev/plain-connections";
    let client = shared_gantry_client().await;
    let installation = start_installation(
        &client,
        ID,
        &["--reconcile-concurrency=8", "--apply-concurrency=8"],
    )
    .await;
    let (provisioner, class) = (&installation.provisioner, installation.class.clone());
    let prefix = unique_name("connections");
    let objects: Vec<String> = (0..OBJECTS)
        .map(|i| config_map(&format!("c{i:02}"), None, "x"))
        .collect();
    let image = push(
        &format!("{prefix}/app:v1"),
        &[("a.yaml", objects.join("---\n"))],
    )
    .await;

    let port: u16 = control_plane()
        .server_url()
        .rsplit_once(':')
        .and_then(|(_, port)| port.trim_end_matches('/').parse().ok())
        .expect("the API server's port");
    let pid = provisioner.pid();
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // A monitor, not a synchronisation: it samples until the install below is over. On a
    // thread of its own: reading /proc is blocking work.
    let sampler = std::thread::spawn({
        let (most, done) = (most.clone(), done.clone());
        move || {
            while !done.load(Ordering::SeqCst) {
                if let Ok(n) = established_to(pid, port) {
                    most.fetch_max(n, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });

    let names: Vec<String> = (0..BUNDLES).map(|i| format!("{prefix}-{i:02}")).collect();
    for name in &names {
        ensure_namespace(&client, name).await;
        create_bundle(&client, name, spec_of_class(&image, Some(name), &class)).await;
    }
    for name in &names {
        wait_bundle(&client, name, "Ready", is_ready).await;
    }
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();

    let most = most.load(Ordering::SeqCst);
    assert!(most >= 1, "the provisioner's connections were seen");
    assert!(
        most <= MOST_CONNECTIONS,
        "{most} connections to the API server at once while {BUNDLES} bundles of {OBJECTS} \
         objects installed (at most {MOST_CONNECTIONS})"
    );
}
