//! Property test: the cache and the map against [`Reference`], the naive
//! model that recomputes everything from scratch at every sync, fed the
//! same random slices (`slice_model::strategies`: duplicates across slices,
//! relabels, both families, hints, every condition).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use endpoints_map::EndpointsMap;
use endpoints_map::reference::{MapSnapshot, Reference};
use proptest::prelude::*;
use slice_cache::EndpointSliceCache;
use slice_model::strategies::{NAMESPACES, NODES, SLICES, endpoint_slice};
use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceName, ServicePortName, SliceName};

#[derive(Clone, Debug)]
enum Op {
    Update(EndpointSlice),
    Remove(SliceName),
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => endpoint_slice().prop_map(Op::Update),
        2 => (0..NAMESPACES.len(), 0..SLICES.len()).prop_map(|(ns, s)| Op::Remove(SliceName::new(NAMESPACES[ns], SLICES[s]))),
        2 => Just(Op::Sync),
    ]
}

/// The UDP endpoints conntrack may still point at: gone, or with their
/// locality flipped.
fn stale(before: &MapSnapshot, after: &MapSnapshot) -> BTreeSet<(ServicePortName, SocketAddr)> {
    let mut out = BTreeSet::new();
    for (port, old) in before.iter().filter(|(p, _)| p.protocol == Protocol::Udp) {
        for e in old {
            let now = after.get(port).and_then(|n| n.iter().find(|x| x.addr == e.addr));
            if now.is_none_or(|n| n.is_local != e.is_local) {
                out.insert((port.clone(), e.addr));
            }
        }
    }
    out
}

fn local_ready(view: &MapSnapshot) -> BTreeMap<ServiceName, usize> {
    let mut ips: BTreeMap<ServiceName, BTreeSet<IpAddr>> = BTreeMap::new();
    for (port, eps) in view {
        for e in eps.iter().filter(|e| e.is_local && e.ready) {
            ips.entry(port.service.clone()).or_default().insert(e.addr.ip());
        }
    }
    ips.into_iter().map(|(k, v)| (k, v.len())).collect()
}

fn by_service(v: &MapSnapshot) -> BTreeMap<&ServiceName, Vec<(&ServicePortName, &Vec<slice_model::BaseEndpointInfo>)>> {
    let mut m: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for (k, eps) in v {
        m.entry(&k.service).or_default().push((k, eps));
    }
    m
}

fn run(ops: Vec<Op>, family: IpFamily) {
    let node = NODES[0];
    let mut cache = EndpointSliceCache::new(node, family);
    let mut map = EndpointsMap::new();
    let mut reference = Reference::new(node, family);
    let mut before = MapSnapshot::new();
    for op in ops.into_iter().chain([Op::Sync]) {
        match op {
            Op::Update(slice) => {
                let of_family = |s: &EndpointSlice| (s.service.clone(), s.content.clone().only_family(family));
                let expect_change = reference
                    .slice(&slice.name)
                    .is_none_or(|old| of_family(old) != of_family(&slice));
                assert_eq!(cache.update(slice.clone()), expect_change, "update's return value");
                reference.update(slice);
            }
            Op::Remove(name) => {
                let known = reference.slice(&name).is_some();
                reference.remove(&name);
                assert_eq!(cache.remove(&name), known, "remove's return value");
            }
            Op::Sync => {
                let result = map.update(&mut cache);
                let after = reference.snapshot();
                assert_eq!(map.snapshot(), after, "endpoints map");

                let got_stale: BTreeSet<_> = result
                    .stale_endpoints
                    .iter()
                    .map(|s| (s.service_port.clone(), s.endpoint))
                    .collect();
                assert_eq!(
                    got_stale.len(),
                    result.stale_endpoints.len(),
                    "no duplicate stale endpoints"
                );
                assert_eq!(got_stale, stale(&before, &after), "stale endpoints");
                let new_udp: BTreeSet<_> = after
                    .keys()
                    .filter(|k| k.protocol == Protocol::Udp && !before.contains_key(*k))
                    .cloned()
                    .collect();
                let got_services: BTreeSet<_> = result.stale_service_names.iter().cloned().collect();
                assert_eq!(got_services, new_udp, "stale services");

                let got_local: BTreeMap<ServiceName, usize> = map
                    .local_ready_endpoints()
                    .into_iter()
                    .map(|(k, v)| (k.clone(), v))
                    .collect();
                assert_eq!(got_local, local_ready(&after), "local ready counts");

                let (b, a) = (by_service(&before), by_service(&after));
                let changed: Vec<ServiceName> = b
                    .keys()
                    .chain(a.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|s| b.get(**s) != a.get(**s))
                    .map(|s| (*s).clone())
                    .collect();
                assert_eq!(result.changed_services, changed, "changed services");
                assert!(!cache.has_pending());
                before = after;
            }
        }
    }
    // Delete everything: no tracker may remain (kubernetes#128928).
    for name in reference.slice_names() {
        assert!(cache.remove(&name));
    }
    let _ = map.update(&mut cache);
    assert_eq!(cache.tracked_services(), 0, "trackers left behind");
    assert_eq!(cache.known_slices(), 0);
    assert!(map.is_empty());
    assert!(map.local_ready_endpoints().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn cache_and_map_match_the_reference_ipv4(ops in proptest::collection::vec(op(), 0..40)) {
        run(ops, IpFamily::V4);
    }

    #[test]
    fn cache_and_map_match_the_reference_ipv6(ops in proptest::collection::vec(op(), 0..40)) {
        run(ops, IpFamily::V6);
    }
}
