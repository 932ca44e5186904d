//! A pod's table (multus mode): what the pod itself sends to cluster IPs
//! of the services on its networks.

use std::collections::BTreeSet;

use proptest::prelude::*;
use slice_model::{IpFamily, Protocol, ServiceName, TrafficPolicy};

use super::support::{host, local};
use super::*;
use crate::tracer::Host;

/// The pod: net1 on the secondary network, eth0 on the cluster's.
const NET1: &str = "192.168.10.5";

fn pod_host() -> Host {
    host(&[NET1, "10.244.1.5", "127.0.0.1"])
}

fn on_net(name: &ServiceName) -> bool {
    name.name.starts_with("net-")
}

fn pod_syncer() -> NftSyncer<KernelModel> {
    let mut s = NftSyncer::new(DataplaneConfig::pod(IpFamily::V4), KernelModel::default());
    s.set_filter(Box::new(on_net));
    s
}

fn pod_engine() -> Engine {
    let mut e = Engine::new(IpFamily::V4);
    let tcp = Protocol::Tcp;
    e.service(&node_port(service("ns", "net-web", "10.96.0.10", 80, tcp), 30080))
        .slice(slice(
            "ns",
            "net-web",
            tcp,
            8080,
            &[
                Ep::Remote("192.168.10.11"),
                Ep::Remote("192.168.10.12"),
                Ep::Remote("192.168.10.13"),
            ],
        ))
        .service(&service("ns", "other", "10.96.0.20", 80, tcp))
        .slice(slice("ns", "other", tcp, 8080, &[Ep::Remote("10.244.2.2")]))
        .service(&service("ns", "net-empty", "10.96.0.30", 80, tcp))
        .service(&affinity(service("ns", "net-sticky", "10.96.0.40", 80, tcp), 60))
        .slice(slice(
            "ns",
            "net-sticky",
            tcp,
            8080,
            &[Ep::Remote("192.168.10.21"), Ep::NotReady("192.168.10.22")],
        ));
    let mut local_only = service("ns", "net-local", "10.96.0.50", 80, tcp);
    local_only.internal_traffic_policy = TrafficPolicy::Local;
    e.service(&local_only)
        .slice(slice("ns", "net-local", tcp, 8080, &[Ep::Remote("192.168.10.31")]));
    e.update();
    e
}

#[test]
fn a_pod_reaches_the_services_on_its_networks_with_its_own_address() {
    let mut e = pod_engine();
    let mut syncer = pod_syncer();
    assert!(sync(&mut syncer, &mut e).full);
    let k = syncer.dataplane();
    let t = |dst: &str, port| k.trace(&pod_host(), local(NET1, dst, port));
    let web = t("10.96.0.10", 80);
    assert_eq!(
        web.summary(),
        "192.168.10.11:8080, 192.168.10.12:8080, 192.168.10.13:8080",
        "exact split, source kept"
    );
    for p in web.endpoints().values() {
        assert!((p - 1.0 / 3.0).abs() < 1e-12);
    }
    assert_eq!(
        t("10.96.0.20", 80).summary(),
        "10.96.0.20:80",
        "not on the pod's networks: untouched"
    );
    assert_eq!(t("10.96.0.30", 80).summary(), "REJECT", "no endpoints");
    assert_eq!(t("10.96.0.10", 443).summary(), "REJECT", "not a service port");
    assert_eq!(
        t("10.96.0.40", 80).summary(),
        "192.168.10.21:8080",
        "not-ready endpoints drop out"
    );
    assert_eq!(
        t("10.96.0.50", 80).summary(),
        "DROP",
        "internal Local, none on this node"
    );
    assert_eq!(t(NET1, 30080).summary(), "192.168.10.5:30080", "no node ports in a pod");
    let table = k.table(IpFamily::V4).expect("the pod's table");
    assert!(
        !table
            .chains
            .keys()
            .any(|c| c.base().is_some_and(|b| b.hook != crate::names::Hook::Output)),
        "output hooks only: {:?}",
        table.chains.keys().collect::<Vec<_>>()
    );
}

#[test]
fn a_new_filter_rewrites_the_pods_table() {
    let mut e = pod_engine();
    let mut syncer = pod_syncer();
    sync(&mut syncer, &mut e);
    syncer.set_filter(Box::new(|n: &ServiceName| &*n.name == "other"));
    let r = syncer
        .sync(&e.services, &e.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .unwrap();
    assert!(r.full, "the selection changed");
    let k = syncer.dataplane();
    let t = |dst: &str| k.trace(&pod_host(), local(NET1, dst, 80)).summary();
    assert_eq!(t("10.96.0.20"), "10.244.2.2:8080");
    assert_eq!(t("10.96.0.10"), "10.96.0.10:80", "no longer on its networks");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random endpoint changes synced partially into a pod's table equal a
    /// fresh full sync with the same selection.
    #[test]
    fn pod_partial_syncs_equal_a_fresh_full_sync(
        steps in proptest::collection::vec((0..4usize, proptest::collection::vec(any::<bool>(), 0..6)), 1..20)
    ) {
        let mut e = Engine::new(IpFamily::V4);
        let names = ["net-a", "net-b", "other-c", "net-d"];
        for (i, n) in names.iter().enumerate() {
            e.service(&service("ns", n, &format!("10.96.0.{}", i + 1), 80, Protocol::Tcp));
        }
        let mut syncer = pod_syncer();
        sync(&mut syncer, &mut e);
        for (i, picks) in steps {
            let addrs: Vec<String> = picks.iter().enumerate().filter(|(_, p)| **p)
                .map(|(j, _)| format!("192.168.10.{}", 10 * i + j + 1)).collect();
            let eps: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
            e.slice(slice("ns", names[i], Protocol::Tcp, 8080, &eps));
            let r = sync(&mut syncer, &mut e);
            prop_assert!(!r.full);
            let mut fresh = pod_syncer();
            fresh.sync(&e.services, &e.endpoints, &BTreeSet::new(), SyncKind::Changes).unwrap();
            prop_assert_eq!(syncer.dataplane(), fresh.dataplane());
        }
    }
}
