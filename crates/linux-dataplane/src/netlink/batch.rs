//! A transaction as one nftables netlink batch, written without running
//! `nft`: tables, set declarations, chains, rules and elements. Each
//! operation is the message `nft` itself sends for it (the root tests
//! compare `nft list table` of a table written each way), so that what an
//! operator lists reads as what `render` prints.

use netlink_packet_core::{NLA_F_NESTED, NLM_F_CREATE};
use nft_dataplane::element::Element;
use nft_dataplane::names::{ChainId, Hook, SetId};
use nft_dataplane::{Op, Transaction};

use super::declare;
use super::elements::element;
use super::rules;
use super::writer::{
    Batch, ELEM_LIST_ELEMENTS, ELEM_LIST_SET, ELEM_LIST_TABLE, LIST_BYTES, NEWSETELEM, RULE_USERDATA, TooLong, Writer,
    attr, digest_record, nested, string, u32_be,
};

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
const DELSETELEM: u16 = 14;
const NEWOBJ: u16 = 18;
/// `NFTA_OBJ_TABLE`, `NFTA_OBJ_NAME`, `NFTA_OBJ_TYPE`, `NFTA_OBJ_DATA`.
pub(super) const OBJ_TABLE: u16 = 1;
pub(super) const OBJ_NAME: u16 = 2;
pub(super) const OBJ_TYPE: u16 = 3;
pub(super) const OBJ_DATA: u16 = 4;

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
const SET_TABLE: u16 = 1;
const SET_NAME: u16 = 2;
/// `NF_ACCEPT`, a base chain's policy.
const NF_ACCEPT: u32 = 1;
/// Which operations a batch may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Element operations alone; anything else is `nft`'s to write.
    Elements,
    /// Every operation.
    Everything,
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
    for op in &tx.ops {
        operation(&mut w, op);
    }
    w.finish(first_seq, end == End::Commit)
}

/// The messages of one operation.
fn operation(w: &mut Writer, op: &Op) {
    match op {
        Op::AddTable(_) => w.message(NEWTABLE, NLM_F_CREATE, "add the table".into(), |m, b| {
            m.table(b, TABLE_NAME)
        }),
        Op::DeleteTable(_) => w.message(DELTABLE, 0, "delete the table".into(), |m, b| m.table(b, TABLE_NAME)),
        Op::AddSet(set, elements) => {
            declare::named_set(w, set);
            set_elements(w, set, elements, true);
        }
        Op::DeleteSet(set) => w.message(DELSET, 0, format!("delete set {set}"), |m, b| {
            m.table(b, SET_TABLE);
            string(b, SET_NAME, &set.to_string());
        }),
        Op::AddChain(chain) => add_chain(w, chain),
        Op::FlushChain(chain) => w.message(DELRULE, 0, format!("flush chain {chain}"), |m, b| {
            m.table(b, RULE_TABLE);
            string(b, RULE_CHAIN, &chain.to_string());
        }),
        Op::DeleteChain(chain) => w.message(DELCHAIN, 0, format!("delete chain {chain}"), |m, b| {
            m.table(b, CHAIN_TABLE);
            string(b, CHAIN_NAME, &chain.to_string());
        }),
        Op::AddRule(chain, rule) => {
            // Anonymous sets first: the rule names them by id.
            w.rule_in(chain);
            let expressions = rules::expressions(w, rule);
            w.message(
                NEWRULE,
                NLM_F_CREATE | NLM_F_APPEND,
                format!("add a rule to chain {chain}"),
                |m, b| {
                    m.table(b, RULE_TABLE);
                    string(b, RULE_CHAIN, &chain.to_string());
                    attr(b, RULE_EXPRESSIONS | NLA_F_NESTED, |b| b.extend(&expressions));
                    attr(b, RULE_USERDATA, |b| digest_record(b, rule.digest()));
                },
            );
        }
        Op::AddElements(set, elements) => set_elements(w, set, elements, true),
        Op::DeleteElements(set, elements) => set_elements(w, set, elements, false),
        Op::FlushSet(set) => w.message(DELSETELEM, 0, format!("flush set {set}"), |m, b| {
            m.table(b, ELEM_LIST_TABLE);
            string(b, ELEM_LIST_SET, &set.to_string());
        }),
        // Without NLM_F_EXCL an existing counter is left as it is (a
        // counter has nothing to update): its values survive the rewrite.
        Op::AddCounter(counter) => w.message(NEWOBJ, NLM_F_CREATE, format!("add counter {counter}"), |m, b| {
            m.table(b, OBJ_TABLE);
            string(b, OBJ_NAME, &counter.to_string());
            u32_be(b, OBJ_TYPE, rules::OBJECT_COUNTER);
            nested(b, OBJ_DATA, |_| {});
        }),
    }
}

fn add_chain(w: &mut Writer, chain: &ChainId) {
    w.message(NEWCHAIN, NLM_F_CREATE, format!("add chain {chain}"), |m, b| {
        m.table(b, CHAIN_TABLE);
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
fn set_elements(w: &mut Writer, set: &SetId, elements: &[Element], add: bool) {
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
        w.message(kind, flags, format!("{verb} {taken} elements of set {set}"), |m, b| {
            m.table(b, ELEM_LIST_TABLE);
            string(b, ELEM_LIST_SET, &name);
            attr(b, ELEM_LIST_ELEMENTS | NLA_F_NESTED, |b| b.extend(&list));
        });
        rest = rest.get(taken..).unwrap_or_default();
    }
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
    use crate::netlink::writer::{NFNL_SUBSYS_NFTABLES, decode_lengths};
    use netlink_packet_netfilter::none::ControlMessage;

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
