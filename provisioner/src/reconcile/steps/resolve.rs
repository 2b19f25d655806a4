//! Step 2: the image reference to a digest, and the shortcut for bundles that nothing changed.

use gantry_api::{BundleStatus, ProvisionerClass, PullMode};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::error::{Error, Result};
use crate::reconcile::pass::{
    Flow, Outcome, Pass, installed_fingerprint, next_visit, reconcile_pending,
};
use crate::reconcile::timing;
use crate::source::registry::{SharedClient, digest_of, is_digest_reference};
use crate::status::record_history;
use gantry_api::conditions::types;
use gantry_rules::conditions::{ConditionStatus, find};

/// A resolved reference.
pub(crate) struct Resolved {
    /// `repo@sha256:…` of the top-level manifest.
    pub image: String,
    /// The registry client, when resolving needed one: the pull reuses it.
    pub registry: Option<SharedClient>,
}

/// What resolving found.
pub(crate) enum Resolution {
    /// Go on with the install.
    Resolved(Resolved),
    /// Installed as at its last full check, nothing moved since, but its objects were not all
    /// healthy then: only their health is to be looked at again.
    Unhealthy,
}

/// Resolves `spec.image`, asking the registry only when the last answer may be stale. Stops
/// the pass when the bundle is installed as it was at its last full check and no managed
/// object moved since: there is nothing to read or write until the next resync (but the health
/// of objects that were not healthy).
pub(crate) async fn resolve(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
) -> Result<Flow<Resolution>> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    let image = bundle.spec.image.as_str();
    if class.spec.require_digest && !is_digest_reference(image) {
        return Err(Error::DigestRequired {
            class: class.name_any(),
            image: image.to_string(),
        });
    }
    // The registry client (secrets read, TLS set up) is made only when the registry is asked.
    let resolved = match reusable_resolution(pass) {
        Some(image) => Resolved {
            image,
            registry: None,
        },
        // The node's runtime resolves the reference when it pulls (see unpack).
        None if class.spec.pull_mode == PullMode::Node => Resolved {
            image: image.to_string(),
            registry: None,
        },
        None => {
            let client = ctx.registry_client(class, bundle).await?;
            let resolved = client
                .resolve(image)
                .await
                .map_err(|e| Error::from_image(image, e))?
                .pinned();
            ctx.resolved.record(&pass.name, image.to_string());
            Resolved {
                image: resolved,
                registry: Some(client),
            }
        }
    };
    tracing::Span::current().record(
        "digest",
        digest_of(&resolved.image).unwrap_or(&resolved.image),
    );
    record_resolution(&mut pass.status, &resolved.image);

    let check = installed_fingerprint(bundle, class, &resolved.image, &pass.status);
    if let Some(check) = check
        && !reconcile_pending(pass)
        && !ctx.drift.take_dirty(&pass.name)
        && ctx
            .checked
            .is_fresh(&pass.name, &check, ctx.settings.resync_interval)
    {
        backfill_installed(&mut pass.status, &resolved.image);
        if find(&pass.status.conditions, types::HEALTHY)
            .is_some_and(|c| c.status != ConditionStatus::True)
        {
            return Ok(Flow::Continue(Resolution::Unhealthy));
        }
        return Ok(Flow::Stop(Outcome::Done(Action::requeue(next_visit(
            bundle, ctx,
        )))));
    }
    Ok(Flow::Continue(Resolution::Resolved(resolved)))
}

/// `spec.image` must be an image reference: one that is not (`/repo:tag`, an unset variable
/// before it) is refused before any request, naming the field and the value; no registry or
/// retry can answer for it.
pub(crate) fn check_reference(image: &str) -> Result<()> {
    match gantry_image::parse_reference(image) {
        Err(gantry_image::ImageError::InvalidReference { reason, .. }) => {
            Err(Error::InvalidImageReference {
                value: image.to_string(),
                reason,
            })
        }
        _ => Ok(()),
    }
}

/// A bundle installed before `installedImage` and `history` existed gets them from what is
/// installed now.
fn backfill_installed(status: &mut BundleStatus, installed: &str) {
    if status.installed_image.is_some() {
        return;
    }
    status.installed_image = Some(installed.to_string());
    if status.history.is_empty() {
        let since =
            find(&status.conditions, types::INSTALLED).map(|c| c.last_transition_time.clone());
        if let Some(since) = since {
            record_history(status, installed, since);
        }
    }
}

/// Records a digest the reference resolved to in `status.resolvedImage` at once, so that a
/// digest whose pull or content fails is named there, not hidden behind the previous one. The
/// content fields described the previous digest: they are cleared until the new content is
/// stored. `installedImage` and the inventory still name what is installed.
fn record_resolution(status: &mut BundleStatus, resolved: &str) {
    // `pullMode: Node` resolves on the node: a tag is not a resolution.
    if !is_digest_reference(resolved) || status.resolved_image.as_deref() == Some(resolved) {
        return;
    }
    status.resolved_image = Some(resolved.to_string());
    status.manifest_digest = None;
    status.platform = None;
    status.content_url = None;
    status.content_digest = None;
    status.requested_permissions = None;
}

/// The resolved image to reuse without asking the registry: a digest reference is its own
/// answer; a tag is asked again when the spec changed, the resolve interval passed, or a
/// reconcile was requested.
fn reusable_resolution(pass: &Pass<'_>) -> Option<String> {
    let previous = pass.status.resolved_image.clone()?;
    if pass.status.observed_generation != pass.generation || reconcile_pending(pass) {
        return None;
    }
    let ctx = pass.ctx;
    ctx.resolved
        .is_fresh(
            &pass.name,
            &pass.bundle.spec.image,
            timing::resolve_interval(pass.bundle, &ctx.settings),
        )
        .then_some(previous)
}
