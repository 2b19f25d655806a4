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

use std::time::Duration;

use futures::StreamExt;

use gantry_api::conditions::{reasons, types};
use gantry_api::{HealthCheckExpr, InventoryEntry};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::runtime::events::EventType;
use serde_json::Value;

use crate::cluster::live;
use crate::policy::health::{explain_pods, judge, object_health, pod_selector, timeout_start};
use crate::policy::health_rules;
use crate::policy::kstatus::{self, Assessment, State, assess};
use crate::policy::plan::describe;
use crate::reconcile::Pass;
use crate::state::Context;
use crate::state::metrics::HealthLabels;
use crate::status::{condition, publish, set_condition};

/// The health step, after a successful apply: assesses every object of the inventory, sets
/// `Healthy`, and says when to come back at the latest (the end of the health timeout).
/// `being_deleted` is what the apply learnt of each object of the inventory, in its order:
/// objects of kinds without status are assessed from it, without a read.
pub(crate) async fn check(
    pass: &mut Pass<'_>,
    client: &kube::Client,
    being_deleted: &[bool],
) -> Option<Duration> {
    let ctx = pass.ctx;
    let rules = pass.health_check_exprs.as_slice();
    // Read several at once (as many as an apply writes at once): one after another, a
    // bundle's reads would cost a round trip each.
    let reads: Vec<_> = pass
        .status
        .inventory
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let rule = health_rules::rule_for(rules, &entry.group, &entry.version, &entry.kind);
            let known = being_deleted
                .get(i)
                .filter(|_| rule.is_none() && kstatus::has_no_status(&entry.group, &entry.kind))
                .map(|deleting| kstatus::assess_without_status(*deleting));
            async move {
                let assessment = match known {
                    Some(assessment) => assessment,
                    None => assess_live(ctx, client, entry, rule).await,
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
    let api = kind.api(client, entry.namespace.as_deref());
    let with_spec = live::spec_needed(&entry.group, &entry.kind);
    let object = match live::for_health(client, &api, &entry.name, with_spec).await {
        Ok(Some(live)) => live,
        Ok(None) => return not_readable("not found"),
        Err(error) => return not_readable(&error.to_string()),
    };
    // A rule of the class or the bundle for this kind replaces the built-in ones.
    let mut assessment = match rule {
        Some(rule) => health_rules::assess(rule, &object),
        None => assess(&object),
    };
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
