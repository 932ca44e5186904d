//! [`SliceCacheHandler`]: EndpointSlice events into an
//! [`EndpointSliceCache`](slice_cache::EndpointSliceCache).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use slice_cache::EndpointSliceCache;
use slice_model::{Interner, IpFamily};
use tokio::sync::Notify;

use crate::fold::EventHandler;
use crate::rejections::Rejections;
use crate::{slice_from_k8s, slice_name_of};

/// Feeds shared caches (one per IP family) from slice events, converting
/// each slice once, and wakes the sync loop when a change needs a sync.
/// Rejected slices are logged (naming the slice and the reason) and
/// counted once, never dropped silently.
///
/// A slice's `last-change-trigger-time` older than the handler is dropped,
/// as kube-proxy's endpoints change tracker drops those before its own
/// start: the first list brings every slice with the time of a change made
/// long before, and the latency from then is not this proxy's.
pub struct SliceCacheHandler {
    caches: Vec<Arc<Mutex<EndpointSliceCache>>>,
    /// Trigger times before this are not this handler's changes.
    started: SystemTime,
    interner: Interner,
    /// Notified after every change that needs a sync, and once synced.
    changed: Arc<Notify>,
    /// Set once the first complete list is in the cache.
    pub synced: Arc<AtomicBool>,
    /// Objects rejected (logged, counted by reason).
    pub rejected: Arc<Rejections>,
}

impl SliceCacheHandler {
    /// A handler for `caches` that wakes `changed` when a sync is needed.
    pub fn new(caches: Vec<Arc<Mutex<EndpointSliceCache>>>, changed: Arc<Notify>) -> Self {
        Self {
            caches,
            started: SystemTime::now(),
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

    /// Whether `f` changed any cache.
    fn each_cache(&self, mut f: impl FnMut(&mut EndpointSliceCache) -> bool) -> bool {
        self.caches
            .iter()
            .fold(false, |changed, c| f(&mut slice_model::internal::lock(c)) | changed)
    }

    /// Hands `slice` to the caches of its address type's family (every
    /// cache when the type is not a family's), as kube-proxy's
    /// dual-stack proxier hands each slice to one family's proxier: a
    /// cache keeps no record of the other family's slices. A copy goes to
    /// each but the last, which takes it.
    fn update_all(&self, slice: slice_model::EndpointSlice, family: Option<IpFamily>) -> bool {
        let ours =
            |c: &&Arc<Mutex<EndpointSliceCache>>| family.is_none_or(|f| slice_model::internal::lock(c).family() == f);
        let targets: Vec<&Arc<Mutex<EndpointSliceCache>>> = self.caches.iter().filter(ours).collect();
        let Some((last, others)) = targets.split_last() else {
            return false;
        };
        let changed = others.iter().fold(false, |changed, c| {
            slice_model::internal::lock(c).update(slice.clone()) | changed
        });
        slice_model::internal::lock(last).update(slice) | changed
    }

    fn upsert(&mut self, slice: &EndpointSlice) {
        // Nodes and slices come and go; forget names nothing uses any more
        // once in a while, so the interner stays the size of the cluster.
        self.interner.prune_if_grown();
        match slice_from_k8s(slice, &mut self.interner) {
            Ok((mut model, warnings)) => {
                model.trigger_time = model.trigger_time.filter(|t| *t > self.started);
                for w in &warnings {
                    self.rejected.skipped(w.kind.reason(), w);
                }
                let family = match slice.address_type.as_str() {
                    "IPv4" => Some(IpFamily::V4),
                    "IPv6" => Some(IpFamily::V6),
                    _ => None,
                };
                if self.update_all(model, family) {
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
                if self.each_cache(|c| c.remove(&name)) {
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
        let mut h = SliceCacheHandler::new(vec![cache.clone()], Arc::default());
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
        let mut h = SliceCacheHandler::new(vec![cache], Arc::default());
        h.on_add(&slice(json!({"kubernetes.io/service-name": "web"}), "10.0.0.300"));
        assert_eq!(h.rejected.skipped_for("invalid_address"), 1);
        assert_eq!(h.rejected.rejected_for("missing_service_name"), 0);
    }

    /// The first list's slices carry the times of changes made before the
    /// proxy started: they are not measured (kube-proxy's
    /// `trackerStartTime`); a change after the start is.
    #[test]
    fn trigger_times_from_before_the_start_are_not_measured() {
        let cache = Arc::new(Mutex::new(EndpointSliceCache::new("n1", IpFamily::V4)));
        let mut h = SliceCacheHandler::new(vec![cache.clone()], Arc::default());
        let stamped = |ip: &str, at: SystemTime| {
            let mut s = slice(json!({"kubernetes.io/service-name": "web"}), ip);
            let stamp = k8s_openapi::jiff::Timestamp::try_from(at).unwrap().to_string();
            s.metadata.annotations = Some(
                [("endpoints.kubernetes.io/last-change-trigger-time".to_owned(), stamp)]
                    .into_iter()
                    .collect(),
            );
            s
        };
        let before_start = h.started - std::time::Duration::from_secs(300);
        h.on_add(&stamped("10.0.0.1", before_start));
        let listed = cache.lock().unwrap().checkout();
        assert!(listed.iter().all(|c| c.trigger_times.is_empty()), "{listed:?}");
        let after_start = h.started + std::time::Duration::from_secs(1);
        h.on_update(&stamped("10.0.0.1", before_start), &stamped("10.0.0.2", after_start));
        let changed = cache.lock().unwrap().checkout();
        assert_eq!(changed.len(), 1);
        let got: Vec<u128> = changed[0]
            .trigger_times
            .iter()
            .map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as u128)
            .collect();
        let want = after_start.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as u128;
        assert_eq!(got, [want]);
    }

    /// Dual-stack: one handler feeds both families' caches; each slice is
    /// converted (and its problems counted) once, and each cache keeps its
    /// family's endpoints.
    #[test]
    fn one_handler_feeds_every_familys_cache_converting_once() {
        let v4 = Arc::new(Mutex::new(EndpointSliceCache::new("n1", IpFamily::V4)));
        let v6 = Arc::new(Mutex::new(EndpointSliceCache::new("n1", IpFamily::V6)));
        let mut h = SliceCacheHandler::new(vec![v4.clone(), v6.clone()], Arc::default());
        h.on_add(&slice(json!({"kubernetes.io/service-name": "web"}), "10.0.0.300"));
        assert_eq!(
            h.rejected.skipped_for("invalid_address"),
            1,
            "counted once, not per family"
        );
        h.on_add(&slice(json!({"kubernetes.io/service-name": "web"}), "10.0.0.1"));
        let v4_changes = v4.lock().unwrap().checkout();
        let v6_changes = v6.lock().unwrap().checkout();
        assert_eq!(v4_changes.len(), 1, "the IPv4 cache has web's endpoint");
        assert!(v6_changes.is_empty(), "the IPv6 cache is not told of an IPv4 slice");
        assert_eq!(
            v6.lock().unwrap().known_slices(),
            0,
            "nor keeps a record of it (memory per family follows its own slices)"
        );
        h.on_delete(&slice(json!({"kubernetes.io/service-name": "web"}), "10.0.0.1"));
        assert_eq!(v4.lock().unwrap().known_slices(), 0);
        assert_eq!(v6.lock().unwrap().known_slices(), 0);
    }
}
