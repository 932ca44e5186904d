//! Unit tests for the map: stale detection, local-ready counts, changed
//! services, trigger times.

use std::time::{Duration, SystemTime};

use slice_cache::EndpointSliceCache;
use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceName, ServicePortName, SliceEndpoint, SliceName};

use crate::{EndpointsMap, UpdateResult};

const NODE: &str = "node-1";

struct Fixture {
    cache: EndpointSliceCache,
    map: EndpointsMap,
}

impl Fixture {
    fn new() -> Self {
        Self {
            cache: EndpointSliceCache::new(NODE, IpFamily::V4),
            map: EndpointsMap::new(),
        }
    }
    fn put(&mut self, s: EndpointSlice) -> &mut Self {
        self.cache.update(s);
        self
    }
    fn del(&mut self, name: &str) -> &mut Self {
        self.cache.remove(&SliceName::new("ns", name));
        self
    }
    fn sync(&mut self) -> UpdateResult {
        self.map.update(&mut self.cache)
    }
}

fn mk_ep(addr: &str) -> SliceEndpoint {
    SliceEndpoint::new(addr.parse().unwrap())
}

fn mk_udp(name: &str, svc: &str, eps: Vec<SliceEndpoint>) -> EndpointSlice {
    eps.into_iter().fold(
        EndpointSlice::new("ns", name, svc)
            .unwrap()
            .with_port("dns", Protocol::Udp, 53),
        |s, e| s.with_endpoint(e),
    )
}

fn mk_tcp(name: &str, svc: &str, eps: Vec<SliceEndpoint>) -> EndpointSlice {
    eps.into_iter().fold(
        EndpointSlice::new("ns", name, svc)
            .unwrap()
            .with_port("http", Protocol::Tcp, 80),
        |s, e| s.with_endpoint(e),
    )
}

fn spn(svc: &str, port: &str, p: Protocol) -> ServicePortName {
    ServicePortName::new(ServiceName::new("ns", svc), port, p)
}

fn stale(r: &UpdateResult) -> Vec<String> {
    r.stale_endpoints.iter().map(|s| s.to_string()).collect()
}

#[test]
fn udp_endpoint_removed_is_stale_tcp_is_not() {
    let mut f = Fixture::new();
    f.put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.1"), mk_ep("10.0.0.2")]))
        .put(mk_tcp("web-a", "web", vec![mk_ep("10.0.1.1")]));
    let _ = f.sync();
    f.put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.2")]))
        .put(mk_tcp("web-a", "web", vec![]));
    let r = f.sync();
    assert_eq!(stale(&r), ["ns/dns:dns/UDP -> 10.0.0.1:53"]);
    assert!(r.stale_service_names.is_empty());
    assert_eq!(
        r.changed_services,
        [ServiceName::new("ns", "dns"), ServiceName::new("ns", "web")]
    );
}

#[test]
fn udp_service_from_zero_endpoints_is_stale() {
    let mut f = Fixture::new();
    let r = f.put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.1")])).sync();
    assert_eq!(r.stale_service_names, [spn("dns", "dns", Protocol::Udp)]);
    // 1 -> 2 endpoints: not stale.
    let r = f
        .put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.1"), mk_ep("10.0.0.2")]))
        .sync();
    assert!(r.stale_service_names.is_empty() && r.stale_endpoints.is_empty());
    // Down to zero and back up: stale endpoints, then a stale service.
    let r = f.put(mk_udp("dns-a", "dns", vec![])).sync();
    assert_eq!(r.stale_endpoints.len(), 2);
    let r = f.put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.3")])).sync();
    assert_eq!(r.stale_service_names, [spn("dns", "dns", Protocol::Udp)]);
    // TCP never.
    let r = f.put(mk_tcp("web-a", "web", vec![mk_ep("10.0.1.1")])).sync();
    assert!(r.stale_service_names.is_empty());
}

#[test]
fn deleting_the_last_udp_slice_makes_all_endpoints_stale() {
    let mut f = Fixture::new();
    f.put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.1")]));
    let _ = f.sync();
    let r = f.del("dns-a").sync();
    assert_eq!(stale(&r), ["ns/dns:dns/UDP -> 10.0.0.1:53"]);
    assert!(f.map.is_empty());
    assert!(f.map.service(&ServiceName::new("ns", "dns")).is_none());
}

#[test]
fn locality_flip_is_stale_readiness_flip_is_not() {
    let mut f = Fixture::new();
    f.put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.1").on_node("node-2")]));
    let _ = f.sync();
    let r = f
        .put(mk_udp(
            "dns-a",
            "dns",
            vec![
                mk_ep("10.0.0.1")
                    .on_node("node-2")
                    .with_conditions(slice_model::Conditions {
                        ready: false,
                        serving: false,
                        terminating: false,
                    }),
            ],
        ))
        .sync();
    assert!(r.stale_endpoints.is_empty());
    assert_eq!(r.changed_services.len(), 1, "readiness is a change to program");
    let r = f
        .put(mk_udp("dns-a", "dns", vec![mk_ep("10.0.0.1").on_node(NODE)]))
        .sync();
    assert_eq!(stale(&r), ["ns/dns:dns/UDP -> 10.0.0.1:53"]);
}

#[test]
fn endpoint_moving_between_slices_is_not_stale_nor_a_change() {
    let mut f = Fixture::new();
    f.put(mk_udp("a", "dns", vec![mk_ep("10.0.0.1"), mk_ep("10.0.0.2")]))
        .put(mk_udp("b", "dns", vec![]));
    let _ = f.sync();
    let r = f
        .put(mk_udp("b", "dns", vec![mk_ep("10.0.0.2")]))
        .put(mk_udp("a", "dns", vec![mk_ep("10.0.0.1")]))
        .sync();
    assert_eq!(r, UpdateResult::default());
}

#[test]
fn local_ready_counts_distinct_ips_across_ports() {
    let mut f = Fixture::new();
    let s = EndpointSlice::new("ns", "web-a", "web")
        .unwrap()
        .with_port("http", Protocol::Tcp, 80)
        .with_port("https", Protocol::Tcp, 443)
        .with_endpoint(mk_ep("10.0.0.1").on_node(NODE))
        .with_endpoint(
            mk_ep("10.0.0.2")
                .on_node(NODE)
                .with_conditions(slice_model::Conditions {
                    ready: false,
                    serving: true,
                    terminating: true,
                }),
        )
        .with_endpoint(mk_ep("10.0.0.3").on_node("node-2"));
    let r = f.put(s).sync();
    let web = ServiceName::new("ns", "web");
    assert_eq!(r.local_ready_changes, [(web.clone(), 1)]);
    assert_eq!(f.map.local_ready_count(&web), 1);
    assert_eq!(f.map.local_ready_endpoints(), [(&web, 1)]);
    // A service with none is absent.
    f.put(mk_tcp("other-a", "other", vec![mk_ep("10.0.9.9")]));
    let r = f.sync();
    assert!(r.local_ready_changes.is_empty());
    assert_eq!(f.map.local_ready_endpoints().len(), 1);
    // Gone: reported as 0 and removed.
    let r = f.del("web-a").sync();
    assert_eq!(r.local_ready_changes, [(web.clone(), 0)]);
    assert!(f.map.local_ready_endpoints().is_empty());
}

#[test]
fn lookups_and_ordering() {
    let mut f = Fixture::new();
    f.put(mk_tcp("b-1", "b", vec![mk_ep("10.0.0.10"), mk_ep("10.0.0.2")]))
        .put(mk_udp("a-1", "a", vec![mk_ep("10.0.0.1")]));
    let _ = f.sync();
    assert_eq!(f.map.len(), 2);
    let order: Vec<String> = f
        .map
        .iter()
        .map(|(s, p)| EndpointsMap::port_name(s, p).to_string())
        .collect();
    assert_eq!(order, ["ns/a:dns/UDP", "ns/b:http/TCP"]);
    let eps = f.map.get(&spn("b", "http", Protocol::Tcp)).unwrap();
    let addrs: Vec<String> = eps.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(addrs, ["10.0.0.2:80", "10.0.0.10:80"], "sorted by address, not text");
    assert!(f.map.get(&spn("b", "http", Protocol::Udp)).is_none());
}

#[test]
fn trigger_times_are_reported_per_service() {
    let mut f = Fixture::new();
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
    let r = f
        .put(mk_tcp("a", "web", vec![mk_ep("10.0.0.1")]).with_trigger_time(t))
        .sync();
    assert_eq!(
        r.last_change_trigger_times.get(&ServiceName::new("ns", "web")),
        Some(&vec![t])
    );
    let r = f.sync();
    assert!(r.last_change_trigger_times.is_empty());
}

#[test]
fn applying_a_whole_checkout_matches_updating_service_by_service() {
    // `update` applies each change as the cache merges it; `apply` takes a
    // collected checkout. Both must leave the same map and report the same.
    let mut streamed = Fixture::new();
    let mut collected = Fixture::new();
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(7);
    let steps: Vec<Vec<EndpointSlice>> = vec![
        vec![
            mk_udp("a", "dns", vec![mk_ep("10.0.0.1").on_node(NODE), mk_ep("10.0.0.2")]),
            mk_tcp("b", "web", vec![mk_ep("10.0.1.1")]).with_trigger_time(t),
        ],
        vec![
            mk_udp("a", "dns", vec![mk_ep("10.0.0.2")]),
            mk_tcp("c", "web", vec![mk_ep("10.0.1.2").on_node(NODE)]),
        ],
    ];
    for step in steps {
        for s in step {
            streamed.put(s.clone());
            collected.put(s);
        }
        let a = streamed.sync();
        let b = collected.map.apply(collected.cache.checkout());
        assert_eq!(a, b);
        assert!(!a.changed_services.is_empty(), "each step changes something");
        let view = |m: &EndpointsMap| format!("{:?} {:?}", m.iter().collect::<Vec<_>>(), m.local_ready_endpoints());
        assert_eq!(view(&streamed.map), view(&collected.map));
    }
    streamed.del("a");
    collected.del("a");
    assert_eq!(streamed.sync(), collected.map.apply(collected.cache.checkout()));
}
