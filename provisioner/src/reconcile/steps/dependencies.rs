//! `spec.dependsOn`: a bundle is installed or updated only when the bundles it names are Ready.
//! Waiting is not a failure: the bundle stops its pass, says which bundles it waits for, and is
//! woken by a change of one of them (`state::dependents` maps it). A missing bundle or a cycle is
//! reported once and waits for a change too, never retried on a timer.

use std::collections::HashSet;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, BundlePhase};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use crate::error::Result;
use crate::reconcile::pass::{Flow, Outcome, Pass};
use crate::status::Hold;
use gantry_rules::conditions::{ConditionStatus, find};

/// How far a chain of dependencies is followed looking for a cycle.
const MAX_DEPTH: usize = 64;

/// What the dependencies of a bundle say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ready,
    /// These bundles exist and are not Ready (name and why).
    Waiting(Vec<(String, String)>),
    /// These bundles do not exist.
    Missing(Vec<String>),
    /// The names along a cycle, starting and ending with the bundle itself.
    Cycle(Vec<String>),
}

/// Stops the pass while a dependency is not Ready, missing, or part of a cycle.
pub(crate) async fn check(pass: &mut Pass<'_>) -> Result<Flow<()>> {
    if pass.bundle.spec.depends_on.is_empty() {
        return Ok(Flow::Continue(()));
    }
    let bundles: Api<Bundle> = Api::all(pass.ctx.client.clone());
    let mut lookup = |name: String| {
        let bundles = bundles.clone();
        async move { bundles.get_opt(&name).await }
    };
    let verdict = judge(pass.bundle, &mut lookup).await?;
    let (reason, message, phase) = match verdict {
        Verdict::Ready => return Ok(Flow::Continue(())),
        Verdict::Waiting(waiting) => (
            reasons::DEPENDENCY_NOT_READY,
            format!(
                "waiting for {}",
                waiting
                    .iter()
                    .map(|(name, why)| format!("bundle {name} to be Ready ({why})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            BundlePhase::Pending,
        ),
        Verdict::Missing(missing) => (
            reasons::DEPENDENCY_NOT_FOUND,
            format!(
                "spec.dependsOn names bundles that do not exist: {}; the bundle waits until they are created",
                missing.join(", ")
            ),
            BundlePhase::Failing,
        ),
        Verdict::Cycle(cycle) => (
            reasons::DEPENDENCY_CYCLE,
            format!(
                "spec.dependsOn forms a cycle: {}; remove one of these dependencies",
                cycle.join(" -> ")
            ),
            BundlePhase::Failing,
        ),
    };
    pass.hold = Some(Hold {
        reason,
        message,
        keep_ready: false,
        phase: Some(phase),
    });
    Ok(Flow::Stop(Outcome::Done(Action::await_change())))
}

/// Judges the dependencies of `bundle`, reading bundles through `lookup` (`None`: absent).
pub(crate) async fn judge<F, Fut>(bundle: &Bundle, lookup: &mut F) -> kube::Result<Verdict>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = kube::Result<Option<Bundle>>>,
{
    let me = bundle.name_any();
    let mut missing = Vec::new();
    let mut waiting = Vec::new();
    let mut direct = Vec::new();
    for name in unique(&bundle.spec.depends_on) {
        if name == me {
            return Ok(Verdict::Cycle(vec![me.clone(), me]));
        }
        match lookup(name.clone()).await? {
            None => missing.push(name),
            Some(dependency) => {
                if let Some(why) = not_ready(&dependency) {
                    waiting.push((name, why));
                }
                direct.push(dependency);
            }
        }
    }
    // A cycle through this bundle: followed depth first from each direct dependency.
    let mut seen = HashSet::new();
    for dependency in direct {
        let mut path = vec![me.clone(), dependency.name_any()];
        if let Some(cycle) = find_cycle(&me, dependency, &mut path, &mut seen, lookup).await? {
            return Ok(Verdict::Cycle(cycle));
        }
    }
    Ok(if !missing.is_empty() {
        Verdict::Missing(missing)
    } else if !waiting.is_empty() {
        Verdict::Waiting(waiting)
    } else {
        Verdict::Ready
    })
}

/// Follows the dependencies of `from` (the last name of `path`) looking for `me`.
async fn find_cycle<F, Fut>(
    me: &str,
    from: Bundle,
    path: &mut Vec<String>,
    seen: &mut HashSet<String>,
    lookup: &mut F,
) -> kube::Result<Option<Vec<String>>>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = kube::Result<Option<Bundle>>>,
{
    // Iterative, with an explicit stack: (bundle, index of its next dependency).
    let mut stack: Vec<(Bundle, usize)> = Vec::new();
    if !seen.insert(from.name_any()) {
        return Ok(None);
    }
    stack.push((from, 0));
    while let Some((current, index)) = stack.last_mut() {
        let next = unique(&current.spec.depends_on).into_iter().nth(*index);
        *index += 1;
        let Some(next) = next else {
            stack.pop();
            path.pop();
            continue;
        };
        if next == me {
            let mut cycle = path.clone();
            cycle.push(me.to_string());
            return Ok(Some(cycle));
        }
        if stack.len() >= MAX_DEPTH || !seen.insert(next.clone()) {
            continue;
        }
        if let Some(bundle) = lookup(next.clone()).await? {
            path.push(next);
            stack.push((bundle, 0));
        }
    }
    Ok(None)
}

/// The names, each once, in order.
fn unique(names: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    names
        .iter()
        .filter(|n| seen.insert(n.as_str()))
        .cloned()
        .collect()
}

/// Why a dependency is not Ready, or `None` when it is Ready at its current generation.
fn not_ready(bundle: &Bundle) -> Option<String> {
    if bundle.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".to_string());
    }
    let ready = bundle
        .status
        .as_ref()
        .and_then(|s| find(&s.conditions, types::READY));
    match ready {
        Some(c)
            if c.status == ConditionStatus::True
                && c.observed_generation == bundle.metadata.generation =>
        {
            None
        }
        Some(c) if c.status == ConditionStatus::True => {
            Some("its latest spec is not reconciled yet".to_string())
        }
        Some(c) => Some(format!("{}: {}", c.reason, c.message)),
        None => Some("it has no status yet".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::status::set_condition;

    fn bundle(name: &str, depends_on: &[&str], ready: bool) -> Bundle {
        let mut bundle = Bundle::new(
            name,
            gantry_api::BundleSpec {
                image: "r/x:1".into(),
                depends_on: depends_on.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        );
        bundle.metadata.generation = Some(1);
        let mut status = gantry_api::BundleStatus::default();
        let reason = if ready {
            reasons::INSTALL_SUCCEEDED
        } else {
            reasons::INSTALLING
        };
        set_condition(
            &mut status.conditions,
            types::READY,
            ready,
            reason,
            "m",
            Some(1),
        );
        bundle.status = Some(status);
        bundle
    }

    async fn verdict(of: &Bundle, others: &[Bundle]) -> Verdict {
        let all: HashMap<String, Bundle> =
            others.iter().map(|b| (b.name_any(), b.clone())).collect();
        let mut lookup = |name: String| {
            let found = all.get(&name).cloned();
            async move { Ok(found) }
        };
        judge(of, &mut lookup).await.unwrap()
    }

    #[tokio::test]
    async fn ready_waiting_and_missing_dependencies() {
        let a = bundle("a", &[], true);
        let b = bundle("b", &[], false);
        assert_eq!(
            verdict(&bundle("c", &["a"], false), std::slice::from_ref(&a)).await,
            Verdict::Ready
        );
        match verdict(&bundle("c", &["a", "b"], false), &[a.clone(), b]).await {
            Verdict::Waiting(w) => assert_eq!(w[0].0, "b"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            verdict(&bundle("c", &["a", "z"], false), &[a]).await,
            Verdict::Missing(vec!["z".into()])
        );
    }

    #[tokio::test]
    async fn cycles_are_named_from_the_bundle_itself() {
        let a = bundle("a", &["b"], false);
        let b = bundle("b", &["c"], false);
        let c = bundle("c", &["a"], false);
        assert_eq!(
            verdict(&a, &[a.clone(), b, c]).await,
            Verdict::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        assert_eq!(
            verdict(&bundle("s", &["s"], false), &[]).await,
            Verdict::Cycle(vec!["s".into(), "s".into()])
        );
        // A cycle elsewhere is the other bundles' to report: this one only waits.
        let x = bundle("x", &["y"], false);
        let y = bundle("y", &["x"], false);
        match verdict(&bundle("d", &["x"], false), &[x, y]).await {
            Verdict::Waiting(w) => assert_eq!(w[0].0, "x"),
            other => panic!("{other:?}"),
        }
    }
}
