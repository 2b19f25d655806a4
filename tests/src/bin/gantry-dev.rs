//! A local Gantry environment for trying it out: a real kube-apiserver + etcd, a registry, the
//! storage server and the provisioner, all on loopback, running in the background until
//! `gantry-dev down`. With `--node`: a real single-node cluster instead (the node tier's, see
//! `gantry_tests::NodeCluster`), for running Gantry as Pods.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use gantry_tests::{
    ControlPlane, Lifetime, NodeCluster, Provisioner, ProvisionerOptions, Registry,
    RegistryOptions, StorageOptions, StorageServer, stop_detached,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};

/// The namespace of the provisioner (pull secrets, its Lease), as the manifests name it.
const NAMESPACE: &str = "gantry-system";

#[derive(Parser)]
#[command(about = "Start or stop a local Gantry environment on loopback")]
struct Cli {
    /// Directory holding the environment's state, logs and kubeconfig.
    #[arg(long, default_value = ".gantry", global = true)]
    state_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the control plane, the registry, the storage server and the provisioner.
    Up {
        /// A flag for the provisioner (repeatable), e.g. --provisioner-arg=--apply-concurrency=32.
        #[arg(long = "provisioner-arg", allow_hyphen_values = true)]
        provisioner_args: Vec<String>,
        /// Provisioner replicas: more than one runs each with `--sharding` and the identity
        /// `replica-N`, sharing the bundles (docs/scaling.md).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
        replicas: u16,
        /// Start a real single-node cluster (kubelet, containerd, kube-proxy, CoreDNS, a
        /// registry on the node's bridge) instead; needs root. Gantry itself is not started.
        #[arg(long, conflicts_with_all = ["provisioner_args", "controller_manager", "replicas"])]
        node: bool,
        /// Also run kube-controller-manager (built by `tools/control-plane/build.sh
        /// kube-controller-manager`): deleted namespaces finish terminating, the garbage
        /// collector runs. Pods are created but never run: there is no scheduler or kubelet.
        #[arg(long)]
        controller_manager: bool,
    },
    /// Stop everything and remove the state directory.
    Down,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let state = std::path::absolute(&cli.state_dir)
        .with_context(|| format!("resolving {}", cli.state_dir.display()))?;
    match cli.command {
        Command::Up { node: true, .. } => up_node(&state).await,
        Command::Up {
            node: false,
            provisioner_args,
            replicas,
            controller_manager,
        } => up(&state, provisioner_args, replicas, controller_manager).await,
        Command::Down => {
            let grace = Duration::from_secs(10);
            // A node cluster leaves mounts, a bridge and iptables rules: its own stop removes them.
            let stopped = if state.join("node").exists() {
                NodeCluster::stop_detached(&state, grace)
            } else {
                stop_detached(&state, grace)
            }
            .with_context(|| format!("stopping the environment in {}", state.display()))?;
            println!(
                "stopped {stopped} process group(s) and removed {}",
                state.display()
            );
            Ok(())
        }
    }
}

/// Fails when an environment already runs in `state`, then creates `state`; returns the path
/// of its `env` file.
fn prepare(state: &Path) -> anyhow::Result<PathBuf> {
    let env_file = state.join("env");
    if env_file.exists() {
        bail!(
            "an environment already runs in {} (see {}); stop it first with `gantry-dev down`",
            state.display(),
            env_file.display()
        );
    }
    std::fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
    Ok(env_file)
}

async fn up_node(state: &Path) -> anyhow::Result<()> {
    let env_file = prepare(state)?;
    eprintln!(
        "starting a single-node cluster (the first run builds the Kubernetes components and CoreDNS from the Go modules; that takes minutes)"
    );
    let cluster = match NodeCluster::start(&Lifetime::Detached(state.to_path_buf())).await {
        Ok(cluster) => cluster,
        Err(e) => {
            // Leave nothing half-started behind.
            let _ = NodeCluster::stop_detached(state, Duration::from_secs(5));
            return Err(e).context("starting the node cluster");
        }
    };
    let kubeconfig = state.join("kubeconfig");
    std::fs::copy(cluster.kubeconfig(), &kubeconfig)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let vars = [
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("GANTRY_REGISTRY", cluster.registry().to_string()),
        ("GANTRY_BUSYBOX_IMAGE", cluster.busybox_image().to_string()),
        (
            "GANTRY_NODE_LOGS",
            cluster.node_dir().join("logs").display().to_string(),
        ),
    ];
    let env: String = vars
        .iter()
        .map(|(name, value)| format!("export {name}={value}\n"))
        .collect();
    std::fs::write(&env_file, env).with_context(|| format!("writing {}", env_file.display()))?;
    for (name, value) in vars {
        println!("{name}={value}");
    }
    println!("API_SERVER={}", cluster.control_plane().server_url());
    Ok(())
}

async fn up(
    state: &Path,
    provisioner_args: Vec<String>,
    replicas: u16,
    controller_manager: bool,
) -> anyhow::Result<()> {
    let env_file = prepare(state)?;
    let lifetime = Lifetime::Detached(state.to_path_buf());
    let started = async {
        eprintln!("starting kube-apiserver and etcd (the first run builds them from the Go modules; that takes minutes)");
        let plane = ControlPlane::start(&lifetime).await?;
        if controller_manager {
            eprintln!("starting kube-controller-manager");
            plane.start_controller_manager(&lifetime)?;
        }
        eprintln!("starting docker-registry");
        let registry = Registry::start_with(RegistryOptions::default(), &lifetime)?;
        eprintln!("starting gantry-storage");
        let storage = StorageServer::start_with(StorageOptions::default(), &lifetime)?;
        let client = plane.client().await;
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": NAMESPACE } }))
                .map_err(|e| gantry_tests::HarnessError::Other(e.to_string()))?;
        Api::<Namespace>::all(client)
            .patch(NAMESPACE, &PatchParams::apply("gantry-dev"), &Patch::Apply(&namespace))
            .await
            .map_err(|e| gantry_tests::HarnessError::Other(format!("creating {NAMESPACE}: {e}")))?;
        // Tags are resolved every 10 s unless the caller chose an interval.
        let args: Vec<String> = (!provisioner_args
            .iter()
            .any(|a| a.starts_with("--resolve-interval")))
        .then(|| "--resolve-interval=10s".to_string())
        .into_iter()
        .chain(provisioner_args)
        .collect();
        if replicas > 1 {
            eprintln!("starting {replicas} gantry-provisioner replicas (replica-0, ...) with --sharding");
        } else {
            eprintln!("starting gantry-provisioner");
        }
        let identities: Vec<String> = (0..replicas).map(|n| format!("replica-{n}")).collect();
        let provisioners = Provisioner::start_replicas(
            &ProvisionerOptions {
                kubeconfig: plane.kubeconfig().to_path_buf(),
                storage_url: storage.url().to_string(),
                storage_token: None,
                namespace: NAMESPACE.into(),
                args,
            },
            &identities,
            &lifetime,
        )?;
        Ok::<_, gantry_tests::HarnessError>((plane, registry, storage, provisioners))
    }
    .await;
    let (plane, registry, storage, provisioners) = match started {
        Ok(parts) => parts,
        Err(e) => {
            // Leave nothing half-started behind.
            let _ = stop_detached(state, Duration::from_secs(5));
            return Err(e).context("starting the environment");
        }
    };
    let kubeconfig = state.join("kubeconfig");
    std::fs::copy(plane.kubeconfig(), &kubeconfig)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let joined = |part: fn(&Provisioner) -> String| {
        provisioners.iter().map(part).collect::<Vec<_>>().join(" ")
    };
    // The first replica's (the only one's, without --replicas) under the names of one; every
    // replica's under the plural names.
    std::fs::write(
        &env_file,
        format!(
            "export KUBECONFIG={}\nexport GANTRY_REGISTRY={}\nexport GANTRY_STORAGE_URL={}\nexport GANTRY_METRICS_URL={}\nexport GANTRY_PROVISIONER_PID={}\nexport GANTRY_METRICS_URLS=\"{}\"\nexport GANTRY_PROVISIONER_PIDS=\"{}\"\nexport GANTRY_REGISTRY_METRICS_URL={}\n",
            kubeconfig.display(),
            registry.host(),
            storage.url(),
            provisioners[0].metrics_url(),
            provisioners[0].pid(),
            joined(|p| p.metrics_url().to_string()),
            joined(|p| p.pid().to_string()),
            registry.metrics_url()
        ),
    )
    .with_context(|| format!("writing {}", env_file.display()))?;
    println!("KUBECONFIG={}", kubeconfig.display());
    println!("GANTRY_REGISTRY={}", registry.host());
    println!("API_SERVER={}", plane.server_url());
    println!("GANTRY_STORAGE_URL={}", storage.url());
    println!("GANTRY_METRICS_URL={}", provisioners[0].metrics_url());
    if provisioners.len() > 1 {
        println!(
            "GANTRY_METRICS_URLS=\"{}\"",
            joined(|p| p.metrics_url().to_string())
        );
    }
    Ok(())
}
