//! The dry run before the first write of new content: what only the API server can judge (its
//! validation, admission, RBAC's escalation checks) is asked with a server-side apply with
//! `dryRun=All` of every object that will be sent, with the field manager and body of the real
//! apply, before anything of the content is written. An object the dry run cannot reach yet
//! (its namespace or its kind comes with the bundle) is judged once the wave before it is
//! written (while that wave's CRDs become established, unless it waits for one of them) and
//! before its own wave writes anything.
//!
//! Drift repair of content already installed dry-runs only what the authorization preflight
//! asks it to (RBAC objects, and kinds the identity may not write whatever the name): the
//! content was judged when it was installed.

use std::collections::HashSet;

use futures::{StreamExt, TryStreamExt, stream};
use gantry_api::FIELD_MANAGER;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::cluster::access::AccessReviews;
use crate::cluster::discovery::object_api;
use crate::cluster::errors::{api_message, is_forbidden, is_invalid, is_not_found};
use crate::cluster::preflight::{GroupKey, forbidden, group_key, is_rbac, review};
use crate::error::{Error, Result};
use gantry_rules::managed_fields::immutable_fields;
use gantry_rules::object_policy::{ObjectPolicy, Ssa};
use gantry_rules::plan::PlannedObject;

/// An object an apply will touch, as the dry run needs it.
#[derive(Clone, Copy)]
pub struct Sent<'a> {
    /// Its index in the plan.
    pub index: usize,
    pub object: &'a PlannedObject,
    pub policy: ObjectPolicy,
    /// Whether the object itself goes out (an apply), not only the bundle's label.
    pub whole: bool,
}

/// What a dry run found of one object.
enum Verdict {
    Accepted,
    /// Its namespace or kind does not exist yet: the dry run could not judge it.
    Unreachable,
}

/// Judges, before the first write, the objects an apply will touch (`sent`). With `new_content`
/// (new content or a new plan: every object is written), every object sent whole is dry-run;
/// otherwise, and for objects only labelled, only where the identity's permission is not
/// known from its kind (`allowed`) and for RBAC objects. Concurrently, at most `concurrency`
/// at once. Returns the indices of the objects the dry run could not reach, to be judged at
/// the start of their wave ([`judge_wave`]).
///
/// One object of each kind and namespace goes first: when its namespace or kind is not there
/// yet (the bundle creates it), none of the others is, and they wait for their wave without a
/// request of their own, so a bundle that brings its namespace is dry-run once, not twice.
pub async fn judge(
    client: &Client,
    access: &AccessReviews,
    sent: &[Sent<'_>],
    allowed: &HashSet<GroupKey>,
    identity: &str,
    new_content: bool,
    concurrency: usize,
) -> Result<HashSet<usize>> {
    let mut firsts = HashSet::new();
    let (probes, rest): (Vec<Judged>, Vec<Judged>) = sent
        .iter()
        .filter_map(|sent| {
            let key = group_key(sent.object);
            let authorize = is_rbac(sent.object) || !allowed.contains(&key);
            let validate = new_content && sent.whole;
            (authorize || validate).then_some(Judged {
                sent,
                authorize,
                validate,
            })
        })
        .partition(|judged| firsts.insert(group_key(judged.sent.object)));
    let mut late = judge_all(client, access, &probes, identity, concurrency).await?;
    let out_of_reach: HashSet<GroupKey> = probes
        .iter()
        .filter(|judged| late.contains(&judged.sent.index))
        .map(|judged| group_key(judged.sent.object))
        .collect();
    // An object out of reach whose permission is still to be asked is asked about by name.
    let (waiting, asked): (Vec<Judged>, Vec<Judged>) = rest
        .into_iter()
        .partition(|j| !j.authorize && out_of_reach.contains(&group_key(j.sent.object)));
    late.extend(waiting.iter().map(|judged| judged.sent.index));
    late.extend(judge_all(client, access, &asked, identity, concurrency).await?);
    Ok(late)
}

/// An object to dry-run before the first write, and why.
struct Judged<'a> {
    sent: &'a Sent<'a>,
    /// Its permission is not known from its kind (or it is an RBAC object).
    authorize: bool,
    /// It is new content sent whole: what the API server makes of it is asked.
    validate: bool,
}

/// Dry-runs `judged`, at most `concurrency` at once; the objects out of reach that are to be
/// judged at their wave.
async fn judge_all(
    client: &Client,
    access: &AccessReviews,
    judged: &[Judged<'_>],
    identity: &str,
    concurrency: usize,
) -> Result<HashSet<usize>> {
    let runs: Vec<_> = judged
        .iter()
        .map(|judged| async move {
            let authorize = judged.authorize.then_some(access);
            let verdict = judge_one(client, judged.sent, identity, authorize).await?;
            // Only a whole write of new content is judged again at its wave.
            let late = judged.validate && matches!(verdict, Verdict::Unreachable);
            Ok::<_, Error>(late.then_some(judged.sent.index))
        })
        .collect();
    let late: Vec<Option<usize>> = stream::iter(runs)
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    Ok(late.into_iter().flatten().collect())
}

/// Judges, at the start of a wave and before it writes anything, the objects of the wave the
/// first dry run could not reach: their namespace and CRD are in place now. One still out of
/// reach is left to its apply.
pub async fn judge_wave(
    client: &Client,
    sent: &[Sent<'_>],
    identity: &str,
    concurrency: usize,
) -> Result<()> {
    let judged: Vec<_> = sent
        .iter()
        .map(|sent| judge_one(client, sent, identity, None))
        .collect();
    stream::iter(judged)
        .buffer_unordered(concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// Takes the objects of `wave` (its first at `first` in the plan, with its `policies`) still to
/// be judged (`unjudged`) and `ready` to be (their namespace and kind exist by now).
pub fn take_late<'a>(
    wave: &'a [PlannedObject],
    policies: &[ObjectPolicy],
    first: usize,
    unjudged: &mut HashSet<usize>,
    ready: impl Fn(&PlannedObject) -> bool,
) -> Vec<Sent<'a>> {
    (wave.iter().zip(policies).enumerate())
        .filter(|(i, (object, _))| ready(object) && unjudged.remove(&(first + i)))
        .map(|(i, (object, policy))| Sent {
            index: first + i,
            object,
            policy: *policy,
            whole: true,
        })
        .collect()
}

/// One object's dry run. `authorize` (the access reviews to ask): the identity's permission for
/// it is not known yet, so a `403` is RBAC's (else admission's: a quota, Pod Security, a
/// webhook), and an object out of reach is asked about with access reviews by name.
async fn judge_one(
    client: &Client,
    sent: &Sent<'_>,
    identity: &str,
    authorize: Option<&AccessReviews>,
) -> Result<Verdict> {
    let Sent { object, policy, .. } = *sent;
    let api = object_api(client, object);
    // `fieldValidation=Ignore`: the server's default (`Warn`) decodes the body a second time only
    // to warn of unknown fields, which never refuses it; the real apply keeps the default.
    let mut params = PatchParams::apply(FIELD_MANAGER)
        .dry_run()
        .validation_ignore();
    // As the apply: `Merge` yields the fields of a conflict instead of taking them.
    if policy.ssa != Ssa::Merge {
        params = params.force();
    }
    let answer = match object.ignored.is_empty() {
        true => {
            api.patch_metadata(&object.name, &params, &Patch::Apply(&object.object))
                .await
        }
        false => {
            let body = with_ignored_fields(&api, object, identity).await?;
            api.patch_metadata(&object.name, &params, &Patch::Apply(&body))
                .await
        }
    };
    let error = match answer {
        Ok(_) => return Ok(Verdict::Accepted),
        Err(error) => error,
    };
    if is_forbidden(&error) {
        if authorize.is_some() {
            return Err(forbidden(object, identity, &error));
        }
        return Err(Error::Apply {
            object: object.to_string(),
            message: api_message(&error),
        });
    }
    if is_not_found(&error) {
        if let Some(access) = authorize {
            let namespace = object.namespace.as_deref();
            for verb in ["create", "patch"] {
                let name = (verb == "patch").then_some(object.name.as_str());
                if let Some(refusal) =
                    review(client, access, object, verb, namespace, name, identity).await?
                {
                    return Err(refusal);
                }
            }
        }
        return Ok(Verdict::Unreachable);
    }
    if let kube::Error::Api(status) = &error {
        let fields = immutable_fields(status);
        if !fields.is_empty() {
            // With `gantry.dev/force: enabled` the apply deletes and recreates the object.
            if policy.force {
                return Ok(Verdict::Accepted);
            }
            return Err(Error::ImmutableFieldChanged {
                object: object.to_string(),
                fields,
            });
        }
        // A conflict of a `Merge` object: the apply leaves those fields to their owners.
        if status.code == 409 {
            return Ok(Verdict::Accepted);
        }
    }
    if is_invalid(&error) {
        return Err(invalid(object, &error));
    }
    Err(Error::Apply {
        object: object.to_string(),
        message: format!("dry run: {}", api_message(&error)),
    })
}

/// The API server's `Invalid` (422) for `object`.
pub fn invalid(object: &PlannedObject, error: &kube::Error) -> Error {
    Error::InvalidObject {
        object: object.to_string(),
        message: api_message(error),
    }
}

/// The body the dry run and the apply send: `object` with its ignored fields back: their live values, or the bundle's where the object
/// (or the field) is not live.
pub(crate) async fn with_ignored_fields(
    api: &Api<DynamicObject>,
    object: &PlannedObject,
    identity: &str,
) -> Result<Value> {
    let live = match api.get_opt(&object.name).await {
        Ok(live) => live.map(|live| serde_json::to_value(live).unwrap_or(Value::Null)),
        Err(e) if is_forbidden(&e) => return Err(forbidden(object, identity, &e)),
        Err(e) => {
            return Err(Error::Apply {
                object: object.to_string(),
                message: api_message(&e),
            });
        }
    };
    let mut value = object.value();
    gantry_api::ignore::restore_fields(&mut value, &object.ignored, live.as_ref());
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_rules::plan::plan_objects;
    use gantry_rules::plan::testing::{config_map, namespace, served};

    #[test]
    fn late_objects_are_taken_once_and_only_when_ready() {
        let plan = plan_objects(
            vec![namespace("app"), config_map("a"), config_map("b")],
            "x",
            Some("app"),
            served,
        )
        .unwrap();
        let wave = &plan.objects[1..];
        let policies = [ObjectPolicy::default(); 2];
        let mut unjudged: HashSet<usize> = [2].into();
        assert!(take_late(wave, &policies, 1, &mut unjudged, |_| false).is_empty());
        let late = take_late(wave, &policies, 1, &mut unjudged, |_| true);
        let names: Vec<(usize, &str)> = late
            .iter()
            .map(|s| (s.index, s.object.name.as_str()))
            .collect();
        assert_eq!(names, [(2, "b")]);
        assert!(unjudged.is_empty(), "taken once");
        assert!(take_late(wave, &policies, 1, &mut unjudged, |_| true).is_empty());
    }
}
