//! `install` and `uninstall`: Gantry itself, from the manifests of the plugin's own version
//! (`manifests/`, embedded when the plugin is built: nothing is downloaded).

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgAction, Args};
use gantry_api::Bundle;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::discovery::{Scope, pinned_kind};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::time::Instant;

use super::cluster::{GlobalArgs, parse_timeout};

/// The field manager of everything `install` applies.
const FIELD_MANAGER: &str = "kubectl-bundle";

/// What `install` applies, one step after the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Crds,
    Access,
    Storage,
    Provisioner,
    Classes,
}

impl Step {
    const ORDER: [Step; 5] = [
        Step::Crds,
        Step::Access,
        Step::Storage,
        Step::Provisioner,
        Step::Classes,
    ];

    fn what(self) -> &'static str {
        match self {
            Step::Crds => "the CRDs",
            Step::Access => "the namespace and RBAC",
            Step::Storage => "the storage server",
            Step::Provisioner => "the provisioner",
            Step::Classes => "the default classes",
        }
    }
}

/// `manifests/`, file by file in name order, with the step each file belongs to. A unit test
/// checks that every file of `manifests/` is here.
const MANIFESTS: [(&str, Step, &str); 10] = [
    (
        "00-namespace.yaml",
        Step::Access,
        include_str!("../../../manifests/00-namespace.yaml"),
    ),
    (
        "01-crds.yaml",
        Step::Crds,
        include_str!("../../../manifests/01-crds.yaml"),
    ),
    (
        "02-serviceaccounts.yaml",
        Step::Access,
        include_str!("../../../manifests/02-serviceaccounts.yaml"),
    ),
    (
        "03-rbac-provisioner.yaml",
        Step::Access,
        include_str!("../../../manifests/03-rbac-provisioner.yaml"),
    ),
    (
        "04-rbac-storage.yaml",
        Step::Access,
        include_str!("../../../manifests/04-rbac-storage.yaml"),
    ),
    (
        "05-rbac-bundle-content.yaml",
        Step::Access,
        include_str!("../../../manifests/05-rbac-bundle-content.yaml"),
    ),
    (
        "06-rbac-users.yaml",
        Step::Access,
        include_str!("../../../manifests/06-rbac-users.yaml"),
    ),
    (
        "10-storage-server.yaml",
        Step::Storage,
        include_str!("../../../manifests/10-storage-server.yaml"),
    ),
    (
        "11-provisioner.yaml",
        Step::Provisioner,
        include_str!("../../../manifests/11-provisioner.yaml"),
    ),
    (
        "20-classes.yaml",
        Step::Classes,
        include_str!("../../../manifests/20-classes.yaml"),
    ),
];

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle install\n  kubectl bundle install --registry registry.example.com:5000 --storage-class fast\n  kubectl bundle install --export > gantry.yaml"
)]
pub struct InstallArgs {
    /// Pull Gantry's own images from this registry instead of the release's
    /// (ghcr.io/gantry-dev): REGISTRY/gantry-provisioner:TAG and
    /// REGISTRY/gantry-storage-server:TAG, e.g. `registry.example.com:5000` or
    /// `registry.example.com/mirror`.
    #[arg(long, value_name = "REGISTRY")]
    registry: Option<String>,
    /// The StorageClass of the storage server's PersistentVolumeClaim (default: the cluster's
    /// default class).
    #[arg(long, value_name = "CLASS")]
    storage_class: Option<String>,
    /// Print the YAML install would apply, with the options above, and change nothing.
    #[arg(long)]
    export: bool,
    /// Wait until the storage server and the provisioner are ready (`--wait=false`: return
    /// once everything is applied).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    wait: bool,
    /// How long to wait for the CRDs to be established and the workloads to be ready.
    #[arg(long, default_value = "5m", value_parser = parse_timeout, value_name = "DURATION")]
    timeout: Duration,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle uninstall\n  kubectl bundle uninstall --delete-bundles --timeout 10m"
)]
pub struct UninstallArgs {
    /// Delete every Bundle first, while the provisioner still runs, and wait until they are
    /// gone: their objects are deleted with them (orphaned, for a Bundle with
    /// `spec.deletionPolicy: Orphan`). Without it, uninstall refuses while
    /// Bundles exist.
    #[arg(long)]
    delete_bundles: bool,
    /// Wait until everything deleted is gone (`--wait=false`: return once deletion is asked).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    wait: bool,
    /// How long to wait for the Bundles and then Gantry's objects to be gone.
    #[arg(long, default_value = "5m", value_parser = parse_timeout, value_name = "DURATION")]
    timeout: Duration,
}

/// The options that change what is applied.
#[derive(Debug, Default)]
struct Options<'a> {
    registry: Option<&'a str>,
    storage_class: Option<&'a str>,
}

/// The objects of `manifests/` as install applies them: in install order, each with its step.
fn objects(options: &Options) -> anyhow::Result<Vec<(Step, Value)>> {
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

fn validate_registry(registry: &str) -> anyhow::Result<()> {
    if registry.is_empty() || registry.contains("://") || registry.contains(char::is_whitespace) {
        bail!(
            "--registry {registry:?}: give a registry host and optional path, e.g. registry.example.com:5000/mirror (no scheme)"
        );
    }
    Ok(())
}

/// The YAML of `objects`, one document each.
fn export(objects: &[(Step, Value)]) -> anyhow::Result<String> {
    let mut out = String::new();
    for (_, object) in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(object).context("writing YAML")?);
    }
    Ok(out)
}

fn name_of(object: &Value) -> (&str, Option<&str>) {
    (
        object["metadata"]["name"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str(),
    )
}

/// The API of `object`'s kind, found by discovery once per kind.
struct Apis {
    client: Client,
    known: HashMap<(String, String), (ApiResource, bool)>,
}

impl Apis {
    fn new(client: Client) -> Self {
        Self {
            client,
            known: HashMap::new(),
        }
    }

    /// The API for `object`; `None` when the cluster does not serve its kind.
    async fn api(&mut self, object: &Value) -> anyhow::Result<Option<Api<DynamicObject>>> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let key = (api_version.to_string(), kind.to_string());
        if !self.known.contains_key(&key) {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            match pinned_kind(&self.client, &gvk).await {
                Ok((resource, capabilities)) => {
                    self.known.insert(
                        key.clone(),
                        (resource, capabilities.scope == Scope::Namespaced),
                    );
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                Err(kube::Error::Discovery(_)) => return Ok(None),
                Err(e) => {
                    return Err(e).with_context(|| format!("discovering {kind}.{api_version}"));
                }
            }
        }
        let (resource, namespaced) = &self.known[&key];
        let (_, namespace) = name_of(object);
        Ok(Some(match namespace {
            Some(ns) if *namespaced => Api::namespaced_with(self.client.clone(), ns, resource),
            _ => Api::all_with(self.client.clone(), resource),
        }))
    }
}

/// kubectl's name of an object: `kind.group/name`.
fn display(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
    let group = object["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .map(|(g, _)| format!(".{g}"))
        .unwrap_or_default();
    format!("{kind}{group}/{}", name_of(object).0)
}

/// Applies one object with server-side apply; what that did.
async fn apply(apis: &mut Apis, object: &Value) -> anyhow::Result<&'static str> {
    let what = display(object);
    let (name, _) = name_of(object);
    let api = apis
        .api(object)
        .await?
        .with_context(|| format!("{what}: the cluster does not serve its kind"))?;
    let before = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {what}"))?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let after = api
        .patch(name, &params, &Patch::Apply(object))
        .await
        .with_context(|| format!("applying {what}"))?;
    Ok(match before {
        None => "created",
        Some(before) if comparable(&before) == comparable(&after) => "unchanged",
        Some(_) => "configured",
    })
}

/// An object without what changes on every write (its resource version, and when each
/// manager last wrote): a write that left the rest alone changed nothing.
fn comparable(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
        if let Some(managers) = metadata
            .get_mut("managedFields")
            .and_then(Value::as_array_mut)
        {
            for manager in managers.iter_mut().filter_map(Value::as_object_mut) {
                manager.remove("time");
            }
        }
    }
    value
}

/// Waits until every CRD of `crds` is established and its kinds are served.
async fn wait_established(
    client: &Client,
    apis: &mut Apis,
    crds: &[&Value],
    classes: &[&Value],
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let (name, _) = name_of(crd);
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        match tokio::time::timeout_at(deadline, established).await {
            Err(_) => bail!(
                "CRD {name} is not established after {}: see `kubectl describe crd {name}`",
                humanize(timeout)
            ),
            Ok(result) => {
                result.with_context(|| format!("watching CRD {name}"))?;
            }
        }
    }
    // Discovery serves a new CRD's kinds shortly after it is established.
    for class in classes {
        let mut every = tokio::time::interval(Duration::from_millis(200));
        loop {
            every.tick().await;
            apis.known.clear();
            if apis.api(class).await?.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} is not served after {}",
                    class["apiVersion"].as_str().unwrap_or_default(),
                    humanize(timeout)
                );
            }
        }
    }
    Ok(())
}

/// Whether a Deployment or StatefulSet is ready: its current generation rolled out, every
/// replica updated and available; `Err` says why not.
fn workload_ready(kind: &str, object: &Value) -> Result<String, String> {
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
    let status = &object["status"];
    let observed = status["observedGeneration"].as_i64().unwrap_or(0);
    let wanted = object["spec"]["replicas"].as_i64().unwrap_or(1);
    let updated = status["updatedReplicas"].as_i64().unwrap_or(0);
    let ready = if kind == "StatefulSet" {
        status["readyReplicas"].as_i64().unwrap_or(0)
    } else {
        status["availableReplicas"].as_i64().unwrap_or(0)
    };
    let word = if kind == "StatefulSet" {
        "ready"
    } else {
        "available"
    };
    if updated < wanted || ready < wanted {
        return Err(format!(
            "{ready}/{wanted} replicas {word}, {updated}/{wanted} updated"
        ));
    }
    if observed < generation {
        return Err(format!(
            "{ready}/{wanted} replicas {word}, but its controller has not seen generation {generation} yet"
        ));
    }
    Ok(format!("{ready}/{wanted} replicas {word}"))
}

async fn read_workload(client: &Client, kind: &str, namespace: &str, name: &str) -> Value {
    let read = match kind {
        "StatefulSet" => Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
        _ => Api::<Deployment>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
    };
    read.ok().flatten().unwrap_or(Value::Null)
}

/// Waits for each workload in turn, until `deadline`.
async fn wait_workloads(
    client: &Client,
    workloads: &[&Value],
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    for (i, workload) in workloads.iter().enumerate() {
        let kind = workload["kind"].as_str().unwrap_or_default();
        let (name, namespace) = name_of(workload);
        let namespace = namespace.unwrap_or("default");
        let ready = |o: Option<&Value>| o.is_some_and(|o| workload_ready(kind, o).is_ok());
        let waited = match kind {
            "StatefulSet" => {
                let api = Api::<StatefulSet>::namespaced(client.clone(), namespace);
                let condition = move |o: Option<&StatefulSet>| {
                    ready(o.and_then(|o| serde_json::to_value(o).ok()).as_ref())
                };
                tokio::time::timeout_at(
                    deadline,
                    kube::runtime::wait::await_condition(api, name, condition),
                )
                .await
                .map(|r| r.map(|_| ()))
            }
            _ => {
                let api = Api::<Deployment>::namespaced(client.clone(), namespace);
                let condition = move |o: Option<&Deployment>| {
                    ready(o.and_then(|o| serde_json::to_value(o).ok()).as_ref())
                };
                tokio::time::timeout_at(
                    deadline,
                    kube::runtime::wait::await_condition(api, name, condition),
                )
                .await
                .map(|r| r.map(|_| ()))
            }
        };
        let what = format!("{} {namespace}/{name}", kind.to_lowercase());
        match waited {
            Ok(result) => {
                result.with_context(|| format!("watching {what}"))?;
                let now = read_workload(client, kind, namespace, name).await;
                let detail = workload_ready(kind, &now).unwrap_or_default();
                println!("✔ {what} ready: {detail}");
            }
            Err(_) => {
                let mut waiting = Vec::new();
                for other in &workloads[i..] {
                    let kind = other["kind"].as_str().unwrap_or_default();
                    let (name, namespace) = name_of(other);
                    let namespace = namespace.unwrap_or("default");
                    let now = read_workload(client, kind, namespace, name).await;
                    let why = if now.is_null() {
                        Err("not found".to_string())
                    } else {
                        workload_ready(kind, &now)
                    };
                    if let Err(why) = why {
                        waiting.push(format!(
                            "{} {namespace}/{name} ({why}; see `kubectl -n {namespace} describe {} {name}`)",
                            kind.to_lowercase(),
                            kind.to_lowercase()
                        ));
                    }
                }
                bail!(
                    "timed out after {} waiting for {what} to be ready; not ready: {}",
                    humanize(timeout),
                    waiting.join("; ")
                );
            }
        }
    }
    Ok(())
}

fn humanize(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if duration.subsec_millis() != 0 || seconds == 0 {
        format!("{duration:?}")
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

pub async fn install(global: &GlobalArgs, args: InstallArgs) -> anyhow::Result<()> {
    if let Some(registry) = &args.registry {
        validate_registry(registry)?;
    }
    let options = Options {
        registry: args.registry.as_deref(),
        storage_class: args.storage_class.as_deref(),
    };
    let objects = objects(&options)?;
    if args.export {
        let mut out = std::io::stdout().lock();
        return match out.write_all(export(&objects)?.as_bytes()) {
            // `install --export | head` is done reading: not an error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            written => written.context("writing to standard output"),
        };
    }
    let client = global.client().await?;
    let mut apis = Apis::new(client.clone());
    let deadline = Instant::now() + args.timeout;
    let version = env!("CARGO_PKG_VERSION");
    println!("► installing Gantry {version}");
    for step in Step::ORDER {
        let of_step: Vec<&Value> = objects
            .iter()
            .filter(|(s, _)| *s == step)
            .map(|(_, o)| o)
            .collect();
        let mut done: Vec<String> = Vec::new();
        for object in &of_step {
            let outcome = apply(&mut apis, object).await?;
            done.push(format!("{} {outcome}", display(object)));
        }
        println!("✚ applied {}: {}", step.what(), done.join(", "));
        if step == Step::Crds {
            let classes: Vec<&Value> = objects
                .iter()
                .filter(|(s, _)| *s == Step::Classes)
                .map(|(_, o)| o)
                .collect();
            wait_established(
                &client,
                &mut apis,
                &of_step,
                &classes,
                deadline,
                args.timeout,
            )
            .await?;
            println!(
                "✔ CRDs established: {}",
                of_step
                    .iter()
                    .map(|c| name_of(c).0)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let workloads: Vec<&Value> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet")))
        .collect();
    if args.wait {
        println!(
            "◎ waiting up to {} for the storage server and the provisioner to be ready",
            humanize(args.timeout)
        );
        wait_workloads(&client, &workloads, deadline, args.timeout).await?;
        println!("✔ Gantry {version} installed");
    } else {
        println!("✔ Gantry {version} applied (not waiting for the workloads: --wait=false)");
    }
    Ok(())
}

pub async fn uninstall(global: &GlobalArgs, args: UninstallArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let mut objects = objects(&Options::default())?;
    objects.reverse();
    let deadline = Instant::now() + args.timeout;

    // Bundles first: their finalizer needs the provisioner to remove their objects.
    let bundles_crd = format!("bundles.{}", gantry_api::GROUP);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt(&bundles_crd)
        .await
        .with_context(|| format!("reading CRD {bundles_crd}"))?
        .is_some()
    {
        let bundles: Api<Bundle> = Api::all(client.clone());
        let names: Vec<String> = bundles
            .list(&ListParams::default())
            .await
            .context("listing Bundles")?
            .items
            .iter()
            .map(|b| b.name_any())
            .collect();
        if !names.is_empty() && !args.delete_bundles {
            bail!(
                "{} Bundle(s) exist: {}. Uninstalling Gantry would leave them stuck in deletion and their objects on the cluster. Delete them first (`kubectl delete bundles --all`), or pass --delete-bundles to do so here (their objects are deleted with them); to keep objects, annotate them `gantry.dev/prune=disabled`, or set a Bundle's spec.deletionPolicy to Orphan, first",
                names.len(),
                names.join(", ")
            );
        }
        if !names.is_empty() {
            println!(
                "► deleting {} Bundle(s) while the provisioner runs: {}",
                names.len(),
                names.join(", ")
            );
            let mut deleting = Vec::new();
            for name in &names {
                match bundles.delete(name, &DeleteParams::default()).await {
                    Ok(either) => {
                        if let Some(uid) = either.left().and_then(|b| b.uid()) {
                            deleting.push((name.clone(), uid));
                        }
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e).with_context(|| format!("deleting bundle {name}")),
                }
            }
            let gone = async {
                for (name, uid) in &deleting {
                    kube::runtime::wait::await_condition(
                        bundles.clone(),
                        name,
                        kube::runtime::wait::conditions::is_deleted(uid),
                    )
                    .await
                    .with_context(|| format!("watching bundle {name}"))?;
                }
                Ok::<_, anyhow::Error>(())
            };
            match tokio::time::timeout_at(deadline, gone).await {
                Ok(result) => result?,
                Err(_) => {
                    let left: Vec<String> = bundles
                        .list(&ListParams::default())
                        .await
                        .map(|l| l.items.iter().map(|b| b.name_any()).collect())
                        .unwrap_or_default();
                    bail!(
                        "Bundle(s) still present after {}: {} (is the provisioner running? see `kubectl bundle check` and `kubectl bundle status NAME`)",
                        humanize(args.timeout),
                        left.join(", ")
                    );
                }
            }
            println!("✔ Bundles deleted");
        }
    }

    println!("► uninstalling Gantry");
    let mut apis = Apis::new(client.clone());
    let mut deleted: Vec<Deleted> = Vec::new();
    // Reverse install order: the classes, the provisioner, the storage server, the RBAC and
    // then the namespace (reversed, its file comes last), the CRDs last of all.
    let mut step_order = Step::ORDER;
    step_order.reverse();
    for step in step_order {
        let mut done: Vec<String> = Vec::new();
        for (_, object) in objects.iter().filter(|(s, _)| *s == step) {
            done.push(delete(&mut apis, object, &mut deleted).await?);
        }
        println!("✚ deleted {}: {}", step.what(), done.join(", "));
    }
    if !args.wait {
        println!("✔ Gantry uninstalled (not waiting for the objects to be gone: --wait=false)");
        return Ok(());
    }
    println!(
        "◎ waiting up to {} for the objects to be gone",
        humanize(args.timeout)
    );
    let gone = async {
        for Deleted {
            api,
            name,
            what,
            uid,
        } in &deleted
        {
            kube::runtime::wait::await_condition(
                api.clone(),
                name,
                kube::runtime::wait::conditions::is_deleted(uid),
            )
            .await
            .with_context(|| format!("watching {what}"))?;
        }
        Ok::<_, anyhow::Error>(())
    };
    match tokio::time::timeout_at(deadline, gone).await {
        Ok(result) => result?,
        Err(_) => {
            let mut left = Vec::new();
            for Deleted {
                api, name, what, ..
            } in &deleted
            {
                if let Ok(Some(_)) = api.get_opt(name).await {
                    left.push(what.clone());
                }
            }
            bail!(
                "still present after {}: {} (a namespace and a PersistentVolumeClaim need the cluster's controller-manager to finish deleting)",
                humanize(args.timeout),
                left.join(", ")
            );
        }
    }
    println!("✔ Gantry uninstalled");
    Ok(())
}

/// An object being deleted.
struct Deleted {
    api: Api<DynamicObject>,
    name: String,
    what: String,
    uid: String,
}

/// Deletes one object (its dependents in the background); `kind/name deleted` or `... not
/// found`.
async fn delete(
    apis: &mut Apis,
    object: &Value,
    deleted: &mut Vec<Deleted>,
) -> anyhow::Result<String> {
    let what = display(object);
    let (name, _) = name_of(object);
    let Some(api) = apis.api(object).await? else {
        return Ok(format!("{what} not found"));
    };
    match api.delete(name, &DeleteParams::background()).await {
        Ok(either) => {
            // Gone at once (`Right`), or being deleted: waited for by its uid.
            if let Some(uid) = either.left().and_then(|o| o.uid()) {
                deleted.push(Deleted {
                    api,
                    name: name.to_string(),
                    what: what.clone(),
                    uid,
                });
            }
            Ok(format!("{what} deleted"))
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(format!("{what} not found")),
        Err(e) => Err(e).with_context(|| format!("deleting {what}")),
    }
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
