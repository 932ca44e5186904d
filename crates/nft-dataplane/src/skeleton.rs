//! The fixed part of the table: its sets and maps, and the chains that
//! look frontends up in them.
//!
//! ```text
//!  nat prerouting/output (-100) -> services:
//!    @masq-frontends / @masq-nodeports -> mark
//!    daddr @cluster-ips, saddr outside --cluster-cidr (or all) -> mark
//!    daddr . proto . port @slot-frontends-N -> goto slots-N   (N = 1..=16)
//!        (N endpoints: dnat via @service-slots-N, numgen mod N)
//!    daddr . proto . port vmap @service-chains
//!        -> goto svc-/ext-/fw-…   (ports that need chains of their own)
//!    fib local -> goto nodeports: the same for node ports, keyed by
//!        proto . port (@nodeport-slot-frontends-N, @nodeport-chains)
//!  nat postrouting (100): marked -> masquerade; hairpin -> masquerade
//!  filter output (-110), with localhost node ports (the relay answers TCP):
//!    daddr loopback, udp/sctp, proto . port @nodeports-not-relayed
//!        -> counter, reject
//!  filter input/forward/output (-110), new connections:
//!    @no-endpoints / @nodeport-no-endpoints -> reject
//!    @no-local-endpoints / @nodeport-no-local-endpoints -> drop
//!  filter forward (-110) / output after DNAT (-90), new connections:
//!    cluster-ips-check: daddr @cluster-ips -> reject (not a service port)
//!                       daddr in --service-cidr -> drop (no such service)
//! ```
//!
//! A new connection passes the same number of rules and lookups whatever
//! the number of services: three masquerade lookups, up to sixteen
//! slot-frontend sets and a verdict map (twice for node ports), one slot
//! map (and the guards' lookups in the filter chains). Frontends balanced
//! through the slot maps are plain set elements, not verdict-map elements,
//! so adding or changing one does not make the kernel revalidate the
//! table's jumps.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use slice_model::IpFamily;

use crate::desired::{DataplaneConfig, Scope};
use crate::names::{ChainId, CounterId, MASQUERADE_MARK, MAX_SLOTS, SetId};
use crate::rule::{Match, Rule, Selector, Statement};

/// The fixed chains and their rules, in declaration order.
pub fn chains(config: &DataplaneConfig) -> Vec<(ChainId, Vec<Rule>)> {
    match config.scope {
        Scope::Node => node_chains(config),
        Scope::Pod => pod_chains(),
    }
}

/// A pod's table (multus mode): what the pod sends to a cluster IP is
/// DNATed on output, with its source kept; no node ports, no external
/// addresses, no masquerading.
///
/// ```text
///  nat output (-100) -> services: daddr . proto . port vmap @service-chains
///  filter output (-110), new: @no-endpoints -> reject, @no-local-endpoints -> drop
///  filter output (-90), new: daddr @cluster-ips -> reject (not a service port)
/// ```
fn pod_chains() -> Vec<(ChainId, Vec<Rule>)> {
    let new_to = |set| vec![Match::NewConnection, Match::InSet(Selector::Frontend, set)];
    let mut all = vec![
        (ChainId::Services, dispatch(false)),
        (
            ChainId::ClusterIpsCheck,
            vec![Rule::new(
                vec![Match::InSet(Selector::Daddr, SetId::ClusterIps)],
                vec![Statement::Reject],
            )],
        ),
        (
            ChainId::NatOutput,
            vec![Rule::always(vec![Statement::Jump(ChainId::Services)])],
        ),
        (
            ChainId::FilterOutput,
            vec![
                Rule::new(new_to(SetId::NoEndpoints), vec![Statement::Reject]),
                Rule::new(new_to(SetId::NoLocalEndpoints), vec![Statement::Drop]),
            ],
        ),
        (
            ChainId::FilterOutputPostDnat,
            vec![Rule::new(
                vec![Match::NewConnection],
                vec![Statement::Jump(ChainId::ClusterIpsCheck)],
            )],
        ),
    ];
    for n in 1..=MAX_SLOTS {
        all.push((
            ChainId::ServiceSlots(n),
            vec![Rule::new(
                vec![Match::HasPorts],
                vec![Statement::DnatSlots {
                    node_port: false,
                    width: n,
                }],
            )],
        ));
    }
    all
}

/// The node's table.
fn node_chains(config: &DataplaneConfig) -> Vec<(ChainId, Vec<Rule>)> {
    // No node-port address of this family: no node-port rule at all.
    let local = config.family_nodeport_addresses().map(Match::LocalDestination);
    let in_set = |sel, set| Match::InSet(sel, set);
    let on_node_ports = |matches: Vec<Match>| {
        let local = local.clone()?;
        Some([vec![local], matches].concat())
    };
    let mut services = vec![Rule::new(
        vec![in_set(Selector::Frontend, SetId::MasqFrontends)],
        vec![Statement::Jump(ChainId::MarkForMasquerade)],
    )];
    services.extend(
        on_node_ports(vec![in_set(Selector::NodePort, SetId::MasqNodePorts)])
            .map(|m| Rule::new(m, vec![Statement::Jump(ChainId::MarkForMasquerade)])),
    );
    // Traffic to cluster IPs, by address: every port of a cluster IP is
    // masqueraded the same way, so one element per address serves them all.
    let to_cluster_ip = Match::InSet(Selector::Daddr, SetId::ClusterIps);
    if config.masquerade_all {
        services.push(Rule::new(
            vec![to_cluster_ip],
            vec![Statement::Jump(ChainId::MarkForMasquerade)],
        ));
    } else if let Some((_, not_local)) = config.local_traffic() {
        services.push(Rule::new(
            vec![to_cluster_ip, not_local],
            vec![Statement::Jump(ChainId::MarkForMasquerade)],
        ));
    }
    services.extend(dispatch(false));
    services.extend(on_node_ports(Vec::new()).map(|m| Rule::new(m, vec![Statement::Goto(ChainId::NodePorts)])));

    let mut filter = vec![
        Rule::new(
            vec![Match::NewConnection, in_set(Selector::Frontend, SetId::NoEndpoints)],
            vec![Statement::Reject],
        ),
        Rule::new(
            vec![
                Match::NewConnection,
                in_set(Selector::Frontend, SetId::NoLocalEndpoints),
            ],
            vec![Statement::Drop],
        ),
    ];
    for (set, verdict) in [
        (SetId::NodePortNoEndpoints, Statement::Reject),
        (SetId::NodePortNoLocalEndpoints, Statement::Drop),
    ] {
        let matches = on_node_ports(vec![in_set(Selector::NodePort, set)]);
        filter.extend(matches.map(|m| Rule::new([vec![Match::NewConnection], m].concat(), vec![verdict])));
    }
    let guard = Rule::new(
        vec![Match::NewConnection],
        vec![Statement::Jump(ChainId::ClusterIpsCheck)],
    );
    let mut cluster_ips_check = vec![Rule::new(
        vec![Match::InSet(Selector::Daddr, SetId::ClusterIps)],
        vec![Statement::Reject],
    )];
    let service_cidrs = config.family_service_cidrs();
    if !service_cidrs.is_empty() {
        cluster_ips_check.push(Rule::new(
            vec![Match::DestinationIn(service_cidrs)],
            vec![Statement::Drop],
        ));
    }
    let mut forward = filter.clone();
    forward.push(guard.clone());

    let mut all = vec![
        (
            ChainId::MarkForMasquerade,
            vec![Rule::always(vec![Statement::SetMark(MASQUERADE_MARK)])],
        ),
        (ChainId::Services, services),
        (ChainId::NodePorts, dispatch(true)),
        (ChainId::ClusterIpsCheck, cluster_ips_check),
        (
            ChainId::NatPrerouting,
            vec![Rule::always(vec![Statement::Jump(ChainId::Services)])],
        ),
        (
            ChainId::NatOutput,
            vec![Rule::always(vec![Statement::Jump(ChainId::Services)])],
        ),
        (
            ChainId::NatPostrouting,
            vec![
                Rule::new(
                    vec![Match::Marked(MASQUERADE_MARK)],
                    vec![Statement::ClearMark(MASQUERADE_MARK), Statement::Masquerade],
                ),
                Rule::new(
                    vec![Match::Dnatted, Match::InSet(Selector::SaddrDaddr, SetId::Hairpin)],
                    vec![Statement::Masquerade],
                ),
            ],
        ),
        (ChainId::FilterInput, filter.clone()),
        (ChainId::FilterForward, forward),
        (ChainId::FilterOutput, [loopback_rejects(config), filter].concat()),
        (ChainId::FilterOutputPostDnat, vec![guard]),
    ];
    for n in 1..=MAX_SLOTS {
        for node_port in [false, true] {
            all.push((
                ChainId::slots(node_port, n),
                vec![Rule::new(
                    vec![Match::HasPorts],
                    vec![Statement::DnatSlots { node_port, width: n }],
                )],
            ));
        }
    }
    all
}

/// The named counters of the table.
pub fn counters(config: &DataplaneConfig) -> Vec<CounterId> {
    if config.scope == Scope::Node && config.loopback_relay {
        CounterId::of_loopback_relay().to_vec()
    } else {
        Vec::new()
    }
}

/// Where the loopback address answers node ports through the relay (TCP
/// only): UDP and SCTP to a node port there is counted and rejected, as
/// kube-proxy's localhost node ports reject it, rather than left to
/// whatever on the host listens there.
fn loopback_rejects(config: &DataplaneConfig) -> Vec<Rule> {
    let loopback = match config.family {
        IpFamily::V4 => IpNet::V4(ipnet::Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8)),
        IpFamily::V6 => IpNet::V6(ipnet::Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128)),
    };
    counters(config)
        .into_iter()
        .map(|counter| {
            let CounterId::LocalhostNodePortRejected(protocol) = counter;
            Rule::new(
                vec![
                    Match::DestinationIn(vec![loopback]),
                    Match::Protocol(protocol),
                    Match::InSet(Selector::NodePort, SetId::NodePortsNotRelayed),
                ],
                vec![Statement::Count(counter), Statement::Reject],
            )
        })
        .collect()
}

/// The rules that send a frontend (or node port) to what balances it: the
/// slot chain of its endpoint count, or the chain of its own.
fn dispatch(node_port: bool) -> Vec<Rule> {
    let (selector, chains) = if node_port {
        (Selector::NodePort, SetId::NodePortChains)
    } else {
        (Selector::Frontend, SetId::ServiceChains)
    };
    let mut rules: Vec<Rule> = (1..=MAX_SLOTS)
        .map(|n| {
            Rule::new(
                vec![Match::InSet(selector, SetId::slot_frontends(node_port, n))],
                vec![Statement::Goto(ChainId::slots(node_port, n))],
            )
        })
        .collect();
    rules.push(Rule::always(vec![Statement::VerdictMap(selector, chains)]));
    rules
}

/// Whether a fixed chain may be rewritten by a partial sync. nft 1.0.6
/// cannot add a rule that names a slot map once the map holds elements
/// ("conflicting protocols specified: tcp vs. th" when it reads the map's
/// `typeof` back), so only a full sync writes the slot chains; the hourly
/// full sync repairs them.
pub fn reassertable(chain: &ChainId) -> bool {
    !matches!(chain, ChainId::ServiceSlots(_) | ChainId::NodePortSlots(_))
}
