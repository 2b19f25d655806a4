//! Canonical tarballs pulled lately, kept in memory for a while so that other bundles of the
//! same image store them without pulling again: a hundred tenants installing one operator
//! image pull it once, not a hundred times.
//!
//! An entry is found only by everything that decides the tarball and who may have it: the
//! image's top-level digest (content is immutable by digest), the platform, the limits it was
//! unpacked under, and what the registry client was made from ([`CredentialsId`]): a bundle
//! whose pull secrets differ pulls for itself, so no bundle gets an image its own credentials
//! could not pull. Entries expire after [`PulledContents::TTL`], which bounds how long revoked
//! credentials still get cached content. The reader checks the digest and the limits again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_image::EffectiveLimits;

use crate::source::registry::CredentialsId;

/// What decides a canonical tarball and who may reuse it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PullKey {
    pub credentials: CredentialsId,
    /// `repo@sha256:…` of the top-level manifest.
    pub image: String,
    /// `os/arch[/variant]` selected from an index.
    pub platform: String,
    /// The limits, field by field.
    pub limits: [u64; 5],
}

impl PullKey {
    pub fn new(
        credentials: CredentialsId,
        image: &str,
        platform: &str,
        limits: &EffectiveLimits,
    ) -> Self {
        Self {
            credentials,
            image: image.to_string(),
            platform: platform.to_string(),
            limits: [
                limits.max_compressed_bytes,
                limits.max_uncompressed_bytes,
                limits.max_files,
                limits.max_file_bytes,
                limits.max_objects,
            ],
        }
    }
}

/// A pulled image's canonical tarball and what status records of the pull.
#[derive(Debug)]
pub struct PulledContent {
    pub tarball: Vec<u8>,
    /// `sha256:…` of the tarball.
    pub content_digest: String,
    /// The platform image manifest unpacked.
    pub manifest_digest: String,
    /// Its platform, `os/arch[/variant]`.
    pub platform: String,
}

struct Entry {
    content: Arc<PulledContent>,
    kept_at: Instant,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<PullKey, Entry>,
    /// Oldest first: what is dropped when the bytes exceed the bound.
    order: VecDeque<PullKey>,
    bytes: u64,
}

/// Canonical tarballs by [`PullKey`], at most `max_bytes` of them (oldest dropped first), each
/// at most a quarter of that, for [`PulledContents::TTL`].
pub struct PulledContents {
    max_bytes: u64,
    ttl: Duration,
    entries: Mutex<Entries>,
}

impl PulledContents {
    /// The default bound: 4 MiB. A plain bundle's tarball is kilobytes; an operator with large
    /// CRDs a few hundred.
    pub const DEFAULT_BYTES: u64 = 4 << 20;
    /// How long an entry is kept.
    pub const TTL: Duration = Duration::from_secs(300);

    pub fn new(max_bytes: u64) -> Self {
        Self::with_ttl(max_bytes, Self::TTL)
    }

    fn with_ttl(max_bytes: u64, ttl: Duration) -> Self {
        Self {
            max_bytes,
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The content kept for `key`, if any and not expired.
    pub fn get(&self, key: &PullKey) -> Option<Arc<PulledContent>> {
        let mut entries = self.entries.lock().ok()?;
        let entries = &mut *entries;
        let entry = entries.by_key.get(key)?;
        if entry.kept_at.elapsed() < self.ttl {
            return Some(entry.content.clone());
        }
        if let Some(gone) = entries.by_key.remove(key) {
            entries.bytes -= gone.content.tarball.len() as u64;
        }
        entries.order.retain(|k| k != key);
        None
    }

    /// Keeps `content` for `key`, dropping the oldest entries while the bound is exceeded. A
    /// tarball over a quarter of the bound is not kept.
    pub fn insert(&self, key: PullKey, content: PulledContent) {
        let size = content.tarball.len() as u64;
        if size == 0 || size > self.max_bytes / 4 {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        let entries = &mut *entries;
        if let Some(old) = entries.by_key.remove(&key) {
            entries.bytes -= old.content.tarball.len() as u64;
            entries.order.retain(|k| *k != key);
        }
        while entries.bytes + size > self.max_bytes {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            if let Some(gone) = entries.by_key.remove(&oldest) {
                entries.bytes -= gone.content.tarball.len() as u64;
            }
        }
        entries.bytes += size;
        entries.order.push_back(key.clone());
        entries.by_key.insert(
            key,
            Entry {
                content: Arc::new(content),
                kept_at: Instant::now(),
            },
        );
    }

    /// Bytes kept now.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.entries.lock().map(|e| e.bytes).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(credentials: u8, image: &str) -> PullKey {
        PullKey::new(
            [credentials; 32],
            image,
            "linux/amd64",
            &EffectiveLimits::from_api(None),
        )
    }

    fn content(size: usize) -> PulledContent {
        PulledContent {
            tarball: vec![7; size],
            content_digest: "sha256:c".into(),
            manifest_digest: "sha256:m".into(),
            platform: "linux/amd64".into(),
        }
    }

    #[test]
    fn content_is_found_only_by_the_same_image_credentials_platform_and_limits() {
        let kept = PulledContents::new(1 << 20);
        kept.insert(key(1, "r.test/a@sha256:1"), content(100));
        assert!(kept.get(&key(1, "r.test/a@sha256:1")).is_some());
        assert!(kept.get(&key(2, "r.test/a@sha256:1")).is_none());
        assert!(kept.get(&key(1, "r.test/a@sha256:2")).is_none());
        let mut other_platform = key(1, "r.test/a@sha256:1");
        other_platform.platform = "linux/arm64".into();
        assert!(kept.get(&other_platform).is_none());
        let mut stricter = key(1, "r.test/a@sha256:1");
        stricter.limits[4] = 10;
        assert!(kept.get(&stricter).is_none());
    }

    #[test]
    fn the_oldest_entries_go_when_the_bound_is_reached() {
        let kept = PulledContents::new(1000);
        for i in 0..5 {
            kept.insert(key(1, &format!("r.test/a@sha256:{i}")), content(200));
        }
        // 5 × 200 fits exactly; a sixth drops the first.
        assert_eq!(kept.bytes(), 1000);
        kept.insert(key(1, "r.test/a@sha256:5"), content(200));
        assert_eq!(kept.bytes(), 1000);
        assert!(kept.get(&key(1, "r.test/a@sha256:0")).is_none());
        assert!(kept.get(&key(1, "r.test/a@sha256:1")).is_some());
        assert!(kept.get(&key(1, "r.test/a@sha256:5")).is_some());
        // Over a quarter of the bound: not kept, nothing dropped for it.
        kept.insert(key(1, "r.test/big@sha256:9"), content(251));
        assert!(kept.get(&key(1, "r.test/big@sha256:9")).is_none());
        assert_eq!(kept.bytes(), 1000);
    }

    #[test]
    fn a_zero_bound_keeps_nothing_and_entries_expire() {
        let off = PulledContents::new(0);
        off.insert(key(1, "r.test/a@sha256:1"), content(1));
        assert!(off.get(&key(1, "r.test/a@sha256:1")).is_none());

        let brief = PulledContents::with_ttl(1000, Duration::ZERO);
        brief.insert(key(1, "r.test/a@sha256:1"), content(10));
        assert!(brief.get(&key(1, "r.test/a@sha256:1")).is_none());
        assert_eq!(brief.bytes(), 0);
    }
}
