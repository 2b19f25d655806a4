//! Sharding bundles across provisioner replicas (`--sharding`): every replica announces itself
//! with a Lease of its own ([`lease`]) and reconciles only the bundles of the slots the slot
//! table gives it ([`slot_table`], [`slots`], watched by [`slot_watch`]), writing only while its
//! [`fence`] is open; the elected replica also runs the [`sharder`], which places the slots on
//! the [`ring`] and writes that table and each bundle's slot label. [`replica`] runs all of it.
//!
//! This layer sits between `state` (whose `Context` holds a shard's fence and slots) and
//! `cluster`: `reconcile` asks it whether a bundle is served here ([`Slots::enter`]); it imports
//! neither `state` nor `reconcile`.

pub mod fence;
pub mod lease;
pub mod placements;
pub mod replica;
pub mod ring;
pub mod sharder;
pub mod share;
pub mod slot_table;
pub mod slot_watch;
pub mod slots;

use std::future::Future;
use std::pin::Pin;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use self::fence::{Fence, ReplicaLayer};
use self::slots::Slots;

/// What ends a run of the controllers: the replica stopping, or its Lease lost or lapsed.
pub type Until = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// A replica's shard: its identity, the layer and fence of its clients, and the slots it
/// serves.
#[derive(Clone)]
pub struct Shard {
    pub identity: String,
    pub layer: ReplicaLayer,
    pub fence: Fence,
    pub slots: Slots,
}

/// The provisioner's metrics that sharding keeps current (handles into its registry).
#[derive(Clone)]
pub struct ShardMetrics {
    pub handovers: Counter,
    pub unowned_seconds: Histogram,
    pub releases: Counter,
    pub reconcile_share: Gauge,
}
