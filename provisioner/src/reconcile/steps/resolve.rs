//! Step 2: the image reference to a digest, and the shortcut for bundles that nothing changed.

use gantry_api::{Bundle, BundleStatus, ProvisionerClass, PullMode, VersionRef};
use gantry_image::TagListing;
use gantry_rules::version_range::{Choice, VersionRange};
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
    // With `spec.ref`, the range is checked before any request: no registry can fix it.
    let range = bundle
        .spec
        .r#ref
        .as_ref()
        .map(|version| version_range(image, version))
        .transpose()?;
    // The registry client (secrets read, TLS set up) is made only when the registry is asked.
    let resolved = match reusable_resolution(pass) {
        Some(image) => Resolved {
            image,
            registry: None,
        },
        // The node's runtime resolves the reference when it pulls (see unpack); a range is
        // chosen here, and its tag resolved, since the node knows no ranges.
        None if class.spec.pull_mode == PullMode::Node && range.is_none() => Resolved {
            image: image.to_string(),
            registry: None,
        },
        None => {
            let client = ctx.registry_client(class, bundle).await?;
            let reference = match &range {
                Some(range) => {
                    let choice = choose(&client, image, range).await?;
                    let reference = format!("{image}:{}", choice.tag);
                    pass.status.resolved_version = Some(choice.version.to_string());
                    pass.status.resolved_tag = Some(choice.tag);
                    reference
                }
                None => image.to_string(),
            };
            let resolved = client
                .resolve(&reference)
                .await
                .map_err(|e| Error::from_image(&reference, e))?
                .pinned();
            ctx.resolved.record(&pass.name, resolution_key(bundle));
            Resolved {
                image: resolved,
                registry: Some(client),
            }
        }
    };
    if range.is_none() {
        pass.status.resolved_tag = None;
        pass.status.resolved_version = None;
    }
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

/// `spec.ref`'s range, with `spec.image` naming the repository alone.
fn version_range(image: &str, version: &VersionRef) -> Result<VersionRange> {
    let reference = gantry_image::parse_reference(image).ok();
    // `parse_reference` gives a reference without a tag `latest`: only what is written counts.
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || name.contains(':') || reference.is_none() {
        return Err(Error::VersionRange(format!(
            "spec.image {image:?} names a tag or digest, and spec.ref chooses the tag: spec.image must name the repository alone"
        )));
    }
    VersionRange::parse(&version.semver, version.semver_filter.as_deref())
        .map_err(|e| Error::VersionRange(e.to_string()))
}

/// The tag of `repository` that `range` chooses.
async fn choose(client: &SharedClient, repository: &str, range: &VersionRange) -> Result<Choice> {
    let tags = client
        .list_tags(repository, TagListing::default())
        .await
        .map_err(|e| Error::from_image(repository, e))?;
    Ok(range.choose(repository, tags.iter().map(String::as_str))?)
}

/// What a resolution answered for: `spec.image`, with `spec.ref` when it is set.
pub(crate) fn resolution_key(bundle: &Bundle) -> String {
    match &bundle.spec.r#ref {
        Some(version) => format!(
            "{} semver={:?} filter={:?}",
            bundle.spec.image, version.semver, version.semver_filter
        ),
        None => bundle.spec.image.clone(),
    }
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
            &resolution_key(pass.bundle),
            timing::resolve_interval(pass.bundle, &ctx.settings),
        )
        .then_some(previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(image: &str, semver: &str) -> Result<VersionRange> {
        version_range(
            image,
            &VersionRef {
                semver: semver.into(),
                semver_filter: None,
            },
        )
    }

    #[test]
    fn a_range_needs_the_repository_alone() {
        assert!(range("127.0.0.1:5000/team/app", "^1").is_ok());
        assert!(range("app", "^1").is_ok());
        for image in [
            "127.0.0.1:5000/team/app:1.0.0",
            "app:latest",
            "127.0.0.1:5000/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            let error = range(image, "^1").err().unwrap();
            assert!(matches!(error, Error::VersionRange(_)));
            assert!(
                error.to_string().contains("spec.ref chooses the tag"),
                "{error}"
            );
            assert_eq!(error.stall(), Some(crate::error::Stall::Spec));
        }
    }

    #[test]
    fn an_invalid_range_stalls_naming_the_field() {
        let error = range("r/app", ">= >= 1").err().unwrap();
        assert!(error.to_string().starts_with("spec.ref.semver"), "{error}");
        assert_eq!(
            error.condition(),
            (
                types::UNPACKED,
                gantry_api::conditions::reasons::NO_MATCHING_VERSION
            )
        );
    }

    #[test]
    fn the_resolution_key_covers_the_range() {
        let mut bundle = Bundle::new("b", Default::default());
        bundle.spec.image = "r/app".into();
        let plain = resolution_key(&bundle);
        bundle.spec.r#ref = Some(VersionRef {
            semver: "^1".into(),
            semver_filter: None,
        });
        let one = resolution_key(&bundle);
        bundle.spec.r#ref.as_mut().unwrap().semver = "^2".into();
        assert_ne!(plain, one);
        assert_ne!(one, resolution_key(&bundle));
    }
}
