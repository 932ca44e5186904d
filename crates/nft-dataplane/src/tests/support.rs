//! Helpers for the tracer-based tests: packets and hosts from text.

use std::net::IpAddr;

use slice_model::Protocol;

use crate::tracer::{Host, Origin, Packet};

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("test address {s:?}: {e}"))
}

/// A TCP packet arriving from `src` for `dst:port`.
pub fn forwarded(src: &str, dst: &str, port: u16) -> Packet {
    packet(src, dst, port, Origin::Forwarded)
}

/// A TCP packet this host sends from `src` to `dst:port`.
pub fn local(src: &str, dst: &str, port: u16) -> Packet {
    packet(src, dst, port, Origin::Local)
}

/// The same packet with another protocol.
pub fn with_protocol(mut p: Packet, protocol: Protocol) -> Packet {
    p.protocol = protocol;
    p
}

fn packet(src: &str, dst: &str, port: u16, origin: Origin) -> Packet {
    Packet {
        src: addr(src),
        dst: addr(dst),
        protocol: Protocol::Tcp,
        port,
        origin,
    }
}

/// A host with these addresses.
pub fn host(addrs: &[&str]) -> Host {
    Host {
        local_addrs: addrs.iter().map(|a| addr(a)).collect(),
        ..Host::default()
    }
}
