//! [`ServiceStore`]: Service events into a shared map of [`ServiceInfo`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Service;
use slice_cache::ServiceChangeTracker;
use slice_model::{ServiceInfo, ServiceName};
use tokio::sync::Notify;

use crate::fold::EventHandler;
use crate::rejections::Rejections;
use crate::service_from_k8s;

/// The services a proxy handles, by name.
pub type Services = Arc<Mutex<BTreeMap<ServiceName, ServiceInfo>>>;

/// Keeps [`Services`] up to date from Service events and wakes the sync
/// loop on every change. Rejected services are logged and counted.
pub struct ServiceStore {
    services: Services,
    /// Notified after every change, and once synced.
    pub changed: Arc<Notify>,
    /// Set once the first complete list is in the store.
    pub synced: Arc<AtomicBool>,
    /// Objects rejected (logged, counted by reason).
    pub rejected: Arc<Rejections>,
    /// Change trackers told about every change (each proxier's pending
    /// service changes: one per IP family).
    pub trackers: Vec<Arc<Mutex<ServiceChangeTracker>>>,
}

impl ServiceStore {
    /// A store writing into `services`.
    pub fn new(services: Services) -> Self {
        Self {
            services,
            changed: Arc::new(Notify::new()),
            synced: Arc::new(AtomicBool::new(false)),
            rejected: Arc::default(),
            trackers: Vec::new(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<ServiceName, ServiceInfo>) -> T) -> T {
        let mut guard = self.services.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    fn upsert(&mut self, svc: &Service) {
        match service_from_k8s(svc) {
            Ok((info, warnings)) => {
                for w in &warnings {
                    tracing::warn!("{w}");
                }
                for t in &self.trackers {
                    t.lock().unwrap_or_else(|e| e.into_inner()).update(&info);
                }
                let changed = self.with(|m| {
                    if m.get(&info.name) == Some(&info) {
                        return false;
                    }
                    m.insert(info.name.clone(), info);
                    true
                });
                if changed {
                    self.changed.notify_one();
                }
            }
            Err(e) => self.rejected.record(e.reason(), &e),
        }
    }
}

impl EventHandler<Service> for ServiceStore {
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
        for t in &self.trackers {
            t.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
        }
        if self.with(|m| m.remove(&name).is_some()) {
            self.changed.notify_one();
        }
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
    fn services_are_stored_updated_and_removed() {
        let services: Services = Arc::default();
        let mut s = ServiceStore::new(services.clone());
        let changed = |s: &ServiceStore| s.changed.notified().now_or_never().is_some();
        s.on_add(&svc("10.96.0.1"));
        assert!(changed(&s));
        assert_eq!(services.lock().unwrap().len(), 1);
        s.on_update(&svc("10.96.0.1"), &svc("10.96.0.1"));
        assert!(!changed(&s), "same service, no wake-up");
        s.on_update(&svc("10.96.0.1"), &svc("10.96.0.2"));
        assert!(changed(&s));
        let name = ServiceName::new("ns", "web");
        assert_eq!(services.lock().unwrap()[&name].cluster_ips[0].to_string(), "10.96.0.2");
        s.on_delete(&svc("10.96.0.2"));
        assert!(changed(&s) && services.lock().unwrap().is_empty());
        let mut nameless = svc("10.96.0.3");
        nameless.metadata.name = None;
        s.on_add(&nameless);
        assert_eq!(s.rejected.total(), 1);
    }

    #[test]
    fn the_tracker_sees_every_change() {
        let tracker = Arc::new(Mutex::new(ServiceChangeTracker::new(slice_model::IpFamily::V4)));
        let mut s = ServiceStore::new(Arc::default());
        s.trackers = vec![tracker.clone()];
        s.on_add(&svc("10.96.0.1"));
        let changes = tracker.lock().unwrap().checkout();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].current[0].cluster_ip.to_string(), "10.96.0.1");
        s.on_delete(&svc("10.96.0.1"));
        let changes = tracker.lock().unwrap().checkout();
        assert!(changes[0].current.is_empty(), "deleted");
    }
}
