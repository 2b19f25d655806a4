//! What `install` applies: the embedded manifests, in install order, customised by the
//! options; no cluster is read here.

use anyhow::{Context, bail};
use serde_json::Value;

/// What `install` applies, one step after the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Crds,
    Access,
    Storage,
    Provisioner,
    Classes,
}

impl Step {
    pub(super) const ORDER: [Step; 5] = [
        Step::Crds,
        Step::Access,
        Step::Storage,
        Step::Provisioner,
        Step::Classes,
    ];

    pub(super) fn what(self) -> &'static str {
        match self {
            Step::Crds => "the CRDs",
            Step::Access => "the namespace and RBAC",
            Step::Storage => "the storage server",
            Step::Provisioner => "the provisioner",
            Step::Classes => "the default classes",
        }
    }
}

/// `manifests/FILE`, embedded, with its step.
macro_rules! manifest {
    ($file:literal, $step:ident) => {
        (
            $file,
            Step::$step,
            include_str!(concat!("../../../../manifests/", $file)),
        )
    };
}

/// `manifests/`, file by file in name order, with the step each file belongs to. A unit test
/// checks that every file of `manifests/` is here.
const MANIFESTS: [(&str, Step, &str); 10] = [
    manifest!("00-namespace.yaml", Access),
    manifest!("01-crds.yaml", Crds),
    manifest!("02-serviceaccounts.yaml", Access),
    manifest!("03-rbac-provisioner.yaml", Access),
    manifest!("04-rbac-storage.yaml", Access),
    manifest!("05-rbac-bundle-content.yaml", Access),
    manifest!("06-rbac-users.yaml", Access),
    manifest!("10-storage-server.yaml", Storage),
    manifest!("11-provisioner.yaml", Provisioner),
    manifest!("20-classes.yaml", Classes),
];

/// The options that change what is applied.
#[derive(Debug, Default)]
pub(super) struct Options<'a> {
    pub(super) registry: Option<&'a str>,
    pub(super) storage_class: Option<&'a str>,
}

/// The objects of `manifests/` as install applies them: in install order, each with its step.
pub(super) fn objects(options: &Options) -> anyhow::Result<Vec<(Step, Value)>> {
    let mut all = Vec::new();
    for step in Step::ORDER {
        for (file, _, text) in MANIFESTS.iter().filter(|(_, s, _)| *s == step) {
            let documents: Vec<Value> = serde_saphyr::from_multiple(text)
                .with_context(|| format!("reading the embedded manifests/{file}"))?;
            for mut object in documents.into_iter().filter(|d| !d.is_null()) {
                customise(&mut object, options);
                all.push((step, object));
            }
        }
    }
    Ok(all)
}

/// Applies the options to one object.
fn customise(object: &mut Value, options: &Options) {
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    if let Some(registry) = options.registry
        && matches!(kind.as_str(), "Deployment" | "StatefulSet" | "DaemonSet")
    {
        let pod = &mut object["spec"]["template"]["spec"];
        for list in ["initContainers", "containers"] {
            if let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) {
                for container in containers {
                    if let Some(image) = container.get("image").and_then(Value::as_str) {
                        container["image"] = Value::from(relocate(image, registry));
                    }
                }
            }
        }
    }
    if let Some(class) = options.storage_class
        && kind == "PersistentVolumeClaim"
    {
        object["spec"]["storageClassName"] = Value::from(class);
    }
}

/// `image` under `registry`: the last segment of its repository (and its tag or digest) kept,
/// what precedes it replaced, as a release's `ghcr.io/gantry-dev/gantry-provisioner:TAG` is
/// `REGISTRY/gantry-provisioner:TAG` once pushed to `REGISTRY` (docs/install.md).
fn relocate(image: &str, registry: &str) -> String {
    let name = image.rsplit('/').next().unwrap_or(image);
    format!("{}/{name}", registry.trim_end_matches('/'))
}

pub(super) fn validate_registry(registry: &str) -> anyhow::Result<()> {
    if registry.is_empty() || registry.contains("://") || registry.contains(char::is_whitespace) {
        bail!(
            "--registry {registry:?}: give a registry host and optional path, e.g. registry.example.com:5000/mirror (no scheme)"
        );
    }
    Ok(())
}

/// The objects of `step`, in order.
pub(super) fn in_step(objects: &[(Step, Value)], step: Step) -> Vec<&Value> {
    objects
        .iter()
        .filter(|(s, _)| *s == step)
        .map(|(_, o)| o)
        .collect()
}

/// The YAML of `objects`, one document each.
pub(super) fn export(objects: &[(Step, Value)]) -> anyhow::Result<String> {
    let mut out = String::new();
    for (_, object) in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(object).context("writing YAML")?);
    }
    Ok(out)
}

pub(super) fn name_of(object: &Value) -> (&str, Option<&str>) {
    (
        object["metadata"]["name"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str(),
    )
}

/// kubectl's name of an object: `kind.group/name`.
pub(super) fn display(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
    let group = object["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .map(|(g, _)| format!(".{g}"))
        .unwrap_or_default();
    format!("{kind}{group}/{}", name_of(object).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_manifests_is_embedded_in_name_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        files.sort();
        let embedded: Vec<&str> = MANIFESTS.iter().map(|(f, _, _)| *f).collect();
        assert_eq!(embedded, files);
        for (file, _, text) in MANIFESTS {
            assert_eq!(std::fs::read_to_string(dir.join(file)).unwrap(), text);
        }
    }

    #[test]
    fn the_options_change_the_images_and_the_volume_only() {
        let plain = objects(&Options::default()).unwrap();
        let changed = objects(&Options {
            registry: Some("localhost:5000/mirror/"),
            storage_class: Some("fast"),
        })
        .unwrap();
        assert_eq!(plain.len(), changed.len());
        let mut images = Vec::new();
        for ((_, a), (_, b)) in plain.iter().zip(&changed) {
            if a == b {
                continue;
            }
            match a["kind"].as_str().unwrap() {
                "Deployment" => {
                    images.push(b["spec"]["template"]["spec"]["containers"][0]["image"].clone())
                }
                "PersistentVolumeClaim" => assert_eq!(b["spec"]["storageClassName"], "fast"),
                other => panic!("{other} changed"),
            }
        }
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            images,
            [
                format!("localhost:5000/mirror/gantry-storage-server:{version}"),
                format!("localhost:5000/mirror/gantry-provisioner:{version}")
            ]
        );
        assert_eq!(
            relocate("ghcr.io/x/gantry-provisioner:1@sha256:ab", "localhost:5000"),
            "localhost:5000/gantry-provisioner:1@sha256:ab"
        );
    }

    #[test]
    fn the_steps_come_in_install_order() {
        let steps: Vec<Step> = objects(&Options::default())
            .unwrap()
            .iter()
            .map(|(s, _)| *s)
            .collect();
        let mut sorted = steps.clone();
        sorted.sort_by_key(|s| Step::ORDER.iter().position(|o| o == s));
        assert_eq!(steps, sorted);
        let exported = export(&objects(&Options::default()).unwrap()).unwrap();
        let back: Vec<Value> = serde_saphyr::from_multiple(&exported).unwrap();
        let back: Vec<Value> = back.into_iter().filter(|v| !v.is_null()).collect();
        let original: Vec<Value> = objects(&Options::default())
            .unwrap()
            .into_iter()
            .map(|(_, o)| o)
            .collect();
        assert_eq!(back, original);
    }
}
