//! Step 4: the plan (kinds resolved, namespaces defaulted, the bundle label added), and what an
//! approver reviews.

use super::unpack::Content;
use super::{Flow, Pass};
use crate::controller::error::Result;
use crate::controller::identity::Applier;
use crate::controller::permissions::{Scope, requested_permissions};
use crate::controller::plan::{Plan, plan as plan_objects};

/// Plans the content and fills in `status.requestedPermissions`.
pub(super) async fn plan(
    pass: &mut Pass<'_>,
    content: &mut Content,
    applier: &Applier,
) -> Result<Flow<Plan>> {
    let ctx = pass.ctx;
    // The plan holds the objects as they are applied: the parsed content is moved into it, so
    // that a bundle of large CRDs is not held twice through the apply.
    let plan = plan_objects(
        &ctx.client,
        &ctx.kinds,
        std::mem::take(&mut content.objects),
        &pass.name,
        pass.bundle.spec.install_namespace.as_deref(),
    )
    .await?;
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
