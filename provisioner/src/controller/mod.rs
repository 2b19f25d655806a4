//! The provisioner's controllers: Bundles (pull, store, approve, apply, prune, uninstall) and
//! ProvisionerClasses (`Accepted`).

pub mod allowed_images;
pub mod apply;
pub mod backoff;
pub mod bundle;
pub mod caches;
pub mod class_controller;
pub mod class_selection;
pub mod context;
pub mod discovery;
pub mod drift;
pub mod error;
pub mod health;
pub mod identity;
pub mod inventory;
pub mod live_view;
pub mod metrics;
pub mod node_pull;
pub mod permissions;
pub mod plan;
pub mod server;
pub mod source;
pub mod status;
pub mod storage;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gantry_api::{Bundle, ProvisionerClass};
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

pub use context::{Context, Settings};
pub use error::Error;
pub use metrics::Metrics;
pub use storage::{StorageClient, Token};

use backoff::Backoff;
use discovery::KindCache;
use drift::DriftWatches;

/// What the controllers run with.
pub struct Controllers {
    pub client: Client,
    /// The configuration `client` was built from: impersonating clients start from it.
    pub config: Option<kube::Config>,
    pub settings: Settings,
    pub storage: StorageClient,
    pub metrics: Arc<Metrics>,
    pub reporter: Reporter,
    /// Bundles reconciled at once.
    pub concurrency: u16,
}

/// Runs both controllers until `shutdown` completes.
pub async fn run(
    controllers: Controllers,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let Controllers {
        client,
        config,
        settings,
        storage,
        metrics,
        reporter,
        concurrency,
    } = controllers;
    let classes_api: Api<ProvisionerClass> = Api::all(client.clone());
    let bundles_api: Api<Bundle> = Api::all(client.clone());
    let class_controller = Controller::new(classes_api.clone(), watcher::Config::default());
    let class_store = class_controller.store();
    // The Bundles are kept in memory, one copy each, for as long as the provisioner runs:
    // nothing reads their managedFields, which with thousands of bundles add up, so the
    // store keeps them without.
    let (bundle_store, bundle_writer) = reflector::store::<Bundle>();
    let bundle_events = watcher::watcher(bundles_api.clone(), watcher::Config::default())
        .default_backoff()
        .modify(|bundle| bundle.managed_fields_mut().clear())
        .reflect(bundle_writer)
        .applied_objects();
    let bundle_controller = Controller::for_stream(bundle_events, bundle_store.clone());

    let (drift, drift_events) = DriftWatches::new();
    let ctx = Arc::new(Context {
        client: client.clone(),
        backoff: Backoff::new(settings.backoff_base, settings.backoff_cap),
        settings,
        storage,
        classes: class_store.clone(),
        kinds: KindCache::default(),
        metrics,
        recorder: Recorder::new(client.clone(), reporter),
        drift,
        resolved: Default::default(),
        checked: Default::default(),
        verified: Default::default(),
        registries: Default::default(),
        appliers: identity::Appliers::new(config, client.clone()),
    });

    let (shutdown_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let signal = {
        let tx = shutdown_tx.clone();
        async move {
            shutdown.await;
            let _ = tx.send(());
        }
    };
    let on_shutdown = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };

    let classes = class_controller
        .graceful_shutdown_on(on_shutdown(&shutdown_tx))
        .run(class_controller::reconcile, class_error_policy, ctx.clone())
        .for_each(|_| async {});

    // Bundles wait for the class cache: a bundle must never be told its class is missing
    // only because the classes were not listed yet.
    let drift_stream = futures::stream::unfold(drift_events, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let bundles = {
        let ctx = ctx.clone();
        let shutdown = on_shutdown(&shutdown_tx);
        async move {
            if class_store.wait_until_ready().await.is_err() {
                return;
            }
            let store = bundle_store.clone();
            let dependents = bundle_store.clone();
            bundle_controller
                .watches(classes_api, watcher::Config::default(), move |class| {
                    bundles_of_class(&store.state(), &class)
                })
                // A bundle that changes (becomes Ready, appears, goes) wakes those depending on it.
                .watches(bundles_api.clone(), watcher::Config::default(), move |b| {
                    bundle::dependents_of(&dependents.state(), &b)
                })
                .reconcile_on(drift_stream)
                .with_config(
                    controller::Config::default()
                        .concurrency(concurrency)
                        .debounce(Duration::from_millis(100)),
                )
                .graceful_shutdown_on(shutdown)
                .run(bundle::reconcile, bundle_error_policy, ctx)
                .for_each(|_| async {})
                .await;
        }
    };
    tokio::join!(signal, classes, bundles);
}

/// Bundles that a change of `class` may concern: those naming it, and those naming none.
fn bundles_of_class(bundles: &[Arc<Bundle>], class: &ProvisionerClass) -> Vec<ObjectRef<Bundle>> {
    let name = class.name_any();
    bundles
        .iter()
        .filter(|b| {
            b.spec
                .provisioner_class_name
                .as_deref()
                .is_none_or(|n| n == name)
        })
        .map(|b| ObjectRef::from_obj(b.as_ref()))
        .collect()
}

fn bundle_error_policy(bundle: Arc<Bundle>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(bundle = %bundle.name_any(), %error, "writing the bundle's status failed");
    Action::requeue(Duration::from_secs(5))
}

fn class_error_policy(class: Arc<ProvisionerClass>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(class = %class.name_any(), %error, "reconciling the class failed");
    Action::requeue(Duration::from_secs(5))
}
