//! [`Engine`]: a proxier's change trackers (slices and services, shared
//! with whatever feeds them) and its maps, with one update step that
//! applies everything pending and says which services changed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{EndpointsMap, ServicesMap, ServicesUpdateResult, UpdateResult};
use slice_cache::{EndpointSliceCache, ServiceChangeTracker};
use slice_model::{EndpointSlice, IpFamily, ServiceInfo, ServiceName, SliceName};

/// Pending changes (the cache and tracker, shared with the watch handlers)
/// and applied state (the maps) for one IP family.
pub struct Engine {
    /// EndpointSlices, pending until [`Engine::update`].
    pub slices: Arc<Mutex<EndpointSliceCache>>,
    /// Services, pending until [`Engine::update`].
    pub service_changes: Arc<Mutex<ServiceChangeTracker>>,
    /// Applied service ports.
    pub services: ServicesMap,
    /// Applied endpoints.
    pub endpoints: EndpointsMap,
}

/// What one [`Engine::update`] changed.
#[derive(Debug, Default)]
pub struct EngineUpdate {
    /// Services whose ports or endpoints changed.
    pub changed: BTreeSet<ServiceName>,
    /// The endpoints map's report (stale UDP entries, local counts, …).
    pub endpoints: UpdateResult,
    /// The services map's report.
    pub services: ServicesUpdateResult,
}

/// Locks, ignoring poisoning: the data is plain state that a panicking
/// holder cannot leave half-written in a way the next update would trip on.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Engine {
    /// An empty engine for a proxier on `node` serving `family`.
    pub fn new(node: &str, family: IpFamily) -> Self {
        Self {
            slices: Arc::new(Mutex::new(EndpointSliceCache::new(node, family))),
            service_changes: Arc::new(Mutex::new(ServiceChangeTracker::new(family))),
            services: ServicesMap::new(),
            endpoints: EndpointsMap::new(),
        }
    }

    /// Records an added or changed slice.
    pub fn update_slice(&self, slice: EndpointSlice) -> bool {
        lock(&self.slices).update(slice)
    }

    /// Records a deleted slice.
    pub fn remove_slice(&self, name: &SliceName) -> bool {
        lock(&self.slices).remove(name)
    }

    /// Records an added or changed service.
    pub fn update_service(&self, service: &ServiceInfo) -> bool {
        lock(&self.service_changes).update(service)
    }

    /// Records a deleted service.
    pub fn remove_service(&self, name: &ServiceName) -> bool {
        lock(&self.service_changes).remove(name)
    }

    /// The family this engine serves.
    pub fn family(&self) -> IpFamily {
        lock(&self.slices).family()
    }

    /// Changes waiting for [`Engine::update`], counted in services:
    /// (endpoint changes, service changes).
    pub fn pending(&self) -> (usize, usize) {
        (
            lock(&self.slices).pending_services(),
            lock(&self.service_changes).pending_services(),
        )
    }

    /// Applies everything pending.
    pub fn update(&mut self) -> EngineUpdate {
        let services = self.services.update(&mut lock(&self.service_changes));
        let endpoints = self.endpoints.update(&mut lock(&self.slices));
        let changed = services
            .updated_services
            .iter()
            .chain(&endpoints.changed_services)
            .cloned()
            .collect();
        EngineUpdate {
            changed,
            endpoints,
            services,
        }
    }
}
