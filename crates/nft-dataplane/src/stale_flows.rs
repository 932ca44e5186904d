//! Which UDP conntrack entries a sync leaves wrong, as kube-proxy 1.36 and
//! later decide it (its conntrack reconciler); the deleting itself is the
//! Linux side's job.
//!
//! UDP has no connection to end, so a conntrack entry keeps sending a
//! client's datagrams where the rules sent its first one. After a sync, for
//! every UDP service port the sync changed, an entry sent to one of its
//! frontends (a cluster, external or load-balancer IP and the port, or the
//! node port on any address) is deleted unless it was DNATed to one of the
//! port's *serving* endpoints. So:
//!
//! - entries DNATed to an endpoint that went, or stopped serving (still
//!   listed, `serving: false`), go: the flow's next datagram picks a
//!   serving endpoint;
//! - entries made while the port had no endpoint (not DNATed) go;
//! - a port with no serving endpoint loses every entry (the next datagram
//!   meets the reject rule, as kube-proxy 1.37 does);
//! - entries DNATed to a serving endpoint stay, terminating ones included:
//!   a restart, or a change to the other endpoints, moves no flow, and the
//!   entries the new rules have just made are not deleted.
//!
//! A UDP port that went away (its service deleted, or the port dropped)
//! loses every entry to its frontends, as in kube-proxy 1.38. The cleanup must
//! run only after the rules that replace the entries are in place (a
//! successful apply), never before.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use endpoints_map::{EndpointsMap, EngineUpdate, ServicesMap};
use slice_model::{Endpoint, Protocol, ServicePortInfo};

/// The endpoint addresses whose entries are kept.
pub type Serving = Arc<BTreeSet<IpAddr>>;

/// A service frontend: an address and a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frontend {
    /// Cluster, external or load-balancer IP.
    pub addr: IpAddr,
    /// The service port.
    pub port: u16,
}

/// The conntrack entries one or more syncs leave wrong: see the module
/// docs. A later sync's view of a frontend replaces an earlier one's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Entries to these frontends not DNATed to one of their serving
    /// endpoints.
    pub frontends: BTreeMap<Frontend, Serving>,
    /// Entries to these node ports (on any address) not DNATed to one of
    /// their serving endpoints.
    pub node_ports: BTreeMap<u16, Serving>,
}

impl Cleanup {
    /// Whether there is nothing to delete.
    pub fn is_empty(&self) -> bool {
        self.frontends.is_empty() && self.node_ports.is_empty()
    }

    /// How many frontends and node ports it names.
    pub fn len(&self) -> usize {
        self.frontends.len() + self.node_ports.len()
    }

    /// Adds a later sync's cleanup: its view of a frontend wins.
    pub fn merge(&mut self, later: Cleanup) {
        self.frontends.extend(later.frontends);
        self.node_ports.extend(later.node_ports);
    }

    /// What of it concerns a table that serves only these frontend
    /// addresses and no node port (a multus pod's, by cluster IP).
    pub fn only_addresses(&self, keep: impl Fn(&IpAddr) -> bool) -> Cleanup {
        Cleanup {
            frontends: self
                .frontends
                .iter()
                .filter(|(f, _)| keep(&f.addr))
                .map(|(f, s)| (*f, s.clone()))
                .collect(),
            node_ports: BTreeMap::new(),
        }
    }

    /// Whether the entry sent to `dst:dport` whose reply comes from
    /// `reply_src` (its DNAT target, or `dst` itself when not DNATed) is
    /// one to delete.
    pub fn deletes(&self, dst: IpAddr, dport: u16, reply_src: IpAddr) -> bool {
        let not_serving = |s: &Serving| !s.contains(&reply_src);
        let front = Frontend { addr: dst, port: dport };
        self.frontends.get(&front).is_some_and(not_serving) || self.node_ports.get(&dport).is_some_and(not_serving)
    }
}

/// The entries one engine update's changes leave wrong: `update` is what
/// the engine's update reported, `services` and `endpoints` the maps after
/// it.
pub fn plan(update: &EngineUpdate, services: &ServicesMap, endpoints: &EndpointsMap) -> Cleanup {
    let mut cleanup = Cleanup::default();
    // First the ports that went: a port that took over one of their
    // frontends in the same update has the last word.
    let nothing: Serving = Arc::default();
    for p in &update.services.deleted_udp_ports {
        cleanup.add(p, &nothing);
    }
    for name in &update.changed {
        for p in services.service(name).unwrap_or(&[]) {
            if p.name.protocol != Protocol::Udp {
                continue;
            }
            let serving: BTreeSet<IpAddr> = endpoints
                .get(&p.name)
                .unwrap_or(&[])
                .iter()
                .filter(|e| e.is_serving())
                .map(|e| e.addr.ip())
                .collect();
            cleanup.add(p, &Arc::new(serving));
        }
    }
    cleanup
}

impl Cleanup {
    /// Every frontend of `port` (its cluster, external and load-balancer
    /// IPs, its node port), keeping the entries of `serving`.
    fn add(&mut self, port: &ServicePortInfo, serving: &Serving) {
        let number = port.port.get();
        for addr in std::iter::once(&port.cluster_ip)
            .chain(&port.external_ips)
            .chain(&port.load_balancer_ips)
        {
            self.frontends.insert(
                Frontend {
                    addr: *addr,
                    port: number,
                },
                serving.clone(),
            );
        }
        if let Some(np) = port.node_port {
            self.node_ports.insert(np.get(), serving.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use slice_model::{
        Conditions, EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType,
        SliceEndpoint,
    };

    use super::*;
    use endpoints_map::Engine;

    fn dns(node_port: bool) -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", "dns"));
        s.cluster_ips = vec!["10.96.0.10".parse().unwrap()];
        s.external_ips = vec!["192.0.2.1".parse().unwrap()];
        if node_port {
            s.service_type = ServiceType::NodePort;
        }
        s.ports = vec![ServicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: NonZeroU16::new(53).unwrap(),
            node_port: NonZeroU16::new(30053),
            app_protocol: None,
        }];
        s
    }

    fn slice(ips: &[&str]) -> EndpointSlice {
        let mut s = EndpointSlice::new("ns", "dns-1", "dns")
            .unwrap()
            .with_port("dns", Protocol::Udp, 53);
        for ip in ips {
            s = s.with_endpoint(SliceEndpoint::new(ip.parse().unwrap()));
        }
        s
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn serving(ips: &[&str]) -> Serving {
        Arc::new(ips.iter().map(|i| ip(i)).collect())
    }

    /// The cleanup of one update, read as the kernel's entries would be:
    /// which of these (destination, port, reply source) it deletes.
    fn deleted(c: &Cleanup, entries: &[(&str, u16, &str)]) -> Vec<bool> {
        entries.iter().map(|(d, p, r)| c.deletes(ip(d), *p, ip(r))).collect()
    }

    #[test]
    fn every_frontend_keeps_the_entries_of_its_serving_endpoints_only() {
        let mut e = Engine::new("node-1", IpFamily::V4);
        e.update_service(&dns(true));
        e.update();
        // First endpoint: entries made without DNAT go, the fresh ones the
        // new rules made stay.
        e.update_slice(slice(&["10.1.0.1"]));
        let c = plan(&e.update(), &e.services, &e.endpoints);
        let one = serving(&["10.1.0.1"]);
        assert_eq!(
            c.frontends.keys().map(|f| f.addr.to_string()).collect::<Vec<_>>(),
            ["10.96.0.10", "192.0.2.1"]
        );
        assert!(c.frontends.values().all(|s| *s == one));
        assert_eq!(c.node_ports.get(&30053), Some(&one));
        let entries = [
            ("10.96.0.10", 53, "10.96.0.10"),        // made while there was no endpoint
            ("10.96.0.10", 53, "10.1.0.1"),          // made by the new rules
            ("192.0.2.1", 53, "192.0.2.1"),          // an external IP, not DNATed
            ("198.51.100.7", 30053, "198.51.100.7"), // the node port, not DNATed
            ("198.51.100.7", 30053, "10.1.0.1"),     // the node port, DNATed
            ("10.96.0.10", 54, "10.96.0.10"),        // another port
        ];
        assert_eq!(deleted(&c, &entries), [true, false, true, true, false, false]);

        // A second endpoint comes: nothing of the first moves (a restart
        // is the same: every service changed, every serving flow kept).
        e.update_slice(slice(&["10.1.0.1", "10.1.0.2"]));
        let c = plan(&e.update(), &e.services, &e.endpoints);
        assert_eq!(deleted(&c, &entries[..2]), [true, false]);

        // The first stops serving, still listed: its entries go.
        let mut s = slice(&["10.1.0.2"]);
        s = s.with_endpoint(SliceEndpoint::new(ip("10.1.0.1")).with_conditions(Conditions::from_api(
            Some(false),
            Some(false),
            None,
        )));
        e.update_slice(s);
        let c = plan(&e.update(), &e.services, &e.endpoints);
        assert_eq!(
            deleted(&c, &[("10.96.0.10", 53, "10.1.0.1"), ("10.96.0.10", 53, "10.1.0.2")]),
            [true, false]
        );

        // Terminating but serving: kept.
        let mut s = slice(&["10.1.0.2"]);
        s = s.with_endpoint(SliceEndpoint::new(ip("10.1.0.1")).with_conditions(Conditions::from_api(
            Some(false),
            Some(true),
            Some(true),
        )));
        e.update_slice(s);
        let c = plan(&e.update(), &e.services, &e.endpoints);
        assert_eq!(deleted(&c, &[("10.96.0.10", 53, "10.1.0.1")]), [false]);

        // No endpoint left: every entry to its frontends goes.
        e.update_slice(slice(&[]));
        let c = plan(&e.update(), &e.services, &e.endpoints);
        assert_eq!(deleted(&c, &entries), [true, true, true, true, true, false]);

        // The service goes: every entry to its frontends goes, and none
        // to another port of its address.
        e.update_slice(slice(&["10.1.0.1"]));
        e.update();
        e.remove_service(&ServiceName::new("ns", "dns"));
        let c = plan(&e.update(), &e.services, &e.endpoints);
        assert_eq!(deleted(&c, &entries), [true, true, true, true, true, false]);
    }

    #[test]
    fn a_later_view_of_a_frontend_wins_and_a_pod_keeps_its_addresses() {
        let front = Frontend {
            addr: ip("10.96.0.10"),
            port: 53,
        };
        let mut c = Cleanup::default();
        c.frontends.insert(front, serving(&["10.1.0.1"]));
        c.node_ports.insert(30053, serving(&["10.1.0.1"]));
        let mut later = Cleanup::default();
        later.frontends.insert(front, serving(&["10.1.0.1", "10.1.0.2"]));
        c.merge(later);
        assert!(!c.deletes(ip("10.96.0.10"), 53, ip("10.1.0.2")), "the later view");
        assert_eq!(c.len(), 2);
        let pod = c.only_addresses(|a| *a == ip("10.96.0.10"));
        assert_eq!((pod.frontends.len(), pod.node_ports.len()), (1, 0));
        assert!(c.only_addresses(|_| false).is_empty());
    }
}
