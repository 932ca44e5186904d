//! The nftables ruleset generation: a counter the kernel bumps at every
//! committed transaction, whoever commits it. Reading it is one netlink
//! request, so an idle periodic sync can tell that nothing was committed
//! since its own last transaction without running `nft`.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

use crate::netns::Netns;

/// nfnetlink's nftables subsystem and its generation messages
/// (`linux/netfilter/nfnetlink.h`, `nf_tables.h`).
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWGEN: u16 = 15;
const NFT_MSG_GETGEN: u16 = 16;
const NFTA_GEN_ID: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// `nlmsghdr` and `nfgenmsg`.
const HEADER: usize = 16;
const NFGENMSG: usize = 4;

/// A netlink socket that reads the generation of one network namespace.
#[derive(Debug)]
pub struct Generation {
    socket: OwnedFd,
    seq: u32,
}

impl Generation {
    /// A socket in `netns` (entered by a short-lived thread: a socket stays
    /// in the namespace it was made in).
    pub fn open(netns: &Netns) -> io::Result<Self> {
        let path = match netns {
            Netns::Current => return Self::here(),
            Netns::Named(name) => std::path::PathBuf::from("/run/netns").join(name),
            Netns::Path(path) => path.clone(),
        };
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path)?;
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            Self::here()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the thread entering the namespace panicked")))
    }

    fn here() -> io::Result<Self> {
        let socket = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, Some(netlink::NETFILTER))?;
        rustix::net::bind(&socket, &SocketAddrNetlink::new(0, 0))?;
        // A kernel answers at once; never let a sync wait on a lost reply.
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(1)),
        )?;
        Ok(Self { socket, seq: 0 })
    }

    /// The current generation.
    pub fn read(&mut self) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        rustix::net::sendto(
            &self.socket,
            &request(self.seq),
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )?;
        let mut buf = vec![0u8; 8192];
        loop {
            let (n, _) = rustix::net::recv(&self.socket, &mut buf[..], RecvFlags::empty())?;
            match parse_reply(&buf[..n.min(buf.len())], self.seq)? {
                Some(id) => return Ok(id),
                None => continue,
            }
        }
    }
}

/// `NFT_MSG_GETGEN`: a header, then `nfgenmsg` for no family.
fn request(seq: u32) -> [u8; HEADER + NFGENMSG] {
    let mut m = [0u8; HEADER + NFGENMSG];
    m[0..4].copy_from_slice(&((HEADER + NFGENMSG) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETGEN).to_ne_bytes());
    m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m
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

/// The generation in one datagram of replies, if it answers `seq`;
/// `None` for messages that answer something else.
fn parse_reply(mut buf: &[u8], seq: u32) -> io::Result<Option<u32>> {
    while buf.len() >= HEADER {
        let len = u32_at(buf, 0).ok_or_else(|| malformed("short header"))? as usize;
        if len < HEADER || len > buf.len() {
            return Err(malformed("bad message length"));
        }
        let (msg, rest) = buf.split_at(len);
        buf = rest.get(len.next_multiple_of(4) - len..).unwrap_or_default();
        if u32_at(msg, 8) != Some(seq) {
            continue;
        }
        match u16_at(msg, 4) {
            Some(NLMSG_ERROR) => {
                let code = u32_at(msg, HEADER).map_or(0, |c| c as i32);
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
            }
            Some(t) if t == NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN => {
                return generation_attribute(msg.get(HEADER + NFGENMSG..).unwrap_or_default())
                    .map(Some)
                    .ok_or_else(|| malformed("no generation attribute"));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// `NFTA_GEN_ID` (big-endian) among netlink attributes.
fn generation_attribute(mut attrs: &[u8]) -> Option<u32> {
    while attrs.len() >= 4 {
        let len = usize::from(u16_at(attrs, 0)?);
        let kind = u16_at(attrs, 2)? & 0x3fff;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if kind == NFTA_GEN_ID {
            return Some(u32::from_be_bytes(attrs.get(4..8)?.try_into().ok()?));
        }
        attrs = attrs.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(seq: u32, kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend(((HEADER + payload.len()) as u32).to_ne_bytes());
        m.extend(kind.to_ne_bytes());
        m.extend(0u16.to_ne_bytes());
        m.extend(seq.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend(payload);
        m
    }

    fn newgen(seq: u32, id: u32) -> Vec<u8> {
        let mut p = vec![0u8; NFGENMSG];
        p.extend(8u16.to_ne_bytes());
        p.extend(NFTA_GEN_ID.to_ne_bytes());
        p.extend(id.to_be_bytes());
        reply(seq, NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN, &p)
    }

    #[test]
    fn replies_are_read_for_their_request_only() {
        assert_eq!(parse_reply(&newgen(7, 42), 7).ok(), Some(Some(42)));
        assert_eq!(parse_reply(&newgen(6, 42), 7).ok(), Some(None), "an older answer");
        let mut two = newgen(6, 1);
        two.extend(newgen(7, 2));
        assert_eq!(parse_reply(&two, 7).ok(), Some(Some(2)));
        let denied = reply(7, NLMSG_ERROR, &(-1i32).to_ne_bytes());
        assert_eq!(parse_reply(&denied, 7).map_err(|e| e.raw_os_error()), Err(Some(1)));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for cut in 0..newgen(1, 5).len() {
            let _ = parse_reply(&newgen(1, 5)[..cut], 1);
        }
        let mut bad = newgen(1, 5);
        bad[0] = 200;
        assert!(parse_reply(&bad, 1).is_err());
        let no_attr = reply(1, NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN, &[0; NFGENMSG]);
        assert!(parse_reply(&no_attr, 1).is_err());
    }
}
