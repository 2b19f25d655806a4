//! Server-side apply of a plan: in waves that never run ahead of the Namespaces and CRDs before
//! them, concurrently within a wave, writing only objects that differ from what is live.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use gantry_api::{BUNDLE_LABEL, FIELD_MANAGER};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SubjectAccessReviewStatus,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::caches::AccessAnswers;
use super::discovery::{Kind, KindCache};
use super::error::{Error, Result};
use super::live_view;
use super::plan::{Plan, PlannedObject};

/// What an apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// Objects written (created or changed).
    pub written: usize,
    /// Objects already as desired: nothing was sent.
    pub unchanged: usize,
    /// Per object of the plan, in its order: whether the API server said it is being deleted
    /// (in the answer to its apply, or in the read that found it unchanged).
    pub being_deleted: Vec<bool>,
}

/// Settings of the applier.
#[derive(Clone, Copy, Debug)]
pub struct ApplySettings {
    /// Objects applied at once within a wave.
    pub concurrency: usize,
    /// How long to wait for a CRD of the bundle to be established.
    pub crd_timeout: Duration,
    /// Write every object, even those live as desired (new content: server-side apply then
    /// also removes fields the content no longer has).
    pub write_all: bool,
}

fn api_for(client: &Client, object: &PlannedObject) -> Api<DynamicObject> {
    Kind {
        resource: object.resource.clone(),
        namespaced: object.namespaced,
    }
    .api(client, object.namespace.as_deref())
}

/// Applies `plan` for bundle `bundle` with `client`, acting as `identity` (how messages name
/// it). Every object is read first: an object managed by another bundle fails the apply before
/// anything is written; so does one that `identity` may not write (see [`preflight`]).
pub async fn apply(
    client: &Client,
    kinds: &KindCache,
    plan: &Plan,
    bundle: &str,
    identity: &str,
    settings: ApplySettings,
    access: &AccessAnswers,
) -> Result<ApplyOutcome> {
    let checked = check(client, plan, bundle, identity, &settings, access).await?;
    write(client, kinds, plan, identity, settings, checked).await
}

/// What [`check`] found: per object of the plan, in its order, `None` when it is absent.
pub struct Checked {
    live: Vec<Option<Seen>>,
}

/// What the apply needs of a live object. The object itself is dropped as soon as it is
/// read: a bundle's CRDs can weigh megabytes, and all of them would be held until the end.
pub struct Seen {
    /// The bundle its label names.
    owner: Option<String>,
    /// Whether it already holds every field the plan has for it.
    matches: bool,
    /// Whether it carries a deletion timestamp.
    being_deleted: bool,
}

impl Seen {
    fn of(live: &Value, desired: &Value) -> Self {
        let label = format!("/metadata/labels/{}", BUNDLE_LABEL.replace('/', "~1"));
        Self {
            owner: live
                .pointer(&label)
                .and_then(Value::as_str)
                .map(str::to_string),
            matches: live_matches(live, desired),
            being_deleted: live.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }
}

/// Everything [`apply`] verifies before its first write: no object belongs to another bundle,
/// and `identity` may write every object that will be written.
///
/// New content (`write_all`) needs only each object's owner, not its fields: the objects other
/// bundles own are listed once per kind and namespace (usually none), not read one by one. Its
/// permissions are asked once per kind and namespace too; objects are checked one by one only
/// where that answer is no (RBAC may grant by name) and for RBAC objects, whose writes the API
/// server also checks for escalation (see [`preflight`]). That keeps a new content's checks to
/// a few requests per kind, whatever its number of objects.
pub async fn check(
    client: &Client,
    plan: &Plan,
    bundle: &str,
    identity: &str,
    settings: &ApplySettings,
    access: &AccessAnswers,
) -> Result<Checked> {
    let concurrency = settings.concurrency.max(1);
    let to_write = |live: &[Option<Seen>]| -> Vec<&PlannedObject> {
        plan.objects
            .iter()
            .zip(live)
            .filter(|(_, live)| settings.write_all || !live.as_ref().is_some_and(|l| l.matches))
            .map(|(object, _)| object)
            .collect()
    };
    let (live, allowed) = if settings.write_all {
        // Every object will be written: who owns them and what the identity may write are
        // asked at once.
        let all: Vec<&PlannedObject> = plan.objects.iter().collect();
        futures::try_join!(
            owners(client, plan, bundle, identity, concurrency),
            allowed_by_kind(client, &all, identity, concurrency, access),
        )?
    } else {
        // The futures are built before they are streamed: a stream holding a closure over
        // borrowed items makes the whole reconcile future fail to be `Send` for all lifetimes.
        let reads: Vec<_> = plan
            .objects
            .iter()
            .map(|object| read_seen(client, object, identity))
            .collect();
        let live: Vec<Option<Seen>> = stream::iter(reads)
            .buffered(concurrency)
            .try_collect()
            .await?;
        let allowed =
            allowed_by_kind(client, &to_write(&live), identity, concurrency, access).await?;
        (live, allowed)
    };
    check_owners(plan, &live, bundle)?;
    let to_write = to_write(&live);
    let checks: Vec<_> = to_write
        .into_iter()
        .filter(|object| is_rbac(object) || !allowed.contains(&group_key(object)))
        .map(|object| preflight(client, object, identity))
        .collect();
    stream::iter(checks)
        .buffered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(Checked { live })
}

/// A kind (by its resource) in a namespace (`None`: cluster-scoped).
type GroupKey = (String, String, String, Option<String>);

fn group_key(object: &PlannedObject) -> GroupKey {
    (
        object.gvk.group.clone(),
        object.gvk.version.clone(),
        object.resource.plural.clone(),
        object.namespace.clone(),
    )
}

/// Objects of the RBAC API: the API server refuses to let anyone grant more than it holds,
/// which only a dry run of the write itself finds out.
fn is_rbac(object: &PlannedObject) -> bool {
    object.gvk.group == "rbac.authorization.k8s.io"
}

/// For new content: which objects of the plan exist with another bundle's label. One list of
/// metadata per kind and namespace, selecting only objects other bundles own; a kind or
/// namespace where `identity` may not list is read object by object instead.
async fn owners(
    client: &Client,
    plan: &Plan,
    bundle: &str,
    identity: &str,
    concurrency: usize,
) -> Result<Vec<Option<Seen>>> {
    let mut groups: Vec<(GroupKey, &PlannedObject)> = Vec::new();
    for object in &plan.objects {
        let key = group_key(object);
        if !groups.iter().any(|(k, _)| *k == key) {
            groups.push((key, object));
        }
    }
    let selector = format!("{BUNDLE_LABEL},{BUNDLE_LABEL}!={bundle}");
    let lists: Vec<_> = groups
        .iter()
        .map(|(key, object)| {
            let selector = selector.as_str();
            async move {
                let params = ListParams::default().labels(selector);
                let listed = match api_for(client, object).list_metadata(&params).await {
                    Ok(list) => Some(
                        list.items
                            .into_iter()
                            .filter_map(|item| {
                                let owner = item.metadata.labels?.remove(BUNDLE_LABEL)?;
                                Some((item.metadata.name?, owner))
                            })
                            .collect::<HashMap<String, String>>(),
                    ),
                    // Not served yet: a CRD of the bundle defines it, so nothing of it exists.
                    Err(kube::Error::Api(status)) if status.code == 404 => Some(HashMap::new()),
                    Err(_) => None,
                };
                (key, listed)
            }
        })
        .collect();
    let listed: HashMap<&GroupKey, Option<HashMap<String, String>>> =
        stream::iter(lists).buffered(concurrency).collect().await;
    let reads: Vec<_> = plan
        .objects
        .iter()
        .map(|object| {
            let owners = listed.get(&group_key(object)).and_then(Option::as_ref);
            async move {
                match owners {
                    Some(owners) => Ok(owners.get(&object.name).map(|owner| Seen {
                        owner: Some(owner.clone()),
                        matches: false,
                        // Written anyway (new content): the answer tells.
                        being_deleted: false,
                    })),
                    None => read_seen(client, object, identity).await,
                }
            }
        })
        .collect();
    stream::iter(reads)
        .buffered(concurrency)
        .try_collect()
        .await
}

/// The kinds (per namespace) of `objects` that `identity` may create and patch whatever the
/// object's name: two access reviews per kind instead of a dry run per object. Asked first for
/// all namespaces at once (answers reused for a while, see [`AccessAnswers`]); where that is
/// no, for the object's namespace.
async fn allowed_by_kind(
    client: &Client,
    objects: &[&PlannedObject],
    identity: &str,
    concurrency: usize,
    access: &AccessAnswers,
) -> Result<HashSet<GroupKey>> {
    let mut groups: Vec<(GroupKey, &PlannedObject)> = Vec::new();
    for object in objects.iter().filter(|o| !is_rbac(o)) {
        let key = group_key(object);
        if !groups.iter().any(|(k, _)| *k == key) {
            groups.push((key, object));
        }
    }
    let reviews: Vec<_> = groups
        .into_iter()
        .map(|(key, object)| async move {
            // Both at once: one round trip on the way to the first write, not two.
            let (create, patch) = futures::try_join!(
                allowed_everywhere(client, object, "create", identity, access),
                allowed_everywhere(client, object, "patch", identity, access),
            )?;
            if create && patch {
                return Ok(Some(key));
            }
            if object.namespace.is_none() {
                return Ok(None);
            }
            let (create, patch) = futures::try_join!(
                review(client, object, "create", None, identity),
                review(client, object, "patch", None, identity),
            )?;
            Ok::<_, Error>((create.is_none() && patch.is_none()).then_some(key))
        })
        .collect();
    let allowed: Vec<Option<GroupKey>> = stream::iter(reviews)
        .buffered(concurrency)
        .try_collect()
        .await?;
    Ok(allowed.into_iter().flatten().collect())
}

/// A SelfSubjectAccessReview: may the client's user `verb` objects of `object`'s kind in
/// `namespace` (`None`: all), named `name` (`None`: any)?
async fn ask(
    client: &Client,
    object: &PlannedObject,
    verb: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> kube::Result<SubjectAccessReviewStatus> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(object.gvk.group.clone()),
                version: Some(object.gvk.version.clone()),
                resource: Some(object.resource.plural.clone()),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                verb: Some(verb.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await?;
    Ok(answer.status.unwrap_or_default())
}

/// Whether `identity` may `verb` objects of `object`'s kind in every namespace (for a
/// cluster-scoped kind: at all), from a recent answer or a new access review.
async fn allowed_everywhere(
    client: &Client,
    object: &PlannedObject,
    verb: &str,
    identity: &str,
    access: &AccessAnswers,
) -> Result<bool> {
    let question = (
        identity.to_string(),
        object.gvk.group.clone(),
        object.resource.plural.clone(),
        verb.to_string(),
    );
    if let Some(allowed) = access.get(&question) {
        return Ok(allowed);
    }
    let allowed = ask(client, object, verb, None, None)
        .await
        .map_err(|e| Error::Apply {
            object: object.to_string(),
            message: format!("reviewing access as {identity}: {}", api_message(&e)),
        })?
        .allowed;
    access.record(question, allowed);
    Ok(allowed)
}

/// The writes of [`apply`], once [`check`] passed.
pub async fn write(
    client: &Client,
    kinds: &KindCache,
    plan: &Plan,
    identity: &str,
    settings: ApplySettings,
    checked: Checked,
) -> Result<ApplyOutcome> {
    let concurrency = settings.concurrency.max(1);
    let live = checked.live;
    let mut outcome = ApplyOutcome::default();
    let mut served: HashSet<GroupVersionKind> = HashSet::new();
    let mut offset = 0;
    for wave in waves(&plan.objects) {
        let lives = &live[offset..offset + wave.len()];
        offset += wave.len();
        // Before custom resources go out, their CRDs must be established and serve the
        // version they use (a CRD that just gained a version serves it a little later).
        for object in wave {
            if let Some(crd) = object.needs_crd.as_deref()
                && served.insert(object.gvk.clone())
            {
                wait_served(client, kinds, crd, &object.gvk, settings.crd_timeout).await?;
            }
        }
        let writes: Vec<_> = wave
            .iter()
            .zip(lives)
            .map(|(object, live)| {
                let unchanged = live
                    .as_ref()
                    .filter(|l| !settings.write_all && l.matches)
                    .map(|l| l.being_deleted);
                apply_one(client, kinds, object, unchanged, identity)
            })
            .collect();
        let results: Vec<Applied> = stream::iter(writes)
            .buffered(concurrency)
            .try_collect()
            .await?;
        for applied in results {
            if applied.written {
                outcome.written += 1;
            } else {
                outcome.unchanged += 1;
            }
            outcome.being_deleted.push(applied.being_deleted);
        }
    }
    Ok(outcome)
}

/// Fails with `Conflict` when a live object carries the label of another bundle.
fn check_owners(plan: &Plan, live: &[Option<Seen>], bundle: &str) -> Result<()> {
    for (object, live) in plan.objects.iter().zip(live) {
        let owner = live.as_ref().and_then(|l| l.owner.as_deref());
        if let Some(owner) = owner.filter(|owner| *owner != bundle) {
            return Err(Error::Conflict {
                object: object.to_string(),
                owner: owner.to_string(),
            });
        }
    }
    Ok(())
}

/// Splits objects into waves: each run of Namespaces/CRDs is one wave, each run of other
/// objects another; a wave starts only when the one before it is done.
pub fn waves(objects: &[PlannedObject]) -> Vec<&[PlannedObject]> {
    let mut waves = Vec::new();
    let mut start = 0;
    for i in 1..=objects.len() {
        if i == objects.len() || objects[i].is_barrier() != objects[start].is_barrier() {
            if start < i {
                waves.push(&objects[start..i]);
            }
            start = i;
        }
    }
    waves
}

/// The live object, `None` when absent (or when its kind is not served yet: a CRD of the
/// bundle that is not established).
async fn read_live(
    client: &Client,
    object: &PlannedObject,
    identity: &str,
) -> Result<Option<Value>> {
    match api_for(client, object).get(&object.name).await {
        Ok(live) => Ok(Some(serde_json::to_value(live).unwrap_or(Value::Null))),
        // A plain 404 (no Status body) means the kind is not served yet.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) if is_forbidden(&e) => Err(forbidden(object, identity, &e)),
        Err(e) => Err(Error::Apply {
            object: object.to_string(),
            message: api_message(&e),
        }),
    }
}

/// What the apply needs of the live object, read whole; `None` when it is absent.
async fn read_seen(
    client: &Client,
    object: &PlannedObject,
    identity: &str,
) -> Result<Option<Seen>> {
    let live = read_live(client, object, identity).await?;
    Ok(live.map(|live| Seen::of(&live, &object.value())))
}

/// What became of one object.
struct Applied {
    written: bool,
    being_deleted: bool,
}

/// Applies one object unless it is live as desired (`unchanged`: whether that live object is
/// being deleted).
async fn apply_one(
    client: &Client,
    kinds: &KindCache,
    object: &PlannedObject,
    unchanged: Option<bool>,
    identity: &str,
) -> Result<Applied> {
    if let Some(being_deleted) = unchanged {
        return Ok(Applied {
            written: false,
            being_deleted,
        });
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // Only the metadata of the answer: the whole object would be parsed only to be dropped,
    // and a CRD of megabytes parses into tens of them.
    let applied = api_for(client, object)
        .patch_metadata(&object.name, &params, &Patch::Apply(&object.object))
        .await;
    match applied {
        Ok(answer) => Ok(Applied {
            written: true,
            being_deleted: answer.metadata.deletion_timestamp.is_some(),
        }),
        Err(error) => {
            // A kind that is not served (any more) must be discovered again on the next attempt.
            if matches!(&error, kube::Error::Api(status) if status.code == 404) {
                kinds.forget(&object.gvk);
            }
            if is_forbidden(&error) {
                return Err(forbidden(object, identity, &error));
            }
            Err(Error::Apply {
                object: object.to_string(),
                message: api_message(&error),
            })
        }
    }
}

/// Checks that `identity` may write `object`, before anything of the bundle is written: a
/// server-side dry run of the apply, which runs authorization, RBAC's escalation checks and
/// admission without persisting anything. An object the dry run cannot reach (its namespace
/// or, for a kind a CRD of the bundle defines, its kind does not exist yet) is checked with a
/// SelfSubjectAccessReview of `create` and `patch` instead. Other dry-run failures are left to
/// the apply, which reports them in order.
async fn preflight(client: &Client, object: &PlannedObject, identity: &str) -> Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    match api_for(client, object)
        .patch_metadata(&object.name, &params, &Patch::Apply(&object.object))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_forbidden(&e) => Err(forbidden(object, identity, &e)),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            access_review(client, object, identity).await
        }
        Err(_) => Ok(()),
    }
}

/// Asks the API server whether `identity` (the client's user) may create and patch `object`.
async fn access_review(client: &Client, object: &PlannedObject, identity: &str) -> Result<()> {
    for verb in ["create", "patch"] {
        let name = (verb == "patch").then_some(object.name.as_str());
        if let Some(refusal) = review(client, object, verb, name, identity).await? {
            return Err(refusal);
        }
    }
    Ok(())
}

/// One SelfSubjectAccessReview: may `identity` do `verb` on objects of `object`'s kind in its
/// namespace (on the one called `name`, when given)? `None` when it may, else the refusal.
async fn review(
    client: &Client,
    object: &PlannedObject,
    verb: &str,
    name: Option<&str>,
    identity: &str,
) -> Result<Option<Error>> {
    let status = ask(client, object, verb, object.namespace.as_deref(), name)
        .await
        .map_err(|e| Error::Apply {
            object: object.to_string(),
            message: format!("reviewing access as {identity}: {}", api_message(&e)),
        })?;
    if status.allowed {
        return Ok(None);
    }
    let scope = object
        .namespace
        .as_deref()
        .map(|ns| format!(" in namespace {ns}"))
        .unwrap_or_default();
    let why = status
        .reason
        .filter(|r| !r.is_empty())
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    Ok(Some(Error::Forbidden {
        object: object.to_string(),
        identity: identity.to_string(),
        message: format!(
            "access review: {verb} {}{scope} is not allowed{why}",
            object.resource.plural
        ),
    }))
}

fn is_forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403)
}

fn forbidden(object: &PlannedObject, identity: &str, error: &kube::Error) -> Error {
    Error::Forbidden {
        object: object.to_string(),
        identity: identity.to_string(),
        message: api_message(error),
    }
}

/// The API server's message for an error, without kube's wrapping.
pub(crate) fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.reason.is_empty() => status.message.clone(),
        kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
        other => other.to_string(),
    }
}

/// Waits until CRD `crd` is established and the API server serves `gvk`. What was cached for
/// `gvk` is forgotten first: the CRD may have changed (a new version, another scope).
async fn wait_served(
    client: &Client,
    kinds: &KindCache,
    crd: &str,
    gvk: &GroupVersionKind,
    timeout: Duration,
) -> Result<()> {
    // Read without its spec: polling a CRD of megabytes would parse all of it every time.
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let deadline = Instant::now() + timeout;
    kinds.forget(gvk);
    loop {
        let established = live_view::for_health(client, &crds, crd, false)
            .await?
            .and_then(|c| c.pointer("/status/conditions").cloned())
            .and_then(|cs| cs.as_array().cloned())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Established")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        if established && kinds.resolve(client, gvk).await?.is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::CrdNotEstablished {
                crd: crd.to_string(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `live` already holds every field of `desired` (so applying would change nothing).
/// Only labels and annotations of metadata count; `status` never does; a Secret's `stringData`
/// is compared against `data`.
pub fn live_matches(live: &Value, desired: &Value) -> bool {
    let Some(desired) = desired.as_object() else {
        return false;
    };
    for (key, want) in desired {
        match key.as_str() {
            "status" => continue,
            "metadata" => {
                for field in ["labels", "annotations"] {
                    let want = want.get(field).unwrap_or(&Value::Null);
                    let have = live
                        .pointer(&format!("/metadata/{field}"))
                        .unwrap_or(&Value::Null);
                    if !contains(have, want) {
                        return false;
                    }
                }
            }
            "stringData" if is_secret(live) => {
                let Some(want) = want.as_object() else {
                    return false;
                };
                for (k, v) in want {
                    let encoded = v.as_str().map(|s| {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.encode(s)
                    });
                    let have = live.pointer(&format!("/data/{}", escape_pointer(k)));
                    if have.and_then(Value::as_str) != encoded.as_deref() {
                        return false;
                    }
                }
            }
            _ => {
                if !contains(live.get(key).unwrap_or(&Value::Null), want) {
                    return false;
                }
            }
        }
    }
    true
}

fn is_secret(live: &Value) -> bool {
    live.get("kind").and_then(Value::as_str) == Some("Secret")
        && live.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `have` contains `want`: maps key by key, lists element by element, scalars equal (numbers
/// by value). An empty or null `want` is satisfied by an absent field.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (_, Value::Null) => true,
        (Value::Null, Value::Object(w)) => w.values().all(|v| contains(&Value::Null, v)),
        (Value::Null, Value::Array(w)) => w.is_empty(),
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| contains(h.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(h, w)| contains(h, w))
        }
        (Value::Number(h), Value::Number(w)) => h.as_f64() == w.as_f64(),
        (h, w) => h == w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::plan::plan_objects;
    use crate::controller::plan::tests::{config_map, crd, namespace, object, served};
    use serde_json::json;

    #[test]
    fn waves_never_run_ahead_of_namespaces_and_crds() {
        let widget = object(
            "w.yaml",
            json!({ "apiVersion": "example.com/v1", "kind": "Widget", "metadata": { "name": "w" } }),
        );
        let objects = [
            namespace("app"),
            crd("example.com", "Widget", "widgets"),
            config_map("a"),
            config_map("b"),
            namespace("other"),
            widget,
        ];
        let plan = plan_objects(objects.to_vec(), "b", Some("app"), served).unwrap();
        let names: Vec<Vec<&str>> = waves(&plan.objects)
            .iter()
            .map(|wave| wave.iter().map(|o| o.name.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            [
                vec!["app", "widgets.example.com", "other"],
                vec!["a", "b", "w"]
            ]
        );
        assert!(waves(&[]).is_empty());
    }

    #[test]
    fn an_object_of_another_bundle_is_a_conflict() {
        let plan = plan_objects(
            vec![config_map("a"), config_map("b")],
            "mine",
            Some("n"),
            served,
        )
        .unwrap();
        let seen = |live: Value| Some(Seen::of(&live, &json!({})));
        let labelled =
            |owner: &str| seen(json!({ "metadata": { "labels": { BUNDLE_LABEL: owner } } }));
        assert!(check_owners(&plan, &[None, labelled("mine")], "mine").is_ok());
        assert!(check_owners(&plan, &[seen(json!({ "metadata": {} })), None], "mine").is_ok());
        match check_owners(&plan, &[None, labelled("theirs")], "mine") {
            Err(Error::Conflict { object, owner }) => {
                assert_eq!(owner, "theirs");
                assert!(object.starts_with("ConfigMap n/b"), "{object}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn live_with_defaults_and_extra_metadata_matches() {
        let desired = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "s", "namespace": "n", "labels": { "a": "1" } },
            "spec": { "ports": [{ "port": 80 }] }
        });
        let live = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "s", "namespace": "n", "uid": "u", "resourceVersion": "7",
                          "labels": { "a": "1", "b": "2" }, "managedFields": [] },
            "spec": { "ports": [{ "port": 80, "protocol": "TCP", "targetPort": 80 }], "type": "ClusterIP" },
            "status": { "loadBalancer": {} }
        });
        assert!(live_matches(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_does_not_match() {
        let desired =
            json!({ "kind": "ConfigMap", "metadata": { "name": "c" }, "data": { "k": "v" } });
        assert!(!live_matches(
            &json!({ "kind": "ConfigMap", "metadata": {}, "data": { "k": "x" } }),
            &desired
        ));
        assert!(!live_matches(
            &json!({ "kind": "ConfigMap", "metadata": {} }),
            &desired
        ));
        let labelled = json!({ "kind": "ConfigMap", "metadata": { "labels": { "l": "1" } } });
        assert!(!live_matches(
            &json!({ "kind": "ConfigMap", "metadata": {} }),
            &labelled
        ));
    }

    #[test]
    fn secret_string_data_is_compared_as_data() {
        let desired = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "stringData": { "p": "hi" } });
        let live = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": { "p": "aGk=" } });
        assert!(live_matches(&live, &desired));
        let changed = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": { "p": "eA==" } });
        assert!(!live_matches(&changed, &desired));
    }

    #[test]
    fn numbers_compare_by_value_and_empty_wants_match_absence() {
        assert!(contains(&json!(1.0), &json!(1)));
        assert!(contains(&Value::Null, &json!({})));
        assert!(contains(&Value::Null, &json!([])));
        assert!(!contains(&Value::Null, &json!([1])));
        assert!(!contains(&json!([1, 2]), &json!([1])));
    }
}
