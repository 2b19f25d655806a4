//! Health of what a bundle installed: kstatus rules per object ([`kstatus`]), the `Healthy`
//! condition, and whether `Ready` waits for it.
//!
//! After every apply the bundle's objects are read and assessed (objects of kinds that never
//! carry a status are assessed from the apply's answer, without a read). The drift watches already
//! watch every managed kind, so a status change of a managed object (a Deployment's replicas,
//! a Job's conditions) makes the bundle reconcile and be assessed again: nothing polls. The one
//! timer is the health timeout: while objects are in progress the bundle is requeued for the
//! moment the timeout passes, when `Healthy` turns `False` (`HealthCheckFailed`); it keeps
//! being assessed on every change after that, and turns `True` once the objects are healthy.

pub mod kstatus;

use std::time::Duration;

use futures::StreamExt;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, BundlePhase, BundleStatus, Condition, EffectiveHealth, InventoryEntry};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::runtime::events::EventType;
use serde_json::Value;

use self::kstatus::{Assessment, State, assess, container_problems};
use super::bundle::Pass;
use super::class_selection::{Selection, select};
use super::context::Context;
use super::live_view;
use super::metrics::HealthLabels;
use super::plan::describe;
use super::status::{condition, publish, set_condition};

/// The longest `Healthy` message: conditions allow 32 KiB; a screenful is enough.
const MAX_MESSAGE: usize = 4096;
/// Pods looked at to explain one workload.
const PODS_EXPLAINED: usize = 3;

/// The health settings of `bundle` with its class as the controller knows it.
pub fn policy(bundle: &Bundle, ctx: &Context) -> EffectiveHealth {
    let class = match select(bundle, &ctx.classes.state()) {
        Selection::Serve(class) => class.spec.health.clone(),
        _ => None,
    };
    EffectiveHealth::of(class.as_ref(), bundle.spec.health.as_ref())
}

/// The health step, after a successful apply: assesses every object of the inventory, sets
/// `Healthy`, and says when to come back at the latest (the end of the health timeout).
/// `being_deleted` is what the apply learnt of each object of the inventory, in its order:
/// objects of kinds without status are assessed from it, without a read.
pub(crate) async fn check(
    pass: &mut Pass<'_>,
    policy: EffectiveHealth,
    client: &kube::Client,
    being_deleted: &[bool],
) -> Option<Duration> {
    let ctx = pass.ctx;
    // Read several at once (as many as an apply writes at once): one after another, a
    // bundle's reads would cost a round trip each.
    let reads: Vec<_> = pass
        .status
        .inventory
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let known = being_deleted
                .get(i)
                .filter(|_| kstatus::has_no_status(&entry.group, &entry.kind))
                .map(|deleting| kstatus::assess_without_status(*deleting));
            async move {
                let assessment = match known {
                    Some(assessment) => assessment,
                    None => assess_live(ctx, client, entry).await,
                };
                (describe(entry), assessment)
            }
        })
        .collect();
    let objects: Vec<(String, Assessment)> = futures::stream::iter(reads)
        .buffered(ctx.settings.apply_concurrency.max(1))
        .collect()
        .await;
    let now = Timestamp::now();
    let verdict = judge(
        &objects,
        timeout_start(&pass.status.conditions, now),
        now,
        policy.timeout,
    );
    set_condition(
        &mut pass.status.conditions,
        types::HEALTHY,
        verdict.reason == reasons::HEALTHY,
        verdict.reason,
        verdict.message,
        pass.generation,
    );
    report_transition(pass).await;
    verdict.wake
}

/// Reads one object and assesses it; workloads that are not healthy are explained by their
/// Pods' container states (an image that cannot be pulled, a crash loop).
async fn assess_live(ctx: &Context, client: &kube::Client, entry: &InventoryEntry) -> Assessment {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let kind = match ctx.kinds.resolve(&ctx.client, &gvk).await {
        Ok(Some(kind)) => kind,
        Ok(None) => return not_readable("its kind is not served"),
        Err(error) => return not_readable(&error.to_string()),
    };
    let api = kind.api(client, entry.namespace.as_deref());
    let with_spec = live_view::spec_needed(&entry.group, &entry.kind);
    let object = match live_view::for_health(client, &api, &entry.name, with_spec).await {
        Ok(Some(live)) => live,
        Ok(None) => return not_readable("not found"),
        Err(error) => return not_readable(&error.to_string()),
    };
    let mut assessment = assess(&object);
    if assessment.state != State::Current
        && let Some(namespace) = entry.namespace.as_deref()
        && let Some(selector) = pod_selector(&object)
    {
        let pods: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        if let Ok(list) = pods
            .list(&ListParams::default().labels(&selector).limit(50))
            .await
        {
            let pods: Vec<Value> = list
                .items
                .iter()
                .filter_map(|pod| serde_json::to_value(pod).ok())
                .collect();
            assessment.message.push_str(&explain_pods(&pods));
        }
    }
    assessment
}

fn not_readable(why: &str) -> Assessment {
    Assessment {
        state: State::InProgress,
        message: format!("cannot be read: {why}"),
    }
}

/// The label selector (`a=b,c=d`) of a workload's Pods, from `spec.selector.matchLabels`.
fn pod_selector(object: &Value) -> Option<String> {
    let kind = object.get("kind").and_then(Value::as_str)?;
    if !matches!(
        kind,
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job"
    ) {
        return None;
    }
    let labels = object
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)?;
    let selector: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
        .collect();
    (!selector.is_empty()).then(|| selector.join(","))
}

/// `; Pod web-1: container web waiting: ImagePullBackOff: …` for the first Pods with a problem;
/// Pods that still run (or wait to) come before those that are finished or being deleted.
fn explain_pods(pods: &[Value]) -> String {
    let finished = |pod: &&Value| {
        pod.pointer("/metadata/deletionTimestamp").is_some()
            || matches!(
                pod.pointer("/status/phase").and_then(Value::as_str),
                Some("Failed" | "Succeeded")
            )
    };
    let (done, live): (Vec<&Value>, Vec<&Value>) = pods.iter().partition(finished);
    live.into_iter()
        .chain(done)
        .filter_map(|pod| {
            let problems = container_problems(pod);
            let name = pod.pointer("/metadata/name").and_then(Value::as_str)?;
            (!problems.is_empty()).then(|| format!("; Pod {name}: {}", problems.join(", ")))
        })
        .take(PODS_EXPLAINED)
        .collect()
}

/// What the assessments add up to.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    reason: &'static str,
    message: String,
    /// When to look again at the latest: the end of the timeout while objects progress.
    wake: Option<Duration>,
}

/// Healthy when every object is current; failed at once when one failed, or when objects are
/// still in progress after `timeout` from `start`; progressing before that.
fn judge(
    objects: &[(String, Assessment)],
    start: Timestamp,
    now: Timestamp,
    timeout: Duration,
) -> Verdict {
    let unhealthy: Vec<&(String, Assessment)> = objects
        .iter()
        .filter(|(_, a)| a.state != State::Current)
        .collect();
    if unhealthy.is_empty() {
        return Verdict {
            reason: reasons::HEALTHY,
            message: format!(
                "{} healthy",
                crate::controller::status::objects(objects.len())
            ),
            wake: None,
        };
    }
    let list = truncate(
        unhealthy
            .iter()
            .map(|(object, a)| format!("\n- {object}: {}", a.message))
            .collect(),
    );
    let summary = format!(
        "{} of {} not healthy",
        unhealthy.len(),
        crate::controller::status::objects(objects.len())
    );
    let elapsed_ms = now.as_millisecond().saturating_sub(start.as_millisecond());
    let left = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_sub(u64::try_from(elapsed_ms).unwrap_or(0));
    let failed = unhealthy.iter().any(|(_, a)| a.state == State::Failed);
    if failed || left == 0 {
        let why = if failed {
            String::new()
        } else {
            format!(" after {}", seconds(timeout))
        };
        return Verdict {
            reason: reasons::HEALTH_CHECK_FAILED,
            message: format!("{summary}{why}:{list}"),
            wake: None,
        };
    }
    // The deadline, not the time left: a message that changed on every assessment would be a
    // status write each time, and each write another reconcile.
    let deadline = Timestamp::from_millisecond(
        start
            .as_millisecond()
            .saturating_add(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX)),
    )
    .map_or_else(
        |_| format!("{} from now", seconds(timeout)),
        |t| format!("{t:.0}"),
    );
    Verdict {
        reason: reasons::PROGRESSING,
        message: format!("{summary} (waiting until {deadline}):{list}"),
        wake: Some(Duration::from_millis(left)),
    }
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64().ceil())
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" …");
    }
    message
}

/// Where the health timeout counts from: the last install (`Installed` turning true), or the
/// moment the objects stopped being healthy, whichever is later.
fn timeout_start(conditions: &[Condition], now: Timestamp) -> Timestamp {
    let installed = condition(conditions, types::INSTALLED)
        .map(|c| c.last_transition_time.0)
        .unwrap_or(now);
    let unhealthy_since = match condition(conditions, types::HEALTHY) {
        // Healthy until this very assessment.
        Some(c) if c.status == "True" => now,
        Some(c) => c.last_transition_time.0,
        None => installed,
    };
    installed.max(unhealthy_since)
}

/// Records a change of `Healthy` (its status or reason) in the metrics and as an Event.
async fn report_transition(pass: &Pass<'_>) {
    let before = condition(&pass.written.conditions, types::HEALTHY)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let Some(after) = condition(&pass.status.conditions, types::HEALTHY) else {
        return;
    };
    if before.as_ref() == Some(&(after.status.clone(), after.reason.clone())) {
        return;
    }
    // A first assessment that finds everything healthy is the install's own Event
    // (`InstallSucceeded`) again: counted, not announced.
    let announce = before.is_some() || after.reason != reasons::HEALTHY;
    let type_ = if after.reason == reasons::HEALTH_CHECK_FAILED {
        EventType::Warning
    } else {
        EventType::Normal
    };
    pass.ctx
        .metrics
        .health_transitions
        .get_or_create(&HealthLabels {
            state: state_label(&after.reason),
        })
        .inc();
    if announce {
        publish(pass.ctx, pass.bundle, type_, &after.reason, &after.message).await;
    }
}

fn state_label(reason: &str) -> &'static str {
    match reason {
        reasons::HEALTHY => "healthy",
        reasons::PROGRESSING => "progressing",
        _ => "failed",
    }
}

/// When the policy says `wait`, `Ready` is true only while `Healthy` is: applied after the
/// summary, so the other conditions' failures and progress still come first.
pub fn gate(status: &mut BundleStatus, policy: EffectiveHealth, generation: Option<i64>) {
    if !policy.wait || !condition(&status.conditions, types::READY).is_some_and(is_true) {
        return;
    }
    let (reason, message) = match condition(&status.conditions, types::HEALTHY) {
        Some(c) if is_true(c) => return,
        Some(c) => (c.reason.clone(), c.message.clone()),
        None => (
            reasons::PROGRESSING.to_string(),
            "the objects' health was not assessed yet".to_string(),
        ),
    };
    if reason == reasons::HEALTH_CHECK_FAILED {
        status.phase = Some(BundlePhase::Failing);
    }
    set_condition(
        &mut status.conditions,
        types::READY,
        false,
        &reason,
        message,
        generation,
    );
}

fn is_true(condition: &Condition) -> bool {
    condition.status == "True"
}

#[cfg(test)]
mod tests;
