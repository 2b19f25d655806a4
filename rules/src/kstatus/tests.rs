use serde_json::{Value, json};

use super::{State, assess, assess_without_status, container_problems, has_no_status};

fn object(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "x", "namespace": "ns", "generation": 2},
        "spec": spec,
        "status": status,
    })
}

fn state(object: &Value) -> (State, String) {
    let assessment = assess(object);
    (assessment.state, assessment.message)
}

fn assert_state(object: &Value, expected: State, says: &str) {
    let (state, message) = state(object);
    assert_eq!(state, expected, "{message}");
    assert!(message.contains(says), "{message:?} should say {says:?}");
}

#[test]
fn a_deployment_is_current_once_rolled_out_at_its_generation() {
    let rolled_out = json!({
        "observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
        "availableReplicas": 2,
        "conditions": [{"type": "Available", "status": "True"},
                       {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
    });
    let deployment = |status| object("apps/v1", "Deployment", json!({"replicas": 2}), status);
    assert_state(
        &deployment(rolled_out.clone()),
        State::Current,
        "Replicas: 2",
    );

    let mut behind = rolled_out.clone();
    behind["observedGeneration"] = json!(1);
    assert_state(
        &deployment(behind),
        State::InProgress,
        "generation is 2, but latest observed generation is 1",
    );

    let mut unready = rolled_out.clone();
    unready["readyReplicas"] = json!(1);
    unready["availableReplicas"] = json!(1);
    assert_state(&deployment(unready), State::InProgress, "Available: 1/2");

    let mut surplus = rolled_out.clone();
    surplus["replicas"] = json!(3);
    assert_state(
        &deployment(surplus),
        State::InProgress,
        "Pending termination: 1",
    );

    assert_state(
        &deployment(json!({})),
        State::InProgress,
        "not been observed",
    );

    let stuck = json!({
        "observedGeneration": 2, "replicas": 2,
        "conditions": [{"type": "Progressing", "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": "ReplicaSet \"x-1\" has timed out progressing."}],
    });
    assert_state(
        &deployment(stuck),
        State::Failed,
        "has timed out progressing",
    );
}

#[test]
fn a_statefulset_waits_for_ready_replicas_and_its_update_revision() {
    let stateful_set = |status| object("apps/v1", "StatefulSet", json!({"replicas": 2}), status);
    let done = json!({"observedGeneration": 2, "replicas": 2, "readyReplicas": 2,
                      "updatedReplicas": 2, "currentRevision": "r2", "updateRevision": "r2"});
    assert_state(&stateful_set(done.clone()), State::Current, "Replicas: 2");
    let mut rolling = done.clone();
    rolling["currentRevision"] = json!("r1");
    assert_state(&stateful_set(rolling), State::InProgress, "rolling update");
    let mut unready = done.clone();
    unready["readyReplicas"] = json!(0);
    assert_state(
        &stateful_set(unready.clone()),
        State::InProgress,
        "Ready: 0/2",
    );
    assert_state(
        &object(
            "apps/v1",
            "StatefulSet",
            json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}}),
            unready,
        ),
        State::Current,
        "OnDelete",
    );
    let partitioned = json!({"replicas": 2,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}});
    let mut half = done;
    half["updatedReplicas"] = json!(0);
    assert_state(
        &object("apps/v1", "StatefulSet", partitioned, half),
        State::InProgress,
        "updated: 0/1",
    );
}

#[test]
fn a_daemonset_waits_for_every_node() {
    let status = json!({"observedGeneration": 2, "desiredNumberScheduled": 3,
        "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3,
        "numberReady": 3});
    assert_state(
        &object("apps/v1", "DaemonSet", json!({}), status.clone()),
        State::Current,
        "Replicas: 3",
    );
    let mut unavailable = status;
    unavailable["numberAvailable"] = json!(2);
    assert_state(
        &object("apps/v1", "DaemonSet", json!({}), unavailable),
        State::InProgress,
        "Available: 2/3",
    );
}

#[test]
fn a_replicaset_waits_for_available_replicas_and_reports_failures() {
    let spec = json!({"replicas": 1});
    let status = json!({"observedGeneration": 2, "replicas": 1, "fullyLabeledReplicas": 1,
        "availableReplicas": 1, "readyReplicas": 1});
    assert_state(
        &object("apps/v1", "ReplicaSet", spec.clone(), status.clone()),
        State::Current,
        "Replicas: 1",
    );
    let failing = json!({"observedGeneration": 2, "replicas": 0, "conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": "pods \"x-\" is forbidden: exceeded quota"}]});
    assert_state(
        &object("apps/v1", "ReplicaSet", spec, failing),
        State::InProgress,
        "FailedCreate: pods",
    );
}

#[test]
fn a_job_is_current_when_complete_and_failed_with_its_reason() {
    let job = |status| object("batch/v1", "Job", json!({"completions": 1}), status);
    assert_state(&job(json!({})), State::InProgress, "Job not started");
    assert_state(
        &job(json!({"startTime": "2026-01-01T00:00:00Z", "active": 1})),
        State::InProgress,
        "active: 1",
    );
    assert_state(
        &job(json!({"startTime": "2026-01-01T00:00:00Z",
            "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})),
        State::Current,
        "succeeded: 1/1",
    );
    assert_state(
        &job(json!({"startTime": "2026-01-01T00:00:00Z",
            "failed": 2, "conditions": [{"type": "Failed", "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit"}]})),
        State::Failed,
        "failed: 2/1: BackoffLimitExceeded: Job has reached the specified backoff limit",
    );
}

#[test]
fn a_pod_is_current_when_ready_and_says_why_not() {
    let pod = |status| object("v1", "Pod", json!({}), status);
    let ready = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    assert_state(&pod(ready), State::Current, "Ready");
    assert_state(
        &pod(json!({"phase": "Succeeded"})),
        State::Current,
        "completed successfully",
    );
    let pulling = json!({"phase": "Pending", "containerStatuses": [{"name": "web",
        "state": {"waiting": {"reason": "ImagePullBackOff",
                              "message": "Back-off pulling image \"r/missing:1\""}}}]});
    assert_state(
        &pod(pulling),
        State::InProgress,
        "container web waiting: ImagePullBackOff: Back-off pulling image",
    );
    let crashing = json!({"phase": "Running", "containerStatuses": [{"name": "web",
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]});
    assert_state(&pod(crashing), State::Failed, "CrashLoop");
    let failed = json!({"phase": "Failed", "containerStatuses": [{"name": "main",
        "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]});
    assert_state(
        &pod(failed),
        State::Failed,
        "container main terminated: Error",
    );
    let unschedulable = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
        "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available"}]});
    assert_state(
        &pod(unschedulable),
        State::InProgress,
        "could not be scheduled: Unschedulable",
    );
}

#[test]
fn creating_containers_are_no_problem() {
    let pod = json!({"status": {"containerStatuses": [
        {"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}},
        {"name": "b", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "c", "state": {"running": {}}}]}});
    assert!(container_problems(&pod).is_empty());
}

#[test]
fn a_pvc_is_current_when_bound() {
    let claim = |status| object("v1", "PersistentVolumeClaim", json!({}), status);
    assert_state(&claim(json!({"phase": "Bound"})), State::Current, "Bound");
    assert_state(
        &claim(json!({"phase": "Pending"})),
        State::InProgress,
        "phase: Pending",
    );
}

#[test]
fn only_a_load_balancer_service_waits_for_an_ingress() {
    let service = |spec, status| object("v1", "Service", spec, status);
    assert_state(
        &service(json!({"type": "ClusterIP"}), json!({})),
        State::Current,
        "ready",
    );
    assert_state(
        &service(json!({"type": "LoadBalancer"}), json!({"loadBalancer": {}})),
        State::InProgress,
        "no ingress",
    );
    assert_state(
        &service(
            json!({"type": "LoadBalancer"}),
            json!({"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}),
        ),
        State::Current,
        "ingress",
    );
}

#[test]
fn a_crd_is_current_when_established() {
    let crd = |conditions: Value| {
        object(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({}),
            json!({"conditions": conditions}),
        )
    };
    assert_state(&crd(json!([])), State::InProgress, "not established");
    assert_state(
        &crd(json!([{"type": "Established", "status": "True"}])),
        State::Current,
        "established",
    );
    assert_state(
        &crd(json!([{"type": "NamesAccepted", "status": "False", "reason": "ListKindConflict"}])),
        State::Failed,
        "ListKindConflict",
    );
}

#[test]
fn a_custom_resource_follows_its_ready_condition_and_observed_generation() {
    let widget = |status: Value| object("example.com/v1", "Widget", json!({}), status);
    assert_state(&widget(json!({})), State::Current, "current");
    assert_state(
        &widget(json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "Waiting", "message": "for a database"}]})),
        State::InProgress,
        "Waiting: for a database",
    );
    assert_state(
        &widget(json!({"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True"}]})),
        State::Current,
        "Ready",
    );
    assert_state(
        &widget(json!({"observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True"}]})),
        State::InProgress,
        "Widget generation is 2, but latest observed generation is 1",
    );
    assert_state(
        &widget(json!({"conditions": [{"type": "Stalled", "status": "True",
            "reason": "InvalidSpec"}]})),
        State::Failed,
        "InvalidSpec",
    );
    assert_state(
        &widget(
            json!({"conditions": [{"type": "Reconciling", "status": "True",
            "reason": "Working"}]}),
        ),
        State::InProgress,
        "Working",
    );
}

#[test]
fn a_custom_resource_without_ready_follows_its_available_condition() {
    // prometheus-operator's Prometheus: `Available` and `Reconciled`, each with the generation
    // it speaks of, and no `status.observedGeneration`.
    let prometheus = |available: Value| {
        object(
            "monitoring.coreos.com/v1",
            "Prometheus",
            json!({}),
            json!({"conditions": [
                available,
                {"type": "Reconciled", "status": "True", "observedGeneration": 2}
            ]}),
        )
    };
    assert_state(
        &prometheus(
            json!({"type": "Available", "status": "False", "observedGeneration": 2,
            "reason": "NoPodReady", "message": "shard 0: pod prometheus-k8s-0: containers with unready status: [prometheus]"}),
        ),
        State::InProgress,
        "Resource is not Available: NoPodReady: shard 0: pod prometheus-k8s-0",
    );
    // Some replicas available: still short of what was asked.
    assert_state(
        &prometheus(
            json!({"type": "Available", "status": "Degraded", "observedGeneration": 2,
            "reason": "SomePodsNotReady"}),
        ),
        State::InProgress,
        "SomePodsNotReady",
    );
    assert_state(
        &prometheus(json!({"type": "Available", "status": "True", "observedGeneration": 2})),
        State::Current,
        "Resource is Available",
    );
    // Available at an earlier spec says nothing of this one.
    assert_state(
        &prometheus(json!({"type": "Available", "status": "True", "observedGeneration": 1})),
        State::InProgress,
        "Prometheus generation is 2, but its Available condition is of generation 1",
    );
    // Its operator always reports `Available`: without it, it has not looked yet.
    let fresh = object(
        "monitoring.coreos.com/v1",
        "Prometheus",
        json!({}),
        json!(null),
    );
    assert_state(
        &fresh,
        State::InProgress,
        "Prometheus has no Available condition yet",
    );
    // Another kind without conditions is current once it exists.
    let widget = object("example.com/v1", "Prometheus", json!({}), json!(null));
    assert_state(&widget, State::Current, "Resource is current");
    // `Ready` comes first when both are there.
    let both = object(
        "example.com/v1",
        "Widget",
        json!({}),
        json!({"conditions": [{"type": "Available", "status": "False"},
            {"type": "Ready", "status": "True"}]}),
    );
    assert_state(&both, State::Current, "Resource is Ready");
}

#[test]
fn everything_else_is_current_once_it_exists_and_nothing_panics() {
    assert_state(
        &object("v1", "ConfigMap", json!({}), json!({})),
        State::Current,
        "current",
    );
    let mut deleting = object("v1", "ConfigMap", json!({}), json!({}));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_state(&deleting, State::InProgress, "being deleted");
    // Garbage in any field gives an answer, not a panic.
    for garbage in [
        json!(null),
        json!([]),
        json!({"kind": 7, "apiVersion": {}, "status": "x", "spec": []}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {"conditions": "no",
            "observedGeneration": "1"}, "spec": {"replicas": "two"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "status": {"containerStatuses": [1, {"state": 2}]}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"conditions": [null, 1]}}),
    ] {
        let _ = assess(&garbage);
    }
}

#[test]
fn kinds_without_status_are_assessed_as_from_their_object() {
    let kinds = [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
        ),
        ("scheduling.k8s.io/v1", "PriorityClass"),
    ];
    for (api_version, kind) in kinds {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        assert!(has_no_status(group, kind), "{kind}");
        let mut live = json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": { "name": "x", "generation": 1 },
        });
        assert_eq!(assess(&live), assess_without_status(false), "{kind}");
        live["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(assess(&live), assess_without_status(true), "{kind}");
    }
    for (group, kind) in [
        ("apps", "Deployment"),
        ("", "Service"),
        ("", "PersistentVolumeClaim"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("example.com", "ConfigMap"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ] {
        assert!(!has_no_status(group, kind), "{group}/{kind}");
    }
}
