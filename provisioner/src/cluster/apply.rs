//! Server-side apply of a plan: in waves that never run ahead of the Namespaces and CRDs before
//! them, concurrently within a wave, writing only objects that differ from what is live. The
//! waves of rendered content (its files `wave-NNN.yaml`) go out one after the other, each once
//! every Job of the one before it completed ([`crate::cluster::jobs`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use gantry_api::{BUNDLE_LABEL, FIELD_MANAGER, PRUNE_ANNOTATION};
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::core::{GroupVersionKind, TypeMeta};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::access::AccessReviews;
use crate::cluster::crds::{served_kinds, wait_served};
use crate::cluster::discovery::{KindCache, object_api};
use crate::cluster::dry_run::{self, Sent, with_ignored_fields};
use crate::cluster::errors::{api_message, is_forbidden, is_invalid, is_not_found};
use crate::cluster::jobs::{self, Waiting};
use crate::cluster::live::{
    apply_for_health, drifted_fields, drifted_fields_leaving_others, health_view, spec_needed,
};
use crate::cluster::preflight::{GroupKey, allowed_by_kind, forbidden, group_key};
use crate::error::{Error, Result};
use gantry_rules::managed_fields::{conflicting_fields, immutable_fields, remove_field};
use gantry_rules::object_policy::{ObjectPolicy, Ssa};
use gantry_rules::plan::{Plan, PlannedObject};

/// How long an object recreated for `gantry.dev/force: enabled` may take to be gone (its
/// dependents go first: foreground deletion) before it is created again.
const RECREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// What an apply did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApplyOutcome {
    /// Objects written (created or changed).
    pub written: usize,
    /// Objects already as desired: nothing was sent.
    pub unchanged: usize,
    /// Per object of the plan, in its order: what the answer to its apply, or the read that
    /// found it unchanged, showed of it. Only the objects applied, when the apply stopped
    /// before a wave (`waiting`).
    pub observed: Vec<Observed>,
    /// The apply stopped before a wave of rendered content: the Jobs of the wave before it
    /// are not complete yet ([`write_waves`] with [`JobWaits`]).
    pub waiting: Option<Waiting>,
}

/// What the apply of rendered content waits for between its waves: every Job (`batch/v1`) of
/// a wave complete before the next wave's objects go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobWaits {
    /// How long a Job may take from its creation before the apply fails (`WaveJobFailed`).
    pub timeout: Duration,
}

/// What an apply learnt of one live object, for health to start from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Whether the API server said it is being deleted.
    pub being_deleted: bool,
    /// For kinds that carry a status: the object as health sees it
    /// ([`crate::cluster::live::health_view`]), so that health does not read it again.
    pub view: Option<Value>,
}

impl Observed {
    /// What `answer` (the answer to its apply, as health sees it) shows of `object`. A CRD's
    /// answer predates the wait for it to be established: health reads it again.
    fn of(object: &PlannedObject, answer: Value) -> Self {
        Self {
            being_deleted: answer.pointer("/metadata/deletionTimestamp").is_some(),
            view: Some(answer).filter(|_| carries_status(object) && object.defines_crd.is_none()),
        }
    }
}

/// Whether objects of `object`'s kind carry a status health looks at.
fn carries_status(object: &PlannedObject) -> bool {
    !gantry_rules::kstatus::has_no_status(&object.gvk.group, &object.gvk.kind)
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

/// What [`check`] found: per object of the plan, in its order, `None` when it is absent; and
/// each object's policy.
pub struct Checked {
    live: Vec<Option<Seen>>,
    policies: Vec<ObjectPolicy>,
    /// Objects the dry run could not reach yet: judged at the start of their wave.
    unjudged: HashSet<usize>,
}

/// What the apply needs of a live object. The object itself is dropped as soon as it is
/// read: a bundle's CRDs can weigh megabytes, and all of them would be held until the end.
pub struct Seen {
    /// The bundle its label names.
    owner: Option<String>,
    /// Whether it already holds every field the plan has for it.
    matches: bool,
    /// The fields that differ, when it does not match (for `spec.drift: Report`).
    drifted: Vec<String>,
    /// What health learns of it, should it be left as it is: whether it is being deleted, and
    /// its health view (set by [`read_seen`] for kinds that carry a status).
    observed: Observed,
}

impl Seen {
    /// What an apply that leaves the object as it is learnt of it.
    fn observed(&self) -> Observed {
        self.observed.clone()
    }

    fn of(live: &Value, desired: &Value, policy: ObjectPolicy) -> Self {
        let label = format!("/metadata/labels/{}", BUNDLE_LABEL.replace('/', "~1"));
        // One comparison says both whether to send it and, under `drift: Report`, what drifted.
        let drifted = match policy.ssa {
            Ssa::Merge => drifted_fields_leaving_others(live, desired),
            _ => drifted_fields(live, desired),
        };
        Self {
            owner: live
                .pointer(&label)
                .and_then(Value::as_str)
                .map(str::to_string),
            matches: drifted.is_empty(),
            drifted,
            observed: Observed {
                being_deleted: live.pointer("/metadata/deletionTimestamp").is_some(),
                view: None,
            },
        }
    }
}

/// How many drifted objects, and fields of each, the `Drifted` condition names.
const DRIFT_LISTED: usize = 20;

impl Checked {
    /// What differs from the plan, one line per object that would be written (`Kind ns/name:
    /// missing` or `: .spec.replicas, …`), at most [`DRIFT_LISTED`] lines; and how many objects
    /// drifted in all. Only meaningful when the check read every object (not new content).
    pub fn drift(&self, plan: &Plan) -> (Vec<String>, usize) {
        let settings = ApplySettings {
            concurrency: 1,
            crd_timeout: Duration::ZERO,
            write_all: false,
        };
        let drifted: Vec<String> = plan
            .objects
            .iter()
            .zip(&self.live)
            .zip(&self.policies)
            .filter(|((_, live), policy)| will_write(&settings, **policy, live.as_ref()))
            .map(|((object, live), _)| match live {
                None => format!("{object}: missing"),
                Some(seen) => {
                    let mut fields: Vec<&str> = seen
                        .drifted
                        .iter()
                        .take(DRIFT_LISTED)
                        .map(String::as_str)
                        .collect();
                    if seen.drifted.len() > DRIFT_LISTED {
                        fields.push("…");
                    }
                    format!("{object}: {}", fields.join(", "))
                }
            })
            .collect();
        let count = drifted.len();
        (drifted.into_iter().take(DRIFT_LISTED).collect(), count)
    }

    /// The outcome of writing nothing: every object left as it is.
    pub fn left_as_is(&self) -> ApplyOutcome {
        ApplyOutcome {
            written: 0,
            unchanged: self.live.iter().flatten().count(),
            observed: self
                .live
                .iter()
                .map(|live| live.as_ref().map(Seen::observed).unwrap_or_default())
                .collect(),
            waiting: None,
        }
    }
}

/// Whether an object will be written: new content is written whole, else what differs from
/// what is live; an `IfNotPresent` object only while it is absent.
fn will_write(settings: &ApplySettings, policy: ObjectPolicy, live: Option<&Seen>) -> bool {
    if policy.ssa == Ssa::IfNotPresent && live.is_some() {
        return false;
    }
    settings.write_all || !live.is_some_and(|l| l.matches)
}

/// Whether an object is only labelled as the bundle's: an `IfNotPresent` object that was there
/// before the bundle (made by hand, or kept by an uninstall). Its content stays as it is; the
/// label makes it the bundle's like any other object: watched, recreated when deleted, pruned
/// and uninstalled.
fn will_label(policy: ObjectPolicy, live: Option<&Seen>) -> bool {
    policy.ssa == Ssa::IfNotPresent && live.is_some_and(|l| l.owner.is_none())
}

/// Everything an apply verifies before its first write: no object belongs to another bundle,
/// and `identity` may write every object that will be written. `policies` has each object's
/// policy (`Ignore` objects are not in the plan).
///
/// New content (`write_all`) needs only each object's owner, not its fields: the objects other
/// bundles own are listed once per kind and namespace (usually none), not read one by one. Its
/// permissions are asked once per kind and namespace too; objects are checked one by one only
/// where that answer is no (RBAC may grant by name) and for RBAC objects, whose writes the API
/// server also checks for escalation (see [`preflight`]). That keeps a new content's checks to
/// a few requests per kind, whatever its number of objects.
// The plan, its policies and who applies it are what an apply is; a struct of them would be
// built only to be taken apart here.
#[allow(clippy::too_many_arguments)]
pub async fn check(
    client: &Client,
    plan: &Plan,
    policies: &[ObjectPolicy],
    bundle: &str,
    claimed: &[Option<String>],
    identity: &str,
    settings: &ApplySettings,
    access: &AccessReviews,
) -> Result<Checked> {
    let concurrency = settings.concurrency.max(1);
    let policy = |i: usize| policies.get(i).copied().unwrap_or_default();
    let to_write = |live: &[Option<Seen>]| -> Vec<&PlannedObject> {
        plan.objects
            .iter()
            .zip(live)
            .enumerate()
            .filter(|(i, (_, live))| {
                will_write(settings, policy(*i), live.as_ref())
                    || will_label(policy(*i), live.as_ref())
            })
            .map(|(_, (object, _))| object)
            .collect()
    };
    let (live, allowed) = if settings.write_all {
        // Every object will be written: who owns them and what the identity may write are
        // asked at once.
        let all: Vec<&PlannedObject> = plan.objects.iter().collect();
        futures::try_join!(
            owners(client, plan, policies, bundle, identity, concurrency),
            allowed_by_kind(client, &all, identity, concurrency, access),
        )?
    } else {
        // The futures are built before they are streamed: a stream holding a closure over
        // borrowed items makes the whole reconcile future fail to be `Send` for all lifetimes.
        let mut listed = list_own(client, plan, &policy, bundle, concurrency).await;
        let reads: Vec<_> = plan
            .objects
            .iter()
            .enumerate()
            .map(|(i, object)| {
                let listed = listed.remove(&i);
                async move {
                    match listed {
                        Some(seen) => Ok(Some(seen)),
                        None => read_seen(client, object, policy(i), identity).await,
                    }
                }
            })
            .collect();
        let live: Vec<Option<Seen>> = stream::iter(reads)
            .buffered(concurrency)
            .try_collect()
            .await?;
        let allowed =
            allowed_by_kind(client, &to_write(&live), identity, concurrency, access).await?;
        (live, allowed)
    };
    check_owners(plan, &live, claimed, bundle)?;
    let sent: Vec<Sent> = (plan.objects.iter().zip(&live).enumerate())
        .filter(|(i, (_, live))| {
            will_write(settings, policy(*i), live.as_ref()) || will_label(policy(*i), live.as_ref())
        })
        .map(|(index, (object, live))| Sent {
            index,
            object,
            policy: policy(index),
            whole: will_write(settings, policy(index), live.as_ref()),
        })
        .collect();
    let unjudged = dry_run::judge(
        client,
        access,
        &sent,
        &allowed,
        identity,
        settings.write_all,
        concurrency,
    )
    .await?;
    Ok(Checked {
        live,
        policies: (0..plan.objects.len()).map(policy).collect(),
        unjudged,
    })
}

/// For new content: which objects of the plan exist with another bundle's label. One list of
/// metadata per kind and namespace, selecting only objects other bundles own; a kind or
/// namespace where `identity` may not list is read object by object instead, and so are
/// `IfNotPresent` objects, which are written only when absent.
async fn owners(
    client: &Client,
    plan: &Plan,
    policies: &[ObjectPolicy],
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
                let listed = match object_api(client, object).list_metadata(&params).await {
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
                    Err(e) if is_not_found(&e) => Some(HashMap::new()),
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
        .enumerate()
        .map(|(i, object)| {
            let policy = policies.get(i).copied().unwrap_or_default();
            let owners = listed
                .get(&group_key(object))
                .and_then(Option::as_ref)
                .filter(|_| policy.ssa != Ssa::IfNotPresent);
            async move {
                match owners {
                    Some(owners) => Ok(owners.get(&object.name).map(|owner| Seen {
                        owner: Some(owner.clone()),
                        matches: false,
                        drifted: Vec::new(),
                        // Written anyway (new content): the answer tells.
                        observed: Observed::default(),
                    })),
                    None => read_seen(client, object, policy, identity).await,
                }
            }
        })
        .collect();
    stream::iter(reads)
        .buffered(concurrency)
        .try_collect()
        .await
}

/// The writes of an apply, once [`check`] passed.
pub async fn write(
    client: &Client,
    kinds: &KindCache,
    plan: &Plan,
    identity: &str,
    settings: ApplySettings,
    checked: Checked,
) -> Result<ApplyOutcome> {
    write_waves(client, kinds, plan, identity, settings, checked, None).await
}

/// [`write`]; with `jobs`, the waves of rendered content go out one after the other, and the
/// apply stops before a wave while a Job of the wave before it is not complete: the outcome
/// says which (`waiting`), and what was applied so far. A Job that failed, or is not complete
/// within `jobs.timeout` of its creation, fails the apply (`WaveJobFailed`).
pub async fn write_waves(
    client: &Client,
    kinds: &KindCache,
    plan: &Plan,
    identity: &str,
    settings: ApplySettings,
    checked: Checked,
    jobs: Option<JobWaits>,
) -> Result<ApplyOutcome> {
    let concurrency = settings.concurrency.max(1);
    let Checked {
        live,
        policies,
        mut unjudged,
    } = checked;
    let mut outcome = ApplyOutcome::default();
    let mut served: HashSet<GroupVersionKind> = HashSet::new();
    let mut offset = 0;
    let waves = waves(&plan.objects, jobs.is_some());
    for (w, &wave) in waves.iter().enumerate() {
        let lives = &live[offset..offset + wave.len()];
        let wave_policies = &policies[offset..offset + wave.len()];
        let first = offset;
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
        // Objects whose namespace or kind the earlier waves made: judged before this wave
        // writes anything.
        let late = dry_run::take_late(wave, wave_policies, first, &mut unjudged, |_| true);
        dry_run::judge_wave(client, &late, identity, concurrency).await?;
        let writes: Vec<_> = wave
            .iter()
            .zip(lives)
            .zip(wave_policies)
            .map(|((object, live), policy)| {
                let unchanged = live
                    .as_ref()
                    .filter(|l| !will_write(&settings, *policy, Some(l)))
                    .map(Seen::observed);
                let label = will_label(*policy, live.as_ref());
                apply_one(client, kinds, object, *policy, unchanged, label, identity)
            })
            .collect();
        let results: Vec<Applied> = stream::iter(writes)
            .buffered(concurrency)
            .try_collect()
            .await?;
        // Nothing of a later wave goes out before the CRDs this wave wrote are established and
        // their kinds served: an operator's Deployment started earlier finds its CRDs missing,
        // and many check them only once at start.
        let crds: Vec<(&str, GroupVersionKind)> = wave
            .iter()
            .zip(&results)
            .filter(|(_, applied)| applied.written)
            .filter_map(|(object, _)| object.defines_crd.as_deref().map(|crd| (crd, object)))
            .flat_map(|(crd, object)| {
                served_kinds(&object.value())
                    .into_iter()
                    .map(move |gvk| (crd, gvk))
            })
            .filter(|(_, gvk)| served.insert(gvk.clone()))
            .collect();
        let waits: Vec<_> = crds
            .iter()
            .map(|(crd, gvk)| wait_served(client, kinds, crd, gvk, settings.crd_timeout))
            .collect();
        // Meanwhile the next wave's objects that wait for none of those kinds (their namespace
        // was just written) are judged.
        let next = waves.get(w + 1).copied().unwrap_or_default();
        let next_policies = &policies[offset..offset + next.len()];
        let ahead = dry_run::take_late(next, next_policies, offset, &mut unjudged, |o| {
            o.needs_crd.is_none()
        });
        futures::try_join!(
            stream::iter(waits)
                .buffer_unordered(concurrency)
                .try_collect::<()>(),
            dry_run::judge_wave(client, &ahead, identity, concurrency),
        )?;
        for applied in results {
            if applied.written {
                outcome.written += 1;
            } else {
                outcome.unchanged += 1;
            }
            outcome.observed.push(applied.observed);
        }
        // Rendered content: the next wave goes out once every Job of this one completed.
        if let Some(jobs) = jobs
            && let Some(next) = waves.get(w + 1)
            && let Some(rendered) = wave.first().and_then(PlannedObject::rendered_wave)
            && !wave[0].is_barrier()
        {
            let next_wave = next.first().and_then(PlannedObject::rendered_wave);
            let waiting =
                jobs::wave_jobs(client, wave, rendered, next_wave, identity, jobs.timeout).await?;
            if waiting.is_some() {
                outcome.waiting = waiting;
                return Ok(outcome);
            }
        }
    }
    Ok(outcome)
}

/// Fails with `Conflict` when a live object carries the label of another bundle, or, unless
/// it carries this bundle's, when another bundle's inventory lists it (`claimed`, one entry
/// per object): absent or unlabelled, it is still that bundle's (suspended, say, or its first
/// install cut short).
fn check_owners(
    plan: &Plan,
    live: &[Option<Seen>],
    claimed: &[Option<String>],
    bundle: &str,
) -> Result<()> {
    let unclaimed = std::iter::repeat(&None);
    for ((object, live), claimant) in plan
        .objects
        .iter()
        .zip(live)
        .zip(claimed.iter().chain(unclaimed))
    {
        let label = live.as_ref().and_then(|l| l.owner.as_deref());
        let owner = match label {
            Some(label) => Some(label),
            None => claimant.as_deref(),
        };
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
/// objects another; a wave starts only when the one before it is done. With `by_file_wave`
/// (rendered content), a run of other objects is split further where the wave of their file
/// ([`PlannedObject::rendered_wave`]) changes.
pub fn waves(objects: &[PlannedObject], by_file_wave: bool) -> Vec<&[PlannedObject]> {
    let mut waves = Vec::new();
    let mut start = 0;
    let apart = |a: &PlannedObject, b: &PlannedObject| {
        a.is_barrier() != b.is_barrier()
            || (by_file_wave && !a.is_barrier() && a.rendered_wave() != b.rendered_wave())
    };
    for i in 1..=objects.len() {
        if i == objects.len() || apart(&objects[start], &objects[i]) {
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
    match object_api(client, object).get(&object.name).await {
        Ok(live) => Ok(Some(serde_json::to_value(live).unwrap_or(Value::Null))),
        // A plain 404 (no Status body) means the kind is not served yet.
        Err(e) if is_not_found(&e) => Ok(None),
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
    policy: ObjectPolicy,
    identity: &str,
) -> Result<Option<Seen>> {
    let live = read_live(client, object, identity).await?;
    Ok(live.map(|live| seen_of(&live, object, policy)))
}

/// What the apply needs of `live`, the live state of `object`.
fn seen_of(live: &Value, object: &PlannedObject, policy: ObjectPolicy) -> Seen {
    let mut seen = Seen::of(live, &object.value(), policy);
    if carries_status(object) {
        seen.observed.view = Some(health_view(
            live,
            spec_needed(&object.gvk.group, &object.gvk.kind),
        ));
    }
    seen
}

/// A kind in a namespace with at least this many objects of the plan is listed once (by the
/// bundle's label) instead of read object by object.
const LIST_FROM: usize = 3;

/// The objects of the plan that are live and carry the bundle's label, found with one list per
/// kind and namespace that holds several objects of the plan: a replica taking a bundle over,
/// or a pass that checks for drift, reads a namespace's twenty ConfigMaps in one request, not
/// twenty. What a list does not find (absent, not labelled yet, or the list failed: an
/// identity may get but not list) is read one by one as before. CRDs are not listed: each may
/// weigh megabytes, and a list holds them all at once.
async fn list_own(
    client: &Client,
    plan: &Plan,
    policy: &impl Fn(usize) -> ObjectPolicy,
    bundle: &str,
    concurrency: usize,
) -> HashMap<usize, Seen> {
    let mut groups: HashMap<GroupKey, Vec<usize>> = HashMap::new();
    for (i, object) in plan.objects.iter().enumerate() {
        if object.defines_crd.is_none() {
            groups.entry(group_key(object)).or_default().push(i);
        }
    }
    let selector = format!("{BUNDLE_LABEL}={bundle}");
    let lists: Vec<_> = groups
        .into_values()
        .filter(|members| members.len() >= LIST_FROM)
        .map(|members| {
            let selector = selector.as_str();
            async move {
                let first = &plan.objects[members[0]];
                let params = ListParams::default().labels(selector);
                let Ok(list) = object_api(client, first).list(&params).await else {
                    return Vec::new();
                };
                let by_name: HashMap<&str, usize> = members
                    .iter()
                    .map(|&i| (plan.objects[i].name.as_str(), i))
                    .collect();
                list.items
                    .into_iter()
                    .filter_map(|mut item| {
                        let i = *by_name.get(item.metadata.name.as_deref()?)?;
                        let object = &plan.objects[i];
                        // Items of built-in kinds come without apiVersion and kind.
                        item.types.get_or_insert_with(|| TypeMeta {
                            api_version: object.gvk.api_version(),
                            kind: object.gvk.kind.clone(),
                        });
                        let live = serde_json::to_value(item).ok()?;
                        Some((i, seen_of(&live, object, policy(i))))
                    })
                    .collect::<Vec<_>>()
            }
        })
        .collect();
    stream::iter(lists)
        .buffer_unordered(concurrency)
        .flat_map(stream::iter)
        .collect()
        .await
}

/// What became of one object.
struct Applied {
    written: bool,
    observed: Observed,
}

/// Applies one object unless it is live as desired (`unchanged`: what the read that found it
/// so showed; then only labelled as the bundle's when `label`, see [`will_label`]), as its
/// policy says: `Merge` leaves the fields of a conflict to the managers that own them; `force`
/// recreates an object whose immutable fields changed.
async fn apply_one(
    client: &Client,
    kinds: &KindCache,
    object: &PlannedObject,
    policy: ObjectPolicy,
    unchanged: Option<Observed>,
    label: bool,
    identity: &str,
) -> Result<Applied> {
    if let Some(observed) = unchanged {
        if label {
            label_as_managed(&object_api(client, object), object, identity).await?;
        }
        return Ok(Applied {
            written: label,
            observed,
        });
    }
    let api = object_api(client, object);
    let force = policy.ssa != Ssa::Merge;
    // Fields `spec.ignore` leaves to other controllers go out with their live values: left out,
    // a field the provisioner owned alone would be removed by the API server.
    let with_live = match object.ignored.is_empty() {
        true => None,
        false => Some(with_ignored_fields(&api, object, identity).await?),
    };
    let mut applied = match &with_live {
        Some(value) => send(client, &api, object, value, force).await,
        None => send(client, &api, object, &object.object, force).await,
    };
    if policy.ssa == Ssa::Merge
        && let Err(kube::Error::Api(status)) = &applied
        && status.code == 409
    {
        // Applied once more without the fields of the conflict: they stay with their owners.
        let fields = conflicting_fields(status);
        let mut value = object.value();
        for field in &fields {
            remove_field(&mut value, field);
        }
        tracing::info!(%object, fields = %fields.join(", "), "fields left to the managers that own them (gantry.dev/ssa: Merge)");
        applied = send(client, &api, object, &value, false).await;
    }
    if let Err(kube::Error::Api(status)) = &applied {
        let fields = immutable_fields(status);
        if !fields.is_empty() {
            if !policy.force {
                return Err(Error::ImmutableFieldChanged {
                    object: object.to_string(),
                    fields,
                });
            }
            tracing::info!(%object, fields = %fields.join(", "), "immutable fields changed: recreating the object (gantry.dev/force: enabled)");
            recreate(&api, object, identity).await?;
            applied = send(client, &api, object, &object.object, force).await;
        }
    }
    match applied {
        Ok(answer) => Ok(Applied {
            written: true,
            observed: Observed::of(object, answer),
        }),
        Err(error) => {
            // A kind that is not served (any more) must be discovered again on the next attempt.
            if is_not_found(&error) {
                kinds.forget(&object.gvk);
            }
            if is_forbidden(&error) {
                return Err(forbidden(object, identity, &error));
            }
            if is_invalid(&error) {
                return Err(dry_run::invalid(object, &error));
            }
            Err(Error::Apply {
                object: object.to_string(),
                message: api_message(&error),
            })
        }
    }
}

/// Sets the bundle's label (the one the plan gives `object`) on the live object, and the
/// object's `gantry.dev/prune` annotation when it has one (a prune or an uninstall reads it
/// from the live object), and nothing else. A merge patch, not an apply: an apply of the label
/// alone would remove every field an earlier apply of Gantry's set (the object created by the
/// bundle, its label taken off since).
async fn label_as_managed(
    api: &Api<DynamicObject>,
    object: &PlannedObject,
    identity: &str,
) -> Result<()> {
    let value = object.value();
    let metadata = |map: &str, key: &str| {
        let pointer = format!("/metadata/{map}/{}", key.replace('/', "~1"));
        value.pointer(&pointer).cloned()
    };
    let mut patch =
        json!({ "metadata": { "labels": { BUNDLE_LABEL: metadata("labels", BUNDLE_LABEL) } } });
    if let Some(prune) = metadata("annotations", PRUNE_ANNOTATION) {
        patch["metadata"]["annotations"] = json!({ PRUNE_ANNOTATION: prune });
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    match api
        .patch_metadata(&object.name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_forbidden(&e) => Err(forbidden(object, identity, &e)),
        Err(e) => Err(Error::Apply {
            object: object.to_string(),
            message: format!("labelling it as the bundle's: {}", api_message(&e)),
        }),
    }
}

/// One server-side apply of `patch`, answered with the metadata only: the whole object would be
/// parsed only to be dropped, and a CRD of megabytes parses into tens of them.
/// Applies `patch` to `object`; the answer comes back as health sees it: health starts from
/// it instead of reading the object again.
async fn send<P: Serialize + std::fmt::Debug>(
    client: &Client,
    api: &Api<DynamicObject>,
    object: &PlannedObject,
    patch: &P,
    force: bool,
) -> kube::Result<Value> {
    let mut params = PatchParams::apply(FIELD_MANAGER);
    if force {
        params = params.force();
    }
    // Kinds without status: only the metadata is kept of the answer.
    let with_spec = carries_status(object) && spec_needed(&object.gvk.group, &object.gvk.kind);
    apply_for_health(client, api, &object.name, &params, patch, with_spec).await
}

/// Deletes the live object with foreground propagation (its dependents, a Job's Pods, go
/// first) and waits until it is gone, so that it can be created again.
async fn recreate(api: &Api<DynamicObject>, object: &PlannedObject, identity: &str) -> Result<()> {
    let failed = |error: kube::Error| {
        if is_forbidden(&error) {
            return forbidden(object, identity, &error);
        }
        Error::Apply {
            object: object.to_string(),
            message: format!(
                "deleting it to recreate it (gantry.dev/force: enabled): {}",
                api_message(&error)
            ),
        }
    };
    let Some(live) = api.get_metadata_opt(&object.name).await.map_err(failed)? else {
        return Ok(());
    };
    let uid = live.metadata.uid;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        // Only the object that was refused: one created since is left alone.
        preconditions: uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&object.name, &params).await {
        Ok(_) => {}
        Err(error) if is_not_found(&error) => return Ok(()),
        // The precondition failed: the object was already replaced.
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
        Err(error) => return Err(failed(error)),
    }
    let deadline = Instant::now() + RECREATE_TIMEOUT;
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(live) = api.get_metadata_opt(&object.name).await.map_err(failed)? else {
            return Ok(());
        };
        if live.metadata.uid != uid {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let finalizers = live.metadata.finalizers.unwrap_or_default();
            return Err(Error::Apply {
                object: object.to_string(),
                message: format!(
                    "deleted to be recreated (gantry.dev/force: enabled), and still there after {} (finalizers: {})",
                    gantry_rules::duration::GoDuration(RECREATE_TIMEOUT),
                    finalizers.join(", ")
                ),
            });
        }
        // Polled, not watched: the identity the bundle is applied as may read its objects
        // but not necessarily watch their kind.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_rules::plan::plan_objects;
    use gantry_rules::plan::testing::{config_map, crd, namespace, object, served};
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
        let names: Vec<Vec<&str>> = waves(&plan.objects, false)
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
        assert!(waves(&[], false).is_empty());
    }

    #[test]
    fn rendered_content_goes_out_wave_by_wave_after_its_namespaces_and_crds() {
        let in_file = |file: &str, name: &str| {
            object(
                file,
                json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name } }),
            )
        };
        let mut ns = namespace("app");
        ns.summary.file = "wave-002.yaml".into();
        let objects = vec![
            in_file("wave-000.yaml", "a"),
            in_file("wave-001.yaml", "b"),
            in_file("wave-001.yaml", "c"),
            ns,
            in_file("wave-002.yaml", "d"),
        ];
        let plan = plan_objects(objects, "b", Some("app"), served).unwrap();
        let names = |by_file_wave| -> Vec<Vec<String>> {
            waves(&plan.objects, by_file_wave)
                .iter()
                .map(|wave| wave.iter().map(|o| o.name.clone()).collect())
                .collect()
        };
        assert_eq!(
            names(true),
            [vec!["app"], vec!["a"], vec!["b", "c"], vec!["d"]]
        );
        // Plain content, or a pass that waits for no Job: the waves as ever.
        assert_eq!(names(false), [vec!["app"], vec!["a", "b", "c", "d"]]);
    }

    #[test]
    fn an_if_not_present_object_found_unlabelled_is_only_labelled() {
        let desired = json!({ "metadata": { "labels": { BUNDLE_LABEL: "mine" } },
                              "data": { "value": "bundle" } });
        let seen = |labels: Value| {
            let live = json!({ "metadata": { "labels": labels }, "data": { "value": "user" } });
            Seen::of(&live, &desired, ObjectPolicy::default())
        };
        let if_not_present = ObjectPolicy {
            ssa: Ssa::IfNotPresent,
            force: false,
        };
        let settings = ApplySettings {
            concurrency: 1,
            crd_timeout: Duration::ZERO,
            write_all: true,
        };
        let unlabelled = seen(json!({}));
        assert!(!will_write(&settings, if_not_present, Some(&unlabelled)));
        assert!(will_label(if_not_present, Some(&unlabelled)));
        // Labelled already, absent (created whole), or under another policy: nothing to label.
        assert!(!will_label(
            if_not_present,
            Some(&seen(json!({ BUNDLE_LABEL: "mine" })))
        ));
        assert!(!will_label(if_not_present, None));
        assert!(will_write(&settings, if_not_present, None));
        assert!(!will_label(ObjectPolicy::default(), Some(&unlabelled)));
    }

    /// ConfigMaps `n/a` and `n/b` of bundle `mine`.
    fn two_config_maps() -> Plan {
        plan_objects(
            vec![config_map("a"), config_map("b")],
            "mine",
            Some("n"),
            served,
        )
        .unwrap()
    }

    #[test]
    fn an_object_of_another_bundle_is_a_conflict() {
        let plan = two_config_maps();
        let seen = |live: Value| Some(Seen::of(&live, &json!({}), ObjectPolicy::default()));
        let labelled =
            |owner: &str| seen(json!({ "metadata": { "labels": { BUNDLE_LABEL: owner } } }));
        let unclaimed = [None, None];
        assert!(check_owners(&plan, &[None, labelled("mine")], &unclaimed, "mine").is_ok());
        assert!(
            check_owners(
                &plan,
                &[seen(json!({ "metadata": {} })), None],
                &unclaimed,
                "mine"
            )
            .is_ok()
        );
        match check_owners(&plan, &[None, labelled("theirs")], &unclaimed, "mine") {
            Err(Error::Conflict { object, owner }) => {
                assert_eq!(owner, "theirs");
                assert!(object.starts_with("ConfigMap n/b"), "{object}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_object_another_bundle_lists_is_a_conflict_unless_labelled_as_ours() {
        let plan = two_config_maps();
        let labelled = |owner: &str| {
            Some(Seen::of(
                &json!({ "metadata": { "labels": { BUNDLE_LABEL: owner } } }),
                &json!({}),
                ObjectPolicy::default(),
            ))
        };
        let claimed = [None, Some("theirs".to_string())];
        // Absent (their bundle suspended, the object deleted) or unlabelled: still theirs.
        for live in [
            None,
            Some(Seen::of(
                &json!({ "metadata": {} }),
                &json!({}),
                ObjectPolicy::default(),
            )),
        ] {
            match check_owners(&plan, &[None, live], &claimed, "mine") {
                Err(Error::Conflict { object, owner }) => {
                    assert_eq!(owner, "theirs");
                    assert!(object.starts_with("ConfigMap n/b"), "{object}");
                }
                other => panic!("{other:?}"),
            }
        }
        // Labelled as ours live: ours (the label is what the cluster says).
        assert!(check_owners(&plan, &[None, labelled("mine")], &claimed, "mine").is_ok());
    }
}
