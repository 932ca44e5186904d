//! What the dataplane should hold: per service port, the virtual IP and the
//! endpoints that traffic to it is spread over.

use std::net::{IpAddr, SocketAddr};

use endpoints_map::topology::{TrafficPolicies, categorize};
use endpoints_map::{EndpointsMap, ServicesMap};
use slice_model::{Endpoint, IpFamily, ServicePortName};

/// One service port's cluster-IP traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTarget {
    /// The service port.
    pub name: ServicePortName,
    /// The cluster IP.
    pub vip: IpAddr,
    /// The port on the cluster IP (the protocol is `name.protocol`).
    pub port: u16,
    /// The endpoints reachable from this node for this traffic, sorted.
    pub endpoints: Vec<SocketAddr>,
    /// Whether the service has usable endpoints anywhere: with none here but
    /// some elsewhere (Local policy), traffic is dropped, not rejected.
    pub has_any_endpoints: bool,
}

/// Everything the dataplane should hold for one IP family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredState {
    /// The family (one table per family).
    pub family: IpFamily,
    /// Service ports, sorted by name.
    pub services: Vec<ServiceTarget>,
}

impl DesiredState {
    /// Derives the state from the engine's maps, for a node in `node_zone`.
    /// Cluster-IP traffic uses the internal traffic policy's endpoints.
    pub fn build(family: IpFamily, services: &ServicesMap, endpoints: &EndpointsMap, node_zone: Option<&str>) -> Self {
        let targets = services
            .iter()
            .map(|port| {
                let eps = endpoints.get(&port.name).unwrap_or(&[]);
                // Only cluster-IP traffic is programmed so far: its endpoints
                // depend on the internal policy alone.
                let policies = TrafficPolicies {
                    externally_accessible: false,
                    ..TrafficPolicies::of(port)
                };
                let chosen = categorize(eps, policies, node_zone);
                let mut addrs: Vec<SocketAddr> = chosen.all_reachable.iter().map(|e| e.socket_addr()).collect();
                addrs.sort_unstable();
                ServiceTarget {
                    name: port.name.clone(),
                    vip: port.cluster_ip,
                    port: port.port.get(),
                    endpoints: addrs,
                    has_any_endpoints: chosen.has_any_endpoints,
                }
            })
            .collect();
        Self {
            family,
            services: targets,
        }
    }
}
