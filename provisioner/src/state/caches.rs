//! What the controller remembers about bundles between reconciles, to skip work that cannot
//! change anything: when a tag was last resolved, what an installed bundle looked like when it
//! was last checked in full, and which digests' signatures verified. All are hints: losing them
//! (a restart) only costs requests.

use std::collections::{HashMap, HashSet};
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

    /// Forgets `bundle` (deleted, handed over, or its last pass failed).
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

/// The `resourceVersion` of each bundle's last write by the provisioner (its status, its
/// finalizer), until the controller's copy of the bundle has caught up with it. A pass that
/// started from an older copy (the watch has not delivered the write yet) would take work the
/// write recorded as done for work to do, and install everything again. Versions are compared
/// as numbers, as the API server hands them out; one that is not a number compares as caught up.
#[derive(Default)]
pub struct WrittenVersions {
    entries: Mutex<HashMap<String, u64>>,
}

impl WrittenVersions {
    /// Records that `bundle` was written at `resource_version`.
    pub fn record(&self, bundle: &str, resource_version: Option<&str>) {
        if let Ok(mut entries) = self.entries.lock() {
            match resource_version.and_then(|v| v.parse().ok()) {
                Some(version) => entries.insert(bundle.to_string(), version),
                None => entries.remove(bundle),
            };
        }
    }

    /// Whether a copy of `bundle` at `resource_version` is older than its last write; a copy
    /// that caught up ends the bundle's entry.
    pub fn is_behind(&self, bundle: &str, resource_version: Option<&str>) -> bool {
        let Ok(mut entries) = self.entries.lock() else {
            return false;
        };
        let Some(&written) = entries.get(bundle) else {
            return false;
        };
        match resource_version.and_then(|v| v.parse::<u64>().ok()) {
            Some(seen) if seen < written => true,
            _ => {
                entries.remove(bundle);
                false
            }
        }
    }

    /// Forgets `bundle` (it was deleted).
    pub fn forget(&self, bundle: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(bundle);
        }
    }
}

/// Bundles whose new content or spec is held back before anything of it is written (it failed
/// to resolve, pull, unpack, verify, plan or pass the checks before the first write, or it awaits
/// an approver) while the content installed before stays, each with when drift repair last went
/// over that content. Meanwhile a drift mark lets a repair through the failure's backoff, and
/// such a pass repairs at most once per resync interval unless an object moved.
#[derive(Default)]
pub struct HeldUpdates {
    entries: Mutex<HashMap<String, Option<Instant>>>,
}

impl HeldUpdates {
    /// `bundle`'s new content or spec is held back.
    pub fn hold(&self, bundle: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.entry(bundle.to_string()).or_insert(None);
        }
    }

    /// Whether `bundle`'s last pass held its new content or spec back.
    pub fn is_held(&self, bundle: &str) -> bool {
        self.entries
            .lock()
            .is_ok_and(|entries| entries.contains_key(bundle))
    }

    /// Whether `bundle`'s installed content was not gone over within `interval`.
    pub fn due(&self, bundle: &str, interval: Duration) -> bool {
        self.entries.lock().is_ok_and(|entries| {
            entries
                .get(bundle)
                .is_none_or(|last| last.is_none_or(|at| at.elapsed() >= interval))
        })
    }

    /// Drift repair went over `bundle`'s installed content.
    pub fn repaired(&self, bundle: &str) {
        if let Ok(mut entries) = self.entries.lock()
            && let Some(last) = entries.get_mut(bundle)
        {
            *last = Some(Instant::now());
        }
    }

    /// `bundle` went on, failed otherwise, or left.
    pub fn forget(&self, bundle: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(bundle);
        }
    }
}

/// Images (`repo@sha256:…`) whose cosign signature verified, each with the set of keys it
/// verified against (their fingerprints). A signature never stops being valid, so an entry
/// does not expire: the same digest under the same keys is not verified again. Other keys
/// (a key added or removed) mean a new verification. Bounded: when full, it starts afresh.
#[derive(Default)]
pub struct VerifiedImages {
    entries: Mutex<HashSet<(String, String)>>,
}

impl VerifiedImages {
    /// More entries than this and the set is cleared (costing one verification per image).
    const MAX_ENTRIES: usize = 10_000;

    /// Records that `image` verified against the keys of `key_set`.
    pub fn record(&self, image: &str, key_set: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= Self::MAX_ENTRIES {
                entries.clear();
            }
            entries.insert((image.to_string(), key_set.to_string()));
        }
    }

    /// Whether `image` verified against exactly the keys of `key_set`.
    pub fn contains(&self, image: &str, key_set: &str) -> bool {
        self.entries
            .lock()
            .is_ok_and(|entries| entries.contains(&(image.to_string(), key_set.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn a_copy_older_than_the_last_write_is_behind_until_one_catches_up() {
        let written = WrittenVersions::default();
        assert!(!written.is_behind("b", Some("5")), "nothing written");
        written.record("b", Some("10"));
        assert!(written.is_behind("b", Some("9")));
        assert!(written.is_behind("b", Some("9")), "still behind");
        assert!(!written.is_behind("other", Some("1")));
        assert!(!written.is_behind("b", Some("10")), "caught up");
        assert!(
            !written.is_behind("b", Some("9")),
            "the entry ended once caught up"
        );
        written.record("b", Some("20"));
        assert!(!written.is_behind("b", Some("not-a-number")));
        written.record("b", Some("30"));
        written.forget("b");
        assert!(!written.is_behind("b", Some("1")));
        written.record("b", Some("opaque"));
        assert!(
            !written.is_behind("b", Some("1")),
            "not a number: never behind"
        );
    }

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

    #[test]
    fn a_held_update_is_repaired_once_per_interval() {
        let held = HeldUpdates::default();
        assert!(!held.is_held("b"));
        held.hold("b");
        assert!(held.is_held("b"));
        assert!(held.due("b", LONG), "never repaired");
        held.repaired("b");
        held.hold("b");
        assert!(!held.due("b", LONG), "a new failure keeps the last repair");
        assert!(held.due("b", Duration::ZERO));
        held.forget("b");
        assert!(!held.is_held("b"));
    }

    #[test]
    fn a_verified_image_counts_only_for_the_same_keys() {
        let verified = VerifiedImages::default();
        assert!(!verified.contains("r/x@sha256:1", "k1"));
        verified.record("r/x@sha256:1", "k1");
        assert!(verified.contains("r/x@sha256:1", "k1"));
        assert!(
            !verified.contains("r/x@sha256:1", "k1,k2"),
            "another key set"
        );
        assert!(!verified.contains("r/x@sha256:2", "k1"), "another digest");
        assert!(
            !verified.contains("r/y@sha256:1", "k1"),
            "another repository"
        );
    }

    #[test]
    fn verified_images_stay_bounded() {
        let verified = VerifiedImages::default();
        for i in 0..=VerifiedImages::MAX_ENTRIES {
            verified.record(&format!("r/x@sha256:{i}"), "k");
        }
        assert_eq!(
            verified.entries.lock().unwrap().len(),
            1,
            "cleared when full"
        );
        assert!(verified.contains(&format!("r/x@sha256:{}", VerifiedImages::MAX_ENTRIES), "k"));
    }
}
