//! A packet tracer over the [`KernelModel`]: what the table does to the
//! first packet of a new connection, without root and without a kernel.
//!
//! The packet walks the hooks as netfilter would: a packet this host sends
//! passes output then postrouting; one that arrives passes prerouting,
//! then input when its (possibly DNATed) destination is local, else
//! forward and postrouting. At each hook the base chains run in priority
//! order. A random choice (`numgen random mod N`) splits the walk into N
//! branches of equal probability, so the answer is a distribution of
//! [`Fate`]s, not one sample.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use slice_model::{IpFamily, Protocol};

use crate::element::{Frontend, Key, Value};
use crate::kernel::{KernelModel, Table};
use crate::names::{ChainId, CounterId, Hook};
use crate::rule::{Match, Rule, Selector, Statement};

/// Where a traced packet comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Sent by this host (a process on the node, or the node itself).
    Local,
    /// Arrived on an interface (from a pod on this node, or from outside).
    Forwarded,
}

/// The first packet of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol.
    pub protocol: Protocol,
    /// Destination port.
    pub port: u16,
    /// Where it comes from.
    pub origin: Origin,
}

/// What the host looks like to `fib … type local` and `iifname`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Host {
    /// The host's own addresses.
    pub local_addrs: Vec<IpAddr>,
    /// Its interfaces: a forwarded packet arrives on the first whose
    /// networks hold its source (none listed: on no named interface).
    pub interfaces: Vec<Interface>,
}

/// One of the host's interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`cbr0`, `cali12ab`).
    pub name: String,
    /// The networks reached through it.
    pub networks: Vec<IpNet>,
}

/// Whether interface `name` matches `pattern` (`iifname`: a trailing `*`
/// is a prefix match).
fn interface_matches(name: &str, pattern: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

impl Host {
    /// The interface a packet from `src` arrives on (`""`: none).
    fn input_interface(&self, src: IpAddr) -> &str {
        self.interfaces
            .iter()
            .find(|i| i.networks.iter().any(|n| n.contains(&src)))
            .map_or("", |i| i.name.as_str())
    }

    /// Loopback addresses are always local, as in the kernel.
    fn is_local(&self, ip: IpAddr) -> bool {
        ip.is_loopback() || self.local_addrs.contains(&ip)
    }
}

/// What becomes of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fate {
    /// Sent on to `to` (the endpoint, after DNAT; or the original
    /// destination when no rule changed it), with its source masqueraded
    /// or kept.
    Delivered {
        /// Where it goes.
        to: SocketAddr,
        /// Whether its source is rewritten.
        masquerade: bool,
    },
    /// Dropped silently (the client times out).
    Dropped,
    /// Refused (ICMP unreachable or TCP reset).
    Rejected,
}

/// The distribution of fates of one packet, and what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Each distinct fate with its probability (summing to 1), sorted.
    pub outcomes: Vec<(Fate, f64)>,
    /// Rules evaluated on the longest branch.
    pub rules: usize,
    /// Set and map lookups on the longest branch.
    pub lookups: usize,
    /// The named counters the packet was counted in, with the probability
    /// of the branches that counted it.
    pub counted: BTreeMap<CounterId, f64>,
}

impl Trace {
    /// The endpoints the packet may be DNATed to, with probabilities
    /// (empty when it is dropped, rejected or not DNATed).
    pub fn endpoints(&self) -> BTreeMap<SocketAddr, f64> {
        let mut out = BTreeMap::new();
        for (fate, p) in &self.outcomes {
            if let Fate::Delivered { to, .. } = fate {
                *out.entry(*to).or_default() += p;
            }
        }
        out
    }

    /// The single fate, when there is only one.
    pub fn only(&self) -> Option<Fate> {
        match self.outcomes.as_slice() {
            [(f, _)] => Some(*f),
            _ => None,
        }
    }

    /// Whether every delivered branch is masqueraded (`None` if none is
    /// delivered, or they differ).
    pub fn masquerade(&self) -> Option<bool> {
        let mut seen = None;
        for (fate, _) in &self.outcomes {
            if let Fate::Delivered { masquerade, .. } = fate {
                match seen {
                    None => seen = Some(*masquerade),
                    Some(m) if m != *masquerade => return None,
                    _ => {}
                }
            }
        }
        seen
    }

    /// A short text: `DROP`, `REJECT`, or `a:p, b:q (masq)`.
    pub fn summary(&self) -> String {
        match self.only() {
            Some(Fate::Dropped) => return "DROP".into(),
            Some(Fate::Rejected) => return "REJECT".into(),
            _ => {}
        }
        let eps: Vec<String> = self.endpoints().keys().map(ToString::to_string).collect();
        let masq = match self.masquerade() {
            Some(true) => " (masq)",
            Some(false) => "",
            None => " (masq varies)",
        };
        format!("{}{masq}", eps.join(", "))
    }
}

#[derive(Clone, Copy, Debug)]
struct State {
    daddr: IpAddr,
    dport: u16,
    mark: u32,
    dnatted: bool,
    masquerade: bool,
    probability: f64,
    rules: usize,
    lookups: usize,
    /// The named counter the packet was counted in, if any.
    counted: Option<CounterId>,
}

/// How a chain's evaluation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Fell off the end or returned: the caller goes on.
    Continue,
    /// Accepted (includes NAT statements, which end their chain).
    Accept,
    Drop,
    Reject,
}

/// How a rule's statements ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// On to the next rule.
    Next,
    /// The chain ends.
    End(Flow),
}

/// Nesting deeper than this is a loop in the ruleset.
const MAX_DEPTH: usize = 32;

struct Walk<'a> {
    table: &'a Table,
    host: &'a Host,
    packet: Packet,
}

impl Walk<'_> {
    fn key(&self, sel: Selector, st: &State) -> Key {
        let protocol = self.packet.protocol;
        match sel {
            Selector::Frontend => Key::Frontend(Frontend::Ip {
                addr: st.daddr,
                protocol,
                port: st.dport,
            }),
            Selector::NodePort => Key::Frontend(Frontend::NodePort {
                protocol,
                port: st.dport,
            }),
            Selector::Daddr => Key::Addr(st.daddr),
            Selector::SaddrDaddr => Key::AddrPair(self.packet.src, st.daddr),
        }
    }

    fn lookup(&self, set: &crate::names::SetId, key: &Key, st: &mut State) -> Option<Option<Value>> {
        st.lookups += 1;
        self.table.sets.get(set).and_then(|s| s.get(key)).cloned()
    }

    /// The interface the packet arrived on: none for one sent by the host.
    fn iif(&self) -> &str {
        match self.packet.origin {
            Origin::Local => "",
            Origin::Forwarded => self.host.input_interface(self.packet.src),
        }
    }

    fn matches(&self, m: &Match, st: &mut State) -> bool {
        let within = |nets: &[IpNet], ip: IpAddr| nets.iter().any(|n| n.contains(&ip));
        match m {
            Match::NewConnection | Match::HasPorts => true,
            Match::Dnatted => st.dnatted,
            Match::Marked(bits) => st.mark & bits == *bits,
            Match::LocalDestination(nets) => {
                self.host.is_local(st.daddr) && !st.daddr.is_loopback() && (nets.is_empty() || within(nets, st.daddr))
            }
            Match::LocalSource => self.host.is_local(self.packet.src),
            Match::SourceIn(nets) => within(nets, self.packet.src),
            Match::SourceNotIn(nets) => !within(nets, self.packet.src),
            Match::DestinationIn(nets) => within(nets, st.daddr),
            Match::InSet(sel, set) => {
                let key = self.key(*sel, st);
                self.lookup(set, &key, st).is_some()
            }
            Match::InputInterface(pattern) => interface_matches(self.iif(), pattern),
            Match::NotInputInterface(pattern) => !interface_matches(self.iif(), pattern),
            Match::KnownClient { clients, endpoint } => {
                let key = Key::Client(self.packet.src, *endpoint);
                self.lookup(clients, &key, st).is_some()
            }
            Match::Protocol(p) => self.packet.protocol == *p,
        }
    }

    fn chain(&self, id: &ChainId, st: State, depth: usize) -> Vec<(State, Flow)> {
        if depth > MAX_DEPTH {
            return vec![(st, Flow::Drop)];
        }
        let rules = self.table.chains.get(id).map_or(&[][..], Vec::as_slice);
        self.rules_from(rules, 0, st, depth)
    }

    fn rules_from(&self, rules: &[Rule], start: usize, mut st: State, depth: usize) -> Vec<(State, Flow)> {
        for (i, rule) in rules.iter().enumerate().skip(start) {
            st.rules += 1;
            if !rule.matches.iter().all(|m| self.matches(m, &mut st)) {
                continue;
            }
            let mut out = Vec::new();
            for (s, step) in self.statements(&rule.statements, st, depth) {
                match step {
                    Step::Next => out.extend(self.rules_from(rules, i + 1, s, depth)),
                    Step::End(flow) => out.push((s, flow)),
                }
            }
            return out;
        }
        vec![(st, Flow::Continue)]
    }

    /// Continues `stmts` after a chain call that returned `results`.
    fn after_call(
        &self,
        results: Vec<(State, Flow)>,
        rest: &[Statement],
        depth: usize,
        goto: bool,
    ) -> Vec<(State, Step)> {
        let mut out = Vec::new();
        for (s, flow) in results {
            match (flow, goto) {
                (Flow::Continue, false) => out.extend(self.statements(rest, s, depth)),
                (flow, _) => out.push((s, Step::End(flow))),
            }
        }
        out
    }

    fn statements(&self, stmts: &[Statement], mut st: State, depth: usize) -> Vec<(State, Step)> {
        let Some((first, rest)) = stmts.split_first() else {
            return vec![(st, Step::Next)];
        };
        let split = |st: State, n: usize| State {
            probability: st.probability / n as f64,
            ..st
        };
        match first {
            Statement::Jump(c) => self.after_call(self.chain(c, st, depth + 1), rest, depth, false),
            Statement::Goto(c) => self.after_call(self.chain(c, st, depth + 1), rest, depth, true),
            Statement::Drop => vec![(st, Step::End(Flow::Drop))],
            Statement::Reject => vec![(st, Step::End(Flow::Reject))],
            Statement::VerdictMap(sel, set) => {
                let key = self.key(*sel, &st);
                match self.lookup(set, &key, &mut st) {
                    Some(Some(Value::Goto(c))) => self.after_call(self.chain(&c, st, depth + 1), rest, depth, true),
                    // No element: the rule stops here.
                    _ => vec![(st, Step::Next)],
                }
            }
            Statement::SetMark(bits) => {
                st.mark |= bits;
                self.statements(rest, st, depth)
            }
            Statement::ClearMark(bits) => {
                st.mark &= !bits;
                self.statements(rest, st, depth)
            }
            Statement::Masquerade => {
                st.masquerade = true;
                vec![(st, Step::End(Flow::Accept))]
            }
            Statement::Dnat(_, ep) => vec![(dnat(st, *ep), Step::End(Flow::Accept))],
            Statement::DnatMap { map, width, .. } => (0..*width)
                .map(|i| {
                    let mut s = split(st, *width as usize);
                    match self.lookup(map, &Key::Index(i), &mut s) {
                        Some(Some(Value::Endpoint(ep))) => (dnat(s, ep), Step::End(Flow::Accept)),
                        _ => (s, Step::Next),
                    }
                })
                .collect(),
            Statement::DnatSlots { node_port, width } => {
                let sel = if *node_port {
                    Selector::NodePort
                } else {
                    Selector::Frontend
                };
                let Key::Frontend(frontend) = self.key(sel, &st) else {
                    return vec![(st, Step::Next)];
                };
                let map = crate::names::SetId::slots(*node_port, *width);
                (0..*width)
                    .map(|slot| {
                        let mut s = split(st, usize::from(*width));
                        match self.lookup(&map, &Key::Slot(frontend, slot), &mut s) {
                            Some(Some(Value::Endpoint(ep))) => (dnat(s, ep), Step::End(Flow::Accept)),
                            _ => (s, Step::Next),
                        }
                    })
                    .collect()
            }
            Statement::RandomChain { map, width } => (0..*width)
                .flat_map(|i| {
                    let mut s = split(st, *width as usize);
                    match self.lookup(map, &Key::Index(i), &mut s) {
                        Some(Some(Value::Goto(c))) => self.after_call(self.chain(&c, s, depth + 1), rest, depth, true),
                        _ => vec![(s, Step::Next)],
                    }
                })
                .collect(),
            // The tracer reads the table; it does not change it.
            Statement::RememberClient { .. } => self.statements(rest, st, depth),
            Statement::Count(counter) => {
                st.counted = Some(*counter);
                self.statements(rest, st, depth)
            }
        }
    }

    /// Runs the base chains of a hook in priority order.
    fn hook(&self, hook: Hook, states: Vec<State>, fates: &mut Vec<(Fate, State)>) -> Vec<State> {
        let mut chains: Vec<(&ChainId, i32)> = self
            .table
            .chains
            .keys()
            .filter_map(|c| c.base().filter(|b| b.hook == hook).map(|b| (c, b.priority)))
            .collect();
        chains.sort_by_key(|(_, p)| *p);
        let mut live = states;
        for (chain, _) in chains {
            let mut next = Vec::new();
            for st in live {
                for (s, flow) in self.chain(chain, st, 0) {
                    match flow {
                        Flow::Continue | Flow::Accept => next.push(s),
                        Flow::Drop => fates.push((Fate::Dropped, s)),
                        Flow::Reject => fates.push((Fate::Rejected, s)),
                    }
                }
            }
            live = next;
        }
        live
    }
}

fn dnat(mut st: State, ep: SocketAddr) -> State {
    st.daddr = ep.ip();
    st.dport = ep.port();
    st.dnatted = true;
    st
}

impl KernelModel {
    /// Traces the first packet of a connection through the table of its
    /// family. Without a table, every packet is delivered untouched.
    pub fn trace(&self, host: &Host, packet: Packet) -> Trace {
        let family = match packet.dst {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        };
        let empty = Table::default();
        let walk = Walk {
            table: self.table(family).unwrap_or(&empty),
            host,
            packet,
        };
        let start = State {
            daddr: packet.dst,
            dport: packet.port,
            mark: 0,
            dnatted: false,
            masquerade: false,
            probability: 1.0,
            rules: 0,
            lookups: 0,
            counted: None,
        };
        let mut fates = Vec::new();
        let routed = match packet.origin {
            Origin::Local => walk.hook(Hook::Output, vec![start], &mut fates),
            Origin::Forwarded => walk.hook(Hook::Prerouting, vec![start], &mut fates),
        };
        let (to_host, through): (Vec<State>, Vec<State>) = routed
            .into_iter()
            .partition(|s| packet.origin == Origin::Forwarded && host.is_local(s.daddr));
        let delivered = |s: &State| Fate::Delivered {
            to: SocketAddr::new(s.daddr, s.dport),
            masquerade: s.masquerade,
        };
        for s in walk.hook(Hook::Input, to_host, &mut fates) {
            fates.push((delivered(&s), s));
        }
        let through = match packet.origin {
            Origin::Forwarded => walk.hook(Hook::Forward, through, &mut fates),
            Origin::Local => through,
        };
        for s in walk.hook(Hook::Postrouting, through, &mut fates) {
            fates.push((delivered(&s), s));
        }
        let mut merged: BTreeMap<Fate, f64> = BTreeMap::new();
        let mut counted: BTreeMap<CounterId, f64> = BTreeMap::new();
        let (mut rules, mut lookups) = (0, 0);
        for (fate, s) in fates {
            *merged.entry(fate).or_default() += s.probability;
            if let Some(c) = s.counted {
                *counted.entry(c).or_default() += s.probability;
            }
            rules = rules.max(s.rules);
            lookups = lookups.max(s.lookups);
        }
        Trace {
            outcomes: merged.into_iter().collect(),
            rules,
            lookups,
            counted,
        }
    }
}
