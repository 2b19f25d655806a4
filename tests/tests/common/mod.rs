//! For a test binary not yet folded into the process tier (`tests/tests/process/`): the helpers
//! that lived here are in the harness now (`gantry_tests::e2e`). This re-exports them, with
//! the old signatures of those that now name their control plane; new tests go into
//! `tests/tests/process/` and use `gantry_tests::e2e` directly.
#![allow(dead_code, unused_imports)] // each test binary uses a different subset

pub use gantry_tests::e2e::*;
use gantry_tests::{Provisioner, StorageServer, control_plane};

pub mod kubectl {
    pub use gantry_tests::e2e::kubectl::*;
}

/// The shared Gantry's count of status writes.
pub async fn status_writes() -> u64 {
    gantry().status_writes().await
}

/// Starts a storage server and a provisioner run with `args` on the shared control plane.
pub fn start_gantry(args: &[&str]) -> Gantry {
    gantry_tests::e2e::start_gantry(control_plane(), args)
}

/// A provisioner of its own on the shared control plane.
pub fn start_provisioner(storage: &StorageServer, args: &[&str]) -> Provisioner {
    gantry_tests::e2e::start_provisioner(control_plane(), storage, args)
}

/// The namespace and default class a provisioner of its own needs on the shared control plane.
pub async fn setup() -> kube::Client {
    gantry_tests::e2e::setup(control_plane()).await
}
