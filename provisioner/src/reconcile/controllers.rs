//! The provisioner's controllers, as kube-runtime runs them: Bundles (the driver in
//! [`super`]) and ProvisionerClasses ([`super::class`]), the watches that wake them, and what
//! they share.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::fmt::Debug;

use futures::{Stream, StreamExt, TryStreamExt};
use gantry_api::plugin::{PLUGIN_LABEL, PROVISIONER_ANNOTATION};
use gantry_api::{Bundle, ProvisionerClass};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::reconcile::class;
use crate::sharding::Shard;
use crate::sharding::slot_watch::slot_watch;
use crate::source::storage::StorageClient;
use crate::state::metrics::{Metrics, ShardLabels};
use crate::state::{Context, Settings};

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
    /// With `--sharding`: this replica's shard; only bundles labelled with it are reconciled.
    pub shard: Option<Shard>,
    /// The provisioner plugins registered, kept by a watch of the caller's (shared with the
    /// sharder); `None`: the controllers keep their own.
    pub plugins: Option<Arc<crate::source::plugin::Plugins>>,
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
        shard,
        plugins,
    } = controllers;
    let classes_api: Api<ProvisionerClass> = Api::all(client.clone());
    let bundles_api: Api<Bundle> = Api::all(client.clone());
    let (class_store, class_writer) = reflector::store::<ProvisionerClass>();
    let class_events = without_errors(
        "ProvisionerClass",
        watcher::watcher(classes_api.clone(), watcher::Config::default())
            .default_backoff()
            .reflect(class_writer)
            .applied_objects(),
    );
    // The Bundles are kept in memory, one copy each, for as long as the provisioner runs:
    // nothing reads their managedFields, which with thousands of bundles add up, so the
    // store keeps them without.
    let (mut ctx, drift_events) = Context::new(
        client.clone(),
        config,
        settings,
        storage,
        class_store.clone(),
        metrics,
        reporter,
    );
    // Kept here only when no caller keeps them (for the sharder too).
    let observe_plugins = plugins.is_none();
    if let Some(plugins) = plugins {
        ctx.plugins = plugins;
    }
    // A shard watches only the bundles of its slots: its memory and work are its share.
    let watched_bundles = match &shard {
        Some(shard) => slot_watch(bundles_api.clone(), shard.slots.selector()).boxed(),
        None => watcher::watcher(bundles_api.clone(), watcher::Config::default()).boxed(),
    };
    let ctx = match shard {
        Some(shard) => ctx.for_shard(shard),
        None => ctx,
    };
    let ctx = Arc::new(ctx);
    let (bundle_store, bundle_writer) = reflector::store::<Bundle>();
    let claims = ctx.claims.clone();
    let dependents = ctx.dependents.clone();
    let config_sources = ctx.config_sources.clone();
    let forget = ctx.clone();
    let bundle_events = watched_bundles
        .default_backoff()
        .modify(|bundle| bundle.managed_fields_mut().clear())
        .reflect(bundle_writer)
        // Every bundle's inventory, so that no bundle takes an object another one lists.
        .inspect_ok(move |event| claims.observe(event))
        .inspect_ok(move |event| dependents.observe(event))
        .inspect_ok(move |event| config_sources.observe(event))
        .scan(Triggers::default(), move |triggers, event| {
            let passed = triggers.filter(event);
            // A bundle that left the watch (deleted, or its slot went to another replica)
            // leaves the caches too.
            for gone in triggers.left.drain(..) {
                forget.forget(&gone.name);
            }
            if let Some(shard) = &forget.shard {
                forget
                    .metrics
                    .shard_bundles
                    .get_or_create(&ShardLabels {
                        shard: shard.clone(),
                    })
                    .set(i64::try_from(triggers.seen.len()).unwrap_or(i64::MAX));
            }
            futures::future::ready(Some(passed))
        })
        .filter_map(futures::future::ready);
    let bundle_controller = Controller::for_stream(
        without_errors("Bundle", bundle_events),
        bundle_store.clone(),
    );

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

    // Every shard reconciles the classes too: a class's status is written only when it
    // changes, so the replicas agree after one write.
    // The provisioner plugins: Services in the provisioner's own namespace with the plugin
    // label. A change of one (registered, moved, gone) wakes the classes naming its ID.
    let plugin_services = {
        let plugins = ctx.plugins.clone();
        without_errors(
            "plugin Service",
            watcher::watcher(
                Api::<Service>::namespaced(client.clone(), &ctx.settings.namespace),
                watcher::Config::default().labels(&format!("{PLUGIN_LABEL}=true")),
            )
            .default_backoff()
            .inspect_ok(move |event| {
                if observe_plugins {
                    plugins.observe(event)
                }
            })
            .touched_objects(),
        )
    };
    let classes = Controller::for_stream(class_events, class_store.clone())
        .watches_stream(plugin_services, {
            let store = class_store.clone();
            move |service: Service| {
                let id = service.annotations().get(PROVISIONER_ANNOTATION).cloned();
                store
                    .state()
                    .iter()
                    .filter(|class| Some(&class.spec.provisioner) == id.as_ref())
                    .map(|class| ObjectRef::from_obj(class.as_ref()))
                    .collect::<Vec<_>>()
            }
        })
        .graceful_shutdown_on(on_shutdown(&shutdown_tx))
        .run(class::reconcile, class_error_policy, ctx.clone())
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
            // Shut down before the classes were listed (a shard whose Lease lapsed at once):
            // nothing to stop.
            let mut shutdown = Box::pin(shutdown);
            tokio::select! {
                ready = class_store.wait_until_ready() => if ready.is_err() { return; },
                _ = &mut shutdown => return,
            }
            let store = bundle_store.clone();
            let dependents = ctx.dependents.clone();
            bundle_controller
                .watches_stream(
                    without_errors(
                        "ProvisionerClass",
                        watcher::watcher(classes_api, watcher::Config::default())
                            .default_backoff()
                            .touched_objects(),
                    ),
                    move |class| bundles_of_class(&store.state(), &class),
                )
                // A bundle that changes (becomes Ready, appears, goes) wakes those depending on
                // it. Every Bundle of the cluster, not only this shard's: metadata only (its
                // name is all the mapping reads), not each whole Bundle decoded per replica.
                .watches_stream(
                    without_errors(
                        "Bundle metadata",
                        watcher::watcher(
                            Api::<PartialObjectMeta<Bundle>>::all(client.clone()),
                            watcher::Config::default(),
                        )
                        .default_backoff()
                        .touched_objects(),
                    ),
                    move |b| dependents.of(&b.name_any()),
                )
                // A change of RBAC that may concern the identity a bundle stalled on `Forbidden`
                // is applied as wakes it: the bindings by their subjects (whole objects, they
                // are small), the roles (metadata only) wake every such bundle.
                .watches_stream(rbac_changes::<RoleBinding>(&client), {
                    let ctx = ctx.clone();
                    move |binding| {
                        let namespace = binding.namespace();
                        woken_by_rbac(&ctx, binding.subjects.as_deref(), namespace.as_deref())
                    }
                })
                .watches_stream(rbac_changes::<ClusterRoleBinding>(&client), {
                    let ctx = ctx.clone();
                    move |binding| woken_by_rbac(&ctx, binding.subjects.as_deref(), None)
                })
                .watches_stream(rbac_changes::<PartialObjectMeta<Role>>(&client), {
                    let ctx = ctx.clone();
                    move |_| woken_by_all_rbac(&ctx)
                })
                .watches_stream(rbac_changes::<PartialObjectMeta<ClusterRole>>(&client), {
                    let ctx = ctx.clone();
                    move |_| woken_by_all_rbac(&ctx)
                })
                .reconcile_on(drift_stream)
                .with_config(
                    controller::Config::default()
                        .concurrency(concurrency)
                        .debounce(Duration::from_millis(100)),
                )
                .graceful_shutdown_on(shutdown)
                .run(super::reconcile, bundle_error_policy, ctx)
                .for_each(|result| async move { log_dropped(result) })
                .await;
        }
    };
    tokio::join!(signal, classes, bundles);
}

/// What, when it changes, makes a bundle reconcile: all of it but the status the provisioner
/// writes itself (`status.approval`, written by approvers, counts). Its own status writes would
/// otherwise wake every bundle again after each pass, and such a pass can start from the
/// store's copy of the bundle before that copy has the last write: a stale `Installed`, and
/// the whole install done again.
fn reconcile_trigger(bundle: &Bundle) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let meta = &bundle.metadata;
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    // Gantry's own finalizer, added by the first pass, is no change to act on: a pass right
    // after the first would only read every object's health again. Removed by someone else,
    // it is put back at the next visit.
    meta.finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != gantry_api::UNINSTALL_FINALIZER)
        .for_each(|f| f.hash(&mut hasher));
    bundle
        .status
        .as_ref()
        .and_then(|status| status.approval.as_ref())
        .map(|approval| serde_json::to_string(approval).unwrap_or_default())
        .hash(&mut hasher);
    hasher.finish()
}

/// The last [`reconcile_trigger`] of every bundle in the watch: an event is passed on only when
/// it changed. Unlike kube-runtime's `predicate_filter`, a bundle that leaves the watch (deleted,
/// or, sharded, handed to another replica) is forgotten: when it comes back with the very same
/// trigger, it is reconciled again, since whatever retry it had was dropped when it left. A
/// relist replaces the whole map, so bundles gone during a watch gap are forgotten too.
#[derive(Default)]
struct Triggers {
    seen: std::collections::HashMap<ObjectRef<Bundle>, u64>,
    /// The relist under way.
    relisted: Option<std::collections::HashMap<ObjectRef<Bundle>, u64>>,
    /// Bundles that left the watch since this was last emptied.
    left: Vec<ObjectRef<Bundle>>,
}

impl Triggers {
    fn filter(
        &mut self,
        event: Result<watcher::Event<Bundle>, watcher::Error>,
    ) -> Option<Result<Bundle, watcher::Error>> {
        let event = match event {
            Ok(event) => event,
            Err(error) => return Some(Err(error)),
        };
        match event {
            watcher::Event::Init => {
                self.relisted = Some(Default::default());
                None
            }
            watcher::Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    let previous = std::mem::replace(&mut self.seen, relisted);
                    self.left.extend(
                        previous
                            .into_keys()
                            .filter(|key| !self.seen.contains_key(key)),
                    );
                }
                None
            }
            watcher::Event::Delete(bundle) => {
                let key = ObjectRef::from_obj(&bundle);
                self.seen.remove(&key);
                self.left.push(key);
                None
            }
            watcher::Event::InitApply(bundle) => {
                let key = ObjectRef::from_obj(&bundle);
                let trigger = reconcile_trigger(&bundle);
                let changed = self.seen.get(&key) != Some(&trigger);
                match &mut self.relisted {
                    Some(relisted) => relisted.insert(key, trigger),
                    None => self.seen.insert(key, trigger),
                };
                changed.then_some(Ok(bundle))
            }
            watcher::Event::Apply(bundle) => {
                let trigger = reconcile_trigger(&bundle);
                let previous = self.seen.insert(ObjectRef::from_obj(&bundle), trigger);
                (previous != Some(trigger)).then_some(Ok(bundle))
            }
        }
    }
}

/// Logs what kube-runtime reports without reconciling: a request for a bundle no longer in the
/// store (it left the watch) is dropped there, as is a trigger stream's error. A failed pass
/// is logged by its error policy already.
fn log_dropped<T>(result: Result<T, controller::Error<Error, watcher::Error>>) {
    match result {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(error) => tracing::debug!(%error, "bundle controller"),
    }
}

/// Objects of `K`, in every namespace, as they are created or changed: deleting RBAC grants
/// nothing.
fn rbac_changes<K>(client: &Client) -> impl Stream<Item = Result<K, watcher::Error>> + Send + use<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    without_errors(
        K::kind(&()).into_owned(),
        watcher::watcher(Api::<K>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .applied_objects(),
    )
}

/// Keeps `plugins` from a watch of the Services in `namespace` labelled as plugins, until the
/// process ends: the sharder and every set of controllers of this process read it.
pub fn keep_plugins(
    client: &Client,
    namespace: &str,
    plugins: Arc<crate::source::plugin::Plugins>,
) {
    let services = Api::<Service>::namespaced(client.clone(), namespace);
    tokio::spawn(
        watcher::watcher(
            services,
            watcher::Config::default().labels(&format!("{PLUGIN_LABEL}=true")),
        )
        .default_backoff()
        .for_each(move |event| {
            match event {
                Ok(event) => plugins.observe(&event),
                Err(error) => {
                    tracing::debug!(%error, "plugin Service watch error; the watcher retries")
                }
            }
            futures::future::ready(())
        }),
    );
}

/// `stream` without its errors, which are logged. kube's Controller backs off all its trigger
/// streams together on an error of any one of them, longer at each next error: one watch that
/// keeps failing (after an API server restart) held every other, the bundles' own included,
/// for minutes, and the store stopped changing. Each stream here has a backoff of its own, so
/// only the failing watch waits.
fn without_errors<T: Send>(
    watch: impl Into<String>,
    stream: impl Stream<Item = Result<T, watcher::Error>> + Send,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send {
    let watch: String = watch.into();
    stream.filter_map(move |event| {
        futures::future::ready(match event {
            Ok(event) => Some(Ok(event)),
            Err(error) => {
                tracing::debug!(watch = %watch, %error, "watch error; the watcher retries");
                None
            }
        })
    })
}

/// The bundles stalled on `Forbidden` whose identity a binding with `subjects` in `namespace`
/// (`None`: cluster-wide) may concern, let through their stall.
fn woken_by_rbac(
    ctx: &Context,
    subjects: Option<&[Subject]>,
    namespace: Option<&str>,
) -> Vec<ObjectRef<Bundle>> {
    release(
        ctx,
        ctx.forbidden
            .wake(Some(subjects.unwrap_or_default()), namespace),
    )
}

/// Every bundle stalled on `Forbidden`, let through its stall: a role changed, and who it is
/// bound to is not looked up.
fn woken_by_all_rbac(ctx: &Context) -> Vec<ObjectRef<Bundle>> {
    release(ctx, ctx.forbidden.wake(None, None))
}

fn release(ctx: &Context, bundles: Vec<String>) -> Vec<ObjectRef<Bundle>> {
    bundles
        .into_iter()
        .map(|name| {
            ctx.backoff.success(&name);
            ObjectRef::new(&name)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::conditions::{reasons, types};
    use gantry_api::{Approval, ApprovalDecision, BundleSpec};

    fn named(name: &str, slot: &str) -> Bundle {
        let mut bundle = Bundle::new(
            name,
            BundleSpec {
                image: "127.0.0.1:5000/app:1".into(),
                ..Default::default()
            },
        );
        bundle.metadata.generation = Some(1);
        bundle.metadata.labels =
            Some([(gantry_api::SLOT_LABEL.to_string(), slot.to_string())].into());
        bundle
    }

    fn passed(triggers: &mut Triggers, event: watcher::Event<Bundle>) -> Option<String> {
        triggers
            .filter(Ok(event))
            .map(|bundle| bundle.unwrap().name_any())
    }

    /// A trigger stream that fails every 100 ms must not hold a healthy one: kube's Controller
    /// would back off both together, longer at each error (0.8 s, 1.6 s, 3.2 s, ... 30 s). The
    /// clock is paused: the minute passes at once.
    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_does_not_hold_the_others() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use std::sync::atomic::{AtomicBool, Ordering};

        let (reader, writer) = reflector::store::<ConfigMap>();
        let mut object = ConfigMap::default();
        object.metadata.name = Some("healthy".into());
        object.metadata.namespace = Some("n".into());
        // The healthy watch lists its object a minute in, the failing one failing meanwhile.
        let healthy = futures::stream::once(async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            futures::stream::iter([
                Ok(watcher::Event::Init),
                Ok(watcher::Event::InitApply(object)),
                Ok(watcher::Event::InitDone),
            ])
        })
        .flatten()
        .chain(futures::stream::pending())
        .reflect(writer)
        .applied_objects();
        let failing = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Err(watcher::Error::NoResourceVersion), ()))
        });
        let reconciled = Arc::new(AtomicBool::new(false));
        let started = tokio::time::Instant::now();
        let controller = Controller::for_stream(without_errors("healthy", healthy), reader)
            .watches_stream(without_errors("failing", failing), |cm: ConfigMap| {
                Some(ObjectRef::from_obj(&cm))
            })
            .run(
                |_, reconciled: Arc<Arc<AtomicBool>>| async move {
                    reconciled.store(true, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                },
                |_, _, _| Action::await_change(),
                Arc::new(reconciled.clone()),
            )
            .for_each(|_| async {});
        let deadline = Duration::from_millis(60_500);
        let _ = tokio::time::timeout(deadline, async {
            tokio::pin!(controller);
            loop {
                tokio::select! {
                    _ = &mut controller => return,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {
                        if reconciled.load(Ordering::SeqCst) {
                            return;
                        }
                    }
                }
            }
        })
        .await;
        assert!(
            reconciled.load(Ordering::SeqCst),
            "the healthy object was not reconciled within {deadline:?} of the start ({:?} passed)",
            started.elapsed()
        );
    }

    #[test]
    fn a_bundle_that_left_the_watch_and_came_back_unchanged_is_reconciled_again() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let mut triggers = Triggers::default();
        let a = named("a", "7");
        assert_eq!(
            passed(&mut triggers, Apply(a.clone())).as_deref(),
            Some("a")
        );
        assert_eq!(passed(&mut triggers, Apply(a.clone())), None, "unchanged");
        // Handed to another replica and back, with the very same labels.
        assert_eq!(passed(&mut triggers, Delete(a.clone())), None);
        assert_eq!(triggers.left.drain(..).count(), 1, "a left");
        assert_eq!(
            passed(&mut triggers, Apply(a.clone())).as_deref(),
            Some("a")
        );

        // A relist passes on what changed and forgets what is no longer listed.
        let b = named("b", "7");
        assert_eq!(
            passed(&mut triggers, Apply(b.clone())).as_deref(),
            Some("b")
        );
        assert_eq!(passed(&mut triggers, Init), None);
        assert_eq!(
            passed(&mut triggers, InitApply(a.clone())),
            None,
            "unchanged"
        );
        assert_eq!(passed(&mut triggers, InitDone), None);
        assert_eq!(
            triggers.left.drain(..).map(|r| r.name).collect::<Vec<_>>(),
            ["b"],
            "b is not in the new list: it left"
        );
        assert_eq!(
            passed(&mut triggers, Apply(b.clone())).as_deref(),
            Some("b"),
            "b was gone during the gap: it is new again"
        );
        let mut changed = a.clone();
        changed.metadata.generation = Some(2);
        assert_eq!(passed(&mut triggers, Init), None);
        assert_eq!(
            passed(&mut triggers, InitApply(changed)).as_deref(),
            Some("a")
        );
        assert_eq!(passed(&mut triggers, InitDone), None);
        assert!(
            triggers
                .filter(Err(watcher::Error::NoResourceVersion))
                .is_some(),
            "errors go through"
        );
    }

    #[test]
    fn the_provisioners_own_status_writes_trigger_no_reconcile() {
        let mut bundle = Bundle::new(
            "b",
            BundleSpec {
                image: "r.test/app:1".into(),
                ..Default::default()
            },
        );
        bundle.metadata.generation = Some(1);
        let base = reconcile_trigger(&bundle);

        let mut written = bundle.clone();
        let status = written.status.get_or_insert_default();
        crate::status::set_condition(
            &mut status.conditions,
            types::INSTALLED,
            true,
            reasons::INSTALL_SUCCEEDED,
            "installed",
            Some(1),
        );
        status.content_digest = Some("sha256:00".into());
        assert_eq!(reconcile_trigger(&written), base);
        // Nor is Gantry's own finalizer.
        written
            .finalizers_mut()
            .push(gantry_api::UNINSTALL_FINALIZER.into());
        assert_eq!(reconcile_trigger(&written), base);

        let changes: [&dyn Fn(&mut Bundle); 5] = [
            &|b| b.metadata.generation = Some(2),
            &|b| {
                b.annotations_mut().insert(
                    gantry_api::RECONCILE_REQUESTED_ANNOTATION.into(),
                    "now".into(),
                );
            },
            &|b| b.finalizers_mut().push("example.com/other".into()),
            &|b| {
                b.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    ))
            },
            &|b| {
                b.status.get_or_insert_default().approval =
                    Some(Approval::of(ApprovalDecision::Approved, "sha256:00"))
            },
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut changed = written.clone();
            change(&mut changed);
            assert_ne!(reconcile_trigger(&changed), base, "change {i}");
        }
    }
}
