//! What the steps share about a bundle's objects: each object's policy, the plan without the
//! ignored ones, counting and watching what an apply wrote, and removing objects.

use std::borrow::Cow;

use gantry_api::{DeletionPolicy, InventoryEntry};
use gantry_rules::object_policy::{ObjectPolicy, Ssa};
use gantry_rules::plan::Plan;

use super::pass::Pass;
use crate::cluster::apply::ApplyOutcome;
use crate::cluster::identity::Applier;
use crate::cluster::inventory::{Removal, remove};
use crate::error::{Error, Result};
use crate::state::Context;

/// Each object's policy, in the plan's order; every object whose annotations Gantry does not
/// understand is named in one error.
pub(crate) fn object_policies(plan: &Plan) -> Result<Vec<ObjectPolicy>> {
    let mut policies = Vec::with_capacity(plan.objects.len());
    let mut invalid = Vec::new();
    for object in &plan.objects {
        match ObjectPolicy::of(object.object.get()) {
            Ok(policy) => policies.push(policy),
            Err(error) => invalid.push(format!("{object}: {error}")),
        }
    }
    if invalid.is_empty() {
        Ok(policies)
    } else {
        Err(Error::InvalidObjectPolicy(invalid))
    }
}

/// The plan without its `Ignore` objects, and the policies of the others. Copied only when
/// something is ignored: a plan can weigh megabytes.
pub(crate) fn without_ignored(
    plan: &Plan,
    policies: Vec<ObjectPolicy>,
) -> (Cow<'_, Plan>, Vec<ObjectPolicy>) {
    if policies.iter().all(|policy| policy.ssa != Ssa::Ignore) {
        return (Cow::Borrowed(plan), policies);
    }
    let (objects, policies) = plan
        .objects
        .iter()
        .zip(policies)
        .filter(|(_, policy)| policy.ssa != Ssa::Ignore)
        .map(|(object, policy)| (object.clone(), policy))
        .unzip();
    (Cow::Owned(Plan { objects }), policies)
}

/// Counts what an apply wrote and left unchanged, and watches the objects of `plan` for drift
/// (after a restart the watches start here).
pub(crate) async fn count_and_watch(
    ctx: &Context,
    applier: &Applier,
    outcome: &ApplyOutcome,
    plan: &Plan,
) {
    ctx.metrics.objects_applied.inc_by(outcome.written as u64);
    ctx.metrics
        .objects_unchanged
        .inc_by(outcome.unchanged as u64);
    for object in &plan.objects {
        ctx.drift
            .ensure(
                &ctx.access,
                applier,
                &object.resource,
                object.namespace.as_deref(),
            )
            .await;
    }
}

/// Removes `entries` (in the order given) that are still managed by the bundle, deleting or
/// orphaning them as `policy` says. A failure names the object and the API server's message.
pub(crate) async fn remove_objects<'e>(
    pass: &Pass<'_>,
    applier: &Applier,
    entries: impl IntoIterator<Item = &'e InventoryEntry>,
    policy: DeletionPolicy,
) -> Result<(), (String, String)> {
    let ctx = pass.ctx;
    for entry in entries {
        let removed = remove(&applier.client, &ctx.kinds, entry, &pass.name, policy)
            .await
            .map_err(|(object, message)| {
                (object, format!("{message} (as {})", applier.describe()))
            })?;
        if removed == Removal::Deleted {
            ctx.metrics.objects_deleted.inc();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use gantry_rules::plan::plan_objects;
    use gantry_rules::plan::testing::{object, served};
    use serde_json::json;

    fn annotated(name: &str, annotations: serde_json::Value) -> gantry_image::BundleObject {
        object(
            "a.yaml",
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": name, "annotations": annotations } }),
        )
    }

    #[test]
    fn ignored_objects_leave_the_plan_and_bad_values_name_every_object() {
        let objects = vec![
            annotated("a", json!({})),
            annotated("b", json!({ "gantry.dev/ssa": "Ignore" })),
            annotated("c", json!({ "gantry.dev/ssa": "IfNotPresent" })),
        ];
        let plan = plan_objects(objects, "x", Some("n"), served).unwrap();
        let policies = object_policies(&plan).unwrap();
        let (kept, policies) = without_ignored(&plan, policies);
        let names: Vec<&str> = kept.objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(
            policies.iter().map(|p| p.ssa).collect::<Vec<_>>(),
            [Ssa::Apply, Ssa::IfNotPresent]
        );

        let objects = vec![
            annotated("a", json!({ "gantry.dev/ssa": "merge" })),
            annotated("b", json!({})),
            annotated("c", json!({ "gantry.dev/force": "yes" })),
        ];
        let plan = plan_objects(objects, "x", Some("n"), served).unwrap();
        match object_policies(&plan) {
            Err(Error::InvalidObjectPolicy(invalid)) => {
                assert_eq!(invalid.len(), 2, "{invalid:?}");
                assert!(
                    invalid[0].starts_with("ConfigMap n/a (a.yaml document "),
                    "{}",
                    invalid[0]
                );
                assert!(
                    invalid[0].contains("gantry.dev/ssa has the value \"merge\""),
                    "{}",
                    invalid[0]
                );
                assert!(
                    invalid[1].contains("gantry.dev/force has the value \"yes\""),
                    "{}",
                    invalid[1]
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
