//! A transaction as one nftables netlink batch, written without running
//! `nft`: tables, set declarations, chains, rules and elements. Each
//! operation is the message `nft` itself sends for it (the root tests
//! compare `nft list table` of a table written each way), so that what an
//! operator lists reads as what `render` prints.

use std::io::Write;

use netlink_packet_core::{NLA_F_NESTED, NLM_F_CREATE, NLM_F_REQUEST};
use netlink_packet_netfilter::NetfilterProtoFamily;
use netlink_packet_netfilter::{NetfilterHeader, none::ControlMessage};
use nft_dataplane::element::Element;
use nft_dataplane::names::{ChainId, Hook, SetId};
use nft_dataplane::{Op, Transaction};
use slice_model::IpFamily;

use super::declare;
use super::elements::element;
use super::rules;
use super::{append, nfproto};

/// nfnetlink's nftables subsystem.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NLM_F_APPEND`: a rule goes after the chain's last.
const NLM_F_APPEND: u16 = 0x800;

/// `NFT_MSG_*`.
const NEWTABLE: u16 = 0;
const DELTABLE: u16 = 2;
const NEWCHAIN: u16 = 3;
const DELCHAIN: u16 = 5;
const NEWRULE: u16 = 6;
const DELRULE: u16 = 8;
const DELSET: u16 = 11;
const NEWSETELEM: u16 = 12;
const DELSETELEM: u16 = 14;

/// Attributes of tables, chains, rules and element lists (`NFTA_*`).
const TABLE_NAME: u16 = 1;
const CHAIN_TABLE: u16 = 1;
const CHAIN_NAME: u16 = 3;
const CHAIN_HOOK: u16 = 4;
const CHAIN_POLICY: u16 = 5;
const CHAIN_TYPE: u16 = 7;
const HOOK_HOOKNUM: u16 = 1;
const HOOK_PRIORITY: u16 = 2;
const RULE_TABLE: u16 = 1;
const RULE_CHAIN: u16 = 2;
const RULE_EXPRESSIONS: u16 = 4;
pub(super) const RULE_USERDATA: u16 = 7;
/// The type of the user data record (type, length, value, as libnftnl
/// writes them) that holds a rule's or an element's digest: one `nft` does
/// not know, so it shows nothing of it (its own records are 0, a comment,
/// and 1).
pub(super) const UDATA_DIGEST: u8 = 0xd1;

/// A digest as a user data record.
pub(super) fn digest_record(out: &mut Vec<u8>, digest: u64) {
    out.extend([UDATA_DIGEST, 8]);
    out.extend(digest.to_le_bytes());
}

/// The digest [`digest_record`] wrote among a rule's or an element's user
/// data records, if it is there.
pub(super) fn digest_in(mut udata: &[u8]) -> Option<u64> {
    while let [ty, len, rest @ ..] = udata {
        let value = rest.get(..usize::from(*len))?;
        if *ty == UDATA_DIGEST {
            return Some(u64::from_le_bytes(value.try_into().ok()?));
        }
        udata = &rest[usize::from(*len)..];
    }
    None
}
const SET_TABLE: u16 = 1;
const SET_NAME: u16 = 2;
const ELEM_LIST_TABLE: u16 = 1;
const ELEM_LIST_SET: u16 = 2;
const ELEM_LIST_ELEMENTS: u16 = 3;
const ELEM_LIST_SET_ID: u16 = 4;
/// `NF_ACCEPT`, a base chain's policy.
const NF_ACCEPT: u32 = 1;
/// An attribute's length is 16 bits: a message's element list stays well
/// under it (every list, named or anonymous, is split at this size; one
/// element is far smaller).
const LIST_BYTES: usize = 48 * 1024;
/// The most an attribute (its 4-byte header included) can hold.
const ATTR_MAX: usize = u16::MAX as usize;

/// Which operations a batch may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Element operations alone; anything else is `nft`'s to write.
    Elements,
    /// Every operation.
    Everything,
}

/// A transaction encoded as one batch, and what each of its messages does
/// (to name it when the kernel rejects it).
#[derive(Debug)]
pub struct Batch {
    /// The messages, batch markers included.
    pub bytes: Vec<u8>,
    /// The sequence number of the first message; message `i` of `what` has
    /// `first_seq + 1 + i` (the begin marker has `first_seq`).
    pub first_seq: u32,
    /// What each message does, in order (`add elements to set
    /// service-slots-3`).
    pub what: Vec<String>,
    /// Where each message starts in `bytes`, in the same order.
    pub starts: Vec<usize>,
}

impl Batch {
    /// The sequence number of the batch's end marker (numbers wrap, as
    /// netlink's do).
    pub fn last_seq(&self) -> u32 {
        // Truncation is wrapping here: sequence numbers are modulo 2^32.
        self.first_seq.wrapping_add((self.what.len() as u64 + 1) as u32)
    }

    /// What the message with sequence number `seq` does.
    pub fn describe(&self, seq: u32) -> Option<&str> {
        self.what.get(self.index(seq)?).map(String::as_str)
    }

    /// The bytes of the message with sequence number `seq`.
    pub fn message(&self, seq: u32) -> Option<&[u8]> {
        let i = self.index(seq)?;
        let start = *self.starts.get(i)?;
        let end = self.starts.get(i + 1).copied().unwrap_or(self.bytes.len());
        self.bytes.get(start..end)
    }

    fn index(&self, seq: u32) -> Option<usize> {
        let i = seq.wrapping_sub(self.first_seq).checked_sub(1)?;
        usize::try_from(i).ok()
    }
}

/// A message that netlink cannot carry: an attribute of it would be longer
/// than an attribute's 16-bit length can say. Nothing is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot be encoded ({what}): {why}")]
pub struct TooLong {
    /// What the message does (`add a rule to chain svc-…`).
    pub what: String,
    /// Which limit it passes.
    pub why: String,
}

/// The batch for `tx`, numbered from `first_seq`; `Ok(None)` when `scope`
/// leaves some of its operations to `nft`; an error naming the message
/// when one cannot be encoded.
pub fn batch(tx: &Transaction, first_seq: u32, scope: Scope) -> Result<Option<Batch>, TooLong> {
    let element_op = |op: &Op| matches!(op, Op::AddElements(..) | Op::DeleteElements(..) | Op::FlushSet(_));
    // What nft cannot read, netlink writes whatever the writer.
    let beyond_nft = |op: &Op| matches!(op, Op::AddRule(_, rule) if !rule.readable_by_nft());
    if scope == Scope::Elements && !tx.ops.iter().all(element_op) && !tx.ops.iter().any(beyond_nft) {
        return Ok(None);
    }
    encode(tx, first_seq, End::Commit).map(Some)
}

/// The batch that has the kernel check every message of `tx` and then
/// abort: it has no end marker (as `nft --check` sends it). The kernel
/// reports each message it refuses, and commits nothing.
pub fn check_batch(tx: &Transaction, first_seq: u32) -> Result<Batch, TooLong> {
    encode(tx, first_seq, End::Abort)
}

/// How a batch ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// With the end marker: the kernel commits it.
    Commit,
    /// Without: the kernel checks it and aborts.
    Abort,
}

fn encode(tx: &Transaction, first_seq: u32, end: End) -> Result<Batch, TooLong> {
    let mut w = Writer::new(tx, first_seq);
    marker(&mut w.out, ControlMessage::BatchBegin, first_seq);
    for op in &tx.ops {
        w.op(op);
    }
    if let Some(e) = w.too_long.take() {
        return Err(e);
    }
    if end == End::Commit {
        marker(&mut w.out, ControlMessage::BatchEnd, w.seq.wrapping_add(1));
    }
    Ok(Batch {
        bytes: w.out,
        first_seq,
        what: w.what,
        starts: w.starts,
    })
}

/// A batch begin or end message (`res_id` names the nftables subsystem).
fn marker(out: &mut Vec<u8>, marker: ControlMessage, seq: u32) {
    let header = NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, NFNL_SUBSYS_NFTABLES);
    append(out, header, marker, NLM_F_REQUEST, seq);
}

/// Writes the messages of one batch.
pub(super) struct Writer {
    table: &'static str,
    pub(super) family: IpFamily,
    out: Vec<u8>,
    seq: u32,
    what: Vec<String>,
    starts: Vec<usize>,
    /// The last id given to a set declared in this batch (anonymous sets
    /// are named by id: the kernel names them as it adds them).
    set_id: u32,
    /// The first message that could not be encoded.
    too_long: Option<TooLong>,
    /// The chain of the rule being written, to name its anonymous sets'
    /// messages.
    rule_chain: String,
}

impl Writer {
    fn new(tx: &Transaction, first_seq: u32) -> Self {
        Self {
            table: tx.table,
            family: tx.family,
            out: Vec::with_capacity(256 + 64 * tx.element_count()),
            seq: first_seq,
            what: Vec::new(),
            starts: Vec::new(),
            set_id: 0,
            too_long: None,
            rule_chain: String::new(),
        }
    }

    /// A fresh set id.
    pub(super) fn next_set_id(&mut self) -> u32 {
        self.set_id += 1;
        self.set_id
    }

    /// The table's name, as the value of an attribute.
    pub(super) fn table(&self, out: &mut Vec<u8>, kind: u16) {
        string(out, kind, self.table);
    }

    /// Appends one message of type `kind` whose attributes `body` writes.
    /// A message whose attributes do not fit their lengths (see [`attr`])
    /// is recorded as the batch's error.
    pub(super) fn message(&mut self, kind: u16, flags: u16, what: String, body: impl FnOnce(&Self, &mut Vec<u8>)) {
        self.seq = self.seq.wrapping_add(1);
        let start = self.out.len();
        let mut out = std::mem::take(&mut self.out);
        out.extend([0u8; 4]);
        out.extend(((NFNL_SUBSYS_NFTABLES << 8) | kind).to_ne_bytes());
        out.extend((NLM_F_REQUEST | flags).to_ne_bytes());
        out.extend(self.seq.to_ne_bytes());
        out.extend(0u32.to_ne_bytes());
        out.extend([u8::from(nfproto(self.family)), 0, 0, 0]);
        let attrs = out.len();
        body(self, &mut out);
        let len = u32::try_from(out.len() - start).ok();
        match (len, oversized(&out[attrs..])) {
            (Some(len), None) => out[start..start + 4].copy_from_slice(&len.to_ne_bytes()),
            (_, why) => {
                let why = why.unwrap_or_else(|| "longer than a netlink message's 32-bit length".into());
                self.too_long.get_or_insert(TooLong {
                    what: abbreviated(&what),
                    why,
                });
            }
        }
        out.resize(out.len().next_multiple_of(4), 0);
        self.out = out;
        self.what.push(what);
        self.starts.push(start);
    }

    fn op(&mut self, op: &Op) {
        match op {
            Op::AddTable(_) => self.message(NEWTABLE, NLM_F_CREATE, "add the table".into(), |w, b| {
                w.table(b, TABLE_NAME)
            }),
            Op::DeleteTable(_) => self.message(DELTABLE, 0, "delete the table".into(), |w, b| w.table(b, TABLE_NAME)),
            Op::AddSet(set, elements) => {
                declare::named_set(self, set);
                self.elements(set, elements, true);
            }
            Op::DeleteSet(set) => self.message(DELSET, 0, format!("delete set {set}"), |w, b| {
                w.table(b, SET_TABLE);
                string(b, SET_NAME, &set.to_string());
            }),
            Op::AddChain(chain) => self.add_chain(chain),
            Op::FlushChain(chain) => self.message(DELRULE, 0, format!("flush chain {chain}"), |w, b| {
                w.table(b, RULE_TABLE);
                string(b, RULE_CHAIN, &chain.to_string());
            }),
            Op::DeleteChain(chain) => self.message(DELCHAIN, 0, format!("delete chain {chain}"), |w, b| {
                w.table(b, CHAIN_TABLE);
                string(b, CHAIN_NAME, &chain.to_string());
            }),
            Op::AddRule(chain, rule) => {
                // Anonymous sets first: the rule names them by id.
                self.rule_chain = chain.to_string();
                let expressions = rules::expressions(self, rule);
                self.message(
                    NEWRULE,
                    NLM_F_CREATE | NLM_F_APPEND,
                    format!("add a rule to chain {chain}"),
                    |w, b| {
                        w.table(b, RULE_TABLE);
                        string(b, RULE_CHAIN, &chain.to_string());
                        attr(b, RULE_EXPRESSIONS | NLA_F_NESTED, |b| b.extend(&expressions));
                        attr(b, RULE_USERDATA, |b| digest_record(b, rule.digest()));
                    },
                );
            }
            Op::AddElements(set, elements) => self.elements(set, elements, true),
            Op::DeleteElements(set, elements) => self.elements(set, elements, false),
            Op::FlushSet(set) => self.message(DELSETELEM, 0, format!("flush set {set}"), |w, b| {
                w.table(b, ELEM_LIST_TABLE);
                string(b, ELEM_LIST_SET, &set.to_string());
            }),
        }
    }

    fn add_chain(&mut self, chain: &ChainId) {
        self.message(NEWCHAIN, NLM_F_CREATE, format!("add chain {chain}"), |w, b| {
            w.table(b, CHAIN_TABLE);
            string(b, CHAIN_NAME, &chain.to_string());
            if let Some(base) = chain.base() {
                let hook = match base.hook {
                    Hook::Prerouting => 0u32,
                    Hook::Input => 1,
                    Hook::Forward => 2,
                    Hook::Output => 3,
                    Hook::Postrouting => 4,
                };
                nested(b, CHAIN_HOOK, |b| {
                    u32_be(b, HOOK_HOOKNUM, hook);
                    u32_be(b, HOOK_PRIORITY, base.priority as u32);
                });
                u32_be(b, CHAIN_POLICY, NF_ACCEPT);
                string(b, CHAIN_TYPE, if base.nat { "nat" } else { "filter" });
            }
        });
    }

    /// Adds (with their values) or deletes (by key) elements of a named
    /// set, a message per [`LIST_BYTES`] of them.
    fn elements(&mut self, set: &SetId, elements: &[Element], add: bool) {
        let name = set.to_string();
        let mut rest = elements;
        while !rest.is_empty() {
            let (mut list, mut taken) = (Vec::with_capacity(LIST_BYTES + 512), 0);
            for e in rest {
                if list.len() >= LIST_BYTES {
                    break;
                }
                element(&mut list, e, add);
                taken += 1;
            }
            let (kind, flags, verb) = if add {
                (NEWSETELEM, NLM_F_CREATE, "add")
            } else {
                (DELSETELEM, 0, "delete")
            };
            self.message(kind, flags, format!("{verb} {taken} elements of set {set}"), |w, b| {
                w.table(b, ELEM_LIST_TABLE);
                string(b, ELEM_LIST_SET, &name);
                attr(b, ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| b.extend(&list));
            });
            rest = rest.get(taken..).unwrap_or_default();
        }
    }

    /// Adds the elements `list` holds (`NFTA_LIST_ELEM`s) to the anonymous
    /// set declared in this batch with id `id` (for the rule `what`), a
    /// message per [`LIST_BYTES`] of them: the kernel takes elements of an
    /// anonymous set in several messages until a rule binds it.
    pub(super) fn anonymous_elements(&mut self, id: u32, list: &[u8], what: &str) {
        let chunks = split_attributes(list, LIST_BYTES);
        let count = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let part = if count > 1 {
                format!(" (part {} of {count})", i + 1)
            } else {
                String::new()
            };
            self.message(
                NEWSETELEM,
                NLM_F_CREATE,
                format!(
                    "add the elements of an anonymous set of {what} for a rule of chain {}{part}",
                    self.rule_chain
                ),
                |w, b| {
                    w.table(b, ELEM_LIST_TABLE);
                    string(b, ELEM_LIST_SET, declare::ANONYMOUS_SET);
                    u32_be(b, ELEM_LIST_SET_ID, id);
                    attr(b, ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| b.extend(chunk));
                },
            );
        }
    }
}

/// `what` for an error: a name too long to encode is too long to log.
fn abbreviated(what: &str) -> String {
    const SHOWN: usize = 200;
    match what.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}… ({} bytes in all)", &what[..cut], what.len()),
        None => what.to_owned(),
    }
}

/// `attrs` (a run of attributes) cut, between attributes, into runs of at
/// most `bytes` each (an attribute larger than that alone in its run). A
/// length that does not match what follows ends the walk: every attribute
/// given here was written by [`attr`], so that does not happen; if it did,
/// the rest goes in one run and [`oversized`] refuses its message.
fn split_attributes(attrs: &[u8], bytes: usize) -> Vec<&[u8]> {
    let mut runs = Vec::new();
    let (mut start, mut at) = (0, 0);
    while at < attrs.len() {
        let len = attrs
            .get(at..at + 2)
            .map_or(0, |l| usize::from(u16::from_ne_bytes([l[0], l[1]])));
        if len < 4 {
            break;
        }
        let next = (at + len.next_multiple_of(4)).min(attrs.len());
        if next - start > bytes && at > start {
            runs.push(&attrs[start..at]);
            start = at;
        }
        at = next;
    }
    if start < attrs.len() || runs.is_empty() {
        runs.push(&attrs[start..]);
    }
    runs
}

/// Why the attributes of a message are not what their lengths say, if
/// they are not: [`attr`] writes a length of 0 (which no attribute has)
/// for a value too long for its 16 bits, and an outer attribute is longer
/// than any it holds, so the outermost such one is among the message's
/// top-level attributes, where this looks.
fn oversized(attrs: &[u8]) -> Option<String> {
    let mut at = 0;
    while at < attrs.len() {
        let Some(header) = attrs.get(at..at + 4) else {
            return Some(format!("a truncated attribute at byte {at}"));
        };
        let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        if len < 4 {
            let kind = u16::from_ne_bytes([header[2], header[3]]) & !NLA_F_NESTED;
            return Some(format!(
                "attribute {kind} would take more than the {ATTR_MAX} bytes a netlink attribute's length can say"
            ));
        }
        at += len.next_multiple_of(4);
    }
    None
}

impl Writer {}

/// `NFTA_LIST_ELEM`: an item of a list (an element, an expression).
pub(super) const NFTA_LIST_ELEM: u16 = 1;
/// `NFTA_DATA_VALUE` and `NFTA_DATA_VERDICT`: what a data attribute holds.
pub(super) const NFTA_DATA_VALUE: u16 = 1;
pub(super) const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
/// `NFT_GOTO`: continue in a chain, not coming back.
pub(super) const NFT_GOTO: i32 = -4;

/// A verdict (`NFTA_DATA_VERDICT`): its code and, for a jump or goto, the
/// chain.
pub(super) fn verdict(out: &mut Vec<u8>, code: i32, chain: Option<&ChainId>) {
    nested(out, NFTA_DATA_VERDICT, |b| {
        attr(b, NFTA_VERDICT_CODE, |b| b.extend(code.to_be_bytes()));
        if let Some(c) = chain {
            string(b, NFTA_VERDICT_CHAIN, &c.to_string());
        }
    });
}

/// Appends one attribute whose value `value` writes, padded. One whose
/// length does not fit in its 16 bits gets the length 0, which no
/// attribute has: [`Writer::message`] refuses the message holding it
/// instead of sending a length cut to its low bits.
pub(super) fn attr(out: &mut Vec<u8>, kind: u16, value: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend([0u8; 2]);
    out.extend(kind.to_ne_bytes());
    value(out);
    let len = u16::try_from(out.len() - start).unwrap_or(0);
    out[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Appends a nested attribute holding what `inner` writes.
pub(super) fn nested(out: &mut Vec<u8>, kind: u16, inner: impl FnOnce(&mut Vec<u8>)) {
    attr(out, kind | NLA_F_NESTED, inner);
}

/// A NUL-terminated string attribute.
pub(super) fn string(out: &mut Vec<u8>, kind: u16, value: &str) {
    // Writing to a Vec cannot fail.
    attr(out, kind, |b| drop(write!(b, "{value}\0")));
}

/// A 32-bit attribute in network order, as nftables takes numbers.
pub(super) fn u32_be(out: &mut Vec<u8>, kind: u16, value: u32) {
    attr(out, kind, |b| b.extend(value.to_be_bytes()));
}

#[cfg(any(test, feature = "test-util"))]
/// Checks every length of `bytes` (a batch) the way the kernel reads
/// them: messages tile the batch; each nftables message's attributes
/// (after its 4-byte nfgenmsg) tile its payload, and so do the
/// attributes inside every nested one. Returns the messages' payloads.
pub(crate) fn decode_lengths(bytes: &[u8]) -> Result<Vec<&[u8]>, String> {
    fn attributes(mut data: &[u8], depth: usize) -> Result<(), String> {
        while !data.is_empty() {
            let header = data.get(..4).ok_or("a truncated attribute header")?;
            let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
            let kind = u16::from_ne_bytes([header[2], header[3]]);
            let value = data
                .get(4..len)
                .ok_or_else(|| format!("attribute length {len} at depth {depth}"))?;
            if kind & NLA_F_NESTED != 0 {
                attributes(value, depth + 1)?;
            }
            data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
        }
        Ok(())
    }
    let mut messages = Vec::new();
    let mut data = bytes;
    while !data.is_empty() {
        let header = data.get(..16).ok_or("a truncated message header")?;
        let len = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let message = data.get(16..len).ok_or_else(|| format!("message length {len}"))?;
        let kind = u16::from_ne_bytes([header[4], header[5]]);
        if kind >> 8 == NFNL_SUBSYS_NFTABLES {
            attributes(message.get(4..).ok_or("no nfgenmsg")?, 0)?;
        }
        messages.push(message);
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use netlink_packet_core::{NetlinkBuffer, ParseableParametrized};
    use netlink_packet_netfilter::nftables::{NfTablesMessage, SetElementList};
    use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner};
    use nft_dataplane::element::{Element, Key, Value};
    use nft_dataplane::names::{ChainId, SetId};
    use slice_model::{IpFamily, Protocol};

    use super::*;

    fn frontend_key() -> Key {
        Key::Frontend(nft_dataplane::element::Frontend::Ip {
            addr: [10, 96, 0, 1].into(),
            protocol: Protocol::Tcp,
            port: 80,
        })
    }

    /// What a message of a batch is.
    #[derive(Debug, PartialEq, Eq)]
    enum Kind {
        Begin,
        End,
        Add,
        Delete,
    }

    /// The messages of a batch, parsed back: (what, sequence, set, element
    /// count).
    fn messages(b: &Batch) -> Vec<(Kind, u32, String, usize)> {
        let mut out = Vec::new();
        let mut data = b.bytes.as_slice();
        while !data.is_empty() {
            let msg = NetlinkBuffer::new_checked(data).expect("a whole message");
            data = &data[(msg.length() as usize).next_multiple_of(4)..];
            let parsed = NetfilterMessage::parse_with_param(msg.payload(), msg.message_type()).expect("parses");
            let (kind, lists) = match parsed.inner {
                NetfilterMessageInner::None(ControlMessage::BatchBegin) => (Kind::Begin, Vec::new()),
                NetfilterMessageInner::None(ControlMessage::BatchEnd) => (Kind::End, Vec::new()),
                NetfilterMessageInner::NfTables(NfTablesMessage::NewSetElement(m)) => (Kind::Add, m.attributes),
                NetfilterMessageInner::NfTables(NfTablesMessage::DeleteSetElement(m)) => (Kind::Delete, m.attributes),
                other => panic!("unexpected {other:?}"),
            };
            let (mut set, mut count) = (String::new(), 0);
            for l in lists {
                match l {
                    SetElementList::Set(s) => set = s,
                    SetElementList::Elements(e) => count = e.len(),
                    _ => {}
                }
            }
            out.push((kind, msg.sequence_number(), set, count));
        }
        out
    }

    #[test]
    fn a_batch_is_framed_numbered_and_split_under_the_attribute_limit() {
        let many: Vec<Element> = (0..5000u32)
            .map(|i| Element::map(Key::Index(i), Value::Endpoint(SocketAddr::from(([10, 0, 0, 1], 80)))))
            .collect();
        let mut tx = Transaction::new(IpFamily::V4);
        tx.push(Op::DeleteElements(
            SetId::ServiceChains,
            vec![Element::map(
                frontend_key(),
                Value::Goto(ChainId::Svc("ns/a/tcp/80".into())),
            )],
        ));
        tx.push(Op::AddElements(
            SetId::Backends(Protocol::Tcp, "ns/a/tcp/80".into()),
            many,
        ));
        let b = batch(&tx, 100, Scope::Elements)
            .expect("encodes")
            .expect("elements only");
        let m = messages(&b);
        assert_eq!(m.first().map(|x| (&x.0, x.1)), Some((&Kind::Begin, 100)));
        assert_eq!(m.last().map(|x| (&x.0, x.1)), Some((&Kind::End, b.last_seq())));
        let body = &m[1..m.len() - 1];
        assert_eq!(body[0].0, Kind::Delete);
        assert!(body[1..].iter().all(|x| x.0 == Kind::Add));
        assert_eq!(body[0].2, "service-chains");
        assert!(body.len() > 2, "5,000 elements take more than one message");
        assert_eq!(body[1..].iter().map(|x| x.3).sum::<usize>(), 5000);
        for (i, x) in body.iter().enumerate() {
            assert_eq!(x.1, 101 + i as u32);
            assert!(b.describe(x.1).is_some_and(|d| d.contains(&x.2)));
        }
        assert_eq!(b.describe(100), None);
        let mut flush = Transaction::new(IpFamily::V4);
        flush.push(Op::FlushSet(SetId::ClusterIps));
        let f = batch(&flush, 1, Scope::Elements)
            .expect("encodes")
            .expect("a flush is an element operation");
        let m = messages(&f);
        assert_eq!(m.len(), 3);
        assert_eq!((&m[1].0, m[1].2.as_str(), m[1].3), (&Kind::Delete, "cluster-ips", 0));
        let mut with_rule = tx.clone();
        with_rule.push(Op::FlushChain(ChainId::Services));
        assert!(
            batch(&with_rule, 1, Scope::Elements).expect("encodes").is_none(),
            "with the nft writer, anything but elements goes to nft"
        );
        assert!(batch(&with_rule, 1, Scope::Everything).expect("encodes").is_some());
        // A rule nft cannot read goes over netlink whatever the writer.
        let mut known = with_rule.clone();
        let known_client = nft_dataplane::rule::Match::KnownClient {
            clients: SetId::Clients("ns/a/tcp/80".into()),
            endpoint: SocketAddr::from(([10, 0, 0, 1], 80)),
        };
        known.push(Op::AddRule(
            ChainId::Services,
            nft_dataplane::rule::Rule::new(vec![known_client], vec![]),
        ));
        assert!(batch(&known, 1, Scope::Elements).expect("encodes").is_some());
    }

    fn chain(i: usize) -> ChainId {
        // As long as an affinity port's endpoint chain gets: a
        // 63-character namespace and name, the largest port, an IPv6
        // address.
        ChainId::Endpoint(format!(
            "{}/{}/sctp/65535/fd00_1234_5678_9abc_def0_1234_5678_{i:x}/65535",
            "n".repeat(63),
            "s".repeat(63),
        ))
    }

    /// A rule over 20,000 source ranges (a load balancer's source ranges):
    /// its anonymous set's elements go in as many messages as they need,
    /// every length what follows it, each element once.
    #[test]
    fn the_largest_anonymous_sets_are_split_and_every_length_is_right() {
        use nft_dataplane::rule::{Match, Rule, Statement};
        // Disjoint and not adjacent: an interval end at 0.0.0.0 first, then
        // a start and an end per range.
        let ranges: Vec<ipnet::IpNet> = (0..20_000u32)
            .map(|i| ipnet::IpNet::new(std::net::Ipv4Addr::from(0x0a00_0000 + (i << 9)).into(), 24).unwrap())
            .collect();
        let mut tx = Transaction::new(IpFamily::V4);
        tx.push(Op::AddChain(chain(0)));
        tx.push(Op::AddRule(
            chain(0),
            Rule::new(vec![Match::SourceIn(ranges)], vec![Statement::Drop]),
        ));
        let b = batch(&tx, 1, Scope::Everything).expect("encodes").expect("all of it");
        let messages = decode_lengths(&b.bytes).expect("every length is right");
        assert_eq!(messages.len(), b.what.len() + 2);
        let parts = |what: &str| b.what.iter().filter(|w| w.contains(what)).count();
        assert!(parts("source addresses") > 10, "{:?}", b.what);
        let elements: usize = b
            .what
            .iter()
            .zip(&messages[1..])
            .filter(|(w, _)| w.contains("source addresses"))
            .map(|(_, m)| {
                let parsed = NetfilterMessage::parse_with_param(&m[..], (NFNL_SUBSYS_NFTABLES << 8) | NEWSETELEM);
                let count: usize = match parsed.map(|p| p.inner) {
                    Ok(NetfilterMessageInner::NfTables(NfTablesMessage::NewSetElement(m))) => m
                        .attributes
                        .iter()
                        .map(|a| match a {
                            SetElementList::Elements(e) => e.len(),
                            _ => 0,
                        })
                        .sum(),
                    other => panic!("not an element message: {other:?}"),
                };
                count
            })
            .sum();
        assert_eq!(elements, 1 + 2 * 20_000, "each range's elements once");
        assert!(
            b.what.last().is_some_and(|w| w.starts_with("add a rule to chain ep-")),
            "the rule after its sets: {:?}",
            b.what.last()
        );
    }

    /// What no message can carry (here a chain name longer than an
    /// attribute holds) is refused before anything is sent, naming the
    /// message, never written with a length cut to 16 bits.
    #[test]
    fn what_cannot_be_encoded_is_refused_naming_the_message() {
        let long = ChainId::Svc(format!("ns/web/tcp/{}", "x".repeat(70_000)));
        let mut tx = Transaction::new(IpFamily::V4);
        tx.push(Op::AddChain(ChainId::Services));
        tx.push(Op::AddChain(long));
        let e = batch(&tx, 1, Scope::Everything).expect_err("too long");
        assert!(e.what.starts_with("add chain svc-ns/web/tcp/xxx"), "{e}");
        assert!(e.why.contains("65535 bytes"), "{e}");
        assert!(e.to_string().len() < 400, "the error names the message, not all of it");
    }

    mod properties {
        use super::*;
        use nft_dataplane::rule::{Match, Rule, Statement};
        use proptest::prelude::*;

        /// Any transaction of these kinds, with lists of any length up to
        /// `max`, encodes into a batch whose every length is right.
        fn op(max: usize) -> impl Strategy<Value = Op> {
            let v4 = (any::<u32>(), 0u16..=u16::MAX)
                .prop_map(|(i, p)| Element::map(Key::Index(i), Value::Endpoint(SocketAddr::from(([10, 0, 0, 1], p)))));
            let v6 = (any::<u32>(), any::<u128>(), 0u16..=u16::MAX).prop_map(|(i, a, p)| {
                let ep = SocketAddr::from((std::net::Ipv6Addr::from(a), p));
                Element::map(Key::Index(i), Value::Endpoint(ep))
            });
            let element = prop_oneof![v4, v6];
            let long = |n: usize| format!("{}/{}/tcp/{n}", "a".repeat(63), "b".repeat(63));
            let set = (0usize..4).prop_map(move |n| SetId::Backends(Protocol::Tcp, long(n)));
            // An affinity port's map of endpoint chains, each element naming
            // a chain as long as one gets.
            let picks = (0usize..4).prop_map(move |n| SetId::Picks(format!("svc-{}", long(n))));
            let pick = any::<u32>().prop_map(|i| Element::map(Key::Index(i), Value::Goto(chain(i as usize))));
            let endpoint =
                (any::<u128>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((std::net::Ipv6Addr::from(a), p)));
            let affinity = (0..max, endpoint).prop_map(move |(n, ep)| {
                let clients = SetId::Clients(long(n));
                Rule::new(
                    vec![Match::KnownClient {
                        clients: clients.clone(),
                        endpoint: ep,
                    }],
                    vec![
                        Statement::RememberClient {
                            clients,
                            endpoint: ep,
                            timeout_secs: 86_400,
                        },
                        Statement::RandomChain {
                            map: SetId::Picks(format!("svc-{}", long(n))),
                            width: n as u32,
                        },
                    ],
                )
            });
            prop_oneof![
                (set.clone(), prop::collection::vec(element.clone(), 0..max)).prop_map(|(s, e)| Op::AddElements(s, e)),
                (set.clone(), prop::collection::vec(element, 0..max)).prop_map(|(s, e)| Op::DeleteElements(s, e)),
                (picks, prop::collection::vec(pick, 0..max)).prop_map(|(s, e)| Op::AddElements(s, e)),
                set.prop_map(Op::FlushSet),
                (0..max, affinity).prop_map(|(n, r)| Op::AddRule(chain(n), r)),
                (0..max).prop_map(|n| {
                    let nets = (0..n as u32)
                        .map(|i| ipnet::IpNet::new(std::net::Ipv4Addr::from(i << 9).into(), 24).unwrap())
                        .collect();
                    Op::AddRule(
                        chain(0),
                        Rule::new(vec![Match::SourceNotIn(nets)], vec![Statement::Drop]),
                    )
                }),
                (0..max).prop_map(|n| Op::AddChain(chain(n))),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]
            #[test]
            fn every_length_written_is_what_follows_it(ops in prop::collection::vec(op(3_000), 1..6)) {
                lengths_right(ops)?;
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4))]
            /// The same with lists of up to 100,000 (a service's endpoints).
            #[test]
            fn every_length_of_the_longest_lists_is_what_follows_it(ops in prop::collection::vec(op(100_000), 1..3)) {
                lengths_right(ops)?;
            }
        }

        fn lengths_right(ops: Vec<Op>) -> Result<(), TestCaseError> {
            let mut tx = Transaction::new(IpFamily::V4);
            for o in ops {
                tx.push(o);
            }
            let b = batch(&tx, 7, Scope::Everything).expect("encodes").expect("all of it");
            let messages = decode_lengths(&b.bytes).map_err(TestCaseError::fail)?;
            prop_assert_eq!(messages.len(), b.what.len() + 2);
            Ok(())
        }
    }
}
