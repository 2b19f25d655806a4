//! One error type for the controller; a failure carries the [`Step`] it happened in. The
//! variant and the step decide the condition, the reason and the metric label, and whether a
//! retry can help ([`Stall`]).

use gantry_api::conditions::{reasons, types};

use gantry_image::{ImageError, RegistryProtocol};
use gantry_rules::allowed_images::ImageNotAllowed;
use gantry_rules::class_selection::ClassMissing;
use gantry_rules::identity::ServiceAccountRefused;
use gantry_rules::plan::PlanError;

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    ClassMissing(#[from] ClassMissing),

    #[error("ProvisionerClass {class} is invalid: {message}")]
    InvalidClass { class: String, message: String },

    #[error("{0}")]
    InvalidHealthExpression(#[from] gantry_rules::health_rules::InvalidExpression),

    #[error("ProvisionerClass {class} requires images by digest, and {image} names a tag")]
    DigestRequired { class: String, image: String },

    /// `spec.image` is no image reference at all (`/repo:tag`, left by an unset variable): no
    /// registry can answer for it.
    #[error("spec.image {value:?} is not an image reference: {reason}")]
    InvalidImageReference { value: String, reason: String },

    /// `spec.ref` cannot be used: its range or filter does not parse, or `spec.image` names a
    /// tag or digest besides; the message names the field.
    #[error("{0}")]
    VersionRange(String),

    /// `spec.ref`: no tag of the repository is within the range.
    #[error("{0}")]
    NoMatchingVersion(#[from] gantry_rules::version_range::NoMatch),

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

    /// `spec.patches`: a patch does not parse, or cannot be applied to an object it selects.
    #[error("{0}")]
    InvalidPatch(#[from] gantry_api::patches::PatchError),

    #[error("{0}")]
    InvalidIgnoreRule(String),

    #[error("install namespace {0} does not exist and the bundle does not create it")]
    NamespaceNotFound(String),

    #[error("{object} is managed by bundle {owner}")]
    Conflict { object: String, owner: String },

    #[error("CustomResourceDefinition {crd} was not established within {timeout}")]
    CrdNotEstablished {
        crd: String,
        timeout: gantry_rules::duration::GoDuration,
    },

    /// The new content changes CRDs in the cluster unsafely; each finding names the CRD, the
    /// version, the path in the CRD and what changed.
    #[error(
        "unsafe change to CustomResourceDefinition {} (annotate it gantry.dev/crd-upgrade: unsafe-allowed to apply it anyway): {}",
        .crds.join(", "),
        .findings.join("; ")
    )]
    UnsafeCrdUpgrade {
        crds: Vec<String>,
        findings: Vec<String>,
    },

    #[error("applying {object}: {message}")]
    Apply { object: String, message: String },

    /// A Job of a wave of rendered content failed, or did not complete in time (`what` says
    /// which, with the Job's own message): the waves after it are not applied.
    #[error("{job} of wave {wave} {what}; the waves after it are not applied")]
    WaveJobFailed {
        job: String,
        wave: u32,
        what: String,
    },

    /// The API server refuses an object as invalid (HTTP 422), in the dry run before the first
    /// write or in the apply: the object names the file and document, the message the fields.
    #[error("the API server refuses {object} as invalid: {message}")]
    InvalidObject { object: String, message: String },

    /// Objects whose `gantry.dev/ssa` or `gantry.dev/force` has a value Gantry does not know:
    /// each entry names the object, the annotation, the value and the allowed values.
    #[error("{}", .0.join("; "))]
    InvalidObjectPolicy(Vec<String>),

    /// The API server refused a change of immutable fields of an object without
    /// `gantry.dev/force: enabled`.
    #[error(
        "applying {object}: the API server refuses to change its immutable field(s) {}; annotate the object gantry.dev/force: enabled to have Gantry delete and recreate it",
        .fields.join(", ")
    )]
    ImmutableFieldChanged { object: String, fields: Vec<String> },

    #[error("pruning {object}: {message}")]
    Prune { object: String, message: String },

    #[error("uninstalling {object}: {message}")]
    Uninstall { object: String, message: String },

    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    #[error(transparent)]
    ImageNotAllowed(#[from] ImageNotAllowed),

    #[error(transparent)]
    ServiceAccount(#[from] ServiceAccountRefused),

    /// The applying identity may not read or write an object (the API server's Forbidden).
    #[error("{identity} may not apply {object}: {message}")]
    Forbidden {
        object: String,
        identity: String,
        message: String,
    },

    #[error("impersonation: {0}")]
    Impersonation(String),

    /// The configuration is wrong in the spec itself (`spec.config` given to a provisioner
    /// that takes none).
    #[error("{0}")]
    InvalidConfig(String),

    /// A `spec.configFrom` source cannot be read or is not a mapping: retried, and a change of
    /// the source wakes the bundle.
    #[error("{0}")]
    ConfigSource(String),

    /// The class's provisioner plugin cannot be used now (not registered, its CA or identity
    /// wrong, not ready).
    #[error("{0}")]
    ProvisionerNotReady(String),

    /// A call of a provisioner plugin failed in a way a retry may mend (unreachable, `503`,
    /// an answer beyond the limits or not the contract's).
    #[error("{0}")]
    PluginFailed(String),

    /// The provisioner refused the content with this configuration.
    #[error("{provisioner} could not render {image}: {message}")]
    Render {
        provisioner: String,
        image: String,
        message: String,
    },
}

/// The steps of a pass, in order: where a failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Select,
    Suspend,
    Dependencies,
    Identity,
    AllowedImages,
    Resolve,
    Verify,
    Unpack,
    Plan,
    Approve,
    Apply,
    Uninstall,
}

impl Step {
    /// How messages name the step.
    pub fn name(self) -> &'static str {
        match self {
            Step::Select => "selecting the class",
            Step::Suspend => "checking suspension",
            Step::Dependencies => "reading dependencies",
            Step::Identity => "choosing the identity",
            Step::AllowedImages => "checking allowed images",
            Step::Resolve => "resolving the image",
            Step::Verify => "verifying the signature",
            Step::Unpack => "unpacking",
            Step::Plan => "planning",
            Step::Approve => "checking the approval",
            Step::Apply => "applying",
            Step::Uninstall => "uninstalling",
        }
    }

    /// The condition a failure of this step is reported on, when the error itself does not
    /// say.
    pub fn condition(self) -> &'static str {
        match self {
            Step::Select
            | Step::Suspend
            | Step::Dependencies
            | Step::Identity
            | Step::AllowedImages
            | Step::Resolve
            | Step::Verify
            | Step::Unpack => types::UNPACKED,
            Step::Approve => types::APPROVED,
            Step::Plan | Step::Apply | Step::Uninstall => types::INSTALLED,
        }
    }
}

/// A failure and the step it happened in.
#[derive(Debug, thiserror::Error)]
#[error("{}", message(.step, .error))]
pub struct Failure {
    pub step: Step,
    pub error: Error,
}

fn message(step: &Step, error: &Error) -> String {
    match error {
        Error::Kube(_) => format!("{}: {error}", step.name()),
        _ => error.to_string(),
    }
}

impl Failure {
    /// The condition the failure is reported on, and its reason: the error's own where it is
    /// specific, else the step's with `APIFailed`.
    pub fn condition(&self) -> (&'static str, &'static str) {
        match &self.error {
            Error::Kube(_) => (self.step.condition(), reasons::API_FAILED),
            error => error.condition(),
        }
    }
}

/// `.map_err(at(Step::X))`: tags an error (the provisioner's, or a rule's) with its step.
pub fn at<E: Into<Error>>(step: Step) -> impl Fn(E) -> Failure {
    move |error| Failure {
        step,
        error: error.into(),
    }
}

/// A failure no retry can fix until something it depends on changes: on what it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The bundle or its class must change (both are watched).
    Spec,
    /// The bundle, its class, or the digest its tag resolves to must change.
    Digest,
    /// A tag within `spec.ref` must be pushed (the tags are listed again at the resolve
    /// interval), or the bundle or its class must change.
    Tags,
    /// The RBAC of the identity the bundle is applied as, or the class, must change; a change
    /// of RBAC that may concern the identity wakes the bundle, and it is looked at again now
    /// and then.
    Access,
}

impl Stall {
    /// What the `Stalled` message says will bring the bundle back.
    pub fn until(self) -> &'static str {
        match self {
            Stall::Spec => "the bundle or its class changes",
            Stall::Digest => "the bundle, its class or the digest its image resolves to changes",
            Stall::Tags => {
                "a tag within the range is pushed (the tags are listed again at the resolve interval), or the bundle or its class changes"
            }
            Stall::Access => {
                "the RBAC of the identity it is applied as, the bundle or its class changes"
            }
        }
    }
}

impl Error {
    /// Whether a retry can help: `None` when it can (the registry, the API server, a
    /// conflict another bundle may release), else what must change first. Every variant is
    /// listed: a new one must say which it is.
    pub fn stall(&self) -> Option<Stall> {
        match self {
            Error::InvalidClass { .. }
            | Error::InvalidHealthExpression(_)
            | Error::DigestRequired { .. }
            | Error::InvalidImageReference { .. }
            | Error::VersionRange(_)
            | Error::NamespaceRequired(_)
            | Error::ImageNotAllowed(_)
            | Error::InvalidConfig(_)
            | Error::ServiceAccount(_) => Some(Stall::Spec),
            // The content or the configuration must change: the bundle (its spec.config), a
            // source of its configuration (watched), or the digest.
            Error::Render { .. } => Some(Stall::Digest),
            Error::NoMatchingVersion(_) => Some(Stall::Tags),
            Error::InvalidBundle { .. }
            | Error::InvalidBundleReported { .. }
            | Error::UnsafeCrdUpgrade { .. }
            | Error::InvalidObjectPolicy(_)
            | Error::InvalidObject { .. }
            | Error::ImmutableFieldChanged { .. } => Some(Stall::Digest),
            // The patch, or content in which its paths exist, must come: the spec or the
            // digest.
            Error::InvalidPatch(_) => Some(Stall::Digest),
            Error::InvalidIgnoreRule(_) => Some(Stall::Spec),
            Error::Verification {
                source: ImageError::VerificationFailed { .. },
                ..
            } => Some(Stall::Digest),
            Error::Forbidden { .. } => Some(Stall::Access),
            Error::ClassMissing(_)
            | Error::PullSecret { .. }
            | Error::Pull { .. }
            | Error::Storage(_)
            | Error::Verification { .. }
            | Error::VerificationKeys { .. }
            | Error::NodePull { .. }
            | Error::UnpackPod { .. }
            | Error::UnpackPodUnschedulable { .. }
            | Error::NamespaceNotFound(_)
            | Error::Conflict { .. }
            | Error::CrdNotEstablished { .. }
            | Error::Apply { .. }
            | Error::WaveJobFailed { .. }
            | Error::Prune { .. }
            | Error::Uninstall { .. }
            | Error::Kube(_)
            | Error::ConfigSource(_)
            | Error::ProvisionerNotReady(_)
            | Error::PluginFailed(_)
            | Error::Impersonation(_) => None,
        }
    }

    /// The condition the failure is reported on, and its reason. Every variant is listed: a
    /// new one must say where it belongs.
    pub fn condition(&self) -> (&'static str, &'static str) {
        use types::{INSTALLED, UNPACKED};
        match self {
            Error::ClassMissing(_) => (UNPACKED, reasons::CLASS_NOT_FOUND),
            Error::InvalidClass { .. } => (UNPACKED, reasons::INVALID_PARAMETERS),
            Error::InvalidHealthExpression(_) => (UNPACKED, reasons::INVALID_HEALTH_EXPRESSION),
            Error::DigestRequired { .. } => (UNPACKED, reasons::DIGEST_REQUIRED),
            Error::InvalidImageReference { .. } => (UNPACKED, reasons::INVALID_IMAGE_REFERENCE),
            Error::VersionRange(_) | Error::NoMatchingVersion(_) => {
                (UNPACKED, reasons::NO_MATCHING_VERSION)
            }
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
            Error::InvalidPatch(_) => (INSTALLED, reasons::INVALID_PATCH),
            Error::InvalidIgnoreRule(_) => (INSTALLED, reasons::INVALID_IGNORE_RULE),
            Error::Conflict { .. } => (INSTALLED, reasons::CONFLICT),
            Error::CrdNotEstablished { .. } => (INSTALLED, reasons::CRD_NOT_ESTABLISHED),
            Error::UnsafeCrdUpgrade { .. } => (INSTALLED, reasons::UNSAFE_CRD_UPGRADE),
            Error::InvalidObjectPolicy(_) => (INSTALLED, reasons::INVALID_OBJECT_POLICY),
            Error::ImmutableFieldChanged { .. } => (INSTALLED, reasons::IMMUTABLE_FIELD_CHANGED),
            Error::Apply { .. } | Error::Kube(_) => (INSTALLED, reasons::APPLY_FAILED),
            Error::WaveJobFailed { .. } => (INSTALLED, reasons::JOB_FAILED),
            Error::InvalidObject { .. } => (INSTALLED, reasons::INVALID_OBJECT),
            Error::Prune { .. } => (INSTALLED, reasons::PRUNE_FAILED),
            Error::Uninstall { .. } => (INSTALLED, reasons::UNINSTALL_FAILED),
            Error::ImageNotAllowed(_) => (UNPACKED, reasons::IMAGE_NOT_ALLOWED),
            Error::ServiceAccount(ServiceAccountRefused::Required { .. }) => {
                (INSTALLED, reasons::SERVICE_ACCOUNT_REQUIRED)
            }
            Error::ServiceAccount(ServiceAccountRefused::NotAllowed { .. }) => {
                (INSTALLED, reasons::SERVICE_ACCOUNT_NOT_ALLOWED)
            }
            Error::Forbidden { .. } => (INSTALLED, reasons::FORBIDDEN),
            Error::Impersonation(_) => (INSTALLED, reasons::APPLY_FAILED),
            Error::InvalidConfig(_) | Error::ConfigSource(_) => (UNPACKED, reasons::INVALID_CONFIG),
            Error::Render { .. } | Error::PluginFailed(_) => (UNPACKED, reasons::RENDER_FAILED),
            Error::ProvisionerNotReady(_) => (UNPACKED, reasons::PROVISIONER_NOT_READY),
        }
    }

    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        self.condition().1
    }

    /// Classifies an image error: content problems are `InvalidBundle`, the rest `PullFailed`.
    pub fn from_image(image: &str, source: ImageError) -> Self {
        let image = image.to_string();
        if source.is_content_problem() {
            Error::InvalidBundle { image, source }
        } else {
            Error::Pull { image, source }
        }
    }
}

/// A plan's failures are the provisioner's: an object that cannot be planned fails as its
/// apply would.
impl From<PlanError> for Error {
    fn from(error: PlanError) -> Self {
        match error {
            PlanError::Object { object, message } => Error::Apply { object, message },
            PlanError::NamespaceRequired(objects) => Error::NamespaceRequired(objects),
            PlanError::Patch(patch) => Error::InvalidPatch(patch),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error() -> Error {
        Error::Kube(kube::Error::Api(
            kube::core::Status::failure("etcdserver: request timed out", "Timeout")
                .with_code(504)
                .boxed(),
        ))
    }

    #[test]
    fn an_api_failure_is_reported_on_the_condition_of_its_step() {
        for (step, condition) in [
            (Step::Select, types::UNPACKED),
            (Step::Dependencies, types::UNPACKED),
            (Step::Resolve, types::UNPACKED),
            (Step::Approve, types::APPROVED),
            (Step::Apply, types::INSTALLED),
            (Step::Uninstall, types::INSTALLED),
        ] {
            let failure = at(step)(api_error());
            assert_eq!(failure.condition(), (condition, reasons::API_FAILED));
            assert!(
                failure.to_string().starts_with(step.name()),
                "the message names the step: {failure}"
            );
        }
    }

    #[test]
    fn the_rules_failures_keep_their_conditions_and_messages() {
        let cases: [(Error, &str, &str); 5] = [
            (
                ClassMissing::NoDefaultClass.into(),
                reasons::CLASS_NOT_FOUND,
                "the bundle names no class and no ProvisionerClass is annotated gantry.dev/is-default-class=\"true\"",
            ),
            (
                ServiceAccountRefused::Required { class: "c".into() }.into(),
                reasons::SERVICE_ACCOUNT_REQUIRED,
                "the provisioner requires a ServiceAccount (--require-service-account), and neither the bundle nor ProvisionerClass c names one",
            ),
            (
                PlanError::Object {
                    object: "a.yaml document 0".into(),
                    message: "metadata must be a map".into(),
                }
                .into(),
                reasons::APPLY_FAILED,
                "applying a.yaml document 0: metadata must be a map",
            ),
            (
                PlanError::NamespaceRequired(vec!["ConfigMap a".into()]).into(),
                reasons::NAMESPACE_REQUIRED,
                "namespaced objects carry no namespace and spec.installNamespace is not set: ConfigMap a",
            ),
            (
                PlanError::Patch(gantry_api::patches::PatchError::Invalid {
                    index: 2,
                    message: "no operations".into(),
                })
                .into(),
                reasons::INVALID_PATCH,
                "spec.patches[2].patch: no operations",
            ),
        ];
        for (error, reason, message) in cases {
            assert_eq!(error.reason(), reason, "{error}");
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn a_specific_error_keeps_its_own_condition_whatever_the_step() {
        let failure = at(Step::Apply)(Error::Conflict {
            object: "ConfigMap a/b".into(),
            owner: "other".into(),
        });
        assert_eq!(failure.condition(), (types::INSTALLED, reasons::CONFLICT));
        assert_eq!(
            failure.to_string(),
            "ConfigMap a/b is managed by bundle other"
        );
    }

    #[test]
    fn hopeless_failures_stall_and_the_rest_are_retried() {
        let stalled = [
            (
                Error::InvalidClass {
                    class: "c".into(),
                    message: "bad".into(),
                },
                Stall::Spec,
            ),
            (
                Error::ImageNotAllowed(ImageNotAllowed {
                    image: "r/x:1".into(),
                    class: "c".into(),
                    allowed: vec!["r/y".into()],
                }),
                Stall::Spec,
            ),
            (
                Error::NamespaceRequired(vec!["ConfigMap a".into()]),
                Stall::Spec,
            ),
            (
                Error::InvalidBundleReported {
                    image: "r/x:1".into(),
                    message: "no manifests/".into(),
                },
                Stall::Digest,
            ),
            (
                Error::UnsafeCrdUpgrade {
                    crds: vec!["widgets.example.com".into()],
                    findings: vec![
                        "widgets.example.com v1 spec.versions[v1].served: version no longer served"
                            .into(),
                    ],
                },
                Stall::Digest,
            ),
            (
                Error::InvalidObjectPolicy(vec![
                    "ConfigMap a/b (a.yaml document 1): annotation gantry.dev/ssa has the value \"merge\"; allowed values are Merge, IfNotPresent, Ignore".into(),
                ]),
                Stall::Digest,
            ),
            (
                Error::ImmutableFieldChanged {
                    object: "Job.batch a/migrate (job.yaml document 1)".into(),
                    fields: vec!["spec.template".into()],
                },
                Stall::Digest,
            ),
            (
                Error::InvalidPatch(gantry_api::patches::PatchError::Invalid {
                    index: 2,
                    message: "no operations".into(),
                }),
                Stall::Digest,
            ),
            (
                Error::Forbidden {
                    object: "ConfigMap a/b".into(),
                    identity: "ServiceAccount t/d".into(),
                    message: "no".into(),
                },
                Stall::Access,
            ),
            (
                Error::InvalidImageReference {
                    value: "/examples/hello:v1".into(),
                    reason: "repository must be lower-case letters, digits and separators".into(),
                },
                Stall::Spec,
            ),
            (
                Error::InvalidObject {
                    object: "Deployment.apps a/web (web.yaml document 1)".into(),
                    message: "spec.replicas: Invalid value: -1".into(),
                },
                Stall::Digest,
            ),
        ];
        for (error, stall) in stalled {
            assert_eq!(error.stall(), Some(stall), "{error}");
        }
        let retried = [
            api_error(),
            Error::Storage("PUT: 503".into()),
            Error::Conflict {
                object: "ConfigMap a/b".into(),
                owner: "other".into(),
            },
            Error::ClassMissing(ClassMissing::ClassNotFound("c".into())),
            Error::CrdNotEstablished {
                crd: "widgets.example.com".into(),
                timeout: std::time::Duration::from_secs(60).into(),
            },
        ];
        for error in retried {
            assert_eq!(error.stall(), None, "{error}");
        }
    }
}
