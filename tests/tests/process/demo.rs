//! The README's first command: `scripts/demo` brings up a local control plane, registry,
//! storage server and provisioner, and installs examples/hello with the shipped classes; with
//! its kube-controller-manager, deleting the bundle and applying it again works.

use std::path::Path;
use std::process::Output;

use gantry_tests::{script_command, workspace_root};

fn demo(state: &Path, args: &[&str]) -> Output {
    script_command()
        .arg(workspace_root().join("scripts/demo"))
        .args(args)
        .env("GANTRY_DEMO_STATE", state)
        .current_dir(workspace_root())
        .output()
        .expect("running scripts/demo")
}

/// Stops the demo's processes however the test ends.
struct Down<'a>(&'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = demo(self.0, &["down"]);
    }
}

#[test]
fn the_readme_demo_installs_the_example_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let _down = Down(&state);

    let output = demo(&state, &[]);
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
    // Only the checks that need a kubelet fail, and the demo says so.
    assert!(
        stdout.contains("classes accepted                    OK"),
        "{stdout}"
    );
    assert!(stdout.contains("whose Pods need a kubelet"), "{stdout}");

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

    let output = demo(&state, &["down"]);
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
