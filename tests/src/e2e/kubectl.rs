//! `kubectl bundle`, run by kubectl itself from PATH, for the tests that drive it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::{ControlPlane, binary, control_plane};

/// The plugin's directory: `kubectl-bundle` and `kubectl_complete-bundle` (built first) and
/// nothing else, as `scripts/plugin-dir` makes it. Cargo writes a dependency file
/// `kubectl-bundle.d` beside the binary in `target/debug`, which `kubectl plugin list` reports
/// as a plugin that is not executable: that directory is not put on the PATH.
pub fn plugin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let plugin = binary("kubectl-bundle", "kubectl-bundle");
        binary("kubectl-bundle", "kubectl_complete-bundle");
        let status = Command::new("bash")
            .arg(crate::workspace_root().join("scripts/plugin-dir"))
            .arg(plugin.parent().unwrap())
            .stdout(std::process::Stdio::piped())
            .output()
            .expect("running scripts/plugin-dir");
        assert!(
            status.status.success(),
            "scripts/plugin-dir: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&status.stdout).trim())
    })
    .clone()
}

/// PATH with the plugin's directory first.
pub fn plugin_path() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(plugin_dir()).chain(std::env::split_paths(&path))).unwrap()
}

/// `kubectl bundle ARGS` with the plugin's directory first on PATH and no $KUBECONFIG.
pub fn kubectl_bundle_command(args: &[&str]) -> Command {
    // kubectl refuses flags before a plugin's name: the plugin parses --kubeconfig itself.
    let mut command = Command::new("kubectl");
    command
        .arg("bundle")
        .args(args)
        .env("PATH", plugin_path())
        .env_remove("KUBECONFIG");
    command
}

/// Runs `kubectl bundle ARGS`.
pub fn kubectl_bundle(args: &[&str]) -> Output {
    kubectl_bundle_command(args)
        .output()
        .expect("running kubectl bundle")
}

/// Runs `kubectl bundle plugin check URL --ca-file CA ARGS...` with the shared control plane's
/// admin kubeconfig in $KUBECONFIG; its output and how long it took.
pub fn plugin_check(url: &str, ca_file: &Path, args: &[&str]) -> (Output, std::time::Duration) {
    let ca = ca_file.display().to_string();
    let mut all = vec!["plugin", "check", url, "--ca-file", &ca];
    all.extend(args);
    let started = std::time::Instant::now();
    let output = kubectl_bundle_command(&all)
        .env("KUBECONFIG", control_plane().kubeconfig())
        .output()
        .expect("running kubectl bundle plugin check");
    (output, started.elapsed())
}

/// The lines of a command's standard output.
pub fn stdout_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Standard output, then standard error.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `kubectl bundle ARGS --kubeconfig KC` against the shared control plane, failing the
/// test unless it succeeds; its stdout.
pub fn ok(args: &[&str]) -> String {
    ok_on(control_plane(), args)
}

/// Runs `kubectl bundle ARGS --kubeconfig KC` against the shared control plane, failing the
/// test if it succeeds; its output.
pub fn fails(args: &[&str]) -> String {
    fails_on(control_plane(), args)
}

/// [`ok`] against `plane`.
pub fn ok_on(plane: &ControlPlane, args: &[&str]) -> String {
    let output = on(plane.kubeconfig(), args);
    assert!(output.status.success(), "{args:?}: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// [`fails`] against `plane`.
pub fn fails_on(plane: &ControlPlane, args: &[&str]) -> String {
    let output = on(plane.kubeconfig(), args);
    assert!(
        !output.status.success(),
        "{args:?} succeeded: {}",
        text(&output)
    );
    text(&output)
}

fn on(kubeconfig: &Path, args: &[&str]) -> Output {
    let kc = kubeconfig.display().to_string();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", kc.as_str()]);
    kubectl_bundle(&all)
}

/// The shared control plane's admin kubeconfig, as an argument.
pub fn kubeconfig() -> String {
    control_plane().kubeconfig().display().to_string()
}

/// Binds user `user` to the rules of ClusterRole `role` as `manifests/06-rbac-users.yaml`
/// defines it, under a name of its own (`{user}-{role}`).
pub async fn bind_shipped_role(client: &kube::Client, user: &str, role: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Api, Patch, PatchParams};
    let text =
        std::fs::read_to_string(crate::workspace_root().join("manifests/06-rbac-users.yaml"))
            .unwrap();
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let mut shipped = documents
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == role)
        .unwrap_or_else(|| panic!("ClusterRole {role} in manifests/06-rbac-users.yaml"));
    let name = format!("{user}-{role}");
    shipped["metadata"] = serde_json::json!({ "name": name });
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    });
    let apply = PatchParams::apply("gantry-tests").force();
    Api::<ClusterRole>::all(client.clone())
        .patch(&name, &apply, &Patch::Apply(&shipped))
        .await
        .unwrap_or_else(|e| panic!("applying ClusterRole {name}: {e}"));
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&name, &apply, &Patch::Apply(&binding))
        .await
        .unwrap_or_else(|e| panic!("applying ClusterRoleBinding {name}: {e}"));
}

/// Waits until user `user`, with kubeconfig `kc`, can read bundle `bundle`: RBAC reaches the
/// authorizer shortly after a binding is written.
pub async fn wait_user_reads(kc: &str, user: &str, bundle: &str) {
    crate::wait_until(
        &format!("{user} to read bundle {bundle}"),
        super::WAIT,
        || async {
            let out = kubectl_bundle(&["status", bundle, "-o", "name", "--kubeconfig", kc]);
            out.status.success().then_some(())
        },
    )
    .await;
}

/// A user `user` with a client certificate, bound as [`bind_shipped_role`] binds it; the user's
/// kubeconfig (written in `dir`), once the user can read bundle `bundle`.
pub async fn shipped_role_user(
    client: &kube::Client,
    dir: &Path,
    user: &str,
    role: &str,
    bundle: &str,
) -> String {
    bind_shipped_role(client, user, role).await;
    let path = dir.join(format!("kubeconfig-{user}"));
    control_plane()
        .write_user_kubeconfig(&path, user, None)
        .expect("writing a user's kubeconfig");
    let kc = path.display().to_string();
    wait_user_reads(&kc, user, bundle).await;
    kc
}
