use std::time::Duration;

use gantry_api::conditions::{reasons, types};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{Timestamp, ToSpan};
use serde_json::json;

use super::super::kstatus::{Assessment, State};
use super::{explain_pods, judge, object_health, pod_selector, timeout_start};

fn object(name: &str, state: State, message: &str) -> (String, Assessment) {
    (
        name.to_string(),
        Assessment {
            state,
            message: message.to_string(),
        },
    )
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn all_current_is_healthy() {
    let now = Timestamp::now();
    let verdict = judge(
        &[object(
            "ConfigMap ns/a",
            State::Current,
            "Resource is current",
        )],
        now,
        now,
        MINUTE,
    );
    assert_eq!(verdict.reason, reasons::HEALTHY);
    assert_eq!(verdict.wake, None);
}

#[test]
fn in_progress_waits_until_the_timeout_then_fails_naming_the_objects() {
    let start = Timestamp::now();
    let objects = [
        object("ConfigMap ns/a", State::Current, ""),
        object(
            "Deployment.apps ns/web",
            State::InProgress,
            "Available: 0/1; Pod web-1: container web waiting: ImagePullBackOff",
        ),
    ];
    let early = judge(&objects, start, start + 20.seconds(), MINUTE);
    assert_eq!(early.reason, reasons::PROGRESSING);
    assert_eq!(early.wake, Some(Duration::from_secs(40)));
    assert!(
        early.message.contains("1 of 2 objects not healthy"),
        "{}",
        early.message
    );
    // The message names the deadline, so assessing again writes nothing new.
    let later = judge(&objects, start, start + 35.seconds(), MINUTE);
    assert_eq!(later.message, early.message);
    assert_eq!(later.wake, Some(Duration::from_secs(25)));
    let deadline = format!("{:.0}", start + 60.seconds());
    assert!(
        early
            .message
            .contains(&format!("(waiting until {deadline})")),
        "{}",
        early.message
    );
    let one = judge(&objects[1..], start, start, MINUTE);
    assert!(
        one.message.starts_with("1 of 1 object not healthy"),
        "{}",
        one.message
    );

    let late = judge(&objects, start, start + 61.seconds(), MINUTE);
    assert_eq!(late.reason, reasons::HEALTH_CHECK_FAILED);
    assert_eq!(late.wake, None);
    assert!(
        late.message
            .contains("after 60s:\n- Deployment.apps ns/web: Available: 0/1; Pod web-1: container web waiting: ImagePullBackOff"),
        "{}",
        late.message
    );
}

#[test]
fn a_failed_object_fails_at_once() {
    let now = Timestamp::now();
    let verdict = judge(
        &[object("Job.batch ns/migrate", State::Failed, "Job Failed")],
        now,
        now,
        MINUTE,
    );
    assert_eq!(verdict.reason, reasons::HEALTH_CHECK_FAILED);
    assert!(verdict.message.contains("Job.batch ns/migrate: Job Failed"));
}

#[test]
fn a_long_message_is_cut_on_a_character_boundary() {
    let now = Timestamp::now();
    let long = "é".repeat(5000);
    let verdict = judge(&[object("X a", State::Failed, &long)], now, now, MINUTE);
    assert!(verdict.message.len() < 4200);
}

fn at(
    conditions: &mut Vec<gantry_api::Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    t: Timestamp,
) {
    conditions.retain(|c| c.type_ != type_);
    conditions.push(gantry_api::Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(t),
    });
}

#[test]
fn the_timeout_counts_from_the_install_or_from_turning_unhealthy() {
    let now = Timestamp::now();
    let installed = now - 100.seconds();
    let mut conditions = Vec::new();
    at(
        &mut conditions,
        types::INSTALLED,
        true,
        reasons::INSTALL_SUCCEEDED,
        installed,
    );
    assert_eq!(
        timeout_start(&conditions, now),
        installed,
        "first assessment"
    );

    at(
        &mut conditions,
        types::HEALTHY,
        true,
        reasons::HEALTHY,
        now - 50.seconds(),
    );
    assert_eq!(timeout_start(&conditions, now), now, "healthy until now");

    let unhealthy = now - 10.seconds();
    at(
        &mut conditions,
        types::HEALTHY,
        false,
        reasons::PROGRESSING,
        unhealthy,
    );
    assert_eq!(timeout_start(&conditions, now), unhealthy);

    let reinstalled = now - 1.seconds();
    at(
        &mut conditions,
        types::INSTALLED,
        true,
        reasons::INSTALL_SUCCEEDED,
        reinstalled,
    );
    assert_eq!(
        timeout_start(&conditions, now),
        reinstalled,
        "new content starts over"
    );
}

#[test]
fn workloads_are_explained_by_their_pods() {
    let deployment = json!({"kind": "Deployment",
        "spec": {"selector": {"matchLabels": {"app": "web", "tier": "front"}}}});
    assert_eq!(
        pod_selector(&deployment).as_deref(),
        Some("app=web,tier=front")
    );
    assert_eq!(pod_selector(&json!({"kind": "ConfigMap"})), None);
    assert_eq!(pod_selector(&json!({"kind": "Job", "spec": {}})), None);
    let pods = [
        json!({"metadata": {"name": "ok"}, "status": {"containerStatuses": [
            {"name": "web", "state": {"running": {}}}]}}),
        json!({"metadata": {"name": "gone"}, "status": {"phase": "Failed", "containerStatuses": [
            {"name": "web", "state": {"terminated": {"exitCode": 137,
                "reason": "ContainerStatusUnknown"}}}]}}),
        json!({"metadata": {"name": "web-1"}, "status": {"containerStatuses": [
            {"name": "web", "state": {"waiting": {"reason": "ErrImagePull"}}}]}}),
    ];
    assert_eq!(
        explain_pods(&pods),
        "; Pod web-1: container web waiting: ErrImagePull; Pod gone: container web terminated: ContainerStatusUnknown",
        "Pods still running come first"
    );
}

#[test]
fn counts_read_as_english() {
    assert_eq!(crate::objects(1), "1 object");
    assert_eq!(crate::objects(0), "0 objects");
    assert_eq!(crate::objects(3), "3 objects");
}

#[test]
fn object_health_counts_every_state_and_lists_failed_objects_first_capped() {
    let entry = |name: String| gantry_api::InventoryEntry {
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
        namespace: Some("ns".into()),
        name,
    };
    let entries: Vec<gantry_api::InventoryEntry> =
        (0..30).map(|i| entry(format!("d{i}"))).collect();
    let assessment = |i: usize| Assessment {
        state: match i {
            0..=4 => State::Current,
            25 => State::Failed,
            _ => State::InProgress,
        },
        message: if i == 6 {
            "é".repeat(400)
        } else {
            format!("object {i}")
        },
    };
    let assessments: Vec<Assessment> = (0..30).map(assessment).collect();
    let pairs: Vec<_> = entries.iter().zip(assessments.iter()).collect();
    let health = object_health(&pairs);
    assert_eq!(
        (health.healthy, health.progressing, health.failed),
        (5, 24, 1)
    );
    assert_eq!(health.not_healthy.len(), gantry_api::NOT_HEALTHY_LIMIT);
    assert_eq!(health.not_healthy[0].name, "d25", "failed first");
    assert_eq!(health.not_healthy[0].state, "Failed");
    assert_eq!(health.not_healthy[1].name, "d5", "then in inventory order");
    assert_eq!(health.not_healthy[1].state, "Progressing");
    let long = &health.not_healthy[2].message;
    assert!(long.len() <= 512 && long.ends_with('…'), "{}", long.len());
    assert!(health.not_healthy[1].is(&entries[5]));
    assert!(!health.not_healthy[1].is(&entries[6]));
}
