//! What every pass shares: the [`Context`] (clients, settings, caches, backoff, metrics), built
//! once by the controllers and by the tests alike.

pub mod backoff;
pub mod caches;
pub mod claims;
pub mod dependents;
pub mod forbidden;
pub mod metrics;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::{Bundle, ProvisionerClass};
use gantry_image::Platform;
use kube::Client;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc::UnboundedReceiver;

use self::backoff::Backoff;
use self::caches::{HeldUpdates, InstalledChecks, ResolvedTags, VerifiedImages, WrittenVersions};
use self::forbidden::ForbiddenStalls;
use self::metrics::Metrics;
use crate::cluster::access::AccessReviews;
use crate::cluster::discovery::KindCache;
use crate::cluster::drift::DriftWatches;
use crate::cluster::events::EventRecorder;
use crate::cluster::identity::Appliers;
use crate::error::Result;
use crate::sharding::Shard;
use crate::sharding::fence::Fence;
use crate::sharding::slots::Slots;
use crate::source::node_pull::NodePullSettings;
use crate::source::pulled::PulledContents;
use crate::source::registry::{RegistryClients, SharedClient, registry_client};
use crate::source::storage::StorageClient;
use crate::state::claims::Claims;
use crate::state::dependents::Dependents;
use gantry_rules::identity::ServiceAccountDefaults;

/// Settings of the controller (from flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace holding pull secrets and the registry CA secret.
    pub namespace: String,
    /// The `ProvisionerClass.spec.provisioner` IDs served: bundles of classes naming another
    /// one are left alone, so that two installations share a cluster without touching each
    /// other's bundles.
    pub provisioners: gantry_rules::class_selection::ServedProvisioners,
    /// The provisioner's token for plugins (`--plugin-token-file`).
    pub plugin_token_file: Option<PathBuf>,
    /// Platform selected from image indexes when the class names none.
    pub platform: Platform,
    /// Objects applied at once.
    pub apply_concurrency: usize,
    /// How long to wait for a bundle's CRD to be established.
    pub crd_timeout: Duration,
    /// How long applying a bundle's objects may take (a bundle's `spec.timeout` overrides it).
    pub apply_timeout: Duration,
    /// How often a tag is resolved again (with jitter).
    pub resolve_interval: Duration,
    /// How often an installed bundle is checked for drift without a trigger (with jitter).
    pub resync_interval: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Where pulls unpack (default: the system's temporary directory).
    pub scratch_dir: Option<PathBuf>,
    /// Unpack Pods of classes with `pullMode: Node`.
    pub node_pull: NodePullSettings,
    /// Whose identity bundles are applied with when their class names no ServiceAccount.
    pub service_accounts: ServiceAccountDefaults,
    /// Bytes of canonical tarballs kept for reuse by bundles of the same image (0: none).
    pub pull_cache_bytes: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: "gantry-system".into(),
            provisioners: Default::default(),
            plugin_token_file: None,
            platform: Platform::current(),
            apply_concurrency: 32,
            crd_timeout: Duration::from_secs(60),
            apply_timeout: Duration::from_secs(600),
            resolve_interval: Duration::from_secs(300),
            resync_interval: Duration::from_secs(600),
            backoff_base: Duration::from_secs(2),
            backoff_cap: Duration::from_secs(300),
            scratch_dir: None,
            node_pull: NodePullSettings::default(),
            service_accounts: ServiceAccountDefaults::default(),
            pull_cache_bytes: PulledContents::DEFAULT_BYTES,
        }
    }
}

/// Shared state of the controller.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub storage: StorageClient,
    pub classes: Store<ProvisionerClass>,
    pub kinds: KindCache,
    pub backoff: Backoff,
    pub metrics: Arc<Metrics>,
    pub recorder: EventRecorder,
    pub drift: DriftWatches,
    /// When each bundle's tag was last resolved, and for which image.
    pub resolved: ResolvedTags,
    /// When each bundle was last installed or checked in full, and what it looked like then.
    pub checked: InstalledChecks,
    /// Access reviews, with recent answers of cluster-wide ones.
    pub access: AccessReviews,
    /// Each bundle's last write by the provisioner, until the bundle store has it.
    pub written: WrittenVersions,
    /// Images whose signature verified, and against which keys.
    pub verified: VerifiedImages,
    /// Clients acting as the ServiceAccounts bundles are applied as.
    pub appliers: Appliers,
    /// Registry clients, one per set of credentials and TLS settings.
    pub registries: RegistryClients,
    /// Canonical tarballs pulled lately, for bundles of the same image and credentials.
    pub pulled: PulledContents,
    /// Which bundles' inventories list each object, kept by the Bundle watch.
    pub claims: Arc<Claims>,
    /// Which bundles name each bundle in `spec.dependsOn`, kept by the Bundle watch.
    pub dependents: Arc<Dependents>,
    /// Which bundles read each ConfigMap and Secret (`spec.configFrom`), from the Bundle watch.
    pub config_sources: Arc<Dependents>,
    /// The provisioner plugins registered in the provisioner's namespace.
    pub plugins: Arc<crate::source::plugin::Plugins>,
    /// Bundles whose new content or spec is held back while their installed content stays
    /// (and is repaired).
    pub held_updates: HeldUpdates,
    /// Bundles stalled on `Forbidden`, by identity, for the RBAC watches to wake.
    pub forbidden: ForbiddenStalls,
    /// With `--sharding`: this replica's shard, whose bundles it reconciles.
    pub shard: Option<String>,
    /// Whether this replica may write (always, without sharding).
    pub fence: Fence,
    /// With `--sharding`: the slots this replica serves; a bundle of another slot gets no pass.
    pub slots: Option<Slots>,
}

impl Context {
    /// A context with empty caches: what the controllers start with, and what tests build;
    /// with the stream of bundles its drift watches wake.
    pub fn new(
        client: Client,
        config: Option<kube::Config>,
        settings: Settings,
        storage: StorageClient,
        classes: Store<ProvisionerClass>,
        metrics: Arc<Metrics>,
        reporter: Reporter,
    ) -> (Self, UnboundedReceiver<ObjectRef<Bundle>>) {
        let (drift, drift_events) = DriftWatches::new();
        let pull_cache_bytes = settings.pull_cache_bytes;
        let plugins = Arc::new(crate::source::plugin::Plugins::new(
            settings.namespace.clone(),
            settings.plugin_token_file.clone(),
        ));
        let context = Context {
            backoff: Backoff::new(settings.backoff_base, settings.backoff_cap),
            recorder: EventRecorder::new(client.clone(), reporter),
            appliers: Appliers::new(config, client.clone()),
            client,
            settings,
            storage,
            classes,
            kinds: KindCache::default(),
            metrics,
            drift,
            resolved: Default::default(),
            checked: Default::default(),
            written: Default::default(),
            access: Default::default(),
            verified: Default::default(),
            registries: Default::default(),
            pulled: PulledContents::new(pull_cache_bytes),
            claims: Default::default(),
            dependents: Default::default(),
            config_sources: Arc::new(Dependents::on_config_sources()),
            plugins,
            held_updates: Default::default(),
            forbidden: Default::default(),
            shard: None,
            fence: Fence::open(),
            slots: None,
        };
        (context, drift_events)
    }

    /// The provisioners served now: the built-in ones and the plugins registered.
    pub fn served(&self) -> gantry_rules::class_selection::ServedProvisioners {
        gantry_rules::class_selection::ServedProvisioners {
            plugins: self.plugins.ids(),
            ..self.settings.provisioners.clone()
        }
    }

    /// The context of a shard: its identity, its fence, the slots it serves, and clients that
    /// carry them.
    pub fn for_shard(mut self, shard: Shard) -> Self {
        let Shard {
            identity,
            layer,
            fence,
            slots,
        } = shard;
        self.appliers = self
            .appliers
            .with_build(Arc::new(move |config| layer.client(config)));
        self.shard = Some(identity);
        self.fence = fence;
        self.slots = Some(slots);
        self
    }

    /// Forgets what the caches hold of the bundle `name` (it left this replica's watch): when
    /// it comes back, its first pass is a whole one.
    pub fn forget(&self, name: &str) {
        self.backoff.success(name);
        self.resolved.forget(name);
        self.checked.forget(name);
        self.written.forget(name);
        self.held_updates.forget(name);
        self.forbidden.clear(name);
    }

    /// A registry client with the credentials of `class` and `bundle` (secrets in the
    /// provisioner's namespace), shared by bundles with the same ones.
    pub async fn registry_client(
        &self,
        class: &ProvisionerClass,
        bundle: &Bundle,
    ) -> Result<SharedClient> {
        registry_client(
            &self.client,
            &self.settings.namespace,
            &self.registries,
            class,
            bundle,
        )
        .await
    }
}
