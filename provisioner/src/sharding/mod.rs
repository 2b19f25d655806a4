//! Sharding bundles across provisioner replicas (`--sharding`): every replica announces itself
//! with a Lease of its own ([`membership`]) and reconciles only the bundles of the slots the
//! slot table gives it ([`slot_table`]); the elected replica also runs the [`sharder`], which
//! writes that table and each bundle's slot label.
//!
//! This layer sits beside `reconcile`, above `state`, `cluster` and `policy`; only `run.rs`
//! uses it.

pub mod membership;
pub mod placements;
pub mod sharder;
pub mod slot_table;
