//! Gantry's API: the `Bundle` and `ProvisionerClass` custom resources (group `gantry.dev`,
//! version `v1alpha1`) and the names every part of Gantry shares.
#![forbid(unsafe_code)]

mod bundle;
mod class;
pub mod conditions;
pub mod config;
pub mod crd;
pub mod health;
mod identity;
pub mod ignore;
pub mod images;
mod names;
pub mod patches;
pub mod plugin;
pub mod selector;
pub mod slots;
pub mod storage;
pub mod unpack;

pub use bundle::{
    Approval, ApprovalDecision, Bundle, BundlePhase, BundleSpec, BundleStatus, DeletionPolicy,
    DriftMode, HISTORY_LIMIT, HistoryApproval, HistoryEntry, InstalledSpec, InventoryEntry,
    KindCount, NOT_HEALTHY_LIMIT, NamespacePermissions, NotHealthyObject, ObjectHealth,
    PermissionHighlight, RequestedPermissions, VersionRef,
};
pub use class::{
    ApprovalPolicy, Limits, ProvisionerClass, ProvisionerClassSpec, ProvisionerClassStatus,
    PullMode, SecretReference, Verification, VerificationProvider,
};
pub use config::{ConfigSource, ConfigSourceKind, Rendered};
pub use health::{HealthCheckExpr, HealthPolicy};
pub use identity::ServiceAccountReference;
pub use ignore::IgnoreRule;
pub use images::ImageOverride;
pub use names::*;
pub use patches::BundlePatch;
pub use selector::ObjectSelector;

/// Re-exported so users of the API name one `Condition` type.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
