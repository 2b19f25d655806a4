//! The unpack Pod: its spec (Pod Security `restricted`), and what its status says.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use gantry_api::Bundle;
use gantry_image::{EffectiveLimits, Platform};
use gantry_rules::conditions::ConditionStatus;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::Resource;
use serde_json::json;

pub use gantry_api::unpack::{APP_LABEL, BUNDLE_ANNOTATION};
use gantry_api::unpack::{EXIT_INVALID_BUNDLE, UnpackReport};
/// Name of the container running the bundle image.
pub const UNPACK_CONTAINER: &str = "unpack";
/// Where the program is copied to, in the emptyDir shared by both containers.
const WORK_DIR: &str = "/gantry-unpack";
const PROGRAM: &str = "/gantry-unpack/gantry-unpack";
/// The program's path in the provisioner's image.
const SHIPPED_PROGRAM: &str = "/usr/local/bin/gantry-unpack";
const TOKEN_DIR: &str = "/var/run/secrets/gantry/storage";
/// The audience the storage server accepts tokens for.
const STORAGE_AUDIENCE: &str = "gantry-storage";
/// Waiting reasons of the kubelet that mean the image cannot be pulled.
const PULL_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "SignatureValidationFailed",
];
/// Waiting reasons that mean the container cannot start.
const START_REASONS: &[&str] = &[
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "PreCreateHookError",
    "PreStartHookError",
];

/// Memory of an unpack Pod beyond what its bundle's files take: the program, its runtime, the
/// HTTP client.
const BASE_MEMORY: u64 = 128 << 20;
/// Bytes of memory per byte of `maxUncompressedBytes`: the program holds the files and their
/// parsed objects while it validates them, as a direct pull does. Measured peaks: 1.7× the
/// YAML for large values, 15.7× for manifests made of many tiny fields (the worst case).
const MEMORY_PER_BYTE: u64 = 16;
/// Space in the Pod's emptyDir beyond the canonical tarball: the program itself.
const BASE_SCRATCH: u64 = 128 << 20;

/// The memory limit of an unpack Pod for the class's limits: never below what
/// `maxUncompressedBytes` lets a bundle hold in memory while it is validated, so a bundle a
/// direct pull accepts is not killed for memory in `Node` mode.
pub fn memory_limit(limits: &EffectiveLimits) -> u64 {
    BASE_MEMORY.saturating_add(
        limits
            .max_uncompressed_bytes
            .saturating_mul(MEMORY_PER_BYTE),
    )
}

/// The size limit of the Pod's emptyDir: the program, and a canonical tarball of up to
/// `maxUncompressedBytes` of files (gzip never grows data by more than a small fraction; each
/// file adds a tar header and padding).
pub fn scratch_limit(limits: &EffectiveLimits) -> u64 {
    BASE_SCRATCH
        .saturating_add(limits.max_uncompressed_bytes.saturating_mul(101) / 100)
        .saturating_add(limits.max_files.saturating_mul(1024))
}

/// What an unpack Pod is made of.
#[derive(Clone, Debug)]
pub struct PodInputs<'a> {
    pub namespace: &'a str,
    pub bundle: &'a str,
    /// The Bundle's uid: the Pod is owned by the Bundle, so the garbage collector removes it
    /// with the Bundle even when no provisioner is there to.
    pub bundle_uid: Option<&'a str>,
    /// The bundle's image reference, as the bundle names it.
    pub image: &'a str,
    pub unpack_image: &'a str,
    pub unpack_image_pull_policy: Option<&'a str>,
    pub pull_secrets: Vec<String>,
    /// Steers the Pod to nodes of this OS and architecture.
    pub platform: Option<&'a Platform>,
    pub limits: EffectiveLimits,
    pub storage_url: &'a str,
    pub service_account: &'a str,
    pub deadline_seconds: i64,
}

/// The Pod's name: the bundle's, and a hash of what is pulled for it.
pub fn pod_name(bundle: &str, image: &str, uid: Option<&str>) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (bundle, image, uid).hash(&mut hasher);
    let short: String = bundle.chars().take(200).collect();
    format!(
        "unpack-{}-{:08x}",
        short.trim_end_matches(['-', '.']),
        hasher.finish() as u32
    )
}

/// The unpack Pod.
pub fn unpack_pod(name: &str, inputs: &PodInputs<'_>) -> Result<Pod, serde_json::Error> {
    let limits = &inputs.limits;
    let mut node_selector = BTreeMap::new();
    if let Some(platform) = inputs.platform {
        node_selector.insert("kubernetes.io/os", platform.os.clone());
        node_selector.insert("kubernetes.io/arch", platform.architecture.clone());
    }
    // A digest is pulled once per node; a tag is checked against the registry every time.
    let pull_policy = if inputs.image.contains("@sha256:") {
        "IfNotPresent"
    } else {
        "Always"
    };
    let secrets: Vec<_> = inputs
        .pull_secrets
        .iter()
        .map(|name| json!({ "name": name }))
        .collect();
    let restricted = json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": { "drop": ["ALL"] },
        "seccompProfile": { "type": "RuntimeDefault" },
    });
    // The limit follows the class's limits; the request stays small, as most bundles are.
    let resources = json!({
        "requests": { "cpu": "50m", "memory": "64Mi" },
        "limits": { "cpu": "1", "memory": memory_limit(limits).to_string() },
    });
    let copy_resources = json!({
        "requests": { "cpu": "50m", "memory": "64Mi" },
        "limits": { "cpu": "1", "memory": "128Mi" },
    });
    let mut init = json!({
        "name": "install",
        "image": inputs.unpack_image,
        "command": [SHIPPED_PROGRAM, "install", PROGRAM],
        "securityContext": restricted,
        "resources": copy_resources,
        "volumeMounts": [{ "name": "work", "mountPath": WORK_DIR }],
    });
    if let Some(policy) = inputs.unpack_image_pull_policy {
        init["imagePullPolicy"] = json!(policy);
    }
    // A namespaced dependent of a cluster-scoped owner is allowed. No `blockOwnerDeletion`:
    // the Bundle's deletion never waits for its unpack Pod.
    let owners: Vec<_> = inputs
        .bundle_uid
        .map(|uid| {
            json!({
                "apiVersion": Bundle::api_version(&()),
                "kind": Bundle::kind(&()),
                "name": inputs.bundle,
                "uid": uid,
            })
        })
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": inputs.namespace,
            "labels": { APP_LABEL.0: APP_LABEL.1, "app.kubernetes.io/part-of": "gantry" },
            "annotations": { BUNDLE_ANNOTATION: inputs.bundle },
            "ownerReferences": owners,
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": inputs.service_account,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "activeDeadlineSeconds": inputs.deadline_seconds,
            "nodeSelector": node_selector,
            "imagePullSecrets": secrets,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": { "type": "RuntimeDefault" },
            },
            "initContainers": [init],
            "containers": [{
                "name": UNPACK_CONTAINER,
                "image": inputs.image,
                "imagePullPolicy": pull_policy,
                "command": [
                    PROGRAM, "run",
                    "--bundle", inputs.bundle,
                    "--storage-url", inputs.storage_url,
                    "--storage-token-file", format!("{TOKEN_DIR}/token"),
                    "--scratch-dir", WORK_DIR,
                    "--max-compressed-bytes", limits.max_compressed_bytes.to_string(),
                    "--max-uncompressed-bytes", limits.max_uncompressed_bytes.to_string(),
                    "--max-files", limits.max_files.to_string(),
                    "--max-file-bytes", limits.max_file_bytes.to_string(),
                    "--max-objects", limits.max_objects.to_string(),
                ],
                "terminationMessagePolicy": "File",
                "securityContext": restricted,
                "resources": resources,
                "volumeMounts": [
                    { "name": "work", "mountPath": WORK_DIR },
                    { "name": "storage-token", "mountPath": TOKEN_DIR, "readOnly": true },
                ],
            }],
            "volumes": [
                { "name": "work", "emptyDir": { "sizeLimit": scratch_limit(limits).to_string() } },
                { "name": "storage-token", "projected": { "sources": [{
                    "serviceAccountToken": {
                        "audience": STORAGE_AUDIENCE,
                        "expirationSeconds": 3600,
                        "path": "token",
                    },
                }] } },
            ],
        },
    }))
}

/// Why an unpack Pod failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodFailure {
    /// The kubelet could not pull an image: its reason and message.
    Pull(String),
    /// The content is invalid: the program's message, and the runtime's `imageID` of what it
    /// read (so the failure names the digest, as a direct pull's does).
    InvalidBundle { message: String, image_id: String },
    /// Anything else.
    Unpack(String),
}

/// Where an unpack Pod is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not finished (maybe not scheduled: the message says why).
    Waiting {
        unschedulable: Option<String>,
    },
    Succeeded {
        report: UnpackReport,
        /// The runtime's `imageID` of the bundle image.
        image_id: String,
    },
    Failed(PodFailure),
}

/// Reads an unpack Pod's status.
pub fn state(pod: &Pod) -> PodState {
    let Some(status) = &pod.status else {
        return PodState::Waiting {
            unschedulable: None,
        };
    };
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for container in all {
        if let Some(failure) = waiting_failure(container) {
            return PodState::Failed(failure);
        }
    }
    let main = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == UNPACK_CONTAINER);
    let program_done = main
        .and_then(|m| m.state.as_ref()?.terminated.as_ref())
        .is_some_and(|done| done.exit_code == 0 || done.exit_code == EXIT_INVALID_BUNDLE);
    // The kubelet stopped the Pod (its deadline, an eviction): its reason says why, not the
    // exit code of the containers it killed.
    if status.phase.as_deref() == Some("Failed")
        && let Some(reason) = status.reason.as_deref()
        && !program_done
    {
        let message = status.message.as_deref().unwrap_or_default().trim();
        return PodState::Failed(PodFailure::Unpack(match reason {
            "DeadlineExceeded" => format!(
                "{reason}: {message} (the unpack deadline, activeDeadlineSeconds {})",
                pod.spec
                    .as_ref()
                    .and_then(|s| s.active_deadline_seconds)
                    .unwrap_or_default()
            ),
            _ => format!("{reason}: {message}"),
        }));
    }
    for init in status.init_container_statuses.iter().flatten() {
        if let Some(done) = init.state.as_ref().and_then(|s| s.terminated.as_ref())
            && done.exit_code != 0
        {
            return PodState::Failed(PodFailure::Unpack(format!(
                "copying the unpack program failed (exit code {}): {}",
                done.exit_code,
                done.message.as_deref().unwrap_or_default().trim()
            )));
        }
    }
    if let Some(main) = main
        && let Some(done) = main.state.as_ref().and_then(|s| s.terminated.as_ref())
    {
        let message = done
            .message
            .as_deref()
            .unwrap_or_default()
            .trim()
            .to_string();
        return match done.exit_code {
            0 => match serde_json::from_str::<UnpackReport>(&message) {
                Ok(report) => PodState::Succeeded {
                    report,
                    image_id: main.image_id.clone(),
                },
                Err(e) => PodState::Failed(PodFailure::Unpack(format!(
                    "the unpack program's report {message:?} is not readable: {e}"
                ))),
            },
            EXIT_INVALID_BUNDLE => PodState::Failed(PodFailure::InvalidBundle {
                message,
                image_id: main.image_id.clone(),
            }),
            code => PodState::Failed(PodFailure::Unpack(format!(
                "the unpack program failed (exit code {code}{}): {message}",
                done.reason
                    .as_deref()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default()
            ))),
        };
    }
    if status.phase.as_deref() == Some("Failed") {
        return PodState::Failed(PodFailure::Unpack(format!(
            "{}: {}",
            status.reason.as_deref().unwrap_or("Failed"),
            status.message.as_deref().unwrap_or_default()
        )));
    }
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == ConditionStatus::False)
        .map(|c| c.message.clone().unwrap_or_else(|| "not scheduled".into()));
    PodState::Waiting { unschedulable }
}

fn waiting_failure(container: &ContainerStatus) -> Option<PodFailure> {
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    let text = format!(
        "{reason}: {}",
        waiting.message.as_deref().unwrap_or_default().trim()
    );
    if PULL_REASONS.contains(&reason) {
        Some(PodFailure::Pull(text))
    } else if START_REASONS.contains(&reason) {
        Some(PodFailure::Unpack(format!(
            "container {} did not start: {text}",
            container.name
        )))
    } else {
        None
    }
}

/// The digest the runtime pulled, from an `imageID` (`repo@sha256:…`).
pub fn runtime_digest(image_id: &str) -> Option<&str> {
    let (_, digest) = image_id.rsplit_once('@')?;
    digest.starts_with("sha256:").then_some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(platform: Option<&'a Platform>) -> PodInputs<'a> {
        PodInputs {
            namespace: "gantry-system",
            bundle: "web",
            bundle_uid: Some("0b1c"),
            image: "registry.test/web:v1",
            unpack_image: "gantry/provisioner:0.1.0",
            unpack_image_pull_policy: Some("IfNotPresent"),
            pull_secrets: vec!["team".into()],
            platform,
            limits: EffectiveLimits::default(),
            storage_url: "http://storage:8080",
            service_account: "gantry-unpack",
            deadline_seconds: 300,
        }
    }

    fn pod_with(status: serde_json::Value) -> Pod {
        let mut pod = unpack_pod("p", &inputs(None)).unwrap();
        pod.status = Some(serde_json::from_value(status).unwrap());
        pod
    }

    #[test]
    fn the_pod_is_restricted_and_steered_to_the_platform() {
        let platform: Platform = "linux/arm64".parse().unwrap();
        let pod = unpack_pod("p", &inputs(Some(&platform))).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.active_deadline_seconds, Some(300));
        let selector = spec.node_selector.unwrap();
        assert_eq!(selector["kubernetes.io/arch"], "arm64");
        assert_eq!(selector["kubernetes.io/os"], "linux");
        assert_eq!(spec.image_pull_secrets.unwrap()[0].name, "team");
        let containers = spec
            .init_containers
            .unwrap()
            .into_iter()
            .chain(spec.containers);
        for container in containers {
            let security = container.security_context.unwrap();
            assert_eq!(security.allow_privilege_escalation, Some(false));
            assert_eq!(security.read_only_root_filesystem, Some(true));
            assert_eq!(security.run_as_non_root, Some(true));
            assert_eq!(security.capabilities.unwrap().drop.unwrap(), vec!["ALL"]);
            assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
            let resources = container.resources.unwrap();
            assert!(resources.limits.is_some() && resources.requests.is_some());
        }
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Bundle", "0b1c")
        );
        assert_eq!(owner.block_owner_deletion, None);
    }

    #[test]
    fn memory_and_scratch_follow_the_class_limits() {
        let quantity = |pod: &Pod, container: usize| {
            pod.spec.as_ref().unwrap().containers[container]
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()["memory"]
                .0
                .clone()
        };
        let default = unpack_pod("p", &inputs(None)).unwrap();
        // 1 GiB of files by default: never the fixed 512Mi that would kill a large bundle.
        let gib = EffectiveLimits::DEFAULT_MAX_UNCOMPRESSED_BYTES;
        assert_eq!(quantity(&default, 0), (BASE_MEMORY + 16 * gib).to_string());
        let small = PodInputs {
            limits: EffectiveLimits {
                max_uncompressed_bytes: 16 << 20,
                ..EffectiveLimits::default()
            },
            ..inputs(None)
        };
        let pod = unpack_pod("p", &small).unwrap();
        assert_eq!(quantity(&pod, 0), (BASE_MEMORY + (256 << 20)).to_string());
        let volumes = pod.spec.unwrap().volumes.unwrap();
        let scratch = volumes[0].empty_dir.as_ref().unwrap().size_limit.clone();
        assert!(
            scratch.unwrap().0.parse::<u64>().unwrap() > (16 << 20) + BASE_SCRATCH,
            "the emptyDir holds the program and the canonical tarball"
        );
    }

    #[test]
    fn the_only_token_is_the_projected_storage_token() {
        let spec = unpack_pod("p", &inputs(None)).unwrap().spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        let tokens: Vec<_> = spec
            .volumes
            .unwrap()
            .into_iter()
            .filter_map(|v| v.projected)
            .flat_map(|p| p.sources.unwrap_or_default())
            .filter_map(|s| s.service_account_token)
            .collect();
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens[0].audience.as_deref(), Some(STORAGE_AUDIENCE));
    }

    #[test]
    fn a_pod_stopped_at_its_deadline_says_so() {
        // The kubelet kills the containers (137) and marks the Pod DeadlineExceeded.
        let pod = pod_with(json!({
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline",
            "containerStatuses": [{
                "name": "unpack", "image": "x", "imageID": "r/x@sha256:ab", "ready": false,
                "restartCount": 0,
                "state": { "terminated": { "exitCode": 137, "reason": "Error" } },
            }],
        }));
        let PodState::Failed(PodFailure::Unpack(message)) = state(&pod) else {
            panic!("not a failure: {:?}", state(&pod))
        };
        assert!(
            message.starts_with("DeadlineExceeded: Pod was active"),
            "{message}"
        );
        assert!(message.contains("activeDeadlineSeconds 300"), "{message}");
        assert!(!message.contains("137"), "{message}");
    }

    #[test]
    fn pull_errors_carry_the_kubelet_reason() {
        let pod = pod_with(json!({
            "phase": "Pending",
            "containerStatuses": [{
                "name": "unpack", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "waiting": { "reason": "ErrImagePull", "message": "not found" } },
            }],
        }));
        assert_eq!(
            state(&pod),
            PodState::Failed(PodFailure::Pull("ErrImagePull: not found".into()))
        );
    }

    #[test]
    fn exit_codes_decide_the_outcome() {
        let terminated = |code: i32, message: &str| {
            pod_with(json!({
                "phase": if code == 0 { "Succeeded" } else { "Failed" },
                "containerStatuses": [{
                    "name": "unpack", "image": "x", "imageID": "r/x@sha256:ab", "ready": false,
                    "restartCount": 0,
                    "state": { "terminated": { "exitCode": code, "message": message } },
                }],
            }))
        };
        let report = UnpackReport {
            content_digest: "sha256:cd".into(),
            platform: "linux/amd64".into(),
            objects: 1,
        };
        assert_eq!(
            state(&terminated(0, &serde_json::to_string(&report).unwrap())),
            PodState::Succeeded {
                report,
                image_id: "r/x@sha256:ab".into()
            }
        );
        assert_eq!(
            state(&terminated(EXIT_INVALID_BUNDLE, "invalid YAML")),
            PodState::Failed(PodFailure::InvalidBundle {
                message: "invalid YAML".into(),
                image_id: "r/x@sha256:ab".into()
            })
        );
        assert!(matches!(
            state(&terminated(1, "storage")),
            PodState::Failed(PodFailure::Unpack(_))
        ));
    }

    #[test]
    fn unscheduled_pods_wait_with_the_scheduler_message() {
        let pod = pod_with(json!({
            "phase": "Pending",
            "conditions": [{ "type": "PodScheduled", "status": "False",
                             "reason": "Unschedulable", "message": "0/1 nodes match" }],
        }));
        assert_eq!(
            state(&pod),
            PodState::Waiting {
                unschedulable: Some("0/1 nodes match".into())
            }
        );
    }

    #[test]
    fn digests_come_from_repository_image_ids() {
        assert_eq!(runtime_digest("r/x@sha256:ab"), Some("sha256:ab"));
        assert_eq!(runtime_digest("sha256:ab"), None);
    }

    #[test]
    fn pod_names_are_stable_per_image() {
        assert_eq!(pod_name("web", "a:1", None), pod_name("web", "a:1", None));
        assert_ne!(pod_name("web", "a:1", None), pod_name("web", "a:2", None));
    }
}
