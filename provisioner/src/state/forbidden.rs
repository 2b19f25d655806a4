//! Bundles stalled on `Forbidden`, by the identity they are applied as: a change of RBAC that
//! may concern an identity (a binding naming it, or any Role or ClusterRole) wakes its stalled
//! bundles at once, instead of at the next look (`--backoff-cap`). Only stalled bundles are
//! held, so a change costs a lookup, not a scan of every bundle.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use gantry_api::ServiceAccountReference;
use k8s_openapi::api::rbac::v1::Subject;

/// An identity bundles are applied as: a ServiceAccount, or (`None`) the provisioner's own.
pub type Identity = Option<ServiceAccountReference>;

#[derive(Default)]
pub struct ForbiddenStalls {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_identity: HashMap<Identity, HashSet<String>>,
    of_bundle: HashMap<String, Identity>,
    /// Bundles woken by an RBAC change since they stalled.
    woken: HashSet<String>,
}

impl ForbiddenStalls {
    /// Records that `bundle` stalled on `Forbidden` as `identity`; returns whether an RBAC
    /// change woke it since it last stalled (the API server may have answered before it saw the
    /// change: worth a quick second look).
    pub fn stalled(&self, bundle: &str, identity: Identity) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        inner.remove(bundle);
        let woken = inner.woken.remove(bundle);
        inner
            .by_identity
            .entry(identity.clone())
            .or_default()
            .insert(bundle.to_string());
        inner.of_bundle.insert(bundle.to_string(), identity);
        woken
    }

    /// `bundle` is no longer stalled on `Forbidden` (it went on, failed otherwise, or left).
    pub fn clear(&self, bundle: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.remove(bundle);
            inner.woken.remove(bundle);
        }
    }

    /// The stalled bundles a binding with `subjects` in `namespace` (`None`: a
    /// ClusterRoleBinding) may concern; `subjects` `None` (a Role or ClusterRole changed, bound
    /// to who knows whom): every stalled bundle. They are marked woken.
    pub fn wake(&self, subjects: Option<&[Subject]>, namespace: Option<&str>) -> Vec<String> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        let woken: Vec<String> = inner
            .by_identity
            .iter()
            .filter(|(identity, _)| match (subjects, identity) {
                (None, _) => true,
                // The provisioner's own user name is not known here: any binding may be its.
                (Some(_), None) => true,
                (Some(subjects), Some(account)) => subjects
                    .iter()
                    .any(|subject| names(subject, namespace, account)),
            })
            .flat_map(|(_, bundles)| bundles.iter().cloned())
            .collect();
        inner.woken.extend(woken.iter().cloned());
        woken
    }
}

impl Inner {
    fn remove(&mut self, bundle: &str) {
        if let Some(identity) = self.of_bundle.remove(bundle)
            && let Some(bundles) = self.by_identity.get_mut(&identity)
        {
            bundles.remove(bundle);
            if bundles.is_empty() {
                self.by_identity.remove(&identity);
            }
        }
    }
}

/// Whether `subject` of a binding in `namespace` names `account`: the ServiceAccount itself
/// (a RoleBinding's subject without a namespace is in the binding's), its user name, or a group
/// it belongs to.
fn names(subject: &Subject, namespace: Option<&str>, account: &ServiceAccountReference) -> bool {
    match subject.kind.as_str() {
        "ServiceAccount" => {
            let in_namespace = subject.namespace.as_deref().filter(|ns| !ns.is_empty());
            subject.name == account.name
                && in_namespace.or(namespace) == Some(account.namespace.as_str())
        }
        "User" => subject.name == account.username(),
        "Group" => {
            subject.name == "system:authenticated"
                || subject.name == "system:serviceaccounts"
                || subject.name == format!("system:serviceaccounts:{}", account.namespace)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(namespace: &str, name: &str) -> Identity {
        Some(ServiceAccountReference {
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    fn subject(kind: &str, name: &str, namespace: Option<&str>) -> Subject {
        Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(Into::into),
            ..Default::default()
        }
    }

    fn woken(
        stalls: &ForbiddenStalls,
        subjects: &[Subject],
        namespace: Option<&str>,
    ) -> Vec<String> {
        let mut woken = stalls.wake(Some(subjects), namespace);
        woken.sort();
        woken
    }

    #[test]
    fn a_binding_wakes_the_bundles_of_the_identities_it_names() {
        let stalls = ForbiddenStalls::default();
        assert!(!stalls.stalled("a", account("team", "deployer")));
        stalls.stalled("b", account("team", "other"));
        stalls.stalled("c", account("elsewhere", "deployer"));

        // A RoleBinding's ServiceAccount subject without a namespace is in the binding's.
        let sa = subject("ServiceAccount", "deployer", None);
        assert_eq!(
            woken(&stalls, std::slice::from_ref(&sa), Some("team")),
            ["a"]
        );
        assert_eq!(
            woken(&stalls, std::slice::from_ref(&sa), None),
            Vec::<String>::new()
        );
        let user = subject("User", "system:serviceaccount:elsewhere:deployer", None);
        assert_eq!(woken(&stalls, &[user], None), ["c"]);
        let group = subject("Group", "system:serviceaccounts:team", None);
        assert_eq!(woken(&stalls, &[group], Some("x")), ["a", "b"]);
        let everyone = subject("Group", "system:authenticated", None);
        assert_eq!(woken(&stalls, &[everyone], None), ["a", "b", "c"]);
        // A role may be bound to anyone.
        assert_eq!(stalls.wake(None, None).len(), 3);

        // Woken, it says so when it stalls again; once it went on, nothing wakes it.
        assert!(stalls.stalled("a", account("team", "deployer")));
        assert!(!stalls.stalled("a", account("team", "deployer")));
        stalls.clear("a");
        assert_eq!(
            woken(
                &stalls,
                &[subject("ServiceAccount", "deployer", Some("team"))],
                None
            ),
            Vec::<String>::new()
        );
    }
}
