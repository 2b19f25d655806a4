//! `version` and `check`: what runs in the cluster, and whether it can serve bundles. Here
//! `version`, and where Gantry runs; `check` in its own module.

pub(super) mod check;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;

use super::cluster::GlobalArgs;
use super::output::{OutputFormat, parse_output, print_structured};

/// The Deployment (and Lease) of the provisioner, and the Deployment of the storage server, as
/// `manifests/` installs them.
const PROVISIONER: &str = "gantry-provisioner";
const STORAGE: &str = "gantry-storage";
/// The label read for the controller's version before the image tag.
const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// Where Gantry runs.
#[derive(Args, Debug)]
pub struct SystemArgs {
    /// Namespace of the provisioner and the storage server.
    #[arg(long, default_value = "gantry-system", value_name = "NAMESPACE")]
    system_namespace: String,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  kubectl bundle version\n  kubectl bundle version -o json")]
pub struct VersionArgs {
    #[command(flatten)]
    system: SystemArgs,
    /// Output format: json, yaml, jsonpath=TEMPLATE or custom-columns=SPEC.
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
}

/// The controller's version: the Deployment's `app.kubernetes.io/version` label, else the tag
/// of its `provisioner` container's image (else its first container's).
fn controller_version(deployment: &Deployment) -> Option<(String, String)> {
    let containers = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers;
    let image = containers
        .iter()
        .find(|c| c.name == "provisioner")
        .or(containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    if let Some(version) = deployment.labels().get(VERSION_LABEL) {
        return Some((version.clone(), format!("label {VERSION_LABEL}")));
    }
    let (without_digest, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image.as_str(), None),
    };
    let last = without_digest.rsplit('/').next().unwrap_or_default();
    let version = match (last.split_once(':'), digest) {
        (Some((_, tag)), _) => tag.to_string(),
        // Pinned by digest alone: the digest is what is known, not "latest".
        (None, Some(digest)) => digest.to_string(),
        (None, None) => "latest".to_string(),
    };
    Some((version, format!("image {image}")))
}

/// `(major, minor)` of a release version: `0.1.0`, `v0.1.0`, `0.1.0-rc.1`, `v0.1`. None for
/// anything else (`latest`, a commit), which cannot be compared.
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let core = version.split(['-', '+']).next()?;
    let numbers = core
        .split('.')
        .map(|n| n.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    match numbers.as_slice() {
        [major, minor] | [major, minor, _] => Some((*major, *minor)),
        _ => None,
    }
}

/// The supported skew between the plugin and the controller, in words.
const SUPPORTED_SKEW: &str = "the plugin and the provisioner are supported at the same major.minor version (patch releases may differ)";

/// A warning when the plugin and the controller differ in major or minor version, naming both
/// and which to upgrade; None when they agree or either cannot be compared.
fn skew_warning(plugin: &str, controller: &str) -> Option<String> {
    let ours = major_minor(plugin)?;
    let theirs = major_minor(controller)?;
    if ours == theirs {
        return None;
    }
    let fix = if ours < theirs {
        format!("upgrade the plugin to {}.{}", theirs.0, theirs.1)
    } else {
        format!(
            "upgrade the provisioner to {}.{} (CRDs first, see \"Upgrading Gantry\" in docs/operations.md) or use a {}.{} plugin",
            ours.0, ours.1, theirs.0, theirs.1
        )
    };
    Some(format!(
        "warning: plugin version {plugin} and controller version {controller} differ: {SUPPORTED_SKEW}; {fix}"
    ))
}

pub async fn version(global: &GlobalArgs, args: VersionArgs) -> anyhow::Result<()> {
    let plugin = env!("CARGO_PKG_VERSION");
    let client = global.client().await?;
    let kubernetes = client
        .apiserver_version()
        .await
        .context("reading the API server's version")?
        .git_version;
    let namespace = &args.system.system_namespace;
    let deployment = Api::<Deployment>::namespaced(client, namespace)
        .get_opt(PROVISIONER)
        .await
        .with_context(|| format!("reading Deployment {namespace}/{PROVISIONER}"))?;
    let controller = deployment.as_ref().and_then(controller_version);
    let value = json!({
        "plugin": plugin,
        "kubernetes": kubernetes,
        "controller": controller.as_ref().map(|(v, _)| v),
        "controllerSource": controller.as_ref().map(|(_, from)| format!("Deployment {namespace}/{PROVISIONER}, {from}")),
    });
    // On stderr, as kubectl's own skew warning: the output stays what scripts read.
    let warning = controller
        .as_ref()
        .and_then(|(version, _)| skew_warning(plugin, version));
    if print_structured(&value, args.output.as_ref())? {
        if let Some(warning) = &warning {
            eprintln!("{warning}");
        }
        return Ok(());
    }
    println!("Plugin version:     {plugin}");
    println!("Kubernetes version: {kubernetes}");
    match controller {
        Some((version, from)) => {
            println!("Controller version: {version} (Deployment {namespace}/{PROVISIONER}, {from})")
        }
        None => println!(
            "Controller version: unknown (no Deployment {namespace}/{PROVISIONER}: is Gantry installed?)"
        ),
    }
    if let Some(warning) = &warning {
        std::io::Write::flush(&mut std::io::stdout())?;
        eprintln!("{warning}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str, label: Option<&str>) -> Deployment {
        let mut labels = serde_json::Map::new();
        if let Some(v) = label {
            labels.insert(VERSION_LABEL.into(), v.into());
        }
        serde_json::from_value(json!({
            "metadata": {"name": PROVISIONER, "labels": labels},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "provisioner", "image": image}
            ]}}},
        }))
        .unwrap()
    }

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert_eq!(major_minor("0.1.0"), Some((0, 1)));
        assert_eq!(major_minor("v1.12.3"), Some((1, 12)));
        assert_eq!(major_minor("v0.2.0-rc.1+abc"), Some((0, 2)));
        assert_eq!(major_minor("0.3"), Some((0, 3)));
        for odd in [
            "latest",
            "v2",
            "",
            "1.x.0",
            "1.2.3.4",
            "sha-1a2b3c",
            "1.2.x",
        ] {
            assert_eq!(major_minor(odd), None, "{odd}");
        }
    }

    #[test]
    fn only_a_major_or_minor_difference_is_skew() {
        // Patch releases, a leading v and pre-releases are within the supported skew.
        assert_eq!(skew_warning("0.1.0", "0.1.0"), None);
        assert_eq!(skew_warning("0.1.0", "v0.1.7"), None);
        assert_eq!(skew_warning("0.1.3", "0.1.0-rc.2"), None);
        // What cannot be compared warns of nothing.
        assert_eq!(skew_warning("0.1.0", "latest"), None);
        // An older plugin: upgrade it.
        let old_plugin = skew_warning("0.1.0", "v0.2.0").unwrap();
        assert!(
            old_plugin.contains("plugin version 0.1.0")
                && old_plugin.contains("controller version v0.2.0")
                && old_plugin.contains("same major.minor")
                && old_plugin.contains("upgrade the plugin to 0.2"),
            "{old_plugin}"
        );
        // An older provisioner: upgrade it, CRDs first.
        let old_controller = skew_warning("1.0.0", "0.9.4").unwrap();
        assert!(
            old_controller.contains("upgrade the provisioner to 1.0")
                && old_controller.contains("CRDs first"),
            "{old_controller}"
        );
        assert!(skew_warning("2.1.0", "1.1.0").is_some());
    }

    #[test]
    fn the_controller_version_comes_from_the_label_then_the_tag() {
        let tag = |image, label| controller_version(&deployment(image, label)).unwrap().0;
        assert_eq!(tag("gantry/provisioner:0.1.0", None), "0.1.0");
        assert_eq!(
            tag("localhost:5000/gantry/provisioner:v2@sha256:ab", None),
            "v2"
        );
        assert_eq!(tag("localhost:5000/gantry/provisioner", None), "latest");
        assert_eq!(
            tag("localhost:5000/gantry/provisioner@sha256:ab", None),
            "sha256:ab"
        );
        assert_eq!(tag("gantry/provisioner:0.1.0", Some("0.2.0")), "0.2.0");
    }
}
