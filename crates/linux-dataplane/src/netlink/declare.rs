//! Set and map declarations as `nft` sends them: the kernel's key and
//! data types and lengths, and the user data `nft` reads back to list a
//! set as it was declared (`typeof ip daddr . th dport`), which the kernel
//! keeps without reading.

use netlink_packet_core::NLM_F_CREATE;
use nft_dataplane::names::{SetId, SetKind};
use slice_model::{IpFamily, Protocol};

use super::writer::{ANONYMOUS_SET, Writer, attr, nested, string, u32_be};

/// `NFT_MSG_NEWSET` and its attributes (`NFTA_SET_*`).
const NEWSET: u16 = 9;
const SET_TABLE: u16 = 1;
const SET_NAME: u16 = 2;
const SET_FLAGS: u16 = 3;
const SET_KEY_TYPE: u16 = 4;
const SET_KEY_LEN: u16 = 5;
const SET_DATA_TYPE: u16 = 6;
const SET_DATA_LEN: u16 = 7;
const SET_DESC: u16 = 9;
const SET_ID: u16 = 10;
const SET_USERDATA: u16 = 13;
const SET_DESC_SIZE: u16 = 1;

/// `NFT_SET_*` flags.
const ANONYMOUS: u32 = 0x1;
const CONSTANT: u32 = 0x2;
const INTERVAL: u32 = 0x4;
const MAP: u32 = 0x8;
const TIMEOUT: u32 = 0x10;
const EVAL: u32 = 0x20;

/// nft's data types (their ids; a concatenation's type is its fields'
/// ids, six bits each).
const TYPE_INTEGER: u32 = 4;
const TYPE_IPADDR: u32 = 7;
const TYPE_IP6ADDR: u32 = 8;
const TYPE_INET_PROTOCOL: u32 = 12;
const TYPE_INET_SERVICE: u32 = 13;
/// `NFT_DATA_VERDICT`: a verdict map's data type.
const DATA_VERDICT: u32 = 0xffff_ff00;

/// nft's byte orders, as its user data names them.
const BYTEORDER_INVALID: u32 = 0;
const BYTEORDER_HOST: u32 = 1;
const BYTEORDER_BIG: u32 = 2;

/// A part of a packet as `typeof` names it: nft's expression kinds and
/// the protocol descriptions and fields of its payload expressions.
#[derive(Clone, Copy)]
enum Typeof {
    /// `ip daddr`, `tcp dport`: a protocol description and a field.
    Payload(u32, u32),
    /// `meta l4proto`.
    L4proto,
    /// `numgen random mod N`.
    Numgen(u32),
}

/// nft's expression kinds (`EXPR_*`).
const EXPR_VERDICT: u32 = 1;
const EXPR_PAYLOAD: u32 = 7;
const EXPR_META: u32 = 9;
const EXPR_CONCAT: u32 = 13;
const EXPR_NUMGEN: u32 = 23;
/// Protocol descriptions (`PROTO_DESC_*`) and fields.
const DESC_UDP: u32 = 6;
const DESC_TCP: u32 = 8;
const DESC_SCTP: u32 = 10;
const DESC_TH: u32 = 11;
const DESC_IP: u32 = 12;
const DESC_IP6: u32 = 13;
const DPORT: u32 = 2;
const META_L4PROTO: u32 = 16;

/// User data attributes (`NFTNL_UDATA_SET_*`).
const UD_KEYBYTEORDER: u8 = 0;
const UD_DATABYTEORDER: u8 = 1;
const UD_MERGE_ELEMENTS: u8 = 2;
const UD_KEY_TYPEOF: u8 = 3;
const UD_DATA_TYPEOF: u8 = 4;
const UD_DATA_INTERVAL: u8 = 6;

/// How an address family's fields are typed and described.
struct Family {
    addr_type: u32,
    addr_len: u32,
    desc: u32,
    saddr: u32,
    daddr: u32,
}

fn family(f: IpFamily) -> Family {
    match f {
        IpFamily::V4 => Family {
            addr_type: TYPE_IPADDR,
            addr_len: 4,
            desc: DESC_IP,
            saddr: 11,
            daddr: 12,
        },
        IpFamily::V6 => Family {
            addr_type: TYPE_IP6ADDR,
            addr_len: 16,
            desc: DESC_IP6,
            saddr: 8,
            daddr: 9,
        },
    }
}

/// The type of a concatenation of these field types.
fn concat(types: &[u32]) -> u32 {
    types.iter().fold(0, |acc, t| (acc << 6) | t)
}

/// Everything a declaration says besides its name.
struct Declaration {
    flags: u32,
    key_type: u32,
    key_len: u32,
    /// Data type and length, for maps.
    data: Option<(u32, u32)>,
    /// The number of elements, for constant sets.
    size: Option<u32>,
    userdata: Vec<u8>,
}

/// Declares the named set `set`.
pub(super) fn named_set(w: &mut Writer, set: &SetId) {
    let d = declaration(w.family, set);
    let id = w.next_set_id();
    let name = set.to_string();
    w.message(NEWSET, NLM_F_CREATE, format!("declare set {set}"), |w, b| {
        write(w, b, &name, id, &d);
    });
}

/// Declares an anonymous, constant set of addresses in the prefixes that
/// `size` interval elements describe; returns its id.
pub(super) fn prefix_set(w: &mut Writer, source: bool, size: u32) -> u32 {
    let f = family(w.family);
    let field = if source { f.saddr } else { f.daddr };
    let mut userdata = Vec::new();
    ud_u32(&mut userdata, UD_KEYBYTEORDER, BYTEORDER_BIG);
    ud_u32(&mut userdata, UD_MERGE_ELEMENTS, 1);
    ud_typeof(&mut userdata, UD_KEY_TYPEOF, &[Typeof::Payload(f.desc, field)], false);
    anonymous(
        w,
        ANONYMOUS_SET,
        &Declaration {
            flags: ANONYMOUS | CONSTANT | INTERVAL,
            key_type: f.addr_type,
            key_len: f.addr_len,
            data: None,
            size: Some(size),
            userdata,
        },
    )
}

/// Declares the anonymous set `{ tcp, udp, sctp }` of `meta l4proto`;
/// returns its id.
pub(super) fn protocol_set(w: &mut Writer, size: u32) -> u32 {
    let mut userdata = Vec::new();
    ud_u32(&mut userdata, UD_KEYBYTEORDER, BYTEORDER_HOST);
    ud_typeof(&mut userdata, UD_KEY_TYPEOF, &[Typeof::L4proto], false);
    anonymous(
        w,
        ANONYMOUS_SET,
        &Declaration {
            flags: ANONYMOUS | CONSTANT,
            key_type: TYPE_INET_PROTOCOL,
            key_len: 1,
            data: None,
            size: Some(size),
            userdata,
        },
    )
}

fn anonymous(w: &mut Writer, name: &str, d: &Declaration) -> u32 {
    let id = w.next_set_id();
    w.message(NEWSET, NLM_F_CREATE, "declare an anonymous set".into(), |w, b| {
        write(w, b, name, id, d);
    });
    id
}

fn write(w: &Writer, b: &mut Vec<u8>, name: &str, id: u32, d: &Declaration) {
    w.table(b, SET_TABLE);
    string(b, SET_NAME, name);
    u32_be(b, SET_FLAGS, d.flags);
    u32_be(b, SET_KEY_TYPE, d.key_type);
    u32_be(b, SET_KEY_LEN, d.key_len);
    if let Some((data_type, data_len)) = d.data {
        u32_be(b, SET_DATA_TYPE, data_type);
        u32_be(b, SET_DATA_LEN, data_len);
    }
    u32_be(b, SET_ID, id);
    if let Some(size) = d.size {
        nested(b, SET_DESC, |b| u32_be(b, SET_DESC_SIZE, size));
    }
    attr(b, SET_USERDATA, |b| b.extend(&d.userdata));
}

/// What `nft` declares for `set` of `f`'s table.
fn declaration(f: IpFamily, set: &SetId) -> Declaration {
    let fam = family(f);
    let (addr, alen) = (fam.addr_type, fam.addr_len);
    let frontend = [addr, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE];
    let node_port = [TYPE_INET_PROTOCOL, TYPE_INET_SERVICE];
    let daddr = Typeof::Payload(fam.desc, fam.daddr);
    let th_dport = Typeof::Payload(DESC_TH, DPORT);
    let endpoint = (concat(&[addr, TYPE_INET_SERVICE]), alen + 4);
    let mut ud = Vec::new();
    let plain = |ud: &mut Vec<u8>| ud_u32(ud, UD_KEYBYTEORDER, BYTEORDER_BIG);
    // A set of a concatenation of types: nft marks the key as one.
    let concat_type = |ud: &mut Vec<u8>| {
        ud_u32(ud, UD_KEYBYTEORDER, BYTEORDER_INVALID);
        ud_typeof(ud, UD_KEY_TYPEOF, &[], true);
    };
    let typed_map_tail = |ud: &mut Vec<u8>| ud_u32(ud, UD_DATA_INTERVAL, 0);
    let (flags, key_type, key_len, data) = match set {
        SetId::Canary => {
            plain(&mut ud);
            (0, TYPE_INET_SERVICE, 2, None)
        }
        SetId::ClusterIps => {
            plain(&mut ud);
            (0, addr, alen, None)
        }
        SetId::Clients(_) => {
            // Packets add the elements, each with the timeout its rule
            // gives; no size: one port may have millions of clients.
            let saddr = Typeof::Payload(fam.desc, fam.saddr);
            ud_u32(&mut ud, UD_KEYBYTEORDER, BYTEORDER_INVALID);
            ud_typeof(&mut ud, UD_KEY_TYPEOF, &[saddr, daddr, th_dport], true);
            let types = [addr, addr, TYPE_INET_SERVICE];
            (TIMEOUT | EVAL, concat(&types), key_len(&types, alen), None)
        }
        SetId::Picks(_) => {
            ud_u32(&mut ud, UD_KEYBYTEORDER, BYTEORDER_HOST);
            ud_u32(&mut ud, UD_DATABYTEORDER, BYTEORDER_INVALID);
            ud_typeof(&mut ud, UD_KEY_TYPEOF, &[Typeof::Numgen(2)], false);
            ud_expr(&mut ud, UD_DATA_TYPEOF, EXPR_VERDICT, |_| {});
            typed_map_tail(&mut ud);
            (MAP, TYPE_INTEGER, 4, Some((DATA_VERDICT, 0)))
        }
        SetId::ServiceChains | SetId::NodePortChains => {
            let types: &[u32] = if *set == SetId::ServiceChains {
                &frontend
            } else {
                &node_port
            };
            ud_u32(&mut ud, UD_KEYBYTEORDER, BYTEORDER_INVALID);
            ud_u32(&mut ud, UD_DATABYTEORDER, BYTEORDER_INVALID);
            ud_typeof(&mut ud, UD_KEY_TYPEOF, &[], true);
            typed_map_tail(&mut ud);
            (MAP, concat(types), key_len(types, alen), Some((DATA_VERDICT, 0)))
        }
        SetId::MasqFrontends | SetId::NoEndpoints | SetId::NoLocalEndpoints | SetId::SlotFrontends(_) => {
            concat_type(&mut ud);
            (0, concat(&frontend), key_len(&frontend, alen), None)
        }
        SetId::MasqNodePorts
        | SetId::NodePortNoEndpoints
        | SetId::NodePortNoLocalEndpoints
        | SetId::NodePortsNotRelayed
        | SetId::NodePortSlotFrontends(_) => {
            concat_type(&mut ud);
            (0, concat(&node_port), key_len(&node_port, alen), None)
        }
        SetId::Hairpin => {
            concat_type(&mut ud);
            (0, concat(&[addr, addr]), 2 * alen, None)
        }
        SetId::ServiceSlots(n) | SetId::NodePortSlots(n) => {
            let n = u32::from(*n);
            let (types, fields): (Vec<u32>, Vec<Typeof>) = if matches!(set, SetId::ServiceSlots(_)) {
                (
                    vec![addr, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE, TYPE_INTEGER],
                    vec![daddr, Typeof::L4proto, th_dport, Typeof::Numgen(n)],
                )
            } else {
                (
                    vec![TYPE_INET_PROTOCOL, TYPE_INET_SERVICE, TYPE_INTEGER],
                    vec![Typeof::L4proto, th_dport, Typeof::Numgen(n)],
                )
            };
            ud_u32(&mut ud, UD_KEYBYTEORDER, BYTEORDER_INVALID);
            ud_u32(&mut ud, UD_DATABYTEORDER, BYTEORDER_INVALID);
            ud_typeof(&mut ud, UD_KEY_TYPEOF, &fields, true);
            ud_typeof(&mut ud, UD_DATA_TYPEOF, &[daddr, th_dport], true);
            typed_map_tail(&mut ud);
            (MAP, concat(&types), key_len(&types, alen), Some(endpoint))
        }
        SetId::Backends(p, _) => {
            let desc = match p {
                Protocol::Tcp => DESC_TCP,
                Protocol::Udp => DESC_UDP,
                Protocol::Sctp => DESC_SCTP,
            };
            ud_u32(&mut ud, UD_KEYBYTEORDER, BYTEORDER_HOST);
            ud_u32(&mut ud, UD_DATABYTEORDER, BYTEORDER_INVALID);
            ud_typeof(&mut ud, UD_KEY_TYPEOF, &[Typeof::Numgen(2)], false);
            ud_typeof(&mut ud, UD_DATA_TYPEOF, &[daddr, Typeof::Payload(desc, DPORT)], true);
            typed_map_tail(&mut ud);
            (MAP, TYPE_INTEGER, 4, Some(endpoint))
        }
    };
    debug_assert_eq!(set.kind() == SetKind::Set, data.is_none(), "{set}");
    Declaration {
        flags,
        key_type,
        key_len,
        data,
        size: None,
        userdata: ud,
    }
}

/// A concatenation's key length: each field takes a multiple of four
/// bytes.
fn key_len(types: &[u32], addr_len: u32) -> u32 {
    types
        .iter()
        .map(|t| match *t {
            TYPE_IPADDR | TYPE_IP6ADDR => addr_len,
            _ => 4,
        })
        .sum()
}

/// One user data attribute: a byte of type, a byte of length.
fn ud(out: &mut Vec<u8>, kind: u8, value: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend([kind, 0]);
    value(out);
    // nft's user data attributes are short; a longer one cannot be made here.
    out[start + 1] = u8::try_from(out.len() - start - 2).unwrap_or(u8::MAX);
}

fn ud_u32(out: &mut Vec<u8>, kind: u8, value: u32) {
    ud(out, kind, |b| b.extend(value.to_ne_bytes()));
}

/// An expression of `typeof`: its kind, then its own attributes.
fn ud_expr(out: &mut Vec<u8>, kind: u8, expr: u32, data: impl FnOnce(&mut Vec<u8>)) {
    ud(out, kind, |b| {
        ud_u32(b, 0, expr);
        ud(b, 1, data);
    });
}

/// `typeof` of these fields: a concatenation when `concat` (with no fields:
/// a set declared with a concatenation of types), else the one field.
fn ud_typeof(out: &mut Vec<u8>, kind: u8, fields: &[Typeof], concat: bool) {
    if concat {
        ud_expr(out, kind, EXPR_CONCAT, |b| {
            for (i, f) in fields.iter().enumerate() {
                ud_field(b, i as u8, *f);
            }
        });
    } else if let Some(f) = fields.first() {
        ud_field(out, kind, *f);
    }
}

fn ud_field(out: &mut Vec<u8>, kind: u8, field: Typeof) {
    match field {
        Typeof::Payload(desc, field) => ud_expr(out, kind, EXPR_PAYLOAD, |b| {
            ud_u32(b, 0, desc);
            ud_u32(b, 1, field);
        }),
        Typeof::L4proto => ud_expr(out, kind, EXPR_META, |b| ud_u32(b, 0, META_L4PROTO)),
        Typeof::Numgen(n) => ud_expr(out, kind, EXPR_NUMGEN, |b| {
            ud_u32(b, 0, 1);
            ud_u32(b, 1, n);
            ud_u32(b, 2, 0);
        }),
    }
}
