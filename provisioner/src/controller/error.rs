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

    /// `pullMode: Node`: the kubelet could not pull the image (its reason and message).
    #[error("pulling {image}: {message}")]
    NodePull { image: String, message: String },

    /// `pullMode: Node`: the unpack program refused the content, with the same text as a
    /// direct pull's [`Error::InvalidBundle`].
    #[error("invalid bundle {image}: {message}")]
    InvalidBundleReported { image: String, message: String },

    /// `pullMode: Node`: the unpack Pod was not scheduled, did not finish or failed otherwise.
    #[error("unpacking {image} on a node: {message}")]
    UnpackPod { image: String, message: String },

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
    /// The condition the failure is reported on, and its reason. Every variant is listed: a
    /// new one must say where it belongs.
    pub fn condition(&self) -> (&'static str, &'static str) {
        use types::{INSTALLED, UNPACKED};
        match self {
            Error::ClassNotFound(_) | Error::NoDefaultClass => (UNPACKED, reasons::CLASS_NOT_FOUND),
            Error::InvalidClass { .. } => (UNPACKED, reasons::INVALID_PARAMETERS),
            Error::DigestRequired { .. } => (UNPACKED, reasons::DIGEST_REQUIRED),
            Error::PullSecret { .. } | Error::Pull { .. } | Error::NodePull { .. } => {
                (UNPACKED, reasons::PULL_FAILED)
            }
            Error::InvalidBundle { .. } | Error::InvalidBundleReported { .. } => {
                (UNPACKED, reasons::INVALID_BUNDLE)
            }
            Error::UnpackPod { .. } => (UNPACKED, reasons::UNPACK_POD_FAILED),
            Error::Storage(_) => (UNPACKED, reasons::STORAGE_FAILED),
            Error::NamespaceRequired(_) => (INSTALLED, reasons::NAMESPACE_REQUIRED),
            Error::NamespaceNotFound(_) => (INSTALLED, reasons::NAMESPACE_NOT_FOUND),
            Error::Conflict { .. } => (INSTALLED, reasons::CONFLICT),
            Error::CrdNotEstablished { .. } => (INSTALLED, reasons::CRD_NOT_ESTABLISHED),
            Error::Apply { .. } | Error::Kube(_) => (INSTALLED, reasons::APPLY_FAILED),
            Error::Prune { .. } => (INSTALLED, reasons::PRUNE_FAILED),
            Error::Uninstall { .. } => (INSTALLED, reasons::UNINSTALL_FAILED),
        }
    }

    /// The condition the failure is reported on.
    pub fn condition_type(&self) -> &'static str {
        self.condition().0
    }

    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        self.condition().1
    }

    /// The label of the failure in metrics (the reason: a small, fixed set).
    pub fn metric_label(&self) -> &'static str {
        self.reason()
    }

    /// Classifies an image error: content problems are `InvalidBundle`, the rest `PullFailed`.
    /// Every variant is listed, so a new one must say which it is.
    pub fn from_image(image: &str, source: ImageError) -> Self {
        let content_problem = match &source {
            ImageError::LimitExceeded { .. }
            | ImageError::InvalidEntry { .. }
            | ImageError::InvalidYaml { .. }
            | ImageError::InvalidObject { .. }
            | ImageError::MissingManifests
            | ImageError::EmptyManifests
            | ImageError::UnsupportedMediaType { .. } => true,
            ImageError::InvalidReference { .. }
            | ImageError::NotFound { .. }
            | ImageError::AuthRefused { .. }
            | ImageError::PlatformNotFound { .. }
            | ImageError::DigestMismatch { .. }
            | ImageError::SizeMismatch { .. }
            | ImageError::InvalidManifest { .. }
            | ImageError::Registry { .. }
            | ImageError::Config(_)
            | ImageError::DockerConfig { .. }
            | ImageError::Io { .. } => false,
        };
        let image = image.to_string();
        if content_problem {
            Error::InvalidBundle { image, source }
        } else {
            Error::Pull { image, source }
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
