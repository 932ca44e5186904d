//! Property test: the cache + map against a naive model that recomputes
//! everything from scratch at every sync.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use endpoints_map::EndpointsMap;
use proptest::prelude::*;
use slice_cache::EndpointSliceCache;
use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceName, SliceContent, SliceEndpoint, SliceName, ZoneHints};

const NODE: &str = "n1";
const NAMESPACES: [&str; 2] = ["a", "b"];
const SLICES: [&str; 4] = ["s0", "s1", "s2", "s3"];
const SERVICES: [&str; 3] = ["x", "y", "z"];
const ADDRS: [&str; 6] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.0.10",
    "fd00::1",
    "fd00::2",
    "::ffff:10.0.0.1",
];
const PORTS: [(&str, Protocol, u16); 4] = [
    ("http", Protocol::Tcp, 80),
    ("dns", Protocol::Udp, 53),
    ("", Protocol::Udp, 5353),
    ("dns", Protocol::Tcp, 53),
];
const NODES: [Option<&str>; 4] = [None, Some("n1"), Some("n2"), Some("")];

#[derive(Clone, Debug)]
enum Op {
    Update {
        ns: usize,
        slice: usize,
        service: usize,
        content: SliceContent,
    },
    Remove {
        ns: usize,
        slice: usize,
    },
    Sync,
}

fn endpoint() -> impl Strategy<Value = SliceEndpoint> {
    (
        0..ADDRS.len(),
        0..NODES.len(),
        any::<bool>(),
        any::<(bool, bool, bool)>(),
        0..4usize,
    )
        .prop_map(|(a, n, topo, (ready, serving, terminating), zones)| {
            let mut e = SliceEndpoint::new(ADDRS[a].parse().expect("the fixed addresses parse")).with_conditions(
                slice_model::Conditions {
                    ready,
                    serving,
                    terminating,
                },
            );
            // Rule 2's fallback is resolved by the slice builder; here the
            // topology hostname only stands in when there is no node name.
            e.node = NODES[n].or(topo.then_some(NODE)).map(Into::into);
            e.zone_hints = ZoneHints::new([["za"], ["zb"], ["za"], ["zc"]][zones].into_iter().take(zones % 3));
            e
        })
}

fn content() -> impl Strategy<Value = SliceContent> {
    (
        proptest::sample::subsequence(&PORTS[..], 0..=3),
        proptest::collection::vec(endpoint(), 0..5),
    )
        .prop_map(|(ports, endpoints)| {
            let mut s = EndpointSlice::new("ns", "n", "svc").expect("named");
            for (name, proto, port) in ports {
                s = s.with_port(name, proto, port);
            }
            for e in endpoints {
                s = s.with_endpoint(e);
            }
            s.content
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..NAMESPACES.len(), 0..SLICES.len(), 0..SERVICES.len(), content())
            .prop_map(|(ns, slice, service, content)| Op::Update { ns, slice, service, content }),
        2 => (0..NAMESPACES.len(), 0..SLICES.len()).prop_map(|(ns, slice)| Op::Remove { ns, slice }),
        2 => Just(Op::Sync),
    ]
}

/// One service port's endpoints in the model: address -> (local, ready,
/// serving, terminating, zones).
type PortView = BTreeMap<SocketAddr, (bool, bool, bool, bool, Vec<String>)>;
type MapView = BTreeMap<(ServiceName, String, Protocol), PortView>;

/// The naive model: the latest state of every slice; everything else is
/// recomputed from it.
#[derive(Default)]
struct Model {
    slices: BTreeMap<SliceName, (String, SliceContent)>,
    family: Option<IpFamily>,
}

impl Model {
    fn family(&self) -> IpFamily {
        self.family.unwrap_or(IpFamily::V4)
    }

    fn filtered(&self, c: &SliceContent) -> SliceContent {
        c.clone().only_family(self.family())
    }

    fn view(&self) -> MapView {
        let mut view = MapView::new();
        // Slices of one service in name order (rule 11); BTreeMap order is
        // by namespace then name, which is name order within a service.
        for (name, (service, content)) in &self.slices {
            let svc = ServiceName::new(name.namespace.clone(), service.as_str());
            for port in &content.ports {
                let entry = view
                    .entry((svc.clone(), port.name.to_string(), port.protocol))
                    .or_default();
                for e in &content.endpoints {
                    if IpFamily::of(&e.addr) != self.family() {
                        continue;
                    }
                    let local = e.node.as_deref() == Some(NODE);
                    let zones: Vec<String> = e.zone_hints.as_slice().iter().map(|z| z.to_string()).collect();
                    let c = e.conditions;
                    let value = (local, c.ready, c.serving, c.terminating, zones);
                    let addr = SocketAddr::new(e.addr, port.port.get());
                    match entry.get(&addr) {
                        None => {
                            entry.insert(addr, value);
                        }
                        Some(old) if local && !old.0 => {
                            entry.insert(addr, value);
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        view.retain(|_, eps| !eps.is_empty());
        view
    }
}

fn actual_view(map: &EndpointsMap) -> MapView {
    let mut view = MapView::new();
    for (svc, port) in map.iter() {
        let eps = port
            .endpoints
            .iter()
            .map(|e| {
                let zones = e.zone_hints.as_slice().iter().map(|z| z.to_string()).collect();
                (e.addr, (e.is_local, e.ready, e.serving, e.terminating, zones))
            })
            .collect();
        assert!(
            view.insert((svc.clone(), port.name.to_string(), port.protocol), eps)
                .is_none()
        );
    }
    view
}

fn local_ready(view: &MapView) -> BTreeMap<ServiceName, usize> {
    let mut ips: BTreeMap<ServiceName, BTreeSet<IpAddr>> = BTreeMap::new();
    for ((svc, _, _), eps) in view {
        for (addr, (local, ready, ..)) in eps {
            if *local && *ready {
                ips.entry(svc.clone()).or_default().insert(addr.ip());
            }
        }
    }
    ips.into_iter().map(|(k, v)| (k, v.len())).collect()
}

fn run(ops: Vec<Op>, family: IpFamily) {
    let mut cache = EndpointSliceCache::new(NODE, family);
    let mut map = EndpointsMap::new();
    let mut model = Model {
        family: Some(family),
        ..Model::default()
    };
    let mut before = MapView::new();
    for op in ops.into_iter().chain([Op::Sync]) {
        match op {
            Op::Update {
                ns,
                slice,
                service,
                content,
            } => {
                let name = SliceName::new(NAMESPACES[ns], SLICES[slice]);
                let expect_change = match model.slices.get(&name) {
                    Some((svc, old)) => svc != SERVICES[service] || model.filtered(old) != model.filtered(&content),
                    None => true,
                };
                let mut s = EndpointSlice::new(NAMESPACES[ns], SLICES[slice], SERVICES[service]).expect("named");
                s.content = content.clone();
                assert_eq!(cache.update(s), expect_change, "update's return value");
                model.slices.insert(name, (SERVICES[service].to_string(), content));
            }
            Op::Remove { ns, slice } => {
                let name = SliceName::new(NAMESPACES[ns], SLICES[slice]);
                let known = model.slices.remove(&name).is_some();
                assert_eq!(cache.remove(&name), known, "remove's return value");
            }
            Op::Sync => {
                let result = map.update(&mut cache);
                let after = model.view();
                assert_eq!(actual_view(&map), after, "endpoints map");

                let mut stale = BTreeSet::new();
                let mut stale_services = BTreeSet::new();
                for (key, old) in before.iter().filter(|(k, _)| k.2 == Protocol::Udp) {
                    for (addr, v) in old {
                        if after.get(key).and_then(|n| n.get(addr)).is_none_or(|n| n.0 != v.0) {
                            stale.insert((key.clone(), *addr));
                        }
                    }
                }
                for key in after.keys().filter(|k| k.2 == Protocol::Udp) {
                    if !before.contains_key(key) {
                        stale_services.insert(key.clone());
                    }
                }
                let got_stale: BTreeSet<_> = result
                    .stale_endpoints
                    .iter()
                    .map(|s| {
                        let p = &s.service_port;
                        ((p.service.clone(), p.port.to_string(), p.protocol), s.endpoint)
                    })
                    .collect();
                assert_eq!(
                    got_stale.len(),
                    result.stale_endpoints.len(),
                    "no duplicate stale endpoints"
                );
                assert_eq!(got_stale, stale, "stale endpoints");
                let got_services: BTreeSet<_> = result
                    .stale_service_names
                    .iter()
                    .map(|p| (p.service.clone(), p.port.to_string(), p.protocol))
                    .collect();
                assert_eq!(got_services, stale_services, "stale services");

                let want_local = local_ready(&after);
                let got_local: BTreeMap<ServiceName, usize> = map
                    .local_ready_endpoints()
                    .into_iter()
                    .map(|(k, v)| (k.clone(), v))
                    .collect();
                assert_eq!(got_local, want_local, "local ready counts");

                let services = |v: &MapView| -> BTreeMap<ServiceName, Vec<_>> {
                    let mut m: BTreeMap<ServiceName, Vec<_>> = BTreeMap::new();
                    for (k, eps) in v {
                        m.entry(k.0.clone()).or_default().push((k.1.clone(), k.2, eps.clone()));
                    }
                    m
                };
                let (b, a) = (services(&before), services(&after));
                let changed: Vec<ServiceName> = b
                    .keys()
                    .chain(a.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|s| b.get(*s) != a.get(*s))
                    .cloned()
                    .collect();
                assert_eq!(result.changed_services, changed, "changed services");
                assert!(!cache.has_pending());
                before = after;
            }
        }
    }
    // Delete everything: no tracker may remain (kubernetes#128928).
    for name in model.slices.keys() {
        assert!(cache.remove(name));
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
    fn cache_and_map_match_the_model_ipv4(ops in proptest::collection::vec(op(), 0..40)) {
        run(ops, IpFamily::V4);
    }

    #[test]
    fn cache_and_map_match_the_model_ipv6(ops in proptest::collection::vec(op(), 0..40)) {
        run(ops, IpFamily::V6);
    }
}
