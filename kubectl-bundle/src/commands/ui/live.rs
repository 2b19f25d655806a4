//! Live updates: one watch of Bundles, made with the user's credentials, keeps a cache the
//! list page reads (so a page of thousands of bundles costs no list request) and tells each
//! open page, by server-sent events, the name of every Bundle that changed.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use gantry_api::Bundle;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::broadcast;

use super::Ui;

/// The name sent when every bundle may have changed (the watch started again).
pub const ALL: &str = "*";

pub struct Live {
    store: Store<Bundle>,
    changes: broadcast::Sender<String>,
    /// The watch has failed since it last listed (RBAC, an unreachable server): pages read
    /// for themselves meanwhile, and show why they cannot.
    failing: Arc<AtomicBool>,
    /// Changes the watch has seen so far; a page says how many it had seen when it read what
    /// it shows, so that its script learns of those made before it listened.
    seen: Arc<AtomicU64>,
}

impl Live {
    /// Starts the watch; it retries with backoff for as long as the process runs.
    pub fn start(client: Client) -> Self {
        let (store, writer) = reflector::store();
        let (changes, _) = broadcast::channel(1024);
        let sender = changes.clone();
        let failing = Arc::new(AtomicBool::new(false));
        let failed = failing.clone();
        let seen = Arc::new(AtomicU64::new(0));
        let counted = seen.clone();
        let stream = watcher(Api::<Bundle>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let name = match event {
                    Ok(watcher::Event::Apply(b) | watcher::Event::Delete(b)) => b.name_any(),
                    Ok(watcher::Event::InitDone) => ALL.to_string(),
                    Ok(_) => continue,
                    Err(e) => {
                        // Said once per outage: the pages show the error of their own reads.
                        if !failed.swap(true, Ordering::Relaxed) {
                            eprintln!("warning: watching bundles: {e} (retrying)");
                        }
                        continue;
                    }
                };
                failed.store(false, Ordering::Relaxed);
                counted.fetch_add(1, Ordering::SeqCst);
                // No page listening is no error.
                let _ = sender.send(name);
            }
        });
        Self {
            store,
            changes,
            failing,
            seen,
        }
    }

    /// How many changes the watch has seen so far.
    pub fn changes_seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// Every bundle: from the watch's cache once it has listed them, else read now (which
    /// says why, when the user may not list bundles).
    pub async fn bundles(&self, client: &Client) -> anyhow::Result<Vec<Arc<Bundle>>> {
        // Right after the start the first list may be on its way.
        let wait = if self.failing.load(Ordering::Relaxed) {
            Duration::ZERO
        } else {
            Duration::from_secs(3)
        };
        let ready = tokio::time::timeout(wait, self.store.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok());
        if ready {
            return Ok(self.store.state());
        }
        let listed = Api::<Bundle>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(anyhow::Error::new)
            .map_err(|e| e.context("listing bundles"))?;
        Ok(listed.items.into_iter().map(Arc::new).collect())
    }
}

/// `GET /events[?since=N]`: an event `bundle` with the name of each Bundle that changes; first
/// one naming every bundle ([`ALL`]) when changes were seen since the page's `N`.
#[derive(serde::Deserialize)]
pub struct EventsQuery {
    since: Option<u64>,
}

pub async fn events(
    State(ui): State<Arc<Ui>>,
    Query(query): Query<EventsQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribed before the count is read: no change falls between the two.
    let receiver = ui.live.changes.subscribe();
    let missed = query
        .since
        .is_some_and(|since| since != ui.live.changes_seen());
    let first = missed.then(|| Ok(Event::default().event("bundle").data(ALL)));
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        let name = match receiver.recv().await {
            Ok(name) => name,
            // Changes were missed: any bundle may have changed.
            Err(broadcast::error::RecvError::Lagged(_)) => ALL.to_string(),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok(Event::default().event("bundle").data(name)), receiver))
    });
    Sse::new(futures::stream::iter(first).chain(stream)).keep_alive(KeepAlive::default())
}
