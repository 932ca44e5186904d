//! Conntrack cleanup over ctnetlink: one dump of the family's UDP entries,
//! matched against every stale flow at once, then a delete per matching
//! entry, sent in batches. The `conntrack` tool dumps the whole table once
//! per flow and runs once per flow; this is one pass whatever the count.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use slice_model::IpFamily;

use super::{
    ENOENT, NFGENMSG, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, Next, Reply, Socket, attr, find, message, nested, nfproto,
};
use crate::conntrack::{Conntrack, ConntrackError, Flow};
use crate::netns::Netns;

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const IPPROTO_UDP: u8 = super::ip_protocol(slice_model::Protocol::Udp);
/// Deletes per datagram; their acknowledgements are read before the next.
const BATCH: usize = 128;

/// Deletes conntrack entries over netlink in one network namespace.
#[derive(Debug)]
pub struct NetlinkConntrack {
    netns: Netns,
    socket: Option<Socket>,
}

impl NetlinkConntrack {
    /// Conntrack in `netns`; the socket is opened on first use.
    pub fn new(netns: Netns) -> Self {
        Self { netns, socket: None }
    }

    fn socket(&mut self) -> io::Result<&mut Socket> {
        match &mut self.socket {
            Some(s) => Ok(s),
            slot => Ok(slot.insert(Socket::open(&self.netns)?)),
        }
    }

    fn delete_matching(&mut self, family: IpFamily, stale: &Stale) -> io::Result<(u64, Vec<ConntrackError>)> {
        let socket = self.socket()?;
        let matching = dump_udp(socket, family, stale)?;
        let (mut deleted, mut errors) = (0, Vec::new());
        for batch in matching.chunks(BATCH) {
            let first = socket.seq.wrapping_add(1);
            let mut req = Vec::with_capacity(batch.len() * 64);
            for entry in batch {
                let seq = socket.next_seq();
                message(
                    &mut req,
                    CT_DELETE,
                    NLM_F_REQUEST | NLM_F_ACK,
                    seq,
                    nfproto(family),
                    |b| entry.write(b),
                );
            }
            socket.send(&req)?;
            for (k, entry) in batch.iter().enumerate() {
                let seq = first.wrapping_add(k as u32);
                let mut outcome = Ok(false);
                socket.receive(seq, |reply| {
                    outcome = match reply {
                        Reply::Ack => Ok(true),
                        // Gone already (it timed out, or another cleanup won).
                        Reply::Error(ENOENT) => Ok(false),
                        Reply::Error(errno) => Err(io::Error::from_raw_os_error(errno)),
                        _ => return Next::More,
                    };
                    Next::Stop
                })?;
                match outcome {
                    Ok(true) => deleted += 1,
                    Ok(false) => {}
                    Err(e) => errors.push(ConntrackError {
                        args: format!("delete {entry}"),
                        message: e.to_string(),
                    }),
                }
            }
        }
        Ok((deleted, errors))
    }
}

const CT_DELETE: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE;

impl Conntrack for NetlinkConntrack {
    fn delete(&mut self, family: IpFamily, flows: &[Flow]) -> (u64, Vec<ConntrackError>) {
        if flows.is_empty() {
            return (0, Vec::new());
        }
        let stale = Stale::of(flows);
        self.delete_matching(family, &stale).unwrap_or_else(|e| {
            // The socket may be in any state now: make a new one next time.
            self.socket = None;
            let error = ConntrackError {
                args: format!("netlink cleanup of {} {family} UDP flows", flows.len()),
                message: e.to_string(),
            };
            (0, vec![error])
        })
    }
}

/// The flows to delete, indexed by what identifies them.
#[derive(Debug, Default)]
struct Stale {
    to_frontend: HashSet<(IpAddr, u16)>,
    to_node_port: HashSet<u16>,
    frontend_to_endpoint: HashSet<(IpAddr, u16, IpAddr)>,
    node_port_to_endpoint: HashSet<(u16, IpAddr)>,
    to_address: HashSet<IpAddr>,
}

impl Stale {
    fn of(flows: &[Flow]) -> Self {
        let mut s = Self::default();
        for f in flows {
            match *f {
                Flow::ToFrontend { addr, port } => s.to_frontend.insert((addr, port)),
                Flow::ToNodePort { port } => s.to_node_port.insert(port),
                Flow::FrontendToEndpoint { addr, port, endpoint } => {
                    s.frontend_to_endpoint.insert((addr, port, endpoint))
                }
                Flow::NodePortToEndpoint { port, endpoint } => s.node_port_to_endpoint.insert((port, endpoint)),
                Flow::ToAddress { addr } => s.to_address.insert(addr),
            };
        }
        s
    }

    /// What `conntrack -D` with each flow's filters would match: the
    /// original destination, and (`--dst-nat`) the reply's source, which is
    /// where the flow was DNATed to.
    fn matches(&self, e: &Entry) -> bool {
        let (dst, dport, nat) = (e.orig.dst, e.orig.dst_port, e.reply_src);
        self.to_address.contains(&dst)
            || self.to_frontend.contains(&(dst, dport))
            || self.to_node_port.contains(&dport)
            || self.frontend_to_endpoint.contains(&(dst, dport, nat))
            || self.node_port_to_endpoint.contains(&(dport, nat))
    }
}

/// One direction's addresses and ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tuple {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    src_port: u16,
    dst_port: u16,
}

/// A conntrack entry, as far as cleanup needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    orig: Tuple,
    reply_src: IpAddr,
    zone: Option<u16>,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.orig;
        write!(
            f,
            "udp {}:{} -> {}:{} (DNAT to {})",
            o.src, o.src_port, o.dst, o.dst_port, self.reply_src
        )
    }
}

impl Entry {
    /// A `IPCTNL_MSG_CT_NEW` payload (one entry of a dump).
    fn parse(payload: &[u8]) -> Option<Self> {
        let body = payload.get(NFGENMSG..)?;
        let orig = Tuple::parse(find(body, CTA_TUPLE_ORIG)?)?;
        let reply = Tuple::parse(find(body, CTA_TUPLE_REPLY)?)?;
        let zone = find(body, CTA_ZONE).and_then(|z| Some(u16::from_be_bytes(z.get(..2)?.try_into().ok()?)));
        Some(Self {
            orig,
            reply_src: reply.src,
            zone,
        })
    }

    /// The attributes that name this entry in a delete.
    fn write(&self, out: &mut Vec<u8>) {
        let o = self.orig;
        nested(out, CTA_TUPLE_ORIG, |b| {
            nested(b, CTA_TUPLE_IP, |b| match (o.src, o.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    attr(b, CTA_IP_V4_SRC, &s.octets());
                    attr(b, CTA_IP_V4_DST, &d.octets());
                }
                (s, d) => {
                    attr(b, CTA_IP_V6_SRC, &v6(s).octets());
                    attr(b, CTA_IP_V6_DST, &v6(d).octets());
                }
            });
            nested(b, CTA_TUPLE_PROTO, |b| {
                attr(b, CTA_PROTO_NUM, &[o.proto]);
                attr(b, CTA_PROTO_SRC_PORT, &o.src_port.to_be_bytes());
                attr(b, CTA_PROTO_DST_PORT, &o.dst_port.to_be_bytes());
            });
        });
        if let Some(zone) = self.zone {
            attr(out, CTA_ZONE, &zone.to_be_bytes());
        }
    }
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

impl Tuple {
    fn parse(tuple: &[u8]) -> Option<Self> {
        let ip = find(tuple, CTA_TUPLE_IP)?;
        let proto = find(tuple, CTA_TUPLE_PROTO)?;
        let addr = |v4: u16, v6: u16| -> Option<IpAddr> {
            if let Some(b) = find(ip, v4) {
                return Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b.get(..4)?).ok()?)));
            }
            let b = find(ip, v6)?;
            Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b.get(..16)?).ok()?)))
        };
        let port = |k: u16| -> Option<u16> { Some(u16::from_be_bytes(find(proto, k)?.get(..2)?.try_into().ok()?)) };
        Some(Self {
            src: addr(CTA_IP_V4_SRC, CTA_IP_V6_SRC)?,
            dst: addr(CTA_IP_V4_DST, CTA_IP_V6_DST)?,
            proto: *find(proto, CTA_PROTO_NUM)?.first()?,
            src_port: port(CTA_PROTO_SRC_PORT).unwrap_or(0),
            dst_port: port(CTA_PROTO_DST_PORT).unwrap_or(0),
        })
    }
}

/// The family's UDP entries that match `stale`, from one dump.
fn dump_udp(socket: &mut Socket, family: IpFamily, stale: &Stale) -> io::Result<Vec<Entry>> {
    let seq = socket.next_seq();
    let mut req = Vec::with_capacity(32);
    let get = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET;
    message(&mut req, get, NLM_F_REQUEST | NLM_F_DUMP, seq, nfproto(family), |_| {});
    socket.send(&req)?;
    let (mut found, mut failed) = (Vec::new(), None);
    socket.receive(seq, |reply| {
        match reply {
            Reply::Message(kind, payload) if kind == NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW => {
                if let Some(e) = Entry::parse(payload).filter(|e| e.orig.proto == IPPROTO_UDP && stale.matches(e)) {
                    found.push(e);
                }
            }
            Reply::Done => return Next::Stop,
            Reply::Error(errno) => {
                failed = Some(io::Error::from_raw_os_error(errno));
                return Next::Stop;
            }
            _ => {}
        }
        Next::More
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dst: &str, dport: u16, nat: &str) -> Entry {
        Entry {
            orig: Tuple {
                src: "10.0.0.1".parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                dst: dst.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                proto: IPPROTO_UDP,
                src_port: 40_000,
                dst_port: dport,
            },
            reply_src: nat.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            zone: None,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn each_flow_matches_what_the_tool_would() {
        let svc = entry("10.96.0.10", 53, "10.244.1.5");
        let one = |f: Flow| Stale::of(&[f]).matches(&svc);
        assert!(one(Flow::ToFrontend {
            addr: ip("10.96.0.10"),
            port: 53
        }));
        assert!(!one(Flow::ToFrontend {
            addr: ip("10.96.0.10"),
            port: 54
        }));
        assert!(one(Flow::ToNodePort { port: 53 }));
        assert!(one(Flow::FrontendToEndpoint {
            addr: ip("10.96.0.10"),
            port: 53,
            endpoint: ip("10.244.1.5")
        }));
        assert!(!one(Flow::FrontendToEndpoint {
            addr: ip("10.96.0.10"),
            port: 53,
            endpoint: ip("10.244.1.6")
        }));
        assert!(one(Flow::NodePortToEndpoint {
            port: 53,
            endpoint: ip("10.244.1.5")
        }));
        assert!(!one(Flow::NodePortToEndpoint {
            port: 30053,
            endpoint: ip("10.244.1.5")
        }));
        assert!(one(Flow::ToAddress { addr: ip("10.96.0.10") }));
        assert!(!one(Flow::ToAddress { addr: ip("10.96.0.11") }));
    }

    #[test]
    fn an_entry_reads_back_what_a_delete_names() {
        for (dst, nat) in [("10.96.0.10", "10.244.1.5"), ("fd00::10", "fd00:1::5")] {
            let mut e = entry(dst, 53, nat);
            e.orig.src = if dst.contains(':') { ip("fd00::1") } else { e.orig.src };
            e.zone = Some(7);
            // A dump entry: the delete's attributes plus a reply tuple.
            let mut payload = vec![0u8; NFGENMSG];
            e.write(&mut payload);
            let reply = Entry {
                orig: Tuple {
                    src: e.reply_src,
                    dst: e.orig.src,
                    ..e.orig
                },
                ..e
            };
            let mut r = Vec::new();
            reply.write(&mut r);
            let tuple = find(&r, CTA_TUPLE_ORIG).map(<[u8]>::to_vec).unwrap_or_default();
            nested(&mut payload, CTA_TUPLE_REPLY, |b| b.extend(&tuple));
            assert_eq!(Entry::parse(&payload), Some(e));
            for cut in 0..payload.len() {
                let _ = Entry::parse(&payload[..cut]);
            }
        }
    }
}
