//! Step 4: the plan (kinds resolved, namespaces defaulted, the bundle label added), and what an
//! approver reviews.

use super::unpack::Content;
use crate::cluster::discovery::served_kinds;
use crate::cluster::identity::Applier;
use crate::error::Result;
use crate::policy::permissions::{Scope, requested_permissions};
use crate::policy::plan::{Plan, plan_objects};
use crate::reconcile::{Flow, Pass};

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
    let served = served_kinds(&ctx.client, &ctx.kinds, &objects).await?;
    let mut plan = plan_objects(
        objects,
        &pass.name,
        pass.bundle.spec.install_namespace.as_deref(),
        |gvk| served.get(gvk).cloned(),
    )?;
    plan.rewrite_images(&pass.bundle.spec.images)?;
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
