//! netfilter over netlink, without running a program: what nftables says
//! of its ruleset ([`NftNetlink`]) and conntrack deletions
//! ([`NetlinkConntrack`]). Messages are `netlink-packet-netfilter`'s,
//! framed by `netlink-packet-core`; replies are read bounds-checked: a
//! malformed reply is an error, never a panic.

mod batch;
mod ctnetlink;
mod declare;
mod elements;
mod extack;
pub(crate) mod monitor;
mod nftables;
mod rules;
mod writer;

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use netlink_packet_core::{
    ErrorBuffer, NLM_F_DUMP_INTR, NLMSG_DONE, NLMSG_ERROR, NetlinkBuffer, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, ParseableParametrized,
};
use netlink_packet_netfilter::nftables::NfTablesMessage;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily};
use rustix::net::netlink::{self as nl, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

pub use batch::Scope;

/// The batch encoder and a strict reader of what it writes, for fuzzing
/// (feature `test-util`): every length a batch holds must be what follows
/// it, for any transaction.
#[cfg(feature = "test-util")]
pub mod wire {
    pub use super::writer::TooLong;

    /// `tx` as the netlink batch proxyd sends (`Ok(None)`: it holds
    /// nothing), or the message that cannot be encoded.
    pub fn encode(tx: &nft_dataplane::Transaction) -> Result<Option<Vec<u8>>, TooLong> {
        super::batch::batch(tx, 1, super::batch::Scope::Everything).map(|b| b.map(|b| b.bytes))
    }

    /// Reads every length of `bytes` (a batch) as the kernel does: the
    /// number of messages, or where a length is not what follows it.
    pub fn check_lengths(bytes: &[u8]) -> Result<usize, String> {
        super::writer::decode_lengths(bytes).map(|m| m.len())
    }

    /// Names the attribute at `offset` of each message of `batch` (as a
    /// refused batch's error is told), and reads `error` as the payload of
    /// a kernel's error reply with header flags `flags`: neither may panic,
    /// whatever the input.
    pub fn read_refusals(batch: &[u8], offset: u32, flags: u16, error: &[u8]) -> usize {
        let mut named = 0;
        let mut rest = batch;
        while let Some(len) = rest.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
            let len = usize::try_from(u32::from_ne_bytes(len)).unwrap_or(usize::MAX).max(4);
            let Some(message) = rest.get(..len) else { break };
            named += usize::from(super::extack::attribute_at(message, offset).is_some());
            rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
        }
        let read = super::extack::parse(flags, error);
        named + usize::from(read.message.is_some())
    }
}
pub use ctnetlink::NetlinkConntrack;
pub use elements::RawElement;
pub(crate) use elements::read_element;
pub use monitor::{Listening, NftChange, NftMonitor};
pub use nftables::NftNetlink;
/// `NETLINK_ROUTE`: protocol 0, which rustix spells as no protocol.
pub(crate) const ROUTE: Option<rustix::net::Protocol> = None;

use crate::netns::Netns;
use extack::Extack;

/// "No such object": a table or conntrack entry that is not there.
const ENOENT: i32 = 2;

/// The netfilter protocol family (`NFPROTO_IPV4`, `NFPROTO_IPV6`) of
/// `nfgenmsg`.
fn nfproto(family: slice_model::IpFamily) -> NetfilterProtoFamily {
    match family {
        slice_model::IpFamily::V4 => NetfilterProtoFamily::IPv4,
        slice_model::IpFamily::V6 => NetfilterProtoFamily::IPv6,
    }
}

/// Appends one nfnetlink message to `out`, padded to netlink's alignment
/// so that the next one can follow in the same datagram.
fn append(out: &mut Vec<u8>, header: NetfilterHeader, inner: impl Into<NetfilterMessageInner>, flags: u16, seq: u32) {
    let mut netlink = NetlinkHeader::default();
    netlink.flags = flags;
    netlink.sequence_number = seq;
    let inner = NetfilterMessage::new(header, inner);
    let mut message = NetlinkMessage::new(netlink, NetlinkPayload::InnerMessage(inner));
    message.finalize();
    let start = out.len();
    out.resize(start + message.buffer_len(), 0);
    message.serialize(&mut out[start..]);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// The nftables message of a reply of type `kind`, if it is one.
fn nftables_message(kind: u16, payload: &[u8]) -> Option<NfTablesMessage> {
    match NetfilterMessage::parse_with_param(payload, kind).ok()?.inner {
        NetfilterMessageInner::NfTables(m) => Some(m),
        _ => None,
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
        Self::here_in_groups(protocol, 0)
    }

    /// A socket of `protocol` in `netns` that also receives the multicast
    /// groups of the bit mask `groups`.
    pub(crate) fn open_groups(netns: &Netns, protocol: Option<rustix::net::Protocol>, groups: u32) -> io::Result<Self> {
        netns.run(|| Self::here_in_groups(protocol, groups))?
    }

    fn here_in_groups(protocol: Option<rustix::net::Protocol>, groups: u32) -> io::Result<Self> {
        let fd = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, protocol)?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, groups))?;
        // A kernel answers at once; never let a sync wait on a lost reply.
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(2)),
        )?;
        // Room for a large dump's bursts.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, 1 << 20);
        // Errors name the refused attribute (and the kernel's reason where
        // it gives one) instead of echoing the whole request; a kernel
        // without them answers as before.
        let _ = set_netlink_option(&fd, NETLINK_CAP_ACK);
        let _ = set_netlink_option(&fd, NETLINK_EXT_ACK);
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

/// `NETLINK_CAP_ACK`: an error echoes the request's header only.
const NETLINK_CAP_ACK: i32 = 10;
/// `NETLINK_EXT_ACK`: an error carries the kernel's message and the
/// refused attribute's offset.
const NETLINK_EXT_ACK: i32 = 11;
/// `SOL_NETLINK`.
const SOL_NETLINK: i32 = 270;

/// Turns the boolean netlink socket option `option` on.
#[expect(unsafe_code, reason = "setsockopt is a C function; rustix has no netlink options")]
fn set_netlink_option(fd: &OwnedFd, option: i32) -> io::Result<()> {
    let on: libc::c_int = 1;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: the descriptor is open for the call; the value is a live
    // c_int of the length given.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            SOL_NETLINK,
            option,
            std::ptr::from_ref(&on).cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hands each message of one datagram whose sequence number is `wanted` to
/// `each`.
fn parse_datagram(
    mut data: &[u8],
    wanted: &impl Fn(u32) -> bool,
    each: &mut impl FnMut(u32, Reply<'_>) -> Next,
) -> io::Result<Next> {
    while !data.is_empty() {
        let msg = match NetlinkBuffer::new_checked(data) {
            Ok(msg) => msg,
            Err(e) => {
                // The kernel's error reply echoes the request it refuses:
                // one larger than the receive buffer arrives cut short. Its
                // errno and sequence number come first, and are enough.
                let Some((seq, errno)) = cut_error(data) else {
                    return Err(malformed(&e.to_string()));
                };
                return Ok(if wanted(seq) {
                    each(seq, Reply::Error(errno, Extack::default()))
                } else {
                    Next::More
                });
            }
        };
        let len = msg.length() as usize;
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
        let seq = msg.sequence_number();
        if !wanted(seq) {
            continue;
        }
        if msg.flags() & NLM_F_DUMP_INTR != 0
            && let Next::Stop = each(seq, Reply::Interrupted)
        {
            return Ok(Next::Stop);
        }
        let payload = msg.payload();
        let reply = match msg.message_type() {
            NLMSG_DONE => Reply::Done,
            NLMSG_ERROR => match ErrorBuffer::new_checked(payload) {
                Ok(error) => error.code().map_or(Reply::Ack, |code| {
                    Reply::Error(code.get().saturating_neg(), extack::parse(msg.flags(), payload))
                }),
                Err(_) => return Err(malformed("short error message")),
            },
            kind => Reply::Message(kind, payload),
        };
        if let Next::Stop = each(seq, reply) {
            return Ok(Next::Stop);
        }
    }
    Ok(Next::More)
}

/// The sequence number and errno of an error reply cut short (its length
/// says more than the datagram holds), if `data` starts with one.
fn cut_error(data: &[u8]) -> Option<(u32, i32)> {
    let word = |at: usize| data.get(at..at + 4).and_then(|b| <[u8; 4]>::try_from(b).ok());
    let kind = u16::from_ne_bytes(data.get(4..6)?.try_into().ok()?);
    let declared = u32::from_ne_bytes(word(0)?);
    if kind != NLMSG_ERROR || usize::try_from(declared).ok()? <= data.len() {
        return None;
    }
    let seq = u32::from_ne_bytes(word(8)?);
    let errno = i32::from_ne_bytes(word(16)?).checked_neg()?;
    Some((seq, errno))
}

/// One message of a reply.
enum Reply<'a> {
    /// A message of this type, with its payload.
    Message(u16, &'a [u8]),
    /// An acknowledgement.
    Ack,
    /// The kernel's errno for a request, and what else it said.
    Error(i32, Extack<'a>),
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

/// The IP protocol number of a service protocol.
const fn ip_protocol(p: slice_model::Protocol) -> u8 {
    match p {
        slice_model::Protocol::Tcp => 6,
        slice_model::Protocol::Udp => 17,
        slice_model::Protocol::Sctp => 132,
    }
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("netlink reply: {what}"))
}
