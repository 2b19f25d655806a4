//! The Bundle reconcile, as ordered steps: select the class, resolve, unpack and store,
//! plan, approve, apply, prune; and uninstall on deletion.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalDecision, ApprovalPolicy, Bundle, BundlePhase, BundleStatus, FIELD_MANAGER,
    InventoryEntry, ProvisionerClass, UNINSTALL_FINALIZER,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::apply::{ApplySettings, apply};
use super::class::{Selection, select, validate};
use super::context::Context;
use super::error::{Error, Result};
use super::inventory::{Removal, remove};
use super::permissions::requested_permissions;
use super::plan::{Plan, plan};
use super::source::{digest_of, is_digest_reference, registry_client};
use super::status::{condition, differs, set_condition, summarize};
use gantry_image::{EffectiveLimits, PullRequest, read_canonical};

/// Entry point for kube-runtime: runs the steps, records the outcome in status, and decides
/// when to come back. Failures are handled here (backoff per bundle), so this returns `Err`
/// only when the status itself cannot be written.
pub async fn reconcile(bundle: Arc<Bundle>, ctx: Arc<Context>) -> Result<Action> {
    let name = bundle.name_any();
    let fingerprint = fingerprint(&bundle, &ctx);
    if bundle.metadata.deletion_timestamp.is_none()
        && let Some(wait) = ctx.backoff.pending(&name, fingerprint)
    {
        return Ok(Action::requeue(wait));
    }
    let started = Instant::now();
    let generation = bundle.metadata.generation;
    // What the API server holds: intermediate progress writes update it.
    let mut current = bundle.status.clone().unwrap_or_default();
    let mut status = current.clone();

    let outcome = if bundle.metadata.deletion_timestamp.is_some() {
        uninstall(&bundle, &ctx, &mut status).await
    } else {
        install(&bundle, &ctx, &mut status, &mut current).await
    };
    let action = match outcome {
        Ok(Step::Untouched) => {
            ctx.metrics
                .reconciles
                .get_or_create(&result("untouched"))
                .inc();
            return Ok(Action::await_change());
        }
        Ok(Step::Gone) => {
            ctx.backoff.success(&name);
            ctx.metrics
                .reconciles
                .get_or_create(&result("deleted"))
                .inc();
            return Ok(Action::await_change());
        }
        Ok(Step::Done(action)) => {
            ctx.backoff.success(&name);
            ctx.metrics
                .reconciles
                .get_or_create(&result("success"))
                .inc();
            action
        }
        Err(error) => {
            let (attempt, delay) = ctx.backoff.failure(&name, fingerprint);
            ctx.metrics
                .reconciles
                .get_or_create(&result("failure"))
                .inc();
            ctx.metrics
                .failures
                .get_or_create(&super::metrics::ReasonLabels {
                    reason: error.metric_label(),
                })
                .inc();
            tracing::warn!(bundle = %name, reason = error.reason(), attempt, retry_in = ?delay, "{error}");
            set_condition(
                &mut status.conditions,
                error.condition_type(),
                false,
                error.reason(),
                format!(
                    "{error} (attempt {attempt}, next retry in {:.1}s)",
                    delay.as_secs_f64()
                ),
                generation,
            );
            Action::requeue(delay)
        }
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());

    if bundle.metadata.deletion_timestamp.is_none() {
        status.observed_generation = generation;
    }
    summarize(&mut status, generation);
    if bundle.metadata.deletion_timestamp.is_some() {
        status.phase = Some(BundlePhase::Deleting);
    }
    write_status(&bundle, &ctx, &current, &status).await?;
    Ok(action)
}

fn result(result: &'static str) -> super::metrics::ResultLabels {
    super::metrics::ResultLabels { result }
}

/// What a step sequence ended with.
enum Step {
    /// Not ours: nothing was read or written.
    Untouched,
    /// Uninstalled; the finalizer is gone.
    Gone,
    /// Finished (or waiting for a person); come back as the action says.
    Done(Action),
}

/// What, when it changes, must let a bundle through its backoff: its spec, its approval, its
/// deletion, and its class (the named one, or the default classes).
fn fingerprint(bundle: &Bundle, ctx: &Context) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bundle.metadata.generation.hash(&mut hasher);
    bundle
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    if let Some(approval) = bundle.status.as_ref().and_then(|s| s.approval.as_ref()) {
        serde_json::to_string(approval)
            .unwrap_or_default()
            .hash(&mut hasher);
    }
    let relevant = |class: &ProvisionerClass| match &bundle.spec.provisioner_class_name {
        Some(name) => class.name_any() == *name,
        None => class
            .annotations()
            .get(gantry_api::DEFAULT_CLASS_ANNOTATION)
            .is_some_and(|v| v == "true"),
    };
    let mut classes: Vec<(String, Option<i64>)> = ctx
        .classes
        .state()
        .iter()
        .filter(|c| relevant(c))
        .map(|c| (c.name_any(), c.metadata.generation))
        .collect();
    classes.sort();
    classes.hash(&mut hasher);
    hasher.finish()
}

/// Shows work in progress (`Unpacking`, `Installing`) before a long step: writes the status as it
/// stands, summarised, and remembers it as what the API server holds.
async fn show_progress(
    bundle: &Bundle,
    ctx: &Context,
    status: &BundleStatus,
    written: &mut BundleStatus,
) -> Result<()> {
    let mut shown = status.clone();
    shown.observed_generation = bundle.metadata.generation;
    summarize(&mut shown, bundle.metadata.generation);
    write_status(bundle, ctx, written, &shown).await?;
    *written = shown;
    Ok(())
}

async fn install(
    bundle: &Bundle,
    ctx: &Context,
    status: &mut BundleStatus,
    written: &mut BundleStatus,
) -> Result<Step> {
    let name = bundle.name_any();
    let generation = bundle.metadata.generation;

    // 1. The class.
    let class = match select(bundle, &ctx.classes.state()) {
        Selection::NotOurs => return Ok(Step::Untouched),
        Selection::Missing(error) => return Err(error),
        Selection::Serve(class) => class,
    };
    validate(&class).map_err(|message| Error::InvalidClass {
        class: class.name_any(),
        message,
    })?;
    ensure_finalizer(bundle, ctx).await?;
    let limits = EffectiveLimits::from_api(class.spec.limits.as_ref());

    let content_before = status.content_digest.clone();

    // 2. Resolve the reference to a digest.
    let image = bundle.spec.image.as_str();
    if class.spec.require_digest && !is_digest_reference(image) {
        return Err(Error::DigestRequired {
            class: class.name_any(),
            image: image.to_string(),
        });
    }
    // The registry client (secrets read, TLS set up) is made only when the registry is asked.
    let mut registry = None;
    let resolved_image = match reusable_resolution(bundle, ctx, status) {
        Some(resolved) => resolved,
        None => {
            let client = registry_client(ctx, &class, bundle).await?;
            let resolved = client
                .resolve(image)
                .await
                .map_err(|e| Error::from_image(image, e))?
                .pinned();
            ctx.resolved.record(&name, image.to_string());
            registry = Some(client);
            resolved
        }
    };

    // Nothing changed since the last full check (digest, spec, class, approval) and no managed
    // object moved: there is nothing to read or write until the next resync.
    let check = installed_fingerprint(bundle, &class, &resolved_image, status);
    if let Some(check) = check
        && !ctx.drift.take_dirty(&name)
        && ctx
            .checked
            .is_fresh(&name, &check, ctx.settings.resync_interval)
    {
        return Ok(Step::Done(Action::requeue(next_visit(bundle, ctx))));
    }

    // 3. Unpack and store, unless the storage server has this digest's content already.
    let stored = match (&status.resolved_image, &status.content_digest) {
        (Some(previous), Some(content)) if *previous == resolved_image => {
            let hex = content.trim_start_matches("sha256:");
            ctx.storage
                .exists(&name, hex)
                .await?
                .then(|| content.clone())
        }
        _ => None,
    };
    let objects = match stored {
        Some(content_digest) => {
            let hex = content_digest.trim_start_matches("sha256:").to_string();
            let body = ctx
                .storage
                .download(&name, &hex, limits.max_compressed_bytes)
                .await?;
            read_canonical(&body[..], Some(&content_digest), &limits).map_err(|e| {
                Error::Storage(format!(
                    "stored content {content_digest} of bundle {name}: {e}"
                ))
            })?
        }
        None => {
            set_condition(
                &mut status.conditions,
                types::UNPACKED,
                false,
                reasons::UNPACKING,
                format!("pulling {resolved_image}"),
                generation,
            );
            show_progress(bundle, ctx, status, written).await?;
            let mut request = PullRequest::new(resolved_image.clone());
            request.platform = Some(match &class.spec.platform {
                Some(platform) => platform.parse().map_err(|e| Error::InvalidClass {
                    class: class.name_any(),
                    message: format!("spec.platform: {e}"),
                })?,
                None => ctx.settings.platform.clone(),
            });
            request.limits = limits;
            request.scratch_parent = ctx.settings.scratch_dir.clone();
            let registry = match registry.take() {
                Some(client) => client,
                None => registry_client(ctx, &class, bundle).await?,
            };
            let pulled = registry
                .pull(&request)
                .await
                .map_err(|e| Error::from_image(image, e))?;
            ctx.metrics.bytes_pulled.inc_by(pulled.compressed_bytes);
            let (path, canonical) = pulled
                .canonical_tarball()
                .map_err(|e| Error::from_image(image, e))?;
            ctx.storage.upload(&name, canonical.hex(), &path).await?;
            let file = std::fs::File::open(&path)
                .map_err(|e| Error::Storage(format!("reading {}: {e}", path.display())))?;
            let objects = read_canonical(
                std::io::BufReader::new(file),
                Some(&canonical.digest),
                &limits,
            )
            .map_err(|e| Error::from_image(image, e))?;
            status.manifest_digest = Some(pulled.image.manifest_digest.clone());
            status.platform = Some(pulled.image.platform.to_string());
            status.content_url = Some(ctx.storage.content_url(&name, canonical.hex()));
            status.content_digest = Some(canonical.digest.clone());
            objects
        }
    };
    let digest_changed = status.resolved_image.as_deref() != Some(resolved_image.as_str());
    status.resolved_image = Some(resolved_image.clone());
    set_condition(
        &mut status.conditions,
        types::UNPACKED,
        true,
        reasons::UNPACK_SUCCEEDED,
        format!("{} objects from {resolved_image}", objects.len()),
        generation,
    );

    // 4. Plan (kinds, namespaces), and what an approver reviews.
    let plan = plan(
        &ctx.client,
        &ctx.kinds,
        &objects,
        &name,
        bundle.spec.install_namespace.as_deref(),
    )
    .await?;
    status.requested_permissions = Some(requested_permissions(&plan.objects));

    // 5. Approval, bound to the resolved digest.
    if !approved(bundle, &class, &resolved_image, status, ctx, digest_changed).await {
        // A tag may still move while a person decides: come back to resolve it again.
        return Ok(Step::Done(Action::requeue(next_visit(bundle, ctx))));
    }

    // 6. Apply. Objects live as desired are skipped only when this exact content (and spec) was
    // installed before: a new content or spec is written in full, so fields it dropped go away.
    let installed_before = condition(&status.conditions, types::INSTALLED)
        .is_some_and(|c| c.status == "True" && c.observed_generation == generation);
    let write_all = !installed_before || content_before != status.content_digest;
    check_install_namespace(bundle, ctx, &plan).await?;
    if write_all {
        set_condition(
            &mut status.conditions,
            types::INSTALLED,
            false,
            reasons::INSTALLING,
            format!("applying {} objects", plan.objects.len()),
            generation,
        );
        show_progress(bundle, ctx, status, written).await?;
    }
    let outcome = apply(
        &ctx.client,
        &plan,
        &name,
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
        ctx.drift.ensure(&ctx.client, &object.resource);
    }

    // 7. Prune what the new content no longer has.
    let inventory: Vec<InventoryEntry> = plan.objects.iter().map(|o| o.inventory_entry()).collect();
    let keep: HashSet<&InventoryEntry> = inventory.iter().collect();
    let gone: Vec<InventoryEntry> = status
        .inventory
        .iter()
        .rev()
        .filter(|entry| !keep.contains(entry))
        .cloned()
        .collect();
    for entry in &gone {
        match remove(&ctx.client, &ctx.kinds, entry, &name).await {
            Ok(Removal::Deleted) => {
                ctx.metrics.objects_deleted.inc();
            }
            Ok(_) => {}
            Err((object, message)) => return Err(Error::Prune { object, message }),
        }
    }
    status.inventory = inventory;
    set_condition(
        &mut status.conditions,
        types::INSTALLED,
        true,
        reasons::INSTALL_SUCCEEDED,
        format!("{} objects installed", plan.objects.len()),
        generation,
    );
    if let Some(check) = installed_fingerprint(bundle, &class, &resolved_image, status) {
        ctx.checked.record(&name, check);
    }
    if content_before != status.content_digest {
        remove_older_content(ctx, &name, status.content_digest.as_deref()).await;
    }
    Ok(Step::Done(Action::requeue(next_visit(bundle, ctx))))
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

/// What an installed bundle looked like: `None` unless it is installed at its generation with
/// `resolved_image`. Equal fingerprints mean a new reconcile would find nothing to change.
fn installed_fingerprint(
    bundle: &Bundle,
    class: &ProvisionerClass,
    resolved_image: &str,
    status: &BundleStatus,
) -> Option<u64> {
    let generation = bundle.metadata.generation;
    let installed = condition(&status.conditions, types::INSTALLED)
        .is_some_and(|c| c.status == "True" && c.observed_generation == generation);
    let approved =
        condition(&status.conditions, types::APPROVED).is_some_and(|c| c.status == "True");
    if !installed || !approved || status.resolved_image.as_deref() != Some(resolved_image) {
        return None;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    generation.hash(&mut hasher);
    resolved_image.hash(&mut hasher);
    status.content_digest.hash(&mut hasher);
    class.name_any().hash(&mut hasher);
    class.metadata.generation.hash(&mut hasher);
    serde_json::to_string(&status.approval)
        .unwrap_or_default()
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// The resolved image to reuse without asking the registry: a digest reference is its own
/// answer; a tag is asked again when the spec changed or the resolve interval passed.
fn reusable_resolution(bundle: &Bundle, ctx: &Context, status: &BundleStatus) -> Option<String> {
    let previous = status.resolved_image.clone()?;
    if status.observed_generation != bundle.metadata.generation {
        return None;
    }
    ctx.resolved
        .is_fresh(
            &bundle.name_any(),
            &bundle.spec.image,
            ctx.settings.resolve_interval,
        )
        .then_some(previous)
}

/// When to come back without a trigger: for tags, to resolve again; for all, to check drift.
fn next_visit(bundle: &Bundle, ctx: &Context) -> Duration {
    let interval = if is_digest_reference(&bundle.spec.image) {
        ctx.settings.resync_interval
    } else {
        ctx.settings
            .resolve_interval
            .min(ctx.settings.resync_interval)
    };
    interval.mul_f64(rand::random_range(0.9..1.1))
}

/// Sets `Approved`; returns whether the content may be installed.
async fn approved(
    bundle: &Bundle,
    class: &ProvisionerClass,
    resolved_image: &str,
    status: &mut BundleStatus,
    ctx: &Context,
    digest_changed: bool,
) -> bool {
    let generation = bundle.metadata.generation;
    if class.spec.approval == ApprovalPolicy::Automatic {
        set_condition(
            &mut status.conditions,
            types::APPROVED,
            true,
            reasons::AUTOMATIC_APPROVAL,
            format!(
                "ProvisionerClass {} approves every digest",
                class.name_any()
            ),
            generation,
        );
        return true;
    }
    let digest = digest_of(resolved_image).unwrap_or_default();
    let decision = status
        .approval
        .as_ref()
        .filter(|a| a.digest == digest)
        .map(|a| (a.decision, a.reason.clone().unwrap_or_default()));
    match decision {
        Some((ApprovalDecision::Approved, reason)) => {
            set_condition(
                &mut status.conditions,
                types::APPROVED,
                true,
                reasons::APPROVED,
                if reason.is_empty() {
                    format!("{digest} approved")
                } else {
                    format!("{digest} approved: {reason}")
                },
                generation,
            );
            true
        }
        Some((ApprovalDecision::Denied, reason)) => {
            let message = if reason.is_empty() {
                format!("{digest} denied")
            } else {
                format!("{digest} denied: {reason}")
            };
            let already = condition(&status.conditions, types::APPROVED)
                .is_some_and(|c| c.reason == reasons::DENIED && c.message == message);
            set_condition(
                &mut status.conditions,
                types::APPROVED,
                false,
                reasons::DENIED,
                message.clone(),
                generation,
            );
            if !already {
                publish(ctx, bundle, EventType::Warning, reasons::DENIED, &message).await;
            }
            false
        }
        None => {
            let waiting = if digest_changed && status.approval.is_some() {
                format!(
                    "{digest} is new: the approval of another digest does not carry over; waiting for an approver"
                )
            } else {
                format!(
                    "waiting for an approver to approve {digest} (kubectl bundle approve {})",
                    bundle.name_any()
                )
            };
            set_condition(
                &mut status.conditions,
                types::APPROVED,
                false,
                reasons::AWAITING_APPROVAL,
                waiting,
                generation,
            );
            false
        }
    }
}

/// An install namespace that objects use must exist, unless the bundle creates it.
async fn check_install_namespace(bundle: &Bundle, ctx: &Context, plan: &Plan) -> Result<()> {
    let Some(namespace) = bundle.spec.install_namespace.as_deref() else {
        return Ok(());
    };
    let used = plan
        .objects
        .iter()
        .any(|o| o.namespace.as_deref() == Some(namespace));
    if !used || plan.created_namespaces().any(|n| n == namespace) {
        return Ok(());
    }
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    match namespaces.get_opt(namespace).await? {
        Some(_) => Ok(()),
        None => Err(Error::NamespaceNotFound(namespace.to_string())),
    }
}

async fn ensure_finalizer(bundle: &Bundle, ctx: &Context) -> Result<()> {
    if bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(());
    }
    let mut finalizers = bundle.finalizers().to_vec();
    finalizers.push(UNINSTALL_FINALIZER.to_string());
    let patch = json!({ "metadata": { "finalizers": finalizers, "resourceVersion": bundle.resource_version() } });
    let bundles: Api<Bundle> = Api::all(ctx.client.clone());
    bundles
        .patch(
            &bundle.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn uninstall(bundle: &Bundle, ctx: &Context, status: &mut BundleStatus) -> Result<Step> {
    if !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER) {
        return Ok(Step::Gone);
    }
    let name = bundle.name_any();
    for entry in status.inventory.clone().iter().rev() {
        match remove(&ctx.client, &ctx.kinds, entry, &name).await {
            Ok(Removal::Deleted) => {
                ctx.metrics.objects_deleted.inc();
            }
            Ok(_) => {}
            Err((object, message)) => return Err(Error::Uninstall { object, message }),
        }
    }
    ctx.storage.delete_bundle(&name).await?;
    let finalizers: Vec<String> = bundle
        .finalizers()
        .iter()
        .filter(|f| *f != UNINSTALL_FINALIZER)
        .cloned()
        .collect();
    let patch = json!({ "metadata": { "finalizers": finalizers, "resourceVersion": bundle.resource_version() } });
    let bundles: Api<Bundle> = Api::all(ctx.client.clone());
    match bundles
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.resolved.forget(&name);
    ctx.checked.forget(&name);
    publish(
        ctx,
        bundle,
        EventType::Normal,
        reasons::UNINSTALLED,
        "objects and stored content removed",
    )
    .await;
    Ok(Step::Gone)
}

/// Writes the status when it changed, with server-side apply as field manager `gantry`: the
/// approval, owned by approvers, is never part of what is sent, so it is never touched.
async fn write_status(
    bundle: &Bundle,
    ctx: &Context,
    current: &BundleStatus,
    desired: &BundleStatus,
) -> Result<()> {
    if !differs(current, desired) {
        return Ok(());
    }
    // A bundle that was uninstalled is gone: nothing to write.
    if bundle.metadata.deletion_timestamp.is_some()
        && !bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER)
    {
        return Ok(());
    }
    let mut owned = desired.clone();
    owned.approval = None;
    let patch = json!({
        "apiVersion": Bundle::api_version(&()),
        "kind": Bundle::kind(&()),
        "metadata": { "name": bundle.name_any() },
        "status": owned,
    });
    let bundles: Api<Bundle> = Api::all(ctx.client.clone());
    match bundles
        .patch_status(
            &bundle.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.status_writes.inc();
    let before =
        condition(&current.conditions, types::READY).map(|c| (c.status.clone(), c.reason.clone()));
    let after = condition(&desired.conditions, types::READY)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    if let Some((status, reason, message)) = after
        && before.as_ref() != Some(&(status.clone(), reason.clone()))
    {
        let kind = if status == "True" || !is_failure(&reason) {
            EventType::Normal
        } else {
            EventType::Warning
        };
        publish(ctx, bundle, kind, &reason, &message).await;
    }
    Ok(())
}

fn is_failure(reason: &str) -> bool {
    !matches!(
        reason,
        reasons::INSTALL_SUCCEEDED
            | reasons::UNPACKING
            | reasons::INSTALLING
            | reasons::AWAITING_APPROVAL
            | reasons::PENDING
    )
}

async fn publish(ctx: &Context, bundle: &Bundle, type_: EventType, reason: &str, message: &str) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(message.chars().take(1024).collect()),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &bundle.object_ref(&())).await {
        tracing::debug!(bundle = %bundle.name_any(), %error, "publishing an event failed");
    }
}
