//! One service's endpoints as a reader holds them, and kube-proxy's
//! routing decisions over them.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use endpoints_map::topology::{EndpointUse, TopologyMode, TrafficPolicies, categorize};
use slice_cache::PortEndpoints;
use slice_model::{
    BaseEndpointInfo, EndpointFacts, IpFamily, NodeHint, NodeHints, NodeName, Protocol, ServiceInfo, ServiceName,
};

/// Where routing is judged from, as kube-proxy on one node judges it: the
/// node (its endpoints are local, its node hints apply) and the node's
/// zone (zone hints).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Location {
    /// The node's name; `None`: no endpoint is local.
    pub node: Option<String>,
    /// The node's zone (its `topology.kubernetes.io/zone` label); `None`:
    /// zone hints are not used.
    pub zone: Option<String>,
}

impl Location {
    /// The node `node` in zone `zone`.
    pub fn new(node: impl Into<String>, zone: impl Into<String>) -> Self {
        Self {
            node: Some(node.into()),
            zone: Some(zone.into()),
        }
    }

    /// No node, in zone `zone`: zone hints apply, no endpoint is local.
    pub fn zone(zone: impl Into<String>) -> Self {
        Self {
            node: None,
            zone: Some(zone.into()),
        }
    }
}

/// Which node an endpoint address runs on and which nodes it is hinted
/// for, kept to judge routing from any node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) node: Option<NodeName>,
    pub(crate) node_hints: NodeHints,
}

/// A service and its endpoints, from every slice of both IP families,
/// merged per port as kube-proxy merges them (one entry per address and
/// port; a copy on the reader's node beats another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEndpoints {
    service: Arc<ServiceInfo>,
    endpoints: slice_cache::ServiceEndpoints,
    /// Each endpoint address's facts (the same for every port).
    facts: BTreeMap<IpAddr, Arc<EndpointFacts>>,
    /// Each endpoint address's node and node hints (where it has any).
    placement: BTreeMap<IpAddr, Placement>,
    /// Where the reader judges routing from.
    reader_at: Arc<Location>,
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
/// kube-proxy on one node decides it.
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
        placement: BTreeMap<IpAddr, Placement>,
        reader_at: Arc<Location>,
    ) -> Self {
        Self {
            service,
            endpoints,
            facts,
            placement,
            reader_at,
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

    /// Where kube-proxy on the reader's node and zone
    /// ([`Config::node`](crate::Config::node),
    /// [`Config::zone`](crate::Config::zone)) would send new connections of
    /// `traffic` to port `name`/`protocol`, and why not to the others:
    /// kube-proxy's own decision code (`categorize`), with the service's
    /// traffic policies. `None` when the port has no endpoints.
    pub fn routing(&self, name: &str, protocol: Protocol, traffic: Traffic) -> Option<Routing<'_>> {
        self.routing_at(name, protocol, traffic, &self.reader_at)
    }

    /// [`Self::routing`] as kube-proxy on another node and zone would
    /// decide it: a gateway or DNS server answering clients on several
    /// nodes or in several zones asks per client, with one reader. Which
    /// endpoints are local, node hints and zone hints are all judged for
    /// `at`. (The endpoints are merged once, for the reader's node: where
    /// two slices hold the same address and port, the copy kept is the
    /// one on the reader's node.)
    pub fn routing_at(&self, name: &str, protocol: Protocol, traffic: Traffic, at: &Location) -> Option<Routing<'_>> {
        let port = self.port(name, protocol)?;
        if at.node == self.reader_at.node {
            return Some(self.judge(name, protocol, traffic, at, &port.endpoints, &port.endpoints));
        }
        let node = at.node.as_deref().unwrap_or_default();
        let rejudged: Vec<BaseEndpointInfo> = port
            .endpoints
            .iter()
            .map(|e| {
                let placement = self.placement.get(&e.addr.ip());
                BaseEndpointInfo {
                    is_local: placement
                        .and_then(|p| p.node.as_ref())
                        .is_some_and(|n| !node.is_empty() && n.is(node)),
                    node_hint: placement.map_or(NodeHint::Unhinted, |p| p.node_hints.for_node(node)),
                    ..e.clone()
                }
            })
            .collect();
        Some(self.judge(name, protocol, traffic, at, &port.endpoints, &rejudged))
    }

    /// Routing over `judged` (the port's endpoints as seen from `at`),
    /// told in terms of `endpoints` (the same endpoints, as kept).
    fn judge<'a>(
        &self,
        name: &str,
        protocol: Protocol,
        traffic: Traffic,
        at: &Location,
        endpoints: &'a [BaseEndpointInfo],
        judged: &[BaseEndpointInfo],
    ) -> Routing<'a> {
        let family = self.service.cluster_ips.first().map_or(IpFamily::V4, IpFamily::of);
        let policies = self
            .service
            .ports_for(family)
            .iter()
            .find(|p| &*p.name.port == name && p.name.protocol == protocol)
            .map(TrafficPolicies::of)
            .unwrap_or_default();
        let local = match traffic {
            Traffic::Internal => policies.internal_policy_local,
            Traffic::External => policies.external_policy_local,
        };
        // The policy this traffic uses must be one categorize computes.
        let policies = TrafficPolicies {
            externally_accessible: policies.externally_accessible || traffic == Traffic::External,
            ..policies
        };
        let zone = at.zone.as_deref();
        let c = categorize(judged, policies, zone);
        let picked: HashSet<*const BaseEndpointInfo> = if local { &c.local } else { &c.cluster }
            .iter()
            .flatten()
            .map(|e| std::ptr::from_ref(*e))
            .collect();
        let pairs = || endpoints.iter().zip(judged);
        Routing {
            used: pairs()
                .filter(|(_, j)| picked.contains(&std::ptr::from_ref(*j)))
                .map(|(e, _)| e)
                .collect(),
            decisions: pairs().map(|(e, j)| (e, c.use_of(j, local, zone))).collect(),
            topology: if local { TopologyMode::None } else { c.topology },
            terminating_fallback: if local {
                c.local_terminating_fallback
            } else {
                c.cluster_terminating_fallback
            },
        }
    }
}
