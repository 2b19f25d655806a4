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
        let mut metrics = Self {
            registry: Registry::with_prefix("gantry_provisioner"),
            reconciles: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            failures: Family::default(),
            objects_applied: Counter::default(),
            objects_unchanged: Counter::default(),
            objects_deleted: Counter::default(),
            bytes_pulled: Counter::default(),
            pulls_reused: Counter::default(),
            status_writes: Counter::default(),
            leader: Gauge::default(),
            runtime_tasks: Gauge::default(),
            health_transitions: Family::default(),
            signature_verifications: Family::default(),
            shard_bundles: Family::default(),
            shard_handovers: Counter::default(),
            shard_unowned_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            shard_releases: Counter::default(),
            shard_reconcile_share: Gauge::default(),
        };
        let registry = &mut metrics.registry;
        registry.register(
            "reconciles",
            "Bundle reconciles by result",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of bundle reconciles",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "failures",
            "Failed bundle reconciles by reason",
            metrics.failures.clone(),
        );
        registry.register(
            "objects_applied",
            "Objects written with server-side apply",
            metrics.objects_applied.clone(),
        );
        registry.register(
            "objects_unchanged",
            "Objects found live as desired (nothing sent)",
            metrics.objects_unchanged.clone(),
        );
        registry.register(
            "objects_deleted",
            "Objects deleted by pruning or uninstalling",
            metrics.objects_deleted.clone(),
        );
        registry.register(
            "bytes_pulled",
            "Compressed layer bytes pulled from registries",
            metrics.bytes_pulled.clone(),
        );
        registry.register(
            "pulls_reused",
            "Pulls answered from the canonical tarball of an earlier pull of the same image digest, platform, limits and credentials",
            metrics.pulls_reused.clone(),
        );
        registry.register(
            "status_writes",
            "Bundle status writes",
            metrics.status_writes.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica leads",
            metrics.leader.clone(),
        );
        registry.register(
            "runtime_tasks",
            "Tasks alive in the async runtime",
            metrics.runtime_tasks.clone(),
        );
        registry.register(
            "health_transitions",
            "Changes of bundles' Healthy condition, by the state entered",
            metrics.health_transitions.clone(),
        );
        registry.register(
            "signature_verifications",
            "Signature verifications that asked the registry, by result (verified, failed)",
            metrics.signature_verifications.clone(),
        );
        registry.register(
            "shard_bundles",
            "Bundles this shard holds: those of the slots it serves",
            metrics.shard_bundles.clone(),
        );
        registry.register(
            "shard_handovers",
            "Slots moved from one shard to another",
            metrics.shard_handovers.clone(),
        );
        registry.register(
            "shard_unowned_seconds",
            "Time slots spent without a live shard before the sharder gave them to one",
            metrics.shard_unowned_seconds.clone(),
        );
        registry.register(
            "shard_releases",
            "Slots this replica let go when the sharder took them",
            metrics.shard_releases.clone(),
        );
        registry.register(
            "shard_reconcile_share",
            "Bundles this shard reconciles at once: its share of --reconcile-concurrency, by the slots it serves",
            metrics.shard_reconcile_share.clone(),
        );
        metrics
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
