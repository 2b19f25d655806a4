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
    /// The optional component `manifests/components/helm-plugin` (`--with-helm-plugin`).
    HelmPlugin,
    Classes,
}

impl Step {
    pub(super) const ORDER: [Step; 6] = [
        Step::Crds,
        Step::Access,
        Step::Storage,
        Step::Provisioner,
        Step::HelmPlugin,
        Step::Classes,
    ];

    pub(super) fn what(self) -> &'static str {
        match self {
            Step::Crds => "the CRDs",
            Step::Access => "the namespace and RBAC",
            Step::Storage => "the storage server",
            Step::Provisioner => "the provisioner",
            Step::HelmPlugin => "the Helm plugin and its class",
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

/// `manifests/components/helm-plugin/FILE`, embedded: the optional component's objects, in
/// the files its `kustomization.yaml` lists (a unit test checks they are all here).
macro_rules! component_file {
    ($file:literal) => {
        (
            $file,
            include_str!(concat!(
                "../../../../manifests/components/helm-plugin/",
                $file
            )),
        )
    };
}

/// The component `manifests/components/helm-plugin`: gantry-helm-plugin (its ServiceAccount,
/// RBAC, Deployment, PodDisruptionBudget, the Service registering it) and the class `helm`.
const HELM_PLUGIN: [(&str, &str); 3] = [
    component_file!("00-rbac.yaml"),
    component_file!("10-plugin.yaml"),
    component_file!("20-class.yaml"),
];

/// The Secrets the plugin's Deployment and Service name: its serving certificate
/// (`kubernetes.io/tls`) and the CA that verifies it (`ca.crt`), both in `gantry-system`.
pub(super) const HELM_PLUGIN_TLS_SECRET: &str = "gantry-helm-plugin-tls";
pub(super) const HELM_PLUGIN_CA_SECRET: &str = "gantry-helm-plugin-ca";
/// The name the plugin's serving certificate must be valid for.
pub(super) const HELM_PLUGIN_SERVICE_NAME: &str = "gantry-helm-plugin.gantry-system.svc";

/// The options that change what is applied.
#[derive(Debug, Default)]
pub(super) struct Options<'a> {
    pub(super) registry: Option<&'a str>,
    pub(super) storage_class: Option<&'a str>,
    /// The optional component `manifests/components/helm-plugin` too.
    pub(super) helm_plugin: bool,
}

/// The objects of `manifests/` as install applies them: in install order, each with its step.
pub(super) fn objects(options: &Options) -> anyhow::Result<Vec<(Step, Value)>> {
    let mut all = Vec::new();
    for step in Step::ORDER {
        let files: Vec<(String, &str)> = if step == Step::HelmPlugin {
            if !options.helm_plugin {
                continue;
            }
            HELM_PLUGIN
                .iter()
                .map(|(file, text)| (format!("components/helm-plugin/{file}"), *text))
                .collect()
        } else {
            MANIFESTS
                .iter()
                .filter(|(_, s, _)| *s == step)
                .map(|(file, _, text)| (file.to_string(), *text))
                .collect()
        };
        for (file, text) in files {
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
    fn every_file_of_the_helm_plugin_component_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../manifests/components/helm-plugin");
        let kustomization: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap(),
        )
        .unwrap();
        assert_eq!(kustomization["kind"], "Component");
        let listed: Vec<&str> = kustomization["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .collect();
        files.sort();
        let embedded: Vec<&str> = HELM_PLUGIN.iter().map(|(f, _)| *f).collect();
        assert_eq!(embedded, files);
        assert_eq!(embedded, listed);
        for (file, text) in HELM_PLUGIN {
            assert_eq!(std::fs::read_to_string(dir.join(file)).unwrap(), text);
        }
    }

    /// The plugin's image is named as Gantry's are (docs/install.md): under the release's
    /// registry in the component, the chart's values, the release workflow and scripts/images,
    /// and under `--registry` here.
    #[test]
    fn the_helm_plugins_image_has_one_name() {
        let version = env!("CARGO_PKG_VERSION");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        let image_of = |objects: &[(Step, Value)]| -> Vec<String> {
            objects
                .iter()
                .filter(|(step, o)| *step == Step::HelmPlugin && o["kind"] == "Deployment")
                .map(|(_, o)| {
                    o["spec"]["template"]["spec"]["containers"][0]["image"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let with_plugin = |registry| Options {
            registry,
            helm_plugin: true,
            ..Default::default()
        };
        assert_eq!(
            image_of(&objects(&with_plugin(None)).unwrap()),
            [format!("ghcr.io/gantry-dev/gantry-helm-plugin:{version}")]
        );
        assert_eq!(
            image_of(&objects(&with_plugin(Some("localhost:5000/mirror"))).unwrap()),
            [format!(
                "localhost:5000/mirror/gantry-helm-plugin:{version}"
            )]
        );

        let workflow: Value =
            serde_saphyr::from_str(&read(".github/workflows/release.yml")).unwrap();
        assert_eq!(workflow["env"]["REGISTRY"], "ghcr.io/gantry-dev");
        let step = workflow["jobs"]["images"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "helm-plugin")
            .expect("a step helm-plugin in the release's images job");
        assert_eq!(
            step["with"]["tags"],
            "${{ env.REGISTRY }}/gantry-helm-plugin:${{ env.VERSION }}"
        );
        assert_eq!(step["with"]["file"], "plugins/helm/Dockerfile.build");

        let values: Value = serde_saphyr::from_str(&read("charts/gantry/values.yaml")).unwrap();
        assert_eq!(values["image"]["registry"], "ghcr.io/gantry-dev");
        assert_eq!(
            values["helmPlugin"]["image"]["repository"],
            "gantry-helm-plugin"
        );
        assert_eq!(values["helmPlugin"]["enabled"], false);
        assert!(
            read("scripts/images").contains("[gantry-helm-plugin]=gantry-helm-plugin"),
            "scripts/images pushes the plugin as gantry-helm-plugin"
        );
    }

    #[test]
    fn the_helm_plugin_is_only_there_when_asked_for() {
        let plain = objects(&Options::default()).unwrap();
        assert!(plain.iter().all(|(step, _)| *step != Step::HelmPlugin));
        let with = objects(&Options {
            helm_plugin: true,
            ..Default::default()
        })
        .unwrap();
        let added: Vec<String> = with
            .iter()
            .filter(|(step, _)| *step == Step::HelmPlugin)
            .map(|(_, o)| display(o))
            .collect();
        assert_eq!(
            added,
            [
                "serviceaccount/gantry-helm-plugin",
                "clusterrole.rbac.authorization.k8s.io/gantry-helm-plugin",
                "clusterrolebinding.rbac.authorization.k8s.io/gantry-helm-plugin",
                "deployment.apps/gantry-helm-plugin",
                "poddisruptionbudget.policy/gantry-helm-plugin",
                "service/gantry-helm-plugin",
                "provisionerclass.gantry.dev/helm",
            ]
        );
        let rest: Vec<&Value> = with
            .iter()
            .filter(|(step, _)| *step != Step::HelmPlugin)
            .map(|(_, o)| o)
            .collect();
        assert_eq!(rest, plain.iter().map(|(_, o)| o).collect::<Vec<_>>());
    }

    #[test]
    fn the_options_change_the_images_and_the_volume_only() {
        let plain = objects(&Options::default()).unwrap();
        let changed = objects(&Options {
            registry: Some("localhost:5000/mirror/"),
            storage_class: Some("fast"),
            ..Default::default()
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
