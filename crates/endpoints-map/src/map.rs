//! [`EndpointsMap`] and the result of one update.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use slice_cache::{EndpointSliceCache, PortEndpoints, ServiceChange, ServiceEndpoints};
use slice_model::internal::FastHash;
use slice_model::{BaseEndpointInfo, ServiceName, ServicePortName};

use crate::stale::detect_stale;

/// A service port and one of its endpoints: a stale UDP endpoint whose
/// conntrack entries should be cleared.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ServiceEndpoint {
    /// The service port.
    pub service_port: ServicePortName,
    /// The endpoint's address and port.
    pub endpoint: SocketAddr,
}

impl fmt::Display for ServiceEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.service_port, self.endpoint)
    }
}

/// What one [`EndpointsMap::update`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "the stale endpoints and changed services are what the proxier must act on"]
#[non_exhaustive]
pub struct UpdateResult {
    /// UDP endpoints that are gone, or whose locality flipped: their
    /// conntrack entries would keep sending traffic to the wrong place.
    /// Every endpoint counts, whether it was ready, serving or neither
    /// (a not-serving endpoint can still hold entries from when it served).
    pub stale_endpoints: Vec<ServiceEndpoint>,
    /// UDP service ports that went from no endpoints to some: conntrack
    /// entries may black-hole their traffic.
    pub stale_service_names: Vec<ServicePortName>,
    /// Services whose endpoints differ from before, sorted.
    pub changed_services: Vec<ServiceName>,
    /// The new count of local ready endpoint IPs of each service whose count
    /// changed (0: it has none any more). The full view is
    /// [`EndpointsMap::local_ready_endpoints`].
    pub local_ready_changes: Vec<(ServiceName, usize)>,
    /// `last-change-trigger-time`s of the slice changes applied, per service:
    /// the start of each network programming latency measurement.
    pub last_change_trigger_times: BTreeMap<ServiceName, Vec<SystemTime>>,
}

/// The proxier's view of every service port's endpoints.
///
/// Updating costs time in proportion to the services that changed, never to
/// the size of the map: lookups are hashed, and local-ready counts are kept
/// per service and only recounted for services that changed. Iteration is
/// sorted (it costs O(n log n), like any full walk that must be ordered).
#[derive(Clone, Debug, Default)]
pub struct EndpointsMap {
    services: HashMap<ServiceName, Arc<ServiceEndpoints>, FastHash>,
    local_ready: HashMap<ServiceName, usize, FastHash>,
    port_count: usize,
}

/// Every service port with endpoints, in the order of
/// [`EndpointsMap::ports`]: `[{"service_port": …, "endpoints": […]}, …]`.
#[cfg(feature = "serde")]
impl serde::Serialize for EndpointsMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Port<'a> {
            service_port: ServicePortName,
            endpoints: &'a [BaseEndpointInfo],
        }
        serializer.collect_seq(self.ports().map(|(service_port, endpoints)| Port {
            service_port,
            endpoints,
        }))
    }
}

impl EndpointsMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks out the cache's pending changes and applies them, each as
    /// soon as the cache has merged it.
    pub fn update(&mut self, cache: &mut EndpointSliceCache) -> UpdateResult {
        let mut update = Update::default();
        cache.checkout_each(|change| self.apply_one(change, &mut update));
        update.finish()
    }

    /// Applies changes checked out of an [`EndpointSliceCache`].
    pub fn apply(&mut self, changes: Vec<ServiceChange>) -> UpdateResult {
        let mut update = Update::default();
        for change in changes {
            self.apply_one(change, &mut update);
        }
        update.finish()
    }

    fn apply_one(&mut self, change: ServiceChange, update: &mut Update) {
        let ServiceChange {
            service,
            previous,
            current,
            trigger_times,
        } = change;
        let result = &mut update.result;
        if !trigger_times.is_empty() {
            update.trigger_times.push((service.clone(), trigger_times));
        }
        if Arc::ptr_eq(&previous, &current) || previous == current {
            return;
        }
        detect_stale(&service, &previous, &current, result);

        let count = current.local_ready_ip_count();
        let old_count = if count > 0 {
            self.local_ready.insert(service.clone(), count)
        } else {
            self.local_ready.remove(&service)
        };
        if old_count.unwrap_or(0) != count {
            result.local_ready_changes.push((service.clone(), count));
        }

        let old_ports = if current.is_empty() {
            self.services.remove(&service)
        } else {
            self.services.insert(service.clone(), current.clone())
        };
        self.port_count -= old_ports.map_or(0, |p| p.ports().len());
        self.port_count += current.ports().len();
        result.changed_services.push(service);
    }

    /// The endpoints of a service port, if it has any.
    pub fn get(&self, port: &ServicePortName) -> Option<&[BaseEndpointInfo]> {
        self.services
            .get(&port.service)?
            .port(&port.port, port.protocol)
            .map(|p| &p.endpoints[..])
    }

    /// One service's endpoints, if it has any.
    pub fn service(&self, service: &ServiceName) -> Option<&ServiceEndpoints> {
        self.services.get(service).map(|s| &**s)
    }

    /// Every service with endpoints, sorted by namespace and name.
    pub fn services(&self) -> impl Iterator<Item = (&ServiceName, &ServiceEndpoints)> {
        let mut all: Vec<(&ServiceName, &ServiceEndpoints)> = self.services.iter().map(|(n, s)| (n, &**s)).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// Every service port with endpoints, sorted by namespace, name, port
    /// name and protocol.
    pub fn iter(&self) -> impl Iterator<Item = (&ServiceName, &PortEndpoints)> {
        self.services().flat_map(|(n, s)| s.ports().iter().map(move |p| (n, p)))
    }

    /// Every service port with endpoints, by its full name, in the order
    /// of [`iter`](Self::iter): the lookup most users want.
    pub fn ports(&self) -> impl Iterator<Item = (ServicePortName, &[BaseEndpointInfo])> {
        self.iter()
            .map(|(service, port)| (port.port_name(service), &port.endpoints[..]))
    }

    /// The number of service ports with endpoints.
    pub fn len(&self) -> usize {
        self.port_count
    }

    /// Whether no service port has endpoints.
    pub fn is_empty(&self) -> bool {
        self.port_count == 0
    }

    /// For each service that has at least one ready endpoint on this node,
    /// the number of distinct IPs of those endpoints (what its health-check
    /// node port reports), sorted by service. Services with none are left
    /// out.
    pub fn local_ready_endpoints(&self) -> Vec<(&ServiceName, usize)> {
        let mut all: Vec<(&ServiceName, usize)> = self.local_ready.iter().map(|(n, c)| (n, *c)).collect();
        all.sort_unstable();
        all
    }

    /// The number of distinct IPs of a service's ready, local endpoints.
    pub fn local_ready_count(&self, service: &ServiceName) -> usize {
        self.local_ready.get(service).copied().unwrap_or(0)
    }

    /// The service port name of a port of `service` (also
    /// [`PortEndpoints::port_name`]).
    pub fn port_name(service: &ServiceName, port: &PortEndpoints) -> ServicePortName {
        port.port_name(service)
    }
}

/// An [`UpdateResult`] being gathered, one change at a time.
#[derive(Default)]
struct Update {
    result: UpdateResult,
    trigger_times: Vec<(ServiceName, Vec<SystemTime>)>,
}

impl Update {
    fn finish(mut self) -> UpdateResult {
        self.result.changed_services.sort_unstable();
        self.result.last_change_trigger_times = by_service(self.trigger_times);
        self.result
    }
}

/// Groups trigger times by service, keeping each service's in the order
/// given. Checkouts come sorted by service, each service once, so this is
/// a linear pass and a bulk build, where inserting one by one searched the
/// tree per service.
fn by_service(mut times: Vec<(ServiceName, Vec<SystemTime>)>) -> BTreeMap<ServiceName, Vec<SystemTime>> {
    times.sort_by(|a, b| a.0.cmp(&b.0));
    times.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            earlier.1.append(&mut later.1);
        }
        same
    });
    times.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn trigger_times_group_by_service_in_the_order_given() {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let svc = |n| ServiceName::new("ns", n);
        let grouped = by_service(vec![
            (svc("b"), vec![t(1)]),
            (svc("a"), vec![t(2)]),
            (svc("b"), vec![t(3), t(0)]),
        ]);
        let got: Vec<(String, Vec<SystemTime>)> = grouped.into_iter().map(|(s, v)| (s.to_string(), v)).collect();
        assert_eq!(
            got,
            [
                ("ns/a".to_string(), vec![t(2)]),
                ("ns/b".to_string(), vec![t(1), t(3), t(0)])
            ]
        );
    }
}
