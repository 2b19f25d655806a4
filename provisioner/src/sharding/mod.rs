//! Sharding bundles across provisioner replicas (`--sharding`): every replica announces itself
//! with a Lease of its own ([`membership`]) and reconciles only the bundles labelled with its
//! identity; the elected replica also runs the [`sharder`], which writes those labels.
//!
//! This layer sits beside `reconcile`, above `state`, `cluster` and `policy`; only `run.rs`
//! uses it.

pub mod membership;
pub mod placements;
pub mod sharder;
