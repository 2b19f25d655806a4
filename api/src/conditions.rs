//! Condition types and reasons. Reasons are CamelCase, as `metav1.Condition` requires.

/// Condition types of a `Bundle`.
pub mod types {
    /// The image was resolved, pulled, validated and stored.
    pub const UNPACKED: &str = "Unpacked";
    /// The content for the resolved digest may be installed.
    pub const APPROVED: &str = "Approved";
    /// The objects were applied and the inventory recorded.
    pub const INSTALLED: &str = "Installed";
    /// Summary: true when the bundle is installed at its current generation.
    pub const READY: &str = "Ready";
    /// Condition type of a `ProvisionerClass`: the class's parameters are valid.
    pub const ACCEPTED: &str = "Accepted";
}

/// Condition reasons.
pub mod reasons {
    // ProvisionerClass `Accepted`.
    /// The class's parameters are valid.
    pub const ACCEPTED: &str = "Accepted";
    /// A parameter of the class is invalid; the message names it.
    pub const INVALID_PARAMETERS: &str = "InvalidParameters";

    // Selection.
    /// The named class, or a default class, does not exist yet.
    pub const CLASS_NOT_FOUND: &str = "ClassNotFound";
    /// Work on the bundle has not started.
    pub const PENDING: &str = "Pending";

    // `Unpacked`.
    /// The content was pulled, validated and stored.
    pub const UNPACK_SUCCEEDED: &str = "UnpackSucceeded";
    /// The image is being resolved, pulled or unpacked.
    pub const UNPACKING: &str = "Unpacking";
    /// The image could not be resolved or pulled (registry, auth, network, platform).
    pub const PULL_FAILED: &str = "PullFailed";
    /// The class requires a digest reference and the bundle names a tag.
    pub const DIGEST_REQUIRED: &str = "DigestRequired";
    /// The image's content breaks the bundle format or a limit.
    pub const INVALID_BUNDLE: &str = "InvalidBundle";
    /// The content could not be written to or read from the storage server.
    pub const STORAGE_FAILED: &str = "StorageFailed";

    // `Approved`.
    /// The class approves every digest.
    pub const AUTOMATIC_APPROVAL: &str = "AutomaticApproval";
    /// The class is `Manual` and no approval for the resolved digest exists.
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    /// An approver approved the resolved digest.
    pub const APPROVED: &str = "Approved";
    /// An approver denied the resolved digest.
    pub const DENIED: &str = "Denied";

    // `Installed`.
    /// Every object was applied.
    pub const INSTALL_SUCCEEDED: &str = "InstallSucceeded";
    /// Objects are being applied.
    pub const INSTALLING: &str = "Installing";
    /// An object could not be applied; the message names it and the API server's error.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// The install namespace does not exist and the bundle does not create it.
    pub const NAMESPACE_NOT_FOUND: &str = "NamespaceNotFound";
    /// Namespaced objects carry no namespace and the bundle sets no install namespace.
    pub const NAMESPACE_REQUIRED: &str = "NamespaceRequired";
    /// An object is already managed by another bundle.
    pub const CONFLICT: &str = "Conflict";
    /// An object of the previous content could not be deleted.
    pub const PRUNE_FAILED: &str = "PruneFailed";
    /// A CRD of the bundle was not established in time.
    pub const CRD_NOT_ESTABLISHED: &str = "CRDNotEstablished";

    // Deletion.
    /// The bundle's objects and stored content were removed (an Event).
    pub const UNINSTALLED: &str = "Uninstalled";
    /// An object of the bundle could not be removed; the message names it.
    pub const UNINSTALL_FAILED: &str = "UninstallFailed";
}
