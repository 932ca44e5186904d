//! Changes to a namespace's nftables that proxyd did not make: the kernel
//! announces every committed transaction on nftables' multicast group, and
//! ends each with a `NFT_MSG_NEWGEN` naming the process that committed it.
//! Any commit that touched proxyd's table (`nft flush ruleset` in a
//! distribution's nftables service, a firewall reload, an operator) is
//! someone else's, and the table needs repair. Commits that touched only
//! other tables (another program's own rules) are none of proxyd's
//! business: each announcement of an object names its table, and the
//! transaction's `NEWGEN` follows them.
//!
//! Idle, this costs nothing: a socket that waits. But while anyone
//! listens, the kernel builds an announcement of every object every
//! transaction touches, proxyd's own included, which made its
//! transactions several times slower: so proxyd stops listening while it
//! writes ([`Listening`], driven by [`crate::hearing`]), and what the
//! socket cannot hold is dropped (and said as [`NftChange::Unknown`]).
//! Since proxyd never listens while it commits, every announced commit is
//! another program's; one by a thread of this process is still taken for
//! its own, to be safe.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use netlink_packet_netfilter::nftables::{GenAttribute, NfTablesMessage};
use rustix::net::netlink as nl;

use super::{Socket, nftables_message};
use crate::netns::Netns;

/// `NFNLGRP_NFTABLES`: the group nftables announces its changes on.
const NFNLGRP_NFTABLES: u32 = 7;
/// The group as a bind mask.
const GROUPS: u32 = 1 << (NFNLGRP_NFTABLES - 1);
/// `NFT_MSG_NEWGEN`'s type: nftables' subsystem, message 15.
const NEWGEN: u16 = (10 << 8) | 15;

/// Whether `pid` (the kernel names the committing thread, not its
/// process) is one of this process's threads.
fn is_own(pid: u32) -> bool {
    pid == std::process::id() || std::path::Path::new("/proc/self/task").join(pid.to_string()).exists()
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
    /// Other processes committed `commits` transactions while proxyd wrote
    /// with the listening stopped: to which tables is unknown.
    Unheard {
        /// How many.
        commits: u32,
    },
}

impl std::fmt::Display for NftChange {
    /// Who changed the ruleset, for a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Foreign { pid, process } => write!(f, "{process} (pid {pid})"),
            // proxyd's own commits are never announced (it does not listen
            // while it writes): another program committed a lot.
            Self::Unknown => f.write_str("a process whose announcements were lost"),
            Self::Unheard { commits } => {
                write!(
                    f,
                    "another process ({commits} commits while proxyd wrote and did not listen)"
                )
            }
        }
    }
}

/// Follows the nftables changes of one network namespace to one table.
#[derive(Debug)]
pub struct NftMonitor {
    socket: Socket,
    /// What a transaction has touched so far (its `NEWGEN` ends it).
    seen: Touched,
}

/// Whether the announcements of the transaction under way named a table.
#[derive(Debug)]
struct Touched {
    /// The table (of the `ip` or `ip6` family) that matters.
    table: String,
    ours: bool,
}

impl NftMonitor {
    /// Listens to the nftables announcements of `netns` that concern the
    /// table `table` of either IP family.
    pub fn open(netns: &Netns, table: &str) -> io::Result<Self> {
        let socket = Socket::open_groups(netns, Some(nl::NETFILTER), GROUPS)?;
        Ok(Self {
            socket,
            seen: Touched {
                table: table.to_owned(),
                ours: false,
            },
        })
    }

    /// A handle that stops and starts this monitor's listening from
    /// another thread (the one that writes).
    pub fn listening(&self) -> io::Result<Listening> {
        Ok(Listening {
            fd: self.socket.fd.try_clone()?,
        })
    }

    /// Waits up to 2 seconds for the next change that was not proxyd's:
    /// `Ok(None)` when none came meanwhile.
    pub fn next_change(&mut self) -> io::Result<Option<NftChange>> {
        self.next_within(Duration::from_secs(2))
    }

    /// As [`Self::next_change`], waiting at most `wait`.
    pub fn next_within(&mut self, wait: Duration) -> io::Result<Option<NftChange>> {
        self.next(Some(Instant::now() + wait), None)
    }

    /// The next change, however long it takes; `Ok(None)` once `stop` is
    /// readable.
    pub(crate) fn next_or_stop(&mut self, stop: BorrowedFd<'_>) -> io::Result<Option<NftChange>> {
        self.next(None, Some(stop))
    }

    fn next(&mut self, deadline: Option<Instant>, stop: Option<BorrowedFd<'_>>) -> io::Result<Option<NftChange>> {
        use rustix::event::{PollFd, PollFlags};
        loop {
            let timeout = match deadline {
                Some(d) => Some(
                    rustix::event::Timespec::try_from(d.saturating_duration_since(Instant::now()))
                        .map_err(|_| io::ErrorKind::InvalidInput)?,
                ),
                None => None,
            };
            let mut fds = vec![PollFd::new(&self.socket.fd, PollFlags::IN)];
            if let Some(stop) = &stop {
                fds.push(PollFd::new(stop, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if fds.get(1).is_some_and(|f| !f.revents().is_empty()) {
                return Ok(None);
            }
            let datagram = match self.socket.recv_datagram() {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => continue,
                // ENOBUFS: the kernel dropped announcements.
                Err(e) if e.raw_os_error() == Some(105) => return Ok(Some(NftChange::Unknown)),
                Err(e) => return Err(e),
            };
            if let Some(change) = self.seen.foreign_commit(datagram) {
                return Ok(Some(change));
            }
        }
    }
}

/// `NFPROTO_IPV4` and `NFPROTO_IPV6`: the families of proxyd's tables.
const IP_FAMILIES: [u8; 2] = [2, 10];
/// The attribute that names an object's table: the first of every
/// table, chain, rule, set, element, object and flowtable message.
const TABLE_ATTRIBUTE: u16 = 1;

/// The table an nftables announcement (`payload`: nfgenmsg, then
/// attributes) is about, if it names one of an IP family.
fn table_of(payload: &[u8]) -> Option<&[u8]> {
    let (header, mut attrs) = payload.split_at_checked(4)?;
    if !IP_FAMILIES.contains(&header[0]) {
        return None;
    }
    while let [l0, l1, k0, k1, ..] = attrs {
        let len = usize::from(u16::from_ne_bytes([*l0, *l1]));
        let value = attrs.get(4..len)?;
        if u16::from_ne_bytes([*k0, *k1]) & 0x3fff == TABLE_ATTRIBUTE {
            return Some(value.strip_suffix(&[0]).unwrap_or(value));
        }
        attrs = attrs.get(len.next_multiple_of(4)..)?;
    }
    None
}

/// Stops and starts a monitor's listening: around proxyd's own writes,
/// so that the kernel does not announce them (see the module's docs).
#[derive(Debug)]
pub struct Listening {
    fd: std::os::fd::OwnedFd,
}

impl Listening {
    fn bind(&self, groups: u32) -> io::Result<()> {
        let bound = rustix::net::getsockname(&self.fd)?;
        let portid = nl::SocketAddrNetlink::try_from(bound).map_err(io::Error::from)?.pid();
        rustix::net::bind(&self.fd, &nl::SocketAddrNetlink::new(portid, groups))?;
        Ok(())
    }

    /// Stops listening.
    pub fn pause(&self) -> io::Result<()> {
        self.bind(0)
    }

    /// Listens again.
    pub fn resume(&self) -> io::Result<()> {
        self.bind(GROUPS)
    }
}

impl Touched {
    /// The first commit in `data` that another process made to the
    /// table, if any; what the transaction under way has touched carries
    /// over to the next datagram.
    fn foreign_commit(&mut self, mut data: &[u8]) -> Option<NftChange> {
        while let Ok(msg) = netlink_packet_core::NetlinkBuffer::new_checked(data) {
            let len = usize::try_from(msg.length()).ok()?;
            let kind = msg.message_type();
            if kind == NEWGEN {
                let ours = std::mem::take(&mut self.ours);
                if let Some(change) = commit(msg.payload()).filter(|_| ours) {
                    return Some(change);
                }
            } else if kind >> 8 == NEWGEN >> 8 && table_of(msg.payload()) == Some(self.table.as_bytes()) {
                self.ours = true;
            }
            data = data.get(len.next_multiple_of(4)..)?;
        }
        None
    }
}

/// The commit a `NEWGEN` announces, if another process made it.
fn commit(payload: &[u8]) -> Option<NftChange> {
    let Some(NfTablesMessage::NewGen(gen_)) = nftables_message(NEWGEN, payload) else {
        return None;
    };
    let (mut pid, mut process) = (None, String::new());
    for a in gen_.attributes {
        match a {
            GenAttribute::ProcPid(p) => pid = Some(p),
            GenAttribute::ProcName(n) => process = n,
            _ => {}
        }
    }
    // A commit without a process (the kernel's own) is no one's.
    let pid = pid.filter(|p| !is_own(*p))?;
    Some(NftChange::Foreign { pid, process })
}

#[cfg(test)]
mod tests {
    use netlink_packet_netfilter::nftables::GenMessage;
    use netlink_packet_netfilter::{NetfilterHeader, NetfilterProtoFamily};

    use super::super::append;
    use super::*;

    /// The announcement of a deleted table `table` of `family`, then the
    /// `NEWGEN` of process `pid`.
    fn commit_to(table: &str, family: NetfilterProtoFamily, pid: u32, name: &str) -> Vec<u8> {
        use netlink_packet_netfilter::nftables::{TableAttribute, TableMessage};
        let mut out = Vec::new();
        let deleted = NfTablesMessage::DeleteTable(TableMessage {
            attributes: vec![TableAttribute::Name(table.into())],
        });
        append(&mut out, NetfilterHeader::new(family, 0, 0), deleted, 0, 0);
        out.extend(newgen(pid, name));
        out
    }

    fn monitor() -> Touched {
        Touched {
            table: "proxyd".into(),
            ours: false,
        }
    }

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
    fn commits_to_the_table_by_others_are_foreign_and_the_rest_are_not() {
        use NetfilterProtoFamily::{IPv4, IPv6, Inet};
        let mut m = monitor();
        let ours = commit_to("proxyd", IPv4, std::process::id(), "proxyd");
        assert_eq!(m.foreign_commit(&ours), None);
        let elsewhere = commit_to("firewalld", IPv4, 4_000_002, "nft");
        assert_eq!(m.foreign_commit(&elsewhere), None, "not our table");
        let inet = commit_to("proxyd", Inet, 4_000_002, "nft");
        assert_eq!(m.foreign_commit(&inet), None, "not our family");
        let theirs = commit_to("proxyd", IPv6, 4_000_002, "nft");
        let foreign = Some(NftChange::Foreign {
            pid: 4_000_002,
            process: "nft".into(),
        });
        assert_eq!(m.foreign_commit(&theirs), foreign);
        // Across datagrams: the announcement in one, its NEWGEN in the next.
        let split = theirs.len() - newgen(4_000_002, "nft").len();
        assert_eq!(m.foreign_commit(&theirs[..split]), None);
        assert_eq!(m.foreign_commit(&theirs[split..]), foreign);
        let touched_nothing = newgen(4_000_002, "nft");
        assert_eq!(
            m.foreign_commit(&touched_nothing),
            None,
            "a commit that touched nothing"
        );
        assert_eq!(m.foreign_commit(&theirs[..10]), None, "a cut message is no commit");
    }

    proptest::proptest! {
        /// Whatever a datagram holds (announcements cut anywhere, bytes
        /// changed anywhere, noise after them), reading it never panics,
        /// and a whole, unchanged announcement is read as its commit
        /// whatever noise follows.
        #[test]
        fn any_datagram_is_read_without_panic(
            cut in 0usize..400,
            flips in proptest::collection::vec((0usize..400, proptest::prelude::any::<u8>()), 0..8),
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let whole = commit_to("proxyd", NetfilterProtoFamily::IPv4, 4_000_003, "nft");
            let intact = flips.is_empty() && cut >= whole.len();
            let mut data = whole;
            for (at, byte) in flips {
                if let Some(b) = data.get_mut(at) {
                    *b = byte;
                }
            }
            data.truncate(cut);
            data.extend(noise);
            let read = monitor().foreign_commit(&data);
            if intact {
                proptest::prop_assert_eq!(
                    read,
                    Some(NftChange::Foreign { pid: 4_000_003, process: "nft".into() })
                );
            }
        }
    }
}
