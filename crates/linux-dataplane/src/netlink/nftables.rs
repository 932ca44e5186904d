//! What nftables says over netlink, without running `nft`: the ruleset
//! generation (a counter the kernel bumps at every committed transaction,
//! whoever commits it, so an idle periodic sync can tell that nothing was
//! committed since its own last transaction) and whether a table exists
//! (so the first load of a new node's table can be split into short
//! transactions). Both are one request, however large the ruleset: `nft`
//! itself reads every element of it before it lists even the tables.
//!
//! It also commits transactions of elements alone ([`NftNetlink::commit`]),
//! the bulk of a large first load and all of most small syncs.

use std::io;

use slice_model::IpFamily;

use nft_dataplane::{DataplaneError, TableObjects, Transaction};

use super::elements::{self, Batch};
use super::{
    ENOENT, NFGENMSG, NLM_F_DUMP, NLM_F_REQUEST, Next, Reply, Socket, attr, find, malformed, message, nfproto,
};
use crate::netns::Netns;

/// nfnetlink's nftables subsystem and its generation messages.
pub(super) const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_GETSET: u16 = 10;
/// The table and name attributes of chains, rules and sets.
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFT_SET_ANONYMOUS: u32 = 1;
const NFT_MSG_NEWGEN: u16 = 15;
const NFT_MSG_GETGEN: u16 = 16;
const NFTA_TABLE_NAME: u16 = 1;
/// What a socket can send without a larger buffer (the kernel's default).
const SEND_BUFFER: usize = 200 * 1024;
const NFTA_GEN_ID: u16 = 1;

/// Asks the nftables of one network namespace.
#[derive(Debug)]
pub struct NftNetlink(Socket);

impl NftNetlink {
    /// A netlink socket in `netns`.
    pub fn open(netns: &Netns) -> io::Result<Self> {
        Socket::open(netns).map(Self)
    }

    /// Whether the table `name` of `family` exists.
    pub fn table_exists(&mut self, family: IpFamily, name: &str) -> io::Result<bool> {
        let mut text = name.as_bytes().to_vec();
        text.push(0);
        self.ask(
            NFT_MSG_GETTABLE,
            nfproto(family),
            |b| attr(b, NFTA_TABLE_NAME, &text),
            |reply| match reply {
                Reply::Message(kind, _) if *kind == NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE => Some(Ok(true)),
                Reply::Error(ENOENT) => Some(Ok(false)),
                _ => None,
            },
        )
    }

    /// The current generation.
    pub fn generation(&mut self) -> io::Result<u32> {
        self.ask(
            NFT_MSG_GETGEN,
            0,
            |_| {},
            |reply| match reply {
                Reply::Message(kind, payload) if *kind == NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN => {
                    Some(generation_of(payload).ok_or_else(|| malformed("no generation attribute")))
                }
                _ => None,
            },
        )
    }

    /// The sets and chains of the table `name` of `family`, each chain with
    /// its rule count: three dumps, whatever the number of elements (which
    /// are not read). The three are one picture of the table: read again
    /// when the ruleset's generation moved meanwhile or the kernel marked a
    /// dump interrupted, and an error if it kept changing.
    pub fn objects(&mut self, family: IpFamily, name: &str) -> io::Result<TableObjects> {
        read_consistently(self, READ_ATTEMPTS, Self::generation, |s| s.dump_objects(family, name))?.ok_or_else(|| {
            io::Error::other(format!(
                "table {name} changed each of the {READ_ATTEMPTS} times it was read"
            ))
        })
    }

    /// The three dumps of [`objects`](Self::objects), and whether any was
    /// interrupted.
    fn dump_objects(&mut self, family: IpFamily, name: &str) -> io::Result<(TableObjects, bool)> {
        let mut table = name.as_bytes().to_vec();
        table.push(0);
        let family = nfproto(family);
        let mut objects = TableObjects::default();
        let mut interrupted = self.dump(NFT_MSG_GETSET, family, NFTA_SET_TABLE, &table, |a| {
            objects.sets.extend(named_set(a));
        })?;
        let mut rules: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        interrupted |= self.dump(NFT_MSG_GETCHAIN, family, NFTA_CHAIN_TABLE, &table, |a| {
            if let Some(chain) = string(a, NFTA_CHAIN_NAME) {
                rules.insert(chain, 0);
            }
        })?;
        interrupted |= self.dump(NFT_MSG_GETRULE, family, NFTA_RULE_TABLE, &table, |a| {
            if let Some(n) = string(a, NFTA_RULE_CHAIN).and_then(|c| rules.get_mut(&c)) {
                *n += 1;
            }
        })?;
        objects.chains = rules.into_iter().collect();
        objects.chains.sort_unstable();
        objects.sets.sort_unstable();
        Ok((objects, interrupted))
    }

    /// Dumps the objects of type `kind` (a get request) in `family`, asking
    /// for those of `table` (attribute `table_attr`), and hands the
    /// attributes of each of that table to `each` (the kernel filters some
    /// dumps by table, not all). Returns whether the kernel marked the dump
    /// interrupted.
    fn dump(
        &mut self,
        kind: u16,
        family: u8,
        table_attr: u16,
        table: &[u8],
        mut each: impl FnMut(&[u8]),
    ) -> io::Result<bool> {
        let seq = self.0.next_seq();
        let mut req = Vec::with_capacity(64);
        message(
            &mut req,
            NFNL_SUBSYS_NFTABLES << 8 | kind,
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
            family,
            |b| attr(b, table_attr, table),
        );
        self.0.send(&req)?;
        let mut state = DumpState::default();
        self.0
            .receive(seq, |reply| dump_reply(reply, table_attr, table, &mut each, &mut state))?;
        state.outcome()
    }

    /// Commits `tx` as one netlink batch when it holds elements alone (and
    /// returns the size of what it sent); `None` when it holds anything
    /// else, which is `nft`'s to write. All of the batch is applied or none.
    pub fn commit(&mut self, tx: &Transaction) -> Option<Result<usize, DataplaneError>> {
        if tx.is_empty() {
            return None;
        }
        let batch = elements::batch(tx, self.0.seq.wrapping_add(1))?;
        self.0.seq = batch.last_seq();
        Some(self.send_batch(&batch))
    }

    fn send_batch(&mut self, batch: &Batch) -> Result<usize, DataplaneError> {
        let failed = |what: &str, source| DataplaneError::Netlink {
            what: what.to_owned(),
            source,
        };
        // A batch is one datagram; a large one needs a send buffer to match
        // (the kernel refuses a datagram larger than the buffer).
        if batch.bytes.len() > SEND_BUFFER {
            let _ = rustix::net::sockopt::set_socket_send_buffer_size_force(&self.0.fd, batch.bytes.len() + 4096);
        }
        self.0.send(&batch.bytes).map_err(|e| failed("sending the batch", e))?;
        // The kernel handles a batch while it is sent, and reports only
        // failures: a generation request sent after it is answered after
        // every error the batch caused.
        let probe = self.0.next_seq();
        let mut req = Vec::with_capacity(32);
        message(
            &mut req,
            NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETGEN,
            NLM_F_REQUEST,
            probe,
            0,
            |_| {},
        );
        self.0.send(&req).map_err(|e| failed("asking for the generation", e))?;
        let (first, last) = (batch.first_seq, batch.last_seq());
        let mut refused: Option<(u32, i32)> = None;
        let in_batch = |s: u32| s.wrapping_sub(first) <= last.wrapping_sub(first);
        self.0
            .receive_where(
                |s| s == probe || in_batch(s),
                |seq, reply| match reply {
                    _ if seq == probe => Next::Stop,
                    Reply::Error(errno) => {
                        refused.get_or_insert((seq, errno));
                        Next::More
                    }
                    _ => Next::More,
                },
            )
            .map_err(|e| failed("reading the kernel's answer", e))?;
        match refused {
            None => Ok(batch.bytes.len()),
            Some((seq, errno)) => Err(failed(
                batch.describe(seq).unwrap_or("the batch"),
                io::Error::from_raw_os_error(errno),
            )),
        }
    }

    /// Sends one nftables request `kind` for `family` with the attributes
    /// `body` writes, and reads replies until `answer` makes something of
    /// one; any other error the kernel reports is the result.
    fn ask<T>(
        &mut self,
        kind: u16,
        family: u8,
        body: impl FnOnce(&mut Vec<u8>),
        mut answer: impl FnMut(&Reply<'_>) -> Option<io::Result<T>>,
    ) -> io::Result<T> {
        let seq = self.0.next_seq();
        let mut req = Vec::with_capacity(64);
        message(
            &mut req,
            NFNL_SUBSYS_NFTABLES << 8 | kind,
            NLM_F_REQUEST,
            seq,
            family,
            body,
        );
        self.0.send(&req)?;
        let mut found = Err(malformed("no answer in the reply"));
        self.0.receive(seq, |reply| {
            found = match (answer(&reply), reply) {
                (Some(result), _) => result,
                (None, Reply::Error(errno)) => Err(io::Error::from_raw_os_error(errno)),
                (None, _) => return Next::More,
            };
            Next::Stop
        })?;
        found
    }
}

/// How many times [`NftNetlink::objects`] reads a table that keeps
/// changing under it.
const READ_ATTEMPTS: usize = 3;

/// Reads with `read` (which also says whether the kernel marked the read
/// interrupted) until a read saw the same generation before and after it,
/// at most `attempts` times; `None` if none did.
fn read_consistently<S, T>(
    s: &mut S,
    attempts: usize,
    generation: impl Fn(&mut S) -> io::Result<u32>,
    read: impl Fn(&mut S) -> io::Result<(T, bool)>,
) -> io::Result<Option<T>> {
    for _ in 0..attempts {
        let before = generation(s)?;
        let (value, interrupted) = read(s)?;
        if !interrupted && generation(s)? == before {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// What a dump came to: an error the kernel reported, and whether it said
/// the dump was interrupted.
#[derive(Debug, Default)]
struct DumpState {
    error: Option<io::Error>,
    interrupted: bool,
}

impl DumpState {
    /// Whether the dump was interrupted, or the kernel's error.
    fn outcome(self) -> io::Result<bool> {
        self.error.map_or(Ok(self.interrupted), Err)
    }
}

/// One reply of a dump: the attributes of an object of `table` go to
/// `each`; the end or an error (kept in `state`) stops the dump.
fn dump_reply(
    reply: Reply<'_>,
    table_attr: u16,
    table: &[u8],
    each: &mut impl FnMut(&[u8]),
    state: &mut DumpState,
) -> Next {
    match reply {
        Reply::Message(_, payload) => {
            let attrs = payload.get(NFGENMSG..).unwrap_or_default();
            if find(attrs, table_attr) == Some(table) {
                each(attrs);
            }
            Next::More
        }
        Reply::Interrupted => {
            state.interrupted = true;
            Next::More
        }
        Reply::Ack => Next::More,
        Reply::Done => Next::Stop,
        Reply::Error(errno) => {
            state.error = Some(io::Error::from_raw_os_error(errno));
            Next::Stop
        }
    }
}

/// The name of a set a `NFT_MSG_NEWSET` describes, unless it is one of
/// nft's anonymous sets (a rule's inline `{ … }`), which are not proxyd's.
fn named_set(attrs: &[u8]) -> Option<String> {
    let flags = find(attrs, NFTA_SET_FLAGS).and_then(|f| Some(u32::from_be_bytes(f.get(..4)?.try_into().ok()?)));
    if flags.is_some_and(|f| f & NFT_SET_ANONYMOUS != 0) {
        return None;
    }
    string(attrs, NFTA_SET_NAME)
}

/// A NUL-terminated string attribute.
fn string(attrs: &[u8], kind: u16) -> Option<String> {
    let value = find(attrs, kind)?;
    let text = value.strip_suffix(&[0]).unwrap_or(value);
    std::str::from_utf8(text).ok().map(str::to_owned)
}

/// `NFTA_GEN_ID` (big-endian) of a `NFT_MSG_NEWGEN` payload.
fn generation_of(payload: &[u8]) -> Option<u32> {
    let value = find(payload.get(NFGENMSG..)?, NFTA_GEN_ID)?;
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::super::{HEADER, NLM_F_DUMP_INTR, NLMSG_ERROR, parse_datagram, u16_at, u32_at};
    use super::*;

    fn newgen(seq: u32, id: u32) -> Vec<u8> {
        let mut m = Vec::new();
        message(&mut m, NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN, 0, seq, 0, |b| {
            attr(b, NFTA_GEN_ID, &id.to_be_bytes());
        });
        m
    }

    fn generation_in(data: &[u8], seq: u32) -> io::Result<Option<u32>> {
        let mut got = None;
        parse_datagram(data, &|s| s == seq, &mut |_, r| match r {
            Reply::Message(_, p) => {
                got = generation_of(p);
                Next::Stop
            }
            Reply::Error(e) => {
                got = Some(1000 + e as u32);
                Next::Stop
            }
            _ => Next::More,
        })?;
        Ok(got)
    }

    #[test]
    fn replies_are_read_for_their_request_only() {
        assert_eq!(generation_in(&newgen(7, 42), 7).ok(), Some(Some(42)));
        assert_eq!(generation_in(&newgen(6, 42), 7).ok(), Some(None), "an older answer");
        let mut two = newgen(6, 1);
        two.extend(newgen(7, 2));
        assert_eq!(generation_in(&two, 7).ok(), Some(Some(2)));
        let mut denied = Vec::new();
        message(&mut denied, NLMSG_ERROR, 0, 7, 0, |_| {});
        let at = HEADER;
        denied[at..at + 4].copy_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(generation_in(&denied, 7).ok(), Some(Some(1001)), "EPERM");
    }

    /// A dump's reply: sets of two tables, one anonymous, then the end.
    fn set_dump(seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for (table, name, flags) in [
            (&b"proxyd\0"[..], &b"cluster-ips\0"[..], 0u32),
            (b"proxyd\0", b"__set0\0", NFT_SET_ANONYMOUS),
            (b"other\0", b"theirs\0", 0),
        ] {
            message(&mut out, NFNL_SUBSYS_NFTABLES << 8 | 9, 0, seq, 2, |b| {
                attr(b, NFTA_SET_TABLE, table);
                attr(b, NFTA_SET_NAME, name);
                attr(b, NFTA_SET_FLAGS, &flags.to_be_bytes());
            });
        }
        message(&mut out, super::super::NLMSG_DONE, 0, seq, 0, |_| {});
        out
    }

    fn dumped_sets(data: &[u8]) -> io::Result<(Vec<String>, bool)> {
        let mut sets = Vec::new();
        let mut state = DumpState::default();
        parse_datagram(data, &|s| s == 3, &mut |_, r| {
            dump_reply(
                r,
                NFTA_SET_TABLE,
                b"proxyd\0",
                &mut |a| sets.extend(named_set(a)),
                &mut state,
            )
        })?;
        state.outcome().map(|interrupted| (sets, interrupted))
    }

    fn sets_in(data: &[u8]) -> io::Result<Vec<String>> {
        dumped_sets(data).map(|(sets, _)| sets)
    }

    #[test]
    fn a_dump_the_kernel_marks_interrupted_says_so() {
        let good = set_dump(3);
        assert_eq!(dumped_sets(&good).ok().map(|(_, i)| i), Some(false));
        // The second message's flags (`nlmsg_flags`, after length and type).
        let second = u32_at(&good, 0).expect("a first message") as usize;
        let mut marked = good.clone();
        let flags = u16_at(&marked, second + 6).expect("a second message") | NLM_F_DUMP_INTR;
        marked[second + 6..second + 8].copy_from_slice(&flags.to_ne_bytes());
        let (sets, interrupted) = dumped_sets(&marked).expect("still a dump");
        assert!(interrupted);
        assert_eq!(sets, ["cluster-ips"], "the objects are still read");
    }

    /// A table whose generation moves `changes` times at the start of reads.
    struct Moving {
        generation: u32,
        changes: usize,
        interrupted_reads: usize,
        reads: usize,
    }

    fn read_moving(m: &mut Moving) -> io::Result<Option<usize>> {
        read_consistently(
            m,
            READ_ATTEMPTS,
            |m| Ok(m.generation),
            |m| {
                m.reads += 1;
                if m.changes > 0 {
                    m.changes -= 1;
                    m.generation += 1;
                }
                let interrupted = m.interrupted_reads > 0;
                m.interrupted_reads = m.interrupted_reads.saturating_sub(1);
                Ok((m.reads, interrupted))
            },
        )
    }

    #[test]
    fn a_table_read_while_it_changes_is_read_again() {
        let quiet = |changes, interrupted_reads| Moving {
            generation: 7,
            changes,
            interrupted_reads,
            reads: 0,
        };
        assert_eq!(read_moving(&mut quiet(0, 0)).ok(), Some(Some(1)));
        assert_eq!(
            read_moving(&mut quiet(1, 0)).ok(),
            Some(Some(2)),
            "the generation moved"
        );
        assert_eq!(
            read_moving(&mut quiet(0, 2)).ok(),
            Some(Some(3)),
            "two dumps interrupted"
        );
        assert_eq!(read_moving(&mut quiet(5, 0)).ok(), Some(None), "it kept changing");
        let mut failing = quiet(0, 0);
        let err = read_consistently(&mut failing, 3, |_| Err(io::Error::other("gone")), |_| Ok(((), false)));
        assert!(err.is_err());
    }

    #[test]
    fn a_dump_keeps_its_tables_named_sets_and_garbage_is_no_panic() {
        let good = set_dump(3);
        assert_eq!(sets_in(&good).ok(), Some(vec!["cluster-ips".to_owned()]));
        for cut in 0..good.len() {
            let _ = sets_in(&good[..cut]);
        }
        let mut flipped = good.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xa5;
            let _ = sets_in(&flipped);
            flipped[i] ^= 0xa5;
        }
    }

    #[test]
    fn garbage_is_an_error_or_nothing_never_a_panic() {
        let good = newgen(1, 5);
        for cut in 0..good.len() {
            let _ = generation_in(&good[..cut], 1);
        }
        let mut bad = good.clone();
        bad[0] = 200;
        assert!(generation_in(&bad, 1).is_err());
        let mut empty = Vec::new();
        message(&mut empty, NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN, 0, 1, 0, |_| {});
        assert_eq!(generation_in(&empty, 1).ok(), Some(None));
    }
}
