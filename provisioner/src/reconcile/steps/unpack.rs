//! Step 3: the content of the resolved digest, read back from storage when it is stored there,
//! pulled, validated and stored otherwise.

use std::time::Duration;

use gantry_api::conditions::{ReasonKind, reasons, types};
use gantry_api::{ProvisionerClass, PullMode};
use gantry_image::{BundleObject, EffectiveLimits, Platform, PullRequest, read_canonical};
use gantry_rules::conditions::{ConditionStatus, find};
use kube::ResourceExt;

use super::resolve::Resolved;
use crate::error::{Error, Result};
use crate::reconcile::pass::{Flow, Pass};
use crate::source::node_pull::driver::{NodeUnpacked, unpack_on_node};
use crate::source::plugin::{Connection, PluginFailure};
use crate::source::pulled::{PullKey, PulledContent};
use crate::source::registry::{SharedClient, digest_of, is_digest_reference};
use crate::source::render::{
    BUILT_IN_VERSION, Configuration, cut, input, plugin_files, render_registry, rendered_from,
    source_of,
};
use crate::state::Context;
use gantry_api::plugin::Identity;
use gantry_rules::class_selection::ProvisionerKind;

/// The content to install.
pub(crate) struct Content {
    /// `repo@sha256:…` it came from.
    pub resolved_image: String,
    pub objects: Vec<BundleObject>,
    /// `status.contentDigest` before this pass.
    pub content_before: Option<String>,
}

/// Sets `Unpacked`, and the content fields of status when the content is new.
pub(crate) async fn unpack_and_store(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    resolved: Resolved,
    configuration: Option<&Configuration>,
) -> Result<Flow<Content>> {
    let Resolved {
        image: resolved_image,
        registry,
    } = resolved;
    let limits = EffectiveLimits::from_api(class.spec.limits.as_ref());
    let content_before = pass.status.content_digest.clone();
    let mut resolved_image = resolved_image;
    let provisioner = class.spec.provisioner.as_str();
    let kind = pass
        .ctx
        .served()
        .kind(provisioner)
        .unwrap_or(ProvisionerKind::Plain);
    // What rendered content depends on; `None` for plain content.
    let renderer = match kind {
        ProvisionerKind::Plain => None,
        ProvisionerKind::Registry => Some(Renderer::Registry),
        ProvisionerKind::Plugin => {
            let (connection, identity) = pass
                .ctx
                .plugins
                .ready(&pass.ctx.client, provisioner)
                .await
                .map_err(|e| plugin_error(provisioner, &resolved_image, e))?;
            Some(Renderer::Plugin(connection, identity))
        }
    };
    let render = match (renderer, configuration) {
        (Some(renderer), Some(configuration)) => {
            if class.spec.pull_mode == PullMode::Node {
                return Err(Error::InvalidClass {
                    class: class.name_any(),
                    message: format!(
                        "spec.pullMode: Node is not supported by {provisioner}: its bundles are pulled by the provisioner"
                    ),
                });
            }
            let digest = digest_of(&resolved_image).unwrap_or_default().to_string();
            let input_digest = input(
                pass.bundle,
                &pass.name,
                &digest,
                configuration,
                provisioner,
                renderer.version(),
            )
            .digest();
            Some((configuration, input_digest, renderer))
        }
        _ => None,
    };
    let stored = stored_content(pass, &resolved_image).await?.filter(|_| {
        rendered_from(
            pass.status.rendered.as_ref(),
            render.as_ref().map(|(_, input, _)| input.as_str()),
        )
    });
    let objects = match (stored, render) {
        (Some(content_digest), _) => read_stored(pass, &content_digest, &limits).await?,
        (None, Some((configuration, _, Renderer::Registry))) => {
            pull_and_store(
                pass,
                class,
                &resolved_image,
                registry,
                limits,
                Some(configuration),
            )
            .await?
        }
        (None, Some((configuration, _, Renderer::Plugin(connection, identity)))) => {
            let plugin = Plugin {
                connection,
                identity,
            };
            fetch_and_render(
                pass,
                class,
                &resolved_image,
                registry,
                limits,
                configuration,
                &plugin,
            )
            .await?
        }
        (None, None) if class.spec.pull_mode == PullMode::Node => {
            // A verified digest is what the Pod runs: the node pulls exactly what was verified;
            // so it does the digest of the tag `spec.ref` chose.
            let image = match (&class.spec.verify, &pass.bundle.spec.r#ref) {
                (None, None) => pass.bundle.spec.image.clone(),
                _ => resolved_image.clone(),
            };
            let pulled = unpack_with_node(pass, class, &image, limits).await?;
            resolved_image = pulled.0;
            pulled.1
        }
        (None, None) => {
            pull_and_store(pass, class, &resolved_image, registry, limits, None).await?
        }
    };
    if kind == ProvisionerKind::Plain {
        pass.status.rendered = None;
    }
    pass.status.resolved_image = Some(resolved_image.clone());
    pass.set_condition(
        types::UNPACKED,
        true,
        reasons::UNPACK_SUCCEEDED,
        format!(
            "{} from {resolved_image}",
            gantry_rules::objects(objects.len())
        ),
    );
    Ok(Flow::Continue(Content {
        resolved_image,
        objects,
        content_before,
    }))
}

/// The content digest of `resolved_image` when the storage server holds it.
async fn stored_content(pass: &Pass<'_>, resolved_image: &str) -> Result<Option<String>> {
    let status = &pass.status;
    match (&status.resolved_image, &status.content_digest) {
        (Some(previous), Some(content)) if previous == resolved_image => {
            let hex = content.trim_start_matches("sha256:");
            Ok(pass
                .ctx
                .storage
                .exists(&pass.name, hex)
                .await?
                .then(|| content.clone()))
        }
        _ => Ok(None),
    }
}

/// Reads stored content back, checking its digest and the limits again. Decompressing and
/// parsing run on a blocking thread, off the async runtime.
pub(super) async fn read_stored(
    pass: &Pass<'_>,
    content_digest: &str,
    limits: &EffectiveLimits,
) -> Result<Vec<BundleObject>> {
    let name = &pass.name;
    let hex = content_digest.trim_start_matches("sha256:");
    let body = pass
        .ctx
        .storage
        .download(name, hex, limits.max_compressed_bytes)
        .await?;
    let (digest, limits) = (content_digest.to_string(), *limits);
    let read =
        tokio::task::spawn_blocking(move || read_canonical(&body[..], Some(&digest), &limits))
            .await
            .map_err(|e| Error::Storage(format!("reading stored content: {e}")))?;
    read.map_err(|e| {
        Error::Storage(format!(
            "stored content {content_digest} of bundle {name}: {e}"
        ))
    })
}

/// How long a pull runs before `Unpacking` is written to the bundle's status.
const PROGRESS_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Pulls the platform image, uploads its canonical tarball, and records where it is stored.
async fn pull_and_store(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    resolved_image: &str,
    registry: Option<SharedClient>,
    limits: EffectiveLimits,
    render: Option<&Configuration>,
) -> Result<Vec<BundleObject>> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    let provisioner = class.spec.provisioner.as_str();
    let image = attempted(&bundle.spec.image, resolved_image);
    let image = image.as_str();
    // A retry of a digest that failed keeps showing the failure: the phase does not flap
    // between `Unpacking` and the failure on every attempt.
    let retrying = pass.written.resolved_image.as_deref() == Some(resolved_image)
        && find(&pass.status.conditions, types::UNPACKED).is_some_and(|c| {
            c.status == ConditionStatus::False && ReasonKind::of(&c.reason) == ReasonKind::Failure
        });
    if !retrying {
        pass.set_condition(
            types::UNPACKED,
            false,
            reasons::UNPACKING,
            format!("pulling {resolved_image}"),
        );
    }
    let mut request = PullRequest::new(resolved_image);
    request.platform = Some(match &class.spec.platform {
        Some(platform) => platform.parse().map_err(|e| Error::InvalidClass {
            class: class.name_any(),
            message: format!("spec.platform: {e}"),
        })?,
        None => ctx.settings.platform.clone(),
    });
    request.limits = limits;
    request.scratch_parent = ctx.settings.scratch_dir.clone();
    let name = pass.name.clone();
    let unpacking = async {
        let registry = match registry {
            Some(client) => client,
            None => ctx.registry_client(class, bundle).await?,
        };
        let platform = request.platform.as_ref().map(|p| p.to_string());
        let key = PullKey::new(
            registry.credentials,
            resolved_image,
            platform.as_deref().unwrap_or_default(),
            &limits,
        );
        // Rendered content depends on more than the image: it is not shared.
        if render.is_none()
            && let Some(kept) = ctx.pulled.get(&key)
        {
            return store_kept(ctx, &name, &kept, limits)
                .await
                .map(|s| (s, None));
        }
        let pulled = registry
            .pull(&request)
            .await
            .map_err(|e| Error::from_image(image, e))?;
        ctx.metrics.bytes_pulled.inc_by(pulled.compressed_bytes);
        let mut rendered = None;
        // The tarball is written once; its objects come with it, not from reading it back.
        let canonical = match render {
            None => pulled.write_canonical_tarball().await,
            Some(configuration) => {
                let digest = digest_of(resolved_image).unwrap_or_default();
                let input = input(
                    bundle,
                    &name,
                    digest,
                    configuration,
                    provisioner,
                    BUILT_IN_VERSION,
                );
                let content = render_registry(&pulled, bundle, image, &input, configuration)?;
                rendered = Some(content.rendered);
                pulled.write_rendered_tarball(content.files).await
            }
        }
        .map_err(|e| Error::from_image(image, e))?;
        ctx.storage
            .upload(&name, canonical.digest.hex(), &canonical.path)
            .await?;
        let stored = Stored {
            manifest_digest: pulled.image.manifest_digest.clone(),
            platform: pulled.image.platform.to_string(),
            content_digest: canonical.digest.digest.clone(),
            objects: canonical.objects,
        };
        if rendered.is_none() {
            keep(ctx, key, &canonical.path, &stored).await;
        }
        Ok::<_, Error>((stored, rendered))
    };
    tokio::pin!(unpacking);
    // `Unpacking` is shown only for a pull that takes a while: most take a fraction of a
    // second, and a status write (and its Event) each would be most of their cost to the API
    // server.
    let finished = tokio::select! {
        result = &mut unpacking => Some(result),
        () = tokio::time::sleep(PROGRESS_DELAY) => None,
    };
    let (stored, rendered) = match finished {
        Some(result) => result?,
        None => {
            if !retrying {
                pass.show_progress().await?;
            }
            unpacking.await?
        }
    };
    if rendered.is_some() {
        pass.status.rendered = rendered;
    }
    let hex = stored.content_digest.trim_start_matches("sha256:");
    let status = &mut pass.status;
    status.manifest_digest = Some(stored.manifest_digest);
    status.platform = Some(stored.platform);
    status.content_url = Some(ctx.storage.content_url(&pass.name, hex));
    status.content_digest = Some(stored.content_digest.clone());
    Ok(stored.objects)
}

/// Content stored for a bundle, and what status records of its pull.
struct Stored {
    manifest_digest: String,
    platform: String,
    /// `sha256:…` of the canonical tarball.
    content_digest: String,
    objects: Vec<BundleObject>,
}

/// Stores for bundle `name` a canonical tarball kept from an earlier pull of the same image
/// with the same credentials, reading its objects back (digest and limits checked again).
async fn store_kept(
    ctx: &Context,
    name: &str,
    kept: &PulledContent,
    limits: EffectiveLimits,
) -> Result<Stored> {
    let hex = kept.content_digest.trim_start_matches("sha256:");
    let tarball = kept.tarball.clone();
    let digest = kept.content_digest.clone();
    let objects = tokio::task::spawn_blocking(move || {
        read_canonical(&tarball[..], Some(&digest), &limits).map(|objects| (objects, tarball))
    })
    .await
    .map_err(|e| Error::Storage(format!("reading kept content: {e}")))?
    .map_err(|e| {
        Error::Storage(format!(
            "content {} kept of an earlier pull: {e}",
            kept.content_digest
        ))
    })?;
    let (objects, tarball) = objects;
    ctx.storage.upload_bytes(name, hex, tarball).await?;
    ctx.metrics.pulls_reused.inc();
    Ok(Stored {
        manifest_digest: kept.manifest_digest.clone(),
        platform: kept.platform.clone(),
        content_digest: kept.content_digest.clone(),
        objects,
    })
}

/// Keeps a pulled canonical tarball in memory for other bundles of the same image, when it is
/// small enough for the bound (`--pull-cache-bytes`).
async fn keep(ctx: &Context, key: PullKey, path: &std::path::Path, stored: &Stored) {
    let bound = ctx.settings.pull_cache_bytes / 4;
    let small = tokio::fs::metadata(path)
        .await
        .is_ok_and(|m| m.len() > 0 && m.len() <= bound);
    if !small {
        return;
    }
    let Ok(tarball) = tokio::fs::read(path).await else {
        return;
    };
    ctx.pulled.insert(
        key,
        PulledContent {
            tarball,
            content_digest: stored.content_digest.clone(),
            manifest_digest: stored.manifest_digest.clone(),
            platform: stored.platform.clone(),
        },
    );
}

/// Who renders content other than plain content.
enum Renderer {
    /// The built-in OLM `registry+v1` renderer.
    Registry,
    /// An external plugin, ready, and who it is.
    Plugin(std::sync::Arc<Connection>, Identity),
}

impl Renderer {
    /// The version that rendering depends on.
    fn version(&self) -> &str {
        match self {
            Renderer::Registry => BUILT_IN_VERSION,
            Renderer::Plugin(_, identity) => &identity.version,
        }
    }
}

/// A plugin ready to render.
struct Plugin {
    connection: std::sync::Arc<Connection>,
    identity: Identity,
}

/// A plugin's failure as the bundle's: refused input is `RenderFailed` and `Stalled`, the rest
/// is retried.
fn plugin_error(provisioner: &str, image: &str, failure: PluginFailure) -> Error {
    match failure {
        PluginFailure::NotReady(message) => Error::ProvisionerNotReady(message),
        PluginFailure::Refused { message } => Error::Render {
            provisioner: provisioner.to_string(),
            image: image.to_string(),
            message,
        },
        PluginFailure::Failed(message) => Error::PluginFailed(message),
    }
}

/// Content an external plugin renders: the artifact fetched as it is (its config and layers,
/// digests verified, within the class's limits), handed to the plugin with the configuration
/// and the release's facts; its answer, within the limits, stored as canonical content.
#[allow(clippy::too_many_arguments)]
async fn fetch_and_render(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    resolved_image: &str,
    registry: Option<SharedClient>,
    limits: EffectiveLimits,
    configuration: &Configuration,
    plugin: &Plugin,
) -> Result<Vec<BundleObject>> {
    use base64::Engine as _;
    use gantry_api::plugin::{CONTRACT, Content as RenderContent, Layer, Release, RenderRequest};
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    let provisioner = plugin.identity.id.as_str();
    let image = attempted(&bundle.spec.image, resolved_image);
    let Some(namespace) = bundle.spec.install_namespace.clone() else {
        return Err(Error::InvalidConfig(format!(
            "{provisioner} renders a release in spec.installNamespace, which is not set"
        )));
    };
    let registry = match registry {
        Some(client) => client,
        None => ctx.registry_client(class, bundle).await?,
    };
    let artifact = registry
        .fetch_artifact(resolved_image, &limits)
        .await
        .map_err(|e| Error::from_image(&image, e))?;
    ctx.metrics.bytes_pulled.inc_by(artifact.compressed_bytes);
    if !plugin
        .identity
        .media_types
        .contains(&artifact.config_media_type)
    {
        return Err(Error::Render {
            provisioner: provisioner.to_string(),
            image,
            message: format!(
                "its config media type {} is not one the plugin accepts ({}): UnsupportedContent",
                artifact.config_media_type,
                plugin.identity.media_types.join(", ")
            ),
        });
    }
    let cluster = ctx
        .plugins
        .cluster(&ctx.client)
        .await
        .map_err(|e| plugin_error(provisioner, &image, e))?;
    let base64 = base64::engine::general_purpose::STANDARD;
    let request = RenderRequest {
        contract: CONTRACT.into(),
        content: RenderContent {
            media_type: artifact.config_media_type.clone(),
            digest: artifact.digest.clone(),
            layers: artifact
                .layers
                .iter()
                .map(|layer| Layer {
                    media_type: layer.media_type.clone(),
                    digest: layer.digest.clone(),
                    data: base64.encode(&layer.data),
                })
                .collect(),
            config: base64.encode(&artifact.config),
        },
        config: configuration.config.clone(),
        release: Release {
            name: pass.name.clone(),
            namespace,
        },
        cluster,
    };
    let timeout = crate::reconcile::timing::apply_timeout(bundle, &ctx.settings);
    let response = ctx
        .plugins
        .render(
            &plugin.connection,
            &plugin.identity,
            &request,
            timeout,
            limits.max_uncompressed_bytes,
        )
        .await
        .map_err(|e| plugin_error(provisioner, &image, e))?;
    drop(request);
    if response.objects.len() as u64 > limits.max_objects {
        return Err(Error::PluginFailed(format!(
            "plugin {provisioner} answered {} objects, more than the class's limit maxObjects ({})",
            response.objects.len(),
            limits.max_objects
        )));
    }
    let digest = digest_of(resolved_image).unwrap_or_default();
    let input = input(
        bundle,
        &pass.name,
        digest,
        configuration,
        provisioner,
        &plugin.identity.version,
    );
    let files = plugin_files(&input, &response)?;
    let scratch = match &ctx.settings.scratch_dir {
        Some(parent) => tempfile::tempdir_in(parent),
        None => tempfile::tempdir(),
    }
    .map_err(|e| Error::Storage(format!("a scratch directory for rendered content: {e}")))?;
    let canonical =
        gantry_image::write_rendered_tarball(scratch.path().to_path_buf(), files, limits)
            .await
            .map_err(|e| Error::Render {
                provisioner: provisioner.to_string(),
                image: image.clone(),
                message: format!("its answer: {e}"),
            })?;
    ctx.storage
        .upload(&pass.name, canonical.digest.hex(), &canonical.path)
        .await?;
    let hex = canonical.digest.hex().to_string();
    let notes =
        (!response.notes.is_empty()).then(|| cut(&response.notes, gantry_api::config::NOTES_LIMIT));
    let status = &mut pass.status;
    status.manifest_digest = Some(artifact.digest.clone());
    status.platform = None;
    status.content_url = Some(ctx.storage.content_url(&pass.name, &hex));
    status.content_digest = Some(canonical.digest.digest.clone());
    status.rendered = Some(gantry_api::Rendered {
        provisioner: provisioner.to_string(),
        version: plugin.identity.version.clone(),
        source: source_of(&artifact.config),
        input_digest: input.digest(),
        notes,
        warnings: response
            .warnings
            .iter()
            .take(16)
            .map(|w| cut(w, 512))
            .collect(),
    });
    Ok(canonical.objects)
}

/// How a failure names the image: the reference with the digest it resolved to
/// (`repo:tag@sha256:...`), so that a rejected new digest is told apart from the installed one.
fn attempted(image: &str, resolved_image: &str) -> String {
    match digest_of(resolved_image) {
        Some(digest) if !is_digest_reference(image) => format!("{image}@{digest}"),
        _ => image.to_string(),
    }
}

/// `pullMode: Node`: an unpack Pod pulls, validates and stores; the stored content is read
/// back (digest and limits checked again). Returns the resolved image and the objects.
async fn unpack_with_node(
    pass: &mut Pass<'_>,
    class: &ProvisionerClass,
    image: &str,
    limits: EffectiveLimits,
) -> Result<(String, Vec<BundleObject>)> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    pass.set_condition(
        types::UNPACKED,
        false,
        reasons::UNPACKING,
        format!("pulling {image} on a node"),
    );
    pass.show_progress().await?;
    // The Pod's progress (the scheduler's message while it waits for a node) is shown as it
    // comes, not only once the Pod is done.
    let (progress, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let unpacking = unpack_on_node(
        &ctx.client,
        &ctx.settings.namespace,
        &ctx.settings.node_pull,
        class,
        bundle,
        image,
        limits,
        &progress,
    );
    let mut unpacking = std::pin::pin!(unpacking);
    let unpacked = loop {
        tokio::select! {
            unpacked = &mut unpacking => break unpacked?,
            Some(message) = messages.recv() => {
                pass.set_condition(types::UNPACKED, false, reasons::UNPACKING, message);
                // Not given up for this: the Pod is still to be waited for and removed.
                if let Err(e) = pass.show_progress().await {
                    tracing::debug!("showing the unpack Pod's progress: {e}");
                }
            }
        }
    };
    ctx.resolved
        .record(&pass.name, super::resolve::resolution_key(bundle));
    let objects = read_stored(pass, &unpacked.content_digest, &limits).await?;
    let manifest_digest = node_manifest_digest(pass, class, &unpacked).await;
    let hex = unpacked.content_digest.trim_start_matches("sha256:");
    let status = &mut pass.status;
    status.manifest_digest = manifest_digest;
    status.platform = Some(unpacked.platform);
    status.content_url = Some(ctx.storage.content_url(&pass.name, hex));
    status.content_digest = Some(unpacked.content_digest.clone());
    Ok((unpacked.resolved_image, objects))
}

/// How long the provisioner tries the registry for the platform manifest of a node's pull.
const MANIFEST_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The platform manifest a node unpacked. The runtime reports only the top-level digest (an
/// index's, for a multi-platform image), so the top-level manifest is read from the registry
/// by that digest when the provisioner can reach it; `None` (the field left empty) when it
/// cannot, which `pullMode: Node` allows.
async fn node_manifest_digest(
    pass: &Pass<'_>,
    class: &ProvisionerClass,
    unpacked: &NodeUnpacked,
) -> Option<String> {
    let (bundle, ctx) = (pass.bundle, pass.ctx);
    let image = &unpacked.resolved_image;
    let lookup = async {
        let platform: Platform = unpacked
            .platform
            .parse()
            .map_err(|e| format!("platform {:?}: {e}", unpacked.platform))?;
        let client = ctx
            .registry_client(class, bundle)
            .await
            .map_err(|e| e.to_string())?;
        client
            .platform_manifest(image, &platform)
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(MANIFEST_LOOKUP_TIMEOUT, lookup).await {
        Ok(Ok(digest)) => Some(digest),
        Ok(Err(why)) => {
            tracing::info!(%image, "platform manifest of a node pull unknown: {why}");
            None
        }
        Err(_) => {
            tracing::info!(
                %image,
                "platform manifest of a node pull unknown: the registry did not answer within {}",
                gantry_rules::duration::GoDuration(MANIFEST_LOOKUP_TIMEOUT)
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attempted;

    #[test]
    fn a_failure_names_the_digest_a_tag_resolved_to() {
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            attempted("r.test/app:v1", &format!("r.test/app@{digest}")),
            format!("r.test/app:v1@{digest}")
        );
        let pinned = format!("r.test/app@{digest}");
        assert_eq!(attempted(&pinned, &pinned), pinned);
    }
}
