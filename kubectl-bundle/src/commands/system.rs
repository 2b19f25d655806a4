//! `version` and `check`: what runs in the cluster, and whether it can serve bundles.

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::conditions::types;
use gantry_api::{Bundle, PLAIN_PROVISIONER, ProvisionerClass, STORAGE_URL_ANNOTATION};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::cluster::GlobalArgs;
use super::output::{OutputFormat, parse_output, print_structured, print_table};

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

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  kubectl bundle check")]
pub struct CheckArgs {
    #[command(flatten)]
    system: SystemArgs,
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

/// One preflight check: what, whether it passed, and why.
struct Outcome {
    what: String,
    ok: bool,
    detail: String,
}

fn outcome(what: impl Into<String>, result: anyhow::Result<String>) -> Outcome {
    match result {
        Ok(detail) => Outcome {
            what: what.into(),
            ok: true,
            detail,
        },
        Err(e) => Outcome {
            what: what.into(),
            ok: false,
            detail: super::output::causes(&e),
        },
    }
}

async fn crd_served(client: &Client, name: &str) -> anyhow::Result<String> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(name)
        .await
        .with_context(|| format!("reading CRD {name}"))?
        .with_context(|| format!("CRD {name} is not installed: apply manifests/01-crds.yaml"))?;
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    let version = gantry_api::VERSION;
    let served = crd
        .spec
        .versions
        .iter()
        .any(|v| v.name == version && v.served);
    match (established, served) {
        (true, true) => Ok(format!("established, {version} served")),
        (false, _) => bail!("CRD {name} is not established yet"),
        (true, false) => bail!("CRD {name} does not serve {version}"),
    }
}

async fn deployment(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Deployment>> {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("reading Deployment {namespace}/{name}"))
}

fn deployment_available(
    deployment: Deployment,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    let status = deployment.status.unwrap_or_default();
    let wanted = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
    let available = status.available_replicas.unwrap_or(0);
    if available < 1 {
        bail!(
            "Deployment {namespace}/{name} has no available replica (0/{wanted}): see `kubectl -n {namespace} describe deployment {name}`"
        );
    }
    Ok(format!("{available}/{wanted} replicas available"))
}

/// The provisioner: its Deployment's replicas when the Deployment exists; else a provisioner
/// running outside it (as processes, as `scripts/demo` runs it), seen by the Lease it holds and
/// renews (`leading`).
async fn provisioner_running(
    client: &Client,
    namespace: &str,
    leading: &Outcome,
) -> anyhow::Result<String> {
    if let Some(deployment) = deployment(client, namespace, PROVISIONER).await? {
        return deployment_available(deployment, namespace, PROVISIONER);
    }
    let Outcome { ok, detail, .. } = leading;
    if !ok {
        bail!(
            "Deployment {namespace}/{PROVISIONER} not found, nor a provisioner outside it ({detail}): is Gantry installed (manifests/)?"
        );
    }
    Ok(format!(
        "no Deployment {namespace}/{PROVISIONER}: a provisioner outside it leads, Lease {PROVISIONER} {detail}"
    ))
}

/// The storage server: its Deployment's replicas when the Deployment exists; else the one the
/// leading provisioner uses (the `--storage-url` it publishes on its Lease), asked for its
/// `/readyz`.
async fn storage_ready(
    client: &Client,
    namespace: &str,
    lease: Option<&Lease>,
) -> anyhow::Result<String> {
    if let Some(deployment) = deployment(client, namespace, STORAGE).await? {
        return deployment_available(deployment, namespace, STORAGE);
    }
    let url = lease
        .and_then(|l| l.annotations().get(STORAGE_URL_ANNOTATION))
        .with_context(|| {
            format!(
                "Deployment {namespace}/{STORAGE} not found, and no provisioner names the storage server it uses (annotation {STORAGE_URL_ANNOTATION} of Lease {namespace}/{PROVISIONER}): is Gantry installed (manifests/)?"
            )
        })?;
    let readyz = format!("{}/readyz", url.trim_end_matches('/'));
    let mut http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5));
    if !readyz.starts_with("https://") {
        http = http.tls_certs_only([]);
    }
    let response = http
        .build()
        .context("building the HTTP client")?
        .get(&readyz)
        .send()
        .await
        .with_context(|| {
            format!("no Deployment {namespace}/{STORAGE}, and the provisioner's storage server does not answer {readyz}")
        })?;
    let status = response.status();
    if !status.is_success() {
        bail!(
            "no Deployment {namespace}/{STORAGE}, and the provisioner's storage server answers {readyz} with {status}"
        );
    }
    Ok(format!(
        "no Deployment {namespace}/{STORAGE}: the provisioner's storage server answers {readyz}"
    ))
}

/// Whether the leader Lease (`lease`, read once for every check) has a holder that renews it.
fn lease_held(
    namespace: &str,
    lease: &Result<Option<Lease>, kube::Error>,
) -> anyhow::Result<String> {
    let lease = match lease {
        Ok(lease) => lease.as_ref(),
        Err(e) => bail!("reading Lease {namespace}/{PROVISIONER}: {e}"),
    }
    .with_context(|| {
        format!("Lease {namespace}/{PROVISIONER} not found: no provisioner has led yet")
    })?;
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec
        .holder_identity
        .filter(|h| !h.is_empty())
        .with_context(|| {
            format!("Lease {namespace}/{PROVISIONER} has no holder: no provisioner leads")
        })?;
    let renewed = spec.renew_time.map(|t| t.0);
    let duration = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(15).into());
    let now = Timestamp::now();
    match renewed {
        Some(renewed) if renewed + duration >= now => {
            let ago = now.duration_since(renewed).as_secs().max(0);
            Ok(format!("held by {holder}, renewed {ago}s ago"))
        }
        _ => bail!(
            "Lease {namespace}/{PROVISIONER} held by {holder} has expired: the leader stopped renewing it"
        ),
    }
}

async fn classes_accepted(client: &Client) -> anyhow::Result<String> {
    let classes = Api::<ProvisionerClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing ProvisionerClasses")?
        .items;
    let ours: Vec<&ProvisionerClass> = classes
        .iter()
        .filter(|c| c.spec.provisioner == PLAIN_PROVISIONER)
        .collect();
    if ours.is_empty() {
        bail!("no ProvisionerClass names {PLAIN_PROVISIONER}: apply manifests/20-classes.yaml");
    }
    let refused: Vec<String> = ours
        .iter()
        .filter_map(|c| {
            let accepted = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == types::ACCEPTED));
            match accepted {
                Some(a) if a.status == "True" => None,
                Some(a) => Some(format!("{} ({}: {})", c.name_any(), a.reason, a.message)),
                None => Some(format!(
                    "{} (not reviewed by a provisioner yet)",
                    c.name_any()
                )),
            }
        })
        .collect();
    if !refused.is_empty() {
        bail!("not Accepted: {}", refused.join("; "));
    }
    Ok(format!(
        "{} accepted: {}",
        ours.len(),
        ours.iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

pub async fn check(global: &GlobalArgs, args: CheckArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let namespace = &args.system.system_namespace;
    let bundles = format!("{}.{}", Bundle::plural(&()), gantry_api::GROUP);
    let classes = format!("{}.{}", ProvisionerClass::plural(&()), gantry_api::GROUP);
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(PROVISIONER)
        .await;
    let leading = outcome("provisioner leading", lease_held(namespace, &lease));
    let outcomes = vec![
        outcome(
            format!("CRD {bundles}"),
            crd_served(&client, &bundles).await,
        ),
        outcome(
            format!("CRD {classes}"),
            crd_served(&client, &classes).await,
        ),
        outcome(
            "provisioner running",
            provisioner_running(&client, namespace, &leading).await,
        ),
        leading,
        outcome(
            "storage server ready",
            storage_ready(
                &client,
                namespace,
                lease.as_ref().ok().and_then(Option::as_ref),
            )
            .await,
        ),
        outcome("classes accepted", classes_accepted(&client).await),
    ];
    let mut rows = vec![vec!["CHECK".to_string(), "RESULT".into(), "DETAIL".into()]];
    for o in &outcomes {
        rows.push(vec![
            o.what.clone(),
            if o.ok { "OK" } else { "FAIL" }.into(),
            o.detail.clone(),
        ]);
    }
    print_table(&rows);
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    if failed > 0 {
        bail!("{failed} of {} checks failed", outcomes.len());
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
