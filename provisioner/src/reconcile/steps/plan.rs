//! Step 4: the plan (kinds resolved, namespaces defaulted, `spec.patches` applied, the bundle
//! label added, `spec.images` rewritten), and what an approver reviews.

use gantry_api::InstalledSpec;
use gantry_api::conditions::reasons;
use gantry_api::patches::Patches;
use gantry_image::BundleObject;
use kube::runtime::events::EventType;

use super::unpack::Content;
use crate::cluster::discovery::served_kinds;
use crate::cluster::identity::Applier;
use crate::error::{Error, Result};
use crate::reconcile::pass::{Flow, Pass};
use crate::state::Context;
use crate::status::publish;
use gantry_rules::permissions::{Scope, requested_permissions};
use gantry_rules::plan::{Plan, plan_patched};

/// Plans the content and fills in `status.requestedPermissions`.
pub(crate) async fn plan(
    pass: &mut Pass<'_>,
    content: &mut Content,
    applier: &Applier,
) -> Result<Flow<Plan>> {
    let ctx = pass.ctx;
    // The plan holds the objects as they are applied: the parsed content is moved into it, so
    // that a bundle of large CRDs is not held twice through the apply.
    let objects = std::mem::take(&mut content.objects);
    let spec = InstalledSpec::of(&pass.bundle.spec);
    let (plan, unmatched) = planned(ctx, &pass.name, objects, &spec).await?;
    if !unmatched.is_empty() {
        let message = format!(
            "{} selected no object of the content; nothing was patched by {}",
            unmatched.join(", "),
            if unmatched.len() == 1 { "it" } else { "them" }
        );
        tracing::warn!(bundle = %pass.name, "{message}");
        publish(
            ctx,
            pass.bundle,
            EventType::Warning,
            reasons::PATCH_UNMATCHED,
            &message,
        )
        .await;
    }
    let mut permissions = requested_permissions(
        &plan.objects,
        &Scope {
            install_namespace: pass.bundle.spec.install_namespace.as_deref(),
            provisioner_namespace: &ctx.settings.namespace,
        },
    );
    permissions.service_account = applier.account.clone();
    pass.status.requested_permissions = Some(permissions);
    Ok(Flow::Continue(plan))
}

/// The objects of bundle `name` as they are applied with the fields of `spec` (the bundle's
/// own, or those its installed content was applied with); and the patches that selected none.
pub(super) async fn planned(
    ctx: &Context,
    name: &str,
    objects: Vec<BundleObject>,
    spec: &InstalledSpec,
) -> Result<(Plan, Vec<String>)> {
    // Checked before anything is read: a patch that does not parse fails whatever the content.
    let patches = Patches::parse(&spec.patches)?;
    let served = served_kinds(&ctx.client, &ctx.kinds, &objects).await?;
    // Patches first, then the image rewrites (as Kustomize orders them): a container a patch
    // adds gets its image rewritten too. Every check after this one (namespaces, permissions,
    // the approval) is about the patched, rewritten objects: the ones applied.
    let (mut plan, unmatched) = plan_patched(
        objects,
        name,
        spec.install_namespace.as_deref(),
        &patches,
        |gvk| served.get(gvk).cloned(),
    )?;
    plan.rewrite_images(&spec.images)?;
    // Last: a field another controller owns is left out whatever the patches made of it.
    gantry_api::ignore::validate(&spec.ignore).map_err(Error::InvalidIgnoreRule)?;
    plan.ignore_fields(&spec.ignore)?;
    Ok((plan, unmatched))
}
