//! `diff`: what applying a bundle's stored content (pending approval, or current) would change
//! on the cluster, as `kubectl diff` shows it: each object is applied server-side as a dry run,
//! with the provisioner's field manager, and compared with the live object; objects of the
//! inventory the content no longer has are shown as pruned. Secrets' values are masked.
//! The objects are the ones the provisioner would apply: `spec.patches` applied, then
//! `spec.images` rewritten.
//! With `--dir DIR`, the content compared is a bundle directory's instead (as `push` would read
//! it), and nothing is pushed.
//! Exit status: 0 no changes, 1 changes, 2 (and more) an error.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::patches::Patches;
use gantry_api::{BUNDLE_LABEL, Bundle, FIELD_MANAGER, InventoryEntry, ProvisionerClass};
use gantry_image::{BundleObject, EffectiveLimits, Platform, PullRequest, read_canonical};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::cluster::GlobalArgs;
use super::cluster::get_bundle;
use super::image::{RegistryArgs, client_for, explain};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  kubectl bundle diff my-app\n  \
    kubectl -n gantry-system port-forward svc/gantry-storage 8080 &\n  \
    kubectl bundle diff my-app --storage-url http://127.0.0.1:8080 --storage-token-file token\n  \
    kubectl bundle diff my-app --from-registry\n  \
    kubectl bundle diff my-app --dir ./my-app\n\n\
    Exit status: 0 when nothing would change, 1 when something would, 2 on an error.")]
pub struct DiffArgs {
    /// The bundle.
    name: String,
    /// Base URL of the storage server, replacing the one in status.contentURL (for example a
    /// port-forward from outside the cluster).
    #[arg(long, value_name = "URL")]
    storage_url: Option<String>,
    /// File holding a bearer token the storage server accepts (audience gantry-storage, with
    /// get on /bundles/*).
    #[arg(long, value_name = "FILE", conflicts_with = "storage_token")]
    storage_token_file: Option<PathBuf>,
    /// A bearer token the storage server accepts.
    #[arg(long, env = "GANTRY_STORAGE_TOKEN", hide_env_values = true)]
    storage_token: Option<String>,
    /// CA certificate (PEM) trusted for the storage server's TLS.
    #[arg(long, value_name = "FILE")]
    storage_ca_file: Option<PathBuf>,
    /// Read the content from the registry instead of the storage server: the image at the
    /// digest in status.resolvedImage, for status.platform, with the docker credentials of
    /// this machine. The content must be the one stored (status.contentDigest), or the diff
    /// stops.
    #[arg(long, conflicts_with_all = ["storage_url", "storage_token_file", "storage_token", "storage_ca_file"])]
    from_registry: bool,
    /// Compare a bundle directory (it holds `manifests/`, as `push` takes it) with what the
    /// bundle installed, instead of the bundle's stored content: what pushing DIR and
    /// installing it in this bundle would change. Nothing is pushed or applied.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["storage_url", "storage_token_file", "storage_ca_file", "from_registry"])]
    dir: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs the diff; the exit status says whether anything would change.
pub async fn diff(global: &GlobalArgs, args: DiffArgs) -> ExitCode {
    match run(global, args).await {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {}", super::output::causes(&error));
            ExitCode::from(2)
        }
    }
}

/// Identifies an object whatever version names it: group, kind, namespace, name.
pub(crate) type ObjectKey = (String, String, Option<String>, String);

async fn run(global: &GlobalArgs, args: DiffArgs) -> anyhow::Result<bool> {
    let client = global.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let bundle = get_bundle(&bundles, &args.name).await?;
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    // A patch that does not parse fails every object: said once.
    let patches = bundle_patches(&bundle)?;
    let objects = if let Some(dir) = args.dir.clone() {
        tokio::task::spawn_blocking(move || super::image::load_dir(&dir))
            .await
            .context("reading the bundle directory")??
    } else {
        stored_content(&args, &client, &bundle).await?
    };

    let mut changed = false;
    let mut failures = Vec::new();
    let mut desired: Vec<ObjectKey> = Vec::new();
    let mut out = String::new();
    let unmatched = unmatched_patches(&client, &bundle, &patches, &objects).await;
    for object in objects {
        let value = object.value()?;
        let described = describe_value(&value);
        match diff_object(&client, &bundle, value).await {
            Ok(ObjectDiff { key, text }) => {
                desired.push(key);
                if let Some(text) = text {
                    changed = true;
                    out.push_str(&text);
                }
            }
            Err(error) => failures.push(format!("{described}: {}", super::output::causes(&error))),
        }
    }
    for entry in &status.inventory {
        let key = (
            entry.group.clone(),
            entry.kind.clone(),
            entry.namespace.clone(),
            entry.name.clone(),
        );
        if desired.contains(&key) {
            continue;
        }
        match pruned(&client, entry, &name).await {
            Ok(Some(text)) => {
                changed = true;
                out.push_str(&text);
            }
            Ok(None) => {}
            Err(error) => failures.push(format!(
                "{}: {}",
                describe_entry(entry),
                super::output::causes(&error)
            )),
        }
    }
    // What the provisioner found unsafe in the stored content's CRDs, first: the diff of a CRD
    // shows its schema changing, not whether stored objects survive it.
    if args.dir.is_none() {
        let findings = unsafe_crd_changes(&status);
        if !findings.is_empty() {
            println!(
                "Unsafe CRD changes (refused on apply unless the CRD accepts them, see `kubectl bundle status {name}`):"
            );
            for finding in findings {
                println!("  - {finding}");
            }
            println!();
        }
    }
    print!("{out}");
    for unmatched in unmatched {
        eprintln!("warning: {unmatched} selects no object of the content: it patches nothing");
    }
    if !failures.is_empty() {
        bail!(
            "{} object(s) could not be compared:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(changed)
}

/// The unsafe CRD changes among the highlights the provisioner wrote for the stored content.
fn unsafe_crd_changes(status: &gantry_api::BundleStatus) -> Vec<&str> {
    status
        .requested_permissions
        .iter()
        .flat_map(|p| &p.highlights)
        .filter_map(|h| h.reason.strip_prefix("unsafe CRD upgrade: "))
        .collect()
}

/// The bundle's stored content (awaiting approval, or current): from the storage server, or
/// with `--from-registry` from the image it resolved to.
pub(crate) async fn stored_content(
    args: &DiffArgs,
    client: &Client,
    bundle: &Bundle,
) -> anyhow::Result<Vec<BundleObject>> {
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let (Some(url), Some(digest)) = (status.content_url, status.content_digest) else {
        bail!("bundle {name} has no stored content yet (status.contentURL is empty)");
    };
    let limits = class_limits(client, bundle).await;
    Ok(if args.from_registry {
        from_registry(args, bundle, &digest, limits).await?
    } else {
        let body = download(args, &url, limits.max_compressed_bytes).await?;
        tokio::task::spawn_blocking(move || read_canonical(&body[..], Some(&digest), &limits))
            .await
            .context("reading the stored content")?
            .with_context(|| format!("stored content of bundle {name}"))?
    })
}

/// The class's limits, so content the provisioner accepted is read back here too.
async fn class_limits(client: &Client, bundle: &Bundle) -> EffectiveLimits {
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    let class = match &bundle.spec.provisioner_class_name {
        Some(name) => classes.get_opt(name).await.ok().flatten(),
        None => None,
    };
    EffectiveLimits::from_api(class.as_ref().and_then(|c| c.spec.limits.as_ref()))
}

/// Pulls the image the bundle resolved to and checks that its canonical tarball is the stored
/// one (`content_digest`), so the diff shows what an approval would install.
async fn from_registry(
    args: &DiffArgs,
    bundle: &Bundle,
    content_digest: &str,
    limits: EffectiveLimits,
) -> anyhow::Result<Vec<BundleObject>> {
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let Some(image) = status.resolved_image else {
        bail!("bundle {name} has no status.resolvedImage yet");
    };
    let client = client_for(&image, &args.registry)?;
    let mut request = PullRequest::new(&image);
    request.limits = limits;
    request.platform = status
        .platform
        .as_deref()
        .map(str::parse::<Platform>)
        .transpose()
        .with_context(|| format!("status.platform of bundle {name}"))?;
    let pulled = client
        .pull(&request)
        .await
        .map_err(|e| explain("pulling", &image, e))?;
    let tarball = pulled
        .write_canonical_tarball()
        .await
        .with_context(|| format!("content of {image}"))?;
    if tarball.digest.digest != content_digest {
        bail!(
            "the content of {image} in the registry ({}) is not what bundle {name} stored \
             (status.contentDigest {content_digest}): nothing to compare",
            tarball.digest.digest
        );
    }
    Ok(tarball.objects)
}

/// Downloads the stored tarball (`url`, rebased on `--storage-url`).
async fn download(args: &DiffArgs, url: &str, max_bytes: u64) -> anyhow::Result<Vec<u8>> {
    let url = match &args.storage_url {
        Some(base) => rebase(url, base)?,
        None => url.to_string(),
    };
    let mut builder =
        reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(10));
    if let Some(path) = &args.storage_ca_file {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let certificate = reqwest::Certificate::from_pem(&pem)
            .with_context(|| format!("{}: not a PEM certificate", path.display()))?;
        builder = builder.tls_certs_only([certificate]);
    } else if !url.starts_with("https://") {
        builder = builder.tls_certs_only([]);
    }
    let http = builder.build().context("building the HTTP client")?;
    let token = match (&args.storage_token_file, &args.storage_token) {
        (Some(path), _) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?
                .trim()
                .to_string(),
        ),
        (None, token) => token.clone(),
    };
    let mut request = http.get(&url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.with_context(|| {
        format!(
            "fetching the stored content from {url} (from outside the cluster, read it from the \
             registry with --from-registry, or port-forward the storage server and pass \
             --storage-url)"
        )
    })?;
    let status = response.status();
    if !status.is_success() {
        bail!("fetching {url}: the storage server answered {status}");
    }
    let body = response
        .bytes()
        .await
        .with_context(|| format!("reading {url}"))?;
    if body.len() as u64 > max_bytes {
        bail!(
            "{url}: {} bytes, over the class's limit of {max_bytes}",
            body.len()
        );
    }
    Ok(body.to_vec())
}

/// `url` with its scheme, host and port taken from `base`.
fn rebase(url: &str, base: &str) -> anyhow::Result<String> {
    let path_start = url
        .find("://")
        .and_then(|scheme| url[scheme + 3..].find('/').map(|p| scheme + 3 + p))
        .with_context(|| format!("status.contentURL {url:?} is not an http(s) URL"))?;
    Ok(format!(
        "{}{}",
        base.trim_end_matches('/'),
        &url[path_start..]
    ))
}

pub(crate) struct ObjectDiff {
    pub(crate) key: ObjectKey,
    /// The unified diff; `None` when applying changes nothing.
    pub(crate) text: Option<String>,
}

/// The object as the provisioner applies it: its namespace defaulted (`scope`: `None` for a
/// kind not served yet, whose object keeps the namespace it has), the patches that select it
/// applied (a patch may rename it or move it), its images rewritten, and the bundle label
/// added, so that the label is no change. Also the patches applied (their indexes).
fn desired_object(
    mut object: Value,
    bundle: &Bundle,
    patches: &Patches,
    scope: Option<&Scope>,
) -> anyhow::Result<(Value, Vec<usize>)> {
    let default_namespace = |object: &mut Value| -> anyhow::Result<()> {
        let metadata = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .context("the object has no metadata")?;
        match scope {
            None => {}
            Some(Scope::Cluster) => {
                metadata.remove("namespace");
            }
            Some(Scope::Namespaced) => {
                let namespace = metadata
                    .get("namespace")
                    .and_then(Value::as_str)
                    .filter(|ns| !ns.is_empty())
                    .map(str::to_string)
                    .or_else(|| bundle.spec.install_namespace.clone())
                    .context("a namespaced object carries no namespace and the bundle sets no installNamespace")?;
                metadata.insert("namespace".into(), Value::String(namespace));
            }
        }
        Ok(())
    };
    default_namespace(&mut object)?;
    let applied = patches.apply(&mut object)?;
    if !applied.is_empty() {
        default_namespace(&mut object)?;
    }
    // Images as the provisioner rewrites them (`spec.images`), after the patches: what would
    // run is compared.
    gantry_api::images::rewrite_images(&mut object, &bundle.spec.images);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(BUNDLE_LABEL.into(), Value::String(bundle.name_any()));
        }
    }
    Ok((object, applied))
}

/// `spec.patches` of the bundle, parsed; an error names the bundle and the patch.
fn bundle_patches(bundle: &Bundle) -> anyhow::Result<Patches> {
    Patches::parse(&bundle.spec.patches)
        .map_err(|e| anyhow::anyhow!("bundle {}: {e}", bundle.name_any()))
}

/// The patches of `spec.patches` that select no object of `objects`, as [`diff_object`]
/// applies them: `spec.patches[1] (kind=Job)`. Each kind is looked up once.
async fn unmatched_patches(
    client: &Client,
    bundle: &Bundle,
    patches: &Patches,
    objects: &[BundleObject],
) -> Vec<String> {
    if patches.is_empty() {
        return Vec::new();
    }
    let mut scopes: HashMap<GroupVersionKind, Option<Scope>> = HashMap::new();
    let mut applied = BTreeSet::new();
    for object in objects {
        let Ok(value) = object.value() else {
            continue;
        };
        let Ok((group, version)) = group_version(&value) else {
            continue;
        };
        let gvk = GroupVersionKind::gvk(&group, &version, str_at(&value, "/kind"));
        if !scopes.contains_key(&gvk) {
            let scope = kube::discovery::pinned_kind(client, &gvk)
                .await
                .ok()
                .map(|(_, capabilities)| capabilities.scope);
            scopes.insert(gvk.clone(), scope);
        }
        let scope = scopes.get(&gvk).and_then(Option::as_ref);
        if let Ok((_, indexes)) = desired_object(value, bundle, patches, scope) {
            applied.extend(indexes);
        }
    }
    patches.unmatched(&applied)
}

/// Dry-runs the apply of one object, as the provisioner would apply it, and compares the
/// result with the live object.
pub(crate) async fn diff_object(
    client: &Client,
    bundle: &Bundle,
    object: Value,
) -> anyhow::Result<ObjectDiff> {
    let (group, version) = group_version(&object)?;
    let kind = str_at(&object, "/kind").to_string();
    let gvk = GroupVersionKind::gvk(&group, &version, &kind);
    let discovered = kube::discovery::pinned_kind(client, &gvk).await;
    let scope = discovered.as_ref().ok().map(|(_, c)| &c.scope);
    let (object, _) = desired_object(object, bundle, &bundle_patches(bundle)?, scope)?;
    let name = str_at(&object, "/metadata/name").to_string();
    let Ok((resource, _)) = discovered else {
        // A kind this very bundle defines (its CRD is not installed yet): created as it is.
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| bundle.spec.install_namespace.clone());
        let key = (group, kind.clone(), namespace.clone(), name.clone());
        let title = title(&kind, namespace.as_deref(), &name);
        let note = "kind not served yet: a CRD of the bundle defines it";
        return Ok(ObjectDiff {
            key,
            text: Some(unified(&title, None, Some(&object), note)),
        });
    };
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let key = (group, kind.clone(), namespace.clone(), name.clone());
    let title = title(&kind, namespace.as_deref(), &name);
    let live = api
        .get_opt(&name)
        .await
        .with_context(|| format!("reading {title}"))?
        .map(|live| serde_json::to_value(live).unwrap_or(Value::Null));
    // Fields `spec.ignore` leaves to other controllers go out with their live values, as the
    // provisioner sends them: they are no change.
    let mut object = object;
    let ignored = gantry_api::ignore::ignored_paths(&bundle.spec.ignore, &object);
    if !ignored.is_empty() {
        let removed = gantry_api::ignore::remove_fields(&mut object, &ignored);
        gantry_api::ignore::restore_fields(&mut object, &removed, live.as_ref());
    }
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let (after, note) = match api.patch(&name, &params, &Patch::Apply(&object)).await {
        Ok(applied) => (serde_json::to_value(applied).unwrap_or(Value::Null), ""),
        // Its namespace is created by the bundle and does not exist yet.
        Err(kube::Error::Api(status)) if status.code == 404 && live.is_none() => {
            (object, "its namespace does not exist yet")
        }
        Err(error) => return Err(error).with_context(|| format!("dry-run apply of {title}")),
    };
    let mut before = live.map(clean);
    let mut after = clean(after);
    if kind == "Secret" && key.0.is_empty() {
        mask_secrets(before.as_mut(), &mut after);
    }
    let text = (before.as_ref() != Some(&after))
        .then(|| unified(&title, before.as_ref(), Some(&after), note));
    Ok(ObjectDiff { key, text })
}

/// An inventory object the new content lacks, shown as removed (if it is still there and
/// still the bundle's).
pub(crate) async fn pruned(
    client: &Client,
    entry: &InventoryEntry,
    bundle: &str,
) -> anyhow::Result<Option<String>> {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let Ok((resource, _)) = kube::discovery::pinned_kind(client, &gvk).await else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = match &entry.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let Some(live) = api.get_opt(&entry.name).await? else {
        return Ok(None);
    };
    if live.labels().get(BUNDLE_LABEL).map(String::as_str) != Some(bundle) {
        return Ok(None);
    }
    let mut live = clean(serde_json::to_value(live)?);
    if entry.kind == "Secret" && entry.group.is_empty() {
        let mut none = Value::Null;
        mask_secrets(Some(&mut live), &mut none);
    }
    let title = title(&entry.kind, entry.namespace.as_deref(), &entry.name);
    Ok(Some(unified(&title, Some(&live), None, "pruned")))
}

fn group_version(object: &Value) -> anyhow::Result<(String, String)> {
    let api_version = str_at(object, "/apiVersion");
    Ok(match api_version.split_once('/') {
        Some((group, version)) => (group.to_string(), version.to_string()),
        None if !api_version.is_empty() => (String::new(), api_version.to_string()),
        None => bail!("the object has no apiVersion"),
    })
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn title(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

pub(crate) fn describe_value(object: &Value) -> String {
    title(
        str_at(object, "/kind"),
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str),
        str_at(object, "/metadata/name"),
    )
}

pub(crate) fn describe_entry(entry: &InventoryEntry) -> String {
    title(&entry.kind, entry.namespace.as_deref(), &entry.name)
}

/// Drops what changes on every write and says nothing about the object.
fn clean(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
        ] {
            metadata.remove(field);
        }
    }
    object
}

/// The annotation client-side `kubectl apply` leaves on an object: the whole object as last
/// applied, a Secret's values included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Replaces Secret values (`data`, `stringData`, and the copy of them in the
/// last-applied-configuration annotation) with `***`, or `*** (before)` / `*** (after)` where
/// the value changes, as `kubectl diff` does.
fn mask_secrets(before: Option<&mut Value>, after: &mut Value) {
    /// The maps holding secret values: `data`, `stringData`, and the annotations (of which
    /// only the last-applied one is masked).
    const FIELDS: [&str; 3] = ["/data", "/stringData", "/metadata/annotations"];
    let secret_value = |field: &str, key: &str| field != FIELDS[2] || key == LAST_APPLIED;
    let values = |object: &Value| -> BTreeMap<(&'static str, String), Value> {
        FIELDS
            .iter()
            .filter_map(|field| Some((*field, object.pointer(field)?.as_object()?)))
            .flat_map(|(field, map)| {
                map.iter()
                    .filter(move |(k, _)| secret_value(field, k))
                    .map(move |(k, v)| ((field, k.clone()), v.clone()))
            })
            .collect()
    };
    let old = before.as_deref().map(values).unwrap_or_default();
    let new = values(after);
    let mask = |object: &mut Value, other: &BTreeMap<(&'static str, String), Value>, side: &str| {
        for field in FIELDS {
            if let Some(map) = object.pointer_mut(field).and_then(Value::as_object_mut) {
                for (key, value) in map.iter_mut() {
                    if !secret_value(field, key) {
                        continue;
                    }
                    let masked = match other.get(&(field, key.clone())) {
                        Some(same) if same == value => "***".to_string(),
                        Some(_) => format!("*** ({side})"),
                        None => "***".to_string(),
                    };
                    *value = Value::String(masked);
                }
            }
        }
    };
    if let Some(before) = before {
        mask(before, &new, "before");
    }
    mask(after, &old, "after");
}

/// A unified diff of two objects rendered as YAML, with `--- TITLE (live)` and
/// `+++ TITLE (after apply)` headers (`(pruned)` when the object goes).
fn unified(title: &str, before: Option<&Value>, after: Option<&Value>, note: &str) -> String {
    let render = |value: Option<&Value>| {
        value
            .map(|v| {
                serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# not rendered: {e}\n"))
            })
            .unwrap_or_default()
    };
    let (old, new) = (render(before), render(after));
    let after_label = match after {
        Some(_) => "after apply",
        None => "pruned",
    };
    let mut text = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{title} (live)"),
            &format!("{title} ({after_label})"),
        )
        .to_string();
    if !note.is_empty() && after.is_some() {
        text = format!("# {title}: {note}\n{text}");
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_desired_object_is_patched_then_rewritten_and_labelled() {
        let bundle = Bundle::new(
            "metrics",
            gantry_api::BundleSpec {
                image: "r/metrics:v1".into(),
                install_namespace: Some("kube-system".into()),
                images: vec![gantry_api::ImageOverride {
                    name: "r/sidecar".into(),
                    new_tag: Some("v2".into()),
                    ..Default::default()
                }],
                patches: vec![
                    gantry_api::BundlePatch {
                        patch: "- {op: add, path: /spec/template/spec/containers/-, value: {name: side, image: r/sidecar:v1}}\n- {op: remove, path: /spec/replicas}".into(),
                        target: gantry_api::ObjectSelector {
                            kind: Some("Deployment".into()),
                            namespace: Some("kube-system".into()),
                            ..Default::default()
                        },
                    },
                    gantry_api::BundlePatch {
                        patch: "[{op: replace, path: /metadata/namespace, value: other}]".into(),
                        target: gantry_api::ObjectSelector {
                            kind: Some("ConfigMap".into()),
                            ..Default::default()
                        },
                    },
                ],
                ..Default::default()
            },
        );
        let patches = Patches::parse(&bundle.spec.patches).unwrap();
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "server" },
            "spec": { "replicas": 2, "template": { "spec": { "containers": [
                { "name": "server", "image": "r/server:v1" },
            ]}}},
        });
        let (object, applied) =
            desired_object(deployment, &bundle, &patches, Some(&Scope::Namespaced)).unwrap();
        assert_eq!(applied, [0], "matched in the namespace it is applied in");
        assert_eq!(object.pointer("/spec/replicas"), None);
        assert_eq!(
            object.pointer("/spec/template/spec/containers/1/image"),
            Some(&json!("r/sidecar:v2")),
            "a container a patch adds gets its image rewritten"
        );
        assert_eq!(object["metadata"]["labels"][BUNDLE_LABEL], "metrics");

        let config =
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } });
        let (object, applied) =
            desired_object(config, &bundle, &patches, Some(&Scope::Namespaced)).unwrap();
        assert_eq!(
            (applied, &object["metadata"]["namespace"]),
            (vec![1], &json!("other"))
        );

        let role = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": { "name": "r", "namespace": "ignored" } });
        let (object, applied) =
            desired_object(role, &bundle, &patches, Some(&Scope::Cluster)).unwrap();
        assert!(applied.is_empty());
        assert_eq!(object["metadata"].get("namespace"), None);

        let broken = Patches::parse(&[gantry_api::BundlePatch {
            patch: "[{op: remove, path: /spec/paused}]".into(),
            target: Default::default(),
        }])
        .unwrap();
        let config =
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } });
        let error = desired_object(config, &bundle, &broken, Some(&Scope::Namespaced)).unwrap_err();
        assert!(
            error.to_string().contains("spec.patches[0]: operation 0 (remove /spec/paused) failed on v1 ConfigMap kube-system/c"),
            "{error}"
        );
    }

    #[test]
    fn secrets_are_masked_and_changes_marked() {
        let mut before = json!({ "kind": "Secret", "data": { "same": "YQ==", "changed": "Yg==", "gone": "Yw==" } });
        let mut after = json!({ "kind": "Secret", "data": { "same": "YQ==", "changed": "ZA==", "new": "ZQ==" } });
        mask_secrets(Some(&mut before), &mut after);
        assert_eq!(
            before["data"],
            json!({ "same": "***", "changed": "*** (before)", "gone": "***" })
        );
        assert_eq!(
            after["data"],
            json!({ "same": "***", "changed": "*** (after)", "new": "***" })
        );
    }

    #[test]
    fn a_secrets_last_applied_configuration_is_masked() {
        // A Secret created by client-side `kubectl apply` carries its values in an annotation.
        let secret = |value: &str| {
            json!({ "kind": "Secret",
                "metadata": { "name": "s", "annotations": {
                    LAST_APPLIED: format!("{{\"data\":{{\"password\":\"{value}\"}}}}"),
                    "team": "web" } },
                "data": { "password": value } })
        };
        let mut live = secret("b2xk");
        let mut after = secret("bmV3");
        mask_secrets(Some(&mut live), &mut after);
        assert_eq!(
            live["metadata"]["annotations"][LAST_APPLIED],
            "*** (before)"
        );
        assert_eq!(
            after["metadata"]["annotations"][LAST_APPLIED],
            "*** (after)"
        );
        assert_eq!(after["metadata"]["annotations"]["team"], "web");
        assert_eq!(after["data"]["password"], "*** (after)");
        // Pruned: only the live side.
        let mut live = secret("b2xk");
        mask_secrets(Some(&mut live), &mut Value::Null);
        let text = serde_json::to_string(&live).unwrap();
        assert!(!text.contains("b2xk"), "{text}");
        assert_eq!(live["data"]["password"], "***");
    }

    #[test]
    fn the_diff_has_headers_and_changed_lines() {
        let before = json!({ "kind": "ConfigMap", "data": { "a": "1", "b": "2" } });
        let after = json!({ "kind": "ConfigMap", "data": { "a": "1", "b": "3" } });
        let text = unified("ConfigMap ns/c", Some(&before), Some(&after), "");
        assert!(text.contains("--- ConfigMap ns/c (live)"), "{text}");
        assert!(text.contains("+++ ConfigMap ns/c (after apply)"), "{text}");
        assert!(
            text.contains("-  b: '2'") || text.contains("-  b: \"2\""),
            "{text}"
        );
        let pruned = unified("ConfigMap ns/c", Some(&before), None, "pruned");
        assert!(pruned.contains("+++ ConfigMap ns/c (pruned)"), "{pruned}");
        assert!(pruned.contains("-kind: ConfigMap"), "{pruned}");
    }

    #[test]
    fn volatile_metadata_is_no_change() {
        let a = json!({ "metadata": { "name": "x", "resourceVersion": "1", "managedFields": [] } });
        let b = json!({ "metadata": { "name": "x", "resourceVersion": "2", "generation": 3 } });
        assert_eq!(clean(a), clean(b));
    }

    #[test]
    fn content_urls_move_to_another_base() {
        assert_eq!(
            rebase(
                "http://gantry-storage.gantry-system.svc:8080/bundles/b/ab.tar.gz",
                "http://127.0.0.1:18080/"
            )
            .unwrap(),
            "http://127.0.0.1:18080/bundles/b/ab.tar.gz"
        );
        assert!(rebase("not a url", "http://x").is_err());
    }
}
