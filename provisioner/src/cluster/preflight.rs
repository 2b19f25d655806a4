//! The authorization preflight of an apply: before anything of a bundle is written, whether the
//! identity it is applied as may write every object that will be written. Kinds are asked
//! about with access reviews ([`AccessReviews`]); objects are checked one by one with a
//! server-side dry run ([`crate::cluster::dry_run`]) where that answer is no and for RBAC
//! objects.

use std::collections::HashSet;

use futures::{StreamExt, TryStreamExt, stream};
use kube::Client;

use crate::cluster::access::{AccessReviews, Question};
use crate::cluster::errors::api_message;
use crate::error::{Error, Result};
use gantry_rules::plan::PlannedObject;

/// A kind (by its resource) in a namespace (`None`: cluster-scoped).
pub type GroupKey = (String, String, String, Option<String>);

pub fn group_key(object: &PlannedObject) -> GroupKey {
    (
        object.gvk.group.clone(),
        object.gvk.version.clone(),
        object.resource.plural.clone(),
        object.namespace.clone(),
    )
}

/// Objects of the RBAC API: the API server refuses to let anyone grant more than it holds,
/// which only a dry run of the write itself finds out.
pub fn is_rbac(object: &PlannedObject) -> bool {
    object.gvk.group == "rbac.authorization.k8s.io"
}

/// The question "may the identity `verb` objects of `object`'s kind in `namespace`, named
/// `name`?".
fn question<'a>(
    object: &'a PlannedObject,
    verb: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
) -> Question<'a> {
    Question {
        group: &object.gvk.group,
        version: &object.gvk.version,
        resource: &object.resource.plural,
        verb,
        namespace,
        name,
    }
}

/// The kinds (per namespace) of `objects` that `identity` may create and patch whatever the
/// object's name: two access reviews per kind instead of a dry run per object. Asked first for
/// all namespaces at once (answers reused for a while, see [`AccessReviews`]); where that is
/// no, for the object's namespace.
pub async fn allowed_by_kind(
    client: &Client,
    objects: &[&PlannedObject],
    identity: &str,
    concurrency: usize,
    access: &AccessReviews,
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
                review(client, access, object, "create", None, None, identity),
                review(client, access, object, "patch", None, None, identity),
            )?;
            if create.is_none() && patch.is_none() {
                return Ok(Some(key));
            }
            let Some(namespace) = object.namespace.as_deref() else {
                return Ok(None);
            };
            let (create, patch) = futures::try_join!(
                review(
                    client,
                    access,
                    object,
                    "create",
                    Some(namespace),
                    None,
                    identity
                ),
                review(
                    client,
                    access,
                    object,
                    "patch",
                    Some(namespace),
                    None,
                    identity
                ),
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

/// One access review: may `identity` do `verb` on objects of `object`'s kind in `namespace`
/// (`None`: all) and on the one called `name` (`None`: any)? `None` when it may, else the
/// refusal, naming the object and the identity.
pub async fn review(
    client: &Client,
    access: &AccessReviews,
    object: &PlannedObject,
    verb: &str,
    namespace: Option<&str>,
    name: Option<&str>,
    identity: &str,
) -> Result<Option<Error>> {
    let status = access
        .review(client, identity, &question(object, verb, namespace, name))
        .await
        .map_err(|e| Error::Apply {
            object: object.to_string(),
            message: format!("reviewing access as {identity}: {}", api_message(&e)),
        })?;
    if status.allowed {
        return Ok(None);
    }
    let scope = match namespace {
        Some(ns) => format!(" in namespace {ns}"),
        None if object.namespaced => " in all namespaces".to_string(),
        None => String::new(),
    };
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

/// The API server's Forbidden for `object`, naming the identity.
pub fn forbidden(object: &PlannedObject, identity: &str, error: &kube::Error) -> Error {
    Error::Forbidden {
        object: object.to_string(),
        identity: identity.to_string(),
        message: api_message(error),
    }
}
