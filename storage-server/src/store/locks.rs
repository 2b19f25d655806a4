//! Per-bundle locks, kept in a table only while someone holds them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gantry_api::storage::BundleName;

#[derive(Default)]
pub(super) struct BundleLock {
    /// Held shared by uploads and single deletions, exclusively by bundle deletion.
    pub rw: tokio::sync::RwLock<()>,
    /// Serialises the final step of uploads and deletions, which keeps the
    /// stored-bytes gauges exact when the same digest is uploaded concurrently.
    pub commit: tokio::sync::Mutex<()>,
}

#[derive(Default)]
pub(super) struct Locks {
    table: Mutex<HashMap<BundleName, Arc<BundleLock>>>,
}

impl Locks {
    pub(super) fn lock(&self, bundle: &BundleName) -> LockRef<'_> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let lock = table.entry(bundle.clone()).or_default().clone();
        LockRef {
            locks: self,
            bundle: bundle.clone(),
            lock,
        }
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

/// A bundle's lock, dropped from the table once nobody holds it.
pub(super) struct LockRef<'a> {
    locks: &'a Locks,
    bundle: BundleName,
    pub lock: Arc<BundleLock>,
}

impl Drop for LockRef<'_> {
    fn drop(&mut self) {
        let mut table = self.locks.table.lock().unwrap_or_else(|p| p.into_inner());
        // One reference in the table, one here: nobody else uses it.
        if Arc::strong_count(&self.lock) == 2 {
            table.remove(&self.bundle);
        }
    }
}
