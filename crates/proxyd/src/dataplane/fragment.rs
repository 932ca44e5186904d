//! The ruleset's shape: what one service contributes to the table.
//!
//! Most service ports need no chain of their own: their frontends are
//! elements of shared maps and sets, looked up by a handful of fixed rules
//! (see [`super::nft`]). Adding or changing such a service costs a few map
//! elements, whatever the cluster's size. A port gets chains only when a
//! fixed rule cannot express it:
//!
//! - more than [`SLOTS`] endpoints (an exact `numgen random mod N`),
//! - ClientIP affinity (a timed set and a chain per endpoint),
//! - `externalTrafficPolicy: Local` (pods and the node itself use the
//!   cluster endpoints; others only local ones, with their source kept),
//! - load-balancer source ranges (a firewall chain).
//!
//! Such ports are rarer, and each still changes on its own.

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use slice_model::{IpFamily, Protocol};

use super::desired::{DataplaneConfig, EndpointGroup, GroupVerdict, ServiceTarget};

/// The most slots a frontend has in the shared slot maps.
pub const SLOTS: usize = 16;

/// Slot-map widths: a frontend with N endpoints uses the smallest width of
/// at least N, so a two-endpoint service is two elements, not sixteen.
pub const WIDTHS: [usize; 5] = [1, 2, 4, 8, 16];

/// The slot maps keyed by address, protocol and port, by width.
pub const SERVICE_SLOT_MAPS: [&str; 5] = [
    "service-slots-1",
    "service-slots-2",
    "service-slots-4",
    "service-slots-8",
    "service-slots-16",
];

/// The slot maps keyed by node port, by width.
pub const NODEPORT_SLOT_MAPS: [&str; 5] = [
    "nodeport-slots-1",
    "nodeport-slots-2",
    "nodeport-slots-4",
    "nodeport-slots-8",
    "nodeport-slots-16",
];

/// The width for `n` endpoints (1..=SLOTS).
pub fn width(n: usize) -> usize {
    WIDTHS.iter().copied().find(|w| *w >= n).unwrap_or(SLOTS)
}

/// The slot map of a frontend kind and width.
pub fn slot_map(node_port: bool, width: usize) -> &'static str {
    let i = WIDTHS.iter().position(|w| *w == width).unwrap_or(WIDTHS.len() - 1);
    if node_port {
        NODEPORT_SLOT_MAPS[i]
    } else {
        SERVICE_SLOT_MAPS[i]
    }
}

/// Where traffic for a service arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frontend {
    /// A cluster, external or load-balancer IP and port.
    Ip {
        /// The address.
        addr: IpAddr,
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
    },
    /// A port on every local address of the node.
    NodePort {
        /// The protocol.
        protocol: Protocol,
        /// The node port.
        port: u16,
    },
}

/// The set or map an element lives in. Each exists twice: keyed by
/// address, protocol and port (`Ip` frontends) and by protocol and port
/// (node ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Membership {
    /// The verdict map: frontend -> goto the port's chain.
    Chains,
    /// Masquerade all traffic to the frontend.
    Masquerade,
    /// Masquerade traffic from outside the cluster CIDRs (cluster IPs).
    MasqueradeFromOutside,
    /// No endpoints: reject.
    Reject,
    /// No endpoints usable here: drop.
    Drop,
}

impl Membership {
    /// The set's name for frontends of this kind.
    pub fn set_name(self, node_port: bool) -> &'static str {
        match (self, node_port) {
            (Self::Chains, false) => "service-chains",
            (Self::Chains, true) => "nodeport-chains",
            (Self::Masquerade, false) => "masq-frontends",
            (Self::Masquerade, true) => "masq-nodeports",
            // Node ports are never masqueraded by source (the masquerade
            // decision for them is the policy's), so both map to one set.
            (Self::MasqueradeFromOutside, _) => "outside-masq-frontends",
            (Self::Reject, false) => "no-endpoints",
            (Self::Reject, true) => "nodeport-no-endpoints",
            (Self::Drop, false) => "no-local-endpoints",
            (Self::Drop, true) => "nodeport-no-local-endpoints",
        }
    }
}

/// One element a service contributes to a shared set or map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Element {
    /// The slots of a frontend ([`width`] of its endpoint count), filled
    /// round-robin.
    Slots {
        /// The frontend.
        frontend: Frontend,
        /// Its endpoints (1..=SLOTS), sorted.
        endpoints: Vec<SocketAddr>,
    },
    /// The frontend jumps to one of the port's chains.
    Chain {
        /// The frontend.
        frontend: Frontend,
        /// The chain.
        chain: String,
    },
    /// The frontend is a member of a plain set.
    Member {
        /// Which set.
        set: Membership,
        /// The frontend.
        frontend: Frontend,
    },
}

/// A chain owned by one service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainDef {
    /// The chain's name.
    pub name: String,
    /// Its rules, in order.
    pub rules: Vec<String>,
}

/// Everything one service contributes to the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fragment {
    /// Elements of shared sets and maps.
    pub elements: Vec<Element>,
    /// Chains of its own.
    pub chains: Vec<ChainDef>,
    /// ClientIP affinity sets of its own (one per endpoint: the clients
    /// it served recently; each element times out on its own).
    pub affinity_sets: Vec<String>,
    /// Local endpoints it sends to: hairpin traffic (an endpoint reaching
    /// itself through the service) is masqueraded. Shared between services,
    /// so counted by the programmed view.
    pub hairpin: Vec<IpAddr>,
    /// The frontends it claimed.
    pub frontends: Vec<Frontend>,
    /// Frontends it wanted that another service holds.
    pub blocked: Vec<Frontend>,
}

impl Fragment {
    /// Contributes nothing and waits for nothing.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
            && self.chains.is_empty()
            && self.affinity_sets.is_empty()
            && self.hairpin.is_empty()
            && self.frontends.is_empty()
            && self.blocked.is_empty()
    }
}

/// The words nft uses for a family.
#[derive(Clone, Copy, Debug)]
pub struct FamilyWords {
    /// Table family: `ip` or `ip6`.
    pub table: &'static str,
    /// Address match prefix: `ip` or `ip6`.
    pub addr: &'static str,
    /// Address data type: `ipv4_addr` or `ipv6_addr`.
    pub addr_type: &'static str,
}

impl FamilyWords {
    /// The words for `family`.
    pub fn of(family: IpFamily) -> Self {
        match family {
            IpFamily::V4 => Self {
                table: "ip",
                addr: "ip",
                addr_type: "ipv4_addr",
            },
            IpFamily::V6 => Self {
                table: "ip6",
                addr: "ip6",
                addr_type: "ipv6_addr",
            },
        }
    }
}

/// nft's name for a protocol.
pub fn proto(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

impl Frontend {
    /// Whether this is a node port.
    pub fn is_node_port(&self) -> bool {
        matches!(self, Self::NodePort { .. })
    }

    /// The set key: `addr . proto . port` or `proto . port`.
    pub fn key(&self) -> String {
        match self {
            Self::Ip { addr, protocol, port } => format!("{addr} . {} . {port}", proto(*protocol)),
            Self::NodePort { protocol, port } => format!("{} . {port}", proto(*protocol)),
        }
    }
}

impl std::fmt::Display for Frontend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ip { addr, protocol, port } => {
                write!(f, "{}/{}", SocketAddr::new(*addr, *port), proto(*protocol))
            }
            Self::NodePort { protocol, port } => write!(f, "node port {port}/{}", proto(*protocol)),
        }
    }
}

impl Element {
    /// The frontend the element is keyed by.
    pub fn frontend(&self) -> &Frontend {
        match self {
            Self::Slots { frontend, .. } | Self::Chain { frontend, .. } | Self::Member { frontend, .. } => frontend,
        }
    }

    /// The set or map its entries go to.
    pub fn set(&self) -> &'static str {
        let node_port = self.frontend().is_node_port();
        match self {
            Self::Slots { endpoints, .. } => slot_map(node_port, width(endpoints.len())),
            Self::Chain { .. } => Membership::Chains.set_name(node_port),
            Self::Member { set, .. } => set.set_name(node_port),
        }
    }

    /// Calls `f(set, key, value)` for each nft element this stands for.
    pub fn for_each_entry(&self, mut f: impl FnMut(&'static str, String, Option<String>)) {
        let frontend = self.frontend();
        match self {
            Self::Slots { endpoints, .. } => {
                let key = frontend.key();
                let map = self.set();
                for (slot, ep) in slot_assignment(endpoints).enumerate() {
                    f(
                        map,
                        format!("{key} . {slot}"),
                        Some(format!("{} . {}", ep.ip(), ep.port())),
                    );
                }
            }
            Self::Chain { chain, .. } => f(self.set(), frontend.key(), Some(format!("goto {chain}"))),
            Self::Member { .. } => f(self.set(), frontend.key(), None),
        }
    }
}

/// The endpoint each slot sends to: round-robin over [`width`] slots, so
/// with N endpoints in W slots each gets floor(W/N) or ceil(W/N) (worst
/// skew 2:1, e.g. N = 3 in 4 slots, N = 9..15 in 16; exact for 1, 2, 4, 8
/// and 16).
pub fn slot_assignment(endpoints: &[SocketAddr]) -> impl Iterator<Item = SocketAddr> + '_ {
    (0..width(endpoints.len())).filter_map(|i| endpoints.get(i % endpoints.len().max(1)).copied())
}

/// The kind of address a frontend is, for picking its endpoint group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Cluster,
    External,
    LoadBalancer,
    NodePort,
}

/// Builds a service's fragment; `claim` decides whether the service may
/// use a frontend (another service may already hold it).
pub fn build(
    targets: &[ServiceTarget],
    config: &DataplaneConfig,
    mut claim: impl FnMut(&Frontend) -> bool,
) -> Fragment {
    let mut out = Fragment::default();
    for t in targets {
        build_port(t, config, &mut claim, &mut out);
    }
    out.hairpin.sort_unstable();
    out.hairpin.dedup();
    out
}

fn entries(t: &ServiceTarget) -> Vec<(Entry, Frontend)> {
    let protocol = t.protocol();
    let ip = |addr| Frontend::Ip {
        addr,
        protocol,
        port: t.port,
    };
    let mut all = vec![(Entry::Cluster, ip(t.cluster_ip))];
    if t.external.is_some() {
        all.extend(t.external_ips.iter().map(|a| (Entry::External, ip(*a))));
        all.extend(t.load_balancer_ips.iter().map(|a| (Entry::LoadBalancer, ip(*a))));
        if let Some(port) = t.node_port {
            all.push((Entry::NodePort, Frontend::NodePort { protocol, port }));
        }
    }
    all
}

/// The base of a port's chain names: `ns/name/proto/port`.
pub fn chain_base(t: &ServiceTarget) -> String {
    let svc = &t.name.service;
    format!("{}/{}/{}/{}", svc.namespace, svc.name, proto(t.protocol()), t.port)
}

fn needs_chains(t: &ServiceTarget) -> bool {
    let big = |g: &EndpointGroup| g.backends.len() > SLOTS;
    t.affinity.is_some()
        || big(&t.internal)
        || t.external.as_ref().is_some_and(|g| {
            big(g) || t.external_local || (!t.source_ranges.is_empty() && !t.load_balancer_ips.is_empty())
        })
}

fn build_port(
    t: &ServiceTarget,
    config: &DataplaneConfig,
    claim: &mut impl FnMut(&Frontend) -> bool,
    out: &mut Fragment,
) {
    let chains = needs_chains(t);
    let base = chain_base(t);
    let external = t.external.as_ref();
    let mut used_internal = false;
    let mut used_external = false;
    let mut used_firewall = false;
    for (entry, frontend) in entries(t) {
        if out.frontends.contains(&frontend) || !claim(&frontend) {
            continue;
        }
        out.frontends.push(frontend);
        let (group, internal) = match (entry, external) {
            (Entry::Cluster, _) => (&t.internal, true),
            (_, Some(g)) => (g, false),
            (_, None) => continue,
        };
        match group.verdict() {
            GroupVerdict::Reject => out.elements.push(Element::Member {
                set: Membership::Reject,
                frontend,
            }),
            GroupVerdict::Drop => out.elements.push(Element::Member {
                set: Membership::Drop,
                frontend,
            }),
            GroupVerdict::Forward if chains => {
                let firewall = entry == Entry::LoadBalancer && !t.source_ranges.is_empty();
                let chain = match (internal, firewall) {
                    (true, _) => format!("svc-{base}"),
                    (false, true) => format!("fw-{base}"),
                    (false, false) => format!("ext-{base}"),
                };
                used_internal |= internal;
                used_external |= !internal;
                used_firewall |= firewall;
                out.elements.push(Element::Chain { frontend, chain });
            }
            GroupVerdict::Forward => {
                let endpoints = group.backends.iter().map(|b| b.addr).collect();
                out.elements.push(Element::Slots { frontend, endpoints });
                let masquerade = match entry {
                    Entry::Cluster if config.masquerade_all => Some(Membership::Masquerade),
                    Entry::Cluster if !config.family_cluster_cidrs().is_empty() => {
                        Some(Membership::MasqueradeFromOutside)
                    }
                    Entry::Cluster => None,
                    // External traffic with Cluster policy may leave the
                    // node: replies must come back through it.
                    _ => Some(Membership::Masquerade),
                };
                if let Some(set) = masquerade {
                    out.elements.push(Element::Member { set, frontend });
                }
            }
        }
        if group.verdict() == GroupVerdict::Forward {
            out.hairpin
                .extend(group.backends.iter().filter(|b| b.local).map(|b| b.addr.ip()));
        }
    }
    if !chains {
        return;
    }
    let words = FamilyWords::of(config.family);
    let cidrs = config.family_cluster_cidrs();
    // An external-Local port sends pods and the node itself to the
    // internal chain, so it needs that chain even without a cluster-IP
    // frontend of its own.
    let short_circuit = used_external && t.external_local && t.internal.verdict() == GroupVerdict::Forward;
    if used_internal || short_circuit {
        let mut rules = Vec::new();
        if config.masquerade_all {
            rules.push("jump mark-for-masquerade".to_owned());
        } else if !cidrs.is_empty() {
            rules.push(format!(
                "{} saddr != {} jump mark-for-masquerade",
                words.addr,
                net_set(&cidrs)
            ));
        }
        load_balance(t, &t.internal, &base, words, &mut rules, out);
        out.chains.push(ChainDef {
            name: format!("svc-{base}"),
            rules,
        });
    }
    if let (true, Some(group)) = (used_external, external) {
        let mut rules = Vec::new();
        if t.external_local {
            if short_circuit {
                if !cidrs.is_empty() {
                    rules.push(format!("{} saddr {} goto svc-{base}", words.addr, net_set(&cidrs)));
                }
                rules.push("fib saddr type local jump mark-for-masquerade".to_owned());
                rules.push(format!("fib saddr type local goto svc-{base}"));
            }
        } else {
            rules.push("jump mark-for-masquerade".to_owned());
        }
        load_balance(t, group, &base, words, &mut rules, out);
        out.chains.push(ChainDef {
            name: format!("ext-{base}"),
            rules,
        });
    }
    if used_firewall {
        out.chains.push(ChainDef {
            name: format!("fw-{base}"),
            rules: vec![
                format!("{} saddr {} goto ext-{base}", words.addr, net_set(&t.source_ranges)),
                "drop".to_owned(),
            ],
        });
    }
}

/// `{ a/n, b/m }` with host bits cleared.
fn net_set(nets: &[IpNet]) -> String {
    let items: Vec<String> = nets.iter().map(|n| n.trunc().to_string()).collect();
    format!("{{ {} }}", items.join(", "))
}

fn dnat_one(words: FamilyWords, protocol: Protocol, ep: SocketAddr) -> String {
    format!("meta l4proto {} dnat {} to {ep}", proto(protocol), words.table)
}

/// A name part for an endpoint: nft identifiers allow letters, digits and
/// `/ - _ .`, so an IPv6 address's colons become underscores.
fn endpoint_part(ep: SocketAddr) -> String {
    format!("{}/{}", ep.ip().to_string().replace(':', "_"), ep.port())
}

fn load_balance(
    t: &ServiceTarget,
    group: &EndpointGroup,
    base: &str,
    words: FamilyWords,
    rules: &mut Vec<String>,
    out: &mut Fragment,
) {
    let eps: Vec<SocketAddr> = group.backends.iter().map(|b| b.addr).collect();
    let protocol = t.protocol();
    let Some(timeout) = t.affinity else {
        if let [only] = eps[..] {
            rules.push(dnat_one(words, protocol, only));
        } else {
            let mut map = String::new();
            for (i, ep) in eps.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(map, "{sep}{i} : {} . {}", ep.ip(), ep.port());
            }
            rules.push(format!(
                "meta l4proto {} dnat {} to numgen random mod {} map {{ {map} }}",
                proto(protocol),
                words.table,
                eps.len()
            ));
        }
        return;
    };
    // Affinity: a client seen recently goes back to its endpoint; a new
    // one picks at random, and the endpoint's chain remembers it.
    let mut pick = String::new();
    for (i, ep) in eps.iter().enumerate() {
        let part = endpoint_part(*ep);
        let (set, chain) = (format!("aff-{base}/{part}"), format!("ep-{base}/{part}"));
        rules.push(format!("{} saddr @{set} goto {chain}", words.addr));
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(pick, "{sep}{i} : goto {chain}");
        if !out.chains.iter().any(|c| c.name == chain) {
            out.chains.push(ChainDef {
                name: chain,
                rules: vec![
                    format!(
                        "update @{set} {{ {} saddr timeout {}s }}",
                        words.addr,
                        timeout.as_secs().max(1)
                    ),
                    dnat_one(words, protocol, *ep),
                ],
            });
            out.affinity_sets.push(set);
        }
    }
    rules.push(format!("numgen random mod {} vmap {{ {pick} }}", eps.len()));
}
