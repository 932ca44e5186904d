//! [`Engine`]: a proxier's change trackers (slices and services, shared
//! with whatever feeds them) and its maps, with one update step that
//! applies everything pending and says which services changed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::{EndpointsMap, ServicesMap, ServicesUpdateResult, UpdateResult};
use slice_cache::{EndpointSliceCache, ServiceChangeTracker};
use slice_model::internal::lock;
use slice_model::{EndpointSlice, IpFamily, ServiceInfo, ServiceName, SliceName};

/// The writing side of an [`Engine`] (as kube-runtime's reflector hands
/// out a writer beside its store): the cache and tracker its sources feed,
/// shared with the engine, whose [`Engine::update`] applies what they hold.
/// Clone it for each source.
#[derive(Clone)]
pub struct EngineFeed {
    /// EndpointSlices, pending until [`Engine::update`].
    pub slices: Arc<Mutex<EndpointSliceCache>>,
    /// Services, pending until [`Engine::update`].
    pub service_changes: Arc<Mutex<ServiceChangeTracker>>,
}

/// Pending changes (fed through its [`EngineFeed`]) and applied state (the
/// maps) for one IP family.
pub struct Engine {
    feed: EngineFeed,
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

impl Engine {
    /// An empty engine for a proxier on `node` serving `family`.
    pub fn new(node: &str, family: IpFamily) -> Self {
        Self {
            feed: EngineFeed {
                slices: Arc::new(Mutex::new(EndpointSliceCache::new(node, family))),
                service_changes: Arc::new(Mutex::new(ServiceChangeTracker::new(family))),
            },
            services: ServicesMap::new(),
            endpoints: EndpointsMap::new(),
        }
    }

    /// The handle its sources write through.
    pub fn feed(&self) -> EngineFeed {
        self.feed.clone()
    }

    /// Records an added or changed slice.
    pub fn update_slice(&self, slice: EndpointSlice) -> bool {
        lock(&self.feed.slices).update(slice)
    }

    /// Records a deleted slice.
    pub fn remove_slice(&self, name: &SliceName) -> bool {
        lock(&self.feed.slices).remove(name)
    }

    /// Records an added or changed service.
    pub fn update_service(&self, service: &ServiceInfo) -> bool {
        lock(&self.feed.service_changes).update(service)
    }

    /// Records a deleted service.
    pub fn remove_service(&self, name: &ServiceName) -> bool {
        lock(&self.feed.service_changes).remove(name)
    }

    /// The family this engine serves.
    pub fn family(&self) -> IpFamily {
        lock(&self.feed.slices).family()
    }

    /// Changes waiting for [`Engine::update`], counted in services:
    /// (endpoint changes, service changes).
    pub fn pending(&self) -> (usize, usize) {
        (
            lock(&self.feed.slices).pending_services(),
            lock(&self.feed.service_changes).pending_services(),
        )
    }

    /// Applies everything pending.
    pub fn update(&mut self) -> EngineUpdate {
        let services = self.services.update(&mut lock(&self.feed.service_changes));
        let endpoints = self.endpoints.update(&mut lock(&self.feed.slices));
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
