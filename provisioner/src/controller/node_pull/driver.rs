//! The controller's side of `pullMode: Node`: one unpack Pod per new content, within a bound
//! on Pods at once; its outcome read from its status; the Pod removed in every case.

use std::time::Duration;

use gantry_api::{Bundle, ProvisionerClass};
use gantry_image::{EffectiveLimits, Platform, parse_reference, pinned};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};

use super::NodePullSettings;
use super::pod::{PodFailure, PodInputs, PodState, pod_name, runtime_digest, state, unpack_pod};
use crate::controller::error::{Error, Result};
use crate::controller::source::is_digest_reference;

/// How long past `activeDeadlineSeconds` the controller waits (scheduling, image pulls).
const GRACE: Duration = Duration::from_secs(30);

/// What the node pulled and the program stored.
#[derive(Debug, Clone)]
pub struct NodeUnpacked {
    /// `repo@sha256:…` as the runtime pulled it.
    pub resolved_image: String,
    /// The digest the runtime reports: the top-level manifest's (an index's, for a
    /// multi-platform image).
    pub runtime_digest: String,
    pub platform: String,
    pub content_digest: String,
}

/// Runs one unpack Pod for `bundle` with `image` (its `spec.image`, or the digest it was
/// verified at) and returns what it stored.
pub async fn unpack_on_node(
    client: &Client,
    namespace: &str,
    settings: &NodePullSettings,
    class: &ProvisionerClass,
    bundle: &Bundle,
    image: &str,
    limits: EffectiveLimits,
) -> Result<NodeUnpacked> {
    let platform = class
        .spec
        .platform
        .as_deref()
        .map(|p| {
            p.parse::<Platform>().map_err(|e| Error::InvalidClass {
                class: class.name_any(),
                message: format!("spec.platform: {e}"),
            })
        })
        .transpose()?;
    let reference = parse_reference(image).map_err(|e| Error::from_image(image, e))?;
    let (unpack_image, pull_policy) = unpack_image(client, namespace, settings).await?;
    let pull_secrets = class
        .spec
        .pull_secrets
        .iter()
        .chain(bundle.spec.pull_secret.iter())
        .cloned()
        .collect();
    let bundle_name = bundle.name_any();
    let inputs = PodInputs {
        namespace,
        bundle: &bundle_name,
        image,
        unpack_image: &unpack_image,
        unpack_image_pull_policy: pull_policy.as_deref(),
        pull_secrets,
        platform: platform.as_ref(),
        limits,
        storage_url: &settings.storage_url,
        service_account: &settings.service_account,
        deadline_seconds: settings.deadline.as_secs().max(1) as i64,
    };
    let name = pod_name(&bundle_name, image, bundle.uid().as_deref());
    let pod = unpack_pod(&name, &inputs)
        .map_err(|e| unpack_error(image, format!("building the unpack Pod: {e}")))?;

    let _slot = settings
        .slots
        .acquire()
        .await
        .map_err(|e| unpack_error(image, e.to_string()))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => {}
        // Left by an earlier pass for the same image: its outcome is as good.
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let outcome = wait(&pods, &name, settings.deadline + GRACE).await;
    let removed = pods
        .delete(&name, &DeleteParams::background().grace_period(0))
        .await;
    if let Err(e) = removed
        && !matches!(&e, kube::Error::Api(s) if s.code == 404)
    {
        tracing::warn!(pod = %name, "removing the unpack Pod: {e}");
    }
    match outcome? {
        PodState::Succeeded { report, image_id } => {
            let digest = runtime_digest(&image_id).ok_or_else(|| {
                unpack_error(
                    image,
                    format!("the runtime reported no repository digest (imageID {image_id:?})"),
                )
            })?;
            Ok(NodeUnpacked {
                resolved_image: pinned(&reference, digest),
                runtime_digest: digest.to_string(),
                platform: report.platform,
                content_digest: report.content_digest,
            })
        }
        PodState::Failed(PodFailure::Pull(message)) => Err(Error::NodePull {
            image: image.to_string(),
            message,
        }),
        PodState::Failed(PodFailure::InvalidBundle { message, image_id }) => {
            // Named as a direct pull names it: the reference with the digest it resolved to.
            let image = match runtime_digest(&image_id) {
                Some(digest) if !is_digest_reference(image) => format!("{image}@{digest}"),
                _ => image.to_string(),
            };
            Err(Error::InvalidBundleReported { image, message })
        }
        PodState::Failed(PodFailure::Unpack(message)) => Err(unpack_error(image, message)),
        PodState::Waiting { unschedulable } => Err(unpack_error(
            image,
            match unschedulable {
                Some(why) => format!(
                    "unpack Pod {name} could not be scheduled within {}s: {why}",
                    (settings.deadline + GRACE).as_secs()
                ),
                None => format!(
                    "unpack Pod {name} did not finish within {}s",
                    (settings.deadline + GRACE).as_secs()
                ),
            },
        )),
    }
}

fn unpack_error(image: &str, message: String) -> Error {
    Error::UnpackPod {
        image: image.to_string(),
        message,
    }
}

/// Waits until the Pod has an outcome, or `timeout`; then returns its last state.
async fn wait(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<PodState> {
    let finished =
        |pod: Option<&Pod>| pod.is_none_or(|pod| !matches!(state(pod), PodState::Waiting { .. }));
    let watched =
        tokio::time::timeout(timeout, await_condition(pods.clone(), name, finished)).await;
    let pod = match watched {
        Ok(Ok(Some(pod))) => Some(pod),
        // Gone (deleted by someone), timed out, or the watch failed: read it once more.
        _ => pods.get_opt(name).await?,
    };
    match pod {
        Some(pod) => Ok(state(&pod)),
        None => Ok(PodState::Failed(PodFailure::Unpack(format!(
            "unpack Pod {name} was deleted before it finished"
        )))),
    }
}

/// The unpack image and its pull policy: the flag's, else the provisioner's own Pod's.
async fn unpack_image(
    client: &Client,
    namespace: &str,
    settings: &NodePullSettings,
) -> Result<(String, Option<String>)> {
    if let Some(image) = &settings.unpack_image {
        return Ok((image.clone(), None));
    }
    let learnt = settings
        .learnt_image
        .get_or_try_init(|| async {
            let own = settings.own_pod.as_deref().ok_or_else(|| {
                unpack_error(
                    "",
                    "the provisioner knows neither --unpack-image nor its own Pod ($POD_NAME)"
                        .into(),
                )
            })?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let pod = pods.get(own).await?;
            let containers = pod.spec.map(|s| s.containers).unwrap_or_default();
            let container = containers
                .iter()
                .find(|c| c.name == "provisioner")
                .or(containers.first())
                .and_then(|c| c.image.clone().map(|i| (i, c.image_pull_policy.clone())));
            container.ok_or_else(|| {
                unpack_error("", format!("Pod {own} names no image for the provisioner"))
            })
        })
        .await?;
    Ok(learnt.clone())
}
