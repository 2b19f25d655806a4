//! `kubectl bundle check` where Gantry runs as processes beside the API server, as `scripts/demo`
//! runs it: no Deployment, a provisioner seen by the Lease it holds and renews, a storage server
//! by its `/readyz` at the URL the provisioner publishes. A check that passes there still fails
//! once either process is gone.

use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{StorageOptions, StorageServer, wait_until};

/// A cluster of its own: the test stops its Gantry's processes.
static CLUSTER: Isolated = Isolated::new();

/// The line of check `name` in `check`'s table, if it says FAIL.
fn failed<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .find(|l| l.starts_with(name))
        .filter(|l| l.split_whitespace().any(|w| w == "FAIL"))
}

#[tokio::test]
async fn check_sees_gantry_running_as_processes_and_what_stopped() {
    let cluster = CLUSTER.get();
    setup(cluster.plane()).await;
    let storage = StorageServer::start(StorageOptions::default());
    let mut provisioner = start_provisioner(cluster.plane(), &storage, &[]);
    let kc = cluster.kubeconfig().display().to_string();
    let check = || kubectl_bundle(&["check", "--kubeconfig", &kc]);
    // Waits until `check` fails with check `name` FAIL; its output.
    let check_fails = async |name: &str| {
        wait_until(&format!("check {name:?} to fail"), WAIT, || async {
            let out = check();
            let said = text(&out);
            (!out.status.success() && failed(&said, name).is_some()).then_some(said)
        })
        .await
    };

    let passed = wait_until("every check to pass", WAIT, || async {
        let out = check();
        out.status.success().then(|| text(&out))
    })
    .await;
    assert!(!passed.contains("FAIL"), "{passed}");
    assert!(
        passed.contains(
            "no Deployment gantry-system/gantry-provisioner: a provisioner outside it leads"
        ) && passed.contains(&format!("answers {}/readyz", storage.url())),
        "{passed}"
    );

    let url = storage.url().to_string();
    drop(storage);
    let out = check_fails("storage server ready").await;
    assert!(
        failed(&out, "storage server ready").is_some_and(|l| l.contains(&format!("{url}/readyz"))),
        "{out}"
    );
    assert!(failed(&out, "provisioner running").is_none(), "{out}");

    // Killed, it renews its Lease no more: once the Lease expires, no provisioner runs.
    provisioner.kill();
    let out = check_fails("provisioner running").await;
    assert!(
        failed(&out, "provisioner running").is_some_and(|l| l.contains("has expired")),
        "{out}"
    );
}
