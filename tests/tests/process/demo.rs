//! The README's first command: `scripts/demo` brings up a local control plane, registry,
//! storage server and provisioner, and installs examples/hello with the shipped classes.

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
