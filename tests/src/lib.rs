//! Test harness for Gantry: a real kube-apiserver + etcd (built from the official Go modules by
//! `tools/control-plane/build.sh`) and Debian's `docker-registry`, started on loopback as
//! controller-runtime's envtest does.
//!
//! Everything started here belongs to one process group led by a small watchdog that ends the
//! group and removes the temporary state once the test binary exits, however it exits.
//! [`e2e`] holds what the end-to-end tests of both tiers share.
#![forbid(unsafe_code)]

pub mod audit;
mod bundles;
mod control_plane;
mod cosign;
pub mod e2e;
mod error;
mod gantry;
mod gantry_images;
pub mod helm;
pub mod helm_plugin;
mod node;
mod oci_image;
mod pki;
mod process;
mod proxy;
mod registry;
pub mod rogue_plugin;
pub mod sockets;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub use bundles::{bundle_dir, read_dir_files, run_ok};
pub use control_plane::{ControlPlane, ControlPlaneOptions, NodeServing, control_plane};
pub use cosign::{COSIGN_DIR_ENV, CosignKey, SignatureFormat, cosign_binary};
pub use error::HarnessError;
pub use gantry::{
    Provisioner, ProvisionerOptions, StorageOptions, StorageServer, binary, identity_flag,
};
pub use gantry_images::{GantryImages, gantry_images, script_command};
pub use helm::{HELM_DIR_ENV, helm_binary};
pub use node::{
    BRIDGE, BRIDGE_IP, CLUSTER_DOMAIN, DNS_IP, DROP_CHAIN, HOST_STATE, KEEP_LOGS_ENV,
    KUBERNETES_SERVICE_IP, NODE_NAME, NodeCluster, POD_CIDR, SERVICE_CIDR, node_cluster,
};
pub use oci_image::{ImageConfig, push_rootfs};
pub use pki::Pki;
pub use process::{Lifetime, free_port, stop_detached, stop_groups};
pub use proxy::CuttableProxy;
pub use registry::{Registry, RegistryOptions, registry};

/// Installs rustls' `ring` provider for the process: with more than one TLS user compiled in
/// (kube, reqwest), rustls cannot pick one by itself.
pub fn init_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The workspace root (the directory holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A name unique within this test run, valid as a Kubernetes object name: `prefix-<pid>-<n>`.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Polls `check` until it returns `Some`, failing the test with `what` when `timeout` passes.
/// The interval is short and fixed: this waits for a condition, it does not guess a duration.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
