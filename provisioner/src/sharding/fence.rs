//! A replica's fence: it holds the replica's writes while its shard Lease is not current, and
//! the client layer that enforces it.
//!
//! A replica whose Lease lapsed (it was paused, or cut off from the API server) may find, once
//! it runs again, that its bundles were handed to other replicas. The fence closes before the
//! Lease expires in the sharder's eyes (by [`SAFETY_MARGIN`]), every write of the controllers
//! goes through it, and a lapse stays a lapse until the controllers have been restarted: a pass
//! that began before the lapse never writes again.
//!
//! The layer's check happens when a request enters the client; the bytes leave later, from
//! the HTTP connection's own task. A replica paused in between would send the request once it
//! runs again, after its bundles were handed over. So the connection tasks run under the fence
//! too ([`FencedExecutor`]): each time one is polled, before it may write, the fence is checked,
//! and a closed fence ends the task, which closes the connection with whatever it still held.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt};
use http::{HeaderValue, Method, Request, header::USER_AGENT};
use kube::Client;
use tokio::sync::watch;
use tower::{Layer, Service};

/// How much earlier than the Lease's expiry the fence closes: covers the time a renewal takes
/// and clocks that differ a little between replicas.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(5);

/// Whether this replica may write. Always open without sharding.
#[derive(Clone)]
pub struct Fence {
    state: Option<Arc<Mutex<FenceState>>>,
    lapses: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct FenceState {
    /// Writes are allowed until then (the last renewal's request time, plus the Lease's
    /// duration, less the margin); `None` before the first renewal.
    valid_until: Option<Instant>,
    /// The Lease ran out at some point since the controllers started: closed until they restart.
    lapsed: bool,
}

impl Fence {
    /// A fence that never closes (one replica, no sharding).
    pub fn open() -> Self {
        Self {
            state: None,
            lapses: watch::Sender::new(0),
        }
    }

    /// A fence for a shard: closed until the shard's Lease is first renewed.
    pub fn for_shard() -> Self {
        Self {
            state: Some(Arc::default()),
            lapses: watch::Sender::new(0),
        }
    }

    /// May this replica write now?
    pub fn is_open(&self) -> bool {
        let Some(state) = &self.state else {
            return true;
        };
        let Ok(mut state) = state.lock() else {
            return false;
        };
        match state.valid_until {
            Some(until) if !state.lapsed && Instant::now() < until => true,
            Some(_) => {
                if !state.lapsed {
                    state.lapsed = true;
                    self.lapses.send_modify(|n| *n += 1);
                }
                false
            }
            None => false,
        }
    }

    /// May a connection send what it holds? Not once the fence has closed after it was open:
    /// a write it holds may have passed the layer's check before then. Before the first
    /// renewal it may: the layer lets no write through until then, and reads go on.
    pub fn may_send(&self) -> bool {
        let never_opened = self
            .state
            .as_ref()
            .and_then(|s| s.lock().ok().map(|s| s.valid_until.is_none() && !s.lapsed))
            .unwrap_or(false);
        never_opened || self.is_open()
    }

    /// The shard's Lease was renewed by a request sent at `asked_at`, for `duration`.
    pub fn renewed(&self, asked_at: Instant, duration: Duration) {
        let Some(state) = &self.state else {
            return;
        };
        let Ok(mut state) = state.lock() else {
            return;
        };
        if let Some(until) = state.valid_until
            && until <= asked_at
            && !state.lapsed
        {
            state.lapsed = true;
            self.lapses.send_modify(|n| *n += 1);
        }
        state.valid_until = Some(asked_at + duration.saturating_sub(SAFETY_MARGIN));
    }

    /// Whether the Lease lapsed since the controllers started.
    pub fn lapsed(&self) -> bool {
        self.is_open();
        self.state
            .as_ref()
            .and_then(|s| s.lock().ok().map(|s| s.lapsed))
            .unwrap_or(false)
    }

    /// Completes when the Lease lapses (at once if it already has).
    pub async fn lapse(&self) {
        let mut lapses = self.lapses.subscribe();
        loop {
            if self.lapsed() {
                return;
            }
            // A lapse by time alone is noticed by the next check; look at least every second.
            let _ = tokio::time::timeout(Duration::from_secs(1), lapses.changed()).await;
        }
    }

    /// Was the Lease renewed recently enough that writes would be allowed, lapse aside?
    pub fn is_current(&self) -> bool {
        let Some(state) = &self.state else {
            return true;
        };
        state
            .lock()
            .ok()
            .and_then(|state| state.valid_until)
            .is_some_and(|until| Instant::now() < until)
    }

    /// The controllers restarted after a lapse: writes are allowed again while the Lease is
    /// current.
    pub fn restart(&self) {
        if let Some(state) = &self.state
            && let Ok(mut state) = state.lock()
        {
            state.lapsed = false;
        }
    }
}

/// Wraps a Kubernetes client's service: names the replica in `User-Agent` (so the API
/// server's audit log tells replicas apart) and refuses writes while `fence` is closed.
#[derive(Clone)]
pub struct ReplicaLayer {
    fence: Fence,
    user_agent: HeaderValue,
}

impl ReplicaLayer {
    pub fn new(fence: Fence, identity: &str) -> Self {
        let text = format!(
            "gantry-provisioner/{} ({identity})",
            env!("CARGO_PKG_VERSION")
        );
        let user_agent = HeaderValue::from_str(&text)
            .unwrap_or_else(|_| HeaderValue::from_static("gantry-provisioner"));
        Self { fence, user_agent }
    }

    /// A client for `config` with this layer, whose connections run under the fence.
    pub fn client(&self, config: kube::Config) -> Result<Client, kube::Error> {
        let executor = FencedExecutor {
            fence: self.fence.clone(),
        };
        Ok(
            crate::cluster::connection::client_builder(config, executor)?
                .with_layer(self)
                .build(),
        )
    }
}

impl<S> Layer<S> for ReplicaLayer {
    type Service = ReplicaService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ReplicaService {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ReplicaService<S> {
    inner: S,
    layer: ReplicaLayer,
}

/// Spawns the HTTP client's background tasks (the connections, which write the requests to
/// their sockets) so that they run only while the fence is open: checked at every poll, before
/// the task may write, a closed fence drops the task and with it the connection.
#[derive(Clone)]
pub struct FencedExecutor {
    fence: Fence,
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

impl hyper::rt::Executor<Task> for FencedExecutor {
    fn execute(&self, task: Task) {
        tokio::spawn(fenced(self.fence.clone(), task));
    }
}

/// `task`, ended at the first poll that finds `fence` closed.
fn fenced(fence: Fence, mut task: Task) -> impl Future<Output = ()> + Send {
    std::future::poll_fn(move |cx| {
        if !fence.may_send() {
            return Poll::Ready(());
        }
        task.as_mut().poll(cx)
    })
}

/// The error a fenced write fails with.
#[derive(Debug, thiserror::Error)]
#[error(
    "this replica's shard Lease is not current: its writes are held until its controllers restart"
)]
pub struct Fenced;

impl<S, B> Service<Request<B>> for ReplicaService<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: From<tower::BoxError> + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request
            .headers_mut()
            .insert(USER_AGENT, self.layer.user_agent.clone());
        let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
        if !reads.contains(request.method()) && !self.layer.fence.is_open() {
            let error: tower::BoxError = Box::new(Fenced);
            return futures::future::ready(Err(error.into())).boxed();
        }
        self.inner.call(request).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_fence_never_closes() {
        let fence = Fence::open();
        assert!(fence.is_open());
        assert!(fence.may_send());
        assert!(!fence.lapsed());
    }

    #[test]
    fn connections_may_send_before_the_first_renewal_and_not_once_the_fence_closed() {
        let fence = Fence::for_shard();
        assert!(
            !fence.is_open() && fence.may_send(),
            "reads before the first renewal"
        );
        fence.renewed(Instant::now(), Duration::from_secs(60));
        assert!(fence.may_send());
        fence.renewed(
            Instant::now() - Duration::from_secs(120),
            Duration::from_secs(60),
        );
        assert!(!fence.may_send(), "closed after it was open");
    }

    #[test]
    fn a_shard_fence_opens_on_renewal_and_a_lapse_holds_until_restart() {
        let fence = Fence::for_shard();
        assert!(!fence.is_open(), "closed before the first renewal");
        fence.renewed(Instant::now(), Duration::from_secs(60));
        assert!(fence.is_open());
        // A renewal asked for after the fence had closed: the Lease lapsed in between.
        let past = Instant::now() - Duration::from_secs(120);
        let fence = Fence::for_shard();
        fence.renewed(past, Duration::from_secs(60));
        assert!(!fence.is_open(), "past its time");
        fence.renewed(Instant::now(), Duration::from_secs(60));
        assert!(fence.lapsed());
        assert!(!fence.is_open(), "a lapse holds after a renewal");
        assert!(fence.is_current());
        fence.restart();
        assert!(fence.is_open(), "open again after the restart");
    }

    #[tokio::test]
    async fn writes_are_refused_while_fenced_and_reads_go_through() {
        use tower::ServiceExt;
        let fence = Fence::for_shard();
        let (mock, mut handle) = tower_test::mock::pair::<Request<()>, ()>();
        let mut service = ReplicaLayer::new(fence.clone(), "r1").layer(mock);
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                assert!(
                    request.headers()[USER_AGENT]
                        .to_str()
                        .unwrap()
                        .contains("(r1)")
                );
                send.send_response(());
            }
        });
        let get = Request::get("/api").body(()).unwrap();
        assert!(service.ready().await.unwrap().call(get).await.is_ok());
        let patch = || Request::patch("/api/v1/x").body(()).unwrap();
        let refused = service.ready().await.unwrap().call(patch()).await;
        assert!(refused.unwrap_err().to_string().contains("shard Lease"));
        fence.renewed(Instant::now(), Duration::from_secs(60));
        assert!(service.ready().await.unwrap().call(patch()).await.is_ok());
    }

    /// A connection task that was given a request while the fence was open, and is polled
    /// again after it closed (the replica was paused in between), writes nothing more.
    #[tokio::test]
    async fn a_connection_task_ends_at_its_first_poll_after_the_fence_closed() {
        use hyper::rt::Executor;
        async fn run(close_between: bool) -> Vec<&'static str> {
            let fence = Fence::for_shard();
            fence.renewed(Instant::now(), Duration::from_secs(60));
            let (go, gate) = tokio::sync::oneshot::channel::<()>();
            let (step, mut steps) = tokio::sync::mpsc::unbounded_channel();
            FencedExecutor {
                fence: fence.clone(),
            }
            .execute(Box::pin(async move {
                let _ = step.send("took the request");
                let _ = gate.await;
                let _ = step.send("wrote it");
            }));
            let mut seen = vec![steps.recv().await.unwrap()];
            if close_between {
                fence.renewed(
                    Instant::now() - Duration::from_secs(120),
                    Duration::from_secs(60),
                );
            }
            go.send(()).unwrap();
            // Ends when the task has ended (its sender dropped), by either path.
            while let Some(next) = steps.recv().await {
                seen.push(next);
            }
            seen
        }
        assert_eq!(run(false).await, ["took the request", "wrote it"]);
        assert_eq!(run(true).await, ["took the request"]);
    }
}
