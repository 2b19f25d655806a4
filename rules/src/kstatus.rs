//! The status of one live object, by the rules of kstatus (`sigs.k8s.io/cli-utils`, shared by
//! Flux and `kubectl wait`): pure functions over the object's JSON, which never panic on input.

use serde_json::Value;

use crate::conditions::ConditionStatus;

/// Where an object stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Reconciled and ready (kstatus `Current`).
    Current,
    /// Not there yet; it may still get there (kstatus `InProgress`, `Terminating`).
    InProgress,
    /// It will not get there without a change (kstatus `Failed`: a failed Job or Pod).
    Failed,
}

/// An object's state and what kstatus says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assessment {
    pub state: State,
    pub message: String,
}

impl Assessment {
    fn current(message: impl Into<String>) -> Self {
        Self {
            state: State::Current,
            message: message.into(),
        }
    }

    fn in_progress(message: impl Into<String>) -> Self {
        Self {
            state: State::InProgress,
            message: message.into(),
        }
    }

    fn failed(message: impl Into<String>) -> Self {
        Self {
            state: State::Failed,
            message: message.into(),
        }
    }
}

/// The status of `object` (a whole object as the API server returns it).
pub fn assess(object: &Value) -> Assessment {
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        return Assessment::in_progress("resource is being deleted");
    }
    if let Some(generic) = generic(object) {
        return generic;
    }
    let group = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .map_or("", |v| v.rsplit_once('/').map_or("", |(g, _)| g));
    let kind = str_at(object, "/kind");
    match (group, kind) {
        ("apps", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps", "DaemonSet") => daemon_set(object),
        ("apps", "ReplicaSet") => replica_set(object),
        ("batch", "Job") => job(object),
        ("", "Pod") => pod(object),
        ("", "PersistentVolumeClaim") => pvc(object),
        ("", "Service") => service(object),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(object),
        _ => other(object, group, kind),
    }
}

/// Whether objects of `group`/`kind` (built-in kinds only) never carry a status. kstatus can
/// find such an object only current or being deleted, which the answer to its apply (or the
/// read before it) already tells: their health costs no read.
pub fn has_no_status(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "",
            "ConfigMap" | "Secret" | "ServiceAccount" | "LimitRange" | "PodTemplate" | "Endpoints"
        ) | (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
        ) | ("scheduling.k8s.io", "PriorityClass")
            | ("storage.k8s.io", "StorageClass" | "CSIDriver")
            | (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration"
            )
            | ("networking.k8s.io", "IngressClass")
            | ("node.k8s.io", "RuntimeClass")
            | ("apps", "ControllerRevision")
    )
}

/// The status of an object of a kind without status ([`has_no_status`]), from whether it is
/// being deleted: what [`assess`] finds for it.
pub fn assess_without_status(being_deleted: bool) -> Assessment {
    if being_deleted {
        Assessment::in_progress("resource is being deleted")
    } else {
        Assessment::current("Resource is current")
    }
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

/// The condition `type_` of `object`'s `status.conditions`.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The condition `type_` of `object`, if it has `status`.
fn condition_with<'a>(
    object: &'a Value,
    type_: &str,
    status: ConditionStatus,
) -> Option<&'a Value> {
    condition(object, type_).filter(|c| ConditionStatus::from(str_at(c, "/status")) == status)
}

/// `reason: message` of a condition, or what is there of it.
fn explain(condition: &Value) -> String {
    let reason = str_at(condition, "/reason");
    let message = str_at(condition, "/message");
    match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("{reason}: {message}"),
        (false, true) => reason.to_string(),
        (true, false) => message.to_string(),
        (true, true) => String::new(),
    }
}

/// The object's `metadata.generation` and its `status.observedGeneration`, where present.
pub fn generations(object: &Value) -> (Option<i64>, Option<i64>) {
    (
        int_at(object, "/metadata/generation"),
        int_at(object, "/status/observedGeneration"),
    )
}

/// The rules kstatus applies to every kind first: an observed generation behind the object's
/// generation, and the `Reconciling`/`Stalled` conventions.
fn generic(object: &Value) -> Option<Assessment> {
    let kind = str_at(object, "/kind");
    if let (Some(generation), Some(observed)) = generations(object)
        && observed != generation
    {
        return Some(Assessment::in_progress(format!(
            "{kind} generation is {generation}, but latest observed generation is {observed}"
        )));
    }
    if let Some(c) = condition_with(object, "Stalled", ConditionStatus::True) {
        return Some(Assessment::failed(explain(c)));
    }
    if let Some(c) = condition_with(object, "Reconciling", ConditionStatus::True) {
        return Some(Assessment::in_progress(explain(c)));
    }
    None
}

/// Workload controllers report nothing until they have observed the object once.
fn not_observed(object: &Value) -> Option<Assessment> {
    int_at(object, "/status/observedGeneration")
        .is_none()
        .then(|| {
            Assessment::in_progress(format!(
                "{} has not been observed by its controller yet",
                str_at(object, "/kind")
            ))
        })
}

/// The desired replicas (`spec.replicas`, 1 when unset).
fn spec_replicas(object: &Value) -> i64 {
    int_at(object, "/spec/replicas").unwrap_or(1)
}

/// The first of `fields` (`(label, status field)`) short of `want`, then replicas beyond it
/// (`status.replicas`), as kstatus reports them.
fn rollout(object: &Value, want: i64, fields: &[(&str, &str)]) -> Option<Assessment> {
    let count = |field: &str| int_at(object, &format!("/status/{field}")).unwrap_or(0);
    if let Some((label, field)) = fields.iter().find(|(_, field)| count(field) < want) {
        return Some(Assessment::in_progress(format!(
            "{label}: {}/{want}",
            count(field)
        )));
    }
    let replicas = count("replicas");
    (replicas > want)
        .then(|| Assessment::in_progress(format!("Pending termination: {}", replicas - want)))
}

/// A Deployment's rollout, as kstatus reads it ([`assess`] looks at deletion and the generic
/// conditions first).
pub fn deployment(object: &Value) -> Assessment {
    if let Some(c) = condition(object, "Progressing")
        && str_at(c, "/reason") == "ProgressDeadlineExceeded"
    {
        return Assessment::failed(format!("Progress deadline exceeded: {}", explain(c)));
    }
    if let Some(not_observed) = not_observed(object) {
        return not_observed;
    }
    let want = spec_replicas(object);
    let fields = [
        ("Replicas", "replicas"),
        ("Updated", "updatedReplicas"),
        ("Available", "availableReplicas"),
        ("Ready", "readyReplicas"),
    ];
    if let Some(behind) = rollout(object, want, &fields) {
        return behind;
    }
    if condition_with(object, "Available", ConditionStatus::True).is_none() && want > 0 {
        return Assessment::in_progress("Deployment not Available");
    }
    Assessment::current(format!("Deployment is available. Replicas: {want}"))
}

/// A StatefulSet's rollout, as kstatus reads it ([`assess`] looks at deletion and the generic
/// conditions first).
pub fn stateful_set(object: &Value) -> Assessment {
    if str_at(object, "/spec/updateStrategy/type") == "OnDelete" {
        return Assessment::current("StatefulSet is using the OnDelete update strategy");
    }
    if let Some(not_observed) = not_observed(object) {
        return not_observed;
    }
    let want = spec_replicas(object);
    let count = |field: &str| int_at(object, &format!("/status/{field}")).unwrap_or(0);
    if let Some(behind) = rollout(
        object,
        want,
        &[("Replicas", "replicas"), ("Ready", "readyReplicas")],
    ) {
        return behind;
    }
    if let Some(partition) = int_at(object, "/spec/updateStrategy/rollingUpdate/partition") {
        if count("updatedReplicas") < want - partition {
            return Assessment::in_progress(format!(
                "updated: {}/{}",
                count("updatedReplicas"),
                want - partition
            ));
        }
        return Assessment::current(format!("Partitioned roll out complete. updated: {want}"));
    }
    let current = str_at(object, "/status/currentRevision");
    let update = str_at(object, "/status/updateRevision");
    if current != update {
        return Assessment::in_progress(format!(
            "Waiting for rolling update to complete: {}/{want} Pods at revision {update}",
            count("updatedReplicas")
        ));
    }
    Assessment::current(format!(
        "All replicas scheduled as expected. Replicas: {want}"
    ))
}

fn daemon_set(object: &Value) -> Assessment {
    if let Some(not_observed) = not_observed(object) {
        return not_observed;
    }
    let count = |field: &str| int_at(object, &format!("/status/{field}")).unwrap_or(0);
    let want = count("desiredNumberScheduled");
    let fields = [
        ("Current", "currentNumberScheduled"),
        ("Updated", "updatedNumberScheduled"),
        ("Available", "numberAvailable"),
        ("Ready", "numberReady"),
    ];
    if let Some(behind) = rollout(object, want, &fields) {
        return behind;
    }
    Assessment::current(format!(
        "All replicas scheduled as expected. Replicas: {want}"
    ))
}

fn replica_set(object: &Value) -> Assessment {
    if let Some(not_observed) = not_observed(object) {
        return not_observed;
    }
    if let Some(c) = condition_with(object, "ReplicaFailure", ConditionStatus::True) {
        return Assessment::in_progress(format!("Replica Failure: {}", explain(c)));
    }
    let want = spec_replicas(object);
    let fields = [
        ("Labelled", "fullyLabeledReplicas"),
        ("Available", "availableReplicas"),
        ("Ready", "readyReplicas"),
    ];
    rollout(object, want, &fields).unwrap_or_else(|| {
        Assessment::current(format!("ReplicaSet is available. Replicas: {want}"))
    })
}

fn job(object: &Value) -> Assessment {
    let count = |field: &str| int_at(object, &format!("/status/{field}")).unwrap_or(0);
    let completions = int_at(object, "/spec/completions").unwrap_or(1);
    if let Some(c) = condition_with(object, "Failed", ConditionStatus::True) {
        return Assessment::failed(format!(
            "Job Failed. failed: {}/{completions}: {}",
            count("failed"),
            explain(c)
        ));
    }
    if condition_with(object, "Complete", ConditionStatus::True).is_some() {
        return Assessment::current(format!(
            "Job Completed. succeeded: {}/{completions}",
            count("succeeded")
        ));
    }
    if object.pointer("/status/startTime").is_none() {
        return Assessment::in_progress("Job not started");
    }
    Assessment::in_progress(format!(
        "Job in progress. success: {}, active: {}, failed: {}",
        count("succeeded"),
        count("active"),
        count("failed")
    ))
}

fn pod(object: &Value) -> Assessment {
    let phase = str_at(object, "/status/phase");
    match phase {
        "Succeeded" => return Assessment::current("Pod has completed successfully"),
        "Failed" => {
            return Assessment::failed(format!(
                "Pod has completed, but not successfully{}",
                with_reasons(&container_problems(object))
            ));
        }
        _ => {}
    }
    if condition_with(object, "Ready", ConditionStatus::True).is_some() {
        return Assessment::current("Pod is Ready");
    }
    let problems = container_problems(object);
    if problems.iter().any(|p| p.contains("CrashLoopBackOff")) {
        return Assessment::failed(format!(
            "Containers in CrashLoop state{}",
            with_reasons(&problems)
        ));
    }
    if let Some(c) = condition_with(object, "PodScheduled", ConditionStatus::False) {
        return Assessment::in_progress(format!("Pod could not be scheduled: {}", explain(c)));
    }
    let phase = if phase.is_empty() { "Pending" } else { phase };
    Assessment::in_progress(format!(
        "Pod is {phase}, not Ready{}",
        with_reasons(&problems)
    ))
}

fn with_reasons(problems: &[String]) -> String {
    if problems.is_empty() {
        String::new()
    } else {
        format!(": {}", problems.join("; "))
    }
}

/// Why a Pod's containers are not running: `container web: ImagePullBackOff: Back-off pulling
/// image ...`, for waiting containers and ones that terminated with an error.
pub fn container_problems(pod: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for list in ["initContainerStatuses", "containerStatuses"] {
        let Some(statuses) = pod
            .pointer(&format!("/status/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for status in statuses {
            let name = str_at(status, "/name");
            let (state, problem) = if let Some(waiting) = status.pointer("/state/waiting") {
                ("waiting", explain(waiting))
            } else if let Some(terminated) = status
                .pointer("/state/terminated")
                .filter(|t| int_at(t, "/exitCode").is_some_and(|code| code != 0))
            {
                ("terminated", explain(terminated))
            } else {
                continue;
            };
            if !problem.is_empty() && problem != "ContainerCreating" && problem != "PodInitializing"
            {
                problems.push(format!("container {name} {state}: {problem}"));
            }
        }
    }
    problems
}

fn pvc(object: &Value) -> Assessment {
    match str_at(object, "/status/phase") {
        "Bound" => Assessment::current("PVC is Bound"),
        "" => Assessment::in_progress("PVC is not Bound"),
        phase => Assessment::in_progress(format!("PVC is not Bound. phase: {phase}")),
    }
}

fn service(object: &Value) -> Assessment {
    if str_at(object, "/spec/type") != "LoadBalancer" {
        return Assessment::current("Service is ready");
    }
    let ingress = object
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .is_some_and(|i| !i.is_empty());
    if ingress {
        Assessment::current("Service is ready: the load balancer has an ingress")
    } else {
        Assessment::in_progress("Service of type LoadBalancer has no ingress yet")
    }
}

fn crd(object: &Value) -> Assessment {
    if let Some(c) = condition_with(object, "NamesAccepted", ConditionStatus::False) {
        return Assessment::failed(format!("CRD names not accepted: {}", explain(c)));
    }
    if condition_with(object, "Established", ConditionStatus::True).is_some() {
        Assessment::current("CRD is established")
    } else {
        Assessment::in_progress("CRD is not established")
    }
}

/// The conditions that speak for a kind Gantry has no rule for, in order: `Ready` (kstatus),
/// then `Available`, which operators whose resources run workloads report instead
/// (prometheus-operator's Prometheus and Alertmanager, APIService, OpenShift's ClusterOperator).
const SUMMARY_CONDITIONS: [&str; 2] = ["Ready", "Available"];

/// Kinds whose controllers always report a summary condition (group, kind, condition type).
/// Until it is there, the controller has not looked at the object yet: in progress, not
/// current. kstatus has no such rule (Flux users write one as a health check expression);
/// without it, a Prometheus would be healthy the moment it is created.
const REPORTED_CONDITIONS: [(&str, &str, &str); 5] = [
    ("monitoring.coreos.com", "Prometheus", "Available"),
    ("monitoring.coreos.com", "PrometheusAgent", "Available"),
    ("monitoring.coreos.com", "Alertmanager", "Available"),
    ("monitoring.coreos.com", "ThanosRuler", "Available"),
    ("apiregistration.k8s.io", "APIService", "Available"),
];

/// Any other kind: the first of its [`SUMMARY_CONDITIONS`] speaks for it; without one it is
/// current once it exists, unless its controller is known to report one
/// ([`REPORTED_CONDITIONS`]). A condition that carries an `observedGeneration` behind the
/// object's generation speaks of an earlier spec: the object is still in progress (operators
/// that keep no `status.observedGeneration` record it per condition).
fn other(object: &Value, group: &str, kind: &str) -> Assessment {
    let Some((type_, c)) = SUMMARY_CONDITIONS
        .iter()
        .find_map(|type_| condition(object, type_).map(|c| (*type_, c)))
    else {
        if let Some((_, _, reported)) = REPORTED_CONDITIONS
            .iter()
            .find(|(g, k, _)| *g == group && *k == kind)
        {
            return Assessment::in_progress(format!(
                "{kind} has no {reported} condition yet: its controller has not reported on it"
            ));
        }
        return Assessment::current("Resource is current");
    };
    if let (Some(generation), Some(observed)) = (
        int_at(object, "/metadata/generation"),
        int_at(c, "/observedGeneration"),
    ) && observed < generation
    {
        return Assessment::in_progress(format!(
            "{} generation is {generation}, but its {type_} condition is of generation {observed}",
            str_at(object, "/kind")
        ));
    }
    if ConditionStatus::from(str_at(c, "/status")) == ConditionStatus::True {
        Assessment::current(format!("Resource is {type_}"))
    } else {
        Assessment::in_progress(format!("Resource is not {type_}: {}", explain(c)))
    }
}

#[cfg(test)]
mod tests;
