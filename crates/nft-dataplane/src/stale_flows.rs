//! Which UDP conntrack entries a sync makes stale, as kube-proxy decides
//! it (the deleting itself is the binary's job).
//!
//! UDP has no connection to end, so a conntrack entry keeps sending a
//! client's datagrams where the rules sent its first one:
//!
//! - to an endpoint that is gone (a *stale endpoint*): delete the entries
//!   DNATed to it from each of the service's frontends;
//! - nowhere, because the service had no endpoints when the flow began (a
//!   *stale service*, now with its first endpoint): delete the entries to
//!   its frontends;
//! - to a cluster IP of a deleted UDP port: delete the entries to that IP.
//!
//! The cleanup must run only after the rules that replace the entries are
//! in place (a successful apply), never before.

use std::collections::BTreeSet;
use std::net::IpAddr;

use endpoints_map::{EngineUpdate, ServicesMap};
use slice_model::{IpFamily, Protocol};

/// One set of UDP conntrack entries to delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flow {
    /// Entries to a frontend address and port.
    ToFrontend {
        /// Cluster, external or load-balancer IP.
        addr: IpAddr,
        /// Service port.
        port: u16,
    },
    /// Entries to a node port (on any local address).
    ToNodePort {
        /// The node port.
        port: u16,
    },
    /// Entries to a frontend that were DNATed to `endpoint`.
    FrontendToEndpoint {
        /// Cluster, external or load-balancer IP.
        addr: IpAddr,
        /// Service port.
        port: u16,
        /// The endpoint's address.
        endpoint: IpAddr,
    },
    /// Entries to a node port that were DNATed to `endpoint`.
    NodePortToEndpoint {
        /// The node port.
        port: u16,
        /// The endpoint's address.
        endpoint: IpAddr,
    },
    /// Entries to an address (a deleted service's cluster IP).
    ToAddress {
        /// The address.
        addr: IpAddr,
    },
}

impl Flow {
    /// The `conntrack -D` filter arguments.
    pub fn args(&self, family: IpFamily) -> Vec<String> {
        let f = match family {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        };
        let mut a: Vec<String> = ["-D", "-f", f, "-p", "udp"].map(String::from).to_vec();
        let mut push = |k: &str, v: String| {
            a.push(k.to_owned());
            a.push(v);
        };
        match *self {
            Self::ToFrontend { addr, port } => {
                push("--orig-dst", addr.to_string());
                push("--orig-port-dst", port.to_string());
            }
            Self::ToNodePort { port } => push("--orig-port-dst", port.to_string()),
            Self::FrontendToEndpoint { addr, port, endpoint } => {
                push("--orig-dst", addr.to_string());
                push("--orig-port-dst", port.to_string());
                push("--dst-nat", endpoint.to_string());
            }
            Self::NodePortToEndpoint { port, endpoint } => {
                push("--orig-port-dst", port.to_string());
                push("--dst-nat", endpoint.to_string());
            }
            Self::ToAddress { addr } => push("--orig-dst", addr.to_string()),
        }
        a
    }
}

/// The entries one sync's changes make stale: `update` is what the
/// engine's update reported, `map` the services after it.
pub fn plan(update: &EngineUpdate, map: &ServicesMap) -> Vec<Flow> {
    let (endpoints, services) = (&update.endpoints, &update.services);
    let mut flows = BTreeSet::new();
    for name in &endpoints.stale_service_names {
        let Some(p) = map.get(name).filter(|p| p.name.protocol == Protocol::Udp) else {
            continue;
        };
        let port = p.port.get();
        for addr in std::iter::once(&p.cluster_ip)
            .chain(&p.external_ips)
            .chain(&p.load_balancer_ips)
        {
            flows.insert(Flow::ToFrontend { addr: *addr, port });
        }
        if let Some(np) = p.node_port {
            flows.insert(Flow::ToNodePort { port: np.get() });
        }
    }
    for stale in &endpoints.stale_endpoints {
        let Some(p) = map
            .get(&stale.service_port)
            .filter(|p| p.name.protocol == Protocol::Udp)
        else {
            continue; // a deleted service: its cluster IP is cleared below
        };
        let (port, endpoint) = (p.port.get(), stale.endpoint.ip());
        for addr in std::iter::once(&p.cluster_ip)
            .chain(&p.external_ips)
            .chain(&p.load_balancer_ips)
        {
            flows.insert(Flow::FrontendToEndpoint {
                addr: *addr,
                port,
                endpoint,
            });
        }
        if let Some(np) = p.node_port {
            flows.insert(Flow::NodePortToEndpoint {
                port: np.get(),
                endpoint,
            });
        }
    }
    for addr in &services.deleted_udp_cluster_ips {
        flows.insert(Flow::ToAddress { addr: *addr });
    }
    flows.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use slice_model::{
        EndpointSlice, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint, SliceName,
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

    #[test]
    fn stale_services_endpoints_and_deleted_ips() {
        let mut e = Engine::new("node-1", IpFamily::V4);
        e.update_service(&dns(true));
        e.update();
        // First endpoint: entries to every frontend may black-hole.
        e.update_slice(slice(&["10.1.0.1"]));
        let u = e.update();
        assert_eq!(
            plan(&u, &e.services),
            [
                Flow::ToFrontend {
                    addr: "10.96.0.10".parse().unwrap(),
                    port: 53
                },
                Flow::ToFrontend {
                    addr: "192.0.2.1".parse().unwrap(),
                    port: 53
                },
                Flow::ToNodePort { port: 30053 },
            ]
        );
        // The endpoint is replaced: entries DNATed to it go.
        e.update_slice(slice(&["10.1.0.2"]));
        let u = e.update();
        let flows = plan(&u, &e.services);
        assert_eq!(flows.len(), 3, "{flows:?}");
        assert!(flows.contains(&Flow::NodePortToEndpoint {
            port: 30053,
            endpoint: "10.1.0.1".parse().unwrap()
        }));
        assert_eq!(
            flows[0].args(IpFamily::V4).join(" "),
            "-D -f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --dst-nat 10.1.0.1"
        );
        // The service goes: its cluster IP's entries go.
        e.remove_service(&ServiceName::new("ns", "dns"));
        e.remove_slice(&SliceName::new("ns", "dns-1"));
        let u = e.update();
        assert_eq!(
            plan(&u, &e.services),
            [Flow::ToAddress {
                addr: "10.96.0.10".parse().unwrap()
            }]
        );
    }
}
