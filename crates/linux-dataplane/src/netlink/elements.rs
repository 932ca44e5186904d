//! A transaction of set and map elements as one nftables netlink batch,
//! written without running `nft`. A small sync (an added service, a changed
//! endpoint) is a handful of elements; `nft` spends most of its time on
//! such a transaction starting up and reading the table's declarations,
//! and a large load's elements are most of what `nft` parses.
//!
//! The bytes are what `nft` itself sends for these sets: each field of a
//! concatenated key or value takes a multiple of four bytes, addresses and
//! ports in network order, `numgen` slots and positions in host order.

use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::NlasIterator;
use nft_dataplane::element::{Element, Frontend, Key, Value};
use nft_dataplane::names::{ChainId, KeyShape, SetId, SetKind};
use slice_model::{IpFamily, Protocol};

use super::ip_protocol;
use super::writer::{
    NFT_GOTO, NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_LIST_ELEM, attr, digest_record, nested, verdict,
};

/// One element of a set as the kernel holds it, borrowed from the dump's
/// reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawElement<'a> {
    /// Its key's bytes.
    pub key: &'a [u8],
    /// Its value's bytes (a map's data).
    pub data: Option<&'a [u8]>,
    /// The chain its verdict jumps or goes to (a verdict map's value).
    pub chain: Option<&'a str>,
    /// The digest proxyd's writer noted in its user data, if any.
    pub digest: Option<u64>,
}

/// The attributes of an element list, written in place ([`element`]).
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFTA_VERDICT_CHAIN: u16 = 2;

/// One element (`NFTA_LIST_ELEM`): its key, and for an add its value,
/// written in place: the crate's typed elements hold their bytes in
/// vectors of their own and measure every nested level again as they are
/// emitted, which a large load pays per element (benches/RESULTS.md).
pub(super) fn element(out: &mut Vec<u8>, e: &Element, with_value: bool) {
    nested(out, NFTA_LIST_ELEM, |b| {
        nested(b, NFTA_SET_ELEM_KEY, |b| {
            attr(b, NFTA_DATA_VALUE, |b| write_key(b, &e.key))
        });
        match (&e.value, with_value) {
            (Some(Value::Endpoint(ep)), true) => {
                nested(b, NFTA_SET_ELEM_DATA, |b| {
                    attr(b, NFTA_DATA_VALUE, |b| write_endpoint(b, *ep))
                });
            }
            (Some(Value::Goto(chain)), true) => {
                nested(b, NFTA_SET_ELEM_DATA, |b| verdict(b, NFT_GOTO, Some(chain)));
            }
            (Some(Value::Digest(d)), true) => attr(b, NFTA_SET_ELEM_USERDATA, |b| digest_record(b, *d)),
            _ => {}
        }
    });
}

/// A key's bytes: a single field as it is, each field of a concatenation
/// padded to four bytes.
pub(super) fn write_key(out: &mut Vec<u8>, key: &Key) {
    match key {
        Key::Frontend(f) => frontend(out, f),
        Key::Slot(f, slot) => {
            frontend(out, f);
            out.extend(u32::from(*slot).to_ne_bytes());
        }
        Key::Port(p) => out.extend(p.to_be_bytes()),
        Key::Addr(a) => addr(out, *a),
        Key::AddrPair(a, b) => {
            addr(out, *a);
            addr(out, *b);
        }
        Key::Index(i) => out.extend(i.to_ne_bytes()),
        Key::Client(client, ep) => {
            addr(out, *client);
            write_endpoint(out, *ep);
        }
    }
}

/// A DNAT target's bytes: `daddr . dport`.
fn write_endpoint(out: &mut Vec<u8>, ep: SocketAddr) {
    addr(out, ep.ip());
    port(out, ep.port());
}

fn frontend(out: &mut Vec<u8>, f: &Frontend) {
    match f {
        Frontend::Ip {
            addr: a,
            protocol,
            port: p,
        } => {
            addr(out, *a);
            out.extend([ip_protocol(*protocol), 0, 0, 0]);
            port(out, *p);
        }
        Frontend::NodePort { protocol, port: p } => {
            out.extend([ip_protocol(*protocol), 0, 0, 0]);
            port(out, *p);
        }
    }
}

fn addr(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(v4) => out.extend(v4.octets()),
        IpAddr::V6(v6) => out.extend(v6.octets()),
    }
}

/// A port as one field of a concatenation.
fn port(out: &mut Vec<u8>, p: u16) {
    out.extend(p.to_be_bytes());
    out.extend([0, 0]);
}

/// `NFTA_SET_ELEM_LIST_TABLE` and `NFTA_SET_ELEM_LIST_SET`.
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;

/// The elements of one reply of a set element dump (an
/// `NFT_MSG_NEWSETELEM` payload, `nfgenmsg` first), if it is of `set` of
/// `table`, each handed to `each`. Read attribute by attribute: the
/// crate's typed parser formats the whole list into an error context at
/// every element, which a dump of a large set pays quadratically.
pub(super) fn dumped(payload: &[u8], table: &str, set: &str, mut each: impl FnMut(&RawElement<'_>)) {
    let Some(attributes) = payload.get(4..) else {
        return;
    };
    let (mut ours, mut list) = ((false, false), None);
    for nla in NlasIterator::new(attributes).map_while(Result::ok) {
        match nla.kind() {
            NFTA_SET_ELEM_LIST_TABLE => ours.0 = c_string(value_of(nla)) == Some(table),
            NFTA_SET_ELEM_LIST_SET => ours.1 = c_string(value_of(nla)) == Some(set),
            NFTA_SET_ELEM_LIST_ELEMENTS => list = Some(value_of(nla)),
            _ => {}
        }
    }
    let Some(list) = list.filter(|_| ours == (true, true)) else {
        return;
    };
    for element in NlasIterator::new(list).map_while(Result::ok) {
        if element.kind() != NFTA_LIST_ELEM {
            continue;
        }
        let mut raw = RawElement::default();
        for a in NlasIterator::new(value_of(element)).map_while(Result::ok) {
            let (kind, value) = (a.kind(), value_of(a));
            match kind {
                NFTA_SET_ELEM_KEY => raw.key = nested_value(value, NFTA_DATA_VALUE).unwrap_or_default(),
                NFTA_SET_ELEM_DATA => {
                    raw.data = nested_value(value, NFTA_DATA_VALUE);
                    raw.chain = nested_value(value, NFTA_DATA_VERDICT)
                        .and_then(|verdict| nested_value(verdict, NFTA_VERDICT_CHAIN))
                        .and_then(c_string);
                }
                NFTA_SET_ELEM_USERDATA => raw.digest = super::writer::digest_in(value),
                _ => {}
            }
        }
        each(&raw);
    }
}

/// The value of the attribute of kind `kind` among `attributes`.
fn nested_value(attributes: &[u8], kind: u16) -> Option<&[u8]> {
    NlasIterator::new(attributes)
        .map_while(Result::ok)
        .find(|a| a.kind() == kind)
        .map(value_of)
}

/// An attribute's value, borrowed from the buffer it was read from.
fn value_of(nla: netlink_packet_core::NlaBuffer<&[u8]>) -> &[u8] {
    let end = usize::from(nla.length());
    nla.into_inner().get(4..end).unwrap_or_default()
}

/// A NUL-terminated string attribute's text.
fn c_string(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value.split(|b| *b == 0).next()?).ok()
}

/// The element a set's dump holds, read as `write_key` and
/// `write_endpoint` wrote it for `set`; `None` when the bytes are not of
/// that shape (someone else's element, or another layout).
pub fn read_element(set: &SetId, family: IpFamily, raw: &RawElement<'_>) -> Option<Element> {
    let width = match family {
        IpFamily::V4 => 4,
        IpFamily::V6 => 16,
    };
    let mut fields = Bytes(raw.key);
    let key = match set.key_shape() {
        KeyShape::Port => Key::Port(fields.port_alone()?),
        KeyShape::Addr => Key::Addr(fields.addr(width)?),
        KeyShape::AddrPair => Key::AddrPair(fields.addr(width)?, fields.addr(width)?),
        KeyShape::Frontend { node_port } => Key::Frontend(fields.frontend((!node_port).then_some(width))?),
        KeyShape::Slot { node_port, width: n } => {
            let frontend = fields.frontend((!node_port).then_some(width))?;
            Key::Slot(frontend, fields.slot().filter(|slot| *slot < n)?)
        }
        KeyShape::Index => Key::Index(fields.u32_ne()?),
        KeyShape::Client => Key::Client(
            fields.addr(width)?,
            SocketAddr::new(fields.addr(width)?, fields.port()?),
        ),
    };
    if !fields.0.is_empty() {
        return None;
    }
    let value = match set.kind() {
        SetKind::Set => raw.digest.map(Value::Digest),
        SetKind::VerdictMap => Some(Value::Goto(ChainId::from_name(raw.chain?)?)),
        SetKind::EndpointMap => {
            let mut data = Bytes(raw.data?);
            let ep = SocketAddr::new(data.addr(width)?, data.port()?);
            if !data.0.is_empty() {
                return None;
            }
            Some(Value::Endpoint(ep))
        }
    };
    Some(Element { key, value })
}

/// Reads the fields of a key or value from the front.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn addr(&mut self, width: usize) -> Option<IpAddr> {
        let b = self.take(width)?;
        Some(match width {
            4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
            _ => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
        })
    }

    /// A port as one field of a concatenation (padded to four bytes).
    fn port(&mut self) -> Option<u16> {
        match *self.take(4)? {
            [hi, lo, 0, 0] => Some(u16::from_be_bytes([hi, lo])),
            _ => None,
        }
    }

    /// A port alone.
    fn port_alone(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A protocol as one field of a concatenation (padded to four bytes).
    fn protocol(&mut self) -> Option<Protocol> {
        let [number, 0, 0, 0] = *self.take(4)? else {
            return None;
        };
        [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .into_iter()
            .find(|p| ip_protocol(*p) == number)
    }

    /// A frontend: with the address of this width, or a node port's.
    fn frontend(&mut self, width: Option<usize>) -> Option<Frontend> {
        let addr = match width {
            Some(w) => Some(self.addr(w)?),
            None => None,
        };
        let (protocol, port) = (self.protocol()?, self.port()?);
        Some(match addr {
            Some(addr) => Frontend::Ip { addr, protocol, port },
            None => Frontend::NodePort { protocol, port },
        })
    }

    fn u32_ne(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.take(4)?.try_into().ok()?))
    }

    fn slot(&mut self) -> Option<u8> {
        u8::try_from(self.u32_ne()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::DefaultNla;
    use netlink_packet_netfilter::nftables::SetElementList;

    use super::*;
    use nft_dataplane::names::{ChainId, SetId};
    use slice_model::IpFamily;
    use slice_model::Protocol;

    fn key_bytes(key: &Key) -> Vec<u8> {
        let mut out = Vec::new();
        write_key(&mut out, key);
        out
    }

    fn endpoint_bytes(ep: SocketAddr) -> Vec<u8> {
        let mut out = Vec::new();
        write_endpoint(&mut out, ep);
        out
    }

    fn frontend_key() -> Key {
        Key::Frontend(Frontend::Ip {
            addr: "172.30.0.10".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            protocol: Protocol::Udp,
            port: 53,
        })
    }

    #[test]
    fn keys_and_values_have_the_layout_of_their_sets() {
        assert_eq!(key_bytes(&frontend_key()), [172, 30, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0]);
        let slot = Key::Slot(
            Frontend::NodePort {
                protocol: Protocol::Tcp,
                port: 30080,
            },
            2,
        );
        let mut want = vec![6, 0, 0, 0, 0x75, 0x80, 0, 0];
        want.extend(2u32.to_ne_bytes());
        assert_eq!(key_bytes(&slot), want);
        assert_eq!(key_bytes(&Key::Port(9)), [0, 9], "a single field is not padded");
        let ep = SocketAddr::from(([10, 1, 0, 1], 8080));
        assert_eq!(endpoint_bytes(ep), [10, 1, 0, 1, 0x1f, 0x90, 0, 0]);
        let v6: IpAddr = "fd00::1".parse().unwrap_or(IpAddr::from([0u16; 8]));
        assert_eq!(key_bytes(&Key::AddrPair(v6, v6)).len(), 32);
    }

    /// An element's bytes as a dump returns them.
    struct Dumped {
        key: Vec<u8>,
        data: Option<Vec<u8>>,
        chain: Option<String>,
        digest: Option<u64>,
    }

    impl Dumped {
        fn of(e: &Element) -> Self {
            let mut key = Vec::new();
            write_key(&mut key, &e.key);
            let (mut data, mut chain, mut digest) = (None, None, None);
            match &e.value {
                Some(Value::Endpoint(ep)) => {
                    let mut d = Vec::new();
                    write_endpoint(&mut d, *ep);
                    data = Some(d);
                }
                Some(Value::Goto(c)) => chain = Some(c.to_string()),
                Some(Value::Digest(d)) => digest = Some(*d),
                None => {}
            }
            Self {
                key,
                data,
                chain,
                digest,
            }
        }

        fn raw(&self) -> RawElement<'_> {
            RawElement {
                key: &self.key,
                data: self.data.as_deref(),
                chain: self.chain.as_deref(),
                digest: self.digest,
            }
        }
    }

    #[test]
    fn every_sets_elements_read_back_as_written() {
        use slice_model::Protocol;
        for (family, addr, other) in [
            (
                IpFamily::V4,
                IpAddr::from([10, 96, 0, 1]),
                IpAddr::from([10, 244, 1, 2]),
            ),
            (
                IpFamily::V6,
                "fd00::1".parse().unwrap_or(IpAddr::from([0u16; 8])),
                "fd00:10:244::2".parse().unwrap_or(IpAddr::from([0u16; 8])),
            ),
        ] {
            let ip = Frontend::Ip {
                addr,
                protocol: Protocol::Sctp,
                port: 443,
            };
            let node_port = Frontend::NodePort {
                protocol: Protocol::Udp,
                port: 30053,
            };
            let ep = Value::Endpoint(SocketAddr::new(other, 8443));
            let goto = Value::Goto(ChainId::Svc("ns/web/tcp/https".into()));
            let cases = [
                (SetId::Canary, Element::key(Key::Port(1))),
                (SetId::ClusterIps, Element::key(Key::Addr(addr))),
                (SetId::Hairpin, Element::key(Key::AddrPair(other, addr))),
                (SetId::ServiceChains, Element::map(Key::Frontend(ip), goto.clone())),
                (
                    SetId::NodePortChains,
                    Element::map(Key::Frontend(node_port), goto.clone()),
                ),
                (SetId::NoEndpoints, Element::key(Key::Frontend(ip))),
                (SetId::NodePortNoLocalEndpoints, Element::key(Key::Frontend(node_port))),
                (SetId::SlotFrontends(3), Element::key(Key::Frontend(ip))),
                (
                    SetId::NodePortSlotFrontends(2),
                    Element::map(Key::Frontend(node_port), Value::Digest(0x0123_4567_89ab_cdef)),
                ),
                (SetId::ServiceSlots(3), Element::map(Key::Slot(ip, 2), ep.clone())),
                (
                    SetId::NodePortSlots(5),
                    Element::map(Key::Slot(node_port, 4), ep.clone()),
                ),
                (
                    SetId::Backends(Protocol::Tcp, "ns/big/tcp/80".into()),
                    Element::map(Key::Index(70_000), ep.clone()),
                ),
                (
                    SetId::Picks("svc-ns/big/tcp/80".into()),
                    Element::map(
                        Key::Index(70_000),
                        Value::Goto(ChainId::Endpoint("ns/big/tcp/80/10.0.0.1/80".into())),
                    ),
                ),
                (
                    SetId::Clients("ns/big/tcp/80".into()),
                    Element::key(Key::Client(addr, SocketAddr::new(other, 8443))),
                ),
            ];
            for (set, e) in cases {
                let dumped = Dumped::of(&e);
                assert_eq!(read_element(&set, family, &dumped.raw()), Some(e.clone()), "{set} {e}");
                // Another family's (where it holds an address), cut short,
                // longer, or with a padding byte set: not read.
                let other_family = match family {
                    IpFamily::V4 => IpFamily::V6,
                    IpFamily::V6 => IpFamily::V4,
                };
                let holds_address = !matches!(
                    set.key_shape(),
                    KeyShape::Port
                        | KeyShape::Index
                        | KeyShape::Frontend { node_port: true }
                        | KeyShape::Slot { node_port: true, .. }
                ) || matches!(e.value, Some(Value::Endpoint(_)));
                if holds_address {
                    assert_eq!(read_element(&set, other_family, &dumped.raw()), None, "{set} {e}");
                }
                let mut short = Dumped::of(&e);
                short.key.pop();
                assert_eq!(read_element(&set, family, &short.raw()), None, "{set} {e}");
                let mut long = Dumped::of(&e);
                long.key.extend([0; 4]);
                assert_eq!(read_element(&set, family, &long.raw()), None, "{set} {e}");
                if let KeyShape::Frontend { .. } | KeyShape::Slot { .. } | KeyShape::Client = set.key_shape() {
                    let mut padded = Dumped::of(&e);
                    let last = padded.key.len() - 1;
                    padded.key[last] = 1;
                    assert_eq!(read_element(&set, family, &padded.raw()), None, "{set} {e}");
                }
            }
            // A slot past the map's width.
            let wide = Dumped::of(&Element::map(Key::Slot(ip, 3), ep.clone()));
            assert_eq!(read_element(&SetId::ServiceSlots(3), family, &wide.raw()), None);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_dumped_bytes_are_read_or_refused_without_a_panic(
            key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            data in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)),
            chain in proptest::option::of("[a-z/-]{0,20}"),
            v6 in proptest::prelude::any::<bool>(),
        ) {
            let raw = RawElement { key: &key, data: data.as_deref(), chain: chain.as_deref(), digest: None };
            let family = if v6 { IpFamily::V6 } else { IpFamily::V4 };
            for set in [SetId::Canary, SetId::ClusterIps, SetId::Hairpin, SetId::ServiceChains, SetId::ServiceSlots(2),
                        SetId::NodePortSlots(2), SetId::Backends(slice_model::Protocol::Udp, "x".into()),
                        SetId::Picks("x".into()), SetId::Clients("x".into())] {
                let _ = read_element(&set, family, &raw);
            }
        }
    }

    /// The same element as the crate's typed attributes would emit it.
    fn typed(e: &Element, with_value: bool) -> Vec<u8> {
        use netlink_packet_core::Emitable;
        use netlink_packet_netfilter::nftables::{
            DataAttribute, ListAttribute, SetElementAttribute, Verdict, VerdictAttribute,
        };
        let mut key = Vec::new();
        write_key(&mut key, &e.key);
        let mut attributes = vec![SetElementAttribute::Key(DataAttribute::Value(key))];
        match (&e.value, with_value) {
            (Some(Value::Endpoint(ep)), true) => {
                let mut value = Vec::new();
                write_endpoint(&mut value, *ep);
                attributes.push(SetElementAttribute::Data(DataAttribute::Value(value)));
            }
            (Some(Value::Goto(chain)), true) => {
                let verdict = vec![
                    VerdictAttribute::Code(Verdict::Goto),
                    VerdictAttribute::Chain(chain.to_string()),
                ];
                attributes.push(SetElementAttribute::Data(DataAttribute::Verdict(verdict)));
            }
            _ => {}
        }
        let typed = ListAttribute::Element(attributes);
        let mut out = vec![0; typed.buffer_len()];
        typed.emit(&mut out);
        out
    }

    /// A set element dump's reply payload (`nfgenmsg`, table, set, the
    /// elements as the crate emits them).
    fn dump_reply(table: &str, set: &str, elements: &[Element]) -> Vec<u8> {
        use netlink_packet_core::Emitable;
        let mut list = Vec::new();
        for e in elements {
            list.extend(typed(e, true));
        }
        let attributes = vec![
            SetElementList::Table(table.to_owned()),
            SetElementList::Set(set.to_owned()),
            SetElementList::Other(DefaultNla::new(
                NFTA_SET_ELEM_LIST_ELEMENTS | netlink_packet_core::NLA_F_NESTED,
                list,
            )),
        ];
        let mut out = vec![2, 0, 0, 0];
        for a in attributes {
            let mut b = vec![0; a.buffer_len()];
            a.emit(&mut b);
            out.extend(b);
        }
        out
    }

    #[test]
    fn a_dump_reply_is_read_element_by_element() {
        let Key::Frontend(frontend) = frontend_key() else {
            unreachable!("a frontend key")
        };
        let slots = [
            Element::map(
                Key::Slot(frontend, 0),
                Value::Endpoint(SocketAddr::from(([10, 1, 0, 1], 8080))),
            ),
            Element::map(
                Key::Slot(frontend, 1),
                Value::Endpoint(SocketAddr::from(([10, 1, 0, 2], 8080))),
            ),
        ];
        let payload = dump_reply("proxyd", &SetId::ServiceSlots(2).to_string(), &slots);
        let read_all = |payload: &[u8], table: &str, set: &SetId| {
            let mut read = Vec::new();
            dumped(payload, table, &set.to_string(), |raw| {
                read.push(read_element(set, IpFamily::V4, raw));
            });
            read
        };
        let read = read_all(&payload, "proxyd", &SetId::ServiceSlots(2));
        assert_eq!(read, slots.iter().cloned().map(Some).collect::<Vec<_>>());
        let goto = Element::map(frontend_key(), Value::Goto(ChainId::Svc("ns/a/tcp/80".into())));
        let reply = dump_reply("proxyd", &SetId::ServiceChains.to_string(), std::slice::from_ref(&goto));
        assert_eq!(read_all(&reply, "proxyd", &SetId::ServiceChains), [Some(goto)]);
        // Another table's or set's reply, or a cut one: nothing, no panic.
        assert!(read_all(&payload, "other", &SetId::ServiceSlots(2)).is_empty());
        assert!(read_all(&payload, "proxyd", &SetId::ServiceSlots(3)).is_empty());
        for cut in 0..payload.len() {
            read_all(&payload[..cut], "proxyd", &SetId::ServiceSlots(2));
        }
    }

    #[test]
    fn elements_written_in_place_are_the_crates_bytes() {
        let endpoint = Element::map(frontend_key(), Value::Endpoint(SocketAddr::from(([10, 1, 0, 1], 8080))));
        let goto = Element::map(frontend_key(), Value::Goto(ChainId::Svc("ns/a/tcp/80".into())));
        let v6: IpAddr = "fd00::1".parse().unwrap_or(IpAddr::from([0u16; 8]));
        let pair = Element::map(Key::AddrPair(v6, v6), Value::Endpoint(SocketAddr::new(v6, 53)));
        for e in [&endpoint, &goto, &pair] {
            for with_value in [true, false] {
                let mut ours = Vec::new();
                element(&mut ours, e, with_value);
                assert_eq!(ours, typed(e, with_value), "{e:?} (value: {with_value})");
            }
        }
    }
}
