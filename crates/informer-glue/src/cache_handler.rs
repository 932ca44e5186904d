//! [`SliceCacheHandler`]: EndpointSlice events into an
//! [`EndpointSliceCache`](slice_cache::EndpointSliceCache).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use slice_cache::EndpointSliceCache;
use slice_model::Interner;
use tokio::sync::Notify;

use crate::fold::EventHandler;
use crate::rejections::Rejections;
use crate::{slice_from_k8s, slice_name_of};

/// Feeds a shared cache from slice events and wakes the sync loop when a
/// change needs a sync. Rejected slices are logged (naming the slice and
/// the reason) and counted, never dropped silently.
pub struct SliceCacheHandler {
    cache: Arc<Mutex<EndpointSliceCache>>,
    interner: Interner,
    /// Notified after every change that needs a sync, and once synced.
    changed: Arc<Notify>,
    /// Set once the first complete list is in the cache.
    pub synced: Arc<AtomicBool>,
    /// Objects rejected (logged, counted by reason).
    pub rejected: Arc<Rejections>,
}

impl SliceCacheHandler {
    /// A handler for `cache` that wakes `changed` when a sync is needed.
    pub fn new(cache: Arc<Mutex<EndpointSliceCache>>, changed: Arc<Notify>) -> Self {
        Self {
            cache,
            interner: Interner::new(),
            changed,
            synced: Arc::new(AtomicBool::new(false)),
            rejected: Arc::default(),
        }
    }

    /// Counts rejected slices and skipped fields into `rejected` (the
    /// exported counters) instead of private ones.
    #[must_use]
    pub fn counting_into(mut self, rejected: Arc<Rejections>) -> Self {
        self.rejected = rejected;
        self
    }

    fn with_cache<T>(&self, f: impl FnOnce(&mut EndpointSliceCache) -> T) -> T {
        // The cache holds no invariant a panicking holder could break
        // half-way that a later update would not repair; keep going.
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    fn upsert(&mut self, slice: &EndpointSlice) {
        // Nodes and slices come and go; forget names nothing uses any more
        // once in a while, so the interner stays the size of the cluster.
        self.interner.prune_if_grown();
        match slice_from_k8s(slice, &mut self.interner) {
            Ok((model, warnings)) => {
                for w in &warnings {
                    self.rejected.skipped(w.kind.reason(), w);
                }
                if self.with_cache(|c| c.update(model)) {
                    self.changed.notify_one();
                }
            }
            Err(e) => self.rejected.record(e.reason(), &e),
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
                    self.changed.notify_one();
                }
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }

    fn on_synced(&mut self) {
        self.synced.store(true, Ordering::Release);
        self.interner.prune();
        self.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use serde_json::json;
    use slice_model::IpFamily;

    use super::*;

    fn slice(labels: serde_json::Value, ip: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "labels": labels},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip]}],
            "ports": [{"name": "", "port": 80}],
        }))
        .unwrap()
    }

    fn notified(h: &SliceCacheHandler) -> bool {
        h.changed.notified().now_or_never().is_some()
    }

    #[test]
    fn changes_reach_the_cache_and_wake_the_sync_loop() {
        let cache = Arc::new(Mutex::new(EndpointSliceCache::new("n1", IpFamily::V4)));
        let mut h = SliceCacheHandler::new(cache.clone(), Arc::default());
        let labels = json!({"kubernetes.io/service-name": "web"});
        let a = slice(labels.clone(), "10.0.0.1");
        h.on_add(&a);
        assert!(notified(&h));
        assert!(cache.lock().unwrap().has_pending());
        h.on_update(&a, &a);
        assert!(!notified(&h), "no change, no sync");

        h.on_update(&a, &slice(json!({}), "10.0.0.2"));
        assert_eq!(
            h.rejected.rejected_for("missing_service_name"),
            1,
            "missing label is counted"
        );
        assert!(!notified(&h), "a rejected update changes nothing");

        h.on_delete(&slice(json!({}), "10.0.0.1"));
        assert!(notified(&h), "deleted by name, whatever its labels");
        assert_eq!(cache.lock().unwrap().known_slices(), 0);
        h.on_synced();
        assert!(h.synced.load(Ordering::Acquire) && notified(&h));
    }

    #[test]
    fn invalid_endpoint_addresses_are_counted() {
        let cache = Arc::new(Mutex::new(EndpointSliceCache::new("n1", IpFamily::V4)));
        let mut h = SliceCacheHandler::new(cache, Arc::default());
        h.on_add(&slice(json!({"kubernetes.io/service-name": "web"}), "10.0.0.300"));
        assert_eq!(h.rejected.skipped_for("invalid_address"), 1);
        assert_eq!(h.rejected.rejected_for("missing_service_name"), 0);
    }
}
