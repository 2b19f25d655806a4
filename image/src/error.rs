//! Errors of the image side: each variant names the thing at fault so that a user can act on it.

use std::fmt;

/// Everything that can go wrong while pulling, unpacking, validating or pushing a bundle image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },

    #[error("{reference}: repository or tag not found ({detail})")]
    NotFound { reference: String, detail: String },

    #[error("{reference}: authentication refused by registry {registry} ({detail})")]
    AuthRefused {
        reference: String,
        registry: String,
        detail: String,
    },

    #[error("{reference}: image index has no manifest for platform {wanted}; it has: {}", list_or_none(.available))]
    PlatformNotFound {
        reference: String,
        wanted: String,
        available: Vec<String>,
    },

    #[error("{what}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },

    /// A blob (layer, config, manifest or index) whose length differs from the size its
    /// descriptor declares. Reading stops one byte past the declared size.
    #[error(
        "{what}: size mismatch: its descriptor declares {declared} bytes, the registry sent {actual}"
    )]
    SizeMismatch {
        what: String,
        digest: String,
        declared: u64,
        actual: BlobSize,
    },

    #[error("limit {limit} ({value}) exceeded by {culprit}")]
    LimitExceeded {
        limit: LimitKind,
        value: u64,
        culprit: String,
    },

    #[error("invalid entry {path:?}: {reason}")]
    InvalidEntry { path: String, reason: String },

    #[error("invalid YAML in {file}{}: {message}", line_suffix(*.line))]
    InvalidYaml {
        file: String,
        line: Option<u64>,
        message: String,
    },

    #[error("invalid object in {file}, document {document}{}: {reason}", object_suffix(.object))]
    InvalidObject {
        file: String,
        /// Index (from 0) of the document among the file's non-empty documents.
        document: usize,
        /// `Kind name` or `Kind namespace/name`, when the object got that far.
        object: Option<String>,
        reason: String,
    },

    #[error("bundle has no manifests/ directory")]
    MissingManifests,

    #[error("manifests/ holds no objects")]
    EmptyManifests,

    #[error("{what}: unsupported media type {media_type}")]
    UnsupportedMediaType { what: String, media_type: String },

    #[error("{reference}: invalid manifest: {reason}")]
    InvalidManifest { reference: String, reason: String },

    #[error("{reference}: registry request failed: {detail}")]
    Registry { reference: String, detail: String },

    /// The registry was reached over TLS and answered in plain HTTP, or the reverse. The
    /// consumer names the fix (a flag, a class's `insecureRegistries`).
    #[error("{reference}: the registry {registry} speaks {speaks}, not {}", .speaks.other())]
    ProtocolMismatch {
        reference: String,
        /// `host[:port]`, as registry lists name it.
        registry: String,
        /// What the registry answered in.
        speaks: RegistryProtocol,
    },

    #[error("{image}: no valid cosign signature by any of the keys {}: {detail}", .keys.join(", "))]
    VerificationFailed {
        /// `registry/repository@sha256:...`
        image: String,
        /// The names of the keys tried.
        keys: Vec<String>,
        detail: String,
    },

    #[error("public key {key}: {reason}")]
    InvalidPublicKey { key: String, reason: String },

    #[error("invalid registry configuration: {0}")]
    Config(String),

    #[error("invalid docker config {source_name}: {reason}")]
    DockerConfig { source_name: String, reason: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The protocol a registry is reached with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryProtocol {
    PlainHttp,
    Tls,
}

impl RegistryProtocol {
    /// The protocol this one is mistaken for.
    pub fn other(self) -> RegistryProtocol {
        match self {
            RegistryProtocol::PlainHttp => RegistryProtocol::Tls,
            RegistryProtocol::Tls => RegistryProtocol::PlainHttp,
        }
    }
}

impl fmt::Display for RegistryProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegistryProtocol::PlainHttp => "plain HTTP",
            RegistryProtocol::Tls => "TLS",
        })
    }
}

/// How long a blob turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobSize {
    /// Exactly this many bytes (the whole blob was seen, or the registry announced its length).
    Exactly(u64),
    /// More than this many bytes: reading stopped there.
    MoreThan(u64),
}

impl fmt::Display for BlobSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobSize::Exactly(n) => write!(f, "{n} bytes"),
            BlobSize::MoreThan(n) => write!(f, "more than {n} bytes"),
        }
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "no platform entries".to_string()
    } else {
        items.join(", ")
    }
}

fn line_suffix(line: Option<u64>) -> String {
    match line {
        Some(line) => format!(" at line {line}"),
        None => String::new(),
    }
}

fn object_suffix(object: &Option<String>) -> String {
    object
        .as_ref()
        .map(|object| format!(" ({object})"))
        .unwrap_or_default()
}

impl ImageError {
    /// Whether the image's content is at fault (the bundle format or a limit), rather than
    /// reaching, reading or verifying the image. Every variant is listed, so a new one must say
    /// which it is.
    pub fn is_content_problem(&self) -> bool {
        match self {
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
        }
    }

    /// The image reference this error's message starts with, for the errors about one image:
    /// whoever adds the image to the message can leave it out instead of repeating it.
    pub fn reference(&self) -> Option<&str> {
        match self {
            ImageError::NotFound { reference, .. }
            | ImageError::AuthRefused { reference, .. }
            | ImageError::PlatformNotFound { reference, .. }
            | ImageError::InvalidManifest { reference, .. }
            | ImageError::Registry { reference, .. }
            | ImageError::ProtocolMismatch { reference, .. } => Some(reference),
            ImageError::VerificationFailed { image, .. } => Some(image),
            _ => None,
        }
    }

    /// Wraps an I/O error; an [`ImageError`] carried inside it (from the readers of this module)
    /// is returned as it is, so limit and digest errors keep their type through `Read` chains.
    pub fn from_io(context: impl fmt::Display, error: std::io::Error) -> ImageError {
        if error
            .get_ref()
            .is_some_and(|inner| inner.is::<ImageError>())
        {
            if let Some(inner) = error.into_inner() {
                match inner.downcast::<ImageError>() {
                    Ok(image_error) => return *image_error,
                    Err(other) => {
                        return ImageError::Io {
                            context: context.to_string(),
                            source: std::io::Error::other(other),
                        };
                    }
                }
            }
            // `get_ref` was Some, so `into_inner` is Some too; keep a sensible fallback anyway.
            return ImageError::Io {
                context: context.to_string(),
                source: std::io::Error::other("unknown error"),
            };
        }
        ImageError::Io {
            context: context.to_string(),
            source: error,
        }
    }

    /// Packs this error into an `io::Error` so it can cross a `Read` implementation.
    pub(crate) fn into_io(self) -> std::io::Error {
        std::io::Error::other(self)
    }
}

pub type Result<T, E = ImageError> = std::result::Result<T, E>;

/// Which limit of `spec.limits` was hit; displayed with the field's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    CompressedBytes,
    UncompressedBytes,
    Files,
    FileBytes,
    Objects,
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitKind::CompressedBytes => "maxCompressedBytes",
            LimitKind::UncompressedBytes => "maxUncompressedBytes",
            LimitKind::Files => "maxFiles",
            LimitKind::FileBytes => "maxFileBytes",
            LimitKind::Objects => "maxObjects",
        })
    }
}
