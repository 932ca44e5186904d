//! Watched objects decoded leniently (`informer_glue::lenient`): realistic
//! objects of every watched kind (managedFields, full statuses, conditions),
//! each field in turn `null` and absent. Every variant decodes; only the
//! fields proxyd reads change what it makes of an object; through the fake
//! API server and kube-runtime's watcher, every variant with an unread
//! field null or absent is followed with no watch error and no relist; an
//! object broken in a field proxyd reads is skipped with one warning per
//! resourceVersion while the others flow.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Kind};
use informer_glue::fold::{EventFold, EventHandler};
use informer_glue::lenient::{Lean, Watched, decode};
use informer_glue::selection::Selection;
use informer_glue::watch_runner::{WatchMetrics, WatchSettings, run_watch};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::{Api, Resource};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// One watched kind: a realistic object as kube-apiserver sends it, what
/// proxyd makes of an object of it, and the fields it reads (`[]` for any
/// list index).
struct Case {
    kind: Kind,
    fixture: &'static str,
    read: &'static [&'static str],
    facts: FactsFn,
}

/// What proxyd makes of an object's JSON text, or why it could not decode it.
type FactsFn = fn(&str) -> Result<String, String>;

/// What proxyd makes of `obj`, with the parts a server rewrites (name,
/// uid, resourceVersion) set aside.
fn facts_of<K: Lean + Resource>(json: &str, facts: impl Fn(&K) -> String) -> Result<String, String> {
    let mut obj = decode::<K>(json).map_err(|e| format!("{}: {}", e.field, e.error))?;
    let meta = obj.meta_mut();
    meta.name = Some("object".into());
    meta.uid = None;
    meta.resource_version = None;
    Ok(facts(&obj))
}

fn service_facts(json: &str) -> Result<String, String> {
    facts_of::<Service>(json, |s| {
        let multus = Selection {
            proxy_name: None,
            multus: true,
        };
        format!(
            "{:?} {:?} {:?} {:?}",
            informer_glue::service_from_k8s(s),
            Selection::default().handling(s),
            multus.handling(s),
            informer_glue::multus::service_network(s)
        )
    })
}

fn slice_facts(json: &str) -> Result<String, String> {
    facts_of::<EndpointSlice>(json, |s| {
        let mut interner = slice_model::Interner::default();
        format!(
            "{:?} {:?} {}",
            informer_glue::slice_from_k8s(s, &mut interner),
            informer_glue::slice_with_facts_from_k8s(s, &mut interner),
            Selection::default().selects_slice(s)
        )
    })
}

fn node_facts(json: &str) -> Result<String, String> {
    use informer_glue::node::{eligible, pod_cidrs_of, primary_ips_of, zone_of};
    facts_of::<Node>(json, |n| {
        format!(
            "{:?} {:?} {:?} {}",
            zone_of(n),
            pod_cidrs_of(n),
            primary_ips_of(n),
            eligible(n)
        )
    })
}

fn pod_facts(json: &str) -> Result<String, String> {
    facts_of::<Pod>(json, |p| format!("{:?}", informer_glue::multus::pod_from_k8s(p)))
}

fn cidr_facts(json: &str) -> Result<String, String> {
    facts_of::<ServiceCIDR>(json, |c| format!("{:?}", informer_glue::service_cidr::cidrs_of(c)))
}

const CASES: [Case; 5] = [
    Case {
        kind: Kind::Service,
        fixture: include_str!("fixtures/service.json"),
        read: &[
            "metadata.name",
            "metadata.namespace",
            "metadata.labels",
            "metadata.annotations.k8s.v1.cni.cncf.io/service-network",
            "spec.type",
            "spec.clusterIP",
            "spec.clusterIPs",
            "spec.ports[].name",
            "spec.ports[].protocol",
            "spec.ports[].port",
            "spec.ports[].nodePort",
            "spec.ports[].appProtocol",
            "spec.publishNotReadyAddresses",
            "spec.externalName",
            "spec.externalIPs",
            "spec.loadBalancerSourceRanges",
            "spec.sessionAffinity",
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
            "spec.externalTrafficPolicy",
            "spec.internalTrafficPolicy",
            "spec.healthCheckNodePort",
            "spec.trafficDistribution",
            "status.loadBalancer.ingress[].ip",
            "status.loadBalancer.ingress[].ipMode",
        ],
        facts: service_facts,
    },
    Case {
        kind: Kind::EndpointSlice,
        fixture: include_str!("fixtures/endpointslice.json"),
        read: &[
            "metadata.name",
            "metadata.namespace",
            "metadata.labels",
            "metadata.annotations.endpoints.kubernetes.io/last-change-trigger-time",
            "addressType",
            "endpoints[].addresses",
            "endpoints[].conditions",
            "endpoints[].nodeName",
            "endpoints[].deprecatedTopology.kubernetes.io/hostname",
            "endpoints[].hints.forZones[].name",
            "endpoints[].hints.forNodes[].name",
            "endpoints[].hostname",
            "endpoints[].zone",
            "endpoints[].targetRef.kind",
            "endpoints[].targetRef.namespace",
            "endpoints[].targetRef.name",
            "endpoints[].targetRef.uid",
            "ports[].name",
            "ports[].protocol",
            "ports[].port",
            "ports[].appProtocol",
        ],
        facts: slice_facts,
    },
    Case {
        kind: Kind::Node,
        fixture: include_str!("fixtures/node.json"),
        read: &[
            "metadata.name",
            "metadata.labels.topology.kubernetes.io/zone",
            "metadata.deletionTimestamp",
            "spec.podCIDR",
            "spec.podCIDRs",
            "spec.taints[].key",
            "status.addresses[].type",
            "status.addresses[].address",
        ],
        facts: node_facts,
    },
    Case {
        kind: Kind::Pod,
        fixture: include_str!("fixtures/pod.json"),
        read: &[
            "metadata.name",
            "metadata.namespace",
            "metadata.uid",
            "metadata.annotations.k8s.v1.cni.cncf.io/network-status",
            "spec.nodeName",
            "spec.hostNetwork",
            "status.phase",
        ],
        facts: pod_facts,
    },
    Case {
        kind: Kind::ServiceCidr,
        fixture: include_str!("fixtures/servicecidr.json"),
        read: &["metadata.name", "spec.cidrs"],
        facts: cidr_facts,
    },
];

/// A field of an object: its path as the warnings write it, and how to
/// reach it.
#[derive(Clone, Debug)]
struct Field {
    /// `spec.ports[0].port`.
    path: String,
    /// `spec.ports[].port`: the path with list indexes left out.
    shape: String,
    steps: Vec<Step>,
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every field of `value`, at every depth, in document order.
fn fields(value: &Value) -> Vec<Field> {
    fn walk(v: &Value, at: &Field, out: &mut Vec<Field>) {
        let children: Vec<(Step, &Value)> = match v {
            Value::Object(m) => m.iter().map(|(k, v)| (Step::Key(k.clone()), v)).collect(),
            Value::Array(a) => a.iter().enumerate().map(|(i, v)| (Step::Index(i), v)).collect(),
            _ => Vec::new(),
        };
        for (step, child) in children {
            let (path, shape) = match &step {
                Step::Key(k) if at.path.is_empty() => (k.clone(), k.clone()),
                Step::Key(k) => (format!("{}.{k}", at.path), format!("{}.{k}", at.shape)),
                Step::Index(i) => (format!("{}[{i}]", at.path), format!("{}[]", at.shape)),
            };
            let mut steps = at.steps.clone();
            steps.push(step);
            let field = Field { path, shape, steps };
            out.push(field.clone());
            walk(child, &field, out);
        }
    }
    let mut out = Vec::new();
    let root = Field {
        path: String::new(),
        shape: String::new(),
        steps: Vec::new(),
    };
    walk(value, &root, &mut out);
    out
}

/// `value` with `field` set to `null` (`absent: false`) or taken out.
fn variant(value: &Value, field: &Field, absent: bool) -> Value {
    let mut out = value.clone();
    let (last, parents) = field.steps.split_last().unwrap();
    let mut at = &mut out;
    for step in parents {
        at = match step {
            Step::Key(k) => &mut at[k.as_str()],
            Step::Index(i) => &mut at[*i],
        };
    }
    match (last, absent) {
        (Step::Key(k), true) => {
            at.as_object_mut().unwrap().remove(k);
        }
        (Step::Index(i), true) => {
            at.as_array_mut().unwrap().remove(*i);
        }
        (Step::Key(k), false) => at[k.as_str()] = Value::Null,
        (Step::Index(i), false) => at[*i] = Value::Null,
    }
    out
}

/// Whether a field of this shape is one proxyd reads: it is one, or lies
/// inside one, or holds one.
fn is_read(shape: &str, read: &[&str]) -> bool {
    let within = |outer: &str, inner: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    };
    read.iter().any(|r| within(r, shape) || within(shape, r))
}

/// Every field of every kind, `null` and absent: each variant decodes, and
/// only the fields proxyd reads change what it makes of the object.
/// (`k8s-openapi`'s own types refuse many of these variants, the Service
/// status condition's `lastTransitionTime: null` among them: the defect.)
#[test]
fn every_field_null_or_absent_decodes_and_only_read_fields_matter() {
    let mut refused_by_k8s_openapi = 0;
    let mut variants = 0;
    for case in &CASES {
        let object: Value = serde_json::from_str(case.fixture).unwrap();
        let base = (case.facts)(case.fixture).unwrap();
        let mut changed = 0;
        for field in fields(&object) {
            for absent in [false, true] {
                variants += 1;
                let v = variant(&object, &field, absent);
                let text = v.to_string();
                let facts = (case.facts)(&text).unwrap_or_else(|e| {
                    panic!(
                        "{} with {} {}: not decoded: {e}",
                        case.kind.name(),
                        field.path,
                        if absent { "absent" } else { "null" }
                    )
                });
                if facts != base {
                    changed += 1;
                    assert!(
                        is_read(&field.shape, case.read),
                        "{} {} ({}): proxyd does not read it, yet it changed what proxyd makes of the object:\n{base}\n{facts}",
                        case.kind.name(),
                        field.path,
                        if absent { "absent" } else { "null" }
                    );
                }
                let strict = match case.kind {
                    Kind::Service => serde_json::from_value::<Service>(v).is_err(),
                    Kind::EndpointSlice => serde_json::from_value::<EndpointSlice>(v).is_err(),
                    Kind::Node => serde_json::from_value::<Node>(v).is_err(),
                    Kind::Pod => serde_json::from_value::<Pod>(v).is_err(),
                    Kind::ServiceCidr => serde_json::from_value::<ServiceCIDR>(v).is_err(),
                    // proxyd reads no Lease nor claim (the slice controller
                    // does, network-slices).
                    Kind::Lease | Kind::ResourceClaim => false,
                };
                refused_by_k8s_openapi += usize::from(strict);
            }
        }
        assert!(
            changed > 0,
            "{}: no field changed anything: the facts read nothing",
            case.kind.name()
        );
    }
    let service: Value = serde_json::from_str(CASES[0].fixture).unwrap();
    let mut null_time = service.clone();
    null_time["status"]["conditions"][0]["lastTransitionTime"] = Value::Null;
    assert!(
        serde_json::from_value::<Service>(null_time.clone()).is_err(),
        "k8s-openapi's Condition requires lastTransitionTime"
    );
    assert_eq!(service_facts(&null_time.to_string()), service_facts(CASES[0].fixture));
    assert!(variants > 500, "{variants} variants");
    assert!(refused_by_k8s_openapi > 0);
    eprintln!("{variants} variants decoded; k8s-openapi's types refuse {refused_by_k8s_openapi} of them");
}

/// A handler that keeps what proxyd makes of each object, by name.
#[derive(Clone, Default)]
struct Facts {
    by_name: Arc<Mutex<BTreeMap<String, String>>>,
    facts: Option<FactsFn>,
}

impl<K: kube::ResourceExt + serde::Serialize> EventHandler<K> for Facts {
    fn on_add(&mut self, obj: &K) {
        self.on_update(obj, obj);
    }

    fn on_update(&mut self, _: &K, obj: &K) {
        let text = serde_json::to_string(obj).unwrap();
        let facts = (self.facts.unwrap())(&text).unwrap();
        self.by_name.lock().unwrap().insert(obj.name_any(), facts);
    }

    fn on_delete(&mut self, obj: &K) {
        self.by_name.lock().unwrap().remove(&obj.name_any());
    }

    fn on_synced(&mut self) {}
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out after {WAIT:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A watch of kind `K` feeding `handler`, until the sender fires.
fn watch<K, H>(server: &FakeApiServer, handler: H) -> (tokio::sync::oneshot::Sender<()>, Arc<WatchMetrics>)
where
    K: Lean + Resource<DynamicType = ()> + Default + Clone + std::fmt::Debug + Send + 'static,
    H: EventHandler<K> + Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = Arc::new(WatchMetrics::default());
    let settings = WatchSettings {
        label_selector: kube::core::Selector::default(),
        field_selector: None,
        page_size: 50,
        relist_every: None,
        liveness: None,
    };
    tokio::spawn(run_watch(
        Api::<Watched<K>>::all(server.client()),
        settings,
        EventFold::new(),
        handler,
        metrics.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    (stop, metrics)
}

/// Through the fake API server and kube-runtime's watcher, for every kind:
/// one object per unread field, that field `null`, and one with it absent.
/// Each is followed, proxyd makes of it what it makes of the whole object,
/// and the watch neither fails nor relists. (The fields the fake sets
/// itself on a write, `apiVersion`, `kind` and the names, are left out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_fields_null_or_absent_are_followed_through_the_watch() {
    let server = FakeApiServer::start().await.unwrap();
    let set_by_the_server = ["kind", "apiVersion", "metadata"];
    let names_set = [
        "metadata.name",
        "metadata.namespace",
        "metadata.resourceVersion",
        "metadata.uid",
    ];
    let mut expected: Vec<(Kind, BTreeMap<String, String>)> = Vec::new();
    for case in &CASES {
        let object: Value = serde_json::from_str(case.fixture).unwrap();
        let base = (case.facts)(case.fixture).unwrap();
        let mut names = BTreeMap::new();
        let unread = fields(&object)
            .into_iter()
            .filter(|f| !set_by_the_server.contains(&f.path.as_str()) && !names_set.contains(&f.path.as_str()))
            .filter(|f| !is_read(&f.shape, case.read));
        for (i, field) in unread.enumerate() {
            for absent in [false, true] {
                let mut v = variant(&object, &field, absent);
                let name = format!("v{i}-{}", if absent { "absent" } else { "null" });
                v["metadata"]["name"] = json!(name);
                server.apply(v).unwrap();
                names.insert(name, base.clone());
            }
        }
        expected.push((case.kind, names));
    }
    let handler = |i: usize| Facts {
        facts: Some(CASES[i].facts),
        ..Facts::default()
    };
    let handlers: Vec<Facts> = (0..CASES.len()).map(handler).collect();
    let mut watches = vec![
        watch::<Service, _>(&server, handlers[0].clone()),
        watch::<EndpointSlice, _>(&server, handlers[1].clone()),
        watch::<Node, _>(&server, handlers[2].clone()),
        watch::<Pod, _>(&server, handlers[3].clone()),
        watch::<ServiceCIDR, _>(&server, handlers[4].clone()),
    ];
    for ((kind, names), h) in expected.iter().zip(&handlers) {
        wait_for(&format!("{} variants", kind.name()), || {
            h.by_name.lock().unwrap().len() == names.len()
        })
        .await;
        let seen = h.by_name.lock().unwrap().clone();
        for (name, facts) in names {
            assert_eq!(seen.get(name), Some(facts), "{} {name}", kind.name());
        }
    }
    for ((kind, _), (_, metrics)) in expected.iter().zip(&watches) {
        assert_eq!(metrics.errors.get(), 0, "{}: the watch never failed", kind.name());
        assert_eq!(metrics.relists.get(), 0, "{}: no relist", kind.name());
        assert_eq!(metrics.undecodable.get(), 0, "{}", kind.name());
    }
    let total: usize = expected.iter().map(|(_, n)| n.len()).sum();
    eprintln!("{total} objects with an unread field null or absent, all followed");
    for (stop, _) in watches.drain(..) {
        let _ = stop.send(());
    }
}

fn service(name: &str, port: Value) -> Value {
    json!({"kind": "Service", "metadata": {"name": name, "namespace": "ns"},
           "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "p", "protocol": "TCP", "port": port}]}})
}

/// An object whose field proxyd reads holds the wrong JSON type cannot be
/// decoded: it is skipped, warned about (counted) once per resourceVersion,
/// and the watch and every other object go on. A version proxyd had
/// before it broke stays through a relist (it is listed, not deleted), and
/// the fixed object is followed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_broken_in_a_read_field_is_skipped_and_the_others_flow() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(service("good", json!(80))).unwrap();
    server.apply(service("broken", json!("eighty"))).unwrap();
    server.apply(service("flaky", json!(81))).unwrap();
    let h = Facts {
        facts: Some(service_facts),
        ..Facts::default()
    };
    let names = || h.by_name.lock().unwrap().keys().cloned().collect::<Vec<_>>();
    let port_of = |name: &str| h.by_name.lock().unwrap().get(name).cloned().unwrap_or_default();
    let (stop, metrics) = watch::<Service, _>(&server, h.clone());
    wait_for("the first list", || names() == ["flaky", "good"]).await;
    assert_eq!(metrics.undecodable.get(), 1);

    // A new object after the broken one is followed.
    server.apply(service("after", json!(82))).unwrap();
    wait_for("an object after the broken one", || {
        names() == ["after", "flaky", "good"]
    })
    .await;
    // flaky breaks: its last good version stays.
    server.apply(service("flaky", json!({"not": "a port"}))).unwrap();
    server.apply(service("good", json!(90))).unwrap();
    wait_for("good's change", || port_of("good").contains("port: 90")).await;
    assert!(port_of("flaky").contains("port: 81"), "{}", port_of("flaky"));
    assert_eq!(metrics.undecodable.get(), 2, "flaky's broken version, once");

    assert_eq!(metrics.errors.get(), 0, "broken objects never failed the watch");
    assert_eq!(metrics.relists.get(), 0);

    // A relist (410 Gone) lists both broken objects again, same versions:
    // no second warning, and flaky is not taken for deleted.
    server.expire_next_watches(1);
    server.compact();
    server.drop_watches();
    server.apply(service("last", json!(83))).unwrap();
    wait_for("the relist", || {
        metrics.relists.get() >= 1 && names().contains(&"last".to_owned())
    })
    .await;
    assert_eq!(names(), ["after", "flaky", "good", "last"]);
    assert_eq!(metrics.undecodable.get(), 2, "once per resourceVersion");

    // A new broken version is said again; a fixed one is followed.
    server.apply(service("broken", json!(true))).unwrap();
    server.apply(service("flaky", json!(84))).unwrap();
    wait_for("flaky fixed", || port_of("flaky").contains("port: 84")).await;
    assert_eq!(metrics.undecodable.get(), 3);
    server.delete(Kind::Service, "ns", "broken").unwrap();
    server.apply(service("broken", json!(85))).unwrap();
    wait_for("broken, fixed", || port_of("broken").contains("port: 85")).await;
    assert_eq!(metrics.errors.get(), 1, "the 410 alone");
    assert!(metrics.events.load(Ordering::Relaxed) > 0);
    let _ = stop.send(());
}

mod never_panics {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{CASES, fields};
    use informer_glue::lenient::Watched;
    use k8s_openapi::api::core::v1::{Node, Pod, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::networking::v1::ServiceCIDR;

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[a-zA-Z0-9:./ -]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(2, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z]{1,6}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Decodes `text` as every kind; a failure names the field and the
    /// object's name when it has one.
    fn decode_all(text: &str) {
        fn one<K>(text: &str)
        where
            K: informer_glue::lenient::Lean + kube::Resource<DynamicType = ()> + Default,
        {
            let w = Watched::<K>::from_json(text);
            if let Some(p) = w.problem() {
                assert!(!p.problem.field.is_empty(), "{p}");
                assert!(p.to_string().contains(&p.kind), "{p}");
            }
        }
        one::<Service>(text);
        one::<EndpointSlice>(text);
        one::<Node>(text);
        one::<Pod>(text);
        one::<ServiceCIDR>(text);
    }

    proptest! {
        /// A realistic object with one field (at any depth) replaced by any
        /// JSON value: every kind's lenient decoder decodes it or names
        /// what it could not; none panics.
        #[test]
        fn any_field_replaced_by_anything(case in 0..CASES.len(), pick in any::<prop::sample::Index>(), value in any_json()) {
            let mut object: Value = serde_json::from_str(CASES[case].fixture).unwrap();
            let all = fields(&object);
            let field = &all[pick.index(all.len())];
            let mut at = &mut object;
            for step in &field.steps {
                at = match step {
                    super::Step::Key(k) => &mut at[k.as_str()],
                    super::Step::Index(i) => &mut at[*i],
                };
            }
            *at = value;
            decode_all(&object.to_string());
        }

        /// Arbitrary text.
        #[test]
        fn arbitrary_text(text in ".{0,200}") {
            decode_all(&text);
        }
    }
}

/// What a library user reads beyond a proxy: a real slice's endpoint facts
/// (hostname, node name, zone, target reference) and ports' appProtocol,
/// and a Service's publishNotReadyAddresses and ports' appProtocol, come
/// through the watch's decoding; the proxy's conversion keeps none of them.
#[test]
fn endpoint_and_service_facts_come_through() {
    let slice = decode::<EndpointSlice>(CASES[1].fixture).unwrap();
    let mut interner = slice_model::Interner::default();
    let (kept, _) = informer_glue::slice_with_facts_from_k8s(&slice, &mut interner).unwrap();
    let first = kept.content.endpoints[0].facts.as_deref().unwrap();
    assert_eq!(first.hostname.as_deref(), Some("web-0"));
    assert_eq!(first.node_name.as_deref(), Some("node-1"));
    assert_eq!(first.zone.as_deref(), Some("zone-a"));
    let target = first.target_ref.as_ref().unwrap();
    assert_eq!(
        (&*target.kind, &*target.namespace, &*target.name, &*target.uid),
        ("Pod", "shop", "web-0", "a3f0c2d1-0000-4000-8000-000000000001")
    );
    let second = kept.content.endpoints[1].facts.as_deref().unwrap();
    assert_eq!(
        (second.hostname.as_deref(), second.zone.as_deref()),
        (None, Some("zone-b"))
    );
    let http = kept.content.ports.iter().find(|p| &*p.name == "http").unwrap();
    assert_eq!(http.app_protocol.as_deref(), Some("http"));
    let (proxy, _) = informer_glue::slice_from_k8s(&slice, &mut interner).unwrap();
    assert!(proxy.content.endpoints.iter().all(|e| e.facts.is_none()));
    assert!(proxy.content.ports.iter().all(|p| p.app_protocol.is_none()));

    let mut service: Value = serde_json::from_str(CASES[0].fixture).unwrap();
    service["spec"]["publishNotReadyAddresses"] = json!(true);
    let svc = decode::<Service>(&service.to_string()).unwrap();
    let (info, _) = informer_glue::service_from_k8s(&svc).unwrap();
    assert!(info.publish_not_ready_addresses);
    assert_eq!(info.ports[0].app_protocol.as_deref(), Some("http"));
    assert_eq!(info.ports[1].app_protocol, None);
    let mut external: Value = serde_json::from_str(CASES[0].fixture).unwrap();
    external["spec"] = json!({"type": "ExternalName", "externalName": "db.example.test"});
    let svc = decode::<Service>(&external.to_string()).unwrap();
    let (info, _) = informer_glue::service_from_k8s(&svc).unwrap();
    assert_eq!(info.external_name.as_deref(), Some("db.example.test"));
}
