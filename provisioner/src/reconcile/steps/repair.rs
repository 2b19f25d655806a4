//! Drift repair of the installed content while new content or a new spec is held back before
//! anything of it is written (it failed to resolve, pull, unpack, verify or plan, or the checks
//! before the first write refused it, or it awaits an approver): the objects of the last
//! installed content, read back from its
//! stored tarball and planned with the fields of the spec it was installed with
//! (`status.installedSpec`), are compared with what is live, and what differs or is missing is
//! applied again, as on any pass over installed content. No dry run: that content was judged
//! when it was installed.

use gantry_api::{DriftMode, ProvisionerClass};
use gantry_image::EffectiveLimits;

use super::{plan, unpack};
use crate::cluster::apply::{ApplySettings, check, write};
use crate::cluster::identity::Applier;
use crate::error::{Error, Result};
use crate::reconcile::objects::{count_and_watch, object_policies, without_ignored};
use crate::reconcile::pass::{Pass, correction_forced};
use crate::reconcile::timing;
use gantry_rules::objects;

/// Repairs what drifted of the installed content; `false` when there is nothing to repair from
/// (nothing installed yet, or installed before the installed content was recorded) or the
/// bundle only reports drift (`spec.drift: Report`).
pub(crate) async fn installed_content(
    pass: &Pass<'_>,
    class: &ProvisionerClass,
    applier: &Applier,
) -> Result<bool> {
    let ctx = pass.ctx;
    let status = &pass.status;
    let (Some(digest), Some(spec), Some(_)) = (
        status.installed_content_digest.as_deref(),
        status.installed_spec.as_ref(),
        status.installed_image.as_ref(),
    ) else {
        return Ok(false);
    };
    if pass.bundle.spec.drift == Some(DriftMode::Report) && !correction_forced(pass) {
        return Ok(false);
    }
    let limits = EffectiveLimits::from_api(class.spec.limits.as_ref());
    let objects_read = unpack::read_stored(pass, digest, &limits).await?;
    let (planned, _) = plan::planned(ctx, &pass.name, objects_read, spec).await?;
    let policies = object_policies(&planned)?;
    let (planned, policies) = without_ignored(&planned, policies);
    let planned = planned.as_ref();
    let settings = ApplySettings {
        concurrency: ctx.settings.apply_concurrency,
        crd_timeout: ctx.settings.crd_timeout,
        write_all: false,
    };
    let claimed: Vec<Option<String>> = planned
        .objects
        .iter()
        .map(|object| ctx.claims.claimant(&object.inventory_entry(), &pass.name))
        .collect();
    let identity = applier.describe();
    let repairing = async {
        let checked = check(
            &applier.client,
            planned,
            &policies,
            &pass.name,
            &claimed,
            &identity,
            &settings,
            &ctx.access,
        )
        .await?;
        write(
            &applier.client,
            &ctx.kinds,
            planned,
            &identity,
            settings,
            checked,
        )
        .await
    };
    let timeout = timing::apply_timeout(pass.bundle, &ctx.settings);
    let outcome = tokio::time::timeout(timeout, repairing)
        .await
        .map_err(|_| Error::Apply {
            object: objects(planned.objects.len()),
            message: format!(
                "repair not done within {}",
                gantry_rules::duration::GoDuration(timeout)
            ),
        })??;
    // After a restart the watches start here: a failing bundle has no successful pass to
    // start them.
    count_and_watch(ctx, applier, &outcome, planned).await;
    if outcome.written > 0 {
        tracing::info!(
            bundle = %pass.name,
            written = outcome.written,
            "drift of the installed content repaired while the new content or spec fails"
        );
    }
    Ok(true)
}
