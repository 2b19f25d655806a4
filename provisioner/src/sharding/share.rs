//! A shard's share of the reconcile concurrency: how many of its passes run at once.
//!
//! `--reconcile-concurrency` counts passes across all shards. What a pass waits on is the API
//! server, which every shard shares: three shards each running the whole number would put three
//! times the load on it, and hold three times the requests, connections' streams and content in
//! flight, in memory that does not divide among the replicas. So each shard runs the part of it
//! that its slots are of all slots (rounded up, at least one), and the share follows the slot
//! table: a shard that takes over a dead one's slots runs more passes at once.

use std::sync::{Arc, Mutex};

use gantry_api::slots::SLOTS;
use tokio::sync::Notify;

/// Passes running at once, under a limit that can change while they run.
#[derive(Clone)]
pub struct ReconcileShare {
    inner: Arc<Inner>,
}

struct Inner {
    /// The whole reconcile concurrency, across shards.
    total: usize,
    state: Mutex<State>,
    /// A turn ended, or the limit grew.
    freed: Notify,
}

struct State {
    limit: usize,
    running: usize,
}

/// A pass's turn; the next waiting pass may start once it is dropped.
pub struct Turn {
    share: ReconcileShare,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Ok(mut state) = self.share.inner.state.lock() {
            state.running = state.running.saturating_sub(1);
        }
        self.share.inner.freed.notify_waiters();
    }
}

impl ReconcileShare {
    /// The share of `total` passes at once for a shard that serves no slot yet: one.
    pub fn new(total: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                total: total.max(1),
                state: Mutex::new(State {
                    limit: 1,
                    running: 0,
                }),
                freed: Notify::new(),
            }),
        }
    }

    /// The share of a shard serving `slots` of all [`SLOTS`]: the whole concurrency times that
    /// part, rounded up, at least one. Passes under way when it shrinks run to their end.
    pub fn serve(&self, slots: usize) {
        let limit = share_of(self.inner.total, slots);
        if let Ok(mut state) = self.inner.state.lock() {
            state.limit = limit;
        }
        self.inner.freed.notify_waiters();
    }

    /// Passes at once now.
    pub fn limit(&self) -> usize {
        self.inner.state.lock().map(|s| s.limit).unwrap_or(1)
    }

    /// Waits until fewer passes than the limit run, and takes a turn.
    pub async fn turn(&self) -> Turn {
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a turn ended in between is not missed.
            freed.as_mut().enable();
            if let Ok(mut state) = self.inner.state.lock()
                && state.running < state.limit
            {
                state.running += 1;
                return Turn {
                    share: self.clone(),
                };
            }
            freed.await;
        }
    }
}

/// `total` times `slots` of all [`SLOTS`], rounded up, at least 1 and at most `total`.
fn share_of(total: usize, slots: usize) -> usize {
    let all = usize::from(SLOTS);
    (total * slots.min(all)).div_ceil(all).clamp(1, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_share_follows_the_part_of_the_slots_served() {
        assert_eq!(
            share_of(16, 256),
            16,
            "one shard runs the whole concurrency"
        );
        assert_eq!(
            share_of(16, 86),
            6,
            "a third of the slots: a third, rounded up"
        );
        assert_eq!(share_of(16, 85), 6);
        assert_eq!(share_of(16, 128), 8, "half after a failover");
        assert_eq!(share_of(16, 1), 1);
        assert_eq!(share_of(16, 0), 1, "at least one");
        assert_eq!(share_of(1, 10), 1);
        assert_eq!(share_of(16, 300), 16, "never more than the whole");
    }

    #[tokio::test]
    async fn passes_beyond_the_share_wait_for_a_turn_and_a_grown_share_lets_them_run() {
        let share = ReconcileShare::new(16);
        share.serve(32); // 16 * 32 / 256 = 2
        assert_eq!(share.limit(), 2);
        let first = share.turn().await;
        let _second = share.turn().await;
        let third = tokio::spawn({
            let share = share.clone();
            async move { share.turn().await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a third pass waits");
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("a turn ended: the waiting pass runs")
            .unwrap();
        let fourth = tokio::spawn({
            let share = share.clone();
            async move { share.turn().await }
        });
        tokio::task::yield_now().await;
        assert!(!fourth.is_finished());
        share.serve(64); // 4
        let _fourth = tokio::time::timeout(Duration::from_secs(5), fourth)
            .await
            .expect("the share grew: the waiting pass runs")
            .unwrap();
        // Shrunk below what runs: passes under way go on, no new one starts until enough end.
        share.serve(16); // 1
        let fifth = tokio::spawn({
            let share = share.clone();
            async move { share.turn().await }
        });
        drop(third);
        tokio::task::yield_now().await;
        assert!(!fifth.is_finished(), "two still run against a limit of one");
    }
}
