//! Rendering a [`DesiredState`] as one nftables transaction.
//!
//! The shape keeps load time and per-change cost low as services grow. (Issue
//! #4 records, with nft 1.0.6 in a namespace: 10,000 services as a chain each
//! took 10.3 s of kernel time to load, as map elements 1.5 s.)
//!
//! ```text
//!  chain services                       (jumped to from nat prerouting/output)
//!    vip . proto . port  vmap @service-chains   -> big services (> 16 endpoints)
//!    dnat to vip . proto . port . (numgen random mod 16) map @service-slots
//!  map service-slots    16 elements per service: slot i -> endpoint i mod N
//!  set no-endpoints     -> reject (filter input/forward/output)
//!  set no-local-endpoints -> drop (endpoints exist, none usable from here)
//! ```
//!
//! A service with N <= 16 endpoints fills its 16 slots round-robin, so an
//! endpoint gets floor(16/N) or ceil(16/N) of the traffic: the worst skew is
//! 2:1 (N = 9..15; e.g. N = 10: 2/16 vs 1/16). Services with more than 16
//! endpoints get their own chain with an exact `numgen random mod N`, so
//! they stay fair. A service's elements can be replaced without touching
//! any other service's.

use std::fmt::Write;
use std::net::SocketAddr;

use slice_model::{IpFamily, Protocol};

use super::desired::{DesiredState, ServiceTarget};

/// The table every proxyd rule lives in.
pub const TABLE: &str = "proxyd";

/// Slots per service in the shared map.
pub const SLOTS: usize = 16;

fn family_word(f: IpFamily) -> (&'static str, &'static str, &'static str) {
    // (table family, address match, address type)
    match f {
        IpFamily::V4 => ("ip", "ip", "ipv4_addr"),
        IpFamily::V6 => ("ip6", "ip6", "ipv6_addr"),
    }
}

fn proto(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// `addr . port` as nft writes it in concatenations.
fn addr_port(a: &SocketAddr) -> String {
    format!("{} . {}", a.ip(), a.port())
}

fn key(s: &ServiceTarget) -> String {
    format!("{} . {} . {}", s.vip, proto(s.name.protocol), s.port)
}

/// The chain of a service with more than [`SLOTS`] endpoints.
pub fn service_chain(s: &ServiceTarget) -> String {
    let n = &s.name;
    format!(
        "svc-{}/{}/{}/{}",
        n.service.namespace,
        n.service.name,
        proto(s.name.protocol),
        s.port
    )
}

/// The endpoint each of the 16 slots of a small service sends to.
pub fn slot_assignment(endpoints: &[SocketAddr]) -> Vec<SocketAddr> {
    (0..SLOTS).map(|i| endpoints[i % endpoints.len()]).collect()
}

fn elements(out: &mut String, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\t\telements = {{");
    for (i, item) in items.iter().enumerate() {
        let sep = if i + 1 == items.len() { "" } else { "," };
        let _ = writeln!(out, "\t\t\t{item}{sep}");
    }
    let _ = writeln!(out, "\t\t}}");
}

/// The whole ruleset, replacing whatever the table held, as one `nft -f`
/// transaction.
pub fn render_full(state: &DesiredState) -> String {
    let (tf, af, at) = family_word(state.family);
    let mut slots = Vec::new();
    let mut chains = Vec::new();
    let mut reject = Vec::new();
    let mut drop = Vec::new();
    let mut big = Vec::new();
    for s in &state.services {
        match s.endpoints.len() {
            0 if s.has_any_endpoints => drop.push(key(s)),
            0 => reject.push(key(s)),
            n if n <= SLOTS => {
                for (i, ep) in slot_assignment(&s.endpoints).iter().enumerate() {
                    slots.push(format!("{} . {i} : {}", key(s), addr_port(ep)));
                }
            }
            _ => {
                chains.push(format!("{} : goto {}", key(s), service_chain(s)));
                big.push(s);
            }
        }
    }

    let mut out = String::new();
    // Create-then-delete makes the replace work whether or not the table
    // exists, all in one transaction: no window without rules.
    let _ = writeln!(out, "add table {tf} {TABLE}");
    let _ = writeln!(out, "delete table {tf} {TABLE}");
    let _ = writeln!(out, "table {tf} {TABLE} {{");
    let _ = writeln!(out, "\tmap service-slots {{");
    let _ = writeln!(
        out,
        "\t\ttypeof {af} daddr . meta l4proto . th dport . numgen random mod {SLOTS} : {af} daddr . th dport"
    );
    elements(&mut out, &slots);
    let _ = writeln!(out, "\t}}");
    let _ = writeln!(out, "\tmap service-chains {{");
    let _ = writeln!(out, "\t\ttype {at} . inet_proto . inet_service : verdict");
    elements(&mut out, &chains);
    let _ = writeln!(out, "\t}}");
    for (name, items) in [("no-endpoints", &reject), ("no-local-endpoints", &drop)] {
        let _ = writeln!(out, "\tset {name} {{");
        let _ = writeln!(out, "\t\ttype {at} . inet_proto . inet_service");
        elements(&mut out, items);
        let _ = writeln!(out, "\t}}");
    }
    for s in &big {
        let _ = writeln!(out, "\tchain {} {{", service_chain(s));
        let targets: Vec<String> = s
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{i} : {}", addr_port(e)))
            .collect();
        let _ = writeln!(
            out,
            "\t\tmeta l4proto {} dnat {af} to numgen random mod {} map {{ {} }}",
            proto(s.name.protocol),
            s.endpoints.len(),
            targets.join(", ")
        );
        let _ = writeln!(out, "\t}}");
    }
    let _ = writeln!(out, "\tchain services {{");
    let _ = writeln!(out, "\t\t{af} daddr . meta l4proto . th dport vmap @service-chains");
    let _ = writeln!(
        out,
        "\t\tmeta l4proto {{ tcp, udp, sctp }} dnat {af} to {af} daddr . meta l4proto . th dport . numgen random mod {SLOTS} map @service-slots"
    );
    let _ = writeln!(out, "\t}}");
    for (chain, hook) in [("nat-prerouting", "prerouting"), ("nat-output", "output")] {
        let _ = writeln!(out, "\tchain {chain} {{");
        let _ = writeln!(out, "\t\ttype nat hook {hook} priority -100; policy accept;");
        let _ = writeln!(out, "\t\tjump services");
        let _ = writeln!(out, "\t}}");
    }
    for (chain, hook) in [
        ("filter-input", "input"),
        ("filter-forward", "forward"),
        ("filter-output", "output"),
    ] {
        let _ = writeln!(out, "\tchain {chain} {{");
        let _ = writeln!(out, "\t\ttype filter hook {hook} priority -110; policy accept;");
        let _ = writeln!(out, "\t\t{af} daddr . meta l4proto . th dport @no-endpoints reject");
        let _ = writeln!(out, "\t\t{af} daddr . meta l4proto . th dport @no-local-endpoints drop");
        let _ = writeln!(out, "\t}}");
    }
    let _ = writeln!(out, "}}");
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use slice_model::{ServiceName, ServicePortName};

    use super::*;

    fn target(name: &str, vip: &str, protocol: Protocol, port: u16, eps: &[&str], any: bool) -> ServiceTarget {
        ServiceTarget {
            name: ServicePortName::new(ServiceName::new("ns", name), "p", protocol),
            vip: vip.parse().unwrap(),
            port,
            endpoints: eps.iter().map(|e| e.parse().unwrap()).collect(),
            has_any_endpoints: any || !eps.is_empty(),
        }
    }

    #[test]
    fn slots_are_as_fair_as_sixteen_allow() {
        for n in 1..=SLOTS {
            let eps: Vec<SocketAddr> = (0..n)
                .map(|i| SocketAddr::from(([10, 0, 0, i as u8 + 1], 80)))
                .collect();
            let mut counts: HashMap<SocketAddr, usize> = HashMap::new();
            for e in slot_assignment(&eps) {
                *counts.entry(e).or_default() += 1;
            }
            assert_eq!(counts.len(), n, "every endpoint gets a slot (n={n})");
            let (lo, hi) = (counts.values().min().unwrap(), counts.values().max().unwrap());
            assert!(hi - lo <= 1, "n={n}: {lo}..{hi}");
            assert!(*hi <= 2 * *lo, "worst skew 2:1 (n={n})");
        }
    }

    #[test]
    fn golden_ipv4_ruleset() {
        let big: Vec<String> = (1..=17).map(|i| format!("10.2.0.{i}:53")).collect();
        let big: Vec<&str> = big.iter().map(String::as_str).collect();
        let state = DesiredState {
            family: IpFamily::V4,
            services: vec![
                target(
                    "web",
                    "10.96.0.10",
                    Protocol::Tcp,
                    80,
                    &["10.1.0.1:8080", "10.1.0.2:8080"],
                    false,
                ),
                target("dns", "10.96.0.20", Protocol::Udp, 53, &big, false),
                target("gone", "10.96.0.30", Protocol::Tcp, 443, &[], false),
                target("local", "10.96.0.40", Protocol::Tcp, 80, &[], true),
            ],
        };
        let text = render_full(&state);
        let golden = include_str!("../../tests/golden-nft/basic-ipv4.nft");
        assert_eq!(text, golden, "rendered:\n{text}");
    }

    #[test]
    fn ipv6_uses_ip6_words() {
        let state = DesiredState {
            family: IpFamily::V6,
            services: vec![target(
                "web",
                "fd00::10",
                Protocol::Tcp,
                80,
                &["[fd00:1::1]:8080"],
                false,
            )],
        };
        let text = render_full(&state);
        assert!(text.starts_with("add table ip6 proxyd\ndelete table ip6 proxyd\n"));
        assert!(text.contains("type ipv6_addr . inet_proto . inet_service : verdict"));
        assert!(text.contains("fd00::10 . tcp . 80 . 15 : fd00:1::1 . 8080"));
        assert!(text.contains("dnat ip6 to ip6 daddr"));
    }
}
