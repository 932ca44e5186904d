//! The reader against a naive model: random sequences of watch events
//! (adds, updates, deletes, watches that go down and miss changes, relists
//! that drop objects, lists abandoned part-way, slices moving between
//! services, both families) end in a view that equals what the final set
//! of objects says, and every subscriber holds the last value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use informer_glue::fold::EventFold;
use informer_glue::tombstone::{SlimServices, SlimSlices};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use proptest::prelude::*;
use slice_model::ServiceName;

use crate::store::{Services, Slices, Store, lock};

const SERVICES: [&str; 3] = ["s0", "s1", "s2"];
const SLICES: usize = 4;

/// One slice as the server holds it: its service, family and endpoints
/// (an address index and whether it is ready).
#[derive(Clone, Debug)]
struct SliceState {
    service: usize,
    v6: bool,
    endpoints: Vec<(u8, bool)>,
}

#[derive(Clone, Debug)]
enum Op {
    PutSlice(usize, SliceState),
    DeleteSlice(usize),
    PutService(usize),
    DeleteService(usize),
    /// The watch goes down: the changes until the next relist are missed.
    WatchDown,
    /// A complete relist of both kinds.
    Relist,
    /// A relist abandoned after `n` objects (then a complete one follows
    /// only when the sequence says so).
    AbandonedList(usize),
}

fn slice_state() -> impl Strategy<Value = SliceState> {
    (
        0..SERVICES.len(),
        any::<bool>(),
        prop::collection::vec((0u8..4, any::<bool>()), 0..4),
    )
        .prop_map(|(service, v6, endpoints)| SliceState { service, v6, endpoints })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SLICES, slice_state()).prop_map(|(i, s)| Op::PutSlice(i, s)),
        1 => (0..SLICES).prop_map(Op::DeleteSlice),
        2 => (0..SERVICES.len()).prop_map(Op::PutService),
        1 => (0..SERVICES.len()).prop_map(Op::DeleteService),
        1 => Just(Op::WatchDown),
        1 => Just(Op::Relist),
        1 => (0..4usize).prop_map(Op::AbandonedList),
    ]
}

fn meta(name: &str, version: u64) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        resource_version: Some(version.to_string()),
        ..ObjectMeta::default()
    }
}

fn address(v6: bool, i: u8) -> String {
    if v6 {
        format!("fd00::{}", i + 1)
    } else {
        format!("10.0.0.{}", i + 1)
    }
}

fn service_object(i: usize, version: u64) -> Service {
    Service {
        metadata: meta(SERVICES[i], version),
        spec: Some(ServiceSpec {
            cluster_ip: Some(format!("10.96.0.{}", i + 1)),
            ports: Some(vec![ServicePort {
                name: Some("p".into()),
                port: 80,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn slice_object(i: usize, s: &SliceState, version: u64) -> EndpointSlice {
    let mut m = meta(&format!("slice-{i}"), version);
    m.labels = Some([("kubernetes.io/service-name".to_owned(), SERVICES[s.service].to_owned())].into());
    EndpointSlice {
        metadata: m,
        address_type: if s.v6 { "IPv6" } else { "IPv4" }.into(),
        endpoints: Some(
            s.endpoints
                .iter()
                .map(|(a, ready)| Endpoint {
                    addresses: vec![address(s.v6, *a)],
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        ..EndpointConditions::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
        ),
        ports: Some(vec![EndpointPort {
            name: Some("p".into()),
            port: Some(8080),
            ..EndpointPort::default()
        }]),
    }
}

/// The server: current objects, each with its version.
#[derive(Default)]
struct Server {
    version: u64,
    services: BTreeMap<usize, u64>,
    slices: BTreeMap<usize, (SliceState, u64)>,
}

/// The reader's writer side, fed as its watches feed it.
struct Fed {
    services: (EventFold<Service, SlimServices>, Services),
    slices: (EventFold<EndpointSlice, SlimSlices>, Slices),
}

impl Fed {
    fn service(&mut self, e: Event<Service>) {
        self.services.0.apply(e, &mut self.services.1);
    }

    fn slice(&mut self, e: Event<EndpointSlice>) {
        self.slices.0.apply(e, &mut self.slices.1);
    }

    /// A list of both kinds, the first `complete` objects of each, or all
    /// of them and done.
    fn list(&mut self, server: &Server, complete: Option<usize>) {
        self.service(Event::Init);
        self.slice(Event::Init);
        let take = complete.unwrap_or(usize::MAX);
        for (i, v) in server.services.iter().take(take) {
            self.service(Event::InitApply(service_object(*i, *v)));
        }
        for (i, (s, v)) in server.slices.iter().take(take) {
            self.slice(Event::InitApply(slice_object(*i, s, *v)));
        }
        if complete.is_none() {
            self.service(Event::InitDone);
            self.slice(Event::InitDone);
        }
    }
}

/// What the final objects say: per existing service, its endpoints
/// (address, ready) from every slice labelled for it, one per address,
/// the first slice by name winning.
fn model(server: &Server) -> BTreeMap<String, BTreeSet<(String, bool)>> {
    let mut out = BTreeMap::new();
    for i in server.services.keys() {
        let mut seen = BTreeSet::new();
        let mut endpoints = BTreeSet::new();
        for (s, _) in server.slices.values().filter(|(s, _)| s.service == *i) {
            for (a, ready) in &s.endpoints {
                let addr = address(s.v6, *a);
                if seen.insert(addr.clone()) {
                    endpoints.insert((addr, *ready));
                }
            }
        }
        out.insert(SERVICES[*i].to_owned(), endpoints);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_view_is_what_the_final_objects_say(ops in prop::collection::vec(op(), 0..40)) {
        let (store, _ready) = Store::new(crate::Location::default());
        let store = Arc::new(Mutex::new(store));
        let names: Vec<ServiceName> = SERVICES.iter().map(|s| ServiceName::new("ns", *s)).collect();
        let mut subscribers: Vec<_> = names.iter().map(|n| lock(&store).subscribe(n)).collect();
        let mut fed = Fed {
            services: (EventFold::new().keeping(SlimServices), Services(store.clone())),
            slices: (EventFold::new().keeping(SlimSlices), Slices(store.clone())),
        };
        let mut server = Server::default();
        fed.list(&server, None);
        let mut up = true;
        for op in ops {
            server.version += 1;
            let v = server.version;
            match op {
                Op::PutSlice(i, s) => {
                    let obj = slice_object(i, &s, v);
                    server.slices.insert(i, (s, v));
                    if up { fed.slice(Event::Apply(obj)); }
                }
                Op::DeleteSlice(i) => {
                    if let Some((s, old)) = server.slices.remove(&i)
                        && up
                    {
                        fed.slice(Event::Delete(slice_object(i, &s, old)));
                    }
                }
                Op::PutService(i) => {
                    server.services.insert(i, v);
                    if up { fed.service(Event::Apply(service_object(i, v))); }
                }
                Op::DeleteService(i) => {
                    if server.services.remove(&i).is_some() && up {
                        fed.service(Event::Delete(service_object(i, v)));
                    }
                }
                Op::WatchDown => up = false,
                Op::Relist => {
                    fed.list(&server, None);
                    up = true;
                }
                Op::AbandonedList(n) => fed.list(&server, Some(n)),
            }
        }
        fed.list(&server, None);

        let want = model(&server);
        for (name, rx) in names.iter().zip(subscribers.iter_mut()) {
            let got = lock(&store).get(name);
            let endpoints = got.as_ref().map(|v| {
                v.endpoints()
                    .map(|e| (e.addr.ip().to_string(), e.ready))
                    .collect::<BTreeSet<_>>()
            });
            prop_assert_eq!(endpoints.as_ref(), want.get(&*name.name), "{}", name);
            prop_assert_eq!(&*rx.borrow_and_update(), &got, "{}'s subscriber holds the last value", name);
        }
    }
}

/// Asking about names that have no Service, and letting go, keeps memory
/// bounded: the entries of names nobody receives from any more are swept
/// as the map doubles, so a million names leave at most twice the live
/// subscriptions (and at least the 128 a sweep waits for).
#[test]
fn names_asked_about_and_let_go_are_not_kept() {
    let (store, _ready) = Store::new(crate::Location::default());
    let mut store = store;
    let kept: Vec<_> = (0..10)
        .map(|i| store.subscribe(&ServiceName::new("kept", format!("s{i}"))))
        .collect();
    let mut most = 0;
    for i in 0..1_000_000u32 {
        drop(store.subscribe(&ServiceName::new("asked", format!("name-{i}"))));
        most = most.max(store.subscription_entries());
    }
    assert!(most <= 128, "at most {most} entries at once");
    assert_eq!(kept.len(), 10);
    // The kept ones still hear of their service.
    use informer_glue::fold::EventHandler;
    let mut handler = Services(Arc::new(Mutex::new(store)));
    let k8s = Service {
        metadata: ObjectMeta {
            name: Some("s3".into()),
            namespace: Some("kept".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.3".into()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    handler.on_add(&k8s);
    assert!(
        kept[3].has_changed().unwrap(),
        "a live subscription survives the sweeps"
    );
}

mod any_location {
    //! Routing and facts asked for any location against a naive model of
    //! kube-proxy's merge on that node, and against a reader configured
    //! there.

    use std::net::{IpAddr, SocketAddr};
    use std::num::NonZeroU16;

    use proptest::prelude::*;
    use slice_model::{
        Conditions, EndpointFacts, EndpointSlice, Protocol, ServiceInfo, ServiceName, ServicePort, SliceContent,
        SliceEndpoint, TrafficPolicy,
    };

    use super::Arc;
    use crate::{Location, ServiceEndpoints, Traffic};

    const NODES: [Option<&str>; 3] = [None, Some("node-a"), Some("node-b")];

    /// One copy of an endpoint in a slice.
    #[derive(Clone, Debug)]
    struct Copy {
        ip: u8,
        node: Option<&'static str>,
        ready: bool,
        serving: bool,
        hinted_for: Option<&'static str>,
    }

    fn copy() -> impl Strategy<Value = Copy> {
        (0u8..4, 0usize..3, any::<bool>(), any::<bool>(), 0usize..3).prop_map(|(ip, node, ready, serving, hint)| Copy {
            ip,
            node: NODES[node],
            ready,
            serving: serving || ready,
            hinted_for: NODES[hint],
        })
    }

    /// Up to three slices (named s0, s1, ... in merge order), each with
    /// its port number (two slices may agree or not) and copies.
    fn slices() -> impl Strategy<Value = Vec<(u16, Vec<Copy>)>> {
        prop::collection::vec((80u16..82, prop::collection::vec(copy(), 0..5)), 1..4)
    }

    fn ip(i: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, i])
    }

    /// Each slice's content; a copy's hostname names its slice, so that
    /// whose facts are kept shows.
    fn contents(spec: &[(u16, Vec<Copy>)]) -> Vec<Arc<SliceContent>> {
        spec.iter()
            .enumerate()
            .map(|(k, (port, copies))| {
                let mut slice = EndpointSlice::new("ns", &format!("s{k}"), "web")
                    .expect("named")
                    .with_port("http", Protocol::Tcp, *port);
                let mut seen = std::collections::BTreeSet::new();
                for c in copies.iter().filter(|c| seen.insert(c.ip)) {
                    let mut e = SliceEndpoint::new(ip(c.ip))
                        .with_conditions(Conditions::from_api(Some(c.ready), Some(c.serving), Some(!c.ready)))
                        .with_node_hints(c.hinted_for)
                        .with_facts(EndpointFacts {
                            hostname: Some(format!("s{k}").into()),
                            node_name: c.node.map(Into::into),
                            ..EndpointFacts::default()
                        });
                    if let Some(n) = c.node {
                        e = e.on_node(n);
                    }
                    slice = slice.with_endpoint(e);
                }
                let mut content = slice.content;
                content.normalize();
                Arc::new(content)
            })
            .collect()
    }

    fn service(local: bool) -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", "web"));
        s.cluster_ips = vec![IpAddr::from([10, 96, 0, 1])];
        s.ports = vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: NonZeroU16::MIN.saturating_add(79),
            node_port: None,
            app_protocol: None,
        }];
        if local {
            s.internal_traffic_policy = TrafficPolicy::Local;
        }
        s
    }

    /// kube-proxy's merge on `node`, naively: per address and port, the
    /// first copy by slice name unless a later one is on `node`. Each
    /// entry: address, whether the kept copy is on `node`, ready, and the
    /// slice whose copy was kept.
    fn naive(spec: &[(u16, Vec<Copy>)], node: Option<&str>) -> Vec<(SocketAddr, bool, bool, String)> {
        let mut kept: std::collections::BTreeMap<SocketAddr, (bool, bool, String)> = Default::default();
        for (k, (port, copies)) in spec.iter().enumerate() {
            let mut seen = std::collections::BTreeSet::new();
            for c in copies.iter().filter(|c| seen.insert(c.ip)) {
                let local = node.is_some() && c.node == node;
                let at = SocketAddr::new(ip(c.ip), *port);
                let replace = kept.get(&at).is_none_or(|(was_local, ..)| !was_local && local);
                if replace {
                    kept.insert(at, (local, c.ready, format!("s{k}")));
                }
            }
        }
        kept.into_iter().map(|(a, (l, r, s))| (a, l, r, s)).collect()
    }

    /// Whose facts an address has on `node`, naively: the first slice
    /// holding it, unless a later one holds it on `node` (whatever the
    /// ports: the facts are the address's).
    fn naive_facts(spec: &[(u16, Vec<Copy>)], node: Option<&str>) -> Vec<(IpAddr, String)> {
        let mut kept: std::collections::BTreeMap<IpAddr, (bool, String)> = Default::default();
        for (k, (_, copies)) in spec.iter().enumerate() {
            let mut seen = std::collections::BTreeSet::new();
            for c in copies.iter().filter(|c| seen.insert(c.ip)) {
                let local = node.is_some() && c.node == node;
                if kept.get(&ip(c.ip)).is_none_or(|(was_local, _)| !was_local && local) {
                    kept.insert(ip(c.ip), (local, format!("s{k}")));
                }
            }
        }
        kept.into_iter().map(|(a, (_, s))| (a, s)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// For every location: the endpoints judged and their facts are
        /// the copies a naive merge on that node keeps, and the answer is
        /// the one a reader configured at that location gives.
        #[test]
        fn routing_and_facts_at_any_location_are_that_nodes(
            spec in slices(),
            reader in 0usize..3,
            local in any::<bool>(),
        ) {
            let slices: Arc<[Arc<SliceContent>]> = contents(&spec).into();
            let svc = Arc::new(service(local));
            let at = |node: Option<&str>| Location { node: node.map(Into::into), zone: None };
            let view = ServiceEndpoints::new(svc.clone(), slices.clone(), Arc::new(at(NODES[reader])));
            for node in NODES {
                let there = ServiceEndpoints::new(svc.clone(), slices.clone(), Arc::new(at(node)));
                let asked = view.routing_at("http", Protocol::Tcp, Traffic::Internal, &at(node));
                prop_assert_eq!(&asked, &there.routing("http", Protocol::Tcp, Traffic::Internal));
                let model = naive(&spec, node);
                let judged: Vec<(SocketAddr, bool, bool)> = asked
                    .iter()
                    .flat_map(|r| &r.decisions)
                    .map(|(e, _)| (e.addr, e.is_local, e.ready))
                    .collect();
                let want: Vec<(SocketAddr, bool, bool)> = model.iter().map(|(a, l, r, _)| (*a, *l, *r)).collect();
                prop_assert_eq!(judged, want);
                for (address, slice) in naive_facts(&spec, node) {
                    let facts = view.facts_at(address, &at(node));
                    prop_assert_eq!(facts.as_ref().and_then(|f| f.hostname.as_deref()), Some(slice.as_str()));
                    prop_assert_eq!(facts, there.facts(address).cloned().map(Arc::new));
                }
            }
        }
    }
}
