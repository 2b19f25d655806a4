//! The chaos run: bundles are created, moved to new content, approved and deleted while the
//! parts of a local environment (provisioner, storage server, registry, kube-apiserver, etcd)
//! are killed and restarted. When the faults stop and the environment settles, it checks that
//! nothing was lost, left behind or applied without approval, prints the faults injected and the
//! invariants held, and exits non-zero on any violation.
//!
//! With `--replicas N` (N > 1), N provisioner replicas share the bundles (`--sharding`); a
//! replica is also paused past its shard Lease now and then, and the API server's audit log
//! must show each bundle's objects written by the replica it was assigned to, and no other.
//!
//! Loopback only; bounded in time (`--duration` of churn, then `--settle` at most).
#![forbid(unsafe_code)]

mod daemons;
mod invariants;
mod soak;
mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use gantry_tests::{
    ControlPlane, Lifetime, Provisioner, ProvisionerOptions, Registry, RegistryOptions,
    StorageOptions, StorageServer, stop_detached, stop_groups,
};

use daemons::{Daemons, Fault};
use workload::Workload;

/// The namespace of the provisioner (its Lease), as the manifests name it.
const NAMESPACE: &str = "gantry-system";

#[derive(Parser)]
#[command(about = "Bundles churned while the environment's parts are killed; then invariants")]
struct Cli {
    /// Number of bundles.
    #[arg(long, default_value_t = 100)]
    bundles: usize,
    /// How long bundles are churned and faults injected, in seconds.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// How long the environment may take to settle once the faults stop, in seconds.
    #[arg(long, default_value_t = 300)]
    settle: u64,
    /// Mean seconds between two faults.
    #[arg(long, default_value_t = 4.0)]
    fault_interval: f64,
    /// Directory for the environment's state and logs (removed at the end unless --keep).
    #[arg(long, default_value = "target/chaos")]
    state_dir: PathBuf,
    /// Leave the environment running and its state in place at the end.
    #[arg(long)]
    keep: bool,
    /// A soak instead: no faults; deleted bundles come back; the provisioner's and the storage
    /// server's RSS, open files, threads and runtime tasks are sampled, and growth fails the run.
    #[arg(long)]
    soak: bool,
    /// Seconds between two samples of a soak.
    #[arg(long, default_value_t = 60)]
    sample_interval: u64,
    /// Provisioner replicas. More than one: each runs with `--sharding` and an identity of
    /// its own (r1, r2, ...), and the faults include pausing one past its shard Lease.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    replicas: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.soak && cli.replicas > 1 {
        // The soak samples one provisioner's resources.
        anyhow::bail!("--soak runs one provisioner: leave --replicas out");
    }
    gantry_tests::init_crypto();
    let state = std::path::absolute(&cli.state_dir)?;
    if state.join("pids").exists() {
        let _ = stop_detached(&state, Duration::from_secs(5));
    }
    if state.exists() {
        std::fs::remove_dir_all(&state).with_context(|| format!("removing {}", state.display()))?;
    }
    std::fs::create_dir_all(&state)?;
    let result = run(&cli, &state).await;
    if !cli.keep {
        // A failed run keeps its logs (the processes are stopped all the same).
        if matches!(result, Ok(0)) {
            let _ = stop_detached(&state, Duration::from_secs(5));
        } else {
            let _ = stop_groups(&state, Duration::from_secs(5));
        }
    } else {
        println!(
            "environment left running; stop it with: gantry-dev --state-dir {} down",
            state.display()
        );
    }
    match result {
        Ok(0) => Ok(()),
        Ok(violations) => {
            anyhow::bail!(
                "{violations} invariant violation(s); logs are in {}",
                state.display()
            )
        }
        Err(e) => Err(e),
    }
}

/// Runs the whole chaos run; returns the number of invariant violations.
async fn run(cli: &Cli, state: &std::path::Path) -> anyhow::Result<usize> {
    let lifetime = Lifetime::Detached(state.to_path_buf());
    let replicas = usize::from(cli.replicas);
    eprintln!(
        "==> starting kube-apiserver, etcd, docker-registry, gantry-storage, gantry-provisioner{}",
        if replicas > 1 {
            format!(" ({replicas} sharded replicas)")
        } else {
            String::new()
        }
    );
    let plane = ControlPlane::start(&lifetime).await?;
    let registry = Registry::start_with(RegistryOptions::default(), &lifetime)?;
    let storage = StorageServer::start_with(StorageOptions::default(), &lifetime)?;
    let client = plane.client().await;
    workload::ensure_namespace(&client, NAMESPACE).await?;
    let identities: Vec<String> = (1..=replicas).map(|n| format!("r{n}")).collect();
    let provisioners = Provisioner::start_replicas(
        &ProvisionerOptions {
            kubeconfig: plane.kubeconfig().to_path_buf(),
            storage_url: storage.url().to_string(),
            storage_token: None,
            namespace: NAMESPACE.into(),
            // Tags re-resolved often, so moved tags are noticed while faults go on.
            args: vec!["--resolve-interval=5s".to_string()],
        },
        &identities,
        &lifetime,
    )?;
    let daemons = Arc::new(Daemons::discover(state, replicas)?);
    eprintln!("    {}", daemons.describe());

    let workload = Arc::new(Workload::new(
        client.clone(),
        registry.host().to_string(),
        cli.bundles,
        cli.soak,
    ));
    workload.prepare().await?;

    let churning = Arc::new(AtomicBool::new(true));
    let (faults, resources) = if cli.soak {
        eprintln!(
            "==> soak for {} s: {} bundles created, moved, approved, deleted and created again; a sample every {} s",
            cli.duration, cli.bundles, cli.sample_interval
        );
        let resources = tokio::spawn({
            let churning = churning.clone();
            let daemons = daemons.clone();
            let interval = Duration::from_secs(cli.sample_interval);
            let provisioner_metrics = format!("{}/metrics", provisioners[0].metrics_url());
            async move {
                soak::sample_until(
                    &churning,
                    interval,
                    &["gantry-provisioner", "gantry-storage"],
                    |name| daemons.pid(name),
                    |name| {
                        let url = provisioner_metrics.clone();
                        async move {
                            match name {
                                "gantry-provisioner" => {
                                    soak::metric(&url, "gantry_provisioner_runtime_tasks").await
                                }
                                _ => None,
                            }
                        }
                    },
                )
                .await
            }
        });
        (None, Some(resources))
    } else {
        eprintln!(
            "==> churn for {} s: {} bundles created, moved, approved and deleted; a fault every ~{} s",
            cli.duration, cli.bundles, cli.fault_interval
        );
        let faults = tokio::spawn({
            let daemons = daemons.clone();
            let churning = churning.clone();
            let mean = cli.fault_interval;
            async move { daemons.inject_until(&churning, mean, replicas).await }
        });
        (Some(faults), None)
    };
    let sampler = tokio::spawn({
        let workload = workload.clone();
        let churning = churning.clone();
        async move { workload.sample_approvals_until(&churning).await }
    });
    let deadline = Instant::now() + Duration::from_secs(cli.duration);
    workload.churn_until(deadline).await;
    churning.store(false, Ordering::SeqCst);
    let injected = match faults {
        Some(faults) => faults.await.context("the fault injector panicked")??,
        None => Default::default(),
    };
    let growth = match resources {
        Some(resources) => soak::growth(&resources.await.context("the resource sampler panicked")?),
        None => Vec::new(),
    };
    sampler.await.context("the approval sampler panicked")?;

    eprintln!(
        "==> faults stopped; every part running again; waiting up to {} s to settle",
        cli.settle
    );
    daemons.ensure_running().await?;
    let settle_deadline = Instant::now() + Duration::from_secs(cli.settle);
    let settled = workload.settle_until(settle_deadline).await;
    let settle_time = settle_deadline
        .checked_duration_since(Instant::now())
        .map_or(cli.settle as f64, |left| {
            cli.settle as f64 - left.as_secs_f64()
        });

    // With replicas, the audit log tells which one wrote each bundle's objects.
    let audit_log = (replicas > 1).then(|| plane.audit_log());
    let report = invariants::check(&workload, storage.root(), audit_log.as_deref()).await;

    println!();
    println!(
        "faults injected ({} in all):",
        injected.values().sum::<usize>()
    );
    for fault in Fault::available(replicas) {
        println!(
            "  {:<28} {}",
            fault.describe(),
            injected.get(&fault).copied().unwrap_or(0)
        );
    }
    println!("operations: {}", workload.operations());
    println!(
        "settled: {} in {:.0} s",
        if settled { "yes" } else { "no" },
        settle_time
    );
    println!("invariants:");
    for line in report.lines() {
        println!("  {line}");
    }
    for note in report.notes() {
        println!("  ({note})");
    }
    if cli.soak {
        let verdict = if growth.is_empty() { "flat" } else { "GREW" };
        println!(
            "  {:<58} {verdict}",
            "RSS, open files and tasks of both binaries"
        );
    }
    let violations = report.violations() + growth.len();
    if violations > 0 {
        println!("VIOLATIONS:");
        for violation in report.violation_details().into_iter().chain(growth) {
            println!("  {violation}");
        }
    } else {
        println!("all invariants held");
    }
    Ok(violations)
}
