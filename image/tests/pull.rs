//! The image library against a real registry: pulls by tag and digest, platform selection,
//! interoperability with skopeo and umoci, TLS with htpasswd auth, tampered blobs, every
//! rejection of untrusted content, a gzip bomb, and the canonical tarball.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::*;
use gantry_image::{
    Credential, DockerConfig, EffectiveLimits, ImageError, LimitKind, Platform, PullStats,
    PushedImage, RegistryClient, read_canonical,
};
use gantry_tests::{
    Registry, RegistryOptions, bundle_dir, read_dir_files, registry, run_ok, unique_name,
};

const BUNDLE: &[(&str, &str)] = &[
    (
        "00-namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n",
    ),
    (
        "10-config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: demo\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: demo\n",
    ),
];

/// The platforms of a two-platform index.
const AMD64_AND_ARM64: [&str; 2] = ["linux/amd64", "linux/arm64"];

fn names(objects: &[gantry_image::ObjectSummary]) -> Vec<String> {
    objects
        .iter()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .collect()
}

/// Pushes [`BUNDLE`] with `client` as `reference` for `platforms` (none: one image of this
/// machine's platform).
async fn push_bundle(client: &RegistryClient, reference: &str, platforms: &[&str]) -> PushedImage {
    let dir = bundle_dir(BUNDLE);
    let platforms: Vec<Platform> = platforms.iter().map(|p| p.parse().unwrap()).collect();
    client
        .push_dir(dir.path(), reference, &platforms, &limits())
        .await
        .unwrap()
}

fn run(command: &mut Command) -> Vec<u8> {
    run_ok(command).stdout
}

#[tokio::test]
async fn single_platform_image_by_tag_and_by_digest() {
    let host = registry().host();
    let client = plain_client(host);
    let repo = unique_name("single");
    let pushed = push_bundle(&client, &format!("{host}/{repo}:v1"), &["linux/arm64"]).await;
    assert_eq!(pushed.pinned, format!("{host}/{repo}@{}", pushed.digest));

    let resolved = client.resolve(&format!("{host}/{repo}:v1")).await.unwrap();
    assert_eq!(resolved.digest, pushed.digest);
    assert_eq!(resolved.pinned(), pushed.pinned);

    for reference in [format!("{host}/{repo}:v1"), pushed.pinned.clone()] {
        // A single-platform image is taken whatever platform is asked for: its platform is
        // reported from its config.
        let bundle = client.pull(&request(&reference, None)).await.unwrap();
        assert_eq!(bundle.image.resolved_image, pushed.pinned);
        assert_eq!(bundle.image.digest, pushed.digest);
        assert_eq!(bundle.image.manifest_digest, pushed.digest);
        // An image manifest is its own platform manifest, whatever platform is asked for.
        assert_eq!(
            client
                .platform_manifest(&reference, &Platform::current())
                .await
                .unwrap(),
            pushed.digest
        );
        assert_eq!(bundle.image.platform.to_string(), "linux/arm64");
        assert!(!bundle.image.from_index);
        assert_eq!(
            names(&bundle.objects),
            vec!["Namespace/demo", "ConfigMap/a", "ConfigMap/b"]
        );
        // The layer that push wrote is the canonical tarball of the directory.
        let (path, canonical) = bundle.canonical_tarball().unwrap();
        assert_eq!(canonical.digest, pushed.layer_digest);
        let objects = read_canonical(
            std::fs::File::open(&path).unwrap(),
            Some(&canonical.digest),
            &limits(),
        )
        .unwrap();
        assert_eq!(objects.len(), 3);
        assert_eq!(objects[1].value().unwrap()["metadata"]["name"], "a");
        // Writing it off the runtime yields the same tarball and the same objects at once.
        let written = bundle.write_canonical_tarball().await.unwrap();
        assert_eq!(written.digest, canonical);
        assert_eq!(
            std::fs::read(&written.path).unwrap(),
            std::fs::read(&path).unwrap()
        );
        let values = |objects: &[gantry_image::BundleObject]| {
            objects
                .iter()
                .map(|o| o.object.get().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(values(&written.objects), values(&objects));
    }
}

#[tokio::test]
async fn multi_platform_index_selects_the_platform_and_variant() {
    let host = registry().host();
    let client = plain_client(host);
    let repo = unique_name("multi");
    let platforms = ["linux/amd64", "linux/arm64", "linux/arm/v6", "linux/arm/v7"];
    let pushed = push_bundle(&client, &format!("{host}/{repo}:v1"), &platforms).await;
    assert_eq!(pushed.manifests.len(), 4);
    for (wanted, index) in [
        ("linux/arm/v6", 2),
        ("linux/arm/v7", 3),
        ("linux/arm", 3),
        ("linux/arm64", 1),
    ] {
        let bundle = client
            .pull(&request(&format!("{host}/{repo}:v1"), Some(wanted)))
            .await
            .unwrap();
        assert!(bundle.image.from_index);
        assert_eq!(bundle.image.digest, pushed.digest, "{wanted}");
        assert_eq!(bundle.image.resolved_image, pushed.pinned);
        assert_eq!(
            bundle.image.manifest_digest, pushed.manifests[index].1,
            "{wanted}"
        );
        assert_eq!(bundle.image.platform, pushed.manifests[index].0, "{wanted}");
        // What another puller (a node's runtime) unpacked, from the index alone.
        let platform: Platform = wanted.parse().unwrap();
        assert_eq!(
            client
                .platform_manifest(&pushed.pinned, &platform)
                .await
                .unwrap(),
            pushed.manifests[index].1,
            "{wanted}"
        );
    }
    // Default: the running platform.
    let bundle = client.pull(&request(&pushed.pinned, None)).await.unwrap();
    assert_eq!(bundle.image.platform, Platform::current());
}

#[tokio::test]
async fn an_index_without_the_platform_lists_what_it_has() {
    let host = registry().host();
    let client = plain_client(host);
    let repo = unique_name("noplatform");
    push_bundle(&client, &format!("{host}/{repo}:v1"), &AMD64_AND_ARM64).await;
    match client
        .pull(&request(&format!("{host}/{repo}:v1"), Some("linux/s390x")))
        .await
    {
        Err(ImageError::PlatformNotFound {
            wanted, available, ..
        }) => {
            assert_eq!(wanted, "linux/s390x");
            assert_eq!(available, vec!["linux/amd64", "linux/arm64"]);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_push_counts_the_layer_bytes_it_sends() {
    let host = registry().host();
    let client = plain_client(host);
    let dir = bundle_dir(BUNDLE);
    let repo = unique_name("counted");
    let stats = Arc::new(gantry_image::PushStats::default());
    let pushed = client
        .push_dir_with_stats(
            dir.path(),
            &format!("{host}/{repo}:v1"),
            &[],
            &limits(),
            Some(stats.clone()),
        )
        .await
        .unwrap();
    let size = stats.layer_size.load(Ordering::Relaxed);
    let mut pull = request(&pushed.pinned, None);
    let received = Arc::new(gantry_image::PullStats::default());
    pull.stats = Some(received.clone());
    client.pull(&pull).await.unwrap();
    assert_eq!(
        size,
        received.compressed_bytes.load(Ordering::Relaxed),
        "the layer's size, as a pull receives it"
    );
    assert_eq!(
        stats.layer_bytes_sent.load(Ordering::Relaxed),
        size,
        "every layer byte sent once"
    );
    // The registry has the layer now: nothing is sent again.
    let again = Arc::new(gantry_image::PushStats::default());
    client
        .push_dir_with_stats(
            dir.path(),
            &format!("{host}/{repo}:v2"),
            &[],
            &limits(),
            Some(again.clone()),
        )
        .await
        .unwrap();
    assert_eq!(again.layer_size.load(Ordering::Relaxed), size);
    assert_eq!(again.layer_bytes_sent.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn unknown_repositories_and_tags_are_reported() {
    let host = registry().host();
    let client = plain_client(host);
    let repo = unique_name("known");
    push_bundle(&client, &format!("{host}/{repo}:v1"), &[]).await;
    for reference in [
        format!("{host}/{repo}:missing"),
        format!("{host}/{}:v1", unique_name("absent")),
        format!("{host}/{repo}@sha256:{}", "0".repeat(64)),
    ] {
        match client.pull(&request(&reference, None)).await {
            Err(ImageError::NotFound { reference: r, .. }) => assert_eq!(r, reference),
            other => panic!("{reference}: {other:?}"),
        }
    }
    // A registry that is not there: a closed loopback port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let reference = format!("127.0.0.1:{port}/app:v1");
    let err = plain_client(&format!("127.0.0.1:{port}"))
        .pull(&request(&reference, None))
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::Registry { .. }), "{err:?}");
    assert!(err.to_string().contains(&reference), "{err}");
}

/// An OCI layout with one image per platform built by umoci (different content each), and an
/// image index over them added by hand, tagged `multi`.
fn umoci_layout(work: &Path) -> std::path::PathBuf {
    let layout = work.join("layout");
    run(Command::new("umoci")
        .arg("init")
        .arg("--layout")
        .arg(&layout));
    let mut entries = Vec::new();
    for (arch, name) in [("amd64", "x86"), ("arm64", "arm")] {
        let source = work.join(format!("source-{arch}"));
        std::fs::create_dir_all(&source).unwrap();
        std::fs::write(
            source.join(format!("{name}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"),
        )
        .unwrap();
        let image = format!("{}:{arch}", layout.display());
        run(Command::new("umoci").args(["new", "--image", &image]));
        run(Command::new("umoci").args([
            "config",
            "--image",
            &image,
            "--os",
            "linux",
            "--architecture",
            arch,
        ]));
        run(Command::new("umoci")
            .args(["insert", "--image", &image])
            .arg(&source)
            .arg("/manifests"));
        // A second layer removes nothing but adds a file, so layers apply in order.
        let extra = work.join(format!("extra-{arch}"));
        std::fs::create_dir_all(&extra).unwrap();
        std::fs::write(
            extra.join("extra.yaml"),
            format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: extra-{arch}\n"),
        )
        .unwrap();
        run(Command::new("umoci")
            .args(["insert", "--image", &image])
            .arg(extra.join("extra.yaml"))
            .arg("/manifests/extra.yaml"));
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        let entry = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == arch)
            .unwrap()
            .clone();
        entries.push(serde_json::json!({
            "mediaType": entry["mediaType"],
            "digest": entry["digest"],
            "size": entry["size"],
            "platform": {"os": "linux", "architecture": arch},
        }));
    }
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    }))
    .unwrap();
    let digest = sha256(&index);
    std::fs::write(
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
        &index,
    )
    .unwrap();
    let path = layout.join("index.json");
    let mut top: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    top["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": digest,
            "size": index.len(),
            "annotations": {"org.opencontainers.image.ref.name": "multi"},
        }));
    std::fs::write(&path, serde_json::to_vec(&top).unwrap()).unwrap();
    layout
}

#[tokio::test]
async fn an_index_pushed_by_skopeo_from_an_umoci_layout_is_pulled() {
    let host = registry().host();
    let work = tempfile::tempdir().unwrap();
    let layout = umoci_layout(work.path());
    let repo = unique_name("umoci");
    let target = format!("docker://{host}/{repo}:v1");
    let digest_file = work.path().join("digest");
    run(Command::new("skopeo")
        .args(["copy", "--all", "--dest-tls-verify=false", "--digestfile"])
        .arg(&digest_file)
        .arg(format!("oci:{}:multi", layout.display()))
        .arg(&target));
    let index_digest = std::fs::read_to_string(&digest_file).unwrap();

    let client = plain_client(host);
    // Objects come in file-name order: arm.yaml < extra.yaml < x86.yaml.
    for (platform, expected) in [
        ("linux/amd64", ["Secret/extra-amd64", "ConfigMap/x86"]),
        ("linux/arm64", ["ConfigMap/arm", "Secret/extra-arm64"]),
    ] {
        let bundle = client
            .pull(&request(&format!("{host}/{repo}:v1"), Some(platform)))
            .await
            .unwrap();
        assert_eq!(bundle.image.digest, index_digest.trim());
        assert!(bundle.image.from_index);
        assert_eq!(bundle.image.platform.to_string(), platform);
        assert_eq!(names(&bundle.objects), expected);
    }
}

#[tokio::test]
async fn what_push_writes_skopeo_reads_and_umoci_unpacks() {
    let host = registry().host();
    let client = plain_client(host);
    let repo = unique_name("interop");
    let pushed = push_bundle(&client, &format!("{host}/{repo}:v1"), &AMD64_AND_ARM64).await;
    let target = format!("docker://{host}/{repo}:v1");
    let raw = run(Command::new("skopeo").args(["inspect", "--raw", "--tls-verify=false", &target]));
    assert_eq!(sha256(&raw), pushed.digest);
    let index: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(index["manifests"][1]["platform"]["architecture"], "arm64");
    let inspected: serde_json::Value = serde_json::from_slice(&run(Command::new("skopeo").args([
        "inspect",
        "--tls-verify=false",
        "--override-arch",
        "arm64",
        &target,
    ])))
    .unwrap();
    assert_eq!(inspected["Architecture"], "arm64");
    assert_eq!(
        inspected["Labels"]["operators.operatorframework.io.bundle.mediatype.v1"],
        "plain+v0"
    );
    assert_eq!(inspected["Layers"][0], pushed.layer_digest.as_str());

    let work = tempfile::tempdir().unwrap();
    let layout = work.path().join("layout");
    run(Command::new("skopeo")
        .args(["copy", "--src-tls-verify=false", &target])
        .arg(format!("oci:{}:v1", layout.display())));
    let unpacked = work.path().join("bundle");
    run(Command::new("umoci")
        .args(["unpack", "--rootless", "--image"])
        .arg(format!("{}:v1", layout.display()))
        .arg(&unpacked));
    let expected: Vec<(String, String)> = BUNDLE
        .iter()
        .map(|(n, c)| (n.to_string(), c.to_string()))
        .collect();
    assert_eq!(read_dir_files(&unpacked.join("rootfs/manifests")), expected);
}

#[tokio::test]
async fn private_registry_over_tls_with_a_pull_secret() {
    let private = Registry::start(RegistryOptions {
        tls: true,
        auth: Some(("gantry".into(), "s3cret".into())),
    });
    let host = private.host().to_string();
    let ca = private.ca_pem().unwrap().to_string();
    let reference = format!("{host}/{}:v1", unique_name("private"));
    let secret = format!(
        r#"{{"auths":{{"{host}":{{"username":"gantry","password":"s3cret","auth":"Z2FudHJ5OnMzY3JldA=="}}}}}}"#
    );
    let credentials = DockerConfig::from_json(secret.as_bytes(), "secret gantry/pull").unwrap();
    let pushed = push_bundle(
        &client_with(credentials.clone(), Some(&ca), &[]),
        &reference,
        &[],
    )
    .await;

    // The right secret and CA: pulled.
    let bundle = client_with(credentials.clone(), Some(&ca), &[])
        .pull(&request(&reference, None))
        .await
        .unwrap();
    assert_eq!(bundle.image.digest, pushed.digest);

    // The `auth` form alone works too.
    let auth_only = DockerConfig::from_json(
        format!(r#"{{"auths":{{"https://{host}/v2/":{{"auth":"Z2FudHJ5OnMzY3JldA=="}}}}}}"#)
            .as_bytes(),
        "secret",
    )
    .unwrap();
    client_with(auth_only, Some(&ca), &[])
        .pull(&request(&reference, None))
        .await
        .unwrap();

    // No credentials, or wrong ones: refused, naming the registry.
    let mut wrong = DockerConfig::default();
    wrong.insert(
        &host,
        Credential {
            username: "gantry".into(),
            password: "nope".into(),
        },
    );
    for credentials in [DockerConfig::default(), wrong] {
        match client_with(credentials, Some(&ca), &[])
            .pull(&request(&reference, None))
            .await
        {
            Err(ImageError::AuthRefused {
                registry,
                reference: r,
                ..
            }) => {
                assert_eq!(registry, host);
                assert_eq!(r, reference);
            }
            other => panic!("{other:?}"),
        }
    }

    // Without the CA the certificate is not trusted; plain HTTP is not spoken there.
    let err = client_with(credentials.clone(), None, &[])
        .pull(&request(&reference, None))
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::Registry { .. }), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    let err = client_with(credentials, Some(&ca), &[&host])
        .pull(&request(&reference, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&reference), "{err}");
}

/// The path of a blob in the registry's storage.
fn blob_path(registry: &Registry, digest: &str) -> std::path::PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    registry
        .root()
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data")
}

/// docker-registry keeps, per repository, a `link` file naming each blob it holds; one written
/// when the registry was killed can be left empty, and from then on the registry answers 500 to
/// every existence check of that blob in that repository. A push uploads the blob anyway, which
/// writes the link again.
#[tokio::test]
async fn a_push_repairs_a_blob_the_registry_cannot_check() {
    let own = Registry::start(RegistryOptions::default());
    let host = own.host().to_string();
    let client = plain_client(&host);
    let dir = bundle_dir(BUNDLE);
    let repo = unique_name("broken-link");
    let pushed = client
        .push_dir(dir.path(), &format!("{host}/{repo}:v1"), &[], &limits())
        .await
        .unwrap();
    let hex = pushed.layer_digest.trim_start_matches("sha256:");
    let link = own
        .root()
        .join("docker/registry/v2/repositories")
        .join(&repo)
        .join("_layers/sha256")
        .join(hex)
        .join("link");
    std::fs::write(&link, b"").unwrap();
    let check = reqwest::Client::new()
        .head(format!(
            "http://{host}/v2/{repo}/blobs/{}",
            pushed.layer_digest
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(
        check.status().as_u16(),
        500,
        "the registry cannot check the blob"
    );

    let again = client
        .push_dir(dir.path(), &format!("{host}/{repo}:v2"), &[], &limits())
        .await
        .expect("the push uploads the blob it could not check");
    assert_eq!(again.layer_digest, pushed.layer_digest);
    assert_eq!(std::fs::read_to_string(&link).unwrap(), pushed.layer_digest);
    client.pull(&request(&again.pinned, None)).await.unwrap();
}

#[tokio::test]
async fn a_blob_tampered_with_in_storage_is_a_digest_mismatch() {
    let own = Registry::start(RegistryOptions::default());
    let host = own.host().to_string();
    let client = plain_client(&host);
    let reference = format!("{host}/{}:v1", unique_name("tamper"));
    let pushed = push_bundle(&client, &reference, &[]).await;
    let path = blob_path(&own, &pushed.layer_digest);
    let mut data = std::fs::read(&path).unwrap();
    // Same length, different bytes in the compressed body.
    let middle = data.len() / 2;
    data[middle] ^= 0xff;
    std::fs::write(&path, &data).unwrap();
    match client.pull(&request(&reference, None)).await {
        Err(ImageError::DigestMismatch {
            expected, actual, ..
        }) => {
            assert_eq!(expected, pushed.layer_digest);
            assert_eq!(actual, sha256(&data));
        }
        other => panic!("{other:?}"),
    }
}

fn expect_invalid_entry(
    result: Result<gantry_image::PulledBundle, ImageError>,
    path: &str,
    needle: &str,
) {
    match result {
        Err(ImageError::InvalidEntry { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(reason.contains(needle), "{path}: {reason}");
        }
        other => panic!("{path}: expected an invalid entry, got {other:?}"),
    }
}

#[tokio::test]
async fn every_unsafe_entry_is_rejected_with_its_path() {
    use tar::EntryType::*;
    let host = registry().host();
    let client = plain_client(host);
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (
            Tar::default()
                .file("manifests/a.yaml", CONFIGMAP)
                .entry("manifests/link.yaml", Symlink, b"")
                .gzip(),
            "manifests/link.yaml",
            "symbolic link",
        ),
        (
            Tar::default()
                .file("manifests/a.yaml", CONFIGMAP)
                .entry("manifests/hard.yaml", Link, b"")
                .gzip(),
            "manifests/hard.yaml",
            "hard link",
        ),
        (
            Tar::default().entry("manifests/dev.yaml", Char, b"").gzip(),
            "manifests/dev.yaml",
            "device",
        ),
        (
            Tar::default()
                .entry("manifests/blk.yaml", Block, b"")
                .gzip(),
            "manifests/blk.yaml",
            "device",
        ),
        (
            Tar::default()
                .entry("manifests/fifo.yaml", Fifo, b"")
                .gzip(),
            "manifests/fifo.yaml",
            "FIFO",
        ),
        (
            Tar::default()
                .file("manifests/../../etc/cron.yaml", CONFIGMAP)
                .gzip(),
            "manifests/../../etc/cron.yaml",
            "..",
        ),
        (
            Tar::default().file("/manifests/a.yaml", CONFIGMAP).gzip(),
            "/manifests/a.yaml",
            "absolute",
        ),
        (
            Tar::default()
                .dir("manifests/")
                .dir("manifests/sub/")
                .gzip(),
            "manifests/sub/",
            "sub-directories",
        ),
        (
            Tar::default().file("manifests/sub/a.yaml", CONFIGMAP).tar(),
            "manifests/sub/a.yaml",
            "sub-directories",
        ),
        (
            Tar::default()
                .file("manifests/a.yaml", CONFIGMAP)
                .file("manifests/run.sh", "echo")
                .gzip(),
            "manifests/run.sh",
            ".yaml",
        ),
    ];
    for (layer, path, needle) in cases {
        let repo = unique_name("unsafe");
        push_layers(host, &repo, &[(GZIP_LAYER, layer)]).await;
        let result = client
            .pull(&request(&format!("{host}/{repo}:v1"), None))
            .await;
        expect_invalid_entry(result, path, needle);
    }
}

#[tokio::test]
async fn invalid_content_is_rejected_naming_the_culprit() {
    let host = registry().host();
    let client = plain_client(host);
    let pull = |layer: Vec<u8>| {
        let client = client.clone();
        async move {
            let repo = unique_name("invalid");
            push_layers(host, &repo, &[(TAR_LAYER, layer)]).await;
            client
                .pull(&request(&format!("{host}/{repo}:v1"), None))
                .await
        }
    };

    match pull(
        Tar::default()
            .file(
                "manifests/bad.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x\n",
            )
            .tar(),
    )
    .await
    {
        Err(ImageError::InvalidYaml { file, line, .. }) => {
            assert_eq!(file, "bad.yaml");
            assert!(line.is_some_and(|l| l >= 4), "{line:?}");
        }
        other => panic!("{other:?}"),
    }
    match pull(
        Tar::default()
            .file(
                "manifests/a.yaml",
                &format!("{CONFIGMAP}---\napiVersion: v1\nkind: Secret\nmetadata: {{}}\n"),
            )
            .tar(),
    )
    .await
    {
        Err(ImageError::InvalidObject {
            file,
            document,
            reason,
            ..
        }) => {
            assert_eq!((file.as_str(), document), ("a.yaml", 1));
            assert_eq!(reason, "metadata.name is missing");
        }
        other => panic!("{other:?}"),
    }
    match pull(
        Tar::default()
            .file("manifests/a.yaml", CONFIGMAP)
            .file("manifests/b.yaml", CONFIGMAP)
            .tar(),
    )
    .await
    {
        Err(ImageError::InvalidObject { file, reason, .. }) => {
            assert_eq!(file, "b.yaml");
            assert!(reason.contains("defined twice"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        pull(Tar::default().file("etc/a.yaml", CONFIGMAP).tar()).await,
        Err(ImageError::MissingManifests)
    ));
    assert!(matches!(
        pull(Tar::default().dir("manifests/").tar()).await,
        Err(ImageError::EmptyManifests)
    ));
    assert!(matches!(
        pull(
            Tar::default()
                .file("manifests/empty.yaml", "---\n# nothing\n")
                .tar()
        )
        .await,
        Err(ImageError::EmptyManifests)
    ));
}

#[tokio::test]
async fn layers_apply_in_order_with_whiteouts() {
    let host = registry().host();
    let repo = unique_name("layers");
    let base = Tar::default()
        .dir("manifests/")
        .file("manifests/a.yaml", CONFIGMAP)
        .file(
            "manifests/b.yaml",
            &CONFIGMAP.replace("name: cm", "name: b"),
        )
        .file(
            "manifests/c.yaml",
            &CONFIGMAP.replace("name: cm", "name: c"),
        )
        .gzip();
    let top = Tar::default()
        .file("manifests/.wh.b.yaml", "")
        .file(
            "manifests/c.yaml",
            &CONFIGMAP.replace("name: cm", "name: c2"),
        )
        .tar();
    push_layers(host, &repo, &[(GZIP_LAYER, base), (TAR_LAYER, top)]).await;
    let bundle = plain_client(host)
        .pull(&request(&format!("{host}/{repo}:v1"), None))
        .await
        .unwrap();
    assert_eq!(names(&bundle.objects), vec!["ConfigMap/cm", "ConfigMap/c2"]);
    let out = tempfile::tempdir().unwrap();
    bundle.persist_to(out.path()).unwrap();
    assert_eq!(
        read_dir_files(&out.path().join("manifests"))
            .into_iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>(),
        vec!["a.yaml", "c.yaml"]
    );
}

#[tokio::test]
async fn a_gzip_bomb_stops_at_the_uncompressed_limit() {
    let host = registry().host();
    let repo = unique_name("bomb");
    // 1 GiB of zeros in one file, about 1 MiB compressed: one gzip member per MiB (a valid
    // gzip stream) so that the test does not have to deflate a whole GiB.
    let mut header = tar::Header::new_gnu();
    header.set_path("manifests/bomb.yaml").unwrap();
    header.set_size(1 << 30);
    header.set_mode(0o644);
    header.set_cksum();
    let mut bomb = gzip(header.as_bytes());
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut encoder, &vec![0u8; 1 << 20]).unwrap();
    let one_mib = encoder.finish().unwrap();
    for _ in 0..1024 {
        bomb.extend_from_slice(&one_mib);
    }
    bomb.extend_from_slice(&gzip(&[0u8; 1024]));
    push_layers(host, &repo, &[(GZIP_LAYER, bomb.clone())]).await;

    let limit = 8u64 << 20;
    let stats = Arc::new(PullStats::default());
    let mut req = request(&format!("{host}/{repo}:v1"), None);
    req.limits = EffectiveLimits {
        max_uncompressed_bytes: limit,
        max_file_bytes: 4 << 30,
        ..EffectiveLimits::default()
    };
    req.stats = Some(stats.clone());
    match plain_client(host).pull(&req).await {
        Err(ImageError::LimitExceeded {
            limit: LimitKind::UncompressedBytes,
            value,
            ..
        }) => assert_eq!(value, limit),
        other => panic!("{other:?}"),
    }
    let inflated = stats.uncompressed_bytes.load(Ordering::Relaxed);
    assert!(inflated <= limit + 1, "inflated {inflated} bytes");
    assert!(inflated > limit / 2, "inflated only {inflated} bytes");
    // The compressed blob was read (and hashed) but never inflated past the limit.
    assert!(stats.compressed_bytes.load(Ordering::Relaxed) <= bomb.len() as u64);

    // The compressed limit stops the download itself.
    let stats = Arc::new(PullStats::default());
    req.limits = EffectiveLimits {
        max_compressed_bytes: 64 << 10,
        max_file_bytes: 4 << 30,
        ..EffectiveLimits::default()
    };
    req.stats = Some(stats.clone());
    match plain_client(host).pull(&req).await {
        Err(ImageError::LimitExceeded {
            limit: LimitKind::CompressedBytes,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_canonical_tarball_depends_only_on_content() {
    let host = registry().host();
    let client = plain_client(host);
    // The same files in a hand-made image (other order, other headers, two layers, gzip and
    // plain) and pushed by push: the same canonical digest.
    let (name_a, content_a) = BUNDLE[0];
    let (name_b, content_b) = BUNDLE[1];
    let repo = unique_name("canonical");
    push_layers(
        host,
        &repo,
        &[
            (
                TAR_LAYER,
                Tar::default()
                    .dir("./manifests/")
                    .file(&format!("manifests/{name_b}"), content_b)
                    .tar(),
            ),
            (
                GZIP_LAYER,
                Tar::default()
                    .file(&format!("./manifests/{name_a}"), content_a)
                    .file("other/file", "x")
                    .gzip(),
            ),
        ],
    )
    .await;
    let handmade = client
        .pull(&request(&format!("{host}/{repo}:v1"), None))
        .await
        .unwrap();
    let repo2 = unique_name("canonical");
    let pushed = push_bundle(&client, &format!("{host}/{repo2}:v1"), &[]).await;
    let pulled = client.pull(&request(&pushed.pinned, None)).await.unwrap();
    let mut one = Vec::new();
    let mut two = Vec::new();
    let d1 = handmade.write_canonical(&mut one).unwrap();
    let d2 = pulled.write_canonical(&mut two).unwrap();
    assert_eq!(d1, d2);
    assert_eq!(one, two);
    assert_eq!(d1.digest, pushed.layer_digest);
    assert_eq!(d1.digest, sha256(&one));
    // Another byte in a file: another digest.
    let changed = bundle_dir(&[BUNDLE[0], (name_b, &format!("{content_b}\n"))]);
    let pushed3 = client
        .push_dir(
            changed.path(),
            &format!("{host}/{repo2}:v2"),
            &[],
            &limits(),
        )
        .await
        .unwrap();
    assert_ne!(pushed3.layer_digest, d1.digest);
}

#[tokio::test]
async fn docker_schema2_manifest_lists_are_pulled() {
    let host = registry().host();
    let client = plain_client(host);
    let repo = unique_name("oci");
    let pushed = push_bundle(&client, &format!("{host}/{repo}:v1"), &AMD64_AND_ARM64).await;
    // skopeo rewrites the image with Docker media types (manifest list, schema 2 manifests,
    // `rootfs.diff.tar.gzip` layers).
    let docker = unique_name("docker");
    run(Command::new("skopeo").args([
        "copy",
        "--all",
        "--format",
        "v2s2",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{host}/{repo}:v1"),
        &format!("docker://{host}/{docker}:v1"),
    ]));
    let raw = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{host}/{docker}:v1"),
    ]));
    let list: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        list["mediaType"],
        "application/vnd.docker.distribution.manifest.list.v2+json"
    );
    let bundle = client
        .pull(&request(
            &format!("{host}/{docker}:v1"),
            Some("linux/arm64"),
        ))
        .await
        .unwrap();
    assert!(bundle.image.from_index);
    assert_eq!(bundle.image.digest, sha256(&raw));
    assert_eq!(bundle.image.platform.to_string(), "linux/arm64");
    assert_eq!(
        names(&bundle.objects),
        vec!["Namespace/demo", "ConfigMap/a", "ConfigMap/b"]
    );
    // The files are the same, so is the canonical tarball.
    let mut tarball = Vec::new();
    assert_eq!(
        bundle.write_canonical(&mut tarball).unwrap().digest,
        pushed.layer_digest
    );
}

#[tokio::test]
async fn the_object_limit_applies_across_files() {
    let host = registry().host();
    let repo = unique_name("objects");
    let two = |prefix: &str| {
        format!(
            "{}---\n{}",
            CONFIGMAP.replace("name: cm", &format!("name: {prefix}1")),
            CONFIGMAP.replace("name: cm", &format!("name: {prefix}2"))
        )
    };
    let layer = Tar::default()
        .file("manifests/a.yaml", &two("a"))
        .file("manifests/b.yaml", &two("b"))
        .file("manifests/c.yaml", &two("c"))
        .gzip();
    push_layers(host, &repo, &[(GZIP_LAYER, layer)]).await;
    let client = plain_client(host);
    let mut req = request(&format!("{host}/{repo}:v1"), None);
    req.limits = EffectiveLimits {
        max_objects: 5,
        ..EffectiveLimits::default()
    };
    match client.pull(&req).await {
        Err(ImageError::LimitExceeded {
            limit: LimitKind::Objects,
            value: 5,
            culprit,
        }) => assert_eq!(culprit, "c.yaml, document 1"),
        other => panic!("{other:?}"),
    }
    req.limits.max_objects = 6;
    assert_eq!(client.pull(&req).await.unwrap().objects.len(), 6);
}
