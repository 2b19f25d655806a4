//! The real `helm` CLI (built from its Go module by `tools/helm/build.sh`), and Gantry's install
//! files (`manifests/`, `charts/gantry`, `scripts/install-yaml`) read as Kubernetes objects, to
//! compare what each of them installs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use crate::control_plane::built_tools;

/// Names a directory holding a `helm` binary (skips the build).
pub const HELM_DIR_ENV: &str = "GANTRY_HELM_DIR";

/// Labels the chart adds to every object it renders, beside those of `manifests/`.
pub const HELM_LABELS: [&str; 2] = ["helm.sh/chart", "app.kubernetes.io/managed-by"];

/// The `helm` binary: from `GANTRY_HELM_DIR`, else built (once, then cached) by
/// `tools/helm/build.sh`. Fails the test, naming both, when neither gives one.
pub fn helm_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        built_tools(HELM_DIR_ENV, "tools/helm/build.sh", &[], &["helm"])
            .unwrap_or_else(|e| panic!("the helm CLI is needed: {e}"))
            .join("helm")
    })
}

/// Objects keyed by `apiVersion kind namespace/name` (`name` alone when cluster-scoped).
pub type Objects = BTreeMap<String, Value>;

/// The objects of a stream of YAML documents; empty documents (comments only) are skipped.
/// Panics, naming `what`, on invalid YAML, an object without kind or name, or a duplicate.
pub fn yaml_objects(what: &str, yaml: &str) -> Objects {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml)
        .unwrap_or_else(|e| panic!("{what} is not a stream of YAML documents: {e}"));
    let mut objects = Objects::new();
    for object in documents.into_iter().filter(|d| !d.is_null()) {
        let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let (Some(api_version), Some(kind), Some(name)) = (
            field("/apiVersion"),
            field("/kind"),
            field("/metadata/name"),
        ) else {
            panic!("{what} holds a document that is no Kubernetes object: {object}");
        };
        let key = match field("/metadata/namespace") {
            Some(namespace) => format!("{api_version} {kind} {namespace}/{name}"),
            None => format!("{api_version} {kind} {name}"),
        };
        if objects.insert(key.clone(), object).is_some() {
            panic!("{what} holds {key} twice");
        }
    }
    objects
}

/// The objects `kubectl apply -f manifests/` creates: every `manifests/*.yaml`, in name order.
pub fn manifests_objects() -> Objects {
    let dir = crate::workspace_root().join("manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut objects = Objects::new();
    for file in files {
        let yaml = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for (key, object) in yaml_objects(&file.display().to_string(), &yaml) {
            assert!(
                objects.insert(key.clone(), object).is_none(),
                "manifests/ holds {key} twice"
            );
        }
    }
    objects
}

/// Panics with the differences when `actual` (named `what`) does not hold exactly the objects
/// of `expected`, each equal.
pub fn assert_same_objects(what: &str, actual: &Objects, expected: &Objects) {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap();
    let mut complaints = Vec::new();
    for key in expected.keys().filter(|k| !actual.contains_key(*k)) {
        complaints.push(format!("{what} lacks {key}"));
    }
    for key in actual.keys().filter(|k| !expected.contains_key(*k)) {
        complaints.push(format!("{what} has {key}, which is not expected"));
    }
    for (key, object) in actual {
        if let Some(wanted) = expected.get(key)
            && wanted != object
        {
            complaints.push(format!(
                "{what}: {key} differs\n--- expected\n{}\n--- {what}\n{}",
                pretty(wanted),
                pretty(object)
            ));
        }
    }
    assert!(complaints.is_empty(), "{}", complaints.join("\n\n"));
}

/// Runs `helm` with its caches and configuration in `home`; its standard output. Fails the
/// test, with both outputs, when it fails.
pub fn helm_in(home: &Path, args: &[&str]) -> String {
    run_helm(home, args).0
}

/// [`helm_in`], for a command that reports on standard error (`helm push` prints `Pushed:
/// REFERENCE` there): both outputs, standard output first.
pub fn helm_said(home: &Path, args: &[&str]) -> String {
    let (stdout, stderr) = run_helm(home, args);
    format!("{stdout}{stderr}")
}

fn run_helm(home: &Path, args: &[&str]) -> (String, String) {
    let output = std::process::Command::new(helm_binary())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("running helm");
    assert!(
        output.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The directory of the Go module `module_at_version` (`path@version`) in Go's module cache,
/// fetched from the module proxy: where the tests find upstream's own charts.
pub fn go_module_dir(module_at_version: &str) -> PathBuf {
    let output = std::process::Command::new("go")
        .args(["mod", "download", "-json", module_at_version])
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("running go mod download");
    assert!(
        output.status.success(),
        "go mod download {module_at_version}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let module: Value = serde_json::from_slice(&output.stdout).unwrap();
    PathBuf::from(
        module["Dir"]
            .as_str()
            .expect("go mod download -json names a Dir"),
    )
}

/// `helm push` of the chart archive `archive` to `registry_host` (plain HTTP) under
/// `repository`: the reference helm printed (`HOST/REPOSITORY/NAME:VERSION`).
pub fn helm_push(home: &Path, archive: &Path, registry_host: &str, repository: &str) -> String {
    let said = helm_said(
        home,
        &[
            "push",
            archive.to_str().unwrap(),
            &format!("oci://{registry_host}/{repository}"),
            "--plain-http",
        ],
    );
    said.lines()
        .find_map(|l| l.strip_prefix("Pushed: "))
        .unwrap_or_else(|| panic!("helm push said no reference: {said}"))
        .trim()
        .to_string()
}

/// `helm package` of the chart directory `chart` (into `home/packages`), then [`helm_push`]:
/// the archive and the reference.
pub fn package_and_push(
    home: &Path,
    chart: &Path,
    registry_host: &str,
    repository: &str,
) -> (PathBuf, String) {
    let out = home.join("packages");
    std::fs::create_dir_all(&out).unwrap();
    let said = helm_in(
        home,
        &[
            "package",
            chart.to_str().unwrap(),
            "-d",
            out.to_str().unwrap(),
        ],
    );
    // "Successfully packaged chart and saved it to: PATH"
    let archive = PathBuf::from(
        said.lines()
            .find_map(|l| l.rsplit_once("saved it to: ").map(|(_, path)| path.trim()))
            .unwrap_or_else(|| panic!("helm package said no archive: {said}")),
    );
    let reference = helm_push(home, &archive, registry_host, repository);
    (archive, reference)
}
