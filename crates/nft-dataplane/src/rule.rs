//! Rules as data: what a rule matches ([`Match`]) and what it does
//! ([`Statement`]). Only the subset proxyd writes is modelled; the renderer
//! turns it into nft syntax and the kernel model evaluates it.

use std::fmt::{self, Write};
use std::net::SocketAddr;

use ipnet::IpNet;
use slice_model::Protocol;

use crate::names::{ChainId, CounterId, FamilyWords, SetId};
use crate::protocol::proto;

/// The part of a packet a set lookup is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Selector {
    /// `daddr . l4proto . dport`: a frontend.
    Frontend,
    /// `l4proto . dport`: a node port.
    NodePort,
    /// `daddr`.
    Daddr,
    /// `saddr . daddr`.
    SaddrDaddr,
}

/// A condition of a rule; a rule applies when all of them hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Match {
    /// The packet starts a connection (`ct state new`).
    NewConnection,
    /// The connection was DNATed (`ct status dnat`).
    Dnatted,
    /// The packet carries these mark bits.
    Marked(u32),
    /// The protocol is TCP, UDP or SCTP (so it has ports).
    HasPorts,
    /// The destination is a local address (`fib daddr type local`) other
    /// than a loopback one, and in one of these networks when any are
    /// given. Loopback is left out as kube-proxy's nftables mode leaves it
    /// out: a connection to `127.0.0.1:NODEPORT` DNATed to a pod would keep
    /// its loopback source and hang, and would take over whatever on the
    /// host listens there.
    LocalDestination(Vec<IpNet>),
    /// The source is a local address (`fib saddr type local`).
    LocalSource,
    /// The source is in one of the networks.
    SourceIn(Vec<IpNet>),
    /// The source is in none of the networks.
    SourceNotIn(Vec<IpNet>),
    /// The destination is in one of the networks.
    DestinationIn(Vec<IpNet>),
    /// The selected part of the packet is an element of the set.
    InSet(Selector, SetId),
    /// The packet arrived on this interface (`iifname`; a trailing `*`
    /// matches every name starting with what comes before it). Added last:
    /// packed fragments keep the variants' numbers.
    InputInterface(String),
    /// The packet did not arrive on this interface (locally sent packets
    /// arrived on none).
    NotInputInterface(String),
    /// The source address was sent to `endpoint` recently: (source .
    /// endpoint) is an element of the port's [`SetId::Clients`].
    KnownClient {
        /// The port's recent clients.
        clients: SetId,
        /// The endpoint.
        endpoint: SocketAddr,
    },
    /// The packet is of this protocol (`meta l4proto`).
    Protocol(#[serde(with = "crate::protocol::stored")] Protocol),
}

/// What a rule does, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Statement {
    /// Evaluate a chain, then continue here.
    Jump(ChainId),
    /// Continue in a chain, not coming back.
    Goto(ChainId),
    /// Drop the packet.
    Drop,
    /// Refuse it (ICMP unreachable, TCP reset).
    Reject,
    /// Look the selected part up in a verdict map; no element: the rule
    /// does not apply.
    VerdictMap(Selector, SetId),
    /// Sets these mark bits.
    SetMark(u32),
    /// Clears these mark bits.
    ClearMark(u32),
    /// Masquerade (source NAT to the outgoing address, random ports).
    Masquerade,
    /// DNAT to one endpoint.
    Dnat(#[serde(with = "crate::protocol::stored")] Protocol, SocketAddr),
    /// DNAT to one of the `width` endpoints of a backend map, each equally
    /// likely: `numgen random mod width` is the key.
    DnatMap {
        /// The protocol.
        #[serde(with = "crate::protocol::stored")]
        protocol: Protocol,
        /// The map ([`SetId::Backends`]).
        map: SetId,
        /// How many endpoints it holds (positions 0..width).
        width: u32,
    },
    /// DNAT through the slot map of frontends with N endpoints (N = the
    /// map's width): the key is the frontend and a random slot in 0..N.
    DnatSlots {
        /// Node ports (keyed without the address) or addresses.
        node_port: bool,
        /// N.
        width: u8,
    },
    /// Continue in one of the `width` chains of a verdict map
    /// ([`SetId::Picks`]), each equally likely: `numgen random mod width`
    /// is the key.
    RandomChain {
        /// The map.
        map: SetId,
        /// How many chains it holds (positions 0..width).
        width: u32,
    },
    /// Remember that the source address was sent to `endpoint`, for
    /// `timeout_secs` from now (again, when it was already remembered).
    RememberClient {
        /// The port's recent clients ([`SetId::Clients`]).
        clients: SetId,
        /// The endpoint.
        endpoint: SocketAddr,
        /// For how long, in seconds.
        timeout_secs: u64,
    },
    /// Count the packet in a named counter of the table, and go on.
    Count(CounterId),
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Rule {
    /// Conditions, all of which must hold.
    pub matches: Vec<Match>,
    /// What it does.
    pub statements: Vec<Statement>,
}

impl Rule {
    /// A rule with these conditions and statements.
    pub fn new(matches: Vec<Match>, statements: Vec<Statement>) -> Self {
        Self { matches, statements }
    }

    /// An unconditional rule.
    pub fn always(statements: Vec<Statement>) -> Self {
        Self::new(Vec::new(), statements)
    }

    /// The sets and chains the rule refers to (they must exist).
    pub fn references(&self) -> (Vec<SetId>, Vec<ChainId>) {
        let mut sets = Vec::new();
        let mut chains = Vec::new();
        for m in &self.matches {
            if let Match::InSet(_, s) | Match::KnownClient { clients: s, .. } = m {
                sets.push(s.clone());
            }
        }
        for s in &self.statements {
            match s {
                Statement::Jump(c) | Statement::Goto(c) => chains.push(c.clone()),
                Statement::VerdictMap(_, set)
                | Statement::RememberClient { clients: set, .. }
                | Statement::DnatMap { map: set, .. }
                | Statement::RandomChain { map: set, .. } => sets.push(set.clone()),
                Statement::DnatSlots { node_port, width } => sets.push(SetId::slots(*node_port, *width)),
                _ => {}
            }
        }
        (sets, chains)
    }

    /// The named counters the rule counts in (they must exist).
    pub fn counters(&self) -> impl Iterator<Item = CounterId> + '_ {
        self.statements.iter().filter_map(|s| match s {
            Statement::Count(c) => Some(*c),
            _ => None,
        })
    }

    /// Whether `nft` (1.0.6) can read the rule's text: it cannot read a
    /// lookup of constants beside the source address (an affinity port's
    /// known clients), so a rule holding one is written over netlink (nft
    /// lists it, with the endpoint in hexadecimal).
    pub fn readable_by_nft(&self) -> bool {
        !self.matches.iter().any(|m| matches!(m, Match::KnownClient { .. }))
    }

    /// Writes the rule in nft syntax.
    pub fn write(&self, out: &mut (impl Write + ?Sized), words: FamilyWords) -> fmt::Result {
        let mut sep = Sep::default();
        for m in &self.matches {
            sep.next(out)?;
            write_match(out, m, words)?;
        }
        for s in &self.statements {
            sep.next(out)?;
            write_statement(out, s, words)?;
        }
        Ok(())
    }

    /// The rule in nft syntax.
    pub fn text(&self, words: FamilyWords) -> String {
        let mut s = String::new();
        let _ = self.write(&mut s, words);
        s
    }
}

#[derive(Default)]
struct Sep(bool);

impl Sep {
    fn next(&mut self, out: &mut (impl Write + ?Sized)) -> fmt::Result {
        if std::mem::replace(&mut self.0, true) {
            out.write_char(' ')?;
        }
        Ok(())
    }
}

fn selector(s: Selector, a: &str) -> String {
    match s {
        Selector::Frontend => format!("{a} daddr . meta l4proto . th dport"),
        Selector::NodePort => "meta l4proto . th dport".into(),
        Selector::Daddr => format!("{a} daddr"),
        Selector::SaddrDaddr => format!("{a} saddr . {a} daddr"),
    }
}

/// `{ a/n, b/m }` with host bits cleared; one network alone is written
/// bare (`a/n`), a prefix match, because braces make nft create an
/// anonymous set for the rule, and the kernel's cost of creating one grows
/// with the sets the table already has (a restart rewriting thousands of
/// service chains spent seconds in it).
pub(crate) fn net_set(nets: &[IpNet]) -> String {
    let items: Vec<String> = nets.iter().map(|n| n.trunc().to_string()).collect();
    match items.as_slice() {
        [one] => one.clone(),
        _ => format!("{{ {} }}", items.join(", ")),
    }
}

fn write_match(out: &mut (impl Write + ?Sized), m: &Match, w: FamilyWords) -> fmt::Result {
    let a = w.table;
    match m {
        Match::NewConnection => out.write_str("ct state new"),
        Match::Dnatted => out.write_str("ct status dnat"),
        Match::Marked(bits) => write!(out, "meta mark & {bits:#x} == {bits:#x}"),
        Match::HasPorts => out.write_str("meta l4proto { tcp, udp, sctp }"),
        Match::LocalDestination(nets) => {
            let loopback = if a == "ip" { "127.0.0.0/8" } else { "::1" };
            write!(out, "fib daddr type local {a} daddr != {loopback}")?;
            if nets.is_empty() {
                Ok(())
            } else {
                write!(out, " {a} daddr {}", net_set(nets))
            }
        }
        Match::LocalSource => out.write_str("fib saddr type local"),
        Match::SourceIn(nets) => write!(out, "{a} saddr {}", net_set(nets)),
        Match::SourceNotIn(nets) => write!(out, "{a} saddr != {}", net_set(nets)),
        Match::DestinationIn(nets) => write!(out, "{a} daddr {}", net_set(nets)),
        Match::InSet(s, set) => write!(out, "{} @{set}", selector(*s, a)),
        Match::InputInterface(name) => write!(out, "iifname \"{name}\""),
        Match::NotInputInterface(name) => write!(out, "iifname != \"{name}\""),
        Match::KnownClient { clients, endpoint } => {
            write!(out, "{a} saddr . {} . {} @{clients}", endpoint.ip(), endpoint.port())
        }
        Match::Protocol(p) => write!(out, "meta l4proto {}", proto(*p)),
    }
}

fn write_statement(out: &mut (impl Write + ?Sized), s: &Statement, w: FamilyWords) -> fmt::Result {
    let a = w.table;
    match s {
        Statement::Jump(c) => write!(out, "jump {c}"),
        Statement::Goto(c) => write!(out, "goto {c}"),
        Statement::Drop => out.write_str("drop"),
        Statement::Reject => out.write_str("reject"),
        Statement::VerdictMap(sel, set) => write!(out, "{} vmap @{set}", selector(*sel, a)),
        Statement::SetMark(bits) => write!(out, "meta mark set meta mark | {bits:#x}"),
        Statement::ClearMark(bits) => write!(out, "meta mark set meta mark & {:#x}", !bits),
        Statement::Masquerade => out.write_str("masquerade fully-random"),
        Statement::Dnat(p, ep) => write!(out, "meta l4proto {} dnat {a} to {ep}", proto(*p)),
        Statement::DnatMap { protocol, map, width } => write!(
            out,
            "meta l4proto {} dnat {a} to numgen random mod {width} map @{map}",
            proto(*protocol)
        ),
        Statement::DnatSlots { node_port, width } => {
            let (key, map) = if *node_port {
                (selector(Selector::NodePort, a), SetId::NodePortSlots(*width))
            } else {
                (selector(Selector::Frontend, a), SetId::ServiceSlots(*width))
            };
            write!(out, "dnat {a} to {key} . numgen random mod {width} map @{map}")
        }
        Statement::RandomChain { map, width } => write!(out, "numgen random mod {width} vmap @{map}"),
        Statement::RememberClient {
            clients,
            endpoint,
            timeout_secs,
        } => write!(
            out,
            "update @{clients} {{ {a} saddr . {} . {} timeout {timeout_secs}s }}",
            endpoint.ip(),
            endpoint.port()
        ),
        Statement::Count(counter) => write!(out, "counter name \"{counter}\""),
    }
}
