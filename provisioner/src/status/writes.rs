//! Writing statuses: a bundle's (with the Event a change of `Ready` deserves, and the progress
//! shown before a long step) and a class's, by server-side apply as field manager `gantry`.

use crate::cluster::writes::own_apply;
use gantry_api::{
    Bundle, BundleStatus, FIELD_MANAGER, ProvisionerClass, ProvisionerClassStatus,
    UNINSTALL_FINALIZER,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::events::{publish, ready_transition};
use super::message::set_short_message;
use super::{Facts, summarize};
use crate::cluster::errors::is_not_found;
use crate::error::Result;
use crate::state::Context;

/// Whether two statuses differ in what the controller writes (everything but `approval`,
/// and condition times, which only move when a status flips).
pub fn differs(current: &BundleStatus, desired: &BundleStatus) -> bool {
    comparable(current) != comparable(desired)
}

fn comparable(status: &BundleStatus) -> BundleStatus {
    let mut status = status.clone();
    status.approval = None;
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    for c in &mut status.conditions {
        c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
    }
    status
}

/// What a write changes, for the debug log: the status fields, and the conditions by type.
fn changes(current: &BundleStatus, desired: &BundleStatus) -> Vec<String> {
    let as_map = |s: &BundleStatus| match serde_json::to_value(comparable(s)) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (before, after) = (as_map(current), as_map(desired));
    let mut changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|key| *key != "conditions" && before.get(*key) != after.get(*key))
        .map(|key| match key.as_str() {
            // Derived from the content alone: a change without new content is worth seeing.
            "requestedPermissions" => format!(
                "requestedPermissions: {} -> {}",
                before.get(key).map(Value::to_string).unwrap_or_default(),
                after.get(key).map(Value::to_string).unwrap_or_default()
            ),
            _ => key.to_string(),
        })
        .collect();
    changed.sort();
    changed.dedup();
    for condition in &desired.conditions {
        let old = current
            .conditions
            .iter()
            .find(|c| c.type_ == condition.type_);
        if old.is_none_or(|old| {
            (&old.status, &old.reason, &old.message)
                != (&condition.status, &condition.reason, &condition.message)
        }) {
            changed.push(format!(
                "{}={} {}: {}",
                condition.type_, condition.status, condition.reason, condition.message
            ));
        }
    }
    changed
}

/// Shows work in progress (`Unpacking`, `Installing`) before a long step: writes the status as it
/// stands, summarised, and remembers it as what the API server holds.
pub async fn show_progress(
    bundle: &Bundle,
    ctx: &Context,
    status: &BundleStatus,
    facts: &Facts<'_>,
    written: &mut BundleStatus,
) -> Result<()> {
    let mut shown = status.clone();
    shown.observed_generation = bundle.metadata.generation;
    summarize(&mut shown, facts);
    write_bundle_status(bundle, ctx, written, &shown).await?;
    *written = shown;
    Ok(())
}

/// Writes the status when it changed, with server-side apply as field manager `gantry`: the
/// approval, owned by approvers, is never part of what is sent, so it is never touched. A change
/// of `Ready` is recorded as an Event.
pub async fn write_bundle_status(
    bundle: &Bundle,
    ctx: &Context,
    current: &BundleStatus,
    desired: &BundleStatus,
) -> Result<()> {
    // Derived last, from `Ready` as every step left it.
    let mut desired = desired.clone();
    set_short_message(&mut desired);
    let desired = &desired;
    if !differs(current, desired) {
        return Ok(());
    }
    // A bundle that was uninstalled is gone: nothing to write.
    if bundle.metadata.deletion_timestamp.is_some()
        && !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER)
    {
        return Ok(());
    }
    tracing::debug!(
        bundle = %bundle.name_any(),
        changes = ?changes(current, desired),
        "writing the bundle's status"
    );
    let mut owned = desired.clone();
    owned.approval = None;
    match apply_status::<Bundle>(ctx, &bundle.name_any(), &owned).await {
        Ok(written) => ctx.written.record(
            &bundle.name_any(),
            written.metadata.resource_version.as_deref(),
        ),
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.status_writes.inc();
    if let Some((type_, reason, message)) = ready_transition(current, desired) {
        publish(ctx, bundle, type_, &reason, &message).await;
    }
    Ok(())
}

/// Writes a class's status when it changed (field manager `gantry`).
pub async fn write_class_status(
    class: &ProvisionerClass,
    ctx: &Context,
    current: &ProvisionerClassStatus,
    desired: &ProvisionerClassStatus,
) -> Result<()> {
    if same_class_status(current, desired) {
        return Ok(());
    }
    apply_status::<ProvisionerClass>(ctx, &class.name_any(), desired).await?;
    Ok(())
}

/// Server-side applies `status` to the cluster-scoped object `name` of kind `K`, as field
/// manager `gantry`.
async fn apply_status<K>(ctx: &Context, name: &str, status: &impl Serialize) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": name },
        "status": status,
    });
    Api::<K>::all(ctx.client.clone())
        .patch_status(name, &own_apply(FIELD_MANAGER), &Patch::Apply(&patch))
        .await
}

fn same_class_status(a: &ProvisionerClassStatus, b: &ProvisionerClassStatus) -> bool {
    let key = |s: &ProvisionerClassStatus| {
        (
            s.observed_generation,
            s.conditions
                .iter()
                .map(|c| {
                    (
                        c.type_.clone(),
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::Approval;
    use gantry_api::conditions::{reasons, types};

    use crate::status::status_with;

    #[test]
    fn changes_name_the_fields_and_conditions_a_write_changes() {
        let a = status_with(&[
            (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
            (types::HEALTHY, true, reasons::HEALTHY),
        ]);
        let mut b = status_with(&[
            (types::UNPACKED, true, reasons::UNPACK_SUCCEEDED),
            (types::HEALTHY, false, reasons::PROGRESSING),
        ]);
        b.resolved_image = Some("127.0.0.1:5000/b@sha256:00".into());
        let changes = changes(&a, &b);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(changes[0], "resolvedImage");
        assert!(
            changes[1].starts_with(&format!(
                "{}=False {}",
                types::HEALTHY,
                reasons::PROGRESSING
            )),
            "{changes:?}"
        );
        assert!(super::changes(&a, &a).is_empty());
        let mut c = a.clone();
        c.requested_permissions = Some(Default::default());
        let changes = super::changes(&a, &c);
        assert!(
            changes[0].starts_with("requestedPermissions:  -> {"),
            "the permissions before and after: {changes:?}"
        );
    }

    #[test]
    fn differs_ignores_approval_and_times() {
        let a = status_with(&[(types::UNPACKED, true, reasons::UNPACK_SUCCEEDED)]);
        let mut b = a.clone();
        b.conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        b.approval = Some(Approval::of(
            gantry_api::ApprovalDecision::Approved,
            "sha256:00",
        ));
        assert!(!differs(&a, &b));
        b.phase = Some(gantry_api::BundlePhase::Installed);
        assert!(differs(&a, &b));
    }
}
