//! Small tarballs kept in memory, first in first out within a byte budget.
//!
//! Stored content never changes under its name, so the only invalidation needed is deletion;
//! a generation number makes a read that raced with a deletion drop its result instead of
//! caching content that may be gone.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use gantry_api::storage::{BundleName, Digest};

/// The cache key of a tarball; a bundle's keys share the prefix `{bundle}/`.
pub(super) fn key(bundle: &BundleName, digest: &Digest) -> String {
    // Without the formatting machinery: this runs for every download.
    let (bundle, digest) = (bundle.as_str(), digest.as_str());
    let mut key = String::with_capacity(bundle.len() + 1 + digest.len());
    key.push_str(bundle);
    key.push('/');
    key.push_str(digest);
    key
}

/// The key prefix of every tarball of a bundle.
pub(super) fn bundle_prefix(bundle: &BundleName) -> String {
    format!("{bundle}/")
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<String, Bytes>,
    /// Insertion order, for first-in first-out eviction.
    order: VecDeque<String>,
    bytes: u64,
    generation: u64,
}

pub(super) struct Cache {
    entries: Mutex<Entries>,
    budget: u64,
    entry_max: u64,
}

impl Cache {
    /// Keeps up to `budget` bytes of entries no larger than `entry_max` (0: nothing).
    pub(super) fn new(budget: u64, entry_max: u64) -> Self {
        Self {
            entries: Mutex::default(),
            budget,
            entry_max: entry_max.min(budget),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn get(&self, key: &str) -> Option<Bytes> {
        if self.entry_max == 0 {
            return None;
        }
        self.entries().by_key.get(key).cloned()
    }

    /// Read before opening a file whose content may go to [`Cache::insert`].
    pub(super) fn generation(&self) -> u64 {
        self.entries().generation
    }

    /// Caches a tarball's full content, read after `generation` was taken; a deletion since
    /// then means the content may be gone, so it is dropped.
    pub(super) fn insert(&self, key: String, data: Bytes, generation: u64) {
        let len = data.len() as u64;
        if len > self.entry_max {
            return;
        }
        let mut entries = self.entries();
        if entries.generation != generation || entries.by_key.contains_key(&key) {
            return;
        }
        while entries.bytes + len > self.budget {
            let Some(old) = entries.order.pop_front() else {
                break;
            };
            if let Some(evicted) = entries.by_key.remove(&old) {
                entries.bytes -= evicted.len() as u64;
            }
        }
        entries.bytes += len;
        entries.order.push_back(key.clone());
        entries.by_key.insert(key, data);
    }

    /// Drops entries whose key starts with `prefix`; called after the files are gone.
    pub(super) fn invalidate(&self, prefix: &str) {
        let mut entries = self.entries();
        entries.generation += 1;
        let Entries {
            by_key,
            order,
            bytes,
            ..
        } = &mut *entries;
        by_key.retain(|k, v| {
            let keep = !k.starts_with(prefix);
            if !keep {
                *bytes -= v.len() as u64;
            }
            keep
        });
        order.retain(|k| by_key.contains_key(k));
    }

    #[cfg(test)]
    pub(super) fn bytes(&self) -> u64 {
        self.entries().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_first_in_first_out() {
        let cache = Cache::new(10, 6);
        let g = cache.generation();
        cache.insert("b/1".into(), Bytes::from_static(b"one"), g);
        // Over the per-entry limit: not cached.
        cache.insert("b/2".into(), Bytes::from_static(b"hello world"), g);
        assert_eq!(cache.get("b/1").as_deref(), Some(&b"one"[..]));
        assert_eq!(cache.get("b/2"), None);
        // 3 + 6 bytes fit in 10; a second 6-byte entry evicts the oldest.
        cache.insert("b/3".into(), Bytes::from_static(b"abcdef"), g);
        assert!(cache.get("b/1").is_some() && cache.get("b/3").is_some());
        cache.insert("o/3".into(), Bytes::from_static(b"abcdef"), g);
        assert_eq!(cache.get("b/1"), None);
        assert!(cache.bytes() <= 10);
    }

    #[test]
    fn a_read_older_than_an_invalidation_is_not_cached() {
        let cache = Cache::new(10, 10);
        let before = cache.generation();
        cache.insert("b/1".into(), Bytes::from_static(b"one"), before);
        cache.insert("o/1".into(), Bytes::from_static(b"one"), before);
        cache.invalidate("b/");
        assert_eq!(cache.get("b/1"), None);
        assert!(cache.get("o/1").is_some());
        cache.insert("b/1".into(), Bytes::from_static(b"one"), before);
        assert_eq!(cache.get("b/1"), None, "a stale read was cached");
        assert_eq!(cache.bytes(), 3);
    }

    #[test]
    fn no_budget_no_cache() {
        let cache = Cache::new(0, 64);
        cache.insert("b/1".into(), Bytes::from_static(b"one"), cache.generation());
        assert_eq!(cache.get("b/1"), None);
    }
}
