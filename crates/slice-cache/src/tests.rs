//! Table-style unit tests for the cache, one rule each.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceName, SliceEndpoint, SliceName};

use crate::{EndpointSliceCache, ServiceChange};

const NODE: &str = "node-1";

fn mk_cache() -> EndpointSliceCache {
    EndpointSliceCache::new(NODE, IpFamily::V4)
}

fn mk_ep(addr: &str) -> SliceEndpoint {
    SliceEndpoint::new(addr.parse().unwrap())
}

/// A slice of `svc` in namespace `ns` with one TCP port `http`/80.
fn mk_slice(name: &str, svc: &str, eps: &[&str]) -> EndpointSlice {
    eps.iter().fold(
        EndpointSlice::new("ns", name, svc)
            .unwrap()
            .with_port("http", Protocol::Tcp, 80),
        |s, a| s.with_endpoint(mk_ep(a)),
    )
}

fn svc(name: &str) -> ServiceName {
    ServiceName::new("ns", name)
}

/// The endpoints of `port`/TCP in a change's current state, as strings.
fn current(change: &ServiceChange, port: &str) -> Vec<String> {
    addrs(
        change
            .current
            .port(port, Protocol::Tcp)
            .map(|p| &p.endpoints[..])
            .unwrap_or(&[]),
    )
}

fn addrs(eps: &[slice_model::BaseEndpointInfo]) -> Vec<String> {
    eps.iter().map(|e| e.addr.to_string()).collect()
}

#[test]
fn new_slice_is_pending_until_checkout() {
    let mut c = mk_cache();
    assert!(c.update(mk_slice("web-a", "web", &["10.0.0.1"])));
    assert!(c.has_pending());
    let changes = c.checkout();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].service, svc("web"));
    assert!(changes[0].previous.is_empty());
    assert_eq!(current(&changes[0], "http"), ["10.0.0.1:80"]);
    assert!(!c.has_pending());
    assert!(c.checkout().is_empty());
}

#[test]
fn update_that_changes_nothing_queues_nothing() {
    let mut c = mk_cache();
    let s = mk_slice("web-a", "web", &["10.0.0.1"]);
    assert!(c.update(s.clone()));
    assert!(!c.update(s.clone()), "same as pending");
    let _ = c.checkout();
    assert!(!c.update(s.clone()), "same as applied");
    assert!(!c.has_pending());
    // The trigger time is not part of the content.
    assert!(!c.update(s.with_trigger_time(SystemTime::UNIX_EPOCH)));
}

#[test]
fn removing_an_unknown_slice_is_a_noop() {
    let mut c = mk_cache();
    assert!(!c.remove(&SliceName::new("ns", "nope")));
    assert!(!c.has_pending());
    assert_eq!(c.tracked_services(), 0);
}

#[test]
fn delete_drops_the_service_tracker() {
    let mut c = mk_cache();
    c.update(mk_slice("web-a", "web", &["10.0.0.1"]));
    c.update(mk_slice("web-b", "web", &["10.0.0.2"]));
    let _ = c.checkout();
    assert!(c.remove(&SliceName::new("ns", "web-a")));
    let ch = c.checkout();
    assert_eq!(current(&ch[0], "http"), ["10.0.0.2:80"]);
    assert_eq!(c.tracked_services(), 1);
    assert!(c.remove(&SliceName::new("ns", "web-b")));
    let ch = c.checkout();
    assert!(ch[0].current.is_empty());
    assert_eq!(c.tracked_services(), 0, "no leak (kubernetes#128928)");
    assert_eq!(c.known_slices(), 0);
    assert!(!c.remove(&SliceName::new("ns", "web-b")), "already gone");
}

#[test]
fn add_then_delete_before_sync_leaves_nothing_to_do() {
    let mut c = mk_cache();
    assert!(c.update(mk_slice("web-a", "web", &["10.0.0.1"])));
    assert!(c.remove(&SliceName::new("ns", "web-a")));
    assert!(!c.has_pending());
    assert_eq!(c.tracked_services(), 0);
}

#[test]
fn modify_and_revert_before_sync_leaves_nothing_to_do() {
    let mut c = mk_cache();
    c.update(mk_slice("web-a", "web", &["10.0.0.1"]));
    let _ = c.checkout();
    assert!(c.update(mk_slice("web-a", "web", &["10.0.0.2"])));
    assert!(c.update(mk_slice("web-a", "web", &["10.0.0.1"])));
    assert!(!c.has_pending());
}

#[test]
fn endpoint_moving_between_slices_keeps_the_service_unchanged() {
    let mut c = mk_cache();
    c.update(mk_slice("web-a", "web", &["10.0.0.1", "10.0.0.2"]));
    c.update(mk_slice("web-b", "web", &["10.0.0.3"]));
    let _ = c.checkout();
    // 10.0.0.2 moves from a to b: b gets it first, then a drops it.
    c.update(mk_slice("web-b", "web", &["10.0.0.3", "10.0.0.2"]));
    c.update(mk_slice("web-a", "web", &["10.0.0.1"]));
    let ch = c.checkout();
    assert_eq!(ch.len(), 1);
    assert_eq!(ch[0].previous, ch[0].current);
    assert_eq!(current(&ch[0], "http"), ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
}

#[test]
fn multiple_ports_named_and_unnamed() {
    let mut c = mk_cache();
    let s = EndpointSlice::new("ns", "dns-a", "dns")
        .unwrap()
        .with_port("dns", Protocol::Udp, 53)
        .with_port("dns-tcp", Protocol::Tcp, 53)
        .with_port("", Protocol::Tcp, 8080)
        .with_endpoint(mk_ep("10.0.0.9"));
    c.update(s);
    let ch = c.checkout();
    let ports: Vec<_> = ch[0]
        .current
        .ports()
        .iter()
        .map(|p| (p.name.to_string(), p.protocol, addrs(&p.endpoints)))
        .collect();
    assert_eq!(
        ports,
        [
            ("".into(), Protocol::Tcp, vec!["10.0.0.9:8080".to_string()]),
            ("dns".into(), Protocol::Udp, vec!["10.0.0.9:53".into()]),
            ("dns-tcp".into(), Protocol::Tcp, vec!["10.0.0.9:53".into()]),
        ]
    );
}

#[test]
fn same_port_name_with_two_protocols_is_two_service_ports() {
    let mut c = mk_cache();
    c.update(
        EndpointSlice::new("ns", "dns-a", "dns")
            .unwrap()
            .with_port("dns", Protocol::Udp, 53)
            .with_port("dns", Protocol::Tcp, 53)
            .with_endpoint(mk_ep("10.0.0.9")),
    );
    let ch = c.checkout();
    assert!(ch[0].current.port("dns", Protocol::Udp).is_some());
    assert!(ch[0].current.port("dns", Protocol::Tcp).is_some());
}

#[test]
fn duplicates_prefer_local_then_first_slice_by_name() {
    let mut c = mk_cache();
    // Not local in either: the slice whose name sorts first wins (its copy
    // is not ready).
    c.update(mk_slice("b", "web", &[]).with_endpoint(mk_ep("10.0.0.1").on_node("node-2")));
    c.update(
        mk_slice("a", "web", &[]).with_endpoint(mk_ep("10.0.0.1").on_node("node-3").with_conditions(
            slice_model::Conditions {
                ready: false,
                serving: false,
                terminating: false,
            },
        )),
    );
    let ch = c.checkout();
    let e = &ch[0].current.port("http", Protocol::Tcp).unwrap().endpoints;
    assert_eq!(e.len(), 1);
    assert!(!e[0].ready, "copy from slice a wins");

    // A local copy in the later slice beats the earlier non-local one.
    c.update(mk_slice("b", "web", &[]).with_endpoint(mk_ep("10.0.0.1").on_node(NODE)));
    let ch = c.checkout();
    let e = &ch[0].current.port("http", Protocol::Tcp).unwrap().endpoints;
    assert!(e[0].is_local && e[0].ready);

    // Local in both: the first slice by name wins again.
    c.update(
        mk_slice("a", "web", &[]).with_endpoint(mk_ep("10.0.0.1").on_node(NODE).with_conditions(
            slice_model::Conditions {
                ready: false,
                serving: true,
                terminating: true,
            },
        )),
    );
    let ch = c.checkout();
    let e = &ch[0].current.port("http", Protocol::Tcp).unwrap().endpoints;
    assert!(e[0].is_local && e[0].terminating);
}

#[test]
fn duplicates_within_one_slice_prefer_local() {
    let mut c = mk_cache();
    c.update(
        mk_slice("a", "web", &[])
            .with_endpoint(mk_ep("10.0.0.1").on_node("node-2"))
            .with_endpoint(
                mk_ep("10.0.0.1")
                    .on_node(NODE)
                    .with_conditions(slice_model::Conditions {
                        ready: false,
                        serving: false,
                        terminating: false,
                    }),
            ),
    );
    let ch = c.checkout();
    let e = &ch[0].current.port("http", Protocol::Tcp).unwrap().endpoints;
    assert_eq!(e.len(), 1);
    assert!(e[0].is_local && !e[0].ready);
}

#[test]
fn other_family_endpoints_are_ignored() {
    let mut c = EndpointSliceCache::new(NODE, IpFamily::V6);
    c.update(mk_slice("a", "web", &["10.0.0.1", "fd00::1", "::ffff:10.0.0.2"]));
    let ch = c.checkout();
    assert_eq!(current(&ch[0], "http"), ["[::ffff:10.0.0.2]:80", "[fd00::1]:80"]);
    // A change to the IPv4 endpoints only is no change for an IPv6 proxier.
    assert!(!c.update(mk_slice("a", "web", &["10.0.0.7", "fd00::1", "::ffff:10.0.0.2"])));

    let mut c4 = mk_cache();
    c4.update(mk_slice("a", "web", &["10.0.0.1", "fd00::1"]));
    assert_eq!(current(&c4.checkout()[0], "http"), ["10.0.0.1:80"]);
}

#[test]
fn locality_is_the_endpoints_node_being_the_caches() {
    // Which of nodeName and the topology hostname names the node (rule 2)
    // is the slice builder's to decide; the cache compares the result.
    let mut c = mk_cache();
    c.update(
        mk_slice("a", "web", &[])
            .with_endpoint(mk_ep("10.0.0.1").on_node(NODE))
            .with_endpoint(mk_ep("10.0.0.2"))
            .with_endpoint(mk_ep("10.0.0.3").on_node("node-2")),
    );
    let ch = c.checkout();
    let local: Vec<bool> = ch[0].current.ports()[0].endpoints.iter().map(|e| e.is_local).collect();
    assert_eq!(local, [true, false, false]);

    let mut nobody = EndpointSliceCache::new("", IpFamily::V4);
    nobody.update(mk_slice("a", "web", &[]).with_endpoint(mk_ep("10.0.0.1").on_node("")));
    assert!(!nobody.checkout()[0].current.ports()[0].endpoints[0].is_local);
}

#[test]
fn conditions_and_zone_hints_are_carried() {
    let mut c = mk_cache();
    c.update(
        mk_slice("a", "web", &[]).with_endpoint(
            mk_ep("10.0.0.1")
                .with_conditions(slice_model::Conditions {
                    ready: false,
                    serving: true,
                    terminating: true,
                })
                .with_zones(["zone-b", "zone-a"]),
        ),
    );
    let ch = c.checkout();
    let e = &ch[0].current.ports()[0].endpoints[0];
    assert_eq!((e.ready, e.serving, e.terminating), (false, true, true));
    assert_eq!(
        e.zone_hints.as_slice(),
        [std::sync::Arc::from("zone-a"), std::sync::Arc::from("zone-b")]
    );
}

#[test]
fn relabelled_slice_moves_to_its_new_service() {
    let mut c = mk_cache();
    c.update(mk_slice("s1", "old", &["10.0.0.1"]));
    let _ = c.checkout();
    assert!(c.update(mk_slice("s1", "new", &["10.0.0.1"])));
    let ch = c.checkout();
    let names: Vec<_> = ch.iter().map(|c| c.service.clone()).collect();
    assert_eq!(names, [svc("new"), svc("old")]);
    assert_eq!(current(&ch[0], "http"), ["10.0.0.1:80"]);
    assert!(ch[1].current.is_empty());
    assert_eq!(c.tracked_services(), 1, "the old service is forgotten");
    assert_eq!(c.service_of(&SliceName::new("ns", "s1")), Some(svc("new")));
    // DELETED finds it under its new service, whatever the event's label.
    assert!(c.remove(&SliceName::new("ns", "s1")));
    assert!(c.checkout()[0].current.is_empty());
    assert_eq!(c.tracked_services(), 0);
}

#[test]
fn relabel_away_and_back_within_one_sync() {
    let mut c = mk_cache();
    c.update(mk_slice("s1", "a", &["10.0.0.1"]));
    let _ = c.checkout();
    c.update(mk_slice("s1", "b", &["10.0.0.1"]));
    c.update(mk_slice("s1", "a", &["10.0.0.2"]));
    let ch = c.checkout();
    assert_eq!(ch.len(), 1, "b never applied anything");
    assert_eq!(current(&ch[0], "http"), ["10.0.0.2:80"]);
    assert_eq!(c.tracked_services(), 1);
}

#[test]
fn trigger_times_are_kept_for_real_changes_only() {
    let mut c = mk_cache();
    let t1 = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    let t2 = SystemTime::UNIX_EPOCH + Duration::from_secs(2);
    c.update(mk_slice("a", "web", &["10.0.0.1"]).with_trigger_time(t1));
    c.update(mk_slice("a", "web", &["10.0.0.1"]).with_trigger_time(t2));
    c.update(mk_slice("b", "web", &["10.0.0.2"]).with_trigger_time(t2));
    assert_eq!(c.checkout()[0].trigger_times, [t1, t2]);
    c.update(mk_slice("a", "web", &["10.0.0.3"]).with_trigger_time(t2));
    c.remove(&SliceName::new("ns", "b"));
    assert!(c.checkout()[0].trigger_times.is_empty(), "a deletion clears them");
}

#[test]
fn a_change_undone_before_the_checkout_leaves_no_trigger_time_behind() {
    let mut c = mk_cache();
    let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    c.update(mk_slice("a", "web", &["10.0.0.1"]));
    let _ = c.checkout();
    c.update(mk_slice("a", "web", &["10.0.0.2"]).with_trigger_time(at(1)));
    c.update(mk_slice("a", "web", &["10.0.0.1"]).with_trigger_time(at(2)));
    assert!(!c.has_pending(), "back to what is applied");
    c.update(mk_slice("a", "web", &["10.0.0.3"]).with_trigger_time(at(3)));
    assert_eq!(
        c.checkout()[0].trigger_times,
        [at(3)],
        "the undone change's times do not start this change's latency"
    );
}

#[test]
fn checkout_is_sorted_and_touches_only_changed_services() {
    let mut c = mk_cache();
    for s in ["c", "a", "b"] {
        c.update(mk_slice(&format!("{s}-1"), s, &["10.0.0.1"]));
    }
    let names: Vec<_> = c.checkout().into_iter().map(|c| c.service).collect();
    assert_eq!(names, [svc("a"), svc("b"), svc("c")]);
    c.update(mk_slice("b-1", "b", &["10.0.0.2"]));
    let ch = c.checkout();
    assert_eq!(ch.len(), 1);
    assert_eq!(
        ch[0].previous.ports()[0].endpoints[0].addr,
        "10.0.0.1:80".parse::<SocketAddr>().unwrap()
    );
}
