//! `install` and `uninstall`: Gantry itself, from the manifests of the plugin's own version
//! (`manifests/`, embedded when the plugin is built: nothing is downloaded).

mod apply;
mod certificate;
mod manifests;
mod wait;

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgAction, Args};
use gantry_api::Bundle;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::Value;
use tokio::time::Instant;

use super::cluster::{GlobalArgs, parse_timeout};
use apply::{Apis, Deleted, apply, delete, wait_deleted};
use manifests::{Options, Step, display, export, in_step, name_of, objects, validate_registry};
use wait::{humanize, wait_established, wait_workloads};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle install\n  kubectl bundle install --registry registry.example.com:5000 --storage-class fast\n  kubectl bundle install --with-helm-plugin\n  kubectl bundle install --export > gantry.yaml"
)]
pub struct InstallArgs {
    /// Pull Gantry's own images from this registry instead of the release's
    /// (ghcr.io/gantry-dev): REGISTRY/gantry-provisioner:TAG and
    /// REGISTRY/gantry-storage-server:TAG, e.g. `registry.example.com:5000` or
    /// `registry.example.com/mirror`.
    #[arg(long, value_name = "REGISTRY")]
    registry: Option<String>,
    /// The StorageClass of the storage server's PersistentVolumeClaim (default: the cluster's
    /// default class).
    #[arg(long, value_name = "CLASS")]
    storage_class: Option<String>,
    /// Also install the optional component manifests/components/helm-plugin: the Helm plugin
    /// gantry-helm-plugin (image REGISTRY/gantry-helm-plugin:TAG), the Service registering it
    /// as gantry.dev/helm and the class helm. Its serving certificate is the Secrets
    /// gantry-helm-plugin-tls and gantry-helm-plugin-ca in gantry-system: kept when both
    /// exist, made (a CA of their own) when neither does; --export leaves them out.
    #[arg(long)]
    with_helm_plugin: bool,
    /// Print the YAML install would apply, with the options above, and change nothing.
    #[arg(long)]
    export: bool,
    /// Wait until the storage server and the provisioner are ready (`--wait=false`: return
    /// once everything is applied).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    wait: bool,
    /// How long to wait for the CRDs to be established and the workloads to be ready.
    #[arg(long, default_value = "5m", value_parser = parse_timeout, value_name = "DURATION")]
    timeout: Duration,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle uninstall\n  kubectl bundle uninstall --delete-bundles --timeout 10m"
)]
pub struct UninstallArgs {
    /// Delete every Bundle first, while the provisioner still runs, and wait until they are
    /// gone: their objects are deleted with them (orphaned, for a Bundle with
    /// `spec.deletionPolicy: Orphan`). Without it, uninstall refuses while
    /// Bundles exist.
    #[arg(long)]
    delete_bundles: bool,
    /// Wait until everything deleted is gone (`--wait=false`: return once deletion is asked).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    wait: bool,
    /// How long to wait for the Bundles and then Gantry's objects to be gone.
    #[arg(long, default_value = "5m", value_parser = parse_timeout, value_name = "DURATION")]
    timeout: Duration,
}

pub async fn install(global: &GlobalArgs, args: InstallArgs) -> anyhow::Result<()> {
    if let Some(registry) = &args.registry {
        validate_registry(registry)?;
    }
    let options = Options {
        registry: args.registry.as_deref(),
        storage_class: args.storage_class.as_deref(),
        helm_plugin: args.with_helm_plugin,
    };
    let objects = objects(&options)?;
    if args.export {
        let mut out = std::io::stdout().lock();
        return match out.write_all(export(&objects)?.as_bytes()) {
            // `install --export | head` is done reading: not an error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            written => written.context("writing to standard output"),
        };
    }
    let client = global.client().await?;
    let mut apis = Apis::new(client.clone());
    let deadline = Instant::now() + args.timeout;
    let version = env!("CARGO_PKG_VERSION");
    println!("► installing Gantry {version}");
    for step in Step::ORDER {
        let of_step = in_step(&objects, step);
        if of_step.is_empty() {
            continue;
        }
        if step == Step::HelmPlugin {
            let certificate = certificate::ensure(&client).await?;
            println!("✚ the Helm plugin's serving certificate: {certificate}");
        }
        let mut done: Vec<String> = Vec::new();
        for object in &of_step {
            let outcome = apply(&mut apis, object).await?;
            done.push(format!("{} {outcome}", display(object)));
        }
        println!("✚ applied {}: {}", step.what(), done.join(", "));
        if step == Step::Crds {
            let classes = in_step(&objects, Step::Classes);
            wait_established(
                &client,
                &mut apis,
                &of_step,
                &classes,
                deadline,
                args.timeout,
            )
            .await?;
            println!(
                "✔ CRDs established: {}",
                of_step
                    .iter()
                    .map(|c| name_of(c).0)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let workloads: Vec<&Value> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet")))
        .collect();
    if args.wait {
        let what = if args.with_helm_plugin {
            "the storage server, the provisioner and the Helm plugin"
        } else {
            "the storage server and the provisioner"
        };
        println!(
            "◎ waiting up to {} for {what} to be ready",
            humanize(args.timeout)
        );
        wait_workloads(&client, &workloads, deadline, args.timeout).await?;
        println!("✔ Gantry {version} installed");
    } else {
        println!("✔ Gantry {version} applied (not waiting for the workloads: --wait=false)");
    }
    Ok(())
}

pub async fn uninstall(global: &GlobalArgs, args: UninstallArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    // The Helm plugin's component too, whether or not install was asked for it: what is not
    // there is not reported.
    let mut objects = objects(&Options {
        helm_plugin: true,
        ..Default::default()
    })?;
    objects.reverse();
    let deadline = Instant::now() + args.timeout;

    // Bundles first: their finalizer needs the provisioner to remove their objects.
    let bundles_crd = format!("bundles.{}", gantry_api::GROUP);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt(&bundles_crd)
        .await
        .with_context(|| format!("reading CRD {bundles_crd}"))?
        .is_some()
    {
        let bundles: Api<Bundle> = Api::all(client.clone());
        let names: Vec<String> = bundles
            .list(&ListParams::default())
            .await
            .context("listing Bundles")?
            .items
            .iter()
            .map(|b| b.name_any())
            .collect();
        if !names.is_empty() && !args.delete_bundles {
            bail!(
                "{} Bundle(s) exist: {}. Uninstalling Gantry would leave them stuck in deletion and their objects on the cluster. Delete them first (`kubectl delete bundles --all`), or pass --delete-bundles to do so here (their objects are deleted with them); to keep objects, annotate them `gantry.dev/prune=disabled`, or set a Bundle's spec.deletionPolicy to Orphan, first",
                names.len(),
                names.join(", ")
            );
        }
        if !names.is_empty() {
            println!(
                "► deleting {} Bundle(s) while the provisioner runs: {}",
                names.len(),
                names.join(", ")
            );
            let mut deleting = Vec::new();
            for name in &names {
                match bundles.delete(name, &DeleteParams::default()).await {
                    Ok(either) => {
                        if let Some(uid) = either.left().and_then(|b| b.uid()) {
                            deleting.push(Deleted {
                                api: bundles.clone(),
                                name: name.clone(),
                                what: format!("bundle {name}"),
                                uid,
                            });
                        }
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e).with_context(|| format!("deleting bundle {name}")),
                }
            }
            match wait_deleted(&deleting, deadline).await {
                Some(result) => result?,
                None => {
                    let left: Vec<String> = bundles
                        .list(&ListParams::default())
                        .await
                        .map(|l| l.items.iter().map(|b| b.name_any()).collect())
                        .unwrap_or_default();
                    bail!(
                        "Bundle(s) still present after {}: {} (is the provisioner running? see `kubectl bundle check` and `kubectl bundle status NAME`)",
                        humanize(args.timeout),
                        left.join(", ")
                    );
                }
            }
            println!("✔ Bundles deleted");
        }
    }

    println!("► uninstalling Gantry");
    let mut apis = Apis::new(client.clone());
    let mut deleted: Vec<Deleted> = Vec::new();
    // Reverse install order: the classes, the provisioner, the storage server, the RBAC and
    // then the namespace (reversed, its file comes last), the CRDs last of all.
    let mut step_order = Step::ORDER;
    step_order.reverse();
    for step in step_order {
        let mut done: Vec<String> = Vec::new();
        for object in in_step(&objects, step) {
            done.push(delete(&mut apis, object, &mut deleted).await?);
        }
        if step == Step::HelmPlugin {
            done.retain(|d| !d.ends_with(" not found"));
            if done.is_empty() {
                continue;
            }
        }
        println!("✚ deleted {}: {}", step.what(), done.join(", "));
    }
    if !args.wait {
        println!("✔ Gantry uninstalled (not waiting for the objects to be gone: --wait=false)");
        return Ok(());
    }
    println!(
        "◎ waiting up to {} for the objects to be gone",
        humanize(args.timeout)
    );
    match wait_deleted(&deleted, deadline).await {
        Some(result) => result?,
        None => {
            let mut left = Vec::new();
            for Deleted {
                api, name, what, ..
            } in &deleted
            {
                if let Ok(Some(_)) = api.get_opt(name).await {
                    left.push(what.clone());
                }
            }
            bail!(
                "still present after {}: {} (a namespace and a PersistentVolumeClaim need the cluster's controller-manager to finish deleting)",
                humanize(args.timeout),
                left.join(", ")
            );
        }
    }
    println!("✔ Gantry uninstalled");
    Ok(())
}
