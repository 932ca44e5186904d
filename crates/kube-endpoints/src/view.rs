//! One service's endpoints as a reader holds them, and kube-proxy's
//! routing decisions over them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use endpoints_map::topology::{EndpointUse, TopologyMode, TrafficPolicies, categorize};
use slice_cache::PortEndpoints;
use slice_model::{BaseEndpointInfo, EndpointFacts, IpFamily, Protocol, ServiceInfo, ServiceName};

/// A service and its endpoints, from every slice of both IP families,
/// merged per port as kube-proxy merges them (one entry per address and
/// port; a copy on the reader's node beats another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEndpoints {
    service: Arc<ServiceInfo>,
    endpoints: slice_cache::ServiceEndpoints,
    /// Each endpoint address's facts (the same for every port).
    facts: BTreeMap<IpAddr, Arc<EndpointFacts>>,
    zone: Option<Arc<str>>,
}

/// Which traffic a routing decision is for: kube-proxy applies the
/// internal traffic policy to the first, the external one to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// To a cluster IP, from inside the cluster.
    Internal,
    /// To a node port, an external IP or a load balancer.
    External,
}

/// Where new connections of one kind of traffic to one port go, as
/// kube-proxy on the reader's node and zone decides it.
#[derive(Debug)]
pub struct Routing<'a> {
    /// The endpoints new connections go to.
    pub used: Vec<&'a BaseEndpointInfo>,
    /// Every endpoint of the port with the decision for it and its reason.
    pub decisions: Vec<(&'a BaseEndpointInfo, EndpointUse)>,
    /// How topology hints narrowed the choice.
    pub topology: TopologyMode,
    /// No endpoint is ready: serving, terminating ones take the traffic.
    pub terminating_fallback: bool,
}

impl ServiceEndpoints {
    pub(crate) fn new(
        service: Arc<ServiceInfo>,
        endpoints: slice_cache::ServiceEndpoints,
        facts: BTreeMap<IpAddr, Arc<EndpointFacts>>,
        zone: Option<Arc<str>>,
    ) -> Self {
        Self {
            service,
            endpoints,
            facts,
            zone,
        }
    }

    /// What the slices say of the endpoint at `ip`: hostname, node name,
    /// zone, target reference (`None` when they say none of it).
    pub fn facts(&self, ip: IpAddr) -> Option<&EndpointFacts> {
        self.facts.get(&ip).map(|f| &**f)
    }

    /// The service's namespace and name.
    pub fn name(&self) -> &ServiceName {
        &self.service.name
    }

    /// What the Service says: type, cluster IPs, ports (with
    /// `appProtocol`), policies, traffic distribution,
    /// `publishNotReadyAddresses`.
    pub fn service(&self) -> &ServiceInfo {
        &self.service
    }

    /// The ports that have endpoints, by name then protocol; each
    /// endpoint's address carries the port number on the endpoint.
    pub fn ports(&self) -> &[PortEndpoints] {
        self.endpoints.ports()
    }

    /// One port's endpoints.
    pub fn port(&self, name: &str, protocol: Protocol) -> Option<&PortEndpoints> {
        self.endpoints.port(name, protocol)
    }

    /// Every endpoint, once per address (a pod behind two ports is one
    /// item), in address order: its first port's entry, whose address
    /// carries that port's number. [`Self::ports`] has every port's.
    pub fn endpoints(&self) -> impl Iterator<Item = &BaseEndpointInfo> {
        let mut first: BTreeMap<IpAddr, &BaseEndpointInfo> = BTreeMap::new();
        for e in self.ports().iter().flat_map(|p| &p.endpoints) {
            first.entry(e.addr.ip()).or_insert(e);
        }
        first.into_values()
    }

    /// The endpoints that are ready, once per address: what takes new
    /// connections when topology and policies do not narrow the choice.
    /// Two ready pods behind two ports are two items.
    pub fn ready(&self) -> impl Iterator<Item = &BaseEndpointInfo> {
        self.endpoints().filter(|e| e.ready)
    }

    /// The endpoints that are serving (ready, or terminating and still
    /// able to serve), once per address.
    pub fn serving(&self) -> impl Iterator<Item = &BaseEndpointInfo> {
        self.endpoints().filter(|e| e.serving)
    }

    /// Where kube-proxy on the reader's node and zone would send new
    /// connections of `traffic` to port `name`/`protocol`, and why not to
    /// the others: kube-proxy's own decision code (`categorize`), with the
    /// service's traffic policies. `None` when the port has no endpoints.
    pub fn routing(&self, name: &str, protocol: Protocol, traffic: Traffic) -> Option<Routing<'_>> {
        self.routing_from_zone(name, protocol, traffic, self.zone.as_deref())
    }

    /// [`Self::routing`] as kube-proxy in zone `zone` would decide it (a
    /// gateway or DNS server answering for several zones asks per zone,
    /// with one reader): zone hints are read for `zone`; which endpoints are
    /// local, and node hints, stay judged for the reader's node
    /// ([`Config::node`](crate::Config::node)).
    pub fn routing_in_zone(&self, name: &str, protocol: Protocol, traffic: Traffic, zone: &str) -> Option<Routing<'_>> {
        self.routing_from_zone(name, protocol, traffic, Some(zone))
    }

    fn routing_from_zone(
        &self,
        name: &str,
        protocol: Protocol,
        traffic: Traffic,
        zone: Option<&str>,
    ) -> Option<Routing<'_>> {
        let port = self.port(name, protocol)?;
        let family = self.service.cluster_ips.first().map_or(IpFamily::V4, IpFamily::of);
        let policies = self
            .service
            .ports_for(family)
            .iter()
            .find(|p| &*p.name.port == name && p.name.protocol == protocol)
            .map(TrafficPolicies::of)
            .unwrap_or_default();
        let local = match traffic {
            Traffic::Internal => policies.internal_local,
            Traffic::External => policies.external_local,
        };
        // The policy this traffic uses must be one categorize computes.
        let policies = TrafficPolicies {
            externally_accessible: policies.externally_accessible || traffic == Traffic::External,
            ..policies
        };
        let c = categorize(&port.endpoints, policies, zone);
        let used = if local { c.local.clone() } else { c.cluster.clone() }.unwrap_or_default();
        let decisions = port.endpoints.iter().map(|e| (e, c.use_of(e, local, zone))).collect();
        Some(Routing {
            used,
            decisions,
            topology: if local { TopologyMode::None } else { c.topology },
            terminating_fallback: if local {
                c.local_terminating_fallback
            } else {
                c.cluster_terminating_fallback
            },
        })
    }
}
