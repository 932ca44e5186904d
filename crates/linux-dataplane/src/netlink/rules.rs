//! A rule's expressions as `nft` compiles them: what it matches
//! ([`Match`]) loaded into registers and compared or looked up, what it
//! does ([`Statement`]) as the statements' own expressions. Sets a rule
//! holds inline (`{ tcp, udp, sctp }`, several prefixes, a random vmap)
//! are declared as anonymous sets in the same batch, before the rule.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use nft_dataplane::names::{ChainId, SetId};
use nft_dataplane::rule::{Match, Rule, Selector, Statement};
use slice_model::{IpFamily, Protocol};

use super::declare;
use super::writer::{
    ANONYMOUS_SET, NFT_GOTO, NFTA_DATA_VALUE as DATA_VALUE, NFTA_LIST_ELEM as LIST_ELEM, Writer, attr, nested, string,
    u32_be, verdict,
};
use super::{ip_protocol, nfproto};

/// `NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`.
const EXPR_NAME: u16 = 1;
const EXPR_DATA: u16 = 2;
/// Verdicts besides `NFT_GOTO`.
const NF_DROP: i32 = 0;
const NFT_JUMP: i32 = -3;
/// The verdict register.
const REG_VERDICT: u32 = 0;
/// Payload bases.
const NETWORK_HEADER: u32 = 1;
const TRANSPORT_HEADER: u32 = 2;
/// Meta keys.
const META_MARK: u32 = 3;
const META_IIFNAME: u32 = 6;
const META_L4PROTO: u32 = 16;
/// Conntrack keys and bits.
const CT_STATE: u32 = 0;
const CT_STATUS: u32 = 2;
const CT_STATE_NEW: u32 = 8;
const IPS_DST_NAT: u32 = 0x20;
/// `RTN_LOCAL`, `NFT_FIB_RESULT_ADDRTYPE`, `NFTA_FIB_F_SADDR`/`DADDR`.
const RTN_LOCAL: u32 = 2;
const FIB_RESULT_ADDRTYPE: u32 = 3;
const FIB_F_SADDR: u32 = 1;
const FIB_F_DADDR: u32 = 2;
/// `NFT_NAT_DNAT`, `NF_NAT_RANGE_PROTO_SPECIFIED`,
/// `NF_NAT_RANGE_PROTO_RANDOM_FULLY`.
const NAT_DNAT: u32 = 1;
const NAT_PROTO_SPECIFIED: u32 = 0x2;
const NAT_RANDOM_FULLY: u32 = 0x10;
/// `NFT_NG_RANDOM`, `NFT_DYNSET_OP_UPDATE`, `NFT_LOOKUP_F_INV`.
const NG_RANDOM: u32 = 1;
const DYNSET_UPDATE: u32 = 1;
const LOOKUP_INVERT: u32 = 1;
/// `NFTA_SET_ELEM_USERDATA`.
const ELEM_USERDATA: u16 = 6;
/// `NFT_SET_ELEM_INTERVAL_END`.
const ELEM_INTERVAL_END: u32 = 1;
/// `NFTA_OBJREF_IMM_TYPE`, `NFTA_OBJREF_IMM_NAME`, `NFT_OBJECT_COUNTER`.
const OBJREF_IMM_TYPE: u16 = 1;
const OBJREF_IMM_NAME: u16 = 2;
pub(super) const OBJECT_COUNTER: u32 = 1;
/// `IFNAMSIZ`.
const IFNAMSIZ: usize = 16;

/// The comparisons of `cmp`.
#[derive(Clone, Copy)]
enum Cmp {
    Eq = 0,
    Neq = 1,
}

/// The register that holds 32-bit word `word` of the register file, named
/// as `nft` names it: a 128-bit register when it starts one, else the
/// 32-bit one.
fn reg(word: u32) -> u32 {
    if word.is_multiple_of(4) { 1 + word / 4 } else { 8 + word }
}

/// The expressions of `rule` (`NFTA_LIST_ELEM`s), declaring the anonymous
/// sets it holds in `w` first.
pub(super) fn expressions(w: &mut Writer, rule: &Rule) -> Vec<u8> {
    let mut e = Exprs {
        out: Vec::with_capacity(256),
        family: w.family,
    };
    for m in &rule.matches {
        e.matching(w, m);
    }
    for s in &rule.statements {
        e.statement(s);
    }
    e.out
}

struct Exprs {
    out: Vec<u8>,
    family: IpFamily,
}

impl Exprs {
    fn addr_len(&self) -> u32 {
        match self.family {
            IpFamily::V4 => 4,
            IpFamily::V6 => 16,
        }
    }

    /// Where the source and destination addresses are in the header.
    fn addr_offset(&self, source: bool) -> u32 {
        match (self.family, source) {
            (IpFamily::V4, true) => 12,
            (IpFamily::V4, false) => 16,
            (IpFamily::V6, true) => 8,
            (IpFamily::V6, false) => 24,
        }
    }

    fn expr(&mut self, name: &str, data: impl FnOnce(&mut Vec<u8>)) {
        nested(&mut self.out, LIST_ELEM, |b| {
            string(b, EXPR_NAME, name);
            nested(b, EXPR_DATA, data);
        });
    }

    fn payload(&mut self, word: u32, base: u32, offset: u32, len: u32) {
        self.expr("payload", |b| {
            u32_be(b, 1, reg(word));
            u32_be(b, 2, base);
            u32_be(b, 3, offset);
            u32_be(b, 4, len);
        });
    }

    fn meta(&mut self, word: u32, key: u32) {
        self.expr("meta", |b| {
            u32_be(b, 2, key);
            u32_be(b, 1, reg(word));
        });
    }

    fn cmp(&mut self, op: Cmp, value: &[u8]) {
        self.expr("cmp", |b| {
            u32_be(b, 1, reg(0));
            u32_be(b, 2, op as u32);
            nested(b, 3, |b| attr(b, DATA_VALUE, |b| b.extend(value)));
        });
    }

    fn bitwise(&mut self, mask: &[u8], xor: &[u8]) {
        self.expr("bitwise", |b| {
            u32_be(b, 1, reg(0));
            u32_be(b, 2, reg(0));
            u32_be(b, 3, mask.len() as u32);
            nested(b, 4, |b| attr(b, DATA_VALUE, |b| b.extend(mask)));
            nested(b, 5, |b| attr(b, DATA_VALUE, |b| b.extend(xor)));
        });
    }

    /// A lookup of register 1 in a set named `set` or (anonymous) with id
    /// `id`; into register `dreg` for a map.
    fn lookup(&mut self, set: &str, id: Option<u32>, dreg: Option<u32>, invert: bool) {
        self.expr("lookup", |b| {
            string(b, 1, set);
            u32_be(b, 2, reg(0));
            if let Some(d) = dreg {
                u32_be(b, 3, d);
            }
            if let Some(id) = id {
                u32_be(b, 4, id);
            }
            if invert {
                u32_be(b, 5, LOOKUP_INVERT);
            }
        });
    }

    fn verdict(&mut self, code: i32, chain: Option<&ChainId>) {
        self.expr("immediate", |b| {
            u32_be(b, 1, REG_VERDICT);
            nested(b, 2, |b| verdict(b, code, chain));
        });
    }

    fn immediate(&mut self, register: u32, value: &[u8]) {
        self.expr("immediate", |b| {
            u32_be(b, 1, register);
            nested(b, 2, |b| attr(b, DATA_VALUE, |b| b.extend(value)));
        });
    }

    fn ct_bit(&mut self, key: u32, bit: u32) {
        self.expr("ct", |b| {
            u32_be(b, 2, key);
            u32_be(b, 1, reg(0));
        });
        self.bitwise(&bit.to_ne_bytes(), &0u32.to_ne_bytes());
        self.cmp(Cmp::Neq, &0u32.to_ne_bytes());
    }

    fn fib_local(&mut self, flag: u32) {
        self.expr("fib", |b| {
            u32_be(b, 1, reg(0));
            u32_be(b, 2, FIB_RESULT_ADDRTYPE);
            u32_be(b, 3, flag);
        });
        self.cmp(Cmp::Eq, &RTN_LOCAL.to_ne_bytes());
    }

    fn numgen(&mut self, word: u32, modulus: u32) {
        self.expr("numgen", |b| {
            u32_be(b, 1, reg(word));
            u32_be(b, 2, modulus);
            u32_be(b, 3, NG_RANDOM);
        });
    }

    fn l4proto_is(&mut self, p: Protocol) {
        self.meta(0, META_L4PROTO);
        self.cmp(Cmp::Eq, &[ip_protocol(p)]);
    }

    /// Loads the selected fields from word 0 on; returns the next free word.
    fn select(&mut self, s: Selector) -> u32 {
        let words = self.addr_len() / 4;
        let (daddr, saddr) = (self.addr_offset(false), self.addr_offset(true));
        let len = self.addr_len();
        match s {
            Selector::Frontend => {
                self.payload(0, NETWORK_HEADER, daddr, len);
                self.meta(words, META_L4PROTO);
                self.payload(words + 1, TRANSPORT_HEADER, 2, 2);
                words + 2
            }
            Selector::NodePort => {
                self.meta(0, META_L4PROTO);
                self.payload(1, TRANSPORT_HEADER, 2, 2);
                2
            }
            Selector::Daddr => {
                self.payload(0, NETWORK_HEADER, daddr, len);
                words
            }
            Selector::SaddrDaddr => {
                self.payload(0, NETWORK_HEADER, saddr, len);
                self.payload(words, NETWORK_HEADER, daddr, len);
                2 * words
            }
        }
    }

    /// The address is (`Eq`) or is not (`Neq`) in one of `nets`: one
    /// prefix compared in place, several through an anonymous interval set.
    fn in_nets(&mut self, w: &mut Writer, source: bool, nets: &[IpNet], op: Cmp) {
        let offset = self.addr_offset(source);
        let len = self.addr_len();
        match nets {
            [one] => {
                let prefix = u32::from(one.prefix_len());
                let network = addr_bytes(one.network());
                if prefix > 0 && prefix.is_multiple_of(8) {
                    let bytes = prefix / 8;
                    self.payload(0, NETWORK_HEADER, offset, bytes);
                    self.cmp(op, network.get(..bytes as usize).unwrap_or_default());
                } else {
                    self.payload(0, NETWORK_HEADER, offset, len);
                    self.bitwise(&addr_bytes(one.netmask()), &vec![0; len as usize]);
                    self.cmp(op, &network);
                }
            }
            _ => {
                let list = interval_elements(nets, len as usize);
                let id = declare::prefix_set(w, source, list.count);
                let what = if source {
                    "source addresses"
                } else {
                    "destination addresses"
                };
                w.anonymous_elements(id, &list.bytes, what);
                self.payload(0, NETWORK_HEADER, offset, len);
                self.lookup(ANONYMOUS_SET, Some(id), None, matches!(op, Cmp::Neq));
            }
        }
    }

    fn matching(&mut self, w: &mut Writer, m: &Match) {
        match m {
            Match::NewConnection => self.ct_bit(CT_STATE, CT_STATE_NEW),
            Match::Dnatted => self.ct_bit(CT_STATUS, IPS_DST_NAT),
            Match::Marked(bits) => {
                self.meta(0, META_MARK);
                self.bitwise(&bits.to_ne_bytes(), &0u32.to_ne_bytes());
                self.cmp(Cmp::Eq, &bits.to_ne_bytes());
            }
            Match::HasPorts => {
                let protocols = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];
                let mut list = Vec::new();
                for p in protocols {
                    raw_element(&mut list, &[ip_protocol(p)], None, false);
                }
                let id = declare::protocol_set(w, protocols.len() as u32);
                w.anonymous_elements(id, &list, "protocols");
                self.meta(0, META_L4PROTO);
                self.lookup(ANONYMOUS_SET, Some(id), None, false);
            }
            Match::LocalDestination(nets) => {
                self.fib_local(FIB_F_DADDR);
                let daddr = self.addr_offset(false);
                match self.family {
                    IpFamily::V4 => {
                        self.payload(0, NETWORK_HEADER, daddr, 1);
                        self.cmp(Cmp::Neq, &[127]);
                    }
                    IpFamily::V6 => {
                        self.payload(0, NETWORK_HEADER, daddr, 16);
                        self.cmp(Cmp::Neq, &std::net::Ipv6Addr::LOCALHOST.octets());
                    }
                }
                if !nets.is_empty() {
                    self.in_nets(w, false, nets, Cmp::Eq);
                }
            }
            Match::LocalSource => self.fib_local(FIB_F_SADDR),
            Match::SourceIn(nets) => self.in_nets(w, true, nets, Cmp::Eq),
            Match::SourceNotIn(nets) => self.in_nets(w, true, nets, Cmp::Neq),
            Match::DestinationIn(nets) => self.in_nets(w, false, nets, Cmp::Eq),
            Match::InSet(selector, set) => {
                self.select(*selector);
                self.lookup(&set.to_string(), None, None, false);
            }
            Match::InputInterface(name) => self.interface(name, Cmp::Eq),
            Match::NotInputInterface(name) => self.interface(name, Cmp::Neq),
            Match::KnownClient { clients, endpoint } => {
                self.client_and(*endpoint);
                self.lookup(&clients.to_string(), None, None, false);
            }
            Match::Protocol(p) => self.l4proto_is(*p),
        }
    }

    /// `saddr . addr . port` from word 0 on: the source address, then the
    /// endpoint's address and port (each field four-byte aligned).
    fn client_and(&mut self, endpoint: SocketAddr) {
        let words = self.addr_len() / 4;
        self.payload(0, NETWORK_HEADER, self.addr_offset(true), self.addr_len());
        self.immediate(reg(words), &addr_bytes(endpoint.ip()));
        self.immediate(reg(2 * words), &endpoint.port().to_be_bytes());
    }

    /// `iifname "name"` (the whole name, NUL-padded) or `iifname "pre*"`
    /// (the prefix alone).
    fn interface(&mut self, name: &str, op: Cmp) {
        self.meta(0, META_IIFNAME);
        let value: Vec<u8> = match name.strip_suffix('*') {
            Some(prefix) => prefix.as_bytes().to_vec(),
            None => {
                let mut padded = name.as_bytes().to_vec();
                padded.resize(IFNAMSIZ, 0);
                padded
            }
        };
        self.cmp(op, &value);
    }

    fn statement(&mut self, s: &Statement) {
        let words = self.addr_len() / 4;
        match s {
            Statement::Jump(c) => self.verdict(NFT_JUMP, Some(c)),
            Statement::Goto(c) => self.verdict(NFT_GOTO, Some(c)),
            Statement::Drop => self.verdict(NF_DROP, None),
            Statement::Reject => {
                let code: u8 = match self.family {
                    IpFamily::V4 => 3,
                    IpFamily::V6 => 4,
                };
                self.expr("reject", |b| {
                    u32_be(b, 1, 0);
                    attr(b, 2, |b| b.push(code));
                });
            }
            Statement::VerdictMap(selector, set) => {
                self.select(*selector);
                self.lookup(&set.to_string(), None, Some(REG_VERDICT), false);
            }
            Statement::SetMark(bits) => self.mark(!bits, *bits),
            Statement::ClearMark(bits) => self.mark(!bits, 0),
            Statement::Masquerade => self.expr("masq", |b| u32_be(b, 1, NAT_RANDOM_FULLY)),
            Statement::Dnat(p, endpoint) => {
                self.l4proto_is(*p);
                self.immediate(1, &addr_bytes(endpoint.ip()));
                self.immediate(2, &endpoint.port().to_be_bytes());
                self.dnat(1, 2, Some(NAT_PROTO_SPECIFIED));
            }
            Statement::DnatMap { protocol, map, width } => {
                self.l4proto_is(*protocol);
                self.numgen(0, *width);
                self.lookup(&map.to_string(), None, Some(reg(0)), false);
                self.dnat(reg(0), reg(words), None);
            }
            Statement::DnatSlots { node_port, width } => {
                let selector = if *node_port {
                    Selector::NodePort
                } else {
                    Selector::Frontend
                };
                let next = self.select(selector);
                self.numgen(next, u32::from(*width));
                let map = SetId::slots(*node_port, *width);
                self.lookup(&map.to_string(), None, Some(reg(0)), false);
                self.dnat(reg(0), reg(words), None);
            }
            Statement::RandomChain { map, width } => {
                self.numgen(0, *width);
                self.lookup(&map.to_string(), None, Some(REG_VERDICT), false);
            }
            Statement::RememberClient {
                clients,
                endpoint,
                timeout_secs,
            } => {
                self.client_and(*endpoint);
                self.expr("dynset", |b| {
                    string(b, 1, &clients.to_string());
                    u32_be(b, 3, DYNSET_UPDATE);
                    u32_be(b, 4, reg(0));
                    attr(b, 6, |b| b.extend(timeout_secs.saturating_mul(1000).to_be_bytes()));
                });
            }
            Statement::Count(counter) => self.expr("objref", |b| {
                u32_be(b, OBJREF_IMM_TYPE, OBJECT_COUNTER);
                string(b, OBJREF_IMM_NAME, &counter.to_string());
            }),
        }
    }

    /// `meta mark set meta mark & mask ^ xor`.
    fn mark(&mut self, mask: u32, xor: u32) {
        self.meta(0, META_MARK);
        self.bitwise(&mask.to_ne_bytes(), &xor.to_ne_bytes());
        self.expr("meta", |b| {
            u32_be(b, 2, META_MARK);
            u32_be(b, 3, reg(0));
        });
    }

    fn dnat(&mut self, addr_reg: u32, proto_reg: u32, flags: Option<u32>) {
        let family = u8::from(nfproto(self.family));
        self.expr("nat", |b| {
            u32_be(b, 1, NAT_DNAT);
            u32_be(b, 2, u32::from(family));
            u32_be(b, 3, addr_reg);
            u32_be(b, 5, proto_reg);
            if let Some(f) = flags {
                u32_be(b, 7, f);
            }
        });
    }
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// One element of an anonymous set: a key, flags, and for the start of a
/// range that runs to the last address (no end element follows) the user
/// data that tells `nft` so.
fn raw_element(out: &mut Vec<u8>, key: &[u8], flags: Option<u32>, open: bool) {
    nested(out, LIST_ELEM, |b| {
        nested(b, 1, |b| attr(b, DATA_VALUE, |b| b.extend(key)));
        if let Some(f) = flags {
            u32_be(b, 3, f);
        }
        if open {
            // NFTNL_UDATA_SET_ELEM_FLAGS: NFTNL_SET_ELEM_F_INTERVAL_OPEN.
            attr(b, ELEM_USERDATA, |b| {
                b.extend([1, 4]);
                b.extend(1u32.to_ne_bytes());
            });
        }
    });
}

/// The elements of an interval set holding `nets`, as `nft` writes them:
/// each merged range's first address, and the address after its last as
/// an interval end; an interval end at the zero address first unless a
/// range starts there.
struct Intervals {
    bytes: Vec<u8>,
    count: u32,
}

fn interval_elements(nets: &[IpNet], len: usize) -> Intervals {
    let to_int = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(v4) => u128::from(u32::from(v4)),
            IpAddr::V6(v6) => u128::from(v6),
        }
    };
    let max: u128 = if len == 4 { u128::from(u32::MAX) } else { u128::MAX };
    let mut ranges: Vec<(u128, u128)> = nets
        .iter()
        .map(|n| (to_int(n.network()), to_int(n.broadcast())))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::new();
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let key = |v: u128| -> Vec<u8> {
        if len == 4 {
            (v as u32).to_be_bytes().to_vec()
        } else {
            v.to_be_bytes().to_vec()
        }
    };
    let mut out = Intervals {
        bytes: Vec::new(),
        count: 0,
    };
    let mut push = |v: u128, end: bool, open: bool| {
        raw_element(&mut out.bytes, &key(v), end.then_some(ELEM_INTERVAL_END), open);
        out.count += 1;
    };
    if merged.first().is_some_and(|(start, _)| *start > 0) {
        push(0, true, false);
    }
    for (start, end) in merged {
        push(start, false, end == max);
        if end < max {
            push(end + 1, true, false);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NlasIterator;

    use super::*;

    /// (key, flags, open) of each element of an element list.
    fn read(list: &[u8]) -> Vec<(Vec<u8>, u32, bool)> {
        let value = |nla: netlink_packet_core::NlaBuffer<&[u8]>| {
            let end = usize::from(nla.length());
            nla.into_inner().get(4..end).unwrap_or_default().to_vec()
        };
        NlasIterator::new(list)
            .map_while(Result::ok)
            .map(|element| {
                let (mut key, mut flags, mut open) = (Vec::new(), 0, false);
                for a in NlasIterator::new(value(element).as_slice()).map_while(Result::ok) {
                    match a.kind() {
                        1 => {
                            let inner = value(a);
                            key = NlasIterator::new(inner.as_slice())
                                .map_while(Result::ok)
                                .map(value)
                                .next()
                                .unwrap_or_default();
                        }
                        3 => flags = u32::from_be_bytes(value(a).try_into().unwrap_or_default()),
                        ELEM_USERDATA => open = true,
                        _ => {}
                    }
                }
                (key, flags, open)
            })
            .collect()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().filter_map(|n| n.parse().ok()).collect()
    }

    #[test]
    fn registers_are_named_as_nft_names_them() {
        // A 128-bit register where a word starts one, else the 32-bit one.
        assert_eq!([0, 1, 2, 3, 4, 5, 8].map(reg), [1, 9, 10, 11, 2, 13, 3]);
    }

    #[test]
    fn prefixes_become_merged_ranges_with_an_end_after_each() {
        // Nested and adjacent prefixes merge into 10.0.0.0-11.255.255.255;
        // an interval end at 0.0.0.0 comes first, as nft writes it.
        let list = interval_elements(&nets(&["10.1.0.0/16", "11.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16"]), 4);
        let got = read(&list.bytes);
        let want = vec![
            (vec![0, 0, 0, 0], ELEM_INTERVAL_END, false),
            (vec![10, 0, 0, 0], 0, false),
            (vec![12, 0, 0, 0], ELEM_INTERVAL_END, false),
            (vec![192, 168, 0, 0], 0, false),
            (vec![192, 169, 0, 0], ELEM_INTERVAL_END, false),
        ];
        assert_eq!(got, want);
        assert_eq!(list.count, 5);
    }

    #[test]
    fn a_range_to_the_last_address_has_no_end_and_says_it_is_open() {
        let all = interval_elements(&nets(&["0.0.0.0/0"]), 4);
        assert_eq!(read(&all.bytes), vec![(vec![0, 0, 0, 0], 0, true)]);
        let top = interval_elements(&nets(&["fd00::/8", "ff00::/8"]), 16);
        let got = read(&top.bytes);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[3].0.first(), Some(&0xff));
        assert!(got[3].2, "the last range runs to the end: {got:?}");
    }
}
