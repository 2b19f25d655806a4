//! Health of what a bundle installed: kstatus rules per object ([`kstatus`]), the `Healthy`
//! condition, and whether `Ready` waits for it.
//!
//! After every apply the bundle's objects are assessed from what the apply learnt of them: the
//! API server's answer to each write, or the read that found an object unchanged. The drift
//! watches already watch every managed kind, so a status change of a managed object (a
//! Deployment's replicas, a Job's conditions) makes the bundle reconcile in full and be
//! assessed again: nothing polls. A visit that finds nothing changed (its tag resolved again,
//! no managed object moved since the last assessment) reads nothing: the verdict stands
//! ([`unchanged`]). The one timer is the health timeout: while objects are in progress the
//! bundle is requeued for the moment the timeout passes; that pass, which the apply did not
//! see, reads the objects again, once, and `Healthy` turns `False` (`HealthCheckFailed`). It
//! is assessed again on every change after that, and turns `True` once the objects are healthy.

use std::time::Duration;

use futures::StreamExt;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Condition, HealthCheckExpr, InventoryEntry};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::runtime::events::EventType;
use serde_json::Value;

use crate::cluster::apply::Observed;
use crate::cluster::discovery::kind_api;
use crate::cluster::live;
use crate::reconcile::pass::Pass;
use crate::state::Context;
use crate::state::metrics::HealthLabels;
use crate::status::{publish, set_condition};
use gantry_rules::conditions::find;
use gantry_rules::health::{explain_pods, judge, object_health, pod_selector, timeout_start};
use gantry_rules::health_rules;
use gantry_rules::kstatus::{self, Assessment, State, assess};
use gantry_rules::plan::describe;

/// The health step, after a successful apply: assesses every object of the inventory, sets
/// `Healthy`, and says when to come back at the latest (the end of the health timeout).
/// `observed` is what the apply learnt of each object of the inventory, in its order: objects
/// are assessed from it, and read only when it holds nothing of them.
pub(crate) async fn check(
    pass: &mut Pass<'_>,
    client: &kube::Client,
    observed: &[Observed],
) -> Option<Duration> {
    let ctx = pass.ctx;
    let rules = pass.health_check_exprs.as_slice();
    tracing::debug!(
        inventory = pass.status.inventory.len(),
        observed = observed.len(),
        seen_by_the_apply = observed.iter().filter(|o| o.view.is_some()).count(),
        "assessing health"
    );
    // Read several at once (as many as an apply writes at once): one after another, a
    // bundle's reads would cost a round trip each.
    let reads: Vec<_> = pass
        .status
        .inventory
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let rule = health_rules::rule_for(rules, &entry.group, &entry.version, &entry.kind);
            let seen = observed.get(i);
            let known = seen
                .filter(|_| rule.is_none() && kstatus::has_no_status(&entry.group, &entry.kind))
                .map(|seen| kstatus::assess_without_status(seen.being_deleted));
            let view = seen.and_then(|seen| seen.view.as_ref());
            async move {
                let assessment = match (known, view) {
                    (Some(assessment), _) => assessment,
                    (None, Some(view)) => assess_object(client, view, entry, rule).await,
                    (None, None) => assess_live(ctx, client, entry, rule).await,
                };
                (describe(entry), assessment)
            }
        })
        .collect();
    let objects: Vec<(String, Assessment)> = futures::stream::iter(reads)
        .buffered(ctx.settings.apply_concurrency.max(1))
        .collect()
        .await;
    let assessed: Vec<(&InventoryEntry, &Assessment)> = pass
        .status
        .inventory
        .iter()
        .zip(objects.iter().map(|(_, a)| a))
        .collect();
    let object_health = object_health(&assessed);
    pass.status.object_health = Some(object_health);
    let now = Timestamp::now();
    let verdict = judge(
        &objects,
        timeout_start(&pass.status.conditions, now),
        now,
        pass.health.timeout,
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

/// What the last verdict of `Healthy` is worth to a pass that found the objects as they were
/// when it was given (installed as at the last full check, no managed object moved since).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unchanged {
    /// The health timeout of objects in progress has passed (or there is no verdict): assess
    /// them again, reading them.
    Due,
    /// The verdict stands, until the timeout passes (`Some`: how long until then) or, without
    /// one left (`HealthCheckFailed`), until an object changes (`None`).
    Holds(Option<Duration>),
}

/// Whether objects unchanged since the verdict in `conditions` must be assessed again `now`,
/// with the health `timeout` in force: only time changes that verdict, and only once, from
/// `Progressing` to `HealthCheckFailed` when the timeout passes.
pub(crate) fn unchanged(conditions: &[Condition], now: Timestamp, timeout: Duration) -> Unchanged {
    let Some(healthy) = find(conditions, types::HEALTHY) else {
        return Unchanged::Due;
    };
    if healthy.reason != reasons::PROGRESSING {
        return Unchanged::Holds(None);
    }
    let elapsed = now
        .as_millisecond()
        .saturating_sub(timeout_start(conditions, now).as_millisecond());
    let left = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_sub(u64::try_from(elapsed).unwrap_or(0));
    match left {
        0 => Unchanged::Due,
        left => Unchanged::Holds(Some(Duration::from_millis(left))),
    }
}

/// Reads one object and assesses it; workloads that are not healthy are explained by their
/// Pods' container states (an image that cannot be pulled, a crash loop).
async fn assess_live(
    ctx: &Context,
    client: &kube::Client,
    entry: &InventoryEntry,
    rule: Option<&HealthCheckExpr>,
) -> Assessment {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let kind = match ctx.kinds.resolve(&ctx.client, &gvk).await {
        Ok(Some(kind)) => kind,
        Ok(None) => return not_readable("its kind is not served"),
        Err(error) => return not_readable(&error.to_string()),
    };
    let api = kind_api(client, &kind, entry.namespace.as_deref());
    let with_spec = live::spec_needed(&entry.group, &entry.kind);
    let object = match live::for_health(client, &api, &entry.name, with_spec).await {
        Ok(Some(live)) => live,
        Ok(None) => return not_readable("not found"),
        Err(error) => return not_readable(&error.to_string()),
    };
    assess_object(client, &object, entry, rule).await
}

/// Assesses `object` (as health sees it); workloads that are not healthy are explained by
/// their Pods' container states, once their controller has seen their current generation (its
/// Pods say nothing of a generation it has not acted on yet).
async fn assess_object(
    client: &kube::Client,
    object: &Value,
    entry: &InventoryEntry,
    rule: Option<&HealthCheckExpr>,
) -> Assessment {
    // A rule of the class or the bundle for this kind replaces the built-in ones.
    let mut assessment = match rule {
        Some(rule) => health_rules::assess(rule, object),
        None => assess(object),
    };
    if assessment.state != State::Current
        && !generation_unobserved(object)
        && let Some(namespace) = entry.namespace.as_deref()
        && let Some(selector) = pod_selector(object)
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

/// Whether the object's controller has not yet seen its current generation.
fn generation_unobserved(object: &Value) -> bool {
    let (generation, observed) = kstatus::generations(object);
    let status_empty = object
        .get("status")
        .and_then(Value::as_object)
        .is_none_or(|status| status.is_empty());
    matches!((generation, observed), (Some(g), Some(o)) if o < g) || status_empty
}

fn not_readable(why: &str) -> Assessment {
    Assessment {
        state: State::InProgress,
        message: format!("cannot be read: {why}"),
    }
}

/// Records a change of `Healthy` (its status or reason) in the metrics and as an Event.
async fn report_transition(pass: &Pass<'_>) {
    let before = find(&pass.written.conditions, types::HEALTHY)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let Some(after) = find(&pass.status.conditions, types::HEALTHY) else {
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

#[cfg(test)]
mod tests {
    use super::{Unchanged, generation_unobserved, unchanged};
    use gantry_api::Condition;
    use gantry_api::conditions::{reasons, types};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{Timestamp, ToSpan};
    use serde_json::json;
    use std::time::Duration;

    fn condition(type_: &str, ok: bool, reason: &str, since: Timestamp) -> Condition {
        Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: Time(since),
        }
    }

    #[test]
    fn an_unchanged_verdict_stands_until_the_timeout_passes() {
        let now = Timestamp::now();
        let installed = condition(
            types::INSTALLED,
            true,
            reasons::INSTALL_SUCCEEDED,
            now - 90.seconds(),
        );
        let progressing = |since: Timestamp| {
            vec![
                installed.clone(),
                condition(types::HEALTHY, false, reasons::PROGRESSING, since),
            ]
        };
        let timeout = Duration::from_secs(120);
        // In progress since the install, 90 s ago: nothing to read for another 30 s.
        assert_eq!(
            unchanged(&progressing(now - 90.seconds()), now, timeout),
            Unchanged::Holds(Some(Duration::from_secs(30)))
        );
        // Unhealthy again 10 s ago, after the install: the timeout counts from then.
        assert_eq!(
            unchanged(&progressing(now - 10.seconds()), now, timeout),
            Unchanged::Holds(Some(Duration::from_secs(110)))
        );
        // The timeout passed: the one assessment that reads the objects again.
        assert_eq!(
            unchanged(
                &progressing(now - 90.seconds()),
                now,
                Duration::from_secs(60)
            ),
            Unchanged::Due
        );
        assert_eq!(
            unchanged(
                &progressing(now - 90.seconds()),
                now,
                Duration::from_secs(90)
            ),
            Unchanged::Due
        );
        // Failed: only a change of an object can change that.
        let failed = vec![
            installed.clone(),
            condition(
                types::HEALTHY,
                false,
                reasons::HEALTH_CHECK_FAILED,
                now - 30.seconds(),
            ),
        ];
        assert_eq!(unchanged(&failed, now, timeout), Unchanged::Holds(None));
        // No verdict yet: assess.
        assert_eq!(unchanged(&[installed], now, timeout), Unchanged::Due);
    }

    #[test]
    fn a_generation_its_controller_has_not_acted_on_is_unobserved() {
        let object = |status: serde_json::Value| json!({ "metadata": { "generation": 2 }, "status": status });
        // Just created or just changed: the answer to the apply.
        assert!(generation_unobserved(&object(json!({}))));
        assert!(generation_unobserved(&object(
            json!({ "observedGeneration": 1 })
        )));
        assert!(generation_unobserved(
            &json!({ "metadata": { "generation": 1 } })
        ));
        // Acted on: its Pods tell why it is not available.
        assert!(!generation_unobserved(&object(
            json!({ "observedGeneration": 2 })
        )));
        // A Job has no observedGeneration: a status of any content is its controller's.
        assert!(!generation_unobserved(&object(
            json!({ "startTime": "2026-01-01T00:00:00Z" })
        )));
    }
}
