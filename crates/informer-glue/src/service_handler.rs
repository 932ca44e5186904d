//! [`ServiceHandler`]: Service events into each proxier's
//! [`ServiceChangeTracker`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Service;
use slice_cache::ServiceChangeTracker;
use slice_model::ServiceName;
use tokio::sync::Notify;

use crate::fold::EventHandler;
use crate::rejections::Rejections;
use crate::service_from_k8s;

/// Converts Service events and hands them to the change trackers (one per
/// IP family), waking the sync loop when one of them changed. The trackers
/// are the only copy of the services: this handler keeps none. Rejected
/// services are logged and counted.
pub struct ServiceHandler {
    /// Notified after every change a tracker cares about, and once synced.
    changed: Arc<Notify>,
    /// Set once the first complete list has been handed over.
    pub synced: Arc<AtomicBool>,
    /// Objects rejected (logged, counted by reason).
    pub rejected: Arc<Rejections>,
    /// Change trackers told about every change (each proxier's pending
    /// service changes: one per IP family).
    pub trackers: Vec<Arc<Mutex<ServiceChangeTracker>>>,
}

impl ServiceHandler {
    /// A handler feeding `trackers` that wakes `changed` when one of them
    /// changed.
    pub fn new(trackers: Vec<Arc<Mutex<ServiceChangeTracker>>>, changed: Arc<Notify>) -> Self {
        Self {
            changed,
            synced: Arc::new(AtomicBool::new(false)),
            rejected: Arc::default(),
            trackers,
        }
    }

    /// Counts rejected services and skipped fields into `rejected` (the
    /// exported counters) instead of private ones.
    #[must_use]
    pub fn counting_into(mut self, rejected: Arc<Rejections>) -> Self {
        self.rejected = rejected;
        self
    }

    /// Applies `f` to every tracker; wakes the sync loop if any changed.
    fn each(&self, f: impl Fn(&mut ServiceChangeTracker) -> bool) {
        let mut changed = false;
        for t in &self.trackers {
            changed |= f(&mut slice_model::internal::lock(t));
        }
        if changed {
            self.changed.notify_one();
        }
    }

    fn upsert(&mut self, svc: &Service) {
        match service_from_k8s(svc) {
            Ok((info, warnings)) => {
                for w in &warnings {
                    self.rejected.skipped(w.reason, w);
                }
                self.each(|t| t.update(&info));
            }
            Err(e) => self.rejected.record(e.reason(), &e),
        }
    }
}

impl EventHandler<Service> for ServiceHandler {
    fn on_add(&mut self, obj: &Service) {
        self.upsert(obj);
    }

    fn on_update(&mut self, _old: &Service, new: &Service) {
        self.upsert(new);
    }

    fn on_delete(&mut self, obj: &Service) {
        let (Some(ns), Some(name)) = (obj.metadata.namespace.as_deref(), obj.metadata.name.as_deref()) else {
            return;
        };
        let name = ServiceName::new(ns, name);
        self.each(|t| t.remove(&name));
    }

    fn on_synced(&mut self) {
        self.synced.store(true, Ordering::Release);
        self.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use serde_json::json;

    use super::*;

    fn svc(ip: &str) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": ip},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]},
        }))
        .unwrap()
    }

    #[test]
    fn only_changes_a_tracker_cares_about_wake_the_sync_loop() {
        let tracker = Arc::new(Mutex::new(ServiceChangeTracker::new(slice_model::IpFamily::V4)));
        let mut s = ServiceHandler::new(vec![tracker.clone()], Arc::default());
        let changed = |s: &ServiceHandler| s.changed.notified().now_or_never().is_some();
        s.on_add(&svc("10.96.0.1"));
        assert!(changed(&s));
        s.on_update(&svc("10.96.0.1"), &svc("10.96.0.1"));
        assert!(!changed(&s), "same service, no wake-up");
        s.on_update(&svc("10.96.0.1"), &svc("10.96.0.2"));
        assert!(changed(&s));
        s.on_add(&svc("fd00::1"));
        assert!(changed(&s), "the IPv4 service is gone from the IPv4 tracker");
        s.on_update(&svc("fd00::1"), &svc("fd00::2"));
        assert!(!changed(&s), "an IPv6-only change means nothing to the IPv4 tracker");
        s.on_delete(&svc("fd00::2"));
        assert!(!changed(&s));
        assert!(
            tracker.lock().unwrap().checkout().is_empty(),
            "web's IPv4 ports came and went before any sync: nothing to do"
        );
        let mut nameless = svc("10.96.0.3");
        nameless.metadata.name = None;
        s.on_add(&nameless);
        assert_eq!(s.rejected.rejected_for("missing_name"), 1);
        assert!(!changed(&s));
        s.on_add(&svc("10.96.0.300"));
        assert_eq!(
            s.rejected.skipped_for("invalid_address"),
            1,
            "a bad cluster IP is counted"
        );
    }

    #[test]
    fn the_tracker_sees_every_change() {
        let tracker = Arc::new(Mutex::new(ServiceChangeTracker::new(slice_model::IpFamily::V4)));
        let mut s = ServiceHandler::new(vec![tracker.clone()], Arc::default());
        s.on_add(&svc("10.96.0.1"));
        let changes = tracker.lock().unwrap().checkout();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].current[0].cluster_ip.to_string(), "10.96.0.1");
        s.on_delete(&svc("10.96.0.1"));
        let changes = tracker.lock().unwrap().checkout();
        assert!(changes[0].current.is_empty(), "deleted");
    }
}
