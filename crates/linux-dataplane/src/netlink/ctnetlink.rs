//! Conntrack cleanup over ctnetlink: one dump of the family's UDP entries,
//! each matched against the whole [`Cleanup`] at once, then a delete per
//! matching entry, sent in batches (kube-proxy's reconciler also dumps
//! once and deletes by filter).

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{DefaultNla, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, Nla, ParseableParametrized};
use netlink_packet_netfilter::conntrack::{ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterMessageInner};
use slice_model::IpFamily;

use super::{ENOENT, Next, Reply, Socket, nfproto};
use crate::flow_cleanup::{Cleanup, Conntrack, ConntrackError};
use crate::netns::Netns;

/// `CTA_ZONE`: netlink-packet-netfilter has no variant for it.
const CTA_ZONE: u16 = 18;
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

    fn delete_matching(&mut self, family: IpFamily, cleanup: &Cleanup) -> io::Result<(u64, Vec<ConntrackError>)> {
        let socket = self.socket()?;
        let matching = dump_udp(socket, family, cleanup)?;
        let (mut deleted, mut errors) = (0, Vec::new());
        for batch in matching.chunks(BATCH) {
            let first = socket.seq.wrapping_add(1);
            let mut req = Vec::with_capacity(batch.len() * 96);
            for entry in batch {
                let seq = socket.next_seq();
                let delete = ConntrackMessage::Delete(entry.attributes());
                append(&mut req, family, delete, NLM_F_REQUEST | NLM_F_ACK, seq);
            }
            socket.send(&req)?;
            for (k, entry) in batch.iter().enumerate() {
                let seq = first.wrapping_add(k as u32);
                let mut outcome = Ok(false);
                socket.receive(seq, |reply| {
                    outcome = match reply {
                        Reply::Ack => Ok(true),
                        // Gone already (it timed out, or another cleanup won).
                        Reply::Error(ENOENT, _) => Ok(false),
                        Reply::Error(errno, _) => Err(io::Error::from_raw_os_error(errno)),
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

/// Appends one ctnetlink request for `family` to `out`.
fn append(out: &mut Vec<u8>, family: IpFamily, message: ConntrackMessage, flags: u16, seq: u32) {
    super::append(out, NetfilterHeader::new(nfproto(family), 0, 0), message, flags, seq);
}

impl Conntrack for NetlinkConntrack {
    fn delete(&mut self, family: IpFamily, cleanup: &Cleanup) -> (u64, Vec<ConntrackError>) {
        if cleanup.is_empty() {
            return (0, Vec::new());
        }
        self.delete_matching(family, cleanup).unwrap_or_else(|e| {
            // The socket may be in any state now: make a new one next time.
            self.socket = None;
            let error = ConntrackError {
                args: format!("netlink cleanup of {} {family} UDP frontends", cleanup.len()),
                message: e.to_string(),
            };
            (0, vec![error])
        })
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
    /// Whether `cleanup` deletes it: by its original destination, and
    /// its reply's source (where it was DNATed to, or the destination
    /// itself when it was not).
    fn wrong(&self, cleanup: &Cleanup) -> bool {
        cleanup.deletes(self.orig.dst, self.orig.dst_port, self.reply_src)
    }

    /// One message of a dump: `kind` and the payload after the netlink
    /// header. `None` for anything but a whole conntrack entry.
    fn parse(kind: u16, payload: &[u8]) -> Option<Self> {
        let message = NetfilterMessage::parse_with_param(payload, kind).ok()?;
        let NetfilterMessageInner::Conntrack(ConntrackMessage::New(attributes)) = message.inner else {
            return None;
        };
        let (mut orig, mut reply, mut zone) = (None, None, None);
        for a in &attributes {
            match a {
                ConntrackAttribute::CtaTupleOrig(t) => orig = Tuple::of(t),
                ConntrackAttribute::CtaTupleReply(t) => reply = Tuple::of(t),
                ConntrackAttribute::Other(nla) if nla.kind() == CTA_ZONE && nla.value_len() == 2 => {
                    let mut value = [0u8; 2];
                    nla.emit_value(&mut value);
                    zone = Some(u16::from_be_bytes(value));
                }
                _ => {}
            }
        }
        Some(Self {
            orig: orig?,
            reply_src: reply?.src,
            zone,
        })
    }

    /// The attributes that name this entry in a delete.
    fn attributes(&self) -> Vec<ConntrackAttribute> {
        let mut out = vec![ConntrackAttribute::CtaTupleOrig(self.orig.attributes())];
        if let Some(zone) = self.zone {
            out.push(ConntrackAttribute::Other(DefaultNla::new(
                CTA_ZONE,
                zone.to_be_bytes().to_vec(),
            )));
        }
        out
    }
}

impl Tuple {
    fn of(tuple: &[netlink_packet_netfilter::conntrack::Tuple]) -> Option<Self> {
        use netlink_packet_netfilter::conntrack::Tuple as T;
        let (mut src, mut dst, mut proto) = (None, None, None);
        let (mut src_port, mut dst_port) = (0, 0);
        for part in tuple {
            match part {
                T::Ip(ips) => {
                    for ip in ips {
                        match ip {
                            IPTuple::SourceAddress(a) => src = Some(*a),
                            IPTuple::DestinationAddress(a) => dst = Some(*a),
                            _ => {}
                        }
                    }
                }
                T::Proto(protos) => {
                    for p in protos {
                        match p {
                            ProtoTuple::Protocol(p) => proto = Some(u8::from(*p)),
                            ProtoTuple::SourcePort(port) => src_port = *port,
                            ProtoTuple::DestinationPort(port) => dst_port = *port,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(Self {
            src: src?,
            dst: dst?,
            proto: proto?,
            src_port,
            dst_port,
        })
    }

    fn attributes(&self) -> Vec<netlink_packet_netfilter::conntrack::Tuple> {
        use netlink_packet_netfilter::conntrack::Tuple as T;
        vec![
            T::Ip(vec![
                IPTuple::SourceAddress(self.src),
                IPTuple::DestinationAddress(self.dst),
            ]),
            T::Proto(vec![
                ProtoTuple::Protocol(Protocol::from(self.proto)),
                ProtoTuple::SourcePort(self.src_port),
                ProtoTuple::DestinationPort(self.dst_port),
            ]),
        ]
    }
}

/// The family's UDP entries that match `stale`, from one dump.
fn dump_udp(socket: &mut Socket, family: IpFamily, cleanup: &Cleanup) -> io::Result<Vec<Entry>> {
    let seq = socket.next_seq();
    let mut req = Vec::with_capacity(32);
    append(
        &mut req,
        family,
        ConntrackMessage::Get(Vec::new()),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
    );
    socket.send(&req)?;
    let (mut found, mut failed) = (Vec::new(), None);
    socket.receive(seq, |reply| {
        match reply {
            Reply::Message(kind, payload) => {
                if let Some(e) = Entry::parse(kind, payload).filter(|e| e.orig.proto == IPPROTO_UDP && e.wrong(cleanup))
                {
                    found.push(e);
                }
            }
            Reply::Done => return Next::Stop,
            Reply::Error(errno, _) => {
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
    use std::net::Ipv4Addr;

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
    fn an_entry_is_deleted_unless_dnated_to_a_serving_endpoint() {
        use nft_dataplane::stale_flows::Frontend;
        let serving = std::sync::Arc::new([ip("10.244.1.5")].into_iter().collect());
        let mut c = Cleanup::default();
        c.frontends.insert(
            Frontend {
                addr: ip("10.96.0.10"),
                port: 53,
            },
            std::sync::Arc::clone(&serving),
        );
        c.node_ports.insert(30053, serving);
        assert!(
            !entry("10.96.0.10", 53, "10.244.1.5").wrong(&c),
            "DNATed to a serving endpoint"
        );
        assert!(entry("10.96.0.10", 53, "10.244.1.6").wrong(&c), "to another");
        assert!(entry("10.96.0.10", 53, "10.96.0.10").wrong(&c), "not DNATed");
        assert!(!entry("10.96.0.10", 54, "10.96.0.10").wrong(&c), "another port");
        assert!(
            entry("192.0.2.7", 30053, "192.0.2.7").wrong(&c),
            "the node port, not DNATed"
        );
        assert!(!entry("192.0.2.7", 30053, "10.244.1.5").wrong(&c));
        c.frontends.insert(
            Frontend {
                addr: ip("10.96.0.11"),
                port: 80,
            },
            std::sync::Arc::default(),
        );
        assert!(
            entry("10.96.0.11", 80, "10.244.1.5").wrong(&c),
            "a deleted port: every entry"
        );
    }

    /// The kind of a dump's entries: ctnetlink's subsystem, IPCTNL_MSG_CT_NEW.
    const CT_NEW: u16 = 1 << 8;

    #[test]
    fn an_entry_reads_back_what_a_delete_names() {
        for (dst, nat) in [("10.96.0.10", "10.244.1.5"), ("fd00::10", "fd00:1::5")] {
            let mut e = entry(dst, 53, nat);
            e.orig.src = if dst.contains(':') { ip("fd00::1") } else { e.orig.src };
            e.zone = Some(7);
            // A dump entry: the delete's attributes plus a reply tuple.
            let reply = Tuple {
                src: e.reply_src,
                dst: e.orig.src,
                ..e.orig
            };
            let mut attributes = e.attributes();
            attributes.push(ConntrackAttribute::CtaTupleReply(reply.attributes()));
            let family = if dst.contains(':') { IpFamily::V6 } else { IpFamily::V4 };
            let mut datagram = Vec::new();
            append(&mut datagram, family, ConntrackMessage::New(attributes), 0, 1);
            let payload = &datagram[16..];
            assert_eq!(Entry::parse(CT_NEW, payload), Some(e));
            for cut in 0..payload.len() {
                let _ = Entry::parse(CT_NEW, &payload[..cut]);
            }
            assert_eq!(Entry::parse(CT_NEW + 2, payload), None, "a delete is not an entry");
        }
    }
}
