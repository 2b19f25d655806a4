//! Health verdicts from kstatus assessments: whether a bundle's objects are healthy, still
//! progressing within the health timeout, or failed; and how a workload's Pods explain it.

use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Condition, InventoryEntry, NOT_HEALTHY_LIMIT, NotHealthyObject, ObjectHealth};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::conditions::{ConditionStatus, find};
use super::kstatus::{Assessment, State, container_problems};

/// The longest `Healthy` message: conditions allow 32 KiB; a screenful is enough.
const MAX_MESSAGE: usize = 4096;
/// Pods looked at to explain one workload.
const PODS_EXPLAINED: usize = 3;

/// The label selector (`a=b,c=d`) of a workload's Pods, from `spec.selector.matchLabels`.
pub fn pod_selector(object: &Value) -> Option<String> {
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
pub fn explain_pods(pods: &[Value]) -> String {
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
pub struct Verdict {
    pub reason: &'static str,
    pub message: String,
    /// When to look again at the latest: the end of the timeout while objects progress.
    pub wake: Option<Duration>,
}

/// Healthy when every object is current; failed at once when one failed, or when objects are
/// still in progress after `timeout` from `start`; progressing before that.
pub fn judge(
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
            message: format!("{} healthy", super::objects(objects.len())),
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
        super::objects(objects.len())
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

/// The longest message `status.objectHealth` keeps per object: the `Healthy` message has the
/// whole story; this is for tables and trees.
const OBJECT_MESSAGE_LIMIT: usize = 512;

/// `status.objectHealth` of `objects` (inventory entries with their assessments, in inventory
/// order): counts per state, and the objects not healthy, failed first, at most
/// [`NOT_HEALTHY_LIMIT`].
pub fn object_health(objects: &[(&InventoryEntry, &Assessment)]) -> ObjectHealth {
    let count = |state: State| objects.iter().filter(|(_, a)| a.state == state).count() as i64;
    let not_healthy = [State::Failed, State::InProgress]
        .into_iter()
        .flat_map(|state| objects.iter().filter(move |(_, a)| a.state == state))
        .take(NOT_HEALTHY_LIMIT)
        .map(|(entry, assessment)| NotHealthyObject {
            group: entry.group.clone(),
            kind: entry.kind.clone(),
            namespace: entry.namespace.clone(),
            name: entry.name.clone(),
            state: match assessment.state {
                State::Failed => "Failed",
                _ => "Progressing",
            }
            .into(),
            message: shorten(&assessment.message, OBJECT_MESSAGE_LIMIT),
        })
        .collect();
    ObjectHealth {
        healthy: count(State::Current),
        progressing: count(State::InProgress),
        failed: count(State::Failed),
        not_healthy,
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, with `…` when cut.
fn shorten(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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
pub fn timeout_start(conditions: &[Condition], now: Timestamp) -> Timestamp {
    let installed = find(conditions, types::INSTALLED)
        .map(|c| c.last_transition_time.0)
        .unwrap_or(now);
    let unhealthy_since = match find(conditions, types::HEALTHY) {
        // Healthy until this very assessment.
        Some(c) if c.status == ConditionStatus::True => now,
        Some(c) => c.last_transition_time.0,
        None => installed,
    };
    installed.max(unhealthy_since)
}

#[cfg(test)]
mod tests;
