//! Two provisioner replicas against one cluster: one leads, the standby takes over when the
//! leader dies. A control plane of its own: these provisioners must be the only ones.

use gantry_tests::e2e::*;
use gantry_tests::{Provisioner, StorageOptions, StorageServer, unique_name, wait_until};

/// This module's cluster, without a Gantry: the test starts two provisioners.
static CLUSTER: Isolated = Isolated::new();

async fn is_leader(provisioner: &Provisioner) -> Option<bool> {
    let text = reqwest::get(format!("{}/metrics", provisioner.metrics_url()))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("gantry_provisioner_leader "))?;
    Some(value.trim() == "1")
}

#[tokio::test]
async fn replicas_elect_one_leader_and_fail_over() {
    let cluster = CLUSTER.get();
    let client = setup(&cluster).await;
    let storage = StorageServer::start(StorageOptions::default());
    let mut first = start_provisioner(&cluster, &storage, &[]);
    let mut second = start_provisioner(&cluster, &storage, &[]);

    let (leader_is_first, _) = wait_until("exactly one leader", WAIT, || async {
        match (is_leader(&first).await?, is_leader(&second).await?) {
            (true, false) => Some((true, ())),
            (false, true) => Some((false, ())),
            _ => None,
        }
    })
    .await;

    let ns = unique_namespace(&client, "leader").await;
    push_config_map(&format!("{ns}/app:v1"), "one", None, "1").await;
    let before = unique_name("before");
    create_bundle(
        &client,
        &before,
        spec(&in_registry(&format!("{ns}/app:v1")), Some(&ns)),
    )
    .await;
    wait_bundle(&client, &before, "Ready under the first leader", is_ready).await;

    // The leader dies without releasing the Lease: the standby takes over once it expires.
    let standby = if leader_is_first {
        first.kill();
        &second
    } else {
        second.kill();
        &first
    };
    wait_until("the standby to lead", WAIT, || async {
        is_leader(standby).await?.then_some(())
    })
    .await;
    let after = unique_name("after");
    create_bundle(
        &client,
        &after,
        spec(&in_registry(&format!("{ns}/app:v1")), Some(&ns)),
    )
    .await;
    // Both bundles name the same ConfigMap: the second conflicts, which proves the new leader
    // reconciled it (and that the first one's objects were kept).
    wait_bundle(
        &client,
        &after,
        "reconciled by the new leader",
        reason_is(
            gantry_api::conditions::types::INSTALLED,
            gantry_api::conditions::reasons::CONFLICT,
        ),
    )
    .await;
}
