//! One service's endpoints as a reader holds them, and kube-proxy's
//! routing decisions over them.

use std::borrow::Cow;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use endpoints_map::topology::{EndpointUse, TopologyMode, TrafficPolicies, categorize};
use slice_cache::PortEndpoints;
use slice_model::{BaseEndpointInfo, EndpointFacts, IpFamily, Protocol, ServiceInfo, ServiceName, SliceContent};

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

/// A service's slices merged as kube-proxy on one node merges them: one
/// entry per address and port, the first copy by slice name unless a
/// later one is on that node; each address's facts from the copy kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Merged {
    endpoints: slice_cache::ServiceEndpoints,
    facts: BTreeMap<IpAddr, Arc<EndpointFacts>>,
}

impl Merged {
    /// `slices` (in name order) merged on `node` (`None`: no copy is
    /// local).
    pub(crate) fn on(slices: &[Arc<SliceContent>], node: Option<&str>) -> Self {
        let node = node.unwrap_or_default();
        let endpoints = slice_cache::ServiceEndpoints::merge(slices.iter().map(|s| &**s), node);
        // The merge's rule per address: first copy, unless one on the node
        // comes later.
        let mut kept: BTreeMap<IpAddr, (bool, Option<&Arc<EndpointFacts>>)> = BTreeMap::new();
        for e in slices.iter().flat_map(|s| &s.endpoints) {
            let local = e.is_on_node(node);
            match kept.entry(e.addr) {
                Entry::Vacant(v) => {
                    v.insert((local, e.facts.as_ref()));
                }
                Entry::Occupied(mut o) if local && !o.get().0 => {
                    o.insert((local, e.facts.as_ref()));
                }
                Entry::Occupied(_) => {}
            }
        }
        let facts = kept
            .into_iter()
            .filter_map(|(ip, (_, facts))| Some((ip, facts?.clone())))
            .collect();
        Self { endpoints, facts }
    }
}

/// A service and its endpoints, from every slice of both IP families,
/// merged per port as kube-proxy on the reader's node merges them (one
/// entry per address and port; a copy on the reader's node beats another).
/// Routing and facts for another node merge the slices again, as that
/// node's kube-proxy does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEndpoints {
    service: Arc<ServiceInfo>,
    /// Merged on the reader's node.
    merged: Merged,
    /// The service's slices in name order, for other nodes' merges.
    slices: Arc<[Arc<SliceContent>]>,
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
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// The endpoints new connections go to.
    pub used: Vec<BaseEndpointInfo>,
    /// Every endpoint of the port, as merged on the node routing is judged
    /// from, with the decision for it and its reason.
    pub decisions: Vec<(BaseEndpointInfo, EndpointUse)>,
    /// How topology hints narrowed the choice.
    pub topology: TopologyMode,
    /// No endpoint is ready: serving, terminating ones take the traffic.
    pub terminating_fallback: bool,
}

impl ServiceEndpoints {
    pub(crate) fn new(service: Arc<ServiceInfo>, slices: Arc<[Arc<SliceContent>]>, reader_at: Arc<Location>) -> Self {
        Self {
            service,
            merged: Merged::on(&slices, reader_at.node.as_deref()),
            slices,
            reader_at,
        }
    }

    /// What the slices say of the endpoint at `ip`: hostname, node name,
    /// zone, target reference (`None` when they say none of it). Where two
    /// slices hold the address, the copy the merge keeps says it.
    pub fn facts(&self, ip: IpAddr) -> Option<&EndpointFacts> {
        self.merged.facts.get(&ip).map(|f| &**f)
    }

    /// [`Self::facts`] as merged on `at`'s node: where two slices hold the
    /// address, the one on that node says it.
    pub fn facts_at(&self, ip: IpAddr, at: &Location) -> Option<Arc<EndpointFacts>> {
        self.merged_at(at).facts.get(&ip).cloned()
    }

    /// The merge on `at`'s node: the reader's own when it is the reader's
    /// node.
    fn merged_at(&self, at: &Location) -> Cow<'_, Merged> {
        if at.node == self.reader_at.node {
            Cow::Borrowed(&self.merged)
        } else {
            Cow::Owned(Merged::on(&self.slices, at.node.as_deref()))
        }
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
        self.merged.endpoints.ports()
    }

    /// One port's endpoints.
    pub fn port(&self, name: &str, protocol: Protocol) -> Option<&PortEndpoints> {
        self.merged.endpoints.port(name, protocol)
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
    pub fn routing(&self, name: &str, protocol: Protocol, traffic: Traffic) -> Option<Routing> {
        self.routing_at(name, protocol, traffic, &self.reader_at)
    }

    /// [`Self::routing`] as kube-proxy on another node and zone would
    /// decide it: a gateway or DNS server answering clients on several
    /// nodes or in several zones asks per client, with one reader. The
    /// slices are merged as that node's kube-proxy merges them (where two
    /// slices hold the same address and port, a copy on that node beats
    /// another), and which endpoints are local, node hints and zone hints
    /// are judged for `at`: the answer is the one a reader configured at
    /// `at` gives.
    pub fn routing_at(&self, name: &str, protocol: Protocol, traffic: Traffic, at: &Location) -> Option<Routing> {
        let merged = self.merged_at(at);
        let port = merged.endpoints.port(name, protocol)?;
        Some(self.judge(name, protocol, traffic, at, &port.endpoints))
    }

    /// Routing over `endpoints` (one port's, as merged on `at`'s node).
    fn judge(
        &self,
        name: &str,
        protocol: Protocol,
        traffic: Traffic,
        at: &Location,
        endpoints: &[BaseEndpointInfo],
    ) -> Routing {
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
        let c = categorize(endpoints, policies, zone);
        let picked: HashSet<*const BaseEndpointInfo> = if local { &c.local } else { &c.cluster }
            .iter()
            .flatten()
            .map(|e| std::ptr::from_ref(*e))
            .collect();
        Routing {
            used: endpoints
                .iter()
                .filter(|e| picked.contains(&std::ptr::from_ref(*e)))
                .cloned()
                .collect(),
            decisions: endpoints
                .iter()
                .map(|e| (e.clone(), c.use_of(e, local, zone)))
                .collect(),
            topology: if local { TopologyMode::None } else { c.topology },
            terminating_fallback: if local {
                c.local_terminating_fallback
            } else {
                c.cluster_terminating_fallback
            },
        }
    }
}
