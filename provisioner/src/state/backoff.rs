//! Per-bundle exponential backoff with jitter. kube-runtime's error policy never hears of
//! successes, so failures are counted here and reset on success.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failure counts and next attempts, by bundle.
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: Mutex<HashMap<String, Failure>>,
}

struct Failure {
    attempts: u32,
    next_attempt: Instant,
    /// What the bundle looked like when it failed: a change lets the next attempt through.
    fingerprint: u64,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay before attempt `attempts + 1`: `base * 2^(attempts-1)`, capped, ±20% jitter.
    fn delay_capped(&self, attempts: u32, cap: Duration) -> Duration {
        let exponent = attempts.saturating_sub(1).min(30);
        let raw = self.base.saturating_mul(1u32 << exponent).min(cap);
        let jitter: f64 = rand::random_range(0.8..1.2);
        raw.mul_f64(jitter).min(cap)
    }

    /// Records a failure; returns the attempt number and the delay before the next one, at
    /// most `ceiling` (a bundle's own `retryInterval`) when given, else the provisioner's cap.
    pub fn failure(
        &self,
        key: &str,
        fingerprint: u64,
        ceiling: Option<Duration>,
    ) -> (u32, Duration) {
        let cap = ceiling.unwrap_or(self.cap);
        let Ok(mut failures) = self.failures.lock() else {
            return (1, self.base.min(cap));
        };
        let entry = failures.entry(key.to_string()).or_insert(Failure {
            attempts: 0,
            next_attempt: Instant::now(),
            fingerprint,
        });
        if entry.fingerprint != fingerprint {
            entry.attempts = 0;
            entry.fingerprint = fingerprint;
        }
        entry.attempts += 1;
        let delay = self.delay_capped(entry.attempts, cap);
        entry.next_attempt = Instant::now() + delay;
        (entry.attempts, delay)
    }

    /// Records a failure no retry can fix until the bundle changes (its fingerprint): nothing
    /// lets `key` through for `retry_in` but a change.
    pub fn stall(&self, key: &str, fingerprint: u64, retry_in: Duration) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.insert(
                key.to_string(),
                Failure {
                    attempts: 0,
                    next_attempt: Instant::now() + retry_in,
                    fingerprint,
                },
            );
        }
    }

    /// Forgets the failures of `key`.
    pub fn success(&self, key: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(key);
        }
    }

    /// How long `key` must still wait, if its last failure is recent and nothing changed since.
    pub fn pending(&self, key: &str, fingerprint: u64) -> Option<Duration> {
        let failures = self.failures.lock().ok()?;
        let failure = failures.get(key)?;
        if failure.fingerprint != fingerprint {
            return None;
        }
        failure
            .next_attempt
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(10);

    #[test]
    fn delays_grow_then_cap_and_reset_on_success() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let delays: Vec<Duration> = (0..6).map(|_| backoff.failure("b", 7, None).1).collect();
        assert!(
            delays[0] >= Duration::from_millis(800) && delays[0] <= Duration::from_millis(1200)
        );
        assert!(delays[2] >= Duration::from_millis(3200), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(10)),
            "{delays:?}"
        );
        assert!(backoff.pending("b", 7).is_some());
        backoff.success("b");
        assert!(backoff.pending("b", 7).is_none());
        assert_eq!(backoff.failure("b", 7, None).0, 1);
    }

    #[test]
    fn a_changed_bundle_is_not_held_back() {
        let backoff = Backoff::new(Duration::from_secs(5), CAP);
        backoff.failure("b", 1, None);
        assert!(backoff.pending("b", 1).is_some());
        assert!(backoff.pending("b", 2).is_none());
        assert_eq!(
            backoff.failure("b", 2, None).0,
            1,
            "a new fingerprint starts over"
        );
    }

    #[test]
    fn a_lower_cap_bounds_the_delay_and_the_wait() {
        let backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(300));
        let short = Duration::from_secs(1);
        for _ in 0..8 {
            let (_, delay) = backoff.failure("b", 1, Some(short));
            assert!(delay <= short, "{delay:?}");
        }
        assert!(backoff.pending("b", 1).is_none_or(|d| d <= short));
    }

    #[test]
    fn a_stalled_bundle_waits_for_a_change_not_for_backoff() {
        let backoff = Backoff::new(Duration::from_millis(1), CAP);
        backoff.stall("b", 1, Duration::from_secs(60));
        let wait = backoff
            .pending("b", 1)
            .expect("held back while nothing changed");
        assert!(wait > Duration::from_secs(59), "{wait:?}");
        assert!(
            backoff.pending("b", 2).is_none(),
            "a change lets it through"
        );
        // A later retryable failure starts its backoff at the first attempt.
        assert_eq!(backoff.failure("b", 1, None).0, 1);
    }
}
