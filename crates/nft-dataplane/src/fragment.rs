//! The ruleset's shape: what one service contributes to the table.
//!
//! Most service ports need no chain of their own: their frontends are
//! elements of shared maps, looked up by a handful of fixed rules (see
//! [`crate::skeleton`]). A frontend with N endpoints (N up to
//! [`MAX_SLOTS`]) jumps to the fixed chain for N, which picks slot
//! `numgen random mod N` in the slot map for N: every endpoint gets exactly
//! 1/N of the new connections, and adding or changing such a service costs
//! a few map elements whatever the cluster's size. A port gets chains only
//! when a fixed rule cannot express it:
//!
//! - more than [`MAX_SLOTS`] endpoints (`numgen random mod N` through a
//!   backend map of the chain's own whose positions stay put: one endpoint
//!   changed is one element changed, whatever the service's size),
//! - ClientIP affinity (the port's timed set of clients, a chain per
//!   endpoint, and a map of those chains to pick from),
//! - `externalTrafficPolicy: Local` (pods and the node itself use the
//!   cluster endpoints; others only local ones, with their source kept),
//! - load-balancer source ranges (a firewall chain).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use slice_model::Protocol;
use slice_model::internal::FastHash;

use crate::desired::{DataplaneConfig, EndpointGroup, GroupVerdict, Scope, ServiceTarget};
pub use crate::element::Frontend;
use crate::element::{Element, Key, Value, proto};
use crate::names::{ChainId, MAX_SLOTS, SetId};
use crate::rule::{Match, Rule, Statement};

/// The set an element of a frontend lives in. Each exists twice: keyed by
/// address, protocol and port (`Ip` frontends) and by protocol and port
/// (node ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Membership {
    /// Masquerade all traffic to the frontend (external addresses and
    /// node ports with Cluster policy; cluster IPs are masqueraded by the
    /// skeleton, keyed by address).
    Masquerade,
    /// No endpoints: reject.
    Reject,
    /// No endpoints usable here: drop.
    Drop,
}

impl Membership {
    /// The set for frontends of this kind.
    pub fn set(self, node_port: bool) -> SetId {
        match (self, node_port) {
            (Self::Masquerade, false) => SetId::MasqFrontends,
            (Self::Masquerade, true) => SetId::MasqNodePorts,
            (Self::Reject, false) => SetId::NoEndpoints,
            (Self::Reject, true) => SetId::NodePortNoEndpoints,
            (Self::Drop, false) => SetId::NoLocalEndpoints,
            (Self::Drop, true) => SetId::NodePortNoLocalEndpoints,
        }
    }
}

/// An element several services may want; the programmed view counts its
/// users, and it stays while one is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Shared {
    /// A cluster IP, in [`SetId::ClusterIps`]: other ports of the address
    /// are rejected.
    ClusterIp(IpAddr),
    /// A local endpoint's hairpin pair (its address twice), in
    /// [`SetId::Hairpin`]: an endpoint reaching itself is masqueraded.
    Hairpin(IpAddr),
    /// A UDP or SCTP node port (a [`Frontend::NodePort`]) where the
    /// loopback address answers node ports through the relay, in
    /// [`SetId::NodePortsNotRelayed`]: on loopback it is rejected.
    NodePortNotRelayed(Frontend),
}

impl Shared {
    /// The set it is an element of.
    pub fn set(self) -> SetId {
        match self {
            Self::ClusterIp(_) => SetId::ClusterIps,
            Self::Hairpin(_) => SetId::Hairpin,
            Self::NodePortNotRelayed(_) => SetId::NodePortsNotRelayed,
        }
    }

    /// The element.
    pub fn element(self) -> Element {
        Element::key(match self {
            Self::ClusterIp(addr) => Key::Addr(addr),
            Self::Hairpin(addr) => Key::AddrPair(addr, addr),
            Self::NodePortNotRelayed(frontend) => Key::Frontend(frontend),
        })
    }
}

/// What one frontend of a service contributes to the shared sets and maps.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Entry {
    /// Exact load balancing through the slot map for its endpoint count.
    Slots {
        /// The frontend.
        frontend: Frontend,
        /// Its endpoints (1..=[`MAX_SLOTS`]), sorted; slot i sends to the
        /// i-th.
        endpoints: Vec<SocketAddr>,
    },
    /// The frontend jumps to one of the port's chains.
    Chain {
        /// The frontend.
        frontend: Frontend,
        /// The chain.
        chain: ChainId,
    },
    /// The frontend is a member of a plain set.
    Member {
        /// Which set.
        set: Membership,
        /// The frontend.
        frontend: Frontend,
    },
}

impl Entry {
    /// The frontend the entry is keyed by.
    pub fn frontend(&self) -> &Frontend {
        match self {
            Self::Slots { frontend, .. } | Self::Chain { frontend, .. } | Self::Member { frontend, .. } => frontend,
        }
    }

    /// Calls `f(set, element)` for each nft element this stands for.
    pub fn for_each_element(&self, mut f: impl FnMut(SetId, Element)) {
        let frontend = *self.frontend();
        let node_port = frontend.is_node_port();
        let chains = if node_port {
            SetId::NodePortChains
        } else {
            SetId::ServiceChains
        };
        match self {
            Self::Slots { .. } => {
                if let Some(s) = self.slot_elements() {
                    f(s.frontends, s.frontend);
                    for el in s.slots {
                        f(s.map.clone(), el);
                    }
                }
            }
            Self::Chain { chain, .. } => f(
                chains,
                Element::map(Key::Frontend(frontend), Value::Goto(chain.clone())),
            ),
            Self::Member { set, .. } => f(set.set(node_port), Element::key(Key::Frontend(frontend))),
        }
    }
}

/// A slot frontend's elements: its own, and its slots'.
pub struct SlotElements {
    /// The set of the frontends with this many slots.
    pub frontends: SetId,
    /// The frontend's element there. It carries its slots' digest, so that
    /// a restart knows what the slot map (too large to read back) holds
    /// for it.
    pub frontend: Element,
    /// The slot map of that width.
    pub map: SetId,
    /// The frontend's slots there, each with its endpoint.
    pub slots: Vec<Element>,
}

impl Entry {
    /// The elements of a [`Entry::Slots`] (`None` for the others).
    pub fn slot_elements(&self) -> Option<SlotElements> {
        let Self::Slots { frontend, endpoints } = self else {
            return None;
        };
        let node_port = frontend.is_node_port();
        let n = slot_count(endpoints.len());
        let endpoints = &endpoints[..usize::from(n).min(endpoints.len())];
        Some(SlotElements {
            frontends: SetId::slot_frontends(node_port, n),
            frontend: Element::map(Key::Frontend(*frontend), Value::Digest(crate::digest::of(endpoints))),
            map: SetId::slots(node_port, n),
            slots: (0..n)
                .zip(endpoints)
                .map(|(slot, ep)| Element::map(Key::Slot(*frontend, slot), Value::Endpoint(*ep)))
                .collect(),
        })
    }
}

/// The slot count for `n` endpoints (1..=MAX_SLOTS).
fn slot_count(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(MAX_SLOTS).clamp(1, MAX_SLOTS)
}

/// A chain owned by one service port.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChainDef {
    /// The chain.
    pub id: ChainId,
    /// Its rules, in order.
    pub rules: Vec<Rule>,
}

/// A backend map's contents: endpoint `i` of the list is at position `i`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackendMap {
    /// The map ([`SetId::Backends`] or [`SetId::Picks`]).
    pub map: SetId,
    /// Its endpoints, in position order.
    pub endpoints: Vec<SocketAddr>,
    /// For a [`SetId::Picks`], the port whose endpoint chains its elements
    /// go to (`ns/name/proto/port`); a backend map's elements are the
    /// endpoints themselves.
    pub endpoint_chains: Option<String>,
}

impl BackendMap {
    /// The value at the position of `endpoint`.
    pub fn value(&self, endpoint: SocketAddr) -> Value {
        match &self.endpoint_chains {
            Some(base) => Value::Goto(endpoint_chain(base, endpoint)),
            None => Value::Endpoint(endpoint),
        }
    }
}

/// Everything one service contributes to the table.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fragment {
    /// Elements of shared sets and maps, one per frontend.
    pub entries: Vec<Entry>,
    /// Chains of its own.
    pub chains: Vec<ChainDef>,
    /// Sets of its own, created and deleted with it: backend maps, and for
    /// ClientIP affinity the port's set of clients and each chain's map of
    /// endpoint chains.
    pub own_sets: Vec<SetId>,
    /// Backend maps' contents.
    pub backends: Vec<BackendMap>,
    /// Elements other services may also want (hairpin pairs of local
    /// endpoints, cluster IPs): the programmed view counts their users.
    pub shared: Vec<Shared>,
    /// The frontends it claimed.
    pub frontends: Vec<Frontend>,
    /// Frontends it wanted that another service holds.
    pub blocked: Vec<Frontend>,
}

impl Fragment {
    /// Contributes nothing and waits for nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
            && self.chains.is_empty()
            && self.own_sets.is_empty()
            && self.backends.is_empty()
            && self.shared.is_empty()
            && self.frontends.is_empty()
            && self.blocked.is_empty()
    }

    /// Calls `f(set, element)` for each element of its entries and
    /// backend maps (not the shared ones).
    pub fn for_each_element(&self, mut f: impl FnMut(SetId, Element)) {
        for e in &self.entries {
            e.for_each_element(&mut f);
        }
        for b in &self.backends {
            for (i, ep) in (0u32..).zip(&b.endpoints) {
                f(b.map.clone(), Element::map(Key::Index(i), b.value(*ep)));
            }
        }
    }

    /// Every element of its entries (not of its backend maps, which are
    /// compared by position), keyed by set and key.
    pub fn entry_elements(&self) -> HashMap<(SetId, Key), Option<Value>> {
        let mut all = HashMap::new();
        for e in &self.entries {
            e.for_each_element(|set, el| {
                all.insert((set, el.key), el.value);
            });
        }
        all
    }
}

/// The kind of address a frontend is, for picking its endpoint group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrontendKind {
    Cluster,
    External,
    LoadBalancer,
    NodePort,
}

/// Builds a service's fragment; `claim` decides whether the service may
/// use a frontend (another service may already hold it). `previous`, the
/// fragment the table holds now, keeps backend maps' positions where they
/// were.
pub fn build(
    targets: &[ServiceTarget],
    config: &DataplaneConfig,
    mut claim: impl FnMut(&Frontend) -> bool,
    previous: Option<&Fragment>,
) -> Fragment {
    let mut out = Fragment::default();
    for t in targets {
        build_port(t, config, &mut claim, &mut out, previous);
        if config.refuse_for_tests.as_ref() == Some(&t.name.service) {
            out.chains.push(refused_for_tests(t));
        }
    }
    out.shared.sort_unstable();
    out.shared.dedup();
    out
}

/// A chain the kernel refuses for `t`'s port: its rule jumps to a chain
/// that is never declared (see [`DataplaneConfig::refuse_for_tests`]).
fn refused_for_tests(t: &ServiceTarget) -> ChainDef {
    let base = chain_base(t);
    ChainDef {
        id: ChainId::Svc(format!("{base}/refused-for-tests")),
        rules: vec![Rule::always(vec![Statement::Jump(ChainId::Endpoint(format!(
            "{base}/never-declared"
        )))])],
    }
}

fn frontends(t: &ServiceTarget) -> Vec<(FrontendKind, Frontend)> {
    let protocol = t.protocol();
    let ip = |addr| Frontend::Ip {
        addr,
        protocol,
        port: t.port,
    };
    let mut all = vec![(FrontendKind::Cluster, ip(t.cluster_ip))];
    if t.external.is_some() {
        all.extend(t.external_ips.iter().map(|a| (FrontendKind::External, ip(*a))));
        all.extend(t.load_balancer_ips.iter().map(|a| (FrontendKind::LoadBalancer, ip(*a))));
        if let Some(port) = t.node_port {
            all.push((FrontendKind::NodePort, Frontend::NodePort { protocol, port }));
        }
    }
    all
}

/// The base of a port's chain names: `ns/name/proto/port`.
fn chain_base(t: &ServiceTarget) -> String {
    let svc = &t.name.service;
    format!("{}/{}/{}/{}", svc.namespace, svc.name, proto(t.protocol()), t.port)
}

fn needs_chains(t: &ServiceTarget) -> bool {
    let big = |g: &EndpointGroup| g.backends.len() > usize::from(MAX_SLOTS);
    t.session_affinity.is_some()
        || big(&t.internal)
        || t.external.as_ref().is_some_and(|g| {
            big(g)
                || t.external_policy_local
                || (!t.load_balancer_source_ranges.is_empty() && !t.load_balancer_ips.is_empty())
        })
}

/// An external-Local port with no endpoint on this node still serves pods
/// and the node itself through the cluster endpoints: only traffic from
/// outside the cluster is dropped, by its external chain.
fn serves_inside_only(t: &ServiceTarget, group: &EndpointGroup) -> bool {
    t.external_policy_local && group.verdict() == GroupVerdict::Drop && t.internal.verdict() == GroupVerdict::Forward
}

fn build_port(
    t: &ServiceTarget,
    config: &DataplaneConfig,
    claim: &mut impl FnMut(&Frontend) -> bool,
    out: &mut Fragment,
    previous: Option<&Fragment>,
) {
    let chains = needs_chains(t);
    let base = chain_base(t);
    let external = t.external.as_ref();
    let mut used_internal = false;
    let mut used_external = false;
    let mut used_firewall = false;
    for (kind, frontend) in frontends(t) {
        if out.frontends.contains(&frontend) || !claim(&frontend) {
            continue;
        }
        out.frontends.push(frontend);
        match frontend {
            Frontend::Ip { addr, .. } if kind == FrontendKind::Cluster => out.shared.push(Shared::ClusterIp(addr)),
            Frontend::NodePort { protocol, .. } if config.loopback_relay && protocol != Protocol::Tcp => {
                out.shared.push(Shared::NodePortNotRelayed(frontend));
            }
            _ => {}
        }
        let (group, internal) = match (kind, external) {
            (FrontendKind::Cluster, _) => (&t.internal, true),
            (_, Some(g)) => (g, false),
            (_, None) => continue,
        };
        let verdict = match group.verdict() {
            GroupVerdict::Drop if !internal && serves_inside_only(t, group) => GroupVerdict::Forward,
            v => v,
        };
        match verdict {
            GroupVerdict::Reject => out.entries.push(Entry::Member {
                set: Membership::Reject,
                frontend,
            }),
            GroupVerdict::Drop => out.entries.push(Entry::Member {
                set: Membership::Drop,
                frontend,
            }),
            GroupVerdict::Forward if chains => {
                let firewall = kind == FrontendKind::LoadBalancer && !t.load_balancer_source_ranges.is_empty();
                let chain = match (internal, firewall) {
                    (true, _) => ChainId::Svc(base.clone()),
                    (false, true) => ChainId::Fw(base.clone()),
                    (false, false) => ChainId::Ext(base.clone()),
                };
                used_internal |= internal;
                used_external |= !internal;
                used_firewall |= firewall;
                out.entries.push(Entry::Chain { frontend, chain });
            }
            GroupVerdict::Forward => {
                let endpoints = group.backends.iter().map(|b| b.addr).collect();
                out.entries.push(Entry::Slots { frontend, endpoints });
                // External traffic with Cluster policy may leave the node:
                // replies must come back through it.
                let masquerade = (kind != FrontendKind::Cluster).then_some(Membership::Masquerade);
                if let Some(set) = masquerade {
                    out.entries.push(Entry::Member { set, frontend });
                }
            }
        }
        hairpins(group, config, &mut out.shared);
    }
    if !chains {
        return;
    }
    let local = config.local_traffic();
    let mark = || Statement::Jump(ChainId::MarkForMasquerade);
    let svc = ChainId::Svc(base.clone());
    // An external-Local port sends pods and the node itself to the
    // internal chain, so it needs that chain even without a cluster-IP
    // frontend of its own.
    let short_circuit = used_external && t.external_policy_local && t.internal.verdict() == GroupVerdict::Forward;
    if used_internal || short_circuit {
        let mut rules = Vec::new();
        if config.masquerade_all {
            rules.push(Rule::always(vec![mark()]));
        } else if let Some((_, not_local)) = &local {
            rules.push(Rule::new(vec![not_local.clone()], vec![mark()]));
        }
        load_balance(t, &t.internal, &svc, &base, &mut rules, out, previous);
        out.chains.push(ChainDef { id: svc.clone(), rules });
        hairpins(&t.internal, config, &mut out.shared);
    }
    if let (true, Some(group)) = (used_external, external) {
        let mut rules = Vec::new();
        if t.external_policy_local {
            if short_circuit {
                if let Some((from_pods, _)) = &local {
                    rules.push(Rule::new(vec![from_pods.clone()], vec![Statement::Goto(svc.clone())]));
                }
                rules.push(Rule::new(vec![Match::LocalSource], vec![mark()]));
                rules.push(Rule::new(vec![Match::LocalSource], vec![Statement::Goto(svc.clone())]));
            }
        } else {
            rules.push(Rule::always(vec![mark()]));
        }
        let ext = ChainId::Ext(base.clone());
        load_balance(t, group, &ext, &base, &mut rules, out, previous);
        out.chains.push(ChainDef { id: ext, rules });
    }
    if used_firewall {
        out.chains.push(ChainDef {
            id: ChainId::Fw(base.clone()),
            rules: vec![
                Rule::new(
                    vec![Match::SourceIn(t.load_balancer_source_ranges.clone())],
                    vec![Statement::Goto(ChainId::Ext(base.clone()))],
                ),
                Rule::always(vec![Statement::Drop]),
            ],
        });
    }
}

/// Local endpoints a group sends to: an endpoint reaching itself through
/// the service is masqueraded (in a node's table; a pod has no hairpin).
fn hairpins(group: &EndpointGroup, config: &DataplaneConfig, shared: &mut Vec<Shared>) {
    if group.verdict() == GroupVerdict::Forward && config.scope == Scope::Node {
        shared.extend(
            group
                .backends
                .iter()
                .filter(|b| b.local)
                .map(|b| Shared::Hairpin(b.addr.ip())),
        );
    }
}

/// The endpoints `now` in positions 0..now.len(), each that was in
/// `before` where it was when it can be: a new endpoint takes a freed
/// position, and when the list shrinks the last ones move into the gaps.
/// One endpoint replaced, added or removed moves at most two positions.
fn keep_positions(before: &[SocketAddr], now: &[SocketAddr]) -> Vec<SocketAddr> {
    // A big group's endpoints are hashed twice per change: the caches'
    // cheap hasher, not SipHash.
    let wanted: HashSet<&SocketAddr, FastHash> = now.iter().collect();
    let mut slots: Vec<Option<SocketAddr>> = before.iter().map(|e| wanted.contains(e).then_some(*e)).collect();
    let placed: HashSet<SocketAddr, FastHash> = slots.iter().flatten().copied().collect();
    let mut new = now.iter().filter(|e| !placed.contains(e)).copied();
    for slot in slots.iter_mut().filter(|s| s.is_none()) {
        *slot = new.next();
    }
    slots.extend(new.map(Some));
    // More went than came: fill each gap with the last endpoint.
    while let Some(gap) = slots.iter().position(Option::is_none) {
        let last = slots.pop().flatten();
        if gap < slots.len() {
            slots[gap] = last;
        }
    }
    slots.into_iter().flatten().collect()
}

fn load_balance(
    t: &ServiceTarget,
    group: &EndpointGroup,
    chain: &ChainId,
    base: &str,
    rules: &mut Vec<Rule>,
    out: &mut Fragment,
    previous: Option<&Fragment>,
) {
    let eps: Vec<SocketAddr> = group.backends.iter().map(|b| b.addr).collect();
    let protocol: Protocol = t.protocol();
    if eps.is_empty() {
        // Only an external-Local chain without local endpoints gets here
        // (pods and the node were sent on above): the rest is dropped.
        rules.push(Rule::always(vec![Statement::Drop]));
        return;
    }
    let width = |positions: &[SocketAddr]| u32::try_from(positions.len()).unwrap_or(u32::MAX);
    let Some(timeout) = t.session_affinity else {
        // More than one endpoint: picked through a named map of the chain's
        // own, never an inline one. A change to one endpoint is then an
        // element, not a rewrite of the rule that holds them all; and an
        // inline map is an anonymous set, which the kernel makes at a cost
        // that grows with the sets the table has (a restart rewriting
        // thousands of chains spent seconds in it).
        if let [only] = &eps[..] {
            rules.push(Rule::always(vec![Statement::Dnat(protocol, *only)]));
            return;
        }
        let map = SetId::Backends(protocol, chain.to_string());
        let positions = keep_positions(previous_positions(previous, &map), &eps);
        rules.push(Rule::always(vec![Statement::DnatMap {
            protocol,
            map: map.clone(),
            width: width(&positions),
        }]));
        out.own_sets.push(map.clone());
        out.backends.push(BackendMap {
            map,
            endpoints: positions,
            endpoint_chains: None,
        });
        return;
    };
    // Affinity, as kube-proxy does it: a client seen recently goes back to
    // its endpoint's chain; a new one picks a chain at random (through a
    // named map, as above), and the endpoint's chain remembers it. The
    // port's clients are one set, shared by its internal and external
    // chains (as their endpoints' chains are).
    let clients = SetId::Clients(base.to_owned());
    let timeout_secs = timeout.as_secs().max(1);
    let mut known = KnownClients::new(base, eps.len());
    let mut written: HashSet<ChainId, FastHash> = out.chains.iter().map(|c| c.id.clone()).collect();
    for ep in &eps {
        let chain = endpoint_chain(base, *ep);
        known.push(
            *ep,
            Rule::new(
                vec![Match::KnownClient {
                    clients: clients.clone(),
                    endpoint: *ep,
                }],
                vec![Statement::Goto(chain.clone())],
            ),
        );
        if written.insert(chain.clone()) {
            out.chains.push(ChainDef {
                id: chain,
                rules: vec![
                    Rule::always(vec![Statement::RememberClient {
                        clients: clients.clone(),
                        endpoint: *ep,
                        timeout_secs,
                    }]),
                    Rule::always(vec![Statement::Dnat(protocol, *ep)]),
                ],
            });
        }
    }
    known.write(rules, out);
    let picks = SetId::Picks(chain.to_string());
    let positions = keep_positions(previous_positions(previous, &picks), &eps);
    rules.push(Rule::always(vec![Statement::RandomChain {
        map: picks.clone(),
        width: width(&positions),
    }]));
    if !out.own_sets.contains(&clients) {
        out.own_sets.push(clients);
    }
    out.own_sets.push(picks.clone());
    out.backends.push(BackendMap {
        map: picks,
        endpoints: positions,
        endpoint_chains: Some(base.to_owned()),
    });
}

/// The chain of one endpoint of an affinity port (`base` names the port).
/// nft identifiers allow letters, digits and `/ - _ .`, so an IPv6
/// address's colons become underscores.
fn endpoint_chain(base: &str, endpoint: SocketAddr) -> ChainId {
    let addr = endpoint.ip().to_string().replace(':', "_");
    ChainId::Endpoint(format!("{base}/{addr}/{}", endpoint.port()))
}

/// The endpoints `map` held in `previous`, in position order.
fn previous_positions<'a>(previous: Option<&'a Fragment>, map: &SetId) -> &'a [SocketAddr] {
    previous
        .and_then(|p| p.backends.iter().find(|b| b.map == *map))
        .map_or(&[], |b| &b.endpoints[..])
}

/// The most rules that send known clients of an affinity port to their
/// endpoints in one chain: a larger port spreads them over chains of
/// about this many, so that a change of one endpoint rewrites one of them
/// (the kernel finds each rule's set by walking every set of the table, so
/// rewriting all of a large port's rules costs seconds).
pub const KNOWN_CLIENTS_PER_CHAIN: usize = 64;

/// The rules that send an affinity port's known clients to their
/// endpoints: in the port's chain, or spread over chains of their own by a
/// hash of the endpoint (stable while the endpoint stays, whatever the
/// others do).
struct KnownClients {
    base: String,
    chains: usize,
    rules: Vec<Vec<Rule>>,
}

impl KnownClients {
    fn new(base: &str, endpoints: usize) -> Self {
        // A power of two: the spread changes only when the port's size
        // doubles or halves.
        let chains = endpoints.div_ceil(KNOWN_CLIENTS_PER_CHAIN).next_power_of_two();
        Self {
            base: base.to_owned(),
            chains,
            rules: vec![Vec::new(); chains],
        }
    }

    fn push(&mut self, ep: SocketAddr, rule: Rule) {
        let at = if self.chains == 1 {
            0
        } else {
            // FNV-1a over the address and port: the same on every run.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            let bytes = match ep.ip() {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            for b in bytes.iter().chain(&ep.port().to_be_bytes()) {
                h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
            usize::try_from(h).unwrap_or(usize::MAX) & (self.chains - 1)
        };
        self.rules[at].push(rule);
    }

    /// Puts the rules in `rules` (the port's chain), or there a jump to
    /// each chain of them.
    fn write(self, rules: &mut Vec<Rule>, out: &mut Fragment) {
        if self.chains == 1 {
            rules.extend(self.rules.into_iter().flatten());
            return;
        }
        for (i, part) in self.rules.into_iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let id = ChainId::Svc(format!("{}/known-clients-{i}", self.base));
            rules.push(Rule::always(vec![Statement::Jump(id.clone())]));
            out.chains.push(ChainDef { id, rules: part });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(ids: &[u16]) -> Vec<SocketAddr> {
        ids.iter()
            .map(|i| SocketAddr::from(([10, 0, (i / 256) as u8, (i % 256) as u8], 80)))
            .collect()
    }

    fn moved(before: &[SocketAddr], after: &[SocketAddr]) -> usize {
        (0..before.len().max(after.len()))
            .filter(|i| before.get(*i) != after.get(*i))
            .count()
    }

    #[test]
    fn positions_stay_put_and_one_change_moves_at_most_two() {
        let all: Vec<u16> = (0..100).collect();
        let start = keep_positions(&[], &eps(&all));
        assert_eq!(start, eps(&all), "a first build keeps the given order");
        // One replaced: one position changes.
        let mut replaced = all.clone();
        replaced[40] = 500;
        let r = keep_positions(&start, &eps(&replaced));
        assert_eq!(moved(&start, &r), 1);
        // One removed from the middle: its gap takes the last one.
        let mut removed = all.clone();
        removed.remove(40);
        let r = keep_positions(&start, &eps(&removed));
        assert_eq!((r.len(), moved(&start, &r)), (99, 2));
        assert_eq!(r[40], start[99]);
        // One added: appended.
        let mut added = all.clone();
        added.push(700);
        let r = keep_positions(&start, &eps(&added));
        assert_eq!((r.len(), moved(&start, &r)), (101, 1));
    }

    #[test]
    fn positions_hold_exactly_the_endpoints_whatever_the_change() {
        // A small exhaustive sweep in place of a property test: every
        // before/after pair of subsets of eight endpoints.
        let pool = eps(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let subset = |mask: u32| -> Vec<SocketAddr> {
            pool.iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, e)| *e)
                .collect()
        };
        for a in 0..256u32 {
            for b in (0..256u32).step_by(7) {
                let before = keep_positions(&[], &subset(a));
                let after = keep_positions(&before, &subset(b));
                let mut sorted = after.clone();
                sorted.sort();
                assert_eq!(sorted, subset(b), "{a:#b} -> {b:#b}");
                for (i, e) in after.iter().enumerate() {
                    if let Some(j) = before.iter().position(|x| x == e)
                        && j < after.len()
                    {
                        assert_eq!(i, j, "{e} moved although its place was still there");
                    }
                }
            }
        }
    }
}
