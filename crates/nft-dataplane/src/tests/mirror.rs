//! kube-proxy's packet flows in IPv6: a flow test written with IPv4
//! addresses runs again with every address moved into `fd00::/96` (its 32
//! bits kept as the low ones, a network's prefix 96 longer), so that the
//! same cases hold for an IPv6 engine, table and tracer. The test helpers
//! (`Engine`, `fresh`, `trace`, `expect`, the packet builders) consult
//! [`on`] and move what passes through them.

use std::cell::Cell;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;
use slice_model::{EndpointSlice, IpFamily, ServiceInfo};

use crate::DataplaneConfig;
use crate::desired::LocalDetector;
use crate::tracer::Packet;

thread_local! {
    static IPV6: Cell<bool> = const { Cell::new(false) };
}

/// Runs `test` as written, then with every address moved to IPv6.
pub(crate) fn in_both_families(test: impl Fn()) {
    test();
    IPV6.with(|m| m.set(true));
    let reset = Reset;
    test();
    drop(reset);
}

/// Turns the mirror off even when the test panics.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        IPV6.with(|m| m.set(false));
    }
}

/// Whether addresses are moved now.
pub(crate) fn on() -> bool {
    IPV6.with(Cell::get)
}

/// The family a test asking for `family` gets.
pub(crate) fn family(family: IpFamily) -> IpFamily {
    if on() { IpFamily::V6 } else { family }
}

/// `a`, moved when the mirror is on.
pub(crate) fn addr(a: IpAddr) -> IpAddr {
    match a {
        // The node's loopback address is IPv6's.
        IpAddr::V4(v4) if on() && v4 == std::net::Ipv4Addr::LOCALHOST => IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V4(v4) if on() => IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112) | u128::from(u32::from(v4)))),
        other => other,
    }
}

/// `n`, moved when the mirror is on.
pub(crate) fn net(n: IpNet) -> IpNet {
    match n {
        IpNet::V4(v4) if on() => {
            IpNet::new(addr(IpAddr::V4(v4.network())), v4.prefix_len() + 96).expect("a prefix of at most 128")
        }
        other => other,
    }
}

fn nets(list: &mut [IpNet]) {
    for n in list {
        *n = net(*n);
    }
}

/// A service with its addresses moved.
pub(crate) fn service(s: &ServiceInfo) -> ServiceInfo {
    let mut s = s.clone();
    for a in s
        .cluster_ips
        .iter_mut()
        .chain(&mut s.external_ips)
        .chain(&mut s.load_balancer_ips)
    {
        *a = addr(*a);
    }
    nets(&mut s.load_balancer_source_ranges);
    s
}

/// A slice with its endpoints moved.
pub(crate) fn slice(mut s: EndpointSlice) -> EndpointSlice {
    for e in &mut s.content.endpoints {
        e.addr = addr(e.addr);
    }
    s
}

/// A configuration with its family and networks moved.
pub(crate) fn config(c: &DataplaneConfig) -> DataplaneConfig {
    let mut c = c.clone();
    if !on() {
        return c;
    }
    c.family = IpFamily::V6;
    nets(&mut c.cluster_cidrs);
    nets(&mut c.nodeport_addresses);
    nets(&mut c.service_cidrs);
    if let LocalDetector::NodeCidr(ranges) = &mut c.detect_local {
        nets(ranges);
    }
    c
}

/// A packet with its addresses moved.
pub(crate) fn packet(mut p: Packet) -> Packet {
    p.src = addr(p.src);
    p.dst = addr(p.dst);
    p
}

/// A trace summary written with IPv4 addresses (`10.180.0.1:80, ...
/// (masq)`), with each address moved (`[fd00::ab4:1]:80`).
pub(crate) fn text(want: &str) -> String {
    if !on() {
        return want.to_owned();
    }
    let mut out = String::new();
    let mut rest = want;
    while !rest.is_empty() {
        let token_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
            .unwrap_or(rest.len());
        let (token, tail) = rest.split_at(token_end);
        let moved = match token.split_once(':') {
            Some((ip, port)) => ip
                .parse::<std::net::Ipv4Addr>()
                .ok()
                .map(|ip| format!("[{}]:{port}", addr(IpAddr::V4(ip)))),
            None => token
                .parse::<std::net::Ipv4Addr>()
                .ok()
                .map(|ip| addr(IpAddr::V4(ip)).to_string()),
        };
        out.push_str(moved.as_deref().unwrap_or(token));
        match tail.chars().next() {
            Some(c) => {
                out.push(c);
                rest = &tail[c.len_utf8()..];
            }
            None => rest = tail,
        }
    }
    out
}

#[test]
fn addresses_networks_and_summaries_move_together() {
    in_both_families(|| {
        let a = addr("10.180.0.1".parse().unwrap());
        let n = net("10.180.0.0/16".parse().unwrap());
        assert!(n.contains(&a));
        assert!(!net("10.181.0.0/16".parse().unwrap()).contains(&a));
        if on() {
            assert_eq!(a.to_string(), "fd00::ab4:1");
            assert_eq!(n.to_string(), "fd00::ab4:0/112");
            assert_eq!(
                text("10.180.0.1:80, 10.180.0.5:8080 (masq)"),
                "[fd00::ab4:1]:80, [fd00::ab4:5]:8080 (masq)"
            );
            assert_eq!(text("DROP"), "DROP");
        } else {
            assert_eq!(text("10.180.0.1:80 (masq)"), "10.180.0.1:80 (masq)");
        }
    });
}
