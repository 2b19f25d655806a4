//! One error type for the controller; its variants decide the condition, the reason and the
//! metric label of a failure.

use gantry_api::conditions::{reasons, types};

use gantry_image::ImageError;

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("ProvisionerClass {0} does not exist")]
    ClassNotFound(String),

    #[error(
        "the bundle names no class and no ProvisionerClass is annotated gantry.dev/is-default-class=\"true\""
    )]
    NoDefaultClass,

    #[error("ProvisionerClass {class} is invalid: {message}")]
    InvalidClass { class: String, message: String },

    #[error("ProvisionerClass {class} requires images by digest, and {image} names a tag")]
    DigestRequired { class: String, image: String },

    #[error("pull secret {secret}: {message}")]
    PullSecret { secret: String, message: String },

    #[error("pulling {image}: {source}")]
    Pull {
        image: String,
        #[source]
        source: ImageError,
    },

    #[error("invalid bundle {image}: {source}")]
    InvalidBundle {
        image: String,
        #[source]
        source: ImageError,
    },

    #[error("storage server: {0}")]
    Storage(String),

    #[error("namespaced objects carry no namespace and spec.installNamespace is not set: {}", .0.join(", "))]
    NamespaceRequired(Vec<String>),

    #[error("install namespace {0} does not exist and the bundle does not create it")]
    NamespaceNotFound(String),

    #[error("{object} is managed by bundle {owner}")]
    Conflict { object: String, owner: String },

    #[error("CustomResourceDefinition {crd} was not established within {seconds}s")]
    CrdNotEstablished { crd: String, seconds: u64 },

    #[error("applying {object}: {message}")]
    Apply { object: String, message: String },

    #[error("pruning {object}: {message}")]
    Prune { object: String, message: String },

    #[error("uninstalling {object}: {message}")]
    Uninstall { object: String, message: String },

    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl Error {
    /// The condition the failure is reported on.
    pub fn condition_type(&self) -> &'static str {
        match self {
            Error::ClassNotFound(_)
            | Error::NoDefaultClass
            | Error::InvalidClass { .. }
            | Error::DigestRequired { .. }
            | Error::PullSecret { .. }
            | Error::Pull { .. }
            | Error::InvalidBundle { .. }
            | Error::Storage(_) => types::UNPACKED,
            _ => types::INSTALLED,
        }
    }

    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ClassNotFound(_) | Error::NoDefaultClass => reasons::CLASS_NOT_FOUND,
            Error::InvalidClass { .. } => reasons::INVALID_PARAMETERS,
            Error::DigestRequired { .. } => reasons::DIGEST_REQUIRED,
            Error::PullSecret { .. } | Error::Pull { .. } => reasons::PULL_FAILED,
            Error::InvalidBundle { .. } => reasons::INVALID_BUNDLE,
            Error::Storage(_) => reasons::STORAGE_FAILED,
            Error::NamespaceRequired(_) => reasons::NAMESPACE_REQUIRED,
            Error::NamespaceNotFound(_) => reasons::NAMESPACE_NOT_FOUND,
            Error::Conflict { .. } => reasons::CONFLICT,
            Error::CrdNotEstablished { .. } => reasons::CRD_NOT_ESTABLISHED,
            Error::Apply { .. } | Error::Kube(_) => reasons::APPLY_FAILED,
            Error::Prune { .. } => reasons::PRUNE_FAILED,
            Error::Uninstall { .. } => reasons::UNINSTALL_FAILED,
        }
    }

    /// The label of the failure in metrics (the reason: a small, fixed set).
    pub fn metric_label(&self) -> &'static str {
        self.reason()
    }

    /// Classifies an image error: content problems are `InvalidBundle`, the rest `PullFailed`.
    pub fn from_image(image: &str, source: ImageError) -> Self {
        match source {
            ImageError::LimitExceeded { .. }
            | ImageError::InvalidEntry { .. }
            | ImageError::InvalidYaml { .. }
            | ImageError::InvalidObject { .. }
            | ImageError::MissingManifests
            | ImageError::EmptyManifests
            | ImageError::UnsupportedMediaType { .. } => Error::InvalidBundle {
                image: image.to_string(),
                source,
            },
            _ => Error::Pull {
                image: image.to_string(),
                source,
            },
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
