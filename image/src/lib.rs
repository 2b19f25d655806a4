#![forbid(unsafe_code)]

//! The image side of Gantry: pulling `plain+v0` bundle images from OCI registries (tag or
//! digest, multi-platform indexes, docker config credentials, TLS with extra CAs), streaming
//! and verifying their layers under limits, validating the manifests they hold, writing the
//! canonical tarball, pushing bundles as images, and verifying cosign signatures.

pub mod auth;
pub mod canonical;
pub mod client;
pub mod copy;
pub mod dir;
pub mod error;
pub mod fetch;
pub mod layer;
pub mod limits;
pub mod objects;
pub mod paths;
pub mod platform;
pub mod pull;
pub mod push;
pub mod reference;
pub mod tags;
pub mod verify;

pub use auth::{Credential, DockerConfig};
pub use canonical::{
    CanonicalDigest, read_canonical, write_canonical, write_canonical_file,
    write_canonical_file_objects, write_canonical_objects,
};
pub use client::{RegistryClient, RegistryOptions, ResolvedReference, parse_reference, pinned};
pub use copy::{CopiedImage, CopyStats, RawManifest};
pub use dir::canonical_from_root;
pub use error::{BlobSize, ImageError, LimitKind, RegistryProtocol};
pub use fetch::{FetchedArtifact, FetchedLayer};
pub use layer::{BundleFiles, StoredFile};
pub use limits::{EffectiveLimits, MAX_DEPTH, PARSE_STACK_BYTES, on_parse_stack};
pub use objects::{
    BundleObject, ObjectSummary, is_list, parse_file, parse_mapping, validate_files,
};
pub use oci_client::Reference;
pub use platform::Platform;
pub use pull::{
    CanonicalTarball, PullRequest, PullStats, PulledBundle, PulledImage, write_rendered_tarball,
};
pub use push::{PreparedBundle, PushStats, PushedImage, prepare_dir};
pub use tags::{MAX_TAG_BYTES, MAX_TAGS, TagListing};
pub use verify::{PublicKey, SignatureSource, VerifiedSignature};
