//! [`ServicesMap`]: every service port a proxier programs.

use std::collections::HashMap;

use slice_cache::{ServiceChangeTracker, ServicePorts, ServicePortsChange};
use slice_model::{Protocol, ServiceName, ServicePortInfo, ServicePortName};

/// What one [`ServicesMap::update`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "the changed services and deleted UDP ports are what the proxier must act on"]
#[non_exhaustive]
pub struct ServicesUpdateResult {
    /// Services whose ports changed, sorted.
    pub updated_services: Vec<ServiceName>,
    /// UDP ports that went away (a deleted service's, or one its service
    /// dropped), as they were: the conntrack entries to their frontends
    /// should be cleared.
    pub deleted_udp_ports: Vec<ServicePortInfo>,
}

/// The proxier's view of every service port. Updates cost time in
/// proportion to the services that changed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServicesMap {
    services: HashMap<ServiceName, ServicePorts>,
    port_count: usize,
}

impl ServicesMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks out the tracker's pending changes and applies them.
    pub fn update(&mut self, tracker: &mut ServiceChangeTracker) -> ServicesUpdateResult {
        self.apply(tracker.checkout())
    }

    /// Applies checked-out changes.
    pub fn apply(&mut self, changes: Vec<ServicePortsChange>) -> ServicesUpdateResult {
        let mut result = ServicesUpdateResult::default();
        for ServicePortsChange {
            service,
            previous,
            current,
        } in changes
        {
            for old in previous.iter() {
                let kept = current.iter().any(|p| p.name == old.name);
                if !kept && old.name.protocol == Protocol::Udp {
                    result.deleted_udp_ports.push(old.clone());
                }
            }
            let replaced = if current.is_empty() {
                self.services.remove(&service)
            } else {
                self.services.insert(service.clone(), current.clone())
            };
            self.port_count -= replaced.map_or(0, |p| p.len());
            self.port_count += current.len();
            result.updated_services.push(service);
        }
        result.updated_services.sort_unstable();
        result
    }

    /// One service port.
    pub fn get(&self, name: &ServicePortName) -> Option<&ServicePortInfo> {
        self.services.get(&name.service)?.iter().find(|p| p.name == *name)
    }

    /// One service's ports.
    pub fn service(&self, name: &ServiceName) -> Option<&[ServicePortInfo]> {
        self.services.get(name).map(|p| &p[..])
    }

    /// Every service's name, in no order.
    pub fn names(&self) -> impl Iterator<Item = &ServiceName> {
        self.services.keys()
    }

    /// Every service port, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &ServicePortInfo> {
        let mut all: Vec<(&ServiceName, &ServicePorts)> = self.services.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter().flat_map(|(_, p)| p.iter())
    }

    /// The number of service ports.
    pub fn len(&self) -> usize {
        self.port_count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.port_count == 0
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use slice_model::{IpFamily, ServiceInfo, ServicePort};

    use super::*;

    fn svc(name: &str, ports: &[(&str, Protocol)]) -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", name));
        s.cluster_ips = vec!["10.96.0.10".parse().unwrap()];
        s.ports = ports
            .iter()
            .map(|(n, p)| ServicePort {
                name: (*n).into(),
                protocol: *p,
                port: NonZeroU16::new(53).unwrap(),
                node_port: None,
                app_protocol: None,
            })
            .collect();
        s
    }

    #[test]
    fn udp_ports_that_go_away_report_their_cluster_ip() {
        let mut t = ServiceChangeTracker::new(IpFamily::V4);
        let mut m = ServicesMap::new();
        t.update(&svc("dns", &[("dns", Protocol::Udp), ("dns-tcp", Protocol::Tcp)]));
        let r = m.update(&mut t);
        assert_eq!(r.updated_services, [ServiceName::new("ns", "dns")]);
        assert!(r.deleted_udp_ports.is_empty());
        assert_eq!(m.len(), 2);
        let udp = ServicePortName::new(ServiceName::new("ns", "dns"), "dns", Protocol::Udp);
        assert_eq!(m.get(&udp).map(|p| p.port.get()), Some(53));

        t.update(&svc("dns", &[("dns-tcp", Protocol::Tcp)]));
        let r = m.update(&mut t);
        let gone: Vec<std::net::IpAddr> = r.deleted_udp_ports.iter().map(|p| p.cluster_ip).collect();
        assert_eq!(gone, ["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]);
        assert_eq!(m.len(), 1);
        assert!(m.get(&udp).is_none());

        t.remove(&ServiceName::new("ns", "dns"));
        let r = m.update(&mut t);
        assert!(r.deleted_udp_ports.is_empty(), "TCP only");
        assert!(m.is_empty() && m.service(&ServiceName::new("ns", "dns")).is_none());
    }

    #[test]
    fn iteration_is_sorted() {
        let mut t = ServiceChangeTracker::new(IpFamily::V4);
        let mut m = ServicesMap::new();
        for n in ["c", "a", "b"] {
            t.update(&svc(n, &[("p", Protocol::Tcp)]));
        }
        let _ = m.update(&mut t);
        let names: Vec<String> = m.iter().map(|p| p.name.to_string()).collect();
        assert_eq!(names, ["ns/a:p/TCP", "ns/b:p/TCP", "ns/c:p/TCP"]);
    }
}
