//! Steps 6 and 7: apply the plan, then prune what the new content no longer has, and record
//! the inventory.

use std::collections::HashSet;

use gantry_api::conditions::{reasons, types};
use gantry_api::{InventoryEntry, ProvisionerClass};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

use super::unpack::Content;
use super::{Flow, Pass, installed_fingerprint, remove_objects};
use crate::controller::apply::{ApplySettings, apply};
use crate::controller::context::Context;
use crate::controller::error::{Error, Result};
use crate::controller::identity::Applier;
use crate::controller::plan::Plan;
use crate::controller::status::condition;

/// Applies, prunes, records the inventory and sets `Installed`.
pub(super) async fn apply_and_prune(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    content: &Content,
    plan: &Plan,
    applier: &Applier,
) -> Result<Flow<()>> {
    let ctx = pass.ctx;
    // Objects live as desired are skipped only when this exact content (and spec) was
    // installed before: a new content or spec is written in full, so fields it dropped go away.
    let installed_before = condition(&pass.status.conditions, types::INSTALLED)
        .is_some_and(|c| c.status == "True" && c.observed_generation == pass.generation);
    let write_all = !installed_before || content.content_before != pass.status.content_digest;
    check_install_namespace(pass, plan).await?;
    if write_all {
        pass.set_condition(
            types::INSTALLED,
            false,
            reasons::INSTALLING,
            format!("applying {} objects", plan.objects.len()),
        );
        pass.show_progress().await?;
    }
    let outcome = apply(
        &applier.client,
        &ctx.kinds,
        plan,
        &pass.name,
        &applier.describe(),
        ApplySettings {
            concurrency: ctx.settings.apply_concurrency,
            crd_timeout: ctx.settings.crd_timeout,
            write_all,
        },
    )
    .await?;
    ctx.metrics.objects_applied.inc_by(outcome.written as u64);
    ctx.metrics
        .objects_unchanged
        .inc_by(outcome.unchanged as u64);
    for object in &plan.objects {
        ctx.drift
            .ensure(applier, &object.resource, object.namespace.as_deref());
    }

    let inventory: Vec<InventoryEntry> = plan.objects.iter().map(|o| o.inventory_entry()).collect();
    prune(pass, applier, &inventory).await?;
    pass.status.inventory = inventory;
    pass.set_condition(
        types::INSTALLED,
        true,
        reasons::INSTALL_SUCCEEDED,
        format!("{} objects installed", plan.objects.len()),
    );
    if let Some(check) =
        installed_fingerprint(pass.bundle, class, &content.resolved_image, &pass.status)
    {
        ctx.checked.record(&pass.name, check);
    }
    if content.content_before != pass.status.content_digest {
        remove_older_content(ctx, &pass.name, pass.status.content_digest.as_deref()).await;
    }
    Ok(Flow::Continue(()))
}

/// Removes, in reverse order, the objects of the recorded inventory that `keep` no longer has.
/// An object is the same whatever version names it: one that moved to another version of its
/// kind is kept.
async fn prune(pass: &Pass<'_>, applier: &Applier, keep: &[InventoryEntry]) -> Result<()> {
    let keep: HashSet<ObjectKey> = keep.iter().map(object_key).collect();
    let gone = pass
        .status
        .inventory
        .iter()
        .rev()
        .filter(|entry| !keep.contains(&object_key(entry)))
        .collect::<Vec<_>>();
    // Collected first: a filtering iterator held across the removals' awaits would make the
    // reconcile future not `Send` for all lifetimes.
    remove_objects(pass, applier, gone)
        .await
        .map_err(|(object, message)| Error::Prune { object, message })
}

/// What identifies an object on the API server: group, kind, namespace and name.
type ObjectKey<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

fn object_key(entry: &InventoryEntry) -> ObjectKey<'_> {
    (
        &entry.group,
        &entry.kind,
        entry.namespace.as_deref(),
        &entry.name,
    )
}

/// An install namespace that objects use must exist, unless the bundle creates it.
async fn check_install_namespace(pass: &Pass<'_>, plan: &Plan) -> Result<()> {
    let Some(namespace) = pass.bundle.spec.install_namespace.as_deref() else {
        return Ok(());
    };
    let used = plan
        .objects
        .iter()
        .any(|o| o.namespace.as_deref() == Some(namespace));
    if !used || plan.created_namespaces().any(|n| n == namespace) {
        return Ok(());
    }
    let namespaces: Api<Namespace> = Api::all(pass.ctx.client.clone());
    match namespaces.get_opt(namespace).await? {
        Some(_) => Ok(()),
        None => Err(Error::NamespaceNotFound(namespace.to_string())),
    }
}

/// Once new content is installed, the tarballs of earlier content are of no use: remove them.
/// A failure here only costs space, so it is logged, not reported on the bundle.
async fn remove_older_content(ctx: &Context, bundle: &str, current: Option<&str>) {
    let current = current.map(|d| d.trim_start_matches("sha256:"));
    let stored = match ctx.storage.list(bundle).await {
        Ok(stored) => stored,
        Err(error) => {
            tracing::warn!(%bundle, %error, "listing stored content failed; older tarballs stay");
            return;
        }
    };
    for hex in stored.iter().filter(|hex| Some(hex.as_str()) != current) {
        if let Err(error) = ctx.storage.delete(bundle, hex).await {
            tracing::warn!(%bundle, digest = %hex, %error, "removing older content failed");
        }
    }
}
