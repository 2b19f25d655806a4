//! What every reconcile shares.

use std::path::PathBuf;
use std::time::Duration;

use gantry_api::{ProvisionerClass, ServiceAccountReference};
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use super::backoff::Backoff;
use super::caches::{
    AccessAnswers, InstalledChecks, ResolvedTags, VerifiedImages, WrittenVersions,
};
use super::discovery::KindCache;
use super::drift::DriftWatches;
use super::identity::Appliers;
use super::metrics::Metrics;
use super::node_pull::NodePullSettings;
use super::storage::StorageClient;
use gantry_image::Platform;

/// Settings of the controller (from flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace holding pull secrets and the registry CA secret.
    pub namespace: String,
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
    /// The ServiceAccount bundles are applied as when neither they nor their class name one.
    pub default_service_account: Option<ServiceAccountReference>,
    /// Refuse bundles that would be applied with the provisioner's own identity.
    pub require_service_account: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: "gantry-system".into(),
            platform: Platform::current(),
            apply_concurrency: 16,
            crd_timeout: Duration::from_secs(60),
            apply_timeout: Duration::from_secs(600),
            resolve_interval: Duration::from_secs(300),
            resync_interval: Duration::from_secs(600),
            backoff_base: Duration::from_secs(2),
            backoff_cap: Duration::from_secs(300),
            scratch_dir: None,
            node_pull: NodePullSettings::default(),
            default_service_account: None,
            require_service_account: false,
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
    pub metrics: std::sync::Arc<Metrics>,
    pub recorder: Recorder,
    pub drift: DriftWatches,
    /// When each bundle's tag was last resolved, and for which image.
    pub resolved: ResolvedTags,
    /// When each bundle was last installed or checked in full, and what it looked like then.
    pub checked: InstalledChecks,
    /// Recent answers of cluster-wide access reviews.
    pub access: AccessAnswers,
    /// Each bundle's last write by the provisioner, until the bundle store has it.
    pub written: WrittenVersions,
    /// Images whose signature verified, and against which keys.
    pub verified: VerifiedImages,
    /// Clients acting as the ServiceAccounts bundles are applied as.
    pub appliers: Appliers,
    /// Registry clients, one per set of credentials and TLS settings.
    pub registries: super::caches::RegistryClients,
}
