//! The table, its sets and maps ([`SetId`]) and its chains ([`ChainId`]),
//! named once: the renderer, the kernel model and the tracer all use these
//! types, never literal names.

use std::fmt;

use slice_model::{IpFamily, Protocol};

/// Where a table lives and which traffic it sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The node's own namespace (kube-proxy's place): traffic from pods,
    /// the node and outside; cluster, external and load-balancer IPs and
    /// node ports.
    #[default]
    Node,
    /// One pod's namespace (multus mode): only what the pod itself sends,
    /// to cluster IPs, with its source kept (no masquerading).
    Pod,
}

/// The table every proxyd rule of a node lives in (`ip proxyd`, `ip6 proxyd`).
pub const TABLE: &str = "proxyd";

/// The table in each pod's namespace in multus mode.
pub const POD_TABLE: &str = "proxyd-multus";

/// The table a transaction is checked in (never committed): a scratch
/// copy of a table's services, so that a check neither depends on nor
/// disturbs the table in use.
pub const CHECK_TABLE: &str = "proxyd-check";

/// The version of the table's fixed shape (its skeleton of sets and
/// chains), in the canary's name. Bumped whenever the skeleton's rules
/// change: a full sync rewrites a table in place only when it has this
/// shape (the slot chains' rules cannot be rewritten once their maps hold
/// elements).
pub const SHAPE: u32 = 2;

/// The largest endpoint count served by the shared slot maps; a frontend
/// with more endpoints gets a chain of its own.
pub const MAX_SLOTS: u8 = 16;

/// The packet mark bit that asks for masquerading (kube-proxy's default,
/// bit 14).
pub const MASQUERADE_MARK: u32 = 0x4000;

/// The words nft uses for a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyWords {
    /// Table family and address match prefix: `ip` or `ip6`.
    pub table: &'static str,
    /// Address data type: `ipv4_addr` or `ipv6_addr`.
    pub addr_type: &'static str,
}

impl FamilyWords {
    /// The words for `family`.
    pub fn of(family: IpFamily) -> Self {
        match family {
            IpFamily::V4 => Self {
                table: "ip",
                addr_type: "ipv4_addr",
            },
            IpFamily::V6 => Self {
                table: "ip6",
                addr_type: "ipv6_addr",
            },
        }
    }
}

/// What a set holds, which decides how it is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// Plain set of keys.
    Set,
    /// Map from key to an endpoint (`addr . port`).
    EndpointMap,
    /// Map from key to a verdict.
    VerdictMap,
}

/// The keys a set holds ([`crate::element::Key`]'s variants, with what
/// each set adds to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyShape {
    /// A port alone.
    Port,
    /// An address of the table's family.
    Addr,
    /// Two addresses.
    AddrPair,
    /// A frontend: a node port's (protocol, port), or an address's.
    Frontend {
        /// A node port's.
        node_port: bool,
    },
    /// A frontend and a slot below `width`.
    Slot {
        /// A node port's frontend.
        node_port: bool,
        /// How many slots the map has.
        width: u8,
    },
    /// A position.
    Index,
    /// A client address and an endpoint (`saddr . addr . port`).
    Client,
}

/// A set or map of the table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum SetId {
    /// One constant element that every incremental transaction re-adds: if
    /// the table was replaced from outside, the add fails and the next sync
    /// is a full one. Its name carries [`SHAPE`]: a table whose canary has
    /// another name was written with other fixed rules, and is replaced
    /// whole rather than rewritten in place.
    Canary,
    /// Every cluster IP of this family: traffic to one from outside the
    /// cluster CIDRs is masqueraded, and on a port that is not a service
    /// port it is rejected.
    ClusterIps,
    /// Frontend (address, protocol, port) -> goto the chain that handles it,
    /// for frontends with chains of their own.
    ServiceChains,
    /// Frontends with N endpoints, balanced through the slot map of that
    /// width. A plain set rather than a verdict-map element: adding a
    /// verdict element makes the kernel revalidate every jump of the table
    /// at commit, which at tens of thousands of services costs more than
    /// the rest of a small transaction.
    SlotFrontends(u8),
    /// Node ports with N endpoints, the same way.
    NodePortSlotFrontends(u8),
    /// Node port (protocol, port) -> goto the chain that handles it.
    NodePortChains,
    /// Frontends whose traffic is always masqueraded.
    MasqFrontends,
    /// Node ports whose traffic is always masqueraded.
    MasqNodePorts,
    /// Frontends without endpoints: reject.
    NoEndpoints,
    /// Frontends without endpoints usable here: drop.
    NoLocalEndpoints,
    /// Node ports without endpoints: reject.
    NodePortNoEndpoints,
    /// Node ports without endpoints usable here: drop.
    NodePortNoLocalEndpoints,
    /// Local endpoint pairs (addr . addr): hairpin traffic is masqueraded.
    Hairpin,
    /// Frontends with N endpoints: (frontend . slot) -> endpoint.
    ServiceSlots(u8),
    /// Node ports with N endpoints: (protocol . port . slot) -> endpoint.
    NodePortSlots(u8),
    /// The endpoints of one chain of a port with more than one of them:
    /// position -> endpoint (named after the chain). nft types its value
    /// by the protocol's port (`tcp dport`), so the protocol is part of it.
    Backends(#[serde(with = "crate::protocol::stored")] Protocol, String),
    /// A ClientIP-affinity port's recent clients (`ns/name/proto/port`):
    /// each (client address . endpoint) a client was sent to, timed out on
    /// its own. Packets add the elements; proxyd never writes them. One
    /// set per port, not per endpoint: the kernel finds a set by name by
    /// walking every set of the table, so a set per endpoint made a port's
    /// first write grow with the square of its endpoints.
    Clients(String),
    /// The endpoint chains of one chain of a ClientIP-affinity port:
    /// position -> goto the endpoint's chain (named after the chain).
    Picks(String),
    /// The UDP and SCTP node ports, where the family's loopback address
    /// answers node ports through the relay ([`crate::DataplaneConfig::loopback_relay`]):
    /// the relay answers TCP only, so traffic to the others on loopback is
    /// rejected and counted, as kube-proxy's localhost node ports do.
    NodePortsNotRelayed,
}

impl SetId {
    /// What the set holds.
    pub fn kind(&self) -> SetKind {
        match self {
            Self::ServiceChains | Self::NodePortChains | Self::Picks(_) => SetKind::VerdictMap,
            Self::ServiceSlots(_) | Self::NodePortSlots(_) | Self::Backends(..) => SetKind::EndpointMap,
            _ => SetKind::Set,
        }
    }

    /// The keys it holds.
    pub fn key_shape(&self) -> KeyShape {
        match self {
            Self::Canary => KeyShape::Port,
            Self::ClusterIps => KeyShape::Addr,
            Self::Clients(_) => KeyShape::Client,
            Self::Hairpin => KeyShape::AddrPair,
            Self::ServiceChains
            | Self::SlotFrontends(_)
            | Self::MasqFrontends
            | Self::NoEndpoints
            | Self::NoLocalEndpoints => KeyShape::Frontend { node_port: false },
            Self::NodePortChains
            | Self::NodePortSlotFrontends(_)
            | Self::MasqNodePorts
            | Self::NodePortNoEndpoints
            | Self::NodePortNoLocalEndpoints
            | Self::NodePortsNotRelayed => KeyShape::Frontend { node_port: true },
            Self::ServiceSlots(n) => KeyShape::Slot {
                node_port: false,
                width: *n,
            },
            Self::NodePortSlots(n) => KeyShape::Slot {
                node_port: true,
                width: *n,
            },
            Self::Backends(..) | Self::Picks(_) => KeyShape::Index,
        }
    }

    /// nft's declaration body (type, flags).
    pub fn declaration(&self, words: FamilyWords) -> String {
        let (a, at) = (words.table, words.addr_type);
        let frontend = format!("{at} . inet_proto . inet_service");
        let node_port = "inet_proto . inet_service";
        match self {
            Self::Canary => "type inet_service".into(),
            Self::ClusterIps => format!("type {at}"),
            Self::ServiceChains => format!("type {frontend} : verdict"),
            Self::NodePortChains => format!("type {node_port} : verdict"),
            Self::MasqFrontends | Self::NoEndpoints | Self::NoLocalEndpoints | Self::SlotFrontends(_) => {
                format!("type {frontend}")
            }
            Self::MasqNodePorts
            | Self::NodePortNoEndpoints
            | Self::NodePortNoLocalEndpoints
            | Self::NodePortsNotRelayed
            | Self::NodePortSlotFrontends(_) => {
                format!("type {node_port}")
            }
            Self::Hairpin => format!("type {at} . {at}"),
            Self::ServiceSlots(n) => {
                format!("typeof {a} daddr . meta l4proto . th dport . numgen random mod {n} : {a} daddr . th dport")
            }
            Self::NodePortSlots(n) => {
                format!("typeof meta l4proto . th dport . numgen random mod {n} : {a} daddr . th dport")
            }
            Self::Clients(_) => format!("typeof {a} saddr . {a} daddr . th dport; flags dynamic,timeout"),
            Self::Picks(_) => "typeof numgen random mod 2 : verdict".into(),
            Self::Backends(p, _) => format!(
                "typeof numgen random mod 2 : {a} daddr . {} dport",
                crate::protocol::proto(*p)
            ),
        }
    }

    /// Whether packets write its elements (a ClientIP-affinity port's
    /// clients): a sync never reads, empties or refills it, so clients
    /// stay sticky across syncs and restarts.
    pub fn written_by_packets(&self) -> bool {
        matches!(self, Self::Clients(_))
    }

    /// The sets of the fixed skeleton of a scope, in declaration order.
    pub fn skeleton(scope: Scope) -> Vec<Self> {
        if scope == Scope::Pod {
            let mut all = vec![
                Self::Canary,
                Self::ClusterIps,
                Self::ServiceChains,
                Self::NoEndpoints,
                Self::NoLocalEndpoints,
            ];
            for n in 1..=MAX_SLOTS {
                all.push(Self::SlotFrontends(n));
                all.push(Self::ServiceSlots(n));
            }
            return all;
        }
        let mut all = vec![
            Self::Canary,
            Self::ClusterIps,
            Self::ServiceChains,
            Self::NodePortChains,
            Self::MasqFrontends,
            Self::MasqNodePorts,
            Self::NoEndpoints,
            Self::NoLocalEndpoints,
            Self::NodePortNoEndpoints,
            Self::NodePortNoLocalEndpoints,
            Self::Hairpin,
            Self::NodePortsNotRelayed,
        ];
        for n in 1..=MAX_SLOTS {
            all.push(Self::SlotFrontends(n));
            all.push(Self::NodePortSlotFrontends(n));
            all.push(Self::ServiceSlots(n));
            all.push(Self::NodePortSlots(n));
        }
        all
    }

    /// The set of frontends with `n` endpoints of a frontend kind.
    pub fn slot_frontends(node_port: bool, n: u8) -> Self {
        if node_port {
            Self::NodePortSlotFrontends(n)
        } else {
            Self::SlotFrontends(n)
        }
    }

    /// The slot map of width `n` of a frontend kind.
    pub fn slots(node_port: bool, n: u8) -> Self {
        if node_port {
            Self::NodePortSlots(n)
        } else {
            Self::ServiceSlots(n)
        }
    }
}

impl fmt::Display for SetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Canary => write!(f, "canary-{SHAPE}"),
            Self::ClusterIps => f.write_str("cluster-ips"),
            Self::ServiceChains => f.write_str("service-chains"),
            Self::NodePortChains => f.write_str("nodeport-chains"),
            Self::MasqFrontends => f.write_str("masq-frontends"),
            Self::MasqNodePorts => f.write_str("masq-nodeports"),
            Self::NoEndpoints => f.write_str("no-endpoints"),
            Self::NoLocalEndpoints => f.write_str("no-local-endpoints"),
            Self::NodePortNoEndpoints => f.write_str("nodeport-no-endpoints"),
            Self::NodePortNoLocalEndpoints => f.write_str("nodeport-no-local-endpoints"),
            Self::Hairpin => f.write_str("hairpin"),
            Self::SlotFrontends(n) => write!(f, "slot-frontends-{n}"),
            Self::NodePortSlotFrontends(n) => write!(f, "nodeport-slot-frontends-{n}"),
            Self::ServiceSlots(n) => write!(f, "service-slots-{n}"),
            Self::NodePortSlots(n) => write!(f, "nodeport-slots-{n}"),
            Self::Backends(_, part) => write!(f, "backends-{part}"),
            Self::Clients(part) => write!(f, "clients-{part}"),
            Self::Picks(part) => write!(f, "picks-{part}"),
            Self::NodePortsNotRelayed => f.write_str("nodeports-not-relayed"),
        }
    }
}

/// A named counter of the table: packets a rule counts, read back for a
/// metric. Named counters are objects of the table: a rewrite of the
/// chains keeps their values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum CounterId {
    /// Packets of this protocol to a node port on the loopback address,
    /// which the localhost relay does not answer (UDP, SCTP), rejected
    /// (kube-proxy's `kubeproxy_nftables_localhost_nodeport_rejected_packets_total`).
    LocalhostNodePortRejected(#[serde(with = "crate::protocol::stored")] Protocol),
}

impl CounterId {
    /// The counters of a table whose loopback address answers node ports
    /// through the relay (none otherwise).
    pub fn of_loopback_relay() -> [Self; 2] {
        [
            Self::LocalhostNodePortRejected(Protocol::Udp),
            Self::LocalhostNodePortRejected(Protocol::Sctp),
        ]
    }
}

impl fmt::Display for CounterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LocalhostNodePortRejected(p) => {
                write!(f, "localhost-nodeport-rejected-{}", crate::protocol::proto(*p))
            }
        }
    }
}

/// The one of `candidates` whose name is `name`.
fn named<T: fmt::Display>(candidates: impl IntoIterator<Item = T>, name: &str) -> Option<T> {
    candidates.into_iter().find(|c| c.to_string() == name)
}

impl SetId {
    /// The set named `name` (what [`Display`](fmt::Display) writes), if it
    /// is one of proxyd's.
    pub fn from_name(name: &str) -> Option<Self> {
        if let Some(fixed) = named(Self::skeleton(Scope::Node), name) {
            return Some(fixed);
        }
        if let Some(part) = name.strip_prefix("clients-") {
            return Some(Self::Clients(part.to_owned()));
        }
        if let Some(part) = name.strip_prefix("picks-") {
            return Some(Self::Picks(part.to_owned()));
        }
        // A backend map is named after its chain, `…/proto/port`: the
        // protocol is the second part from the end.
        let part = name.strip_prefix("backends-")?;
        let protocol = match part.rsplit('/').nth(1)? {
            "tcp" => Protocol::Tcp,
            "udp" => Protocol::Udp,
            "sctp" => Protocol::Sctp,
            _ => return None,
        };
        Some(Self::Backends(protocol, part.to_owned()))
    }
}

impl ChainId {
    /// The chain named `name` (what [`Display`](fmt::Display) writes), if
    /// it is one of proxyd's.
    pub fn from_name(name: &str) -> Option<Self> {
        let fixed = [
            Self::MarkForMasquerade,
            Self::Services,
            Self::NodePorts,
            Self::ClusterIpsCheck,
            Self::NatPrerouting,
            Self::NatOutput,
            Self::NatPostrouting,
            Self::FilterInput,
            Self::FilterForward,
            Self::FilterOutput,
            Self::FilterOutputPostDnat,
        ];
        let slots = (1..=MAX_SLOTS).flat_map(|n| [Self::ServiceSlots(n), Self::NodePortSlots(n)]);
        if let Some(fixed) = named(fixed.into_iter().chain(slots), name) {
            return Some(fixed);
        }
        let own = [
            ("svc-", Self::Svc as fn(String) -> Self),
            ("ext-", Self::Ext),
            ("fw-", Self::Fw),
            ("ep-", Self::Endpoint),
        ];
        own.into_iter()
            .find_map(|(prefix, make)| name.strip_prefix(prefix).map(|rest| make(rest.to_owned())))
    }
}

/// A netfilter hook a base chain is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// Packets arriving from an interface, before routing.
    Prerouting,
    /// Packets for this host, after routing.
    Input,
    /// Packets routed through this host.
    Forward,
    /// Packets this host sends.
    Output,
    /// Packets leaving, after routing.
    Postrouting,
}

/// How a base chain is attached: its type, hook and priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseChain {
    /// `nat` or `filter`.
    pub nat: bool,
    /// The hook.
    pub hook: Hook,
    /// The priority (lower runs first).
    pub priority: i32,
}

/// A chain of the table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum ChainId {
    /// Sets the masquerade mark.
    MarkForMasquerade,
    /// Classifies traffic to frontends (nat).
    Services,
    /// Classifies traffic to node ports (nat; entered for local
    /// destinations only).
    NodePorts,
    /// Exact load balancing over a frontend's N endpoints in the slot maps.
    ServiceSlots(u8),
    /// The same for node ports.
    NodePortSlots(u8),
    /// Traffic to cluster IPs that no service port took.
    ClusterIpsCheck,
    /// Base chain: nat prerouting.
    NatPrerouting,
    /// Base chain: nat output.
    NatOutput,
    /// Base chain: nat postrouting (masquerade).
    NatPostrouting,
    /// Base chain: filter input (no endpoints).
    FilterInput,
    /// Base chain: filter forward (no endpoints, cluster-IP guards).
    FilterForward,
    /// Base chain: filter output, before DNAT (no endpoints).
    FilterOutput,
    /// Base chain: filter output, after DNAT (cluster-IP guards).
    FilterOutputPostDnat,
    /// A port's internal (cluster IP) chain; the text is `ns/name/proto/port`.
    Svc(String),
    /// A port's external chain.
    Ext(String),
    /// A port's load-balancer source-range firewall chain.
    Fw(String),
    /// One endpoint of an affinity port (`ns/name/proto/port/addr/port`).
    Endpoint(String),
}

impl ChainId {
    /// The hook, for base chains.
    pub fn base(&self) -> Option<BaseChain> {
        let (nat, hook, priority) = match self {
            Self::NatPrerouting => (true, Hook::Prerouting, -100),
            Self::NatOutput => (true, Hook::Output, -100),
            Self::NatPostrouting => (true, Hook::Postrouting, 100),
            Self::FilterInput => (false, Hook::Input, -110),
            Self::FilterForward => (false, Hook::Forward, -110),
            Self::FilterOutput => (false, Hook::Output, -110),
            Self::FilterOutputPostDnat => (false, Hook::Output, -90),
            _ => return None,
        };
        Some(BaseChain { nat, hook, priority })
    }

    /// Whether the chain belongs to one service port (rather than the
    /// fixed skeleton).
    pub fn is_service_chain(&self) -> bool {
        matches!(self, Self::Svc(_) | Self::Ext(_) | Self::Fw(_) | Self::Endpoint(_))
    }

    /// The slot chain for a frontend kind and endpoint count.
    pub fn slots(node_port: bool, n: u8) -> Self {
        if node_port {
            Self::NodePortSlots(n)
        } else {
            Self::ServiceSlots(n)
        }
    }
}

impl fmt::Display for ChainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MarkForMasquerade => f.write_str("mark-for-masquerade"),
            Self::Services => f.write_str("services"),
            Self::NodePorts => f.write_str("nodeports"),
            Self::ServiceSlots(n) => write!(f, "slots-{n}"),
            Self::NodePortSlots(n) => write!(f, "nodeport-slots-{n}"),
            Self::ClusterIpsCheck => f.write_str("cluster-ips-check"),
            Self::NatPrerouting => f.write_str("nat-prerouting"),
            Self::NatOutput => f.write_str("nat-output"),
            Self::NatPostrouting => f.write_str("nat-postrouting"),
            Self::FilterInput => f.write_str("filter-input"),
            Self::FilterForward => f.write_str("filter-forward"),
            Self::FilterOutput => f.write_str("filter-output"),
            Self::FilterOutputPostDnat => f.write_str("filter-output-post-dnat"),
            Self::Svc(b) => write!(f, "svc-{b}"),
            Self::Ext(b) => write!(f, "ext-{b}"),
            Self::Fw(b) => write!(f, "fw-{b}"),
            Self::Endpoint(b) => write!(f, "ep-{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_what_wrote_them() {
        let mut sets = SetId::skeleton(Scope::Node);
        sets.push(SetId::Clients("ns/a/tcp/80".into()));
        sets.push(SetId::Picks("svc-ns/a/tcp/80".into()));
        sets.push(SetId::Backends(Protocol::Udp, "svc-ns/a/udp/53".into()));
        for set in sets {
            assert_eq!(SetId::from_name(&set.to_string()), Some(set.clone()), "{set}");
        }
        let mut chains: Vec<ChainId> = crate::skeleton::chains(&crate::tests::config())
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        chains.extend([
            ChainId::Svc("ns/a/tcp/80".into()),
            ChainId::Ext("ns/a/tcp/80".into()),
            ChainId::Fw("ns/a/tcp/80".into()),
            ChainId::Endpoint("ns/a/tcp/80/10.0.0.1/8080".into()),
        ]);
        for chain in chains {
            assert_eq!(ChainId::from_name(&chain.to_string()), Some(chain.clone()), "{chain}");
        }
        for foreign in ["canary", "slots-17", "slots-0", "backends-x", "KUBE-SERVICES", ""] {
            assert!(
                SetId::from_name(foreign).is_none() && ChainId::from_name(foreign).is_none(),
                "{foreign}"
            );
        }
        assert_eq!(SetId::from_name("canary"), None, "an older shape's canary");
        assert_eq!(ChainId::from_name("slots-17"), None);
    }
}
