//! Condition types and reasons. Reasons are CamelCase, as `metav1.Condition` requires.
//!
//! Every reason is declared once, together with what it says about its condition
//! ([`ReasonKind`]): the controller derives the phase, `Ready` and the Event type from that one
//! table, so a new reason cannot be a failure in one place and a progress in another.

/// Condition types of a `Bundle`.
pub mod types {
    /// The image was resolved, pulled, validated and stored.
    pub const UNPACKED: &str = "Unpacked";
    /// The content for the resolved digest may be installed.
    pub const APPROVED: &str = "Approved";
    /// The objects were applied and the inventory recorded.
    pub const INSTALLED: &str = "Installed";
    /// Every object of the bundle is healthy (kstatus `Current`).
    pub const HEALTHY: &str = "Healthy";
    /// Summary: true when the bundle is installed at its current generation (and healthy, when
    /// its health policy says `wait`).
    pub const READY: &str = "Ready";
    /// True when the last pass failed in a way no retry can fix until something it depends on
    /// changes (the bundle, its class, its image's digest, its ServiceAccount's RBAC); the
    /// message says what. Absent otherwise.
    pub const STALLED: &str = "Stalled";
    /// With `spec.drift: Report`: true while live objects differ from what the bundle applied
    /// (the message lists them, with the fields); false (`NoDrift`) when they do not. Absent
    /// with `spec.drift: Correct`, where drift is repaired instead.
    pub const DRIFTED: &str = "Drifted";
    /// Condition type of a `ProvisionerClass`: the class's parameters are valid.
    pub const ACCEPTED: &str = "Accepted";
}

/// What a reason says about the condition it is set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonKind {
    /// The step is done.
    Success,
    /// Work is under way, or waiting for something expected (a person, a first reconcile).
    Progress,
    /// The step failed; it is retried.
    Failure,
}

impl ReasonKind {
    /// The kind of `reason`; a reason this version does not know counts as a failure, so that
    /// it is never hidden as progress.
    pub fn of(reason: &str) -> ReasonKind {
        reasons::ALL
            .iter()
            .find(|(known, _)| *known == reason)
            .map_or(ReasonKind::Failure, |(_, kind)| *kind)
    }
}

/// Declares each reason as a constant and lists them all, with their kinds, in [`reasons::ALL`].
macro_rules! reasons {
    ($( $(#[$doc:meta])* $name:ident = $value:literal => $kind:ident; )*) => {
        $( $(#[$doc])* pub const $name: &str = $value; )*

        /// Every reason with its kind: the one table the controller consults.
        pub const ALL: &[(&str, ReasonKind)] = &[ $( ($value, ReasonKind::$kind) ),* ];
    };
}

/// Condition reasons.
pub mod reasons {
    use super::ReasonKind;

    reasons! {
        // ProvisionerClass `Accepted`.
        /// The class's parameters are valid.
        ACCEPTED = "Accepted" => Success;
        /// A parameter of the class is invalid; the message names it.
        INVALID_PARAMETERS = "InvalidParameters" => Failure;

        // Selection.
        /// The named class, or a default class, does not exist yet.
        CLASS_NOT_FOUND = "ClassNotFound" => Failure;
        /// An expression of the bundle's `spec.healthCheckExprs` does not parse; the message
        /// names the field, line and column. Nothing is pulled or applied until it is fixed.
        INVALID_HEALTH_EXPRESSION = "InvalidHealthExpression" => Failure;
        /// Work on the bundle has not started.
        PENDING = "Pending" => Progress;

        // `Unpacked`.
        /// The content was pulled, validated and stored.
        UNPACK_SUCCEEDED = "UnpackSucceeded" => Success;
        /// The image is being resolved, pulled or unpacked.
        UNPACKING = "Unpacking" => Progress;
        /// The image could not be resolved or pulled (registry, auth, network, platform).
        PULL_FAILED = "PullFailed" => Failure;
        /// The class requires a digest reference and the bundle names a tag.
        DIGEST_REQUIRED = "DigestRequired" => Failure;
        /// `spec.image` is not an image reference (`/repo:tag`, left by an unset variable);
        /// the message names the field and the value. Nothing is fetched.
        INVALID_IMAGE_REFERENCE = "InvalidImageReference" => Failure;
        /// `spec.ref`: no tag of the repository is a version within `spec.ref.semver` (the
        /// message names the range and the highest tags seen), or the range or
        /// `spec.ref.semverFilter` does not parse, or `spec.image` names a tag or digest
        /// besides. Looked at again at the resolve interval.
        NO_MATCHING_VERSION = "NoMatchingVersion" => Failure;
        /// The image's content breaks the bundle format or a limit.
        INVALID_BUNDLE = "InvalidBundle" => Failure;
        /// The bundle's configuration cannot be used: `spec.config` for a provisioner that
        /// takes none, a `spec.configFrom` source missing or not a mapping; the message names
        /// the field or the source.
        INVALID_CONFIG = "InvalidConfig" => Failure;
        /// The class's provisioner could not render the content with the configuration; the
        /// message names the provisioner and what it said (the file, the CSV field).
        RENDER_FAILED = "RenderFailed" => Failure;
        /// The class's provisioner plugin cannot be used now: no Service registers it, its
        /// CA or identity is wrong, or its probe says it is not ready (the message says which);
        /// on `Accepted` of the class too. Retried.
        PROVISIONER_NOT_READY = "ProvisionerNotReady" => Failure;
        /// The content could not be written to or read from the storage server.
        STORAGE_FAILED = "StorageFailed" => Failure;
        /// The image is not under any of the class's `allowedImages`; nothing was fetched.
        IMAGE_NOT_ALLOWED = "ImageNotAllowed" => Failure;
        /// `pullMode: Node`: the unpack Pod could not be scheduled, did not finish within its
        /// deadline, or failed for another reason than the image or its content.
        UNPACK_POD_FAILED = "UnpackPodFailed" => Failure;
        /// `pullMode: Node`: the unpack Pod stayed unschedulable longer than
        /// `--unpack-schedule-timeout`; the message has the scheduler's. The Pod is removed.
        UNPACK_POD_UNSCHEDULABLE = "UnpackPodUnschedulable" => Failure;
        /// The class's `spec.verify`: the resolved digest carries no valid signature by any of
        /// the class's keys (or the keys cannot be read); the message names the digest and the
        /// keys tried.
        VERIFICATION_FAILED = "VerificationFailed" => Failure;

        // `Approved`.
        /// The class approves every digest.
        AUTOMATIC_APPROVAL = "AutomaticApproval" => Success;
        /// The class is `Manual` and no approval for the resolved digest exists.
        AWAITING_APPROVAL = "AwaitingApproval" => Progress;
        /// An approver approved the resolved digest.
        APPROVED = "Approved" => Success;
        /// An approver denied the resolved digest.
        DENIED = "Denied" => Failure;

        // `Installed`.
        /// Every object was applied.
        INSTALL_SUCCEEDED = "InstallSucceeded" => Success;
        /// Objects are being applied.
        INSTALLING = "Installing" => Progress;
        /// An object could not be applied; the message names it and the API server's error.
        APPLY_FAILED = "ApplyFailed" => Failure;
        /// The API server refuses an object as invalid (HTTP 422): found by a dry run before
        /// the first write of new content, or by the apply itself; the message names the
        /// file, the document, the object and the API server's field message.
        INVALID_OBJECT = "InvalidObject" => Failure;
        /// The install namespace does not exist and the bundle does not create it.
        NAMESPACE_NOT_FOUND = "NamespaceNotFound" => Failure;
        /// Namespaced objects carry no namespace and the bundle sets no install namespace.
        NAMESPACE_REQUIRED = "NamespaceRequired" => Failure;
        /// A patch of `spec.patches` cannot be applied: its text is not a list of JSON patch
        /// operations, its target's selector does not parse, or an operation fails on an
        /// object it selects (a path that does not exist, a `test` that fails). The message
        /// names the patch (`spec.patches[2]`), the operation and the object. Nothing was
        /// applied.
        INVALID_PATCH = "InvalidPatch" => Failure;
        /// A rule of `spec.ignore` is invalid (a pointer that is not one, a bad target); the
        /// message names it. Nothing is applied.
        INVALID_IGNORE_RULE = "InvalidIgnoreRule" => Failure;
        /// An object is already managed by another bundle.
        CONFLICT = "Conflict" => Failure;
        /// The ServiceAccount the bundle is applied as may not read or write one of its
        /// objects; the message names the object and the ServiceAccount. Nothing was written.
        FORBIDDEN = "Forbidden" => Failure;
        /// The provisioner runs with `--require-service-account` and neither the bundle nor its
        /// class names a ServiceAccount; nothing is pulled or applied.
        SERVICE_ACCOUNT_REQUIRED = "ServiceAccountRequired" => Failure;
        /// The bundle names a ServiceAccount and its class does not set
        /// `allowBundleServiceAccount` (or the bundle has no `installNamespace` to find it in).
        SERVICE_ACCOUNT_NOT_ALLOWED = "ServiceAccountNotAllowed" => Failure;
        /// A Job of a wave of rendered content failed (its `Failed` condition), or did not
        /// complete within the bundle's health timeout of its creation; the message names the
        /// Job, its wave and the Job's own message. The later waves are not applied; retried.
        JOB_FAILED = "JobFailed" => Failure;
        /// An object of the previous content could not be deleted.
        PRUNE_FAILED = "PruneFailed" => Failure;
        /// A CRD of the bundle was not established in time.
        CRD_NOT_ESTABLISHED = "CRDNotEstablished" => Failure;
        /// The new content changes a CRD in the cluster unsafely (a stored version removed, the
        /// scope changed, a served version with objects no longer served, a schema that
        /// accepts less); the message names each change. Nothing was applied.
        UNSAFE_CRD_UPGRADE = "UnsafeCRDUpgrade" => Failure;
        /// An object's `gantry.dev/ssa` or `gantry.dev/force` annotation has a value Gantry
        /// does not know; the message names the object, the annotation, the value and the
        /// allowed values. Nothing was applied.
        INVALID_OBJECT_POLICY = "InvalidObjectPolicy" => Failure;
        /// The API server refused to change an immutable field of an object (a Job's
        /// template, a Service's clusterIP) that is not annotated `gantry.dev/force: enabled`;
        /// the message names the object and the fields.
        IMMUTABLE_FIELD_CHANGED = "ImmutableFieldChanged" => Failure;

        // `Ready`, when the bundle is held back (set over the summary).
        /// `spec.suspend` is true: nothing is applied, pruned or repaired. `Ready` keeps the
        /// status it had.
        SUSPENDED = "Suspended" => Progress;
        /// A bundle of `spec.dependsOn` is not Ready yet; the message names it.
        DEPENDENCY_NOT_READY = "DependencyNotReady" => Progress;
        /// A bundle of `spec.dependsOn` does not exist; the message names it.
        DEPENDENCY_NOT_FOUND = "DependencyNotFound" => Failure;
        /// `spec.dependsOn` leads back to the bundle; the message names the cycle.
        DEPENDENCY_CYCLE = "DependencyCycle" => Failure;
        // `Healthy`.
        /// Every object of the bundle is healthy.
        HEALTHY = "Healthy" => Success;
        /// Objects are not healthy yet and the health timeout has not passed; the message
        /// names them.
        PROGRESSING = "Progressing" => Progress;
        /// An object failed (a Job), or objects were not healthy within the health timeout; the
        /// message names each with its status.
        HEALTH_CHECK_FAILED = "HealthCheckFailed" => Failure;

        // `Drifted` (`spec.drift: Report`).
        /// Live objects differ from what the bundle applied; the message lists them and their
        /// fields. Reported, not repaired.
        DRIFT_DETECTED = "DriftDetected" => Failure;
        /// Every live object holds what the bundle applied.
        NO_DRIFT = "NoDrift" => Success;

        // Any step.
        /// A request to the Kubernetes API failed; the message names the step and the API
        /// server's error. Retried.
        API_FAILED = "APIFailed" => Failure;

        // Events only.
        /// A patch of `spec.patches` selects no object of the content (a Warning Event, never a
        /// condition): the install goes on without it, as in Flux; the message names the
        /// patch and its target.
        PATCH_UNMATCHED = "PatchUnmatched" => Success;

        // Deletion.
        /// The bundle's objects and stored content were removed (an Event).
        UNINSTALLED = "Uninstalled" => Success;
        /// Deletion was requested and objects of the bundle are still there (finalizers, a
        /// CRD whose custom resources are cleaned up); the message names them.
        UNINSTALLING = "Uninstalling" => Progress;
        /// An object of the bundle could not be removed; the message names it.
        UNINSTALL_FAILED = "UninstallFailed" => Failure;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_is_listed_once_with_its_kind() {
        let mut seen = std::collections::HashSet::new();
        for (reason, _) in reasons::ALL {
            assert!(seen.insert(*reason), "{reason} is listed twice");
        }
        assert_eq!(ReasonKind::of(reasons::INSTALLING), ReasonKind::Progress);
        assert_eq!(ReasonKind::of(reasons::DENIED), ReasonKind::Failure);
        assert_eq!(ReasonKind::of(reasons::UNINSTALLED), ReasonKind::Success);
        assert_eq!(ReasonKind::of("SomethingNew"), ReasonKind::Failure);
    }
}
