//! Step 2: the image reference to a digest, and the shortcut for bundles that nothing changed.

use gantry_api::{ProvisionerClass, PullMode};
use gantry_image::RegistryClient;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::{Flow, Outcome, Pass, installed_fingerprint, next_visit, reconcile_pending};
use crate::controller::error::{Error, Result};
use crate::controller::source::{digest_of, is_digest_reference, registry_client};

/// A resolved reference.
pub(super) struct Resolved {
    /// `repo@sha256:…` of the top-level manifest.
    pub image: String,
    /// The registry client, when resolving needed one: the pull reuses it.
    pub registry: Option<RegistryClient>,
}

/// Resolves `spec.image`, asking the registry only when the last answer may be stale. Stops
/// the pass when the bundle is installed as it was at its last full check and no managed
/// object moved since: there is nothing to read or write until the next resync.
pub(super) async fn resolve(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
) -> Result<Flow<Resolved>> {
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
            let client = registry_client(ctx, class, bundle).await?;
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

    let check = installed_fingerprint(bundle, class, &resolved.image, &pass.status);
    if let Some(check) = check
        && !reconcile_pending(pass)
        && !ctx.drift.take_dirty(&pass.name)
        && ctx
            .checked
            .is_fresh(&pass.name, &check, ctx.settings.resync_interval)
    {
        return Ok(Flow::Stop(Outcome::Done(Action::requeue(next_visit(
            bundle, ctx,
        )))));
    }
    Ok(Flow::Continue(resolved))
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
            ctx.settings.resolve_interval,
        )
        .then_some(previous)
}
