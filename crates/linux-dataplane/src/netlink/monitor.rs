//! Changes to a namespace's nftables that proxyd did not make: the kernel
//! announces every committed transaction on nftables' multicast group, and
//! ends each with a `NFT_MSG_NEWGEN` naming the process that committed it.
//! A commit by one of proxyd's threads (over netlink) or by an `nft` it
//! started is its own; any other (`nft flush ruleset` in a distribution's nftables
//! service, a firewall reload, an operator) is someone else's, and proxyd's
//! table may need repair.
//!
//! Idle, this costs nothing: a socket that waits. While it listens, the
//! kernel also announces proxyd's own changes, object by object; what the
//! socket cannot hold is dropped (and said as [`NftChange::Unknown`]).

use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;

use netlink_packet_netfilter::nftables::{GenAttribute, NfTablesMessage};
use rustix::net::netlink as nl;

use super::{Socket, nftables_message};
use crate::netns::Netns;

/// `NFNLGRP_NFTABLES`: the group nftables announces its changes on.
const NFNLGRP_NFTABLES: u32 = 7;
/// `NFT_MSG_NEWGEN`'s type: nftables' subsystem, message 15.
const NEWGEN: u16 = (10 << 8) | 15;
/// How many `nft` processes proxyd started are remembered as its own.
const OWN_CHILDREN: usize = 64;

/// The `nft` processes proxyd started last (their commits are its own).
static CHILDREN: Mutex<VecDeque<u32>> = Mutex::new(VecDeque::new());

/// Records that process `pid`, an `nft` proxyd started, commits on its
/// behalf.
pub(crate) fn own_committer(pid: u32) {
    let mut children = slice_model::internal::lock(&CHILDREN);
    if children.len() == OWN_CHILDREN {
        children.pop_front();
    }
    children.push_back(pid);
}

/// Whether `pid` (the kernel names the committing thread, not its
/// process) is one of proxyd's threads or an `nft` it started.
fn is_own(pid: u32) -> bool {
    pid == std::process::id()
        || std::path::Path::new("/proc/self/task").join(pid.to_string()).exists()
        || slice_model::internal::lock(&CHILDREN).contains(&pid)
}

/// A change to the ruleset that was not proxyd's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NftChange {
    /// Another process committed a transaction.
    Foreign {
        /// Its process id.
        pid: u32,
        /// Its name (`nft`, `firewalld`), as the kernel gives it.
        process: String,
    },
    /// Announcements were lost (the socket's buffer overflowed): anything
    /// may have changed.
    Unknown,
}

/// Follows the nftables changes of one network namespace.
#[derive(Debug)]
pub struct NftMonitor(Socket);

impl NftMonitor {
    /// Listens to the nftables announcements of `netns`.
    pub fn open(netns: &Netns) -> io::Result<Self> {
        Socket::open_groups(netns, Some(nl::NETFILTER), 1 << (NFNLGRP_NFTABLES - 1)).map(Self)
    }

    /// As [`Self::next`], waiting at most `wait` (a zero wait is taken as
    /// a millisecond).
    pub fn next_within(&mut self, wait: std::time::Duration) -> io::Result<Option<NftChange>> {
        let wait = wait.max(std::time::Duration::from_millis(1));
        rustix::net::sockopt::set_socket_timeout(&self.0.fd, rustix::net::sockopt::Timeout::Recv, Some(wait))?;
        let next = self.next();
        rustix::net::sockopt::set_socket_timeout(
            &self.0.fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(std::time::Duration::from_secs(2)),
        )?;
        next
    }

    /// Waits (up to the socket's 2-second timeout) for the next change that
    /// was not proxyd's: `Ok(None)` when none came meanwhile.
    pub fn next(&mut self) -> io::Result<Option<NftChange>> {
        loop {
            let datagram = match self.0.recv_datagram() {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
                    return Ok(None);
                }
                // ENOBUFS: the kernel dropped announcements.
                Err(e) if e.raw_os_error() == Some(105) => return Ok(Some(NftChange::Unknown)),
                Err(e) => return Err(e),
            };
            if let Some(change) = foreign_commit(datagram) {
                return Ok(Some(change));
            }
        }
    }
}

/// The first commit in `datagram` that another process made, if any.
fn foreign_commit(mut data: &[u8]) -> Option<NftChange> {
    while let Ok(msg) = netlink_packet_core::NetlinkBuffer::new_checked(data) {
        let len = usize::try_from(msg.length()).ok()?;
        if msg.message_type() == NEWGEN
            && let Some(NfTablesMessage::NewGen(gen_)) = nftables_message(NEWGEN, msg.payload())
        {
            let (mut pid, mut process) = (None, String::new());
            for a in gen_.attributes {
                match a {
                    GenAttribute::ProcPid(p) => pid = Some(p),
                    GenAttribute::ProcName(n) => process = n,
                    _ => {}
                }
            }
            // A commit without a process (the kernel's own) is no one's.
            if let Some(pid) = pid.filter(|p| !is_own(*p)) {
                return Some(NftChange::Foreign { pid, process });
            }
        }
        data = data.get(len.next_multiple_of(4)..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use netlink_packet_netfilter::nftables::GenMessage;
    use netlink_packet_netfilter::{NetfilterHeader, NetfilterProtoFamily};

    use super::super::append;
    use super::*;

    fn newgen(pid: u32, name: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let message = NfTablesMessage::NewGen(GenMessage {
            attributes: vec![
                GenAttribute::Id(7),
                GenAttribute::ProcPid(pid),
                GenAttribute::ProcName(name.into()),
            ],
        });
        append(
            &mut out,
            NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, 0),
            message,
            0,
            0,
        );
        out
    }

    #[test]
    fn commits_by_proxyd_or_its_nft_are_its_own_and_others_are_not() {
        assert_eq!(foreign_commit(&newgen(std::process::id(), "proxyd")), None);
        own_committer(4_000_001);
        assert_eq!(foreign_commit(&newgen(4_000_001, "nft")), None);
        let theirs = newgen(4_000_002, "nft");
        assert_eq!(
            foreign_commit(&theirs),
            Some(NftChange::Foreign {
                pid: 4_000_002,
                process: "nft".into()
            })
        );
        let mut both = newgen(std::process::id(), "proxyd");
        both.extend(theirs);
        assert!(matches!(
            foreign_commit(&both),
            Some(NftChange::Foreign { pid: 4_000_002, .. })
        ));
        assert_eq!(foreign_commit(&both[..10]), None, "a cut message is no commit");
    }
}
