//! netfilter over netlink, without running a program: what nftables says
//! of its ruleset ([`NftNetlink`]) and conntrack deletions
//! ([`NetlinkConntrack`]). Messages are built and read here, bounds-checked:
//! a malformed reply is an error, never a panic.

mod conntrack;
mod elements;
mod nftables;

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::netlink::{self as nl, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

pub use conntrack::NetlinkConntrack;
pub use nftables::NftNetlink;
/// `NETLINK_ROUTE`: protocol 0, which rustix spells as no protocol.
pub(crate) const ROUTE: Option<rustix::net::Protocol> = None;

use crate::netns::Netns;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
/// Set on a dump's messages when what was dumped changed during the dump.
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLA_F_NESTED: u16 = 0x8000;
/// "No such object": a table or conntrack entry that is not there.
const ENOENT: i32 = 2;
/// `nlmsghdr`.
const HEADER: usize = 16;
/// `nfgenmsg`, after the header of every nfnetlink message.
const NFGENMSG: usize = 4;

/// The netfilter protocol family (`NFPROTO_IPV4`, `NFPROTO_IPV6`) of
/// `nfgenmsg`.
fn nfproto(family: slice_model::IpFamily) -> u8 {
    match family {
        slice_model::IpFamily::V4 => 2,
        slice_model::IpFamily::V6 => 10,
    }
}

/// A `NETLINK_NETFILTER` socket in one network namespace.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    /// A netfilter socket in `netns`.
    fn open(netns: &Netns) -> io::Result<Self> {
        Self::open_protocol(netns, Some(nl::NETFILTER))
    }

    /// A socket of `protocol` in `netns` (made by a thread inside it: a
    /// socket stays in the namespace it was made in).
    pub(crate) fn open_protocol(netns: &Netns, protocol: Option<rustix::net::Protocol>) -> io::Result<Self> {
        netns.run(|| Self::here(protocol))?
    }

    fn here(protocol: Option<rustix::net::Protocol>) -> io::Result<Self> {
        let fd = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, protocol)?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))?;
        // A kernel answers at once; never let a sync wait on a lost reply.
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(2)),
        )?;
        // Room for a large dump's bursts.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, 1 << 20);
        Ok(Self {
            fd,
            seq: 0,
            buf: vec![0; 1 << 16],
        })
    }

    /// The socket, for ioctls that ask about its namespace.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }

    /// Reads one datagram; the slice lives until the next read.
    pub(crate) fn recv_datagram(&mut self) -> io::Result<&[u8]> {
        let (n, _) = rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::empty())?;
        Ok(self.buf.get(..n).unwrap_or_default())
    }

    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    pub(crate) fn send(&self, messages: &[u8]) -> io::Result<()> {
        rustix::net::sendto(&self.fd, messages, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))
            .map(|_| ())
            .map_err(Into::into)
    }

    /// Reads replies to `seq` and hands each to `each` until it says stop.
    fn receive(&mut self, seq: u32, mut each: impl FnMut(Reply<'_>) -> Next) -> io::Result<()> {
        self.receive_where(|s| s == seq, |_, reply| each(reply))
    }

    /// Reads replies whose sequence number is `wanted` and hands each, with
    /// its number, to `each` until it says stop.
    fn receive_where(
        &mut self,
        wanted: impl Fn(u32) -> bool,
        mut each: impl FnMut(u32, Reply<'_>) -> Next,
    ) -> io::Result<()> {
        loop {
            let (n, _) = rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::empty())?;
            if let Next::Stop = parse_datagram(self.buf.get(..n).unwrap_or_default(), &wanted, &mut each)? {
                return Ok(());
            }
        }
    }
}

/// Hands each message of one datagram whose sequence number is `wanted` to
/// `each`.
fn parse_datagram(
    mut data: &[u8],
    wanted: &impl Fn(u32) -> bool,
    each: &mut impl FnMut(u32, Reply<'_>) -> Next,
) -> io::Result<Next> {
    while data.len() >= HEADER {
        let len = u32_at(data, 0).ok_or_else(|| malformed("short header"))? as usize;
        if len < HEADER || len > data.len() {
            return Err(malformed("bad message length"));
        }
        let (msg, rest) = data.split_at(len);
        data = rest.get(len.next_multiple_of(4) - len..).unwrap_or_default();
        let Some(seq) = u32_at(msg, 8).filter(|s| wanted(*s)) else {
            continue;
        };
        let payload = msg.get(HEADER..).unwrap_or_default();
        if u16_at(msg, 6).unwrap_or(0) & NLM_F_DUMP_INTR != 0
            && let Next::Stop = each(seq, Reply::Interrupted)
        {
            return Ok(Next::Stop);
        }
        let reply = match u16_at(msg, 4).unwrap_or(0) {
            NLMSG_DONE => Reply::Done,
            NLMSG_ERROR => match u32_at(payload, 0).map(|c| c as i32) {
                Some(0) => Reply::Ack,
                Some(code) => Reply::Error(code.saturating_neg()),
                None => return Err(malformed("short error message")),
            },
            kind => Reply::Message(kind, payload),
        };
        if let Next::Stop = each(seq, reply) {
            return Ok(Next::Stop);
        }
    }
    Ok(Next::More)
}

/// One message of a reply.
enum Reply<'a> {
    /// A message of this type, with its payload.
    Message(u16, &'a [u8]),
    /// An acknowledgement.
    Ack,
    /// The kernel's errno for a request.
    Error(i32),
    /// The end of a dump.
    Done,
    /// The next message is of a dump during which what it dumps changed:
    /// the dump is not a consistent picture.
    Interrupted,
}

/// Whether to keep reading replies.
enum Next {
    More,
    Stop,
}

/// Appends one nfnetlink message to `out`: header, `nfgenmsg` for `family`,
/// then what `body` writes (attributes).
fn message(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, family: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend([0u8; 4]);
    out.extend(kind.to_ne_bytes());
    out.extend(flags.to_ne_bytes());
    out.extend(seq.to_ne_bytes());
    out.extend(0u32.to_ne_bytes());
    out.extend([family, 0, 0, 0]);
    body(out);
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Appends one attribute.
fn attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    attr_with(out, kind, |b| b.extend(value));
}

/// Appends one attribute whose value `value` writes in place.
fn attr_with(out: &mut Vec<u8>, kind: u16, value: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend([0u8; 2]);
    out.extend(kind.to_ne_bytes());
    value(out);
    let len = (out.len() - start) as u16;
    out[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    out.resize(out.len().next_multiple_of(4), 0);
}

/// The IP protocol number of a service protocol.
const fn ip_protocol(p: slice_model::Protocol) -> u8 {
    match p {
        slice_model::Protocol::Tcp => 6,
        slice_model::Protocol::Udp => 17,
        slice_model::Protocol::Sctp => 132,
    }
}

/// Appends a nested attribute holding what `inner` writes.
fn nested(out: &mut Vec<u8>, kind: u16, inner: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend([0u8; 2]);
    out.extend((kind | NLA_F_NESTED).to_ne_bytes());
    inner(out);
    let len = (out.len() - start) as u16;
    out[start..start + 2].copy_from_slice(&len.to_ne_bytes());
}

/// The attributes in `data`, as (type without flags, value); stops at the
/// first malformed one.
fn attrs(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(data, 0)?);
        let kind = u16_at(data, 2)? & 0x3fff;
        let value = data.get(4..len)?;
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
        Some((kind, value))
    })
}

/// The value of the first attribute of type `kind`.
fn find(data: &[u8], kind: u16) -> Option<&[u8]> {
    attrs(data).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("netlink reply: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_truncation_is_not_a_panic() {
        let mut m = Vec::new();
        message(&mut m, 0x0102, NLM_F_REQUEST, 9, 2, |b| {
            attr(b, 1, &[7]);
            nested(b, 2, |b| attr(b, 3, &5u16.to_be_bytes()));
        });
        assert_eq!(u32_at(&m, 0), Some(m.len() as u32));
        let body = &m[HEADER + NFGENMSG..];
        let got: Vec<(u16, Vec<u8>)> = attrs(body).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (1, vec![7]));
        assert_eq!(find(&got[1].1, 3), Some(&5u16.to_be_bytes()[..]));
        for cut in 0..body.len() {
            let _ = attrs(&body[..cut]).count();
        }
    }
}
