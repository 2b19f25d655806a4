//! One error type for the controller; its variants decide the condition, the reason and the
//! metric label of a failure.

use gantry_api::conditions::{reasons, types};

use gantry_image::{ImageError, RegistryProtocol};

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

    #[error("{}", pull_message(.image, .source))]
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

    /// `spec.verify`: the resolved digest carries no valid signature by the class's keys, or
    /// the signatures could not be read.
    #[error("{}", verification_message(.image, .source))]
    Verification {
        image: String,
        #[source]
        source: ImageError,
    },

    /// `spec.verify`: the Secret holding the public keys is missing or holds no usable key.
    #[error("verification keys in secret {secret}: {message}")]
    VerificationKeys { secret: String, message: String },

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

    /// `pullMode: Node`: the unpack Pod stayed unschedulable (the scheduler's message).
    #[error("unpacking {image} on a node: {message}")]
    UnpackPodUnschedulable { image: String, message: String },

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

    #[error("{image} is not allowed by ProvisionerClass {class}: its allowedImages are {}", .allowed.join(", "))]
    ImageNotAllowed {
        image: String,
        class: String,
        allowed: Vec<String>,
    },

    #[error(
        "the provisioner requires a ServiceAccount (--require-service-account), and neither the bundle nor ProvisionerClass {class} names one"
    )]
    ServiceAccountRequired { class: String },

    #[error("spec.serviceAccountName {name} is not allowed by ProvisionerClass {class}: {why}")]
    ServiceAccountNotAllowed {
        name: String,
        class: String,
        why: String,
    },

    /// The applying identity may not read or write an object (the API server's Forbidden).
    #[error("{identity} may not apply {object}: {message}")]
    Forbidden {
        object: String,
        identity: String,
        message: String,
    },

    #[error("impersonation: {0}")]
    Impersonation(String),
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
            Error::UnpackPodUnschedulable { .. } => (UNPACKED, reasons::UNPACK_POD_UNSCHEDULABLE),
            Error::Storage(_) => (UNPACKED, reasons::STORAGE_FAILED),
            Error::Verification { .. } | Error::VerificationKeys { .. } => {
                (UNPACKED, reasons::VERIFICATION_FAILED)
            }
            Error::NamespaceRequired(_) => (INSTALLED, reasons::NAMESPACE_REQUIRED),
            Error::NamespaceNotFound(_) => (INSTALLED, reasons::NAMESPACE_NOT_FOUND),
            Error::Conflict { .. } => (INSTALLED, reasons::CONFLICT),
            Error::CrdNotEstablished { .. } => (INSTALLED, reasons::CRD_NOT_ESTABLISHED),
            Error::Apply { .. } | Error::Kube(_) => (INSTALLED, reasons::APPLY_FAILED),
            Error::Prune { .. } => (INSTALLED, reasons::PRUNE_FAILED),
            Error::Uninstall { .. } => (INSTALLED, reasons::UNINSTALL_FAILED),
            Error::ImageNotAllowed { .. } => (UNPACKED, reasons::IMAGE_NOT_ALLOWED),
            Error::ServiceAccountRequired { .. } => (INSTALLED, reasons::SERVICE_ACCOUNT_REQUIRED),
            Error::ServiceAccountNotAllowed { .. } => {
                (INSTALLED, reasons::SERVICE_ACCOUNT_NOT_ALLOWED)
            }
            Error::Forbidden { .. } => (INSTALLED, reasons::FORBIDDEN),
            Error::Impersonation(_) => (INSTALLED, reasons::APPLY_FAILED),
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
            | ImageError::ProtocolMismatch { .. }
            | ImageError::Config(_)
            | ImageError::DockerConfig { .. }
            | ImageError::VerificationFailed { .. }
            | ImageError::InvalidPublicKey { .. }
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

/// A failed verification names the image itself; other errors (the registry's) get it added.
fn verification_message(image: &str, source: &ImageError) -> String {
    match source {
        ImageError::VerificationFailed { .. } => source.to_string(),
        other if other.reference().is_some() => {
            format!("verifying the signature of {other}{}", registry_fix(other))
        }
        other => format!("verifying the signature of {image}: {other}"),
    }
}

/// "pulling REFERENCE: what failed", the reference said once: the one the registry error
/// names (the most precise, a digest once resolved), else the bundle's.
fn pull_message(image: &str, source: &ImageError) -> String {
    match source {
        ImageError::InvalidReference { .. } => source.to_string(),
        source if source.reference().is_some() => {
            format!("pulling {source}{}", registry_fix(source))
        }
        source => format!("pulling {image}: {source}"),
    }
}

/// What to change in the class when the registry speaks the other protocol.
fn registry_fix(source: &ImageError) -> String {
    match source {
        ImageError::ProtocolMismatch {
            registry, speaks, ..
        } => match speaks {
            RegistryProtocol::PlainHttp => {
                format!(": add {registry} to the class's insecureRegistries")
            }
            RegistryProtocol::Tls => format!(
                ": remove {registry} from the class's insecureRegistries (and name its CA in registryCASecret if a private one signed its certificate)"
            ),
        },
        _ => String::new(),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
