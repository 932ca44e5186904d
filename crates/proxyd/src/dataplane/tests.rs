//! Rendering and partial-sync tests. Every sync is applied to
//! [`KernelModel`], which enforces nft's transaction rules, and the result is
//! compared with a fresh full render of the same maps.

use std::collections::BTreeSet;
use std::num::NonZeroU16;
use std::time::Duration;

use proptest::prelude::*;
use slice_model::{
    EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint, SliceName,
    TrafficPolicy,
};

use super::kernel_model::KernelModel;
use super::programmed::{NftSyncer, SyncKind};
use super::{DataplaneConfig, Recording};
use crate::engine::Engine;

const NODE: &str = "node-1";

fn service(name: &str, ip: &str, port: u16, protocol: Protocol) -> ServiceInfo {
    let mut s = ServiceInfo::new(ServiceName::new("ns", name));
    s.cluster_ips = vec![ip.parse().unwrap()];
    s.ports = vec![ServicePort {
        name: "p".into(),
        protocol,
        port: NonZeroU16::new(port).unwrap(),
        node_port: None,
    }];
    s
}

/// `(address, on this node, ready)` endpoints on port 8080; the not-ready
/// ones are serving and terminating.
fn slice(service: &str, name: &str, protocol: Protocol, eps: &[(&str, bool, bool)]) -> EndpointSlice {
    let mut s = EndpointSlice::new("ns", name, service).with_port("p", protocol, 8080);
    for (addr, local, ready) in eps {
        let mut e = SliceEndpoint::new(addr.parse().unwrap()).with_conditions(*ready, true, !*ready);
        e = e.on_node(if *local { NODE } else { "node-2" });
        s = s.with_endpoint(e);
    }
    s
}

fn config() -> DataplaneConfig {
    DataplaneConfig {
        cluster_cidrs: vec!["10.0.0.0/8".parse().unwrap()],
        ..DataplaneConfig::new(IpFamily::V4)
    }
}

/// The value of a slot, whichever slot map (width) holds it.
fn slot_of(k: &KernelModel, key: &str) -> Option<String> {
    k.sets
        .iter()
        .filter(|(name, _)| name.contains("-slots-"))
        .find_map(|(_, set)| set.get(key).cloned().flatten())
}

#[test]
fn slots_are_as_fair_as_their_width_allows() {
    use std::collections::HashMap;
    use std::net::SocketAddr;

    use super::fragment::{SLOTS, slot_assignment, width};
    for n in 1..=SLOTS {
        let eps: Vec<SocketAddr> = (0..n)
            .map(|i| SocketAddr::from(([10, 0, 0, i as u8 + 1], 80)))
            .collect();
        let mut counts: HashMap<SocketAddr, usize> = HashMap::new();
        for e in slot_assignment(&eps) {
            *counts.entry(e).or_default() += 1;
        }
        assert_eq!(counts.values().sum::<usize>(), width(n), "n={n}");
        assert!(
            width(n) >= n && (n == 1 || width(n) < 2 * n),
            "the narrowest width for n={n}"
        );
        assert_eq!(counts.len(), n, "every endpoint gets a slot (n={n})");
        let (lo, hi) = (counts.values().min().unwrap(), counts.values().max().unwrap());
        assert!(hi - lo <= 1 && *hi <= 2 * *lo, "n={n}: {lo}..{hi}, worst skew 2:1");
        if width(n) == n {
            assert_eq!(lo, hi, "exact for n={n}");
        }
    }
}

/// What a fresh proxy would write for the engine's current maps.
fn fresh(engine: &Engine, config: &DataplaneConfig) -> KernelModel {
    let mut syncer = NftSyncer::new(config.clone(), KernelModel::default());
    syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .expect("a full render applies to an empty kernel");
    syncer.dataplane().clone()
}

/// Every kind of service the dataplane handles.
fn every_kind(engine: &mut Engine) {
    let add = |svc: ServiceInfo, slice: Option<EndpointSlice>| {
        engine.update_service(&svc);
        if let Some(s) = slice {
            engine.update_slice(s);
        }
    };
    add(
        service("web", "10.96.0.10", 80, Protocol::Tcp),
        Some(slice(
            "web",
            "web-1",
            Protocol::Tcp,
            &[
                ("10.1.0.1", true, true),
                ("10.1.0.2", false, true),
                ("10.1.0.3", false, false),
            ],
        )),
    );
    add(
        service("dns", "10.96.0.53", 53, Protocol::Udp),
        Some(slice("dns", "dns-1", Protocol::Udp, &[("10.1.1.1", false, true)])),
    );
    add(service("empty", "10.96.0.20", 80, Protocol::Tcp), None);
    let mut local = service("internal-local", "10.96.0.21", 80, Protocol::Tcp);
    local.internal_traffic_policy = TrafficPolicy::Local;
    add(
        local,
        Some(slice(
            "internal-local",
            "il-1",
            Protocol::Tcp,
            &[("10.1.2.1", false, true)],
        )),
    );
    let mut np = service("nodeport", "10.96.0.30", 80, Protocol::Tcp);
    np.service_type = ServiceType::NodePort;
    np.ports[0].node_port = NonZeroU16::new(30080);
    np.external_ips = vec!["192.0.2.10".parse().unwrap()];
    add(
        np,
        Some(slice(
            "nodeport",
            "np-1",
            Protocol::Tcp,
            &[("10.1.3.1", false, true), ("10.1.3.2", false, true)],
        )),
    );
    let mut lb = service("lb-local", "10.96.0.40", 443, Protocol::Tcp);
    lb.service_type = ServiceType::LoadBalancer;
    lb.ports[0].node_port = NonZeroU16::new(30443);
    lb.load_balancer_ips = vec!["203.0.113.5".parse().unwrap()];
    lb.load_balancer_source_ranges = vec!["198.51.100.0/24".parse().unwrap()];
    lb.external_traffic_policy = TrafficPolicy::Local;
    lb.health_check_node_port = NonZeroU16::new(32000);
    add(
        lb,
        Some(slice(
            "lb-local",
            "lb-1",
            Protocol::Tcp,
            &[("10.1.4.1", true, true), ("10.1.4.2", false, true)],
        )),
    );
    let mut sticky = service("sticky", "10.96.0.50", 80, Protocol::Tcp);
    sticky.session_affinity = Some(Duration::from_secs(600));
    add(
        sticky,
        Some(slice(
            "sticky",
            "sticky-1",
            Protocol::Tcp,
            &[("10.1.5.1", false, true), ("10.1.5.2", false, true)],
        )),
    );
    let big: Vec<String> = (1..=17).map(|i| format!("10.1.6.{i}")).collect();
    let big: Vec<(&str, bool, bool)> = big.iter().map(|a| (a.as_str(), false, true)).collect();
    add(
        service("big", "10.96.0.60", 80, Protocol::Tcp),
        Some(slice("big", "big-1", Protocol::Tcp, &big)),
    );
    let mut term = service("terminating", "10.96.0.70", 80, Protocol::Tcp);
    term.ports[0].name = "p".into();
    add(
        term,
        Some(slice(
            "terminating",
            "term-1",
            Protocol::Tcp,
            &[("10.1.7.1", false, false)],
        )),
    );
}

#[test]
fn golden_full_ruleset_of_every_kind() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    engine.update();
    let mut syncer = NftSyncer::new(config(), Recording::default());
    let report = syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .unwrap();
    assert!(report.full);
    let text = &syncer.dataplane().applied[0];
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-nft/every-kind-ipv4.nft");
    if std::env::var_os("PROXYD_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, text).unwrap();
    }
    let golden = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        text, &golden,
        "rendered (PROXYD_UPDATE_GOLDEN=1 rewrites the file):\n{text}"
    );
    let mut kernel = KernelModel::default();
    kernel.apply_script(text).unwrap();
}

#[test]
fn every_kind_renders_as_kube_proxy_would_behave() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    engine.update();
    let k = fresh(&engine, &config());
    let slots = |key: &str| slot_of(&k, key);
    let has = |set: &str, key: &str| k.sets[set].contains_key(key);
    // Ready endpoints only; two endpoints, two slots.
    assert_eq!(slots("10.96.0.10 . tcp . 80 . 0").as_deref(), Some("10.1.0.1 . 8080"));
    assert_eq!(slots("10.96.0.10 . tcp . 80 . 1").as_deref(), Some("10.1.0.2 . 8080"));
    assert_eq!(slots("10.96.0.10 . tcp . 80 . 2"), None, "the width-2 map");
    assert!(k.sets["service-slots-2"].contains_key("10.96.0.10 . tcp . 80 . 1"));
    assert!(
        !k.sets
            .values()
            .flat_map(|s| s.values())
            .any(|v| v.as_deref() == Some("10.1.0.3 . 8080")),
        "not ready"
    );
    assert!(
        has("outside-masq-frontends", "10.96.0.10 . tcp . 80"),
        "--cluster-cidr set"
    );
    assert!(has("hairpin", "10.1.0.1 . 10.1.0.1"), "local endpoint");
    assert!(has("no-endpoints", "10.96.0.20 . tcp . 80"), "no endpoints: reject");
    assert!(
        has("no-local-endpoints", "10.96.0.21 . tcp . 80"),
        "Local, none here: drop"
    );
    // NodePort + external IP, Cluster policy: slots and always masquerade.
    assert!(k.sets["nodeport-slots-2"].contains_key("tcp . 30080 . 1"));
    assert!(has("masq-nodeports", "tcp . 30080"));
    assert!(has("masq-frontends", "192.0.2.10 . tcp . 80"));
    // LoadBalancer, externalTrafficPolicy Local, source ranges: chains.
    let chains = &k.sets["service-chains"];
    assert_eq!(
        chains["203.0.113.5 . tcp . 443"].as_deref(),
        Some("goto fw-ns/lb-local/tcp/443")
    );
    assert_eq!(
        k.sets["nodeport-chains"]["tcp . 30443"].as_deref(),
        Some("goto ext-ns/lb-local/tcp/443")
    );
    let ext = &k.chains["ext-ns/lb-local/tcp/443"];
    assert!(
        ext[0].contains("saddr { 10.0.0.0/8 } goto svc-ns/lb-local/tcp/443"),
        "pods short-circuit"
    );
    assert!(
        ext.last().unwrap().ends_with("dnat ip to 10.1.4.1:8080"),
        "local endpoint only: {ext:?}"
    );
    assert_eq!(
        k.chains["fw-ns/lb-local/tcp/443"],
        [
            "ip saddr { 198.51.100.0/24 } goto ext-ns/lb-local/tcp/443".to_owned(),
            "drop".to_owned()
        ]
    );
    // Affinity: a set and a chain per endpoint.
    assert!(k.sets.contains_key("aff-ns/sticky/tcp/80/10.1.5.1/8080"));
    assert_eq!(
        k.chains["ep-ns/sticky/tcp/80/10.1.5.2/8080"][0],
        "update @aff-ns/sticky/tcp/80/10.1.5.2/8080 { ip saddr timeout 600s }"
    );
    // More than 16 endpoints: an exact numgen.
    assert!(
        k.chains["svc-ns/big/tcp/80"]
            .last()
            .unwrap()
            .contains("numgen random mod 17 map")
    );
    // Only terminating endpoints: they still serve.
    assert_eq!(slots("10.96.0.70 . tcp . 80 . 0").as_deref(), Some("10.1.7.1 . 8080"));
}

fn sync(syncer: &mut NftSyncer<KernelModel>, engine: &mut Engine) -> super::SyncReport {
    let update = engine.update();
    syncer
        .sync(&engine.services, &engine.endpoints, &update.changed, SyncKind::Changes)
        .unwrap()
}

#[test]
fn one_changed_endpoint_among_1000_services_touches_only_that_service() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    for i in 0..1000u32 {
        let name = format!("svc-{i}");
        let ip = format!("10.96.{}.{}", i / 250, i % 250 + 1);
        engine.update_service(&service(&name, &ip, 80, Protocol::Tcp));
        let a = format!("10.2.{}.{}", i / 250, i % 250 + 1);
        let b = format!("10.3.{}.{}", i / 250, i % 250 + 1);
        engine.update_slice(slice(
            &name,
            &name,
            Protocol::Tcp,
            &[(&a, false, true), (&b, false, true)],
        ));
    }
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    let first = sync(&mut syncer, &mut engine);
    assert!(first.full && first.services_written == 1000);

    engine.update_slice(slice(
        "svc-500",
        "svc-500",
        Protocol::Tcp,
        &[("10.2.2.1", false, true), ("10.9.9.9", false, true)],
    ));
    let before = syncer.dataplane().clone();
    let report = sync(&mut syncer, &mut engine);
    assert!(!report.full);
    assert_eq!(report.services_written, 1);
    // Only svc-500's slot elements, with the slots that changed.
    let after = syncer.dataplane().clone();
    assert_eq!(after, fresh(&engine, &config()));
    let changed: Vec<&String> = after.sets["service-slots-2"]
        .iter()
        .filter(|(k, v)| before.sets["service-slots-2"].get(*k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        changed.len(),
        1,
        "the second slot moves to the new endpoint: {changed:?}"
    );
    assert!(changed.iter().all(|k| k.starts_with("10.96.2.1 . tcp . 80 .")));
    // Canary, then one slot replaced: its size depends on the change only.
    assert!(report.script_bytes < 1500, "{} bytes", report.script_bytes);
}

#[test]
fn the_partial_transaction_does_not_grow_with_the_cluster() {
    let mut sizes = Vec::new();
    for n in [10u32, 1000] {
        let mut engine = Engine::new(NODE, IpFamily::V4);
        for i in 0..n {
            let name = format!("svc-{i}");
            let ip = format!("10.96.{}.{}", i / 250, i % 250 + 1);
            engine.update_service(&service(&name, &ip, 80, Protocol::Tcp));
            engine.update_slice(slice(&name, &name, Protocol::Tcp, &[("10.2.0.1", false, true)]));
        }
        let mut syncer = NftSyncer::new(config(), Recording::default());
        let changed = engine.update().changed;
        syncer
            .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
            .unwrap();
        engine.update_slice(slice("svc-5", "svc-5", Protocol::Tcp, &[("10.2.0.2", false, true)]));
        let changed = engine.update().changed;
        let r = syncer
            .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
            .unwrap();
        sizes.push(r.script_bytes);
    }
    assert_eq!(
        sizes[0], sizes[1],
        "same change, same transaction, at 10 and 1000 services"
    );
}

#[test]
fn partial_script_lists_only_the_changed_service() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), Recording::default());
    let update = engine.update();
    syncer
        .sync(&engine.services, &engine.endpoints, &update.changed, SyncKind::Changes)
        .unwrap();
    engine.update_slice(slice(
        "sticky",
        "sticky-1",
        Protocol::Tcp,
        &[("10.1.5.1", false, true), ("10.1.5.3", false, true)],
    ));
    let update = engine.update();
    syncer
        .sync(&engine.services, &engine.endpoints, &update.changed, SyncKind::Changes)
        .unwrap();
    let script = syncer.dataplane().applied.last().unwrap().clone();
    assert!(!script.contains("delete table"));
    assert!(script.starts_with("add element ip proxyd canary { 1 }\n"));
    for line in script.lines().skip(1) {
        assert!(line.contains("ns/sticky/"), "only the sticky service's objects: {line}");
    }
    assert!(script.contains("add set ip proxyd aff-ns/sticky/tcp/80/10.1.5.3/8080"));
    assert!(script.contains("delete chain ip proxyd ep-ns/sticky/tcp/80/10.1.5.2/8080"));
    assert!(script.contains("delete set ip proxyd aff-ns/sticky/tcp/80/10.1.5.2/8080"));
    assert!(
        !script.contains("aff-ns/sticky/tcp/80/10.1.5.1/8080 {"),
        "the kept endpoint's clients stay with it"
    );
}

#[test]
fn node_ports_answer_only_on_the_nodeport_addresses() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    engine.update();
    let mut c = config();
    c.nodeport_addresses = vec!["192.168.0.0/16".parse().unwrap(), "fd00::/8".parse().unwrap()];
    let k = fresh(&engine, &c);
    let np_rules: Vec<&String> = k
        .chains
        .values()
        .flatten()
        .filter(|r| r.contains("fib daddr type local"))
        .collect();
    assert_eq!(
        np_rules.len(),
        2 + 5 + 3 * 2,
        "services (2), slot-dnat (one per width), three filter chains (2 each)"
    );
    for r in np_rules {
        assert!(r.contains("fib daddr type local ip daddr { 192.168.0.0/16 }"), "{r}");
        assert!(!r.contains("fd00"), "only this family's networks: {r}");
    }
}

#[test]
fn a_sync_with_nothing_to_write_applies_nothing() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), Recording::default());
    let changed = engine.update().changed;
    syncer
        .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
        .unwrap();
    // Reported as changed, but the same rules: nothing is applied.
    let r = syncer
        .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
        .unwrap();
    assert_eq!((r.full, r.services_written, r.script_bytes), (false, 0, 0));
    assert_eq!(syncer.dataplane().applied.len(), 1);
    let r = syncer
        .sync(
            &engine.services,
            &engine.endpoints,
            &BTreeSet::new(),
            SyncKind::Periodic,
        )
        .unwrap();
    assert!(r.script_bytes > 0, "the periodic sync always re-asserts");
    assert_eq!(syncer.dataplane().applied.len(), 2);
}

#[test]
fn a_failed_apply_makes_the_next_sync_full() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), Recording::default());
    let all = engine.update().changed;
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
    assert!(r.full && syncer.dataplane().applied[0].starts_with("add table ip proxyd\ndelete table"));
    // A partial failure also discards the view.
    engine.remove_service(&ServiceName::new("ns", "web"));
    let changed = engine.update().changed;
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
    assert!(!syncer.dataplane().applied[1].contains("10.96.0.10"), "web is gone");
}

#[test]
fn periodic_sync_reasserts_the_skeleton_and_nothing_else() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    every_kind(&mut engine);
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    // Someone flushes a fixed chain; the periodic sync puts it back.
    syncer
        .dataplane()
        .apply_script("flush chain ip proxyd services\n")
        .unwrap();
    let r = syncer
        .sync(
            &engine.services,
            &engine.endpoints,
            &BTreeSet::new(),
            SyncKind::Periodic,
        )
        .unwrap();
    assert!(!r.full && r.services_written == 0);
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
    // Someone deletes the table: the canary fails the periodic sync, and
    // the one after it rewrites everything.
    syncer.dataplane().apply_script("delete table ip proxyd\n").unwrap();
    assert!(
        syncer
            .sync(
                &engine.services,
                &engine.endpoints,
                &BTreeSet::new(),
                SyncKind::Periodic
            )
            .is_err()
    );
    let r = syncer
        .sync(
            &engine.services,
            &engine.endpoints,
            &BTreeSet::new(),
            SyncKind::Periodic,
        )
        .unwrap();
    assert!(r.full);
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
}

#[test]
fn a_shared_external_ip_goes_to_the_next_service_when_freed() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    let mut a = service("a", "10.96.0.1", 80, Protocol::Tcp);
    a.external_ips = vec!["192.0.2.1".parse().unwrap()];
    a.service_type = ServiceType::ClusterIp;
    let mut b = service("b", "10.96.0.2", 80, Protocol::Tcp);
    b.external_ips = a.external_ips.clone();
    engine.update_service(&a);
    engine.update_service(&b);
    engine.update_slice(slice("a", "a-1", Protocol::Tcp, &[("10.1.0.1", false, true)]));
    engine.update_slice(slice("b", "b-1", Protocol::Tcp, &[("10.1.0.2", false, true)]));
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    let slot = |k: &KernelModel| slot_of(k, "192.0.2.1 . tcp . 80 . 0");
    assert_eq!(
        slot(syncer.dataplane()).as_deref(),
        Some("10.1.0.1 . 8080"),
        "first come"
    );
    engine.remove_service(&ServiceName::new("ns", "a"));
    let r = sync(&mut syncer, &mut engine);
    assert_eq!(r.services_written, 2, "b was waiting for the address");
    assert_eq!(slot(syncer.dataplane()).as_deref(), Some("10.1.0.2 . 8080"));
}

#[test]
fn hairpin_elements_are_shared_between_services() {
    let mut engine = Engine::new(NODE, IpFamily::V4);
    for (name, ip) in [("a", "10.96.0.1"), ("b", "10.96.0.2")] {
        engine.update_service(&service(name, ip, 80, Protocol::Tcp));
        engine.update_slice(slice(name, name, Protocol::Tcp, &[("10.1.0.1", true, true)]));
    }
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut engine);
    engine.remove_service(&ServiceName::new("ns", "a"));
    sync(&mut syncer, &mut engine);
    assert!(
        syncer.dataplane().sets["hairpin"].contains_key("10.1.0.1 . 10.1.0.1"),
        "b still uses it"
    );
    engine.remove_slice(&SliceName::new("ns", "b"));
    sync(&mut syncer, &mut engine);
    assert!(syncer.dataplane().sets["hairpin"].is_empty());
    assert_eq!(*syncer.dataplane(), fresh(&engine, &config()));
}

#[test]
fn each_table_uses_only_its_family_of_networks() {
    let mut engine = Engine::new(NODE, IpFamily::V6);
    let mut s = service("web", "fd00::10", 80, Protocol::Tcp);
    s.external_traffic_policy = TrafficPolicy::Local;
    s.service_type = ServiceType::NodePort;
    s.ports[0].node_port = NonZeroU16::new(30080);
    engine.update_service(&s);
    let sl = EndpointSlice::new("ns", "web-1", "web")
        .with_port("p", Protocol::Tcp, 8080)
        .with_endpoint(SliceEndpoint::new("fd00:1::1".parse().unwrap()).on_node(NODE));
    engine.update_slice(sl);
    engine.update();
    let mixed = DataplaneConfig {
        cluster_cidrs: vec!["10.0.0.0/8".parse().unwrap(), "fd00:10::/64".parse().unwrap()],
        nodeport_addresses: vec!["192.168.0.0/16".parse().unwrap(), "fd00:1::/64".parse().unwrap()],
        ..DataplaneConfig::new(IpFamily::V6)
    };
    let mut syncer = NftSyncer::new(mixed, Recording::default());
    syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .unwrap();
    let text = &syncer.dataplane().applied[0];
    assert!(
        !text.contains("10.0.0.0") && !text.contains("192.168"),
        "IPv4 networks in an ip6 table:\n{text}"
    );
    assert!(text.contains("ip6 saddr { fd00:10::/64 } goto svc-ns/web/tcp/80"));
    assert!(text.contains("fib daddr type local ip6 daddr { fd00:1::/64 }"));
}

#[test]
fn ipv6_renders_and_applies() {
    let mut engine = Engine::new(NODE, IpFamily::V6);
    let mut s = service("web", "fd00::10", 80, Protocol::Tcp);
    s.session_affinity = Some(Duration::from_secs(30));
    engine.update_service(&s);
    let mut sl = EndpointSlice::new("ns", "web-1", "web").with_port("p", Protocol::Tcp, 8080);
    sl = sl.with_endpoint(SliceEndpoint::new("fd00:1::1".parse().unwrap()).on_node(NODE));
    engine.update_slice(sl);
    engine.update();
    let k = fresh(&engine, &DataplaneConfig::new(IpFamily::V6));
    assert_eq!(
        k.chains["ep-ns/web/tcp/80/fd00_1__1/8080"],
        [
            "update @aff-ns/web/tcp/80/fd00_1__1/8080 { ip6 saddr timeout 30s }".to_owned(),
            "meta l4proto tcp dnat ip6 to [fd00:1::1]:8080".to_owned()
        ]
    );
    assert!(k.sets["hairpin"].contains_key("fd00:1::1 . fd00:1::1"));
}

/// One step of the random walk.
#[derive(Clone, Debug)]
enum Op {
    /// Service `i` becomes kind `k` (0..6).
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

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6usize, 0..6u8).prop_map(|(i, k)| Op::Service(i, k)),
        1 => (0..6usize).prop_map(Op::DeleteService),
        4 => (0..6usize, any::<u16>(), prop_oneof![3 => Just(0u8), 1 => 10..20u8]).prop_map(|(i, m, e)| Op::Endpoints(i, m, e)),
        1 => (0..6usize).prop_map(Op::DeleteSlice),
        1 => Just(Op::Periodic),
    ]
}

fn service_of_kind(i: usize, kind: u8) -> ServiceInfo {
    let mut s = service(&format!("s{i}"), &format!("10.96.0.{}", i + 1), 80, Protocol::Tcp);
    if i % 2 == 1 {
        s.ports[0].protocol = Protocol::Udp;
    }
    let external = || vec![format!("192.0.2.{}", i + 1).parse().unwrap()];
    match kind {
        1 => {
            s.service_type = ServiceType::NodePort;
            s.ports[0].node_port = NonZeroU16::new(30000 + i as u16);
            s.external_ips = external();
        }
        2 => {
            s.service_type = ServiceType::LoadBalancer;
            s.ports[0].node_port = NonZeroU16::new(30000 + i as u16);
            s.load_balancer_ips = external();
            s.load_balancer_source_ranges = vec!["198.51.100.0/24".parse().unwrap()];
            s.external_traffic_policy = TrafficPolicy::Local;
        }
        3 => s.session_affinity = Some(Duration::from_secs(60 + u64::from(kind))),
        4 => s.internal_traffic_policy = TrafficPolicy::Local,
        5 => {
            s.service_type = ServiceType::LoadBalancer;
            s.ports[0].node_port = NonZeroU16::new(30000 + i as u16);
            s.load_balancer_ips = external();
            s.session_affinity = Some(Duration::from_secs(10));
        }
        _ => {}
    }
    s
}

fn slice_of(i: usize, mask: u16, extra: u8) -> EndpointSlice {
    let proto = if i % 2 == 1 { Protocol::Udp } else { Protocol::Tcp };
    let mut s = EndpointSlice::new("ns", &format!("s{i}-1"), &format!("s{i}")).with_port("p", proto, 8080);
    let ready = mask & 0x8000 == 0;
    let all_local = mask & 0x4000 != 0;
    let picked = (0..8u16).filter(|b| mask & (1 << b) != 0).map(u32::from);
    for n in picked.chain(8..8 + u32::from(extra)) {
        // Endpoints are shared across services, so hairpin counts matter.
        let local = all_local || n % 3 == 0;
        let e = SliceEndpoint::new(format!("10.1.0.{}", n + 1).parse().unwrap())
            .with_conditions(ready, true, !ready)
            .on_node(if local { NODE } else { "node-2" });
        s = s.with_endpoint(e);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// After any sequence of changes, the partial transactions leave the
    /// table exactly as a fresh full sync would write it, and nft accepts
    /// every one of them.
    #[test]
    fn partial_syncs_equal_a_fresh_full_sync(ops in proptest::collection::vec(op(), 1..40)) {
        let mut engine = Engine::new(NODE, IpFamily::V4);
        let mut syncer = NftSyncer::new(config(), KernelModel::default());
        sync(&mut syncer, &mut engine);
        for op in ops {
            let kind = match op {
                Op::Service(i, k) => { engine.update_service(&service_of_kind(i, k)); SyncKind::Changes }
                Op::DeleteService(i) => { engine.remove_service(&ServiceName::new("ns", format!("s{i}").as_str())); SyncKind::Changes }
                Op::Endpoints(i, m, e) => { engine.update_slice(slice_of(i, m, e)); SyncKind::Changes }
                Op::DeleteSlice(i) => { engine.remove_slice(&SliceName::new("ns", format!("s{i}-1").as_str())); SyncKind::Changes }
                Op::Periodic => SyncKind::Periodic,
            };
            let update = engine.update();
            let report = syncer.sync(&engine.services, &engine.endpoints, &update.changed, kind);
            prop_assert!(report.is_ok(), "{report:?}");
            prop_assert!(!report.unwrap().full);
            prop_assert_eq!(syncer.dataplane(), &fresh(&engine, &config()));
        }
    }
}
