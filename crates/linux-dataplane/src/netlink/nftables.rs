//! What nftables says over netlink, without running `nft`: the ruleset
//! generation (a counter the kernel bumps at every committed transaction,
//! whoever commits it, so an idle periodic sync can tell that nothing was
//! committed since its own last transaction) and whether a table exists
//! (so the first load of a new node's table can be split into short
//! transactions). Both are one request, however large the ruleset: `nft`
//! itself reads every element of it before it lists even the tables.
//!
//! It also commits whole transactions ([`NftNetlink::commit`]: tables,
//! set declarations, chains, rules and elements, each as `nft` sends it).

use std::io;

use netlink_packet_core::{DefaultNla, NLM_F_DUMP, NLM_F_REQUEST, NlaBuffer, NlasIterator, Parseable};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, GenAttribute, GenMessage, NfTablesMessage, RuleAttribute, RuleMessage, SetAttribute,
    SetElementList, SetElementMessage, SetFlags, SetMessage, TableAttribute, TableMessage,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterProtoFamily};
use slice_model::IpFamily;

use nft_dataplane::{DataplaneError, RulesDigest, TableObjects, Transaction};

use super::batch::{self, Scope};
use super::elements::{self, RawElement};
use super::extack::{self, Extack};
use super::rules;
use super::writer::{self, Batch};
use super::{ENOENT, Next, Reply, Socket, append, malformed, nfproto, nftables_message};
use crate::netns::Netns;

/// `NFTA_RULE_TABLE` and `NFTA_RULE_CHAIN`: a rule dump reads these two
/// attributes alone, without decoding every rule's expressions.
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
/// A set element dump's replies (the message type's low byte).
const NFT_MSG_NEWSETELEM: u16 = 12;
/// An object dump's replies, and a counter's packets (`NFTA_COUNTER_PACKETS`).
const NFT_MSG_NEWOBJ: u16 = 18;
const NFTA_COUNTER_PACKETS: u16 = 2;
/// The send buffer a batch fits in without raising it.
const SEND_BUFFER: usize = 200 * 1024;

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
        let get = NfTablesMessage::GetTable(TableMessage {
            attributes: vec![TableAttribute::Name(name.to_owned())],
        });
        self.ask(get, nfproto(family), |reply| match reply {
            Reply::Message(kind, payload) => match nftables_message(*kind, payload) {
                Some(NfTablesMessage::NewTable(_)) => Some(Ok(true)),
                _ => None,
            },
            Reply::Error(ENOENT, _) => Some(Ok(false)),
            _ => None,
        })
    }

    /// The current generation.
    pub fn generation(&mut self) -> io::Result<u32> {
        self.ask(
            generation_request(),
            NetfilterProtoFamily::Unspec,
            |reply| match reply {
                Reply::Message(kind, payload) => match nftables_message(*kind, payload)? {
                    NfTablesMessage::NewGen(m) => {
                        Some(generation_of(&m).ok_or_else(|| malformed("no generation attribute")))
                    }
                    _ => None,
                },
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

    /// The elements of set `set` of the table `table` of `family`, as the
    /// kernel holds them, each made into what `read` makes of it: one dump,
    /// read again while the ruleset changes under it (an error if it kept
    /// changing).
    pub fn elements<T>(
        &mut self,
        family: IpFamily,
        table: &str,
        set: &str,
        read: impl Fn(&RawElement<'_>) -> T,
    ) -> io::Result<Vec<T>> {
        read_consistently(self, READ_ATTEMPTS, Self::generation, |s| {
            let get = NfTablesMessage::GetSetElement(SetElementMessage {
                attributes: vec![
                    SetElementList::Table(table.to_owned()),
                    SetElementList::Set(set.to_owned()),
                ],
            });
            let mut out = Vec::new();
            let interrupted = s.dump(get, family, |kind, payload| {
                if kind & 0xff == NFT_MSG_NEWSETELEM {
                    elements::dumped(payload, table, set, |raw| out.push(read(raw)));
                }
            })?;
            Ok((out, interrupted))
        })?
        .ok_or_else(|| {
            io::Error::other(format!(
                "set {set} changed each of the {READ_ATTEMPTS} times it was read"
            ))
        })
    }

    /// The packets each named counter of the table `table` of `family` has
    /// counted, by name: one dump (a table without counters, or none at
    /// all, has none).
    pub fn counters(&mut self, family: IpFamily, table: &str) -> io::Result<Vec<(String, u64)>> {
        let mut name = table.as_bytes().to_vec();
        name.push(0);
        let get = NfTablesMessage::GetObject(vec![
            DefaultNla::new(batch::OBJ_TABLE, name),
            DefaultNla::new(batch::OBJ_TYPE, rules::OBJECT_COUNTER.to_be_bytes().to_vec()),
        ]);
        let mut out = Vec::new();
        self.dump(get, family, |kind, payload| {
            if kind & 0xff == NFT_MSG_NEWOBJ {
                out.extend(counter_of(payload, table));
            }
        })?;
        out.sort_unstable();
        Ok(out)
    }

    /// The three dumps of [`objects`](Self::objects), and whether any was
    /// interrupted.
    fn dump_objects(&mut self, family: IpFamily, name: &str) -> io::Result<(TableObjects, bool)> {
        let table = || name.to_owned();
        let mut objects = TableObjects::default();
        let get_sets = NfTablesMessage::GetSet(SetMessage {
            attributes: vec![SetAttribute::Table(table())],
        });
        let mut interrupted = self.dump(get_sets, family, |kind, payload| {
            if let Some(NfTablesMessage::NewSet(set)) = nftables_message(kind, payload) {
                objects.sets.extend(named_set_of(&set, name));
            }
        })?;
        // Per chain: its rule count, and its rules' digests folded while
        // every rule has one.
        let mut rules: std::collections::HashMap<String, (usize, Option<RulesDigest>)> =
            std::collections::HashMap::new();
        let get_chains = NfTablesMessage::GetChain(ChainMessage {
            attributes: vec![ChainAttribute::Table(table())],
        });
        interrupted |= self.dump(get_chains, family, |kind, payload| {
            if let Some(NfTablesMessage::NewChain(chain)) = nftables_message(kind, payload)
                && let Some(chain) = chain_of(&chain, name)
            {
                rules.insert(chain, (0, Some(RulesDigest::default())));
            }
        })?;
        let get_rules = NfTablesMessage::GetRule(RuleMessage {
            attributes: vec![RuleAttribute::Table(table())],
        });
        interrupted |= self.dump(get_rules, family, |_, payload| {
            if let Some((chain, digest)) = rule_chain(payload, name)
                && let Some((n, folded)) = rules.get_mut(&chain)
            {
                *n += 1;
                *folded = folded.zip(digest).map(|(mut f, d)| {
                    f.push(d);
                    f
                });
            }
        })?;
        for (chain, (n, digest)) in rules {
            if let Some(d) = digest {
                objects.rule_digests.push((chain.clone(), d));
            }
            objects.chains.push((chain, n));
        }
        objects.rule_digests.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        objects.chains.sort_unstable();
        objects.sets.sort_unstable();
        Ok((objects, interrupted))
    }

    /// Dumps what `request` asks for in `family` (the objects of one table:
    /// the kernel filters some dumps by table, not all, so `each` checks)
    /// and hands each reply's type and payload to `each`. Returns whether
    /// the kernel marked the dump interrupted.
    fn dump(
        &mut self,
        request: NfTablesMessage,
        family: IpFamily,
        mut each: impl FnMut(u16, &[u8]),
    ) -> io::Result<bool> {
        let seq = self.0.next_seq();
        let mut req = Vec::with_capacity(64);
        let header = NetfilterHeader::new(nfproto(family), 0, 0);
        append(&mut req, header, request, NLM_F_REQUEST | NLM_F_DUMP, seq);
        self.0.send(&req)?;
        let mut state = DumpState::default();
        self.0.receive(seq, |reply| dump_reply(reply, &mut each, &mut state))?;
        state.outcome()
    }

    /// Commits `tx` as one netlink batch (and returns the size of what it
    /// sent) when `scope` covers all it holds; `None` when some of it is
    /// `nft`'s to write. All of the batch is applied or none.
    pub fn commit(&mut self, tx: &Transaction, scope: Scope) -> Option<Result<usize, DataplaneError>> {
        if tx.is_empty() {
            return None;
        }
        let batch = match batch::batch(tx, self.0.seq.wrapping_add(1), scope) {
            Ok(batch) => batch?,
            Err(e) => {
                return Some(Err(DataplaneError::Unencodable {
                    what: e.what,
                    why: e.why,
                }));
            }
        };
        self.0.seq = batch.last_seq();
        Some(self.send_batch(&batch))
    }

    /// Has the kernel check every message of `tx` without committing any
    /// ([`batch::check_batch`]): `Ok` when it refuses none.
    pub fn check(&mut self, tx: &Transaction) -> Result<(), DataplaneError> {
        let batch = batch::check_batch(tx, self.0.seq.wrapping_add(1)).map_err(|e| DataplaneError::Unencodable {
            what: e.what,
            why: e.why,
        })?;
        self.0.seq = batch.last_seq();
        self.send_batch(&batch).map(drop)
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
        let header = NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, 0);
        append(&mut req, header, generation_request(), NLM_F_REQUEST, probe);
        self.0.send(&req).map_err(|e| failed("asking for the generation", e))?;
        let (first, last) = (batch.first_seq, batch.last_seq());
        let mut refused: Option<Refused> = None;
        let in_batch = |s: u32| s.wrapping_sub(first) <= last.wrapping_sub(first);
        self.0
            .receive_where(
                |s| s == probe || in_batch(s),
                |seq, reply| match reply {
                    _ if seq == probe => Next::Stop,
                    Reply::Error(errno, extack) => {
                        refused.get_or_insert_with(|| Refused::of(batch, seq, errno, extack));
                        Next::More
                    }
                    _ => Next::More,
                },
            )
            .map_err(|e| failed("reading the kernel's answer", e))?;
        match refused {
            None => Ok(batch.bytes.len()),
            Some(r) => Err(failed(&r.what, io::Error::from_raw_os_error(r.errno))),
        }
    }

    /// Sends `request` (`nfgenmsg` for `family`), and reads replies until `answer` makes
    /// something of one; any other error the kernel reports is the result.
    fn ask<T>(
        &mut self,
        request: NfTablesMessage,
        family: NetfilterProtoFamily,
        mut answer: impl FnMut(&Reply<'_>) -> Option<io::Result<T>>,
    ) -> io::Result<T> {
        let seq = self.0.next_seq();
        let mut req = Vec::with_capacity(64);
        append(
            &mut req,
            NetfilterHeader::new(family, 0, 0),
            request,
            NLM_F_REQUEST,
            seq,
        );
        self.0.send(&req)?;
        let mut found = Err(malformed("no answer in the reply"));
        self.0.receive(seq, |reply| {
            found = match (answer(&reply), reply) {
                (Some(result), _) => result,
                (None, Reply::Error(errno, _)) => Err(io::Error::from_raw_os_error(errno)),
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

/// One reply of a dump: a message goes to `each`; the end or an error
/// (kept in `state`) stops the dump.
fn dump_reply(reply: Reply<'_>, each: &mut impl FnMut(u16, &[u8]), state: &mut DumpState) -> Next {
    match reply {
        Reply::Message(kind, payload) => {
            each(kind, payload);
            Next::More
        }
        Reply::Interrupted => {
            state.interrupted = true;
            Next::More
        }
        Reply::Ack => Next::More,
        Reply::Done => Next::Stop,
        Reply::Error(errno, _) => {
            state.error = Some(io::Error::from_raw_os_error(errno));
            Next::Stop
        }
    }
}

/// `NFT_MSG_GETGEN`.
fn generation_request() -> NfTablesMessage {
    NfTablesMessage::GetGen(GenMessage { attributes: Vec::new() })
}

/// The generation a `NFT_MSG_NEWGEN` reports.
fn generation_of(m: &GenMessage) -> Option<u32> {
    m.attributes.iter().find_map(|a| match a {
        GenAttribute::Id(id) => Some(*id),
        _ => None,
    })
}

/// What one attribute of a dumped object says of it.
enum Field<'a> {
    /// The table it belongs to.
    Table(&'a str),
    /// Its name.
    Name(&'a str),
    /// It is not one of proxyd's (an anonymous set).
    Skip,
    /// Nothing that matters here.
    Other,
}

/// The name an object of `table` has, from what its attributes say; `None`
/// for another table's object, or one to skip.
fn name_in_table<'a>(fields: impl IntoIterator<Item = Field<'a>>, table: &str) -> Option<String> {
    let (mut in_table, mut name) = (false, None);
    for field in fields {
        match field {
            Field::Table(t) => in_table = t == table,
            Field::Name(n) => name = Some(n),
            Field::Skip => return None,
            Field::Other => {}
        }
    }
    name.filter(|_| in_table).map(str::to_owned)
}

/// The name of a set of `table`, unless it is one of nft's anonymous sets
/// (a rule's inline `{ … }`), which are not proxyd's.
fn named_set_of(set: &SetMessage, table: &str) -> Option<String> {
    let fields = set.attributes.iter().map(|a| match a {
        SetAttribute::Table(t) => Field::Table(t),
        SetAttribute::Name(n) => Field::Name(n),
        SetAttribute::Flags(f) if f.contains(SetFlags::Anonymous) => Field::Skip,
        _ => Field::Other,
    });
    name_in_table(fields, table)
}

/// The name of a chain of `table`.
fn chain_of(chain: &ChainMessage, table: &str) -> Option<String> {
    let fields = chain.attributes.iter().map(|a| match a {
        ChainAttribute::Table(t) => Field::Table(t),
        ChainAttribute::Name(n) => Field::Name(n),
        _ => Field::Other,
    });
    name_in_table(fields, table)
}

/// The chain of a rule of `table` (from a `NFT_MSG_NEWRULE` payload,
/// `nfgenmsg` first): only the table and chain attributes are decoded.
fn rule_chain(payload: &[u8], table: &str) -> Option<(String, Option<u64>)> {
    let (mut in_table, mut chain, mut digest) = (false, None, None);
    for nla in NlasIterator::new(payload.get(4..)?) {
        let nla: NlaBuffer<&[u8]> = nla.ok()?;
        if nla.kind() == writer::RULE_USERDATA {
            digest = writer::digest_in(nla.value());
            continue;
        }
        if !matches!(nla.kind(), NFTA_RULE_TABLE | NFTA_RULE_CHAIN) {
            continue;
        }
        match RuleAttribute::parse(&nla).ok()? {
            RuleAttribute::Table(t) => in_table = t == table,
            RuleAttribute::Chain(c) => chain = Some(c),
            _ => {}
        }
    }
    chain.filter(|_| in_table).map(|c| (c, digest))
}

/// A dumped object's name and packet count, when it is a counter of
/// `table` (`NFTA_OBJ_*`, its data `NFTA_COUNTER_PACKETS`, big-endian).
fn counter_of(payload: &[u8], table: &str) -> Option<(String, u64)> {
    let text = |v: &[u8]| String::from_utf8(v.split(|b| *b == 0).next().unwrap_or_default().to_vec()).ok();
    let (mut in_table, mut counter, mut name, mut packets) = (false, false, None, None);
    for nla in NlasIterator::new(payload.get(4..)?) {
        let nla: NlaBuffer<&[u8]> = nla.ok()?;
        match nla.kind() {
            batch::OBJ_TABLE => in_table = text(nla.value()).as_deref() == Some(table),
            batch::OBJ_NAME => name = text(nla.value()),
            batch::OBJ_TYPE => counter = nla.value() == rules::OBJECT_COUNTER.to_be_bytes(),
            batch::OBJ_DATA => {
                for inner in NlasIterator::new(nla.value()) {
                    let inner: NlaBuffer<&[u8]> = inner.ok()?;
                    if inner.kind() == NFTA_COUNTER_PACKETS {
                        packets = Some(u64::from_be_bytes(inner.value().try_into().ok()?));
                    }
                }
            }
            _ => {}
        }
    }
    (in_table && counter).then_some(())?;
    Some((name?, packets?))
}

/// The first message of a batch the kernel refused: what it does, with
/// what the kernel said of it, and the errno.
struct Refused {
    what: String,
    errno: i32,
}

impl Refused {
    fn of(batch: &Batch, seq: u32, errno: i32, extack: Extack<'_>) -> Self {
        let mut what = batch.describe(seq).unwrap_or("the batch").to_owned();
        let attribute = extack
            .offset
            .and_then(|at| extack::attribute_at(batch.message(seq)?, at));
        match (extack.message, attribute) {
            (None, None) => {}
            (Some(m), None) => what.push_str(&format!(" (the kernel: {m})")),
            (None, Some(a)) => what.push_str(&format!(" (the kernel refuses its {a})")),
            (Some(m), Some(a)) => what.push_str(&format!(" (the kernel: {m}, at its {a})")),
        }
        Self { what, errno }
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NLM_F_DUMP_INTR, NLMSG_DONE, NLMSG_ERROR};

    use super::super::parse_datagram;
    use super::*;

    /// A `NFT_MSG_NEWGEN` reply.
    fn gen_reply(seq: u32, attributes: Vec<GenAttribute>) -> Vec<u8> {
        let mut m = Vec::new();
        let header = NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, 0);
        append(
            &mut m,
            header,
            NfTablesMessage::NewGen(GenMessage { attributes }),
            0,
            seq,
        );
        m
    }

    fn newgen(seq: u32, id: u32) -> Vec<u8> {
        gen_reply(seq, vec![GenAttribute::Id(id)])
    }

    /// A bare netlink message (header only) of `kind`, followed by `body`.
    fn bare(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let len = 16 + body.len() as u32;
        let mut m = Vec::new();
        m.extend(len.to_ne_bytes());
        m.extend(kind.to_ne_bytes());
        m.extend(flags.to_ne_bytes());
        m.extend(seq.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend(body);
        m
    }

    fn generation_in(data: &[u8], seq: u32) -> io::Result<Option<u32>> {
        let mut got = None;
        parse_datagram(data, &|s| s == seq, &mut |_, r| match r {
            Reply::Message(kind, p) => {
                got = match nftables_message(kind, p) {
                    Some(NfTablesMessage::NewGen(m)) => generation_of(&m),
                    _ => None,
                };
                Next::Stop
            }
            Reply::Error(e, _) => {
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
        // An error: the errno, then the header of the request it answers.
        let mut errno = (-1i32).to_ne_bytes().to_vec();
        errno.extend(bare(0, 0, 7, &[]));
        let denied = bare(NLMSG_ERROR, 0, 7, &errno);
        assert_eq!(generation_in(&denied, 7).ok(), Some(Some(1001)), "EPERM");
        // The error of a request larger than the receive buffer: the echo
        // of the request is cut where the buffer ends.
        let mut echo = (-22i32).to_ne_bytes().to_vec();
        echo.extend(bare(6, 0, 7, &vec![0; 100_000]));
        let cut = &bare(NLMSG_ERROR, 0, 7, &echo)[..65_536];
        assert_eq!(generation_in(cut, 7).ok(), Some(Some(1022)), "EINVAL, though cut");
        assert!(generation_in(&cut[..40], 7).is_ok_and(|g| g == Some(1022)));
        assert!(
            generation_in(&newgen(7, 1)[..10], 7).is_err(),
            "a cut message that is not an error"
        );
    }

    /// A dump's reply: sets of two tables, one anonymous, then the end.
    fn set_dump(seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for (table, name, flags) in [
            ("proxyd", "cluster-ips", SetFlags::empty()),
            ("proxyd", "__set0", SetFlags::Anonymous),
            ("other", "theirs", SetFlags::empty()),
        ] {
            let set = NfTablesMessage::NewSet(SetMessage {
                attributes: vec![
                    SetAttribute::Table(table.into()),
                    SetAttribute::Name(name.into()),
                    SetAttribute::Flags(flags),
                ],
            });
            append(&mut out, NetfilterHeader::new(nfproto(IpFamily::V4), 0, 0), set, 0, seq);
        }
        out.extend(bare(NLMSG_DONE, 0, seq, &0u32.to_ne_bytes()));
        out
    }

    fn dumped_sets(data: &[u8]) -> io::Result<(Vec<String>, bool)> {
        let mut sets = Vec::new();
        let mut state = DumpState::default();
        parse_datagram(data, &|s| s == 3, &mut |_, r| {
            dump_reply(
                r,
                &mut |kind, payload| {
                    if let Some(NfTablesMessage::NewSet(set)) = nftables_message(kind, payload) {
                        sets.extend(named_set_of(&set, "proxyd"));
                    }
                },
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
        let second = u32::from_ne_bytes(good[..4].try_into().expect("a first message")) as usize;
        let mut marked = good.clone();
        let flags = u16::from_ne_bytes(marked[second + 6..second + 8].try_into().expect("a second message"));
        marked[second + 6..second + 8].copy_from_slice(&(flags | NLM_F_DUMP_INTR).to_ne_bytes());
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
        assert_eq!(generation_in(&gen_reply(1, Vec::new()), 1).ok(), Some(None));
    }

    /// The payload (after the netlink header) of a `NFT_MSG_NEWRULE` of
    /// `table`'s `chain`, with an expression between the two attributes.
    fn rule_payload(table: &str, chain: &str) -> Vec<u8> {
        use netlink_packet_netfilter::nftables::{ExpressionAttribute, Expressions, Immediate, ListAttribute};
        let rule = NfTablesMessage::NewRule(RuleMessage {
            attributes: vec![
                RuleAttribute::Table(table.into()),
                RuleAttribute::Expressions(vec![
                    Expressions::Immediate(vec![Immediate::Data(
                        netlink_packet_netfilter::nftables::DataAttribute::Value(vec![1, 2, 3, 4]),
                    )])
                    .into(),
                    ListAttribute::Element(vec![ExpressionAttribute::Name("notrack".into())]),
                ]),
                RuleAttribute::Chain(chain.into()),
            ],
        });
        let mut m = Vec::new();
        append(&mut m, NetfilterHeader::new(nfproto(IpFamily::V6), 0, 0), rule, 0, 1);
        m[16..].to_vec()
    }

    /// A rule's user data as nft might leave it beside proxyd's record: a
    /// comment record, then the digest.
    #[test]
    fn a_rules_digest_is_read_from_its_user_data_among_other_records() {
        let digest = 0x0123_4567_89ab_cdef_u64;
        let mut udata = vec![0, 3, b'h', b'i', 0];
        writer::digest_record(&mut udata, digest);
        let mut payload = rule_payload("proxyd", "services");
        let len = 4 + udata.len();
        payload.extend((len as u16).to_ne_bytes());
        payload.extend(writer::RULE_USERDATA.to_ne_bytes());
        payload.extend(&udata);
        payload.resize(payload.len().next_multiple_of(4), 0);
        assert_eq!(rule_chain(&payload, "proxyd"), Some(("services".into(), Some(digest))));
        assert_eq!(writer::digest_in(&udata[..5]), None, "a comment alone");
        for cut in 0..udata.len() {
            assert_eq!(writer::digest_in(&udata[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_rule_dump_reads_its_table_and_chain_only() {
        let payload = rule_payload("proxyd", "services");
        assert_eq!(rule_chain(&payload, "proxyd"), Some(("services".into(), None)));
        assert_eq!(rule_chain(&payload, "other"), None, "another table's rule");
        for cut in 0..payload.len() {
            let _ = rule_chain(&payload[..cut], "proxyd");
        }
        let chain = ChainMessage {
            attributes: vec![
                ChainAttribute::Table("proxyd".into()),
                ChainAttribute::Name("services".into()),
            ],
        };
        assert_eq!(chain_of(&chain, "proxyd").as_deref(), Some("services"));
        assert_eq!(chain_of(&chain, "other"), None);
    }
}
