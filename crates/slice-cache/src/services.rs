//! [`ServiceChangeTracker`]: Service changes with the same pending/applied
//! discipline as the slice cache.

use std::collections::HashMap;
use std::sync::Arc;

use slice_model::{IpFamily, ServiceInfo, ServiceName, ServicePortInfo};

/// One service's ports as a proxier of one family programs them, sorted by
/// port name and protocol; empty when the proxier has nothing to program.
pub type ServicePorts = Arc<[ServicePortInfo]>;

/// One service's pending changes, checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePortsChange {
    /// The service.
    pub service: ServiceName,
    /// Its ports as last checked out (empty if new).
    pub previous: ServicePorts,
    /// Its ports now (empty if gone, headless, or without an IP of the
    /// family).
    pub current: ServicePorts,
}

/// Tracks services for one IP family: updates are pending until
/// [`checkout`](Self::checkout); an update that changes nothing the proxier
/// programs returns `false` and queues nothing, and a change reverted before
/// the checkout leaves nothing to do.
#[derive(Debug, Clone)]
pub struct ServiceChangeTracker {
    family: IpFamily,
    applied: HashMap<ServiceName, ServicePorts>,
    pending: HashMap<ServiceName, ServicePorts>,
}

impl ServiceChangeTracker {
    /// A tracker for `family`.
    pub fn new(family: IpFamily) -> Self {
        Self {
            family,
            applied: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// Records an added or modified service; returns whether anything the
    /// proxier programs changed.
    pub fn update(&mut self, service: &ServiceInfo) -> bool {
        let ports: ServicePorts = service.ports_for(self.family).into();
        self.set(service.name.clone(), ports)
    }

    /// Records a deleted service.
    pub fn remove(&mut self, service: &ServiceName) -> bool {
        self.set(service.clone(), Arc::from([]))
    }

    fn set(&mut self, name: ServiceName, ports: ServicePorts) -> bool {
        let applied = self.applied.get(&name).map_or(&[][..], |p| &p[..]);
        let target = self.pending.get(&name).map_or(applied, |p| &p[..]);
        if target == &ports[..] {
            return false;
        }
        if applied == &ports[..] {
            self.pending.remove(&name);
        } else {
            self.pending.insert(name, ports);
        }
        true
    }

    /// Whether any change is pending.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// How many services have pending changes.
    pub fn pending_services(&self) -> usize {
        self.pending.len()
    }

    /// How many services have ports applied.
    pub fn applied_services(&self) -> usize {
        self.applied.len()
    }

    /// Applies the pending changes, returning them sorted by service.
    #[must_use = "checked-out changes are no longer pending: dropping them loses them"]
    pub fn checkout(&mut self) -> Vec<ServicePortsChange> {
        let mut changes: Vec<ServicePortsChange> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(service, current)| {
                let previous = if current.is_empty() {
                    self.applied.remove(&service)
                } else {
                    self.applied.insert(service.clone(), current.clone())
                };
                ServicePortsChange {
                    service,
                    previous: previous.unwrap_or_else(|| Arc::from([])),
                    current,
                }
            })
            .collect();
        changes.sort_by(|a, b| a.service.cmp(&b.service));
        changes
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use slice_model::{Protocol, ServicePort};

    use super::*;

    fn svc(name: &str, ip: &str, ports: &[(&str, Protocol, u16)]) -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", name));
        s.cluster_ips = vec![ip.parse().unwrap()];
        s.ports = ports
            .iter()
            .map(|(n, p, port)| ServicePort {
                name: (*n).into(),
                protocol: *p,
                port: NonZeroU16::new(*port).unwrap(),
                node_port: None,
                app_protocol: None,
            })
            .collect();
        s
    }

    #[test]
    fn pending_until_checkout_and_no_op_updates_queue_nothing() {
        let mut t = ServiceChangeTracker::new(IpFamily::V4);
        let web = svc("web", "10.96.0.1", &[("http", Protocol::Tcp, 80)]);
        assert!(t.update(&web));
        assert!(!t.update(&web), "same as pending");
        let c = t.checkout();
        assert_eq!(c.len(), 1);
        assert!(c[0].previous.is_empty() && c[0].current.len() == 1);
        assert!(!t.update(&web), "same as applied");
        assert!(!t.has_pending());
    }

    #[test]
    fn changes_that_do_not_matter_to_the_family_are_no_changes() {
        let mut t = ServiceChangeTracker::new(IpFamily::V6);
        assert!(
            !t.update(&svc("web", "10.96.0.1", &[("http", Protocol::Tcp, 80)])),
            "no IPv6 cluster IP"
        );
        assert!(!t.remove(&ServiceName::new("ns", "web")), "never applied");
        let mut headless = svc("hl", "fd00::1", &[("http", Protocol::Tcp, 80)]);
        headless.headless = true;
        assert!(!t.update(&headless));
    }

    #[test]
    fn revert_before_checkout_and_delete() {
        let mut t = ServiceChangeTracker::new(IpFamily::V4);
        let a = svc("web", "10.96.0.1", &[("http", Protocol::Tcp, 80)]);
        let b = svc("web", "10.96.0.1", &[("http", Protocol::Tcp, 8080)]);
        t.update(&a);
        let _ = t.checkout();
        assert!(t.update(&b));
        assert!(t.update(&a));
        assert!(!t.has_pending(), "back to what is applied");
        assert!(t.remove(&a.name));
        let c = t.checkout();
        assert!(c[0].current.is_empty() && c[0].previous.len() == 1);
        assert_eq!(t.applied_services(), 0, "nothing kept for a deleted service");
        assert!(t.update(&a) && t.remove(&a.name));
        assert!(!t.has_pending(), "added and deleted before a sync");
    }
}
