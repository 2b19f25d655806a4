//! `suspend`, `resume` and `reconcile`: steering the controller's work on bundles, one, several
//! or all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use gantry_api::conditions::{ReasonKind, reasons, types};
use gantry_api::{Bundle, RECONCILE_FORCE_ANNOTATION, RECONCILE_REQUESTED_ANNOTATION};
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use super::cluster::GlobalArgs;
use super::cluster::read_bundle;
use super::output::causes;

/// The bundles a command acts on: names, or `--all`.
#[derive(Args, Debug)]
pub struct Targets {
    /// The bundles (one or more).
    #[arg(required_unless_present = "all", value_name = "NAME")]
    names: Vec<String>,
    /// Every bundle of the cluster.
    #[arg(long, conflicts_with = "names")]
    all: bool,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle suspend my-app\n  kubectl bundle suspend app-a app-b\n  kubectl bundle suspend --all"
)]
pub struct SuspendArgs {
    #[command(flatten)]
    targets: Targets,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle resume my-app\n  kubectl bundle resume app-a app-b\n  kubectl bundle resume --all"
)]
pub struct ResumeArgs {
    #[command(flatten)]
    targets: Targets,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle reconcile my-app\n  kubectl bundle reconcile my-app --timeout 30s\n  kubectl bundle reconcile app-a app-b\n  kubectl bundle reconcile --all\n  kubectl bundle reconcile my-app --force   # corrects drift a spec.drift: Report bundle only reports"
)]
pub struct ReconcileArgs {
    #[command(flatten)]
    targets: Targets,
    /// Also correct drift of bundles with `spec.drift: Report`, this once: their live objects
    /// are applied again where they differ.
    #[arg(long)]
    force: bool,
    /// How long to wait for the outcome (e.g. 30s, 5m).
    #[arg(long, default_value = "5m", value_parser = super::cluster::parse_timeout)]
    timeout: Duration,
}

/// The bundles named, each read (so a missing one is named), or every bundle with `--all`
/// (none: said on stderr). Bundles that cannot be read are errors, reported by the caller.
async fn resolve(
    bundles: &Api<Bundle>,
    targets: &Targets,
) -> anyhow::Result<Vec<(String, anyhow::Result<Bundle>)>> {
    if targets.all {
        let mut all = bundles
            .list(&ListParams::default())
            .await
            .context("listing bundles")?
            .items;
        all.sort_by_key(|b| b.name_any());
        if all.is_empty() {
            eprintln!("No bundles found.");
        }
        return Ok(all.into_iter().map(|b| (b.name_any(), Ok(b))).collect());
    }
    let mut found = Vec::new();
    // A name given twice is acted on once.
    let mut seen = BTreeSet::new();
    for name in &targets.names {
        if seen.insert(name) {
            let read = read_bundle(bundles, name)
                .await
                .map_err(anyhow::Error::from);
            found.push((name.clone(), read));
        }
    }
    Ok(found)
}

/// The end of a command over several bundles: with one bundle, its error as it is; with several,
/// each failure was printed as it happened, and this sums them up.
fn conclude(failures: Vec<anyhow::Error>, total: usize) -> anyhow::Result<()> {
    match failures.len() {
        0 => Ok(()),
        1 if total == 1 => Err(failures.into_iter().next().expect("one failure")),
        n => bail!("{n} of {total} bundles failed (see above)"),
    }
}

/// Prints a failure of one of several bundles at once (the summary comes at the end), and keeps it.
fn fail(failures: &mut Vec<anyhow::Error>, several: bool, error: anyhow::Error) {
    if several {
        eprintln!("error: {}", causes(&error));
    }
    failures.push(error);
}

/// The line for a bundle already as `suspend` asks, which is left unwritten, as kubectl says
/// `unchanged` of an object it had nothing to change in.
fn unchanged(bundle: &Bundle, suspend: bool) -> Option<String> {
    (bundle.spec.suspend == suspend).then(|| {
        format!(
            "bundle.gantry.dev/{} {} (unchanged)",
            bundle.name_any(),
            if suspend {
                "already suspended"
            } else {
                "not suspended"
            }
        )
    })
}

/// Sets `spec.suspend` of each target to `suspend` and prints `done(name)` for each changed,
/// [`unchanged`] for the others.
async fn set_suspend(
    global: &GlobalArgs,
    targets: &Targets,
    suspend: bool,
    done: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    // `null` removes the field: a resumed bundle looks as one never suspended.
    let patch = json!({ "spec": { "suspend": if suspend { json!(true) } else { Value::Null } } });
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let found = resolve(&bundles, targets).await?;
    let several = found.len() > 1;
    let mut failures = Vec::new();
    let total = found.len();
    for (name, bundle) in found {
        let patched = match bundle.map(|b| unchanged(&b, suspend)) {
            Ok(Some(line)) => {
                println!("{line}");
                continue;
            }
            Ok(None) => bundles
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("updating bundle {name}")),
            Err(e) => Err(e),
        };
        match patched {
            Ok(_) => println!("{}", done(&name)),
            Err(e) => fail(&mut failures, several, e),
        }
    }
    conclude(failures, total)
}

pub async fn suspend(global: &GlobalArgs, args: SuspendArgs) -> anyhow::Result<()> {
    set_suspend(global, &args.targets, true, |name| {
        format!(
            "bundle {name} suspended: nothing is applied, pruned or repaired until `kubectl bundle resume {name}`"
        )
    })
    .await
}

pub async fn resume(global: &GlobalArgs, args: ResumeArgs) -> anyhow::Result<()> {
    set_suspend(global, &args.targets, false, |name| {
        format!("bundle {name} resumed")
    })
    .await
}

/// What a handled request to reconcile ended in.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Ready at the bundle's generation.
    Ready,
    /// The pass stopped at the approval: the digest waits for an approver. Nothing more will
    /// happen until someone decides, so waiting longer would only wait for the timeout.
    AwaitingApproval(String),
    /// An approver denied the resolved digest: nothing of it is installed until a new
    /// decision or new content.
    Denied(String),
    /// The bundle was suspended meanwhile: the pass did nothing.
    Suspended,
    /// A failure: the `Ready` condition's reason and message.
    Failed(String),
}

/// What the status says about the request to reconcile made at `requested`: `None` while it
/// is not handled (`status.lastHandledReconcileAt` is another value) or the pass it started is
/// still under way (unpacking, installing, waiting for a dependency or for health).
fn outcome(bundle: &Bundle, requested: &str) -> Option<Outcome> {
    let status = bundle.status.as_ref()?;
    if status.last_handled_reconcile_at.as_deref() != Some(requested) {
        return None;
    }
    let ready = find(&status.conditions, types::READY)?;
    // A suspended bundle keeps the Ready status it had: the reason says it is held.
    if ready.reason == reasons::SUSPENDED {
        return Some(Outcome::Suspended);
    }
    if ready.status == ConditionStatus::True {
        let current = ready.observed_generation == bundle.metadata.generation;
        return current.then_some(Outcome::Ready);
    }
    match ready.reason.as_str() {
        reasons::AWAITING_APPROVAL => Some(Outcome::AwaitingApproval(ready.message.clone())),
        reasons::DENIED => Some(Outcome::Denied(ready.message.clone())),
        reason if ReasonKind::of(reason) == ReasonKind::Failure => Some(Outcome::Failed(format!(
            "{}: {}",
            ready.reason, ready.message
        ))),
        _ => None,
    }
}

/// Reports one bundle's outcome: its line on stdout, or its error.
fn report(name: &str, outcome: Outcome) -> anyhow::Result<()> {
    match outcome {
        Outcome::Ready => {
            println!("bundle {name} reconciled: Ready");
            Ok(())
        }
        Outcome::AwaitingApproval(message) => {
            println!(
                "bundle {name} reconciled: it now waits for an approver ({message}); see `kubectl bundle status {name}`"
            );
            Ok(())
        }
        Outcome::Denied(message) => bail!(
            "bundle {name} reconciled: its digest is denied ({message}); nothing of it is installed until `kubectl bundle approve {name}` or new content"
        ),
        Outcome::Suspended => bail!(
            "bundle {name} was suspended meanwhile: nothing was reconciled (`kubectl bundle resume {name}`)"
        ),
        Outcome::Failed(why) => bail!("bundle {name} reconciled and failed: {why}"),
    }
}

pub async fn reconcile(global: &GlobalArgs, args: ReconcileArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let found = resolve(&bundles, &args.targets).await?;
    let total = found.len();
    let several = total > 1;
    let mut failures = Vec::new();
    let requested = Timestamp::now().to_string();
    // The force annotation names the request it goes with, so that it forces that one pass.
    let mut annotations = json!({ RECONCILE_REQUESTED_ANNOTATION: requested });
    if args.force {
        annotations[RECONCILE_FORCE_ANNOTATION] = json!(requested);
    }
    let patch = json!({ "metadata": { "annotations": annotations } });
    // The bundles whose request was written, awaiting their outcome.
    let mut pending = BTreeSet::new();
    for (name, bundle) in found {
        let bundle = match bundle {
            Ok(bundle) => bundle,
            Err(e) => {
                fail(&mut failures, several, e);
                continue;
            }
        };
        if bundle.spec.suspend {
            // `--all` means the bundles that reconcile; a suspended one named is an error.
            if args.targets.all {
                eprintln!("bundle {name} is suspended: skipped");
            } else {
                fail(
                    &mut failures,
                    several,
                    anyhow::anyhow!(
                        "bundle {name} is suspended: resume it first (`kubectl bundle resume {name}`)"
                    ),
                );
            }
            continue;
        }
        match bundles
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("updating bundle {name}"))
        {
            Ok(_) => {
                pending.insert(name);
            }
            Err(e) => fail(&mut failures, several, e),
        }
    }
    if pending.is_empty() {
        return conclude(failures, total);
    }
    eprintln!(
        "reconcile of {} requested; waiting up to {:?}",
        match pending.len() {
            1 => format!("bundle {}", pending.first().expect("one")),
            n => format!("{n} bundles"),
        },
        args.timeout
    );
    let mut outcomes = BTreeMap::new();
    let waited = tokio::time::timeout(
        args.timeout,
        wait_outcomes(&bundles, &requested, &mut pending, &mut outcomes, several),
    )
    .await;
    match waited {
        Ok(result) => result?,
        Err(_) => {
            for name in std::mem::take(&mut pending) {
                let now = bundles.get_opt(&name).await.ok().flatten();
                let error = match now {
                    None => anyhow::anyhow!("bundle {name} was deleted while waiting"),
                    Some(bundle) => {
                        let ready = bundle
                            .status
                            .as_ref()
                            .and_then(|s| find(&s.conditions, types::READY))
                            .map(|c| format!(" (Ready {}: {}: {})", c.status, c.reason, c.message))
                            .unwrap_or_default();
                        anyhow::anyhow!(
                            "bundle {name} is not Ready after {:?}{ready}",
                            args.timeout
                        )
                    }
                };
                fail(&mut failures, several, error);
            }
        }
    }
    for result in outcomes.into_values() {
        if let Err(e) = result {
            failures.push(e);
        }
    }
    conclude(failures, total)
}

/// Watches the pending bundles until each has an outcome for `requested`, reporting each as it
/// comes (a line on stdout, or, among several, its error on stderr).
async fn wait_outcomes(
    bundles: &Api<Bundle>,
    requested: &str,
    pending: &mut BTreeSet<String>,
    outcomes: &mut BTreeMap<String, anyhow::Result<()>>,
    several: bool,
) -> anyhow::Result<()> {
    // One bundle: a watch of that object alone; several: one watch of all bundles.
    let config = match pending.iter().collect::<Vec<_>>().as_slice() {
        [name] => watcher::Config::default().fields(&format!("metadata.name={name}")),
        _ => watcher::Config::default(),
    };
    let mut events = watcher(bundles.clone(), config).default_backoff().boxed();
    while !pending.is_empty() {
        let Some(event) = events.try_next().await.context("watching bundles")? else {
            bail!("the watch of bundles ended");
        };
        let (bundle, deleted) = match event {
            watcher::Event::Apply(b) | watcher::Event::InitApply(b) => (b, false),
            watcher::Event::Delete(b) => (b, true),
            watcher::Event::Init | watcher::Event::InitDone => continue,
        };
        let name = bundle.name_any();
        if !pending.contains(&name) {
            continue;
        }
        let result = if deleted {
            Err(anyhow::anyhow!("bundle {name} was deleted while waiting"))
        } else {
            match outcome(&bundle, requested) {
                Some(outcome) => report(&name, outcome),
                None => continue,
            }
        };
        pending.remove(&name);
        if let Err(e) = &result
            && several
        {
            eprintln!("error: {}", causes(e));
        }
        outcomes.insert(name, result);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testing::condition;
    use gantry_api::{BundleSpec, BundleStatus};

    fn bundle(handled: Option<&str>, ready: bool, reason: &str) -> Bundle {
        let mut bundle = Bundle::new("b", BundleSpec::default());
        bundle.metadata.generation = Some(2);
        bundle.status = Some(BundleStatus {
            last_handled_reconcile_at: handled.map(str::to_string),
            conditions: vec![condition(
                types::READY,
                if ready { "True" } else { "False" },
                reason,
                "m",
                Some(2),
            )],
            ..Default::default()
        });
        bundle
    }

    #[test]
    fn a_bundle_already_as_asked_is_unchanged() {
        let mut suspended = Bundle::new("b", BundleSpec::default());
        suspended.spec.suspend = true;
        let running = Bundle::new("b", BundleSpec::default());
        assert_eq!(
            unchanged(&running, false).as_deref(),
            Some("bundle.gantry.dev/b not suspended (unchanged)")
        );
        assert_eq!(
            unchanged(&suspended, true).as_deref(),
            Some("bundle.gantry.dev/b already suspended (unchanged)")
        );
        assert_eq!(unchanged(&suspended, false), None, "resumed");
        assert_eq!(unchanged(&running, true), None, "suspended");
    }

    #[test]
    fn only_a_handled_request_has_an_outcome() {
        let ready = bundle(Some("t1"), true, reasons::INSTALL_SUCCEEDED);
        assert_eq!(outcome(&ready, "t1"), Some(Outcome::Ready));
        assert_eq!(outcome(&ready, "t2"), None, "an older request");
        let failing = bundle(Some("t1"), false, reasons::PULL_FAILED);
        assert!(matches!(outcome(&failing, "t1"), Some(Outcome::Failed(_))));
        let installing = bundle(Some("t1"), false, reasons::INSTALLING);
        assert_eq!(outcome(&installing, "t1"), None, "still under way");
        let dependency = bundle(Some("t1"), false, reasons::DEPENDENCY_NOT_READY);
        assert_eq!(outcome(&dependency, "t1"), None, "a dependency gets ready");
    }

    #[test]
    fn states_only_a_person_ends_are_outcomes() {
        let awaiting = bundle(Some("t1"), false, reasons::AWAITING_APPROVAL);
        assert_eq!(
            outcome(&awaiting, "t1"),
            Some(Outcome::AwaitingApproval("m".into()))
        );
        assert_eq!(outcome(&awaiting, "t0"), None, "not handled yet");
        let denied = bundle(Some("t1"), false, reasons::DENIED);
        assert_eq!(outcome(&denied, "t1"), Some(Outcome::Denied("m".into())));
        // Suspended keeps Ready's status, True included.
        let suspended = bundle(Some("t1"), true, reasons::SUSPENDED);
        assert_eq!(outcome(&suspended, "t1"), Some(Outcome::Suspended));
        assert!(report("b", Outcome::AwaitingApproval("m".into())).is_ok());
        assert!(report("b", Outcome::Denied("m".into())).is_err());
    }
}
