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

use endpoints_map::{ServicesMap, ServicesUpdateResult, UpdateResult};
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

/// The entries one sync's changes make stale: `endpoints` and `services`
/// are the reports of the maps' updates, `map` the services after them.
pub fn plan(endpoints: &UpdateResult, services: &ServicesUpdateResult, map: &ServicesMap) -> Vec<Flow> {
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
