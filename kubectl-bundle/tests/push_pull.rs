//! `kubectl bundle push` and `pull` against real registries.

use std::path::Path;
use std::process::{Command, Output};

use gantry_tests::{Registry, RegistryOptions, read_dir_files, registry, unique_name};

const NAMESPACE: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n";
const CONFIG: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: demo\n";

fn bundle_dir() -> tempfile::TempDir {
    gantry_tests::bundle_dir(&[("00-namespace.yaml", NAMESPACE), ("10-config.yml", CONFIG)])
}

/// Runs the plugin with a docker config directory of its own (and no other credentials).
fn plugin(docker_config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-bundle"))
        .args(args)
        .env("DOCKER_CONFIG", docker_config)
        .env("HOME", docker_config)
        .output()
        .expect("running kubectl-bundle")
}

/// `kubectl bundle push <dir> <image> <flags>`, with `docker_config`.
fn push(docker_config: &Path, dir: &Path, image: &str, flags: &[&str]) -> Output {
    let dir = dir.to_str().unwrap();
    plugin(docker_config, &[&["push", dir, image], flags].concat())
}

/// `kubectl bundle pull <reference> --dir <dir> <flags>`, with `docker_config`.
fn pull(docker_config: &Path, reference: &str, dir: &Path, flags: &[&str]) -> Output {
    let dir = dir.to_str().unwrap();
    plugin(
        docker_config,
        &[&["pull", reference, "--dir", dir], flags].concat(),
    )
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn failed(output: Output) -> String {
    assert!(!output.status.success(), "unexpectedly succeeded");
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn push_a_multi_platform_bundle_and_pull_it_back() {
    let host = registry().host();
    let config = tempfile::tempdir().unwrap();
    let bundle = bundle_dir();
    let image = format!("{host}/{}:v1", unique_name("cli"));
    let pinned = ok(push(
        config.path(),
        bundle.path(),
        &image,
        &[
            "--platform",
            "linux/amd64",
            "--platform",
            "linux/arm64",
            "--plain-http",
        ],
    ));
    let (repo, digest) = pinned.split_once('@').expect("a pinned reference");
    assert_eq!(repo, image.trim_end_matches(":v1"));

    // skopeo reads what push wrote: the tag resolves to the printed digest, an index.
    let inspect = Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{image}"))
        .output()
        .unwrap();
    assert!(inspect.status.success());
    let index: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(index["manifests"].as_array().unwrap().len(), 2);
    let inspect = Command::new("skopeo")
        .args(["inspect", "--tls-verify=false", "--override-arch", "arm64"])
        .arg(format!("docker://{pinned}"))
        .output()
        .unwrap();
    assert!(inspect.status.success());
    let inspected: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(inspected["Digest"], digest);
    assert_eq!(inspected["Architecture"], "arm64");

    for reference in [image.as_str(), pinned.as_str()] {
        let out = tempfile::tempdir().unwrap();
        let printed = ok(pull(
            config.path(),
            reference,
            out.path(),
            &["--platform", "linux/arm64", "--plain-http"],
        ));
        assert_eq!(printed, pinned);
        assert_eq!(
            read_dir_files(&out.path().join("manifests")),
            vec![
                ("00-namespace.yaml".to_string(), NAMESPACE.to_string()),
                ("10-config.yml".to_string(), CONFIG.to_string()),
            ]
        );
    }
}

#[test]
fn credentials_come_from_the_docker_config_file() {
    let private = Registry::start(RegistryOptions {
        tls: true,
        auth: Some(("author".into(), "pa55".into())),
    });
    let host = private.host();
    let ca = private.ca_file().unwrap().to_str().unwrap().to_string();
    let image = format!("{host}/{}:v1", unique_name("private"));
    let bundle = bundle_dir();

    let anonymous = tempfile::tempdir().unwrap();
    let stderr = failed(push(
        anonymous.path(),
        bundle.path(),
        &image,
        &["--ca-file", &ca],
    ));
    assert!(stderr.contains(&image), "{stderr}");
    assert!(stderr.contains("authentication refused"), "{stderr}");

    let config = tempfile::tempdir().unwrap();
    // `auth` is base64("author:pa55").
    std::fs::write(
        config.path().join("config.json"),
        format!(r#"{{"auths": {{"{host}": {{"auth": "YXV0aG9yOnBhNTU="}}}}}}"#),
    )
    .unwrap();
    let pinned = ok(push(
        config.path(),
        bundle.path(),
        &image,
        &["--ca-file", &ca],
    ));
    let out = tempfile::tempdir().unwrap();
    let printed = ok(pull(config.path(), &image, out.path(), &["--ca-file", &ca]));
    assert_eq!(printed, pinned);

    // Without the CA, TLS fails and says so.
    let stderr = failed(pull(config.path(), &image, &out.path().join("x"), &[]));
    assert!(stderr.contains(&image), "{stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
}

#[test]
fn errors_name_the_reference_and_the_cause() {
    let host = registry().host();
    let config = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();

    let missing = format!("{host}/{}:nope", unique_name("missing"));
    let stderr = failed(pull(config.path(), &missing, out.path(), &["--plain-http"]));
    assert!(stderr.contains(&missing), "{stderr}");
    assert!(stderr.contains("not found"), "{stderr}");

    let empty = tempfile::tempdir().unwrap();
    let stderr = failed(push(
        config.path(),
        empty.path(),
        &format!("{host}/x:v1"),
        &["--plain-http"],
    ));
    assert!(stderr.contains("no manifests/ directory"), "{stderr}");

    let bad = bundle_dir();
    std::fs::write(
        bad.path().join("manifests/20-broken.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [\n",
    )
    .unwrap();
    let stderr = failed(push(
        config.path(),
        bad.path(),
        &format!("{host}/x:v1"),
        &["--plain-http"],
    ));
    assert!(
        stderr.contains("invalid YAML in 20-broken.yaml at line"),
        "{stderr}"
    );

    let stderr = failed(push(
        config.path(),
        bad.path(),
        &format!("{host}/x:v1"),
        &["--platform", "linux"],
    ));
    assert!(stderr.contains("invalid platform"), "{stderr}");

    // Pulling over files already there is refused.
    let bundle = bundle_dir();
    let image = format!("{host}/{}:v1", unique_name("clobber"));
    ok(push(
        config.path(),
        bundle.path(),
        &image,
        &["--plain-http"],
    ));
    let stderr = failed(pull(
        config.path(),
        &image,
        bundle.path(),
        &["--plain-http"],
    ));
    assert!(stderr.contains("not empty"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(bundle.path().join("manifests/00-namespace.yaml")).unwrap(),
        NAMESPACE
    );
}
