//! What the controller remembers about bundles between reconciles, to skip work that cannot
//! change anything: when a tag was last resolved, and what an installed bundle looked like when
//! it was last checked in full. Both are hints: losing them (a restart) only costs requests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A value per bundle, with the time it was recorded.
pub struct Recent<V> {
    entries: Mutex<HashMap<String, (V, Instant)>>,
}

impl<V> Default for Recent<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: PartialEq> Recent<V> {
    /// Records `value` for `bundle`, now.
    pub fn record(&self, bundle: &str, value: V) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(bundle.to_string(), (value, Instant::now()));
        }
    }

    /// Whether `value` is what was recorded for `bundle`, less than `max_age` ago.
    pub fn is_fresh(&self, bundle: &str, value: &V, max_age: Duration) -> bool {
        self.entries.lock().is_ok_and(|entries| {
            entries
                .get(bundle)
                .is_some_and(|(recorded, at)| recorded == value && at.elapsed() < max_age)
        })
    }

    /// Forgets `bundle` (it was deleted).
    pub fn forget(&self, bundle: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(bundle);
        }
    }
}

/// The image reference (`spec.image`) each bundle's tag was last resolved for: within the
/// resolve interval, the resolved digest in status is reused instead of asking the registry.
pub type ResolvedTags = Recent<String>;

/// The fingerprint of each installed bundle at its last full check: while it is unchanged and
/// no managed object moved, a reconcile has nothing to read or write until the next resync.
pub type InstalledChecks = Recent<u64>;

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn a_recorded_value_is_fresh_until_it_changes() {
        let tags = ResolvedTags::default();
        assert!(!tags.is_fresh("b", &"r/x:v1".to_string(), LONG));
        tags.record("b", "r/x:v1".to_string());
        assert!(tags.is_fresh("b", &"r/x:v1".to_string(), LONG));
        assert!(
            !tags.is_fresh("b", &"r/x:v2".to_string(), LONG),
            "another image is not fresh"
        );
        assert!(!tags.is_fresh("other", &"r/x:v1".to_string(), LONG));
    }

    #[test]
    fn an_old_value_is_not_fresh() {
        let checks = InstalledChecks::default();
        checks.record("b", 7);
        assert!(!checks.is_fresh("b", &7, Duration::ZERO));
        assert!(checks.is_fresh("b", &7, LONG));
    }

    #[test]
    fn recording_replaces_and_forgetting_removes() {
        let checks = InstalledChecks::default();
        checks.record("b", 1);
        checks.record("b", 2);
        assert!(!checks.is_fresh("b", &1, LONG));
        assert!(checks.is_fresh("b", &2, LONG));
        checks.forget("b");
        assert!(!checks.is_fresh("b", &2, LONG));
    }
}
