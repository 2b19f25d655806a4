//! The README's first command: `scripts/demo` brings up a local control plane, registry,
//! storage server and provisioner, and installs examples/hello with the shipped classes; with
//! its kube-controller-manager, deleting the bundle and applying it again works.

use std::path::Path;
use std::process::Output;

use gantry_tests::{script_command, workspace_root};

/// `scripts/demo ARGS` as on a machine where it never ran: a new `HOME`, so nothing of Gantry's
/// caches (`~/.cache/gantry`: the Go-built binaries) is there and the demo builds what it needs
/// itself. The toolchains stay where they are installed, and Go's build and module caches are
/// named explicitly: they hold compiled dependencies, not what the demo sets up, and an empty
/// one would only make the same build take 20 minutes.
fn demo(state: &Path, home: &Path, args: &[&str]) -> Output {
    let mut command = script_command();
    command
        .arg(workspace_root().join("scripts/demo"))
        .args(args)
        .env("GANTRY_DEMO_STATE", state)
        .env("HOME", home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("GANTRY_CONTROL_PLANE_DIR")
        .current_dir(workspace_root());
    let user_home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    for (variable, default) in [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")] {
        if std::env::var_os(variable).is_none()
            && let Some(user_home) = &user_home
        {
            command.env(variable, user_home.join(default));
        }
    }
    for variable in ["GOCACHE", "GOMODCACHE"] {
        let value = std::process::Command::new("go")
            .args(["env", variable])
            .output()
            .expect("running go env");
        command.env(variable, String::from_utf8_lossy(&value.stdout).trim());
    }
    command.output().expect("running scripts/demo")
}

/// Stops the demo's processes however the test ends.
struct Down<'a>(&'a Path, &'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = demo(self.0, self.1, &["down"]);
    }
}

#[test]
fn the_readme_demo_installs_the_example_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let _down = Down(&state, &home);

    let output = demo(&state, &home, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scripts/demo failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    // What the bundle created, as the demo lists it.
    assert!(
        stdout.contains("bundle.gantry.dev/hello condition met"),
        "{stdout}"
    );
    assert!(stdout.contains("configmap/hello-config"), "{stdout}");
    // The demo built its control plane into the new HOME's cache, and says so.
    assert!(
        stdout.contains("building kube-apiserver, etcd and kube-controller-manager"),
        "{stdout}"
    );
    assert!(
        home.join(".cache/gantry/control-plane").is_dir(),
        "no control plane cached under {}",
        home.display()
    );
    // `kubectl bundle check` reports what the demo runs: every check passes.
    assert!(
        stdout.contains("classes accepted                    OK"),
        "{stdout}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");

    // The tour's delete-then-reapply: kube-controller-manager finishes the namespace's
    // termination, so the bundle installs again.
    let kubectl = |args: &[&str]| {
        let output = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(state.join("kubeconfig"))
            .args(args)
            .output()
            .expect("running kubectl");
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    kubectl(&["delete", "bundle", "hello", "--timeout=60s"]);
    kubectl(&["wait", "--for=delete", "namespace/hello", "--timeout=60s"]);
    let bundle = workspace_root().join("examples/hello/bundle.yaml");
    let registry = std::fs::read_to_string(state.join("env"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("export GANTRY_REGISTRY=")
                .map(str::to_string)
        })
        .expect("GANTRY_REGISTRY in the demo's env");
    let again = state.join("bundle.yaml");
    std::fs::write(
        &again,
        std::fs::read_to_string(bundle)
            .unwrap()
            .replace("REGISTRY", &registry),
    )
    .unwrap();
    kubectl(&["apply", "-f", again.to_str().unwrap()]);
    kubectl(&[
        "wait",
        "--for=condition=Ready",
        "bundle/hello",
        "--timeout=60s",
    ]);

    let output = demo(&state, &home, &["down"]);
    assert!(
        output.status.success(),
        "scripts/demo down failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !state.exists(),
        "scripts/demo down leaves {}",
        state.display()
    );
}

/// `gantry-dev up --replicas 2`: two provisioners with `--sharding`, each announcing itself with
/// its shard Lease, both listed in the environment file; `down` stops both.
#[tokio::test]
async fn gantry_dev_runs_several_sharded_replicas() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, ListParams};

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let gantry_dev = |args: &[&str]| {
        std::process::Command::new(gantry_tests::binary("gantry-tests", "gantry-dev"))
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .output()
            .expect("running gantry-dev")
    };
    struct Stop<F: Fn(&[&str]) -> Output>(F);
    impl<F: Fn(&[&str]) -> Output> Drop for Stop<F> {
        fn drop(&mut self) {
            let _ = (self.0)(&["down"]);
        }
    }
    let stop = Stop(gantry_dev);

    let up = (stop.0)(&["up", "--replicas", "2"]);
    assert!(
        up.status.success(),
        "gantry-dev up --replicas 2: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let env = std::fs::read_to_string(state.join("env")).unwrap();
    let pids: Vec<u32> = env
        .lines()
        .find_map(|l| l.strip_prefix("export GANTRY_PROVISIONER_PIDS="))
        .expect("GANTRY_PROVISIONER_PIDS in the env file")
        .trim_matches('"')
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{env}");

    let kubeconfig = kube::config::Kubeconfig::read_from(state.join("kubeconfig")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let leases: Api<Lease> = Api::namespaced(client, "gantry-system");
    let holders = gantry_tests::wait_until(
        "a shard Lease of each replica",
        std::time::Duration::from_secs(60),
        || async {
            let list = leases
                .list(&ListParams::default().labels(gantry_api::SHARD_LABEL))
                .await
                .ok()?;
            let mut holders: Vec<String> = list
                .items
                .iter()
                .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
                .collect();
            holders.sort();
            (holders.len() == 2).then_some(holders)
        },
    )
    .await;
    assert_eq!(holders, ["replica-0", "replica-1"]);

    let down = (stop.0)(&["down"]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z")),
            "provisioner {pid} still runs after down"
        );
    }
}
