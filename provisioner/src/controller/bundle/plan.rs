//! Step 4: the plan (kinds resolved, namespaces defaulted, the bundle label added), and what an
//! approver reviews.

use super::unpack::Content;
use super::{Flow, Pass};
use crate::controller::error::Result;
use crate::controller::permissions::requested_permissions;
use crate::controller::plan::{Plan, plan as plan_objects};

/// Plans the content and fills in `status.requestedPermissions`.
pub(super) async fn plan(pass: &mut Pass<'_>, content: &Content) -> Result<Flow<Plan>> {
    let ctx = pass.ctx;
    let plan = plan_objects(
        &ctx.client,
        &ctx.kinds,
        &content.objects,
        &pass.name,
        pass.bundle.spec.install_namespace.as_deref(),
    )
    .await?;
    pass.status.requested_permissions = Some(requested_permissions(&plan.objects));
    Ok(Flow::Continue(plan))
}
