//! Partial syncs: what they write, and that after any of them the table
//! (and every traced packet) is what a fresh full sync would give.

use std::collections::BTreeSet;

use proptest::prelude::*;
use slice_model::{IpFamily, Protocol, ServiceInfo, TrafficPolicy};

use super::support::{forwarded, local};
use super::*;
use crate::element::{Frontend, Key, Value};
use crate::names::{ChainId, SetId};
use crate::transaction::{Op, Transaction};

fn ops_of(r: &Recording) -> &Transaction {
    r.applied.last().expect("a transaction was applied")
}

#[test]
fn one_changed_endpoint_among_1000_services_touches_only_that_service() {
    let mut engine = Engine::new(IpFamily::V4);
    for i in 0..1000u32 {
        let name = format!("svc-{i}");
        let ip = format!("172.30.{}.{}", i / 250, i % 250 + 1);
        let (a, b) = (
            format!("10.2.{}.{}", i / 250, i % 250 + 1),
            format!("10.3.{}.{}", i / 250, i % 250 + 1),
        );
        engine
            .service(&service("ns", &name, &ip, 80, Protocol::Tcp))
            .slice(slice("ns", &name, Protocol::Tcp, 80, &[Ep::Remote(&a), Ep::Remote(&b)]));
    }
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    let first = sync(&mut syncer, &mut engine);
    assert!(first.full && first.services_written == 1000);

    engine.slice(slice(
        "ns",
        "svc-500",
        Protocol::Tcp,
        80,
        &[Ep::Remote("10.2.2.1"), Ep::Remote("10.9.9.9")],
    ));
    let report = sync(&mut syncer, &mut engine);
    assert!(!report.full);
    assert_eq!(report.services_written, 1);
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
    // The canary, the one slot that moved and its frontend's element (which
    // carries the digest of its slots): each deleted and added.
    assert_eq!(report.elements, 5, "{report:?}");
    let t = trace(syncer.dataplane(), forwarded(POD, "172.30.2.1", 80));
    assert_eq!(t.summary(), "10.2.2.1:80, 10.9.9.9:80");
}

#[test]
fn the_partial_transaction_does_not_grow_with_the_cluster() {
    let mut sizes = Vec::new();
    for n in [10u32, 1000] {
        let mut engine = Engine::new(IpFamily::V4);
        for i in 0..n {
            let name = format!("svc-{i}");
            let ip = format!("172.30.{}.{}", i / 250, i % 250 + 1);
            engine
                .service(&service("ns", &name, &ip, 80, Protocol::Tcp))
                .slice(slice("ns", &name, Protocol::Tcp, 80, &[Ep::Remote("10.2.0.1")]));
        }
        let mut syncer = NftSyncer::new(config(), Recording::default());
        sync(&mut syncer, &mut engine);
        engine.slice(slice("ns", "svc-5", Protocol::Tcp, 80, &[Ep::Remote("10.2.0.2")]));
        let r = sync(&mut syncer, &mut engine);
        sizes.push((r.script_bytes, r.elements, ops_of(syncer.dataplane()).ops.len()));
    }
    assert_eq!(
        sizes[0], sizes[1],
        "same change, same transaction, at 10 and 1000 services"
    );
}

#[test]
fn adding_a_service_or_an_endpoint_writes_no_verdict_and_no_rule() {
    // A verdict element makes the kernel revalidate the whole table at
    // commit, and anything but elements needs nft: services balanced by
    // the slot maps are plain set and map elements.
    let mut engine = Engine::new(IpFamily::V4);
    for i in 0..100u32 {
        let name = format!("svc-{i}");
        let ip = format!("172.30.0.{}", i + 1);
        engine
            .service(&node_port(
                service("ns", &name, &ip, 80, Protocol::Tcp),
                30000 + i as u16,
            ))
            .slice(slice("ns", &name, Protocol::Tcp, 80, &[Ep::Remote("10.2.0.1")]));
    }
    let mut syncer = NftSyncer::new(config(), Recording::default());
    sync(&mut syncer, &mut engine);
    let elements_only = |tx: &Transaction| {
        tx.ops.iter().all(|op| match op {
            Op::AddElements(_, e) | Op::DeleteElements(_, e) => {
                e.iter().all(|e| !matches!(e.value, Some(Value::Goto(_))))
            }
            _ => false,
        })
    };
    engine
        .service(&node_port(service("ns", "new", "172.30.1.1", 80, Protocol::Tcp), 31000))
        .slice(slice(
            "ns",
            "new",
            Protocol::Tcp,
            80,
            &[Ep::Remote("10.2.1.1"), Ep::Remote("10.2.1.2")],
        ));
    let added = sync(&mut syncer, &mut engine);
    assert!(!added.full && added.services_written == 1);
    assert!(
        elements_only(ops_of(syncer.dataplane())),
        "{}",
        ops_of(syncer.dataplane())
    );
    engine.slice(slice(
        "ns",
        "new",
        Protocol::Tcp,
        80,
        &[Ep::Remote("10.2.1.1"), Ep::Remote("10.2.1.2"), Ep::Remote("10.2.1.3")],
    ));
    sync(&mut syncer, &mut engine);
    let tx = ops_of(syncer.dataplane());
    assert!(elements_only(tx), "{tx}");
    assert!(
        tx.ops
            .iter()
            .any(|op| matches!(op, Op::AddElements(SetId::SlotFrontends(3), _))),
        "the frontend moves to the sets of width 3: {tx}"
    );
    let mut kernel = KernelModel::default();
    for tx in &syncer.dataplane().applied {
        crate::Dataplane::apply(&mut kernel, tx).expect("the kernel model takes every transaction");
    }
    assert_eq!(kernel, fresh(&engine, &config()));
    let t = trace(&kernel, forwarded(POD, "172.30.1.1", 80));
    assert_eq!(t.summary(), "10.2.1.1:80, 10.2.1.2:80, 10.2.1.3:80");
}

/// The chains and sets an operation names.
fn names_of(op: &Op) -> (Vec<ChainId>, Vec<SetId>) {
    match op {
        Op::AddChain(c) | Op::FlushChain(c) | Op::DeleteChain(c) => (vec![c.clone()], vec![]),
        Op::AddRule(c, r) => {
            let (sets, mut chains) = r.references();
            chains.push(c.clone());
            (chains, sets)
        }
        Op::AddSet(s, _) | Op::DeleteSet(s) | Op::FlushSet(s) => (vec![], vec![s.clone()]),
        Op::AddElements(s, _) | Op::DeleteElements(s, _) => (vec![], vec![s.clone()]),
        Op::AddTable(_) | Op::DeleteTable(_) | Op::AddCounter(_) => (vec![], vec![]),
    }
}

/// One service of every kind (every kind of chain and set).
pub(crate) fn every_kind(engine: &mut Engine) {
    let tcp = Protocol::Tcp;
    engine
        .service(&service("ns", "web", "172.30.0.10", 80, tcp))
        .slice(slice(
            "ns",
            "web",
            tcp,
            8080,
            &[
                Ep::Local("10.1.0.1"),
                Ep::Remote("10.1.0.2"),
                Ep::Terminating("10.1.0.3"),
            ],
        ))
        .service(&service("ns", "dns", "172.30.0.53", 53, Protocol::Udp))
        .slice(slice("ns", "dns", Protocol::Udp, 53, &[Ep::Remote("10.1.1.1")]))
        .service(&service("ns", "empty", "172.30.0.20", 80, tcp));
    let mut il = service("ns", "internal-local", "172.30.0.21", 80, tcp);
    il.internal_traffic_policy = TrafficPolicy::Local;
    engine
        .service(&il)
        .slice(slice("ns", "internal-local", tcp, 8080, &[Ep::Remote("10.1.2.1")]));
    let mut np = node_port(service("ns", "nodeport", "172.30.0.30", 80, tcp), 30080);
    np.external_ips = vec!["192.168.99.10".parse().unwrap()];
    engine.service(&np).slice(slice(
        "ns",
        "nodeport",
        tcp,
        8080,
        &[Ep::Remote("10.1.3.1"), Ep::Remote("10.1.3.2"), Ep::Remote("10.1.3.3")],
    ));
    let mut lb = external_local(load_balancer(
        service("ns", "lb-local", "172.30.0.40", 443, tcp),
        30443,
        &["1.2.3.4"],
    ));
    lb.load_balancer_source_ranges = vec!["203.0.113.0/25".parse().unwrap()];
    engine.service(&lb).slice(slice(
        "ns",
        "lb-local",
        tcp,
        8443,
        &[Ep::Local("10.1.4.1"), Ep::Remote("10.1.4.2")],
    ));
    engine
        .service(&affinity(service("ns", "sticky", "172.30.0.50", 80, tcp), 600))
        .slice(slice(
            "ns",
            "sticky",
            tcp,
            8080,
            &[Ep::Remote("10.1.5.1"), Ep::Remote("10.1.5.2")],
        ));
    let big: Vec<String> = (1..=17).map(|i| format!("10.1.6.{i}")).collect();
    let big: Vec<Ep<'_>> = big.iter().map(|a| Ep::Remote(a)).collect();
    engine
        .service(&service("ns", "big", "172.30.0.60", 80, tcp))
        .slice(slice("ns", "big", tcp, 8080, &big));
}

#[test]
fn golden_full_ruleset_of_every_kind() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    engine.update();
    // With the localhost relay: its counters and reject rules too.
    let relayed = DataplaneConfig {
        loopback_relay: true,
        ..config()
    };
    let text = recorded(&engine, &relayed);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/every-kind-ipv4.nft");
    if std::env::var_os("PROXYD_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &text).expect("golden file writable");
    }
    let golden = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        text, golden,
        "rendered (PROXYD_UPDATE_GOLDEN=1 rewrites the file):\n{text}"
    );
}

/// An engine holding every kind of service, synced once into a syncer
/// that records what it writes.
fn every_kind_synced() -> (Engine, NftSyncer<Recording>) {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), Recording::default());
    sync(&mut syncer, &mut engine);
    (engine, syncer)
}

/// A service that goes takes its maps with it: each map is deleted whole,
/// none of its elements one by one first (a map of 100,000 endpoints would
/// be 100,000 deletes for nothing).
#[test]
fn a_service_that_goes_deletes_its_maps_whole() {
    let (mut engine, mut syncer) = every_kind_synced();
    engine.remove_service("ns", "big");
    engine.remove_service("ns", "sticky");
    sync(&mut syncer, &mut engine);
    let tx = ops_of(syncer.dataplane());
    let maps = [
        SetId::Backends(Protocol::Tcp, "svc-ns/big/tcp/80".into()),
        SetId::Picks("svc-ns/sticky/tcp/80".into()),
        SetId::Clients("ns/sticky/tcp/80".into()),
    ];
    for map in maps {
        assert!(
            tx.ops.contains(&Op::DeleteSet(map.clone())),
            "{map} deleted: {:?}",
            tx.ops
        );
        assert!(
            !tx.ops
                .iter()
                .any(|op| matches!(op, Op::DeleteElements(s, _) | Op::FlushSet(s) if *s == map)),
            "{map}: no elements deleted before the set: {:?}",
            tx.ops
        );
    }
}

#[test]
fn a_partial_sync_names_only_the_changed_service() {
    let (mut engine, mut syncer) = every_kind_synced();
    engine.slice(slice(
        "ns",
        "sticky",
        Protocol::Tcp,
        8080,
        &[Ep::Remote("10.1.5.1"), Ep::Remote("10.1.5.3")],
    ));
    sync(&mut syncer, &mut engine);
    let tx = ops_of(syncer.dataplane());
    assert!(!tx.ops.iter().any(|op| matches!(op, Op::DeleteTable(_))));
    assert_eq!(
        tx.ops[0],
        Op::AddElements(SetId::Canary, vec![crate::element::Element::key(Key::Port(1))])
    );
    let ours = |name: &str| name.contains("ns/sticky/");
    for op in &tx.ops[1..] {
        let (chains, sets) = names_of(op);
        for c in chains.iter().filter(|c| c.is_service_chain()) {
            assert!(ours(&c.to_string()), "only the sticky service's chains: {op:?}");
        }
        for s in sets.iter().filter(|s| **s != SetId::Canary) {
            assert!(ours(&s.to_string()), "only the sticky service's sets: {op:?}");
        }
        if let Op::AddSet(s, _)
        | Op::DeleteSet(s)
        | Op::FlushSet(s)
        | Op::AddElements(s, _)
        | Op::DeleteElements(s, _) = op
        {
            assert!(!s.written_by_packets(), "the port's clients stay as they are: {op:?}");
        }
        if let Op::AddElements(_, els) | Op::DeleteElements(_, els) = op {
            for e in els {
                let Key::Frontend(Frontend::Ip { addr, .. }) = e.key else {
                    continue;
                };
                assert_eq!(addr.to_string(), "172.30.0.50", "only the sticky frontend: {op:?}");
            }
        }
    }
    let endpoint = |a: &str| ChainId::Endpoint(format!("ns/sticky/tcp/80/{a}/8080"));
    assert!(tx.ops.contains(&Op::AddChain(endpoint("10.1.5.3"))));
    assert!(tx.ops.contains(&Op::DeleteChain(endpoint("10.1.5.2"))));
    assert!(
        !tx.ops.iter().any(
            |op| matches!(op, Op::AddChain(c) | Op::FlushChain(c) | Op::DeleteChain(c) if *c == endpoint("10.1.5.1"))
        ),
        "the kept endpoint's chain stays as it is"
    );
    // The new endpoint takes the old one's place in the map of chains.
    let picks = SetId::Picks("svc-ns/sticky/tcp/80".into());
    let at_1 = |a: &str| crate::element::Element::map(Key::Index(1), crate::element::Value::Goto(endpoint(a)));
    assert!(
        tx.ops
            .contains(&Op::DeleteElements(picks.clone(), vec![at_1("10.1.5.2")]))
    );
    assert!(tx.ops.contains(&Op::AddElements(picks, vec![at_1("10.1.5.3")])));
}

#[test]
fn a_sync_with_nothing_to_write_applies_nothing_and_the_periodic_one_reasserts() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), Recording::default());
    let changed = engine.update();
    syncer
        .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
        .unwrap();
    let r = syncer
        .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
        .unwrap();
    assert_eq!((r.full, r.services_written, r.script_bytes), (false, 0, 0));
    assert_eq!(syncer.dataplane().applied.len(), 1);
    let r = periodic(&mut syncer, &engine).unwrap();
    assert!(r.script_bytes > 0, "the periodic sync always re-asserts");
    assert_eq!(syncer.dataplane().applied.len(), 2);
}

#[test]
fn a_failed_apply_makes_the_next_sync_full() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), Recording::default());
    let all = engine.update();
    syncer.dataplane().fail_next = 1;
    assert!(
        syncer
            .sync(&engine.services, &engine.endpoints, &all, SyncKind::Changes)
            .is_err()
    );
    assert!(syncer.needs_full_sync());
    let r = syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .unwrap();
    assert!(r.full);
    engine.remove_service("ns", "web");
    let changed = engine.update();
    syncer.dataplane().fail_next = 1;
    assert!(
        syncer
            .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
            .is_err()
    );
    let r = syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .unwrap();
    assert!(r.full, "what failed is not trusted: the table is rewritten");
    let mut k = KernelModel::default();
    k.apply_transaction(ops_of(syncer.dataplane())).unwrap();
    assert_eq!(
        trace(&k, forwarded(POD, "172.30.0.10", 80)).summary(),
        "DROP",
        "web is gone: its cluster IP is an unallocated address of the service CIDR"
    );
}

#[test]
fn periodic_sync_repairs_the_skeleton_and_a_deleted_table_comes_back() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    let probe = forwarded(POD, "172.30.0.10", 80);
    let before = trace(syncer.dataplane(), probe);
    // Someone flushes a fixed chain: nothing is DNATed any more.
    let mut tamper = Transaction::new(IpFamily::V4);
    tamper.push(Op::FlushChain(ChainId::Services));
    syncer.dataplane().apply_transaction(&tamper).unwrap();
    assert_eq!(
        trace(syncer.dataplane(), probe).summary(),
        "REJECT",
        "cluster IP guard, no DNAT"
    );
    let r = periodic(&mut syncer, &engine).unwrap();
    assert!(!r.full && r.services_written == 0);
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
    assert_eq!(trace(syncer.dataplane(), probe), before);
    // Someone deletes the table: the canary fails the periodic sync, and
    // the one after it rewrites everything.
    let mut delete = Transaction::new(IpFamily::V4);
    delete.push(Op::DeleteTable(IpFamily::V4));
    syncer.dataplane().apply_transaction(&delete).unwrap();
    assert!(periodic(&mut syncer, &engine).is_err());
    let r = periodic(&mut syncer, &engine).unwrap();
    assert!(r.full);
    assert_eq!(trace(syncer.dataplane(), probe), before);
}

#[test]
fn an_idle_periodic_sync_sends_nothing_until_someone_else_commits() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    let idle = |syncer: &mut NftSyncer<KernelModel>, engine: &Engine| {
        let before = syncer.dataplane().generation;
        let r = periodic(syncer, engine).unwrap();
        (r, syncer.dataplane().generation - before)
    };
    for _ in 0..3 {
        let (r, commits) = idle(&mut syncer, &engine);
        assert_eq!((commits, r.script_bytes, r.full), (0, 0, false), "idle: no transaction");
    }
    // Someone else commits (here: flushes a fixed chain). The next
    // periodic sync sees the generation move and repairs it, once.
    let probe = forwarded(POD, "172.30.0.10", 80);
    let before = trace(syncer.dataplane(), probe);
    let mut tamper = Transaction::new(IpFamily::V4);
    tamper.push(Op::FlushChain(ChainId::Services));
    syncer.dataplane().apply_transaction(&tamper).unwrap();
    let (_, commits) = idle(&mut syncer, &engine);
    assert_eq!(commits, 1, "one repairing transaction");
    assert_eq!(trace(syncer.dataplane(), probe), before);
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
    let (_, commits) = idle(&mut syncer, &engine);
    assert_eq!(commits, 0, "idle again");
}

#[test]
fn a_shared_external_ip_goes_to_the_next_service_when_freed() {
    let mut engine = Engine::new(IpFamily::V4);
    let mut a = service("ns", "a", "172.30.0.1", 80, Protocol::Tcp);
    a.external_ips = vec!["192.168.99.1".parse().unwrap()];
    let mut b = service("ns", "b", "172.30.0.2", 80, Protocol::Tcp);
    b.external_ips = a.external_ips.clone();
    engine
        .service(&a)
        .service(&b)
        .slice(slice("ns", "a", Protocol::Tcp, 8080, &[Ep::Remote("10.1.0.1")]))
        .slice(slice("ns", "b", Protocol::Tcp, 8080, &[Ep::Remote("10.1.0.2")]));
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    let probe = forwarded(CLIENT, "192.168.99.1", 80);
    assert_eq!(
        trace(syncer.dataplane(), probe).summary(),
        "10.1.0.1:8080 (masq)",
        "first come"
    );
    engine.remove_service("ns", "a");
    let r = sync(&mut syncer, &mut engine);
    assert_eq!(r.services_written, 2, "b was waiting for the address");
    assert_eq!(trace(syncer.dataplane(), probe).summary(), "10.1.0.2:8080 (masq)");
}

#[test]
fn hairpin_and_cluster_ip_elements_are_shared_between_services() {
    let mut engine = Engine::new(IpFamily::V4);
    for (name, ip) in [("a", "172.30.0.1"), ("b", "172.30.0.2")] {
        engine.service(&service("ns", name, ip, 80, Protocol::Tcp)).slice(slice(
            "ns",
            name,
            Protocol::Tcp,
            8080,
            &[Ep::Local("10.1.0.1")],
        ));
    }
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    engine.remove_service("ns", "a");
    sync(&mut syncer, &mut engine);
    let hairpin = forwarded("10.1.0.1", "172.30.0.2", 80);
    assert_eq!(
        trace(syncer.dataplane(), hairpin).summary(),
        "10.1.0.1:8080 (masq)",
        "b still uses it"
    );
    engine.remove_slice("ns", "b-1");
    sync(&mut syncer, &mut engine);
    assert_eq!(
        trace(syncer.dataplane(), hairpin).summary(),
        "REJECT",
        "b has no endpoints"
    );
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
}

#[test]
fn each_table_uses_only_its_family_of_networks() {
    let mut engine = Engine::new(IpFamily::V6);
    let s = external_local(node_port(service("ns", "web", "fd00::10", 80, Protocol::Tcp), 30080));
    engine
        .service(&s)
        .slice(slice("ns", "web", Protocol::Tcp, 8080, &[Ep::Local("fd00:1::1")]));
    engine.update();
    let mixed = DataplaneConfig {
        cluster_cidrs: vec!["10.0.0.0/8".parse().unwrap(), "fd00:10::/64".parse().unwrap()],
        nodeport_addresses: vec!["192.168.0.0/16".parse().unwrap(), "fd00:1::/64".parse().unwrap()],
        service_cidrs: vec!["172.30.0.0/16".parse().unwrap(), "fd00::/112".parse().unwrap()],
        ..DataplaneConfig::new(IpFamily::V6)
    };
    // The model refuses an address of the other family anywhere.
    let k = fresh(&engine, &mixed);
    let host = super::support::host(&["fd00:1::2"]);
    let t = |p| k.trace(&host, p).summary();
    assert_eq!(
        t(forwarded("fd00:10::5", "fd00:1::2", 30080)),
        "[fd00:1::1]:8080",
        "pod"
    );
    assert_eq!(
        t(forwarded("2600::1", "fd00:1::2", 30080)),
        "[fd00:1::1]:8080",
        "external, local"
    );
    assert_eq!(
        t(forwarded("fd00:10::5", "fd00::99", 80)),
        "DROP",
        "unallocated, v6 service CIDR"
    );
    let text = recorded(&engine, &mixed);
    let v4_words = ["10.0.0.0", "192.168", "172.30"];
    assert!(
        !v4_words.iter().any(|w| text.contains(w)),
        "IPv4 networks in an ip6 table:\n{text}"
    );
}

// --- the random walk -------------------------------------------------------

/// One step of the random walk.
#[derive(Clone, Debug)]
pub(super) enum Step {
    /// Service `i` becomes kind `k` (0..7).
    Service(usize, u8),
    /// Service `i` is deleted.
    DeleteService(usize),
    /// Service `i`'s endpoints become those picked by the mask (bit 15:
    /// not ready; bit 14: all local), plus `extra` more (to cross 16).
    Endpoints(usize, u16, u8),
    /// Its slice is deleted.
    DeleteSlice(usize),
    /// A periodic sync.
    Periodic,
}

pub(super) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..6usize, 0..7u8).prop_map(|(i, k)| Step::Service(i, k)),
        1 => (0..6usize).prop_map(Step::DeleteService),
        4 => (0..6usize, any::<u16>(), prop_oneof![3 => Just(0u8), 1 => 10..20u8])
            .prop_map(|(i, m, e)| Step::Endpoints(i, m, e)),
        1 => (0..6usize).prop_map(Step::DeleteSlice),
        1 => Just(Step::Periodic),
    ]
}

fn protocol_of(i: usize) -> Protocol {
    if i % 2 == 1 { Protocol::Udp } else { Protocol::Tcp }
}

pub(super) fn service_of_kind(i: usize, kind: u8) -> ServiceInfo {
    let s = service(
        "ns",
        &format!("s{i}"),
        &format!("172.30.0.{}", i + 1),
        80,
        protocol_of(i),
    );
    let np = 30000 + i as u16;
    let external = || vec![format!("192.168.99.{}", i + 1).parse().unwrap()];
    match kind {
        1 => {
            let mut s = node_port(s, np);
            s.external_ips = external();
            s
        }
        2 => {
            let mut s = external_local(load_balancer(s, np, &[]));
            s.load_balancer_ips = external();
            s.load_balancer_source_ranges = vec!["203.0.113.0/25".parse().unwrap()];
            s
        }
        3 => affinity(s, 60),
        4 => {
            let mut s = s;
            s.internal_traffic_policy = TrafficPolicy::Local;
            s
        }
        5 => {
            let mut s = affinity(load_balancer(s, np, &[]), 10);
            s.load_balancer_ips = external();
            s
        }
        6 => {
            let mut s = external_local(node_port(s, np));
            s.external_ips = external();
            s
        }
        _ => s,
    }
}

pub(super) fn slice_of(i: usize, mask: u16, extra: u8) -> slice_model::EndpointSlice {
    let ready = mask & 0x8000 == 0;
    let all_local = mask & 0x4000 != 0;
    let picked = (0..8u16).filter(|b| mask & (1 << b) != 0).map(u32::from);
    let addrs: Vec<(String, bool)> = picked
        .chain(8..8 + u32::from(extra))
        // Endpoints are shared across services, so hairpin counts matter.
        .map(|n| (format!("10.1.0.{}", n + 1), all_local || n % 3 == 0))
        .collect();
    let eps: Vec<Ep<'_>> = addrs
        .iter()
        .map(|(a, local)| match (ready, local) {
            (false, _) => Ep::Terminating(a),
            (true, true) => Ep::Local(a),
            (true, false) => Ep::Remote(a),
        })
        .collect();
    slice("ns", &format!("s{i}"), protocol_of(i), 8080, &eps)
}

/// Packets to every frontend the walk can create, from a pod, the node and
/// outside.
pub(super) fn probes() -> Vec<crate::tracer::Packet> {
    let mut all = Vec::new();
    for i in 0..6usize {
        let proto = protocol_of(i);
        let with = |p| super::support::with_protocol(p, proto);
        for dst in [format!("172.30.0.{}", i + 1), format!("192.168.99.{}", i + 1)] {
            for p in [
                forwarded(POD, &dst, 80),
                forwarded(CLIENT, &dst, 80),
                local(NODE_IP, &dst, 80),
            ] {
                all.push(with(p));
            }
        }
        all.push(with(forwarded(CLIENT, NODE_IP, 30000 + i as u16)));
        all.push(with(forwarded("10.1.0.1", &format!("172.30.0.{}", i + 1), 80)));
    }
    all
}

/// Applies `step` to the engine; the kind of sync that follows it.
pub(super) fn apply_step(engine: &mut Engine, step: Step) -> SyncKind {
    match step {
        Step::Service(i, k) => {
            engine.service(&service_of_kind(i, k));
        }
        Step::DeleteService(i) => engine.remove_service("ns", &format!("s{i}")),
        Step::Endpoints(i, m, e) => {
            engine.slice(slice_of(i, m, e));
        }
        Step::DeleteSlice(i) => engine.remove_slice("ns", &format!("s{i}-1")),
        Step::Periodic => return SyncKind::Periodic,
    }
    SyncKind::Changes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// After any sequence of changes, the partial transactions leave the
    /// table exactly as a fresh full sync would write it (so every packet
    /// meets the same fate; backend maps' positions aside), and the model
    /// accepts every one of them.
    #[test]
    fn partial_syncs_equal_a_fresh_full_sync(steps in proptest::collection::vec(step(), 1..40)) {
        let mut engine = Engine::new(IpFamily::V4);
        let mut syncer = NftSyncer::new(config(), KernelModel::default());
        sync(&mut syncer, &mut engine);
        let probes = probes();
        for step in steps {
            let kind = apply_step(&mut engine, step);
            let changed = engine.update();
            let report = syncer.sync(&engine.services, &engine.endpoints, &changed, kind);
            prop_assert!(report.is_ok(), "{report:?}");
            prop_assert!(!report.unwrap().full);
            let full = fresh(&engine, &config());
            for p in &probes {
                prop_assert_eq!(trace(syncer.dataplane(), *p), trace(&full, *p), "{:?}", p);
            }
            prop_assert_eq!(positions_sorted(syncer.dataplane()), positions_sorted(&full));
        }
    }
}

#[test]
fn one_endpoint_of_a_service_of_thousands_is_a_few_elements() {
    let mut engine = Engine::new(IpFamily::V4);
    let addrs: Vec<String> = (0..3000u32)
        .map(|i| format!("10.{}.{}.{}", 2 + i / 65536, (i / 256) % 256, i % 256))
        .collect();
    let all: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
    engine
        .service(&service("ns", "big", "172.30.0.10", 80, Protocol::Tcp))
        .slice(slice("ns", "big", Protocol::Tcp, 80, &all));
    let mut syncer = NftSyncer::new(config(), Measured::default());
    assert!(sync(&mut syncer, &mut engine).full);
    let probe = forwarded(POD, "172.30.0.10", 80);
    assert_eq!(trace(&syncer.dataplane().0, probe).summary().split(", ").count(), 3000);
    // Each step changes one endpoint of the list before it.
    let mut eps = all.clone();
    for (step, what) in ["one replaced", "one removed", "one added"].into_iter().enumerate() {
        match step {
            0 => eps[1234] = Ep::Remote("10.9.9.9"),
            1 => {
                eps.remove(1500);
            }
            _ => eps.push(Ep::Remote("10.9.9.8")),
        }
        engine.slice(slice("ns", "big", Protocol::Tcp, 80, &eps));
        let r = sync(&mut syncer, &mut engine);
        assert!(!r.full);
        // The canary, and at most two positions deleted and added again;
        // the chain's one rule is rewritten when the count changes.
        assert!(r.elements <= 5, "{what}: {r:?}");
        assert!(r.script_bytes < 2000, "{what}: {} bytes", r.script_bytes);
        // Each endpoint reachable once, as from a fresh table (whose
        // positions are in address order: compare the sets).
        let sorted = |k: &KernelModel| {
            let mut v: Vec<String> = trace(k, probe).summary().split(", ").map(str::to_owned).collect();
            v.sort();
            v
        };
        let now = sorted(&syncer.dataplane().0);
        assert_eq!(now.len(), eps.len(), "{what}: each endpoint once");
        assert_eq!(now, sorted(&fresh(&engine, &config())), "{what}");
        let table = syncer.dataplane().0.table(IpFamily::V4).unwrap();
        let map = table
            .sets
            .iter()
            .find(|(id, _)| matches!(id, SetId::Backends(..)))
            .unwrap()
            .1;
        assert_eq!(map.len(), eps.len(), "{what}: no position left behind");
    }
}

/// The kernel model, reporting the size of each transaction's nft text.
#[derive(Default)]
struct Measured(KernelModel);

impl crate::Dataplane for Measured {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, crate::DataplaneError> {
        self.0.apply(tx)?;
        Ok(tx.text().len())
    }
}
