//! Smoke tests proving the registries the harness starts are real: images written by `skopeo`
//! from an OCI layout built with `umoci` read back byte for byte, and the private registry
//! enforces TLS and htpasswd credentials.

use std::path::Path;
use std::process::{Command, Output};

use gantry_tests::{Registry, RegistryOptions, registry};

fn run(command: &mut Command) -> Output {
    gantry_tests::run_ok(command)
}

/// An OCI layout at `layout:v1` whose single layer holds `manifests/configmap.yaml`.
fn build_layout(work: &Path, yaml: &str) -> String {
    let source = work.join("source");
    std::fs::create_dir_all(source.join("manifests")).unwrap();
    std::fs::write(source.join("manifests/configmap.yaml"), yaml).unwrap();
    let layout = work.join("layout");
    run(Command::new("umoci")
        .arg("init")
        .arg("--layout")
        .arg(&layout));
    let image = format!("{}:v1", layout.display());
    run(Command::new("umoci").args(["new", "--image", &image]));
    run(Command::new("umoci")
        .args(["insert", "--image", &image])
        .arg(source.join("manifests"))
        .arg("/manifests"));
    format!("oci:{image}")
}

fn inspect_digest(output: &Output) -> String {
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("skopeo JSON");
    json["Digest"].as_str().expect("a Digest").to_string()
}

#[test]
fn skopeo_pushes_an_umoci_image_that_reads_back() {
    let work = tempfile::tempdir().unwrap();
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smoke\ndata:\n  key: value\n";
    let source = build_layout(work.path(), yaml);
    let target = format!("docker://{}", registry().reference("smoke/app:v1"));
    let digest_file = work.path().join("digest");
    run(Command::new("skopeo")
        .args(["copy", "--dest-tls-verify=false", "--digestfile"])
        .arg(&digest_file)
        .args([&source, &target]));
    let pushed = std::fs::read_to_string(&digest_file).unwrap();
    assert!(pushed.starts_with("sha256:"), "{pushed}");

    let inspected = run(Command::new("skopeo").args(["inspect", "--tls-verify=false", &target]));
    assert_eq!(
        inspect_digest(&inspected),
        pushed,
        "the tag resolves to what was pushed"
    );

    // Pull it back into a new layout and unpack it: the file is the one that went in.
    let back = work.path().join("back");
    run(Command::new("skopeo")
        .args(["copy", "--src-tls-verify=false", &target])
        .arg(format!("oci:{}:v1", back.display())));
    let bundle = work.path().join("bundle");
    run(Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:v1", back.display()))
        .arg(&bundle));
    let read = std::fs::read_to_string(bundle.join("rootfs/manifests/configmap.yaml")).unwrap();
    assert_eq!(read, yaml);
}

#[test]
fn private_registry_requires_its_ca_and_credentials() {
    let private = Registry::start(RegistryOptions {
        tls: true,
        auth: Some(("gantry".into(), "s3cret-pass".into())),
    });
    assert!(private.tls());
    let cert_dir = private.skopeo_cert_dir().expect("a TLS registry has a CA");
    let work = tempfile::tempdir().unwrap();
    let source = build_layout(
        work.path(),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: private\n",
    );
    let target = format!("docker://{}", private.reference("private/app:v1"));

    // Wrong credentials are refused.
    let refused = Command::new("skopeo")
        .args(["copy", "--dest-cert-dir"])
        .arg(&cert_dir)
        .args(["--dest-creds", "gantry:wrong", &source, &target])
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "wrong credentials must be refused"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(
        stderr.contains("unauthorized") || stderr.contains("authentication"),
        "{stderr}"
    );

    run(Command::new("skopeo")
        .args(["copy", "--dest-cert-dir"])
        .arg(&cert_dir)
        .args(["--dest-creds", "gantry:s3cret-pass", &source, &target]));

    // Reading back needs the credentials too.
    let anonymous = Command::new("skopeo")
        .args(["inspect", "--cert-dir"])
        .arg(&cert_dir)
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        !anonymous.status.success(),
        "an anonymous read must be refused"
    );
    let with_creds = run(Command::new("skopeo")
        .args(["inspect", "--cert-dir"])
        .arg(&cert_dir)
        .args(["--creds", "gantry:s3cret-pass", &target]));
    assert!(inspect_digest(&with_creds).starts_with("sha256:"));

    // Without the CA the certificate is not trusted.
    let untrusted = Command::new("skopeo")
        .args(["inspect", "--creds", "gantry:s3cret-pass", &target])
        .output()
        .unwrap();
    assert!(
        !untrusted.status.success(),
        "the generated CA is not in the system store"
    );
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(
        stderr.contains("x509") || stderr.contains("certificate"),
        "{stderr}"
    );
}
