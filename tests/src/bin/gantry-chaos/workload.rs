//! What users do during the run: create bundles, move their tags to new content, approve what
//! awaits approval and delete bundles. The model records what was done, so that the invariants
//! can be checked against it; an operation whose outcome is unknown (the API server died while
//! it was in flight) is recorded as attempted.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use gantry_api::{
    ApprovalPolicy, Bundle, BundlePhase, BundleSpec, PLAIN_PROVISIONER, ProvisionerClass,
    ProvisionerClassSpec,
};
use gantry_image::{EffectiveLimits, Platform, RegistryClient, RegistryOptions};
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;

pub const AUTOMATIC_CLASS: &str = "chaos-automatic";
pub const MANUAL_CLASS: &str = "chaos-manual";
/// The field manager approvals are written with, as an approver's tool would.
const APPROVER: &str = "chaos-approver";

/// One bundle as the run knows it.
pub struct BundleModel {
    pub name: String,
    pub namespace: String,
    pub manual: bool,
    /// Pushed versions: (version, pinned reference), oldest first.
    pub versions: Vec<(u32, String)>,
    /// Created (or a create whose answer was lost: settling creates it again).
    pub created: bool,
    pub deleted: bool,
    /// Every digest an approval was written (or attempted) for.
    pub approved: BTreeSet<String>,
    /// Whether an approval write is known to have succeeded.
    pub approval_confirmed: bool,
    /// The UID of the Bundle the confirmed approval was written to (a soak deletes and creates
    /// bundles again: an approval of an earlier one is not expected on a later one).
    pub approved_uid: Option<String>,
}

impl BundleModel {
    pub fn image(&self, registry: &str) -> String {
        format!("{registry}/chaos/{}:live", self.name)
    }

    pub fn latest(&self) -> &(u32, String) {
        self.versions
            .last()
            .expect("version 1 is pushed before anything else")
    }

    pub fn digest_of_version(&self, version: u32) -> Option<&str> {
        self.versions
            .iter()
            .find(|(v, _)| *v == version)
            .map(|(_, pinned)| digest(pinned))
    }
}

pub fn digest(pinned: &str) -> &str {
    pinned.rsplit_once('@').map_or(pinned, |(_, d)| d)
}

/// The ConfigMaps version `version` of a bundle holds, by name.
pub fn expected_objects(version: u32) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ["common".to_string(), format!("v{version}")].into();
    for k in 0..version % 3 {
        names.insert(format!("extra-{k}"));
    }
    names
}

fn manifests(bundle: &str, version: u32) -> String {
    expected_objects(version)
        .iter()
        .map(|name| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  bundle: {bundle}\n  version: \"{version}\"\n---\n"
            )
        })
        .collect()
}

#[derive(Default)]
struct Counters {
    created: AtomicUsize,
    moved: AtomicUsize,
    approved: AtomicUsize,
    deleted: AtomicUsize,
    failed: AtomicUsize,
}

pub struct Workload {
    pub client: Client,
    pub registry: String,
    pub bundles: Vec<Mutex<BundleModel>>,
    push_client: RegistryClient,
    counters: Counters,
    /// A soak: deleted bundles are created again once gone, so churn never runs out.
    soak: bool,
    /// Violations seen while running (content applied without approval, approvals lost).
    pub running_violations: std::sync::Mutex<Vec<String>>,
}

pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    namespaces
        .patch(
            name,
            &PatchParams::apply("gantry-chaos").force(),
            &Patch::Apply(&ns),
        )
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

async fn retry<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(value) => return Ok(value),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("{what}: still failing after {timeout:?}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

impl Workload {
    pub fn new(client: Client, registry: String, count: usize, soak: bool) -> Self {
        let bundles = (0..count)
            .map(|i| {
                let name = format!("chaos-{i:03}");
                Mutex::new(BundleModel {
                    namespace: name.clone(),
                    name,
                    manual: i % 3 == 0,
                    versions: Vec::new(),
                    created: false,
                    deleted: false,
                    approved: BTreeSet::new(),
                    approval_confirmed: false,
                    approved_uid: None,
                })
            })
            .collect();
        let push_client = RegistryClient::new(RegistryOptions {
            insecure_registries: vec![registry.clone()],
            ..Default::default()
        })
        .expect("a registry client with default options");
        Self {
            client,
            registry,
            bundles,
            push_client,
            counters: Counters::default(),
            soak,
            running_violations: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn operations(&self) -> String {
        let c = &self.counters;
        format!(
            "{} created, {} tags moved, {} approvals, {} deleted, {} failed under faults (retried)",
            c.created.load(Ordering::Relaxed),
            c.moved.load(Ordering::Relaxed),
            c.approved.load(Ordering::Relaxed),
            c.deleted.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
        )
    }

    fn violation(&self, message: String) {
        eprintln!("    VIOLATION: {message}");
        self.running_violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }

    /// Classes, namespaces and version 1 of every bundle, before any fault.
    pub async fn prepare(&self) -> anyhow::Result<()> {
        let classes: Api<ProvisionerClass> = Api::all(self.client.clone());
        for (name, approval) in [
            (AUTOMATIC_CLASS, ApprovalPolicy::Automatic),
            (MANUAL_CLASS, ApprovalPolicy::Manual),
        ] {
            let class = ProvisionerClass::new(
                name,
                ProvisionerClassSpec {
                    provisioner: PLAIN_PROVISIONER.into(),
                    approval,
                    insecure_registries: vec![self.registry.clone()],
                    ..Default::default()
                },
            );
            classes
                .patch(
                    name,
                    &PatchParams::apply("gantry-chaos").force(),
                    &Patch::Apply(&class),
                )
                .await
                .with_context(|| format!("applying class {name}"))?;
        }
        for bundle in &self.bundles {
            let mut bundle = bundle.lock().await;
            ensure_namespace(&self.client, &bundle.namespace).await?;
            let pinned = self.push(&bundle, 1).await?;
            bundle.versions.push((1, pinned));
        }
        Ok(())
    }

    async fn push(&self, bundle: &BundleModel, version: u32) -> anyhow::Result<String> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir(dir.path().join("manifests"))?;
        std::fs::write(
            dir.path().join("manifests/objects.yaml"),
            manifests(&bundle.name, version),
        )?;
        let image = bundle.image(&self.registry);
        let client = &self.push_client;
        let path: &Path = dir.path();
        // A push is repeated until it succeeds: the same content gives the same digest, so a
        // push whose answer was lost cannot leave the tag somewhere the model does not know.
        retry(
            &format!("pushing {image}"),
            Duration::from_secs(60),
            || async {
                Ok(client
                    .push_dir(
                        path,
                        &image,
                        &[Platform::current()],
                        &EffectiveLimits::default(),
                    )
                    .await?
                    .pinned)
            },
        )
        .await
    }

    /// Runs operations from four workers until `deadline`.
    pub async fn churn_until(&self, deadline: Instant) {
        let workers = (0..4).map(|_| async {
            while Instant::now() < deadline {
                let i = rand::random_range(0..self.bundles.len());
                if let Ok(mut bundle) = self.bundles[i].try_lock() {
                    self.operate(&mut bundle).await;
                }
                tokio::time::sleep(Duration::from_millis(rand::random_range(20..200))).await;
            }
        });
        futures::future::join_all(workers).await;
    }

    async fn operate(&self, bundle: &mut BundleModel) {
        if bundle.deleted {
            if self.soak {
                self.forget_when_gone(bundle).await;
            }
            return;
        }
        if !bundle.created {
            self.create(bundle).await;
            return;
        }
        let deleted = self.counters.deleted.load(Ordering::Relaxed);
        let roll = rand::random_range(0..100);
        if roll < 3 && (self.soak || deleted < self.bundles.len() / 5) {
            self.delete(bundle).await;
        } else if bundle.manual && roll < 50 {
            self.approve_shown(bundle, false).await;
        } else {
            self.move_tag(bundle).await;
        }
    }

    /// Once a deleted bundle is gone (its objects removed), the model starts it afresh.
    async fn forget_when_gone(&self, bundle: &mut BundleModel) {
        let bundles: Api<Bundle> = Api::all(self.client.clone());
        if let Ok(None) = bundles.get_opt(&bundle.name).await {
            bundle.deleted = false;
            bundle.created = false;
            bundle.approved.clear();
            bundle.approval_confirmed = false;
            bundle.approved_uid = None;
        }
    }

    async fn create(&self, bundle: &mut BundleModel) {
        let spec = BundleSpec {
            image: bundle.image(&self.registry),
            provisioner_class_name: Some(
                if bundle.manual {
                    MANUAL_CLASS
                } else {
                    AUTOMATIC_CLASS
                }
                .into(),
            ),
            install_namespace: Some(bundle.namespace.clone()),
            ..Default::default()
        };
        let bundles: Api<Bundle> = Api::all(self.client.clone());
        match bundles
            .create(&PostParams::default(), &Bundle::new(&bundle.name, spec))
            .await
        {
            Ok(_) => {
                bundle.created = true;
                self.counters.created.fetch_add(1, Ordering::Relaxed);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => bundle.created = true,
            Err(_) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn move_tag(&self, bundle: &mut BundleModel) {
        let next = bundle.latest().0 + 1;
        match self.push(bundle, next).await {
            Ok(pinned) => {
                bundle.versions.push((next, pinned));
                self.counters.moved.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // Fatal for the run's model: the tag's position is unknown.
                self.violation(format!("{}: {e:#}", bundle.name));
            }
        }
    }

    async fn delete(&self, bundle: &mut BundleModel) {
        let bundles: Api<Bundle> = Api::all(self.client.clone());
        // Marked first: a delete whose answer was lost may still have happened.
        bundle.deleted = true;
        match bundles.delete(&bundle.name, &DeleteParams::default()).await {
            Ok(_) => {
                self.counters.deleted.fetch_add(1, Ordering::Relaxed);
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(_) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Approves the digest the bundle shows as awaiting approval, as an approver who reads the
    /// status and decides would; with `only_latest`, only when that is the latest content.
    async fn approve_shown(&self, bundle: &mut BundleModel, only_latest: bool) {
        let bundles: Api<Bundle> = Api::all(self.client.clone());
        let Ok(live) = bundles.get(&bundle.name).await else {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(status) = live.status.as_ref() else {
            return;
        };
        if status.phase != Some(BundlePhase::AwaitingApproval) {
            return;
        }
        let Some(resolved) = status.resolved_image.as_deref() else {
            return;
        };
        let shown = digest(resolved).to_string();
        if !bundle.versions.iter().any(|(_, p)| digest(p) == shown) {
            self.violation(format!(
                "{} awaits approval of {shown}, which was never pushed to its tag",
                bundle.name
            ));
            return;
        }
        if only_latest && shown != digest(&bundle.latest().1) {
            return;
        }
        bundle.approved.insert(shown.clone());
        let patch = json!({
            "apiVersion": "gantry.dev/v1alpha1",
            "kind": "Bundle",
            "metadata": { "name": bundle.name, "resourceVersion": live.resource_version() },
            "status": { "approval": {
                "decision": "Approved",
                "digest": shown,
                "reason": "chaos run",
                "time": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now()),
            } },
        });
        match bundles
            .patch_status(
                &bundle.name,
                &PatchParams::apply(APPROVER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => {
                bundle.approval_confirmed = true;
                bundle.approved_uid = live.uid();
                self.counters.approved.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every second until `churning` clears: the content running for each manual bundle must
    /// be content that was approved, and a written approval must still be there.
    pub async fn sample_approvals_until(&self, churning: &AtomicBool) {
        while churning.load(Ordering::SeqCst) {
            self.sample_approvals().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub async fn sample_approvals(&self) {
        for bundle in &self.bundles {
            // An approval confirmed before the Bundle is read below must show in what is read;
            // one confirmed while it is read may not yet.
            let (name, namespace, confirmed_uid) = {
                let Ok(b) = bundle.try_lock() else { continue };
                if !b.manual || !b.created || b.deleted {
                    continue;
                }
                let confirmed_uid = b.approved_uid.clone().filter(|_| b.approval_confirmed);
                (b.name.clone(), b.namespace.clone(), confirmed_uid)
            };
            let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
            let running = config_maps
                .get_opt("common")
                .await
                .ok()
                .flatten()
                .map(|common| {
                    common
                        .data
                        .as_ref()
                        .and_then(|d| d.get("version"))
                        .and_then(|v| v.parse::<u32>().ok())
                });
            let bundles: Api<Bundle> = Api::all(self.client.clone());
            let live = bundles.get_opt(&name).await.ok().flatten();
            // Read after what the cluster shows: an approval is recorded here before it is
            // written, so whatever the cluster runs or holds was recorded by now.
            let model = bundle.lock().await;
            if let Some(version) = running {
                match version.and_then(|v| model.digest_of_version(v)) {
                    Some(d) if model.approved.contains(d) => {}
                    Some(d) => self.violation(format!(
                        "{name} runs version {} ({d}), which was never approved",
                        version.unwrap_or_default()
                    )),
                    None => self.violation(format!(
                        "{name} runs content of version {version:?}, which was never pushed"
                    )),
                }
            }
            if model.approval_confirmed
                && let Some(live) = live
                && live.uid() == model.approved_uid
                && confirmed_uid.is_some()
                && live.uid() == confirmed_uid
            {
                match live.status.as_ref().and_then(|s| s.approval.as_ref()) {
                    Some(a) if model.approved.contains(&a.digest) => {}
                    Some(a) => self.violation(format!(
                        "{name}'s approval names {}, which no approver wrote",
                        a.digest
                    )),
                    None => self.violation(format!("{name}'s approval was lost")),
                }
            }
        }
    }

    /// Finishes what is pending (creates and deletes whose answer was lost, approvals of the
    /// latest content) until every live bundle is Ready at its latest digest and every deleted
    /// one is gone, or `deadline` passes. Returns whether it settled.
    pub async fn settle_until(&self, deadline: Instant) -> bool {
        let bundles: Api<Bundle> = Api::all(self.client.clone());
        loop {
            let mut pending = 0;
            for bundle in &self.bundles {
                let mut bundle = bundle.lock().await;
                if bundle.deleted {
                    match bundles.get_opt(&bundle.name).await {
                        Ok(None) => {}
                        Ok(Some(b)) => {
                            if b.metadata.deletion_timestamp.is_none() {
                                let _ =
                                    bundles.delete(&bundle.name, &DeleteParams::default()).await;
                            }
                            pending += 1;
                        }
                        Err(_) => pending += 1,
                    }
                    continue;
                }
                if !bundle.created {
                    self.create(&mut bundle).await;
                    pending += 1;
                    continue;
                }
                match bundles.get_opt(&bundle.name).await {
                    Ok(Some(live)) if ready_at(&live, &bundle.latest().1) => {}
                    Ok(Some(_)) => {
                        if bundle.manual {
                            self.approve_shown(&mut bundle, true).await;
                        }
                        pending += 1;
                    }
                    Ok(None) => {
                        // Created as far as the model knows, but the create's answer was lost
                        // before it happened: create it now.
                        bundle.created = false;
                        pending += 1;
                    }
                    Err(_) => pending += 1,
                }
            }
            self.sample_approvals().await;
            if pending == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                eprintln!("    {pending} bundle(s) not settled");
                return false;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// Ready, for the current generation, with `pinned` resolved.
pub fn ready_at(bundle: &Bundle, pinned: &str) -> bool {
    let Some(status) = bundle.status.as_ref() else {
        return false;
    };
    let ready = find(&status.conditions, gantry_api::conditions::types::READY).is_some_and(|c| {
        c.status == ConditionStatus::True && c.observed_generation == bundle.metadata.generation
    });
    ready && status.resolved_image.as_deref() == Some(pinned)
}
