//! The netlink primitives every nftables encoder writes with: one batch's
//! messages ([`Writer`]: numbering, naming each message for errors, and
//! refusing a message whose lengths do not fit), attributes ([`attr`],
//! [`nested`], [`string`], [`u32_be`], [`verdict`]) and the user data
//! digest. A leaf: it knows nothing of what the encoders (`batch`,
//! `declare`, `rules`, `elements`) write.

use std::io::Write;

use netlink_packet_core::{NLA_F_NESTED, NLM_F_CREATE, NLM_F_REQUEST};
use netlink_packet_netfilter::NetfilterProtoFamily;
use netlink_packet_netfilter::{NetfilterHeader, none::ControlMessage};
use nft_dataplane::Transaction;
use nft_dataplane::names::ChainId;
use slice_model::IpFamily;

use super::{append, nfproto};

/// `NFT_MSG_NEWSETELEM`.
pub(super) const NEWSETELEM: u16 = 12;
/// The name of an anonymous set in the message that declares it
/// (the kernel numbers it); later messages name it by id.
pub(super) const ANONYMOUS_SET: &str = "__set%d";

/// nfnetlink's nftables subsystem.
pub(super) const NFNL_SUBSYS_NFTABLES: u16 = 10;

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

pub(super) const ELEM_LIST_TABLE: u16 = 1;
pub(super) const ELEM_LIST_SET: u16 = 2;
pub(super) const ELEM_LIST_ELEMENTS: u16 = 3;
const ELEM_LIST_SET_ID: u16 = 4;

/// An attribute's length is 16 bits: a message's element list stays well
/// under it (every list, named or anonymous, is split at this size; one
/// element is far smaller).
pub(super) const LIST_BYTES: usize = 48 * 1024;
/// The most an attribute (its 4-byte header included) can hold.
const ATTR_MAX: usize = u16::MAX as usize;

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
    /// A writer of `tx`'s batch, numbered from `first_seq` (the begin
    /// marker's number).
    pub(super) fn new(tx: &Transaction, first_seq: u32) -> Self {
        let mut w = Self {
            table: tx.table,
            family: tx.family,
            out: Vec::with_capacity(256 + 64 * tx.element_count()),
            seq: first_seq,
            what: Vec::new(),
            starts: Vec::new(),
            set_id: 0,
            too_long: None,
            rule_chain: String::new(),
        };
        marker(&mut w.out, ControlMessage::BatchBegin, first_seq);
        w
    }

    /// The batch, with its end marker when `commit` (without, the kernel
    /// checks it and aborts); the first message that could not be
    /// encoded, if one could not.
    pub(super) fn finish(mut self, first_seq: u32, commit: bool) -> Result<Batch, TooLong> {
        if let Some(e) = self.too_long.take() {
            return Err(e);
        }
        if commit {
            marker(&mut self.out, ControlMessage::BatchEnd, self.seq.wrapping_add(1));
        }
        Ok(Batch {
            bytes: self.out,
            first_seq,
            what: self.what,
            starts: self.starts,
        })
    }

    /// The rule about to be written is in `chain` (its anonymous sets'
    /// messages name it).
    pub(super) fn rule_in(&mut self, chain: &ChainId) {
        self.rule_chain = chain.to_string();
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
                    string(b, ELEM_LIST_SET, ANONYMOUS_SET);
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
