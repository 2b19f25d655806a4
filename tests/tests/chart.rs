//! Gantry's other install files against `manifests/`: the Helm chart `charts/gantry` (rendered
//! and linted by the real `helm`, built by `tools/helm/build.sh`) and `scripts/install-yaml`,
//! the single file a release attaches. Neither needs a cluster: both must hold the objects of
//! `manifests/`, and their settings must change only what they name. And the one naming of
//! Gantry's images that all of them, `kubectl bundle install` and the release workflow share.

use std::process::Command;

use gantry_tests::helm::{
    HELM_LABELS, Objects, assert_same_objects, manifests_objects, yaml_objects,
};
use gantry_tests::{helm_binary, workspace_root};
use serde_json::{Value, json};

const PROVISIONER: &str = "apps/v1 Deployment gantry-system/gantry-provisioner";
const STORAGE: &str = "apps/v1 Deployment gantry-system/gantry-storage";
const CLAIM: &str = "v1 PersistentVolumeClaim gantry-system/gantry-storage";
/// The one container of either Deployment.
const CONTAINER: &str = "/spec/template/spec/containers/0";
const PLAIN: &str = "gantry.dev/v1alpha1 ProvisionerClass plain";
const DIGEST_A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DIGEST_B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
/// Where a release publishes Gantry's images, and their repositories there (docs/install.md).
const RELEASE_REGISTRY: &str = "ghcr.io/gantry-dev";
const PROVISIONER_REPOSITORY: &str = "gantry-provisioner";
const STORAGE_REPOSITORY: &str = "gantry-storage-server";

fn stdout_of(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn helm() -> Command {
    let mut command = Command::new(helm_binary());
    // helm's own configuration and caches, away from the user's.
    let home = std::env::temp_dir().join(format!("gantry-helm-home-{}", std::process::id()));
    command
        .current_dir(workspace_root())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

/// `helm template` of the chart with `args` (`--set ...`), CRDs included, as objects; the
/// labels Helm's conventions add are checked, then removed.
fn rendered(args: &[&str]) -> Objects {
    let yaml = stdout_of(
        helm()
            .args(["template", "gantry", "charts/gantry", "--include-crds"])
            .args(args),
    );
    let mut objects = yaml_objects("helm template", &yaml);
    for (key, object) in objects.iter_mut() {
        if key.contains(" CustomResourceDefinition ") {
            continue; // crds/ is not templated: the files of manifests/crds/ as they are.
        }
        let labels = object
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{key} has no labels"));
        for label in HELM_LABELS {
            assert!(
                labels.remove(label).is_some(),
                "{key} lacks the label {label}"
            );
        }
    }
    objects
}

fn set(objects: &mut Objects, key: &str, pointer: &str, value: Value) {
    let object = objects.get_mut(key).unwrap_or_else(|| panic!("no {key}"));
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{key} has no {parent}"))
        .insert(field.to_string(), value);
}

#[test]
fn the_chart_with_default_values_renders_the_manifests() {
    assert_same_objects(
        "helm template charts/gantry",
        &rendered(&[]),
        &manifests_objects(),
    );
}

#[test]
fn helm_lint_passes_on_the_chart() {
    let output = stdout_of(helm().args(["lint", "--strict", "charts/gantry"]));
    assert!(
        output.contains("1 chart(s) linted, 0 chart(s) failed"),
        "helm lint said:\n{output}"
    );
}

#[test]
fn the_chart_values_change_only_what_they_name() {
    let actual = rendered(&[
        "--set",
        "image.registry=127.0.0.1:5000/team,image.tag=9.9.9",
        "--set",
        &format!("provisioner.image.digest={DIGEST_A}"),
        "--set",
        "provisioner.replicas=5,provisioner.scratchSizeLimit=4Gi",
        "--set",
        "provisioner.resources.limits.memory=1Gi,storage.resources.requests.cpu=200m",
        "--set",
        "storage.persistence.size=50Gi,storage.persistence.storageClassName=fast",
        "--set",
        "classes.default=false",
        "--set-json",
        r#"provisioner.extraArgs=["--reconcile-concurrency=32","--provisioner-id=tenants"]"#,
    ]);
    let mut expected = manifests_objects();
    let provisioner = CONTAINER;
    let args = expected
        .get_mut(PROVISIONER)
        .unwrap()
        .pointer_mut(&format!("{provisioner}/args"))
        .and_then(Value::as_array_mut)
        .unwrap();
    args.push(json!("--reconcile-concurrency=32"));
    args.push(json!("--provisioner-id=tenants"));
    set(
        &mut expected,
        PROVISIONER,
        &format!("{provisioner}/image"),
        json!(format!("127.0.0.1:5000/team/gantry-provisioner@{DIGEST_A}")),
    );
    set(&mut expected, PROVISIONER, "/spec/replicas", json!(5));
    set(
        &mut expected,
        PROVISIONER,
        "/spec/template/spec/volumes/1/emptyDir/sizeLimit",
        json!("4Gi"),
    );
    set(
        &mut expected,
        PROVISIONER,
        &format!("{provisioner}/resources/limits/memory"),
        json!("1Gi"),
    );
    let storage = CONTAINER;
    set(
        &mut expected,
        STORAGE,
        &format!("{storage}/image"),
        json!("127.0.0.1:5000/team/gantry-storage-server:9.9.9"),
    );
    set(
        &mut expected,
        STORAGE,
        &format!("{storage}/resources/requests/cpu"),
        json!("200m"),
    );
    set(
        &mut expected,
        CLAIM,
        "/spec/resources/requests/storage",
        json!("50Gi"),
    );
    set(
        &mut expected,
        CLAIM,
        "/spec/storageClassName",
        json!("fast"),
    );
    expected
        .get_mut(PLAIN)
        .unwrap()
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .unwrap()
        .remove("annotations");
    assert_same_objects("helm template with values set", &actual, &expected);

    // An empty class name is kept (no dynamic provisioning); without classes, none render.
    let actual = rendered(&[
        "--set",
        "storage.persistence.storageClassName=,classes.install=false",
    ]);
    let mut expected = manifests_objects();
    set(&mut expected, CLAIM, "/spec/storageClassName", json!(""));
    expected.retain(|key, _| !key.contains(" ProvisionerClass "));
    assert_same_objects("helm template without classes", &actual, &expected);
}

fn install_yaml(args: &[&str]) -> Objects {
    let script = workspace_root().join("scripts/install-yaml");
    let yaml = stdout_of(gantry_tests::script_command().arg(&script).args(args));
    yaml_objects("scripts/install-yaml", &yaml)
}

#[test]
fn install_yaml_holds_the_manifests_with_the_images_of_the_release() {
    let version = env!("CARGO_PKG_VERSION");
    assert_same_objects(
        "scripts/install-yaml",
        &install_yaml(&[version]),
        &manifests_objects(),
    );

    let actual = install_yaml(&[
        "v7.8.9",
        "--registry",
        "ghcr.io/owner",
        "--provisioner-digest",
        DIGEST_A,
        "--storage-digest",
        DIGEST_B,
    ]);
    let mut expected = manifests_objects();
    set(
        &mut expected,
        PROVISIONER,
        &format!("{CONTAINER}/image"),
        json!(format!("ghcr.io/owner/gantry-provisioner:7.8.9@{DIGEST_A}")),
    );
    set(
        &mut expected,
        STORAGE,
        &format!("{CONTAINER}/image"),
        json!(format!(
            "ghcr.io/owner/gantry-storage-server:7.8.9@{DIGEST_B}"
        )),
    );
    assert_same_objects("scripts/install-yaml with a release", &actual, &expected);
}

/// The images of the provisioner's and the storage server's Deployments among `objects`.
fn images(what: &str, objects: &Objects) -> [String; 2] {
    [PROVISIONER, STORAGE].map(|key| {
        objects
            .get(key)
            .and_then(|o| o.pointer(&format!("{CONTAINER}/image")))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{what}: {key} names no image"))
            .to_string()
    })
}

/// `kubectl-bundle install --export ARGS`, as objects (no cluster is asked).
fn install_export(args: &[&str]) -> Objects {
    let plugin = gantry_tests::binary("kubectl-bundle", "kubectl-bundle");
    let yaml = stdout_of(
        Command::new(plugin)
            .args(["install", "--export"])
            .args(args),
    );
    yaml_objects("kubectl bundle install --export", &yaml)
}

#[test]
fn gantry_images_have_one_name() {
    let version = env!("CARGO_PKG_VERSION");
    let under = |registry: &str| {
        [PROVISIONER_REPOSITORY, STORAGE_REPOSITORY].map(|r| format!("{registry}/{r}:{version}"))
    };
    let mirror = "127.0.0.1:5000/mirror";

    // What the release workflow pushes: REGISTRY/REPOSITORY:VERSION, VERSION being the tag,
    // which it checks is the workspace version.
    let path = workspace_root().join(".github/workflows/release.yml");
    let workflow: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        workflow["env"]["REGISTRY"],
        RELEASE_REGISTRY,
        "{}",
        path.display()
    );
    let job = &workflow["jobs"]["images"];
    assert_eq!(
        job["env"]["VERSION"],
        "${{ needs.version.outputs.version }}"
    );
    for (id, binary, repository) in [
        ("provisioner", "gantry-provisioner", PROVISIONER_REPOSITORY),
        ("storage", "gantry-storage", STORAGE_REPOSITORY),
    ] {
        let step = job["steps"]
            .as_array()
            .and_then(|steps| steps.iter().find(|s| s["id"] == id))
            .unwrap_or_else(|| panic!("{}: no step {id} in job images", path.display()));
        assert_eq!(step["with"]["build-args"], format!("BINARY={binary}"));
        assert_eq!(
            step["with"]["tags"],
            format!("${{{{ env.REGISTRY }}}}/{repository}:${{{{ env.VERSION }}}}"),
            "{}: step {id}",
            path.display()
        );
    }

    // manifests/ name them so; the chart's values do, rendered and with a registry of one's own;
    // so do `kubectl bundle install` and `--registry`, and install.yaml with `--registry`.
    let release = under(RELEASE_REGISTRY);
    assert_eq!(images("manifests/", &manifests_objects()), release);
    let values_path = workspace_root().join("charts/gantry/values.yaml");
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(&values_path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", values_path.display()));
    assert_eq!(values["image"]["registry"], RELEASE_REGISTRY);
    assert_eq!(
        values["provisioner"]["image"]["repository"],
        PROVISIONER_REPOSITORY
    );
    assert_eq!(values["storage"]["image"]["repository"], STORAGE_REPOSITORY);
    assert_eq!(images("helm template", &rendered(&[])), release);
    let registry = format!("image.registry={mirror}");
    assert_eq!(
        images("helm template", &rendered(&["--set", &registry])),
        under(mirror)
    );
    assert_eq!(images("install --export", &install_export(&[])), release);
    assert_eq!(
        images(
            "install --export --registry",
            &install_export(&["--registry", mirror])
        ),
        under(mirror)
    );
    assert_eq!(
        images(
            "scripts/install-yaml --registry",
            &install_yaml(&[version, "--registry", mirror])
        ),
        under(mirror)
    );
}

#[test]
fn the_charts_crds_are_those_of_manifests() {
    let root = workspace_root();
    for name in [
        "gantry.dev_bundles.yaml",
        "gantry.dev_provisionerclasses.yaml",
    ] {
        let read = |path: &str| {
            let path = root.join(path).join(name);
            std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        };
        assert!(
            read("charts/gantry/crds") == read("manifests/crds"),
            "charts/gantry/crds/{name} differs from manifests/crds/{name}: \
             run `cargo run -p gantry-api --bin crdgen`, which writes both"
        );
    }
}

#[test]
fn krew_manifest_names_each_archive_with_its_sha256() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let mut archives = Vec::new();
    for platform in ["linux_amd64", "linux_arm64"] {
        let path = dir.path().join(format!("kubectl-bundle_{platform}.tar.gz"));
        std::fs::write(&path, format!("an archive for {platform}")).unwrap();
        archives.push(path);
    }
    let base = "https://github.com/owner/gantry/releases/download/v7.8.9";
    let script = workspace_root().join("scripts/krew-manifest");
    let yaml = stdout_of(
        gantry_tests::script_command()
            .arg(&script)
            .args(["v7.8.9", base])
            .args(&archives),
    );
    let manifest: Value = serde_saphyr::from_str(&yaml).expect("krew's manifest is YAML");
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "bundle");
    assert_eq!(manifest["spec"]["version"], "v7.8.9");
    let platforms = manifest["spec"]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 2, "{yaml}");
    for (platform, archive) in platforms.iter().zip(&archives) {
        let file = archive.file_name().unwrap().to_str().unwrap();
        let arch = file.trim_end_matches(".tar.gz").rsplit('_').next().unwrap();
        assert_eq!(platform["selector"]["matchLabels"]["os"], "linux");
        assert_eq!(platform["selector"]["matchLabels"]["arch"], arch);
        assert_eq!(platform["uri"], format!("{base}/{file}"));
        let sha256 = hex::encode(Sha256::digest(std::fs::read(archive).unwrap()));
        assert_eq!(platform["sha256"], sha256, "{file}");
        assert_eq!(platform["bin"], "kubectl-bundle");
    }
}
