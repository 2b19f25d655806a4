//! The provisioner: installs Bundles (`plain+v0` images) on the cluster it runs against.
//!
//! Layers, each a folder, whose imports run one way (docs/architecture.md):
//! `reconcile` (the driver and its steps) uses all the others, and nothing uses it;
//! `status` (conditions, the summary that decides `Ready`, writes and Events) uses `state`;
//! `state` (the shared [`Context`](state::Context), caches, backoff, metrics) holds parts of
//! `cluster` (applying, access reviews, live views, discovery, inventory, drift, identities)
//! and `source` (registry, storage server, node pulls). The pure rules (planning, permissions,
//! class selection, allowed images, kstatus) are gantry-rules', used by all of them.
#![forbid(unsafe_code)]

mod cluster;
mod error;
mod reconcile;
pub mod run;
mod server;
mod sharding;
mod source;
mod state;
mod status;

pub use error::Error;
pub use gantry_rules::identity::ServiceAccountDefaults;
pub use source::node_pull::NodePullSettings;
pub use source::pulled::PulledContents;
pub use source::storage::{StorageClient, Token};
pub use state::Settings;
