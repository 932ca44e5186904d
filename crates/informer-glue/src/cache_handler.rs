//! [`SliceCacheHandler`]: EndpointSlice events into an
//! [`EndpointSliceCache`](slice_cache::EndpointSliceCache).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use slice_cache::EndpointSliceCache;
use slice_model::Interner;
use tokio::sync::Notify;

use crate::fold::EventHandler;
use crate::{slice_from_k8s, slice_name_of};

/// Feeds a shared cache from slice events and wakes the sync loop when a
/// change needs a sync. Rejected slices are logged (naming the slice and
/// the reason) and counted, never dropped silently.
pub struct SliceCacheHandler {
    cache: Arc<Mutex<EndpointSliceCache>>,
    interner: Interner,
    /// Notified after every change that needs a sync, and once synced.
    pub sync_needed: Arc<Notify>,
    /// Set once the first complete list is in the cache.
    pub synced: Arc<AtomicBool>,
    /// Slices rejected (missing label or name, FQDN).
    pub rejected: Arc<AtomicU64>,
}

impl SliceCacheHandler {
    /// A handler for `cache`.
    pub fn new(cache: Arc<Mutex<EndpointSliceCache>>) -> Self {
        Self {
            cache,
            interner: Interner::new(),
            sync_needed: Arc::new(Notify::new()),
            synced: Arc::new(AtomicBool::new(false)),
            rejected: Arc::new(AtomicU64::new(0)),
        }
    }

    fn with_cache<T>(&self, f: impl FnOnce(&mut EndpointSliceCache) -> T) -> T {
        // The cache holds no invariant a panicking holder could break
        // half-way that a later update would not repair; keep going.
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    fn upsert(&mut self, slice: &EndpointSlice) {
        match slice_from_k8s(slice, &mut self.interner) {
            Ok((model, warnings)) => {
                for w in &warnings {
                    tracing::warn!("{w}");
                }
                if self.with_cache(|c| c.update(model)) {
                    self.sync_needed.notify_one();
                }
            }
            Err(e) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("{e}");
            }
        }
    }
}

impl EventHandler<EndpointSlice> for SliceCacheHandler {
    fn on_add(&mut self, obj: &EndpointSlice) {
        self.upsert(obj);
    }

    fn on_update(&mut self, _old: &EndpointSlice, new: &EndpointSlice) {
        self.upsert(new);
    }

    fn on_delete(&mut self, obj: &EndpointSlice) {
        match slice_name_of(obj) {
            Ok(name) => {
                if self.with_cache(|c| c.remove(&name)) {
                    self.sync_needed.notify_one();
                }
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }

    fn on_synced(&mut self) {
        self.synced.store(true, Ordering::Release);
        self.interner.prune();
        self.sync_needed.notify_one();
    }
}
