//! Which endpoints of a service port a node uses, by traffic policy and
//! topology, as current kube-proxy decides it (`pkg/proxy/topology.go`).
//!
//! * Cluster policy: ready endpoints, narrowed to this node's zone when
//!   topology-aware routing applies; with no ready endpoint anywhere, the
//!   serving-and-terminating ones.
//! * Local policy: this node's ready endpoints; with none, this node's
//!   serving-and-terminating ones.
//! * Topology-aware routing (hints, which the EndpointSlice controller sets
//!   for `trafficDistribution: PreferSameNode`, `PreferSameZone` or
//!   `PreferClose`, or the topology-mode annotation) is all or nothing.
//!   Node hints come first: when every ready endpoint carries one and at
//!   least one is hinted for this node, only those are used. Otherwise zone
//!   hints: when every ready endpoint carries one and at least one is hinted
//!   for this node's zone, only those are used.

use slice_model::{Endpoint, NodeHint, ServicePortInfo};

/// The traffic policies that matter for one service port.
///
/// The default is a port reachable only inside the cluster with both
/// policies `Cluster`: every usable endpoint serves every client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficPolicies {
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `externalTrafficPolicy: Local`.
    pub external_policy_local: bool,
    /// Reachable from outside the cluster: a node port, external IPs or
    /// load-balancer IPs.
    pub externally_accessible: bool,
}

impl TrafficPolicies {
    /// The policies of one service port, as a proxier of its family sees it.
    pub fn of(port: &ServicePortInfo) -> Self {
        Self {
            internal_policy_local: port.internal_policy_local,
            external_policy_local: port.external_policy_local,
            externally_accessible: port.externally_accessible(),
        }
    }

    /// Whether some traffic to the port uses Cluster policy.
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || (self.externally_accessible && !self.external_policy_local)
    }

    /// Whether some traffic to the port uses Local policy.
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.externally_accessible && self.external_policy_local)
    }
}

/// How the cluster endpoints were narrowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopologyMode {
    /// All ready endpoints (no hints, or hints that cannot be used).
    #[default]
    None,
    /// Only endpoints hinted for this node.
    PreferSameNode,
    /// Only endpoints hinted for this node's zone.
    PreferSameZone,
}

/// Why topology-aware routing was or was not used, for a proxier to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyDecision {
    /// Every ready endpoint has a node hint and some are for this node.
    UsingNodeHints,
    /// Every ready endpoint has a zone hint and some are for this zone
    /// (node hints, if any, could not be used).
    UsingZoneHints,
    /// No endpoint is ready: there is nothing to narrow.
    NoReadyEndpoints,
    /// A ready endpoint has no zone hint: hints are ignored for all.
    SomeEndpointUnhinted,
    /// The node has no zone label.
    NodeHasNoZone,
    /// No endpoint is hinted for this node's zone.
    NoEndpointForZone,
}

/// The endpoints a node uses for one service port.
#[derive(Debug)]
pub struct Categorized<'a, E> {
    /// Endpoints for Cluster-policy traffic; `None` when no traffic to the
    /// port uses Cluster policy.
    pub cluster: Option<Vec<&'a E>>,
    /// Endpoints for Local-policy traffic; `None` when no traffic to the
    /// port uses Local policy.
    pub local: Option<Vec<&'a E>>,
    /// Every endpoint reachable from this node: the union of the two.
    pub all_reachable: Vec<&'a E>,
    /// Whether the port has usable endpoints anywhere in the cluster (true
    /// even when none is reachable from here, e.g. Local policy with only
    /// remote endpoints: such traffic is dropped, not rejected).
    pub has_any_endpoints: bool,
    /// How the cluster endpoints were narrowed.
    pub topology: TopologyMode,
    /// Why.
    pub topology_decision: TopologyDecision,
    /// The cluster endpoints are serving-terminating ones (no ready one).
    pub cluster_terminating_fallback: bool,
    /// The local endpoints are serving-terminating ones (no local ready one).
    pub local_terminating_fallback: bool,
}

impl<E: Endpoint> Categorized<'_, E> {
    /// Whether `endpoint` (one of the port's) takes Local-policy traffic
    /// (`local_policy`) or Cluster-policy traffic, and why: the decision
    /// that put it in [`Categorized::local`] or [`Categorized::cluster`] or
    /// left it out. `node_zone` is the one given to [`categorize`].
    pub fn use_of(&self, endpoint: &E, local_policy: bool, node_zone: Option<&str>) -> EndpointUse {
        let fallback = if local_policy {
            self.local_terminating_fallback
        } else {
            self.cluster_terminating_fallback
        };
        endpoint_use(
            endpoint,
            local_policy,
            self.topology,
            node_zone.unwrap_or_default(),
            fallback,
        )
    }
}

fn serving_terminating<E: Endpoint>(e: &E) -> bool {
    e.is_serving() && e.is_terminating()
}

/// Whether one endpoint takes one kind of traffic (Cluster- or
/// Local-policy), and why: kube-proxy's topology decision (this crate's
/// `topology::categorize`), endpoint by endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointUse {
    /// Used: ready (and in the topology the hints chose).
    Used,
    /// Used because no endpoint the policy may use is ready: serving and
    /// terminating ones take the traffic.
    TerminatingFallback,
    /// Not used: Local policy, and the endpoint is on another node.
    NotLocal,
    /// Not used: neither ready nor serving.
    NotReadyNorServing,
    /// Not used: serving but terminating, and ready endpoints exist.
    TerminatingWhileReadyExist,
    /// Not used: not ready, and serving but not terminating (a state the
    /// API does not produce; such an endpoint never takes traffic).
    ServingNotReady,
    /// Not used: the hints chose other nodes or zones ([`TopologyMode`]
    /// says which).
    OutsideTopology(TopologyMode),
}

impl EndpointUse {
    /// Whether new connections reach the endpoint.
    pub fn is_used(self) -> bool {
        matches!(self, Self::Used | Self::TerminatingFallback)
    }
}

/// The decision for one endpoint, given what was decided for the port
/// (topology mode, whether the terminating fallback applies).
fn endpoint_use<E: Endpoint>(e: &E, local_policy: bool, mode: TopologyMode, zone: &str, fallback: bool) -> EndpointUse {
    if local_policy && !e.is_local() {
        return EndpointUse::NotLocal;
    }
    if e.is_ready() {
        return if fallback {
            // Unreachable by construction (a ready endpoint leaves no
            // fallback); said as what it would be.
            EndpointUse::TerminatingWhileReadyExist
        } else if local_policy || in_topology(e, mode, zone) {
            EndpointUse::Used
        } else {
            EndpointUse::OutsideTopology(mode)
        };
    }
    match (serving_terminating(e), fallback, e.is_serving()) {
        (true, true, _) => EndpointUse::TerminatingFallback,
        (true, false, _) => EndpointUse::TerminatingWhileReadyExist,
        (false, _, false) => EndpointUse::NotReadyNorServing,
        (false, _, true) => EndpointUse::ServingNotReady,
    }
}

/// Decides whether node or zone hints narrow the cluster endpoints.
pub fn topology_mode<E: Endpoint>(endpoints: &[E], node_zone: Option<&str>) -> (TopologyMode, TopologyDecision) {
    let zone = node_zone.unwrap_or_default();
    let (mut any_ready, mut all_node_hinted, mut for_node) = (false, true, false);
    let (mut all_zone_hinted, mut for_zone) = (true, false);
    for e in endpoints.iter().filter(|e| e.is_ready()) {
        any_ready = true;
        match e.node_hint() {
            NodeHint::Unhinted => all_node_hinted = false,
            NodeHint::ThisNode => for_node = true,
            NodeHint::OtherNodes => {}
        }
        if e.zone_hints().is_empty() {
            all_zone_hinted = false;
        } else if e.zone_hints().contains(zone) {
            for_zone = true;
        }
    }
    if !any_ready {
        return (TopologyMode::None, TopologyDecision::NoReadyEndpoints);
    }
    if all_node_hinted && for_node {
        return (TopologyMode::PreferSameNode, TopologyDecision::UsingNodeHints);
    }
    match (all_zone_hinted, for_zone, zone.is_empty()) {
        (false, _, _) => (TopologyMode::None, TopologyDecision::SomeEndpointUnhinted),
        (true, true, _) => (TopologyMode::PreferSameZone, TopologyDecision::UsingZoneHints),
        (true, false, true) => (TopologyMode::None, TopologyDecision::NodeHasNoZone),
        (true, false, false) => (TopologyMode::None, TopologyDecision::NoEndpointForZone),
    }
}

/// Whether an endpoint is in the topology `mode` chose for a node in `zone`.
fn in_topology<E: Endpoint>(e: &E, mode: TopologyMode, zone: &str) -> bool {
    match mode {
        TopologyMode::None => true,
        TopologyMode::PreferSameNode => e.node_hint() == NodeHint::ThisNode,
        TopologyMode::PreferSameZone => e.zone_hints().contains(zone),
    }
}

/// Splits a service port's endpoints into what Cluster and Local traffic
/// policies use on a node in `node_zone` (its `topology.kubernetes.io/zone`
/// label).
pub fn categorize<'a, E: Endpoint>(
    endpoints: &'a [E],
    policies: TrafficPolicies,
    node_zone: Option<&str>,
) -> Categorized<'a, E> {
    let zone = node_zone.unwrap_or_default();
    let mut out = Categorized {
        cluster: None,
        local: None,
        all_reachable: Vec::new(),
        has_any_endpoints: false,
        topology: TopologyMode::None,
        topology_decision: TopologyDecision::NoReadyEndpoints,
        cluster_terminating_fallback: false,
        local_terminating_fallback: false,
    };

    if policies.uses_cluster_endpoints() {
        let (mode, decision) = topology_mode(endpoints, node_zone);
        out.topology = mode;
        out.topology_decision = decision;
        let picked = |fallback: bool, want: EndpointUse| {
            endpoints
                .iter()
                .filter(|e| endpoint_use(*e, false, mode, zone, fallback) == want)
                .collect::<Vec<&E>>()
        };
        let mut cluster = picked(false, EndpointUse::Used);
        if cluster.is_empty() {
            // No ready endpoint anywhere (topology was already dropped if
            // there were ready ones outside the zone): terminating fallback.
            cluster = picked(true, EndpointUse::TerminatingFallback);
            out.cluster_terminating_fallback = !cluster.is_empty();
        }
        out.has_any_endpoints = !cluster.is_empty();
        out.cluster = Some(cluster);
    }

    if !policies.uses_local_endpoints() {
        out.all_reachable = out.cluster.clone().unwrap_or_default();
        return out;
    }

    let usable = |e: &&E| e.is_ready() || serving_terminating(*e);
    out.has_any_endpoints |= endpoints.iter().any(|e| usable(&e));
    let picked = |fallback: bool, want: EndpointUse| {
        endpoints
            .iter()
            .filter(|e| endpoint_use(*e, true, TopologyMode::None, zone, fallback) == want)
            .collect::<Vec<&E>>()
    };
    let local_ready = picked(false, EndpointUse::Used);
    let local = if local_ready.is_empty() {
        let fallback = picked(true, EndpointUse::TerminatingFallback);
        out.local_terminating_fallback = !fallback.is_empty();
        fallback
    } else {
        local_ready
    };

    out.all_reachable = match &out.cluster {
        None => local.clone(),
        Some(cluster) => {
            // A set, not a scan of the cluster list per local endpoint: a
            // service of 100,000 endpoints has a thousand on a node.
            let mut all = cluster.clone();
            let mut seen: std::collections::HashSet<std::net::SocketAddr, slice_model::internal::FastHash> =
                if local.is_empty() {
                    Default::default()
                } else {
                    cluster.iter().map(|c| c.socket_addr()).collect()
                };
            for e in &local {
                if seen.insert(e.socket_addr()) {
                    all.push(e);
                }
            }
            all
        }
    };
    out.local = Some(local);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use slice_model::BaseEndpointInfo;

    fn ep(addr: &str, zones: &[&str], ready: bool, local: bool) -> BaseEndpointInfo {
        BaseEndpointInfo::new(addr.parse().unwrap())
            .local(local)
            .with_conditions(slice_model::Conditions {
                ready,
                serving: ready,
                terminating: false,
            })
            .with_zones(zones.iter().copied())
    }

    fn terminating(addr: &str, local: bool) -> BaseEndpointInfo {
        ep(addr, &[], false, local).with_conditions(slice_model::Conditions {
            ready: false,
            serving: true,
            terminating: true,
        })
    }

    fn names(v: &[&BaseEndpointInfo]) -> Vec<String> {
        let mut n: Vec<String> = v.iter().map(|e| e.addr.to_string()).collect();
        n.sort();
        n
    }

    const CLUSTER: TrafficPolicies = TrafficPolicies {
        internal_policy_local: false,
        external_policy_local: false,
        externally_accessible: false,
    };
    const ITP_LOCAL: TrafficPolicies = TrafficPolicies {
        internal_policy_local: true,
        external_policy_local: false,
        externally_accessible: false,
    };
    const ETP_LOCAL: TrafficPolicies = TrafficPolicies {
        internal_policy_local: false,
        external_policy_local: true,
        externally_accessible: true,
    };

    struct Case {
        name: &'static str,
        policies: TrafficPolicies,
        zone: Option<&'static str>,
        endpoints: Vec<BaseEndpointInfo>,
        cluster: Option<Vec<&'static str>>,
        local: Option<Vec<&'static str>>,
        all: Vec<&'static str>,
        any: bool,
    }

    fn four(zones: [&'static [&'static str]; 4], ready: [bool; 4], local: [bool; 4]) -> Vec<BaseEndpointInfo> {
        (0..4)
            .map(|i| ep(&format!("10.1.2.{}:80", i + 3), zones[i], ready[i], local[i]))
            .collect()
    }

    const A: &[&str] = &["zone-a"];
    const B: &[&str] = &["zone-b"];
    const C: &[&str] = &["zone-c"];
    const NONE: &[&str] = &[];
    const R: [bool; 4] = [true; 4];
    const REMOTE: [bool; 4] = [false; 4];

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "zone hints narrow cluster endpoints to this zone",
                policies: CLUSTER,
                zone: Some("zone-a"),
                endpoints: four([A, B, C, A], R, REMOTE),
                cluster: Some(vec!["10.1.2.3:80", "10.1.2.6:80"]),
                local: None,
                all: vec!["10.1.2.3:80", "10.1.2.6:80"],
                any: true,
            },
            Case {
                name: "one ready endpoint without a hint: hints ignored for all",
                policies: CLUSTER,
                zone: Some("zone-a"),
                endpoints: four([A, B, NONE, A], R, REMOTE),
                cluster: Some(vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"]),
                local: None,
                all: vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"],
                any: true,
            },
            Case {
                name: "node without a zone label: no filtering",
                policies: CLUSTER,
                zone: None,
                endpoints: four([A, B, C, A], R, REMOTE),
                cluster: Some(vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"]),
                local: None,
                all: vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"],
                any: true,
            },
            Case {
                name: "node in a zone nobody is hinted for: no filtering",
                policies: CLUSTER,
                zone: Some("zone-d"),
                endpoints: four([A, B, C, A], R, REMOTE),
                cluster: Some(vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"]),
                local: None,
                all: vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"],
                any: true,
            },
            Case {
                name: "unready endpoints are not used",
                policies: CLUSTER,
                zone: Some("zone-a"),
                endpoints: four([A, B, C, A], [true, true, true, false], REMOTE),
                cluster: Some(vec!["10.1.2.3:80"]),
                local: None,
                all: vec!["10.1.2.3:80"],
                any: true,
            },
            Case {
                name: "only unready endpoints in this zone: no filtering",
                policies: CLUSTER,
                zone: Some("zone-a"),
                endpoints: four([A, B, C, A], [false, true, true, false], REMOTE),
                cluster: Some(vec!["10.1.2.4:80", "10.1.2.5:80"]),
                local: None,
                all: vec!["10.1.2.4:80", "10.1.2.5:80"],
                any: true,
            },
            Case {
                name: "externalTrafficPolicy Local: topology applies to cluster, not local",
                policies: ETP_LOCAL,
                zone: Some("zone-a"),
                endpoints: four([A, B, C, A], R, [true, true, false, false]),
                cluster: Some(vec!["10.1.2.3:80", "10.1.2.6:80"]),
                local: Some(vec!["10.1.2.3:80", "10.1.2.4:80"]),
                all: vec!["10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"],
                any: true,
            },
            Case {
                name: "internalTrafficPolicy Local with no endpoints",
                policies: ITP_LOCAL,
                zone: None,
                endpoints: vec![],
                cluster: None,
                local: Some(vec![]),
                all: vec![],
                any: false,
            },
            Case {
                name: "internalTrafficPolicy Local, all endpoints remote: dropped, not rejected",
                policies: ITP_LOCAL,
                zone: None,
                endpoints: four([NONE; 4], R, REMOTE),
                cluster: None,
                local: Some(vec![]),
                all: vec![],
                any: true,
            },
            Case {
                name: "internalTrafficPolicy Local, local ready endpoints",
                policies: ITP_LOCAL,
                zone: None,
                endpoints: four([NONE; 4], R, [true, false, true, false]),
                cluster: None,
                local: Some(vec!["10.1.2.3:80", "10.1.2.5:80"]),
                all: vec!["10.1.2.3:80", "10.1.2.5:80"],
                any: true,
            },
            Case {
                name: "cluster falls back to serving-terminating when nothing is ready",
                policies: CLUSTER,
                zone: None,
                endpoints: vec![
                    terminating("10.0.0.1:80", false),
                    ep("10.0.0.2:80", NONE, false, false),
                    terminating("10.0.0.3:80", true),
                ],
                cluster: Some(vec!["10.0.0.1:80", "10.0.0.3:80"]),
                local: None,
                all: vec!["10.0.0.1:80", "10.0.0.3:80"],
                any: true,
            },
            Case {
                name: "no fallback while anything is ready",
                policies: CLUSTER,
                zone: None,
                endpoints: vec![terminating("10.0.0.1:80", false), ep("10.0.0.2:80", NONE, true, false)],
                cluster: Some(vec!["10.0.0.2:80"]),
                local: None,
                all: vec!["10.0.0.2:80"],
                any: true,
            },
            Case {
                name: "local falls back to local serving-terminating; cluster keeps remote ready",
                policies: ETP_LOCAL,
                zone: None,
                endpoints: vec![terminating("10.0.0.1:80", true), ep("10.0.0.2:80", NONE, true, false)],
                cluster: Some(vec!["10.0.0.2:80"]),
                local: Some(vec!["10.0.0.1:80"]),
                all: vec!["10.0.0.1:80", "10.0.0.2:80"],
                any: true,
            },
            Case {
                name: "not serving and not ready: nothing usable anywhere",
                policies: ETP_LOCAL,
                zone: None,
                endpoints: vec![ep("10.0.0.1:80", NONE, false, true)],
                cluster: Some(vec![]),
                local: Some(vec![]),
                all: vec![],
                any: false,
            },
        ]
    }

    #[test]
    fn categorize_matches_kube_proxy() {
        for c in cases() {
            let got = categorize(&c.endpoints, c.policies, c.zone);
            let want = |v: &Option<Vec<&str>>| {
                v.as_ref().map(|v| {
                    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
                    v.sort();
                    v
                })
            };
            assert_eq!(
                got.cluster.as_deref().map(names),
                want(&c.cluster),
                "{}: cluster",
                c.name
            );
            assert_eq!(got.local.as_deref().map(names), want(&c.local), "{}: local", c.name);
            assert_eq!(
                names(&got.all_reachable),
                want(&Some(c.all.clone())).unwrap(),
                "{}: all",
                c.name
            );
            assert_eq!(got.has_any_endpoints, c.any, "{}: has_any_endpoints", c.name);
        }
    }

    #[test]
    fn decisions_and_fallbacks_are_reported() {
        let e = four([A, B, C, A], R, REMOTE);
        assert_eq!(
            topology_mode(&e, Some("zone-a")),
            (TopologyMode::PreferSameZone, TopologyDecision::UsingZoneHints)
        );
        assert_eq!(topology_mode(&e, None).1, TopologyDecision::NodeHasNoZone);
        assert_eq!(topology_mode(&e, Some("zone-z")).1, TopologyDecision::NoEndpointForZone);
        let e = four([A, NONE, C, A], R, REMOTE);
        assert_eq!(
            topology_mode(&e, Some("zone-a")).1,
            TopologyDecision::SomeEndpointUnhinted
        );
        let t = [terminating("10.0.0.1:80", true)];
        let c = categorize(&t, ETP_LOCAL, None);
        assert!(c.cluster_terminating_fallback && c.local_terminating_fallback);
        assert_eq!(c.topology_decision, TopologyDecision::NoReadyEndpoints);
    }

    /// Four ready remote endpoints in zones a, b, c, a, with node hints.
    fn node_hinted(hints: [NodeHint; 4]) -> Vec<BaseEndpointInfo> {
        four([A, B, C, A], R, REMOTE)
            .into_iter()
            .zip(hints)
            .map(|(e, h)| e.with_node_hint(h))
            .collect()
    }

    fn chosen(endpoints: &[BaseEndpointInfo], zone: &str) -> (Vec<String>, TopologyDecision) {
        let c = categorize(endpoints, CLUSTER, Some(zone));
        (names(&c.cluster.unwrap_or_default()), c.topology_decision)
    }

    // kube-proxy's `topologyModeFromHints`: node hints first, all or
    // nothing over ready endpoints; then zone hints.
    #[test]
    fn node_hints_come_before_zone_hints() {
        use NodeHint::{OtherNodes as Other, ThisNode as This, Unhinted as No};
        let all = ["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"].map(String::from);
        let zone_a = vec!["10.1.2.3:80".to_string(), "10.1.2.6:80".into()];

        let e = node_hinted([Other, This, Other, Other]);
        assert_eq!(
            chosen(&e, "zone-a"),
            (vec!["10.1.2.4:80".into()], TopologyDecision::UsingNodeHints),
            "every ready endpoint node-hinted, one for this node: only it, whatever the zones say"
        );
        assert_eq!(
            chosen(&node_hinted([This, This, Other, Other]), "zone-z").0,
            ["10.1.2.3:80", "10.1.2.4:80"]
        );
        assert_eq!(
            chosen(&node_hinted([Other; 4]), "zone-a"),
            (zone_a.clone(), TopologyDecision::UsingZoneHints),
            "no endpoint for this node: zone hints decide"
        );
        assert_eq!(
            chosen(&node_hinted([This, Other, No, Other]), "zone-a"),
            (zone_a, TopologyDecision::UsingZoneHints),
            "one ready endpoint without a node hint: node hints ignored for all"
        );
        assert_eq!(
            chosen(&node_hinted([Other; 4]), "zone-z"),
            (all.to_vec(), TopologyDecision::NoEndpointForZone)
        );
        // An unready endpoint without a hint does not count.
        let mut e = node_hinted([No, This, Other, Other]);
        e[0] = e[0].clone().with_conditions(slice_model::Conditions::NOT_READY);
        assert_eq!(
            chosen(&e, "zone-z"),
            (vec!["10.1.2.4:80".into()], TopologyDecision::UsingNodeHints)
        );
        // Local policy ignores hints of both kinds.
        let e: Vec<_> = node_hinted([Other, This, Other, Other])
            .into_iter()
            .map(|e| {
                let local = e.addr.port() == 80 && e.addr.ip().to_string() == "10.1.2.3";
                e.local(local)
            })
            .collect();
        let c = categorize(&e, ETP_LOCAL, Some("zone-b"));
        assert_eq!(names(&c.local.unwrap()), ["10.1.2.3:80"]);
        assert_eq!(names(&c.cluster.unwrap()), ["10.1.2.4:80"]);
    }

    #[test]
    fn policies_follow_the_service() {
        use slice_model::{IpFamily, Protocol, ServiceInfo, ServicePort, ServiceType, TrafficPolicy};
        let mut svc = ServiceInfo::new(slice_model::ServiceName::new("ns", "s"));
        svc.cluster_ips = vec!["10.96.0.1".parse().unwrap()];
        svc.ports = vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: std::num::NonZeroU16::new(80).unwrap(),
            node_port: std::num::NonZeroU16::new(30080),
            app_protocol: None,
        }];
        let of = |svc: &ServiceInfo| TrafficPolicies::of(&svc.ports_for(IpFamily::V4)[0]);
        assert_eq!(of(&svc), CLUSTER, "a ClusterIP service ignores its node port");
        svc.service_type = ServiceType::NodePort;
        svc.external_traffic_policy = TrafficPolicy::Local;
        let p = of(&svc);
        assert!(p.externally_accessible && p.uses_cluster_endpoints() && p.uses_local_endpoints());
        svc.internal_traffic_policy = TrafficPolicy::Local;
        let p = of(&svc);
        assert!(!p.uses_cluster_endpoints() && p.uses_local_endpoints());
    }

    /// Every endpoint kind (conditions, locality, zone hints), in lists of
    /// up to three, under every policy and with and without a zone: the
    /// reason `use_of` gives is "used" exactly for the endpoints the groups
    /// hold, and each "not used" reason is true of the endpoint.
    #[test]
    fn use_of_says_used_exactly_for_the_endpoints_categorize_picked() {
        let mut kinds = Vec::new();
        for bits in 0..8u8 {
            let conditions = slice_model::Conditions {
                ready: bits & 1 != 0,
                serving: bits & 2 != 0,
                terminating: bits & 4 != 0,
            };
            for local in [false, true] {
                for zones in [&[][..], &["a"][..], &["b"][..]] {
                    kinds.push((conditions, local, zones));
                }
            }
        }
        let make = |i: usize, k: usize| {
            let (c, local, zones) = kinds[k];
            BaseEndpointInfo::new(format!("10.0.{i}.{k}:80").parse().unwrap())
                .local(local)
                .with_conditions(c)
                .with_zones(zones.iter().copied())
        };
        let mut lists: Vec<Vec<BaseEndpointInfo>> = vec![Vec::new()];
        for a in 0..kinds.len() {
            lists.push(vec![make(0, a)]);
            for b in 0..kinds.len() {
                lists.push(vec![make(0, a), make(1, b)]);
                lists.push(vec![make(0, a), make(1, b), make(2, (a * 7 + b * 13) % kinds.len())]);
            }
        }
        let mut checked = 0u64;
        for eps in &lists {
            for bits in 0..8u8 {
                let policies = TrafficPolicies {
                    internal_policy_local: bits & 1 != 0,
                    external_policy_local: bits & 2 != 0,
                    externally_accessible: bits & 4 != 0,
                };
                for zone in [None, Some("a")] {
                    let c = categorize(eps, policies, zone);
                    for (local_policy, group) in [(false, &c.cluster), (true, &c.local)] {
                        let Some(group) = group else { continue };
                        for e in eps {
                            let why = c.use_of(e, local_policy, zone);
                            let picked = group.iter().any(|g| std::ptr::eq(*g, e));
                            assert_eq!(
                                why.is_used(),
                                picked,
                                "{why:?} for {e:?} in {eps:?} ({policies:?}, {zone:?})"
                            );
                            match why {
                                EndpointUse::NotLocal => assert!(local_policy && !e.is_local()),
                                EndpointUse::NotReadyNorServing => assert!(!e.is_ready() && !e.is_serving()),
                                EndpointUse::TerminatingWhileReadyExist => assert!(!e.is_ready() && e.is_terminating()),
                                EndpointUse::OutsideTopology(mode) => {
                                    assert!(e.is_ready() && mode != TopologyMode::None && !local_policy)
                                }
                                EndpointUse::TerminatingFallback => {
                                    assert!(e.is_serving() && e.is_terminating())
                                }
                                EndpointUse::Used => assert!(e.is_ready()),
                                EndpointUse::ServingNotReady => assert!(e.is_serving() && !e.is_ready()),
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 200_000, "{checked}");
    }
}
