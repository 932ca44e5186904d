//! What the dataplane should hold for one service port: where traffic
//! arrives (its frontends) and which endpoints it is spread over.
//!
//! This is the pure decision layer: it reads the engine's maps and the
//! node's configuration and knows nothing of nftables.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use endpoints_map::topology::{Categorized, TopologyMode, TrafficPolicies, categorize};
use endpoints_map::{EndpointsMap, ServicesMap};
use ipnet::IpNet;

use crate::rule::Match;
use slice_model::{Endpoint, IpFamily, Protocol, ServiceName, ServicePortInfo, ServicePortName};

pub use crate::names::Scope;

/// How this node treats traffic. A running syncer's changes only through
/// [`crate::NftSyncer::reconfigure`], and the next sync is then a full one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataplaneConfig {
    /// The family of this table.
    pub family: IpFamily,
    /// Node or pod.
    pub scope: Scope,
    /// The node's `topology.kubernetes.io/zone`, for zone hints.
    pub node_zone: Option<String>,
    /// The pod network(s) (`--cluster-cidr`): traffic to a cluster IP from
    /// outside them is masqueraded, and pods reaching an external address
    /// of a Local-policy service use the cluster endpoints.
    pub cluster_cidrs: Vec<IpNet>,
    /// How traffic from this node's pods is told from other traffic
    /// (`--detect-local-mode`).
    pub detect_local: LocalDetector,
    /// Masquerade all traffic to cluster IPs (`--masquerade-all`).
    pub masquerade_all: bool,
    /// Node ports answer only on local addresses in these networks
    /// (`--nodeport-addresses`); empty: on every local address. A family
    /// none of them is of answers node ports nowhere (as kube-proxy's).
    pub nodeport_addresses: Vec<IpNet>,
    /// The service CIDRs (`--service-cidr`): traffic to an address in them
    /// that is no service's cluster IP is dropped.
    pub service_cidrs: Vec<IpNet>,
    /// This family's loopback address answers node ports through a relay
    /// (kube-proxy's localhost node ports), which answers TCP only: UDP and
    /// SCTP traffic to a node port there is rejected by a rule, and counted
    /// ([`crate::names::CounterId::LocalhostNodePortRejected`]). Set by
    /// the owner of the relay, whatever the node's facts.
    pub loopback_relay: bool,
    /// For tests of how a refused service is handled: every port of this
    /// service gets a chain whose rule jumps to a chain that does not
    /// exist, which the kernel (and the kernel model) refuses. Never set
    /// outside tests (`proxyd run` sets it only from the environment
    /// variable `PROXYD_TEST_REFUSE_SERVICE`).
    pub refuse_for_tests: Option<ServiceName>,
}

impl DataplaneConfig {
    /// No zone, no cluster CIDR, no masquerade-all.
    pub fn new(family: IpFamily) -> Self {
        Self {
            family,
            scope: Scope::Node,
            node_zone: None,
            cluster_cidrs: Vec::new(),
            detect_local: LocalDetector::default(),
            masquerade_all: false,
            nodeport_addresses: Vec::new(),
            service_cidrs: Vec::new(),
            loopback_relay: false,
            refuse_for_tests: None,
        }
    }
}

impl DataplaneConfig {
    /// The table of a pod's namespace in multus mode.
    pub fn pod(family: IpFamily) -> Self {
        Self {
            scope: Scope::Pod,
            ..Self::new(family)
        }
    }

    /// The table's name: `proxyd`, or `proxyd-multus` in a pod.
    pub fn table(&self) -> &'static str {
        match self.scope {
            Scope::Node => crate::names::TABLE,
            Scope::Pod => crate::names::POD_TABLE,
        }
    }

    fn of_family(&self, nets: &[IpNet]) -> Vec<IpNet> {
        nets.iter()
            .filter(|n| {
                matches!(
                    (n, self.family),
                    (IpNet::V4(_), IpFamily::V4) | (IpNet::V6(_), IpFamily::V6)
                )
            })
            .map(IpNet::trunc)
            .collect()
    }

    /// The cluster CIDRs of this table's family (a dual-stack node lists
    /// both families' networks once, for both tables).
    pub fn family_cluster_cidrs(&self) -> Vec<IpNet> {
        self.of_family(&self.cluster_cidrs)
    }

    /// Matches for traffic from this node's pods, and for the rest; `None`
    /// when nothing tells them apart (no CIDR of this family known).
    pub fn local_traffic(&self) -> Option<(Match, Match)> {
        let by_source =
            |nets: Vec<IpNet>| (!nets.is_empty()).then(|| (Match::SourceIn(nets.clone()), Match::SourceNotIn(nets)));
        match &self.detect_local {
            LocalDetector::ClusterCidr => by_source(self.family_cluster_cidrs()),
            LocalDetector::NodeCidr(nets) => by_source(self.of_family(nets)),
            LocalDetector::BridgeInterface(name) => Some((
                Match::InputInterface(name.clone()),
                Match::NotInputInterface(name.clone()),
            )),
            LocalDetector::InterfaceNamePrefix(prefix) => {
                let pattern = format!("{prefix}*");
                Some((
                    Match::InputInterface(pattern.clone()),
                    Match::NotInputInterface(pattern),
                ))
            }
        }
    }

    /// The node-port networks of this table's family (empty: every local
    /// address), or `None` when node ports answer nowhere in it: the
    /// networks are all of the other family.
    pub fn family_nodeport_addresses(&self) -> Option<Vec<IpNet>> {
        let mine = self.of_family(&self.nodeport_addresses);
        (self.nodeport_addresses.is_empty() || !mine.is_empty()).then_some(mine)
    }

    /// The service CIDRs of this table's family.
    pub fn family_service_cidrs(&self) -> Vec<IpNet> {
        self.of_family(&self.service_cidrs)
    }
}

/// How traffic from this node's pods is told from other traffic, as
/// kube-proxy's `--detect-local-mode` says: traffic to a cluster IP from
/// elsewhere is masqueraded, and pods reaching an external address of an
/// `externalTrafficPolicy: Local` service use all its endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LocalDetector {
    /// By source address, in [`DataplaneConfig::cluster_cidrs`]
    /// (`ClusterCIDR`, the default).
    #[default]
    ClusterCidr,
    /// By source address, in this node's pod ranges (`NodeCIDR`: the Node's
    /// `spec.podCIDRs`).
    NodeCidr(Vec<IpNet>),
    /// Arriving on this bridge (`BridgeInterface`).
    BridgeInterface(String),
    /// Arriving on an interface whose name starts so
    /// (`InterfaceNamePrefix`).
    InterfaceNamePrefix(String),
}

/// One endpoint traffic may be sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    /// Address and port.
    pub addr: SocketAddr,
    /// Runs on this node (hairpin traffic from it must be masqueraded).
    pub local: bool,
}

/// The endpoints one kind of traffic (internal or external) is sent to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointGroup {
    /// The endpoints, sorted by address.
    pub backends: Vec<Backend>,
    /// The service port has usable endpoints somewhere in the cluster: with
    /// none in this group, its traffic is dropped rather than rejected.
    pub has_any_endpoints: bool,
    /// The endpoints are serving, terminating ones: none the policy may
    /// use is ready.
    pub terminating_fallback: bool,
}

/// What to do with traffic that reaches a frontend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupVerdict {
    /// Load-balance over the group's endpoints.
    Forward,
    /// The service has no endpoints: refuse the connection (ICMP/RST).
    Reject,
    /// The service has endpoints, none usable from here (Local policy):
    /// drop, as kube-proxy does.
    Drop,
}

impl EndpointGroup {
    /// The verdict for traffic using this group.
    pub fn verdict(&self) -> GroupVerdict {
        match (self.backends.is_empty(), self.has_any_endpoints) {
            (false, _) => GroupVerdict::Forward,
            (true, true) => GroupVerdict::Drop,
            (true, false) => GroupVerdict::Reject,
        }
    }
}

/// One service port as the dataplane programs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTarget {
    /// The service port.
    pub name: ServicePortName,
    /// The cluster IP of this family.
    pub cluster_ip: IpAddr,
    /// The port on the cluster, external and load-balancer IPs.
    pub port: u16,
    /// The node port, if any.
    pub node_port: Option<u16>,
    /// `spec.externalIPs` of this family.
    pub external_ips: Vec<IpAddr>,
    /// Load-balancer ingress IPs of this family.
    pub load_balancer_ips: Vec<IpAddr>,
    /// Sources allowed to reach the load-balancer IPs (empty: all).
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// ClientIP affinity timeout.
    pub session_affinity: Option<Duration>,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `externalTrafficPolicy: Local`.
    pub external_policy_local: bool,
    /// How hints narrowed the Cluster-policy endpoints.
    pub topology: TopologyMode,
    /// Endpoints for traffic to the cluster IP (internal traffic policy).
    pub internal: EndpointGroup,
    /// Endpoints for traffic to node ports and external/load-balancer IPs
    /// (external traffic policy); `None` when the port is not reachable from
    /// outside.
    pub external: Option<EndpointGroup>,
}

impl ServiceTarget {
    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        self.name.protocol
    }

    /// Derives the target of one service port from its endpoints.
    pub fn plan<E: Endpoint>(port: &ServicePortInfo, endpoints: &[E], config: &DataplaneConfig) -> Self {
        let policies = TrafficPolicies::of(port);
        let chosen = choose(port, endpoints, config);
        let group = |local: bool| {
            let picked = if local { &chosen.local } else { &chosen.cluster };
            let mut backends: Vec<Backend> = picked
                .iter()
                .flatten()
                .map(|e| Backend {
                    addr: e.socket_addr(),
                    local: e.is_local(),
                })
                .collect();
            backends.sort_unstable();
            backends.dedup_by_key(|b| b.addr);
            EndpointGroup {
                backends,
                has_any_endpoints: chosen.has_any_endpoints,
                terminating_fallback: if local {
                    chosen.local_terminating_fallback
                } else {
                    chosen.cluster_terminating_fallback
                },
            }
        };
        Self {
            name: port.name.clone(),
            cluster_ip: port.cluster_ip,
            port: port.port.get(),
            node_port: port.node_port.map(|p| p.get()),
            external_ips: port.external_ips.clone(),
            load_balancer_ips: port.load_balancer_ips.clone(),
            load_balancer_source_ranges: port.load_balancer_source_ranges.clone(),
            session_affinity: port.session_affinity,
            internal_policy_local: port.internal_policy_local,
            external_policy_local: port.external_policy_local,
            topology: chosen.topology,
            internal: group(port.internal_policy_local),
            external: policies
                .externally_accessible
                .then(|| group(port.external_policy_local)),
        }
    }
}

/// A service's ports whose traffic this node drops because a Local policy
/// finds no endpoint here while the service has some elsewhere (kube-proxy's
/// `sync_proxy_rules_no_local_endpoints_total`, by traffic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoLocalEndpoints {
    /// Internal traffic (`internalTrafficPolicy: Local`).
    pub internal: usize,
    /// External traffic (`externalTrafficPolicy: Local`), of ports
    /// reachable from outside.
    pub external: usize,
}

impl NoLocalEndpoints {
    /// Counted from the verdicts the targets' groups give, the ones the
    /// rules are written from.
    pub fn of(targets: &[ServiceTarget]) -> Self {
        let dropped = |local: bool, group: Option<&EndpointGroup>| {
            local && group.is_some_and(|g| g.verdict() == GroupVerdict::Drop)
        };
        Self {
            internal: targets
                .iter()
                .filter(|t| dropped(t.internal_policy_local, Some(&t.internal)))
                .count(),
            external: targets
                .iter()
                .filter(|t| dropped(t.external_policy_local, t.external.as_ref()))
                .count(),
        }
    }

    /// No port is counted.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// Which endpoints of a service port this node's traffic may use, by
/// policy and topology: the one decision both the programmed rules and
/// `explain` read.
pub fn choose<'a, E: Endpoint>(
    port: &ServicePortInfo,
    endpoints: &'a [E],
    config: &DataplaneConfig,
) -> Categorized<'a, E> {
    categorize(endpoints, TrafficPolicies::of(port), config.node_zone.as_deref())
}

/// Plans every port of one service; empty when the service is gone (or has
/// nothing this family programs).
pub fn plan_service(
    service: &ServiceName,
    services: &ServicesMap,
    endpoints: &EndpointsMap,
    config: &DataplaneConfig,
) -> Vec<ServiceTarget> {
    services
        .service(service)
        .unwrap_or(&[])
        .iter()
        .map(|port| {
            let mut t = ServiceTarget::plan(port, endpoints.get(&port.name).unwrap_or(&[]), config);
            if config.scope == Scope::Pod {
                // A pod reaches a service only through its cluster IP.
                t.external = None;
                t.external_policy_local = false;
            }
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use slice_model::BaseEndpointInfo;

    use super::*;

    fn port(external: bool, ext_local: bool, int_local: bool) -> ServicePortInfo {
        ServicePortInfo {
            name: ServicePortName::new(ServiceName::new("ns", "web"), "http", Protocol::Tcp),
            cluster_ip: "10.96.0.10".parse().unwrap(),
            port: NonZeroU16::new(80).unwrap(),
            node_port: NonZeroU16::new(30080).filter(|_| external),
            external_ips: Vec::new(),
            load_balancer_ips: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            session_affinity: None,
            external_policy_local: ext_local,
            internal_policy_local: int_local,
            health_check_node_port: None,
        }
    }

    fn ep(addr: &str, local: bool) -> BaseEndpointInfo {
        BaseEndpointInfo::new(addr.parse().unwrap()).local(local)
    }

    fn addrs(g: &EndpointGroup) -> Vec<String> {
        g.backends.iter().map(|b| b.addr.to_string()).collect()
    }

    #[test]
    fn groups_follow_the_traffic_policies() {
        let eps = [ep("10.1.0.2:80", false), ep("10.1.0.1:80", true)];
        let config = DataplaneConfig::new(IpFamily::V4);
        let t = ServiceTarget::plan(&port(true, true, false), &eps, &config);
        assert_eq!(
            addrs(&t.internal),
            ["10.1.0.1:80", "10.1.0.2:80"],
            "sorted, all of them"
        );
        assert_eq!(addrs(t.external.as_ref().unwrap()), ["10.1.0.1:80"], "local only");
        assert!(t.internal.backends[0].local && !t.internal.backends[1].local);

        let t = ServiceTarget::plan(&port(false, true, false), &eps, &config);
        assert!(t.external.is_none(), "not reachable from outside");
    }

    #[test]
    fn empty_groups_reject_or_drop() {
        let config = DataplaneConfig::new(IpFamily::V4);
        let t = ServiceTarget::plan(&port(true, true, true), &[ep("10.1.0.2:80", false)], &config);
        assert_eq!(t.internal.verdict(), GroupVerdict::Drop, "endpoints exist elsewhere");
        assert_eq!(t.external.unwrap().verdict(), GroupVerdict::Drop);
        let none: [BaseEndpointInfo; 0] = [];
        let t = ServiceTarget::plan(&port(true, false, false), &none, &config);
        assert_eq!(t.internal.verdict(), GroupVerdict::Reject);
        assert_eq!(t.external.unwrap().verdict(), GroupVerdict::Reject);
        let t = ServiceTarget::plan(&port(false, false, false), &[ep("10.1.0.2:80", false)], &config);
        assert_eq!(t.internal.verdict(), GroupVerdict::Forward);
    }

    #[test]
    fn zone_hints_narrow_the_cluster_group() {
        let eps = [
            BaseEndpointInfo::new("10.1.0.1:80".parse().unwrap()).with_zones(["a"]),
            BaseEndpointInfo::new("10.1.0.2:80".parse().unwrap()).with_zones(["b"]),
        ];
        let mut config = DataplaneConfig::new(IpFamily::V4);
        config.node_zone = Some("b".into());
        let t = ServiceTarget::plan(&port(false, false, false), &eps, &config);
        assert_eq!(addrs(&t.internal), ["10.1.0.2:80"]);
        config.node_zone = Some("c".into());
        let t = ServiceTarget::plan(&port(false, false, false), &eps, &config);
        assert_eq!(t.internal.backends.len(), 2, "no endpoint for zone c: all of them");
    }
}
