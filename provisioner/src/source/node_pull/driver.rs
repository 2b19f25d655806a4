//! The controller's side of `pullMode: Node`: one unpack Pod per new content, within a bound
//! on Pods at once; its outcome read from its status; the Pod removed in every case.

use std::time::Duration;

use futures::TryStreamExt;
use gantry_api::{Bundle, ProvisionerClass};
use gantry_image::{EffectiveLimits, Platform, parse_reference, pinned};
use gantry_rules::duration::GoDuration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::NodePullSettings;
use super::pod::{
    APP_LABEL, PodFailure, PodInputs, PodState, pod_name, runtime_digest, state, unpack_pod,
};
use crate::cluster::errors::is_not_found;
use crate::error::{Error, Result};
use crate::source::registry::is_digest_reference;

/// How long past `activeDeadlineSeconds` the controller waits (scheduling, image pulls).
const GRACE: Duration = Duration::from_secs(30);

/// What the node pulled and the program stored.
#[derive(Debug, Clone)]
pub struct NodeUnpacked {
    /// `repo@sha256:…` as the runtime pulled it.
    pub resolved_image: String,
    pub platform: String,
    pub content_digest: String,
}

/// Runs one unpack Pod for `bundle` with `image` (its `spec.image`, or the digest it was
/// verified at) and returns what it stored. While the Pod waits for a node, the scheduler's
/// message is sent to `progress`.
#[allow(clippy::too_many_arguments)]
pub async fn unpack_on_node(
    client: &Client,
    namespace: &str,
    settings: &NodePullSettings,
    class: &ProvisionerClass,
    bundle: &Bundle,
    image: &str,
    limits: EffectiveLimits,
    progress: &UnboundedSender<String>,
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
    let bundle_uid = bundle.uid();
    let inputs = PodInputs {
        namespace,
        bundle: &bundle_name,
        bundle_uid: bundle_uid.as_deref(),
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
    let name = pod_name(&bundle_name, image, bundle_uid.as_deref());
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
        // Refused (admission, quota, a LimitRange): the API server's message is the reason.
        Err(kube::Error::Api(status)) => {
            return Err(unpack_error(
                image,
                format!(
                    "the API server refused unpack Pod {name} in namespace {namespace}: {}",
                    status.message
                ),
            ));
        }
        Err(e) => {
            return Err(unpack_error(
                image,
                format!("creating unpack Pod {name} in namespace {namespace}: {e}"),
            ));
        }
    }
    let waited = wait(&pods, &name, settings, image, progress).await;
    let removed = pods
        .delete(&name, &DeleteParams::background().grace_period(0))
        .await;
    if let Err(e) = removed
        && !is_not_found(&e)
    {
        tracing::warn!(pod = %name, "removing the unpack Pod: {e}");
    }
    let (state, waited_for) = waited?;
    match state {
        PodState::Succeeded { report, image_id } => {
            let digest = runtime_digest(&image_id).ok_or_else(|| {
                unpack_error(
                    image,
                    format!("the runtime reported no repository digest (imageID {image_id:?})"),
                )
            })?;
            Ok(NodeUnpacked {
                resolved_image: pinned(&reference, digest),
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
        PodState::Waiting {
            unschedulable: Some(why),
        } => Err(Error::UnpackPodUnschedulable {
            image: image.to_string(),
            message: format!(
                "unpack Pod {name} could not be scheduled within {:.0}: {why}",
                GoDuration(waited_for)
            ),
        }),
        PodState::Waiting {
            unschedulable: None,
        } => Err(unpack_error(
            image,
            format!(
                "unpack Pod {name} did not finish within {:.0}",
                GoDuration(waited_for)
            ),
        )),
    }
}

fn unpack_error(image: &str, message: String) -> Error {
    Error::UnpackPod {
        image: image.to_string(),
        message,
    }
}

/// The progress message of a Pod the scheduler cannot place (yet).
pub fn unschedulable_progress(image: &str, pod: &str, why: &str) -> String {
    format!("pulling {image} on a node: unpack Pod {pod} is not scheduled yet: {why}")
}

/// Watches the Pod until it has an outcome, has been unschedulable for
/// `settings.unschedulable_timeout`, or `settings.deadline` (plus a grace) passed; returns its
/// last state and how long it was waited for. The scheduler's messages go to `progress`.
async fn wait(
    pods: &Api<Pod>,
    name: &str,
    settings: &NodePullSettings,
    image: &str,
    progress: &UnboundedSender<String>,
) -> Result<(PodState, Duration)> {
    let started = Instant::now();
    let deadline = started + settings.deadline + GRACE;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(pods.clone(), config).default_backoff());
    // Since when, and why, the Pod cannot be scheduled.
    let mut unschedulable: Option<(Instant, String)> = None;
    // Whether the Pod was seen in the current (re)list.
    let mut listed = false;
    loop {
        let wake = unschedulable.as_ref().map_or(deadline, |(since, _)| {
            (*since + settings.unschedulable_timeout).min(deadline)
        });
        let event = match tokio::time::timeout_at(wake, events.try_next()).await {
            Ok(Ok(Some(event))) => event,
            // Time is up (or the watch ended): the Pod's state as it is now decides, unless
            // it was scheduled just now and its deadline is still ahead.
            Ok(Ok(None)) | Err(_) => {
                let state = match pods.get_opt(name).await? {
                    Some(pod) => state(&pod),
                    None => deleted(name),
                };
                if state
                    == (PodState::Waiting {
                        unschedulable: None,
                    })
                    && Instant::now() < deadline
                {
                    unschedulable = None;
                    continue;
                }
                return Ok((state, started.elapsed()));
            }
            Ok(Err(e)) => {
                tracing::debug!(pod = %name, "watching the unpack Pod: {e}");
                continue;
            }
        };
        let pod = match event {
            watcher::Event::Init => {
                listed = false;
                continue;
            }
            watcher::Event::InitDone if listed => continue,
            watcher::Event::Delete(_) | watcher::Event::InitDone => {
                return Ok((deleted(name), started.elapsed()));
            }
            watcher::Event::InitApply(pod) => {
                listed = true;
                pod
            }
            watcher::Event::Apply(pod) => pod,
        };
        match state(&pod) {
            PodState::Waiting {
                unschedulable: Some(why),
            } => {
                if unschedulable.as_ref().map(|(_, known)| known) != Some(&why) {
                    let _ = progress.send(unschedulable_progress(image, name, &why));
                    let since = unschedulable.map_or_else(Instant::now, |(since, _)| since);
                    unschedulable = Some((since, why));
                }
            }
            PodState::Waiting {
                unschedulable: None,
            } => unschedulable = None,
            outcome => return Ok((outcome, started.elapsed())),
        }
    }
}

fn deleted(name: &str) -> PodState {
    PodState::Failed(PodFailure::Unpack(format!(
        "unpack Pod {name} was deleted before it finished"
    )))
}

/// Removes unpack Pods (by their label) left by a provisioner that stopped or lost its lease
/// while they ran: called before the controllers start, when no unpack of this process is in
/// flight. A failure is logged: the Pods' deadlines stop them, and their Bundle owns them.
pub async fn remove_left_behind(client: &Client, namespace: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={}", APP_LABEL.0, APP_LABEL.1);
    let list = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(%namespace, "listing unpack Pods left behind: {e}");
            return;
        }
    };
    for pod in list.items {
        let name = pod.name_any();
        match pods
            .delete(&name, &DeleteParams::background().grace_period(0))
            .await
        {
            Ok(_) => tracing::info!(pod = %name, "removed an unpack Pod left behind"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!(pod = %name, "removing an unpack Pod left behind: {e}"),
        }
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
