//! `pullMode: Node`: the node's container runtime pulls a bundle image for an unpack Pod, whose
//! program (`gantry-unpack`, shipped in the provisioner's image) validates `/manifests` with the
//! same library code as a direct pull and stores the canonical tarball.
//!
//! [`program`] is the unpack program, [`pod`] the Pod and how its status reads, [`driver`] the
//! controller's side: create the Pod, wait for its outcome, remove it.

pub mod driver;
pub mod pod;
pub mod program;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Exit code of the unpack program when the bundle's content is invalid; its termination
/// message is then the same text a direct pull reports.
pub const EXIT_INVALID_BUNDLE: i32 = 2;

/// What the unpack program reports on success, as its termination message (JSON).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UnpackReport {
    /// `sha256:…` of the canonical tarball it stored.
    pub content_digest: String,
    /// The platform the program (and so the image the node ran) is built for.
    pub platform: String,
    /// Objects in the bundle.
    pub objects: usize,
}

/// The largest termination message the kubelet keeps, in bytes.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;

/// `message` cut at a character boundary to fit a termination message.
pub fn fit_termination_message(message: &str) -> &str {
    if message.len() <= MAX_TERMINATION_MESSAGE {
        return message;
    }
    let mut end = MAX_TERMINATION_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn termination_messages_are_cut_at_a_character() {
        assert_eq!(fit_termination_message("short"), "short");
        let long = "é".repeat(MAX_TERMINATION_MESSAGE);
        let cut = fit_termination_message(&long);
        assert!(cut.len() <= MAX_TERMINATION_MESSAGE && cut.len() >= MAX_TERMINATION_MESSAGE - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
