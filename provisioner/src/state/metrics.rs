//! Prometheus metrics of the provisioner.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthLabels {
    /// `healthy`, `progressing` or `failed`.
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    /// The shard (replica identity).
    pub shard: String,
}

/// Every metric the provisioner exports.
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub failures: Family<ReasonLabels, Counter>,
    pub objects_applied: Counter,
    pub objects_unchanged: Counter,
    pub objects_deleted: Counter,
    pub bytes_pulled: Counter,
    /// Pulls answered from the tarballs kept of an earlier pull of the same image.
    pub pulls_reused: Counter,
    pub status_writes: Counter,
    pub leader: Gauge,
    /// Tasks alive in the async runtime: flat under steady load, or something leaks.
    pub runtime_tasks: Gauge,
    pub health_transitions: Family<HealthLabels, Counter>,
    /// Signature verifications that asked the registry (cached results are not counted).
    pub signature_verifications: Family<ResultLabels, Counter>,
    /// Bundles this shard holds (each replica exports its own).
    pub shard_bundles: Family<ShardLabels, Gauge>,
    /// Slots moved from one shard to another (by the sharder).
    pub shard_handovers: Counter,
    /// How long slots waited for a shard: from the sharder finding them without a live owner to
    /// the table write that gave them one.
    pub shard_unowned_seconds: Histogram,
    /// Slots this replica let go when the sharder took them.
    pub shard_releases: Counter,
    /// Passes this shard runs at once: its share of `--reconcile-concurrency`.
    pub shard_reconcile_share: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("gantry_provisioner");
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Bundle reconciles by result",
            reconciles.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Duration of bundle reconciles",
            reconcile_duration.clone(),
        );
        let failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "failures",
            "Failed bundle reconciles by reason",
            failures.clone(),
        );
        let objects_applied = Counter::default();
        registry.register(
            "objects_applied",
            "Objects written with server-side apply",
            objects_applied.clone(),
        );
        let objects_unchanged = Counter::default();
        registry.register(
            "objects_unchanged",
            "Objects found live as desired (nothing sent)",
            objects_unchanged.clone(),
        );
        let objects_deleted = Counter::default();
        registry.register(
            "objects_deleted",
            "Objects deleted by pruning or uninstalling",
            objects_deleted.clone(),
        );
        let bytes_pulled = Counter::default();
        registry.register(
            "bytes_pulled",
            "Compressed layer bytes pulled from registries",
            bytes_pulled.clone(),
        );
        let pulls_reused = Counter::default();
        registry.register(
            "pulls_reused",
            "Pulls answered from the canonical tarball of an earlier pull of the same image digest, platform, limits and credentials",
            pulls_reused.clone(),
        );
        let status_writes = Counter::default();
        registry.register(
            "status_writes",
            "Bundle status writes",
            status_writes.clone(),
        );
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica leads", leader.clone());
        let runtime_tasks = Gauge::default();
        registry.register(
            "runtime_tasks",
            "Tasks alive in the async runtime",
            runtime_tasks.clone(),
        );
        let health_transitions = Family::<HealthLabels, Counter>::default();
        registry.register(
            "health_transitions",
            "Changes of bundles' Healthy condition, by the state entered",
            health_transitions.clone(),
        );
        let signature_verifications = Family::<ResultLabels, Counter>::default();
        registry.register(
            "signature_verifications",
            "Signature verifications that asked the registry, by result (verified, failed)",
            signature_verifications.clone(),
        );
        let shard_bundles = Family::<ShardLabels, Gauge>::default();
        registry.register(
            "shard_bundles",
            "Bundles this shard holds: those of the slots it serves",
            shard_bundles.clone(),
        );
        let shard_handovers = Counter::default();
        registry.register(
            "shard_handovers",
            "Slots moved from one shard to another",
            shard_handovers.clone(),
        );
        let shard_unowned_seconds = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        registry.register(
            "shard_unowned_seconds",
            "Time slots spent without a live shard before the sharder gave them to one",
            shard_unowned_seconds.clone(),
        );
        let shard_releases = Counter::default();
        registry.register(
            "shard_releases",
            "Slots this replica let go when the sharder took them",
            shard_releases.clone(),
        );
        let shard_reconcile_share = Gauge::default();
        registry.register(
            "shard_reconcile_share",
            "Bundles this shard reconciles at once: its share of --reconcile-concurrency, by the slots it serves",
            shard_reconcile_share.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_duration,
            failures,
            objects_applied,
            objects_unchanged,
            objects_deleted,
            bytes_pulled,
            pulls_reused,
            status_writes,
            leader,
            runtime_tasks,
            health_transitions,
            signature_verifications,
            shard_bundles,
            shard_handovers,
            shard_unowned_seconds,
            shard_releases,
            shard_reconcile_share,
        }
    }
}

impl Metrics {
    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
