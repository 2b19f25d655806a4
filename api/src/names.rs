//! Names shared by the API, the controller, the plugin and the docs.

/// The API group of Gantry's resources.
pub const GROUP: &str = "gantry.dev";
/// The API version of Gantry's resources.
pub const VERSION: &str = "v1alpha1";

/// The provisioner ID of Gantry's plain+v0 provisioner (`ProvisionerClass.spec.provisioner`).
pub const PLAIN_PROVISIONER: &str = "gantry.dev/plain";

/// The ID of Gantry's built-in OLM `registry+v1` provisioner.
pub const REGISTRY_PROVISIONER: &str = "gantry.dev/registry";

/// Annotation that marks the class serving bundles which name no class (value `"true"`).
pub const DEFAULT_CLASS_ANNOTATION: &str = "gantry.dev/is-default-class";

/// Label put on every object a bundle manages; its value is the bundle's name.
pub const BUNDLE_LABEL: &str = "gantry.dev/bundle";

/// Annotation on a managed object: `disabled` orphans the object instead of deleting it.
pub const PRUNE_ANNOTATION: &str = "gantry.dev/prune";
/// Set by `kubectl bundle reconcile --force` to the same value as
/// [`RECONCILE_REQUESTED_ANNOTATION`]: the pass that handles that request corrects drift even
/// with `spec.drift: Report`.
pub const RECONCILE_FORCE_ANNOTATION: &str = "gantry.dev/reconcile-force";
/// The value of [`PRUNE_ANNOTATION`] that orphans an object.
pub const PRUNE_DISABLED: &str = "disabled";

/// Field manager of every server-side apply Gantry sends.
pub const FIELD_MANAGER: &str = "gantry";

/// Finalizer that makes Gantry uninstall a bundle's objects before the bundle goes away.
pub const UNINSTALL_FINALIZER: &str = "gantry.dev/uninstall";

/// Annotation on a Bundle: any new value makes it reconcile at once, skipping its backoff and
/// resolving its tag again; `status.lastHandledReconcileAt` echoes the value handled.
pub const RECONCILE_REQUESTED_ANNOTATION: &str = "gantry.dev/reconcile-requested-at";

/// Annotation on a CRD of a bundle: [`CRD_UPGRADE_UNSAFE_ALLOWED`] applies a change to the CRD
/// in the cluster that would otherwise be refused as unsafe (`UnsafeCRDUpgrade`).
pub const CRD_UPGRADE_ANNOTATION: &str = "gantry.dev/crd-upgrade";
/// The value of [`CRD_UPGRADE_ANNOTATION`] that accepts unsafe changes knowingly.
pub const CRD_UPGRADE_UNSAFE_ALLOWED: &str = "unsafe-allowed";
/// Annotation on a Bundle: the digest (`sha256:...`) whose unsafe CRD changes its owner
/// accepted (`kubectl bundle rollback --allow-unsafe-crd-changes`). Honoured only while the
/// bundle installs that very digest.
pub const CRD_UPGRADE_ALLOWED_ANNOTATION: &str = "gantry.dev/crd-upgrade-allowed";

/// Annotation on an object of a bundle: how Gantry applies it. Absent, it is applied with
/// server-side apply and force, taking every field it sets; the values are
/// [`SSA_MERGE`], [`SSA_IF_NOT_PRESENT`] and [`SSA_IGNORE`].
pub const SSA_ANNOTATION: &str = "gantry.dev/ssa";
/// Applied without force: fields other field managers own stay theirs.
pub const SSA_MERGE: &str = "Merge";
/// Created when absent, never updated.
pub const SSA_IF_NOT_PRESENT: &str = "IfNotPresent";
/// Never applied, repaired, health-checked or deleted.
pub const SSA_IGNORE: &str = "Ignore";

/// Annotation on an object of a bundle: [`FORCE_ENABLED`] deletes and recreates the object when
/// the API server refuses a change of an immutable field.
pub const FORCE_ANNOTATION: &str = "gantry.dev/force";
/// The value of [`FORCE_ANNOTATION`] that recreates the object.
pub const FORCE_ENABLED: &str = "enabled";
/// The value of [`FORCE_ANNOTATION`] that is the same as its absence.
pub const FORCE_DISABLED: &str = "disabled";

/// Label on a shard's own Lease (`--sharding`): the shard (replica identity) it announces.
/// Earlier versions also put it on Bundles, naming their shard; the sharder removes it there.
pub const SHARD_LABEL: &str = "gantry.dev/shard";
/// Label that earlier versions put on a Bundle being moved between shards; the sharder removes
/// it.
pub const DRAIN_LABEL: &str = "gantry.dev/drain";
/// Label on a Bundle: its slot ([`crate::slots::slot_of`] of its name), written once by the
/// sharder. A shard reconciles the bundles of the slots the slot table gives it.
pub const SLOT_LABEL: &str = "gantry.dev/slot";
/// The Lease, in the provisioner's namespace, whose [`SLOT_TABLE_ANNOTATION`] holds the slot
/// table: which shard owns each slot. Written by the sharder only.
pub const SLOT_TABLE_LEASE: &str = "gantry-shard-slots";
/// Annotation of [`SLOT_TABLE_LEASE`]: the slot table as JSON ([`crate::slots::SlotTable`]).
pub const SLOT_TABLE_ANNOTATION: &str = "gantry.dev/slot-table";
/// Annotation of the Lease the leading provisioner holds (`--lease-name`): the `--storage-url`
/// it is configured with, where `kubectl bundle check` asks the storage server's `/readyz` when
/// no Deployment runs it.
pub const STORAGE_URL_ANNOTATION: &str = "gantry.dev/storage-url";
/// Annotation of a shard's Lease: the slots its controllers serve and the slot table's epoch
/// that set reflects (`EPOCH;RANGES`, e.g. `12;0-84,200`).
pub const SERVED_SLOTS_ANNOTATION: &str = "gantry.dev/served-slots";
