//! `kubectl bundle`, run by kubectl itself from PATH, for the test binaries that drive it.

use std::process::{Command, Output};

use gantry_tests::{binary, control_plane};

/// `kubectl bundle ARGS` with the plugin's directory first on PATH and no $KUBECONFIG.
pub fn kubectl_bundle_command(args: &[&str]) -> Command {
    let plugin = binary("kubectl-bundle", "kubectl-bundle");
    let dir = plugin.parent().unwrap().to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(&path))).unwrap();
    // kubectl refuses flags before a plugin's name: the plugin parses --kubeconfig itself.
    let mut command = Command::new("kubectl");
    command
        .arg("bundle")
        .args(args)
        .env("PATH", path)
        .env_remove("KUBECONFIG");
    command
}

pub fn kubectl_bundle(args: &[&str]) -> Output {
    kubectl_bundle_command(args)
        .output()
        .expect("running kubectl bundle")
}

pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `kubectl bundle ARGS --kubeconfig KC`, failing the test unless it succeeds; its stdout.
pub fn ok(args: &[&str]) -> String {
    let kc = kubeconfig();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", kc.as_str()]);
    let output = kubectl_bundle(&all);
    assert!(output.status.success(), "{args:?}: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `kubectl bundle ARGS --kubeconfig KC`, failing the test if it succeeds; its output.
pub fn fails(args: &[&str]) -> String {
    let kc = kubeconfig();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", kc.as_str()]);
    let output = kubectl_bundle(&all);
    assert!(
        !output.status.success(),
        "{args:?} succeeded: {}",
        text(&output)
    );
    text(&output)
}

pub fn kubeconfig() -> String {
    control_plane().kubeconfig().display().to_string()
}
