//! `pullMode: Node`: the node's container runtime pulls a bundle image for an unpack Pod, whose
//! program (`gantry-unpack`, the crate `unpack/`, shipped in the provisioner's image) validates
//! `/manifests` with the same library code as a direct pull and stores the canonical tarball;
//! what it reports and its exit codes are `gantry_api::unpack`.
//!
//! [`pod`] is the Pod and how its status reads, [`driver`] the controller's side: create the
//! Pod, wait for its outcome, remove it.

pub mod driver;
pub mod pod;

use std::sync::Arc;
use std::time::Duration;

/// How unpack Pods are made and bounded.
#[derive(Clone, Debug)]
pub struct NodePullSettings {
    /// Image holding the unpack program (the provisioner's); read from the provisioner's own
    /// Pod (`own_pod`) when absent.
    pub unpack_image: Option<String>,
    /// The provisioner's Pod, whose image is the unpack image when none is given.
    pub own_pod: Option<String>,
    /// ServiceAccount of unpack Pods: it may write bundle content, nothing else.
    pub service_account: String,
    /// Storage server URL, as seen from unpack Pods.
    pub storage_url: String,
    /// `activeDeadlineSeconds` of unpack Pods; a Pod not scheduled within it (plus a grace)
    /// is given up as well.
    pub deadline: Duration,
    /// How long an unpack Pod may stay unschedulable before it is given up (and its slot
    /// freed); the scheduler's message is shown at once.
    pub unschedulable_timeout: Duration,
    /// Unpack Pods running at once.
    pub slots: Arc<tokio::sync::Semaphore>,
    /// The unpack image and its pull policy, once learnt.
    pub learnt_image: Arc<tokio::sync::OnceCell<(String, Option<String>)>>,
}

impl NodePullSettings {
    pub const DEFAULT_SERVICE_ACCOUNT: &str = "gantry-unpack";
    pub const DEFAULT_CONCURRENCY: usize = 2;
    pub const DEFAULT_UNSCHEDULABLE_TIMEOUT: Duration = Duration::from_secs(60);

    /// Settings with `concurrency` Pods at once.
    pub fn new(storage_url: String, concurrency: usize, deadline: Duration) -> Self {
        NodePullSettings {
            unpack_image: None,
            own_pod: None,
            service_account: Self::DEFAULT_SERVICE_ACCOUNT.into(),
            storage_url,
            deadline,
            unschedulable_timeout: Self::DEFAULT_UNSCHEDULABLE_TIMEOUT,
            slots: Arc::new(tokio::sync::Semaphore::new(concurrency.max(1))),
            learnt_image: Arc::new(tokio::sync::OnceCell::new()),
        }
    }
}

impl Default for NodePullSettings {
    fn default() -> Self {
        Self::new(
            "http://gantry-storage.gantry-system.svc:8080".into(),
            Self::DEFAULT_CONCURRENCY,
            Duration::from_secs(300),
        )
    }
}
