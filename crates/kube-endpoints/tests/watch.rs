//! The reader against the fake API server, over real HTTP with kube's
//! client and kube-runtime's watcher: every endpoint fact of both
//! families, subscriptions that change only with their service, deletes
//! across a dropped watch and a 410 relist, an API server restart with a
//! fresh watch cache, selection and namespace scoping.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Kind};
use kube_endpoints::{ChangesError, Config, Protocol, Selection, ServiceName, Traffic, watch};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn service(ns: &str, name: &str, spec: Value) -> Value {
    json!({"kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn web() -> Value {
    service(
        "shop",
        "web",
        json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
               "ports": [{"name": "http", "port": 80, "appProtocol": "kubernetes.io/h2c"}]}),
    )
}

/// A slice of `svc` with endpoints `(address, ready, node)`.
fn slice(ns: &str, name: &str, svc: &str, family: &str, endpoints: &[(&str, bool, &str)]) -> Value {
    json!({
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": family,
        "endpoints": endpoints.iter().enumerate().map(|(i, (ip, ready, node))| json!({
            "addresses": [ip], "conditions": {"ready": ready, "serving": ready, "terminating": !ready},
            "nodeName": node, "zone": "zone-a", "hostname": format!("{svc}-{i}"),
            "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{svc}-{i}"), "uid": format!("uid-{i}")},
        })).collect::<Vec<_>>(),
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080, "appProtocol": "kubernetes.io/h2c"}],
    })
}

/// A reader of `server` with `config`, its watches running and the first
/// lists in; the task running the watches.
async fn listed(server: &FakeApiServer, config: Config) -> (kube_endpoints::Reader, tokio::task::JoinHandle<()>) {
    let (reader, run) = watch(server.client(), config);
    let task = tokio::spawn(run);
    tokio::time::timeout(WAIT, reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    (reader, task)
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out after {WAIT:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn addresses(reader: &kube_endpoints::Reader, svc: &ServiceName) -> Vec<String> {
    reader
        .get(svc)
        .map(|v| v.endpoints().map(|e| e.addr.to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_families_every_fact_and_routing() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    server
        .apply(slice(
            "shop",
            "web-v4",
            "web",
            "IPv4",
            &[("10.0.0.1", true, "node-1"), ("10.0.0.2", false, "node-2")],
        ))
        .unwrap();
    server
        .apply(slice("shop", "web-v6", "web", "IPv6", &[("fd00::1", true, "node-2")]))
        .unwrap();
    let config = Config {
        node: Some("node-1".into()),
        zone: Some("zone-a".into()),
        ..Config::default()
    };
    let (reader, run) = watch(server.client(), config);
    assert!(!reader.is_ready(), "nothing listed before the watches run");
    let task = tokio::spawn(run);
    tokio::time::timeout(WAIT, reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert!(reader.is_ready());
    let name = ServiceName::new("shop", "web");
    let view = reader.get(&name).unwrap();
    assert_eq!(
        view.service().ports[0].app_protocol.as_deref(),
        Some("kubernetes.io/h2c")
    );
    let port = view.port("http", Protocol::Tcp).unwrap();
    let addrs: Vec<String> = port.endpoints.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(
        addrs,
        ["10.0.0.1:8080", "10.0.0.2:8080", "[fd00::1]:8080"],
        "both families in one port"
    );
    let first = view.facts(port.endpoints[0].addr.ip()).unwrap();
    assert_eq!(first.hostname.as_deref(), Some("web-0"));
    assert_eq!(first.node_name.as_deref(), Some("node-1"));
    assert_eq!(first.zone.as_deref(), Some("zone-a"));
    assert_eq!(&*first.target_ref.as_ref().unwrap().name, "web-0");
    assert!(port.endpoints[0].is_local && !port.endpoints[2].is_local);
    assert_eq!(view.ready().count(), 2);
    // kube-proxy's choice: the ready ones; the terminating one is named.
    let routing = view.routing("http", Protocol::Tcp, Traffic::Internal).unwrap();
    let used: Vec<String> = routing.used.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(used, ["10.0.0.1:8080", "[fd00::1]:8080"]);
    assert_eq!(
        routing.decisions[1].1,
        kube_endpoints::EndpointUse::NotReadyNorServing,
        "{:?}",
        routing.decisions
    );
    task.abort();
}

/// A subscription changes only with its own service; deletes made while
/// the watch was down are seen after the 410 relist; after an API server
/// restart with a fresh watch cache a change is followed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_follow_their_service_through_faults() {
    let mut server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    server
        .apply(service(
            "shop",
            "db",
            json!({"clusterIP": "10.96.0.11", "ports": [{"name": "sql", "port": 5432}]}),
        ))
        .unwrap();
    server
        .apply(slice("shop", "web-a", "web", "IPv4", &[("10.0.0.1", true, "node-1")]))
        .unwrap();
    server
        .apply(slice("shop", "web-b", "web", "IPv4", &[("10.0.0.2", true, "node-1")]))
        .unwrap();
    server
        .apply(slice("shop", "db-a", "db", "IPv4", &[("10.0.1.1", true, "node-1")]))
        .unwrap();
    let (reader, task) = listed(&server, Config::default()).await;
    let (web_name, db_name) = (ServiceName::new("shop", "web"), ServiceName::new("shop", "db"));
    let mut web_rx = reader.subscribe(&web_name);
    let mut changes = reader.changes();
    assert_eq!(addresses(&reader, &web_name), ["10.0.0.1:8080", "10.0.0.2:8080"]);

    // Another service's change is not web's.
    server
        .apply(slice("shop", "db-a", "db", "IPv4", &[("10.0.1.2", true, "node-1")]))
        .unwrap();
    wait_for("db's change", || addresses(&reader, &db_name) == ["10.0.1.2:8080"]).await;
    assert!(!web_rx.has_changed().unwrap(), "web's subscription did not change");
    assert_eq!(changes.next().await.unwrap(), db_name);

    // web's endpoint turns not ready: its subscriber sees it.
    server
        .apply(slice("shop", "web-a", "web", "IPv4", &[("10.0.0.1", false, "node-1")]))
        .unwrap();
    tokio::time::timeout(WAIT, web_rx.changed()).await.unwrap().unwrap();
    assert_eq!(web_rx.latest().unwrap().ready().count(), 1);

    // A slice deleted while the watch is down, history compacted: only the
    // 410 relist reveals it.
    server.expire_next_watches(2);
    server.compact();
    server.drop_watches();
    server.delete(Kind::EndpointSlice, "shop", "web-b").unwrap();
    wait_for("the delete found by the relist", || {
        addresses(&reader, &web_name) == ["10.0.0.1:8080"]
    })
    .await;
    assert!(web_rx.has_changed().unwrap());
    let seen = web_rx.latest().unwrap();
    assert_eq!(seen.endpoints().count(), 1, "the subscriber holds the last value");

    // The API server restarts with a fresh watch cache.
    server.stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().await.unwrap();
    server
        .apply(slice("shop", "web-c", "web", "IPv4", &[("10.0.0.3", true, "node-2")]))
        .unwrap();
    wait_for("a change after the restart", || {
        addresses(&reader, &web_name) == ["10.0.0.1:8080", "10.0.0.3:8080"]
    })
    .await;
    // The Service deleted: the subscription holds None.
    server.delete(Kind::Service, "shop", "web").unwrap();
    wait_for("the service gone", || reader.get(&web_name).is_none()).await;
    tokio::time::timeout(WAIT, web_rx.wait_for(Option::is_none))
        .await
        .unwrap()
        .unwrap();
    task.abort();
}

/// `Selection::All` keeps headless services (DNS needs them);
/// `Selection::KubeProxy` leaves them out, as kube-proxy does. A namespace
/// scopes both watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selection_and_namespace() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    server
        .apply(
            json!({"kind": "Service", "metadata": {"name": "db", "namespace": "shop",
                      "labels": {"service.kubernetes.io/headless": ""}},
                      "spec": {"clusterIP": "None", "ports": [{"name": "sql", "port": 5432}]}}),
        )
        .unwrap();
    server
        .apply(service("other", "api", json!({"clusterIP": "10.96.0.12"})))
        .unwrap();
    let client = server.client();
    let names = |selection, namespace: Option<&'static str>| {
        let client = client.clone();
        async move {
            let config = Config {
                selection,
                namespace: namespace.map(str::to_owned),
                ..Config::default()
            };
            let (reader, run) = watch(client, config);
            let task = tokio::spawn(run);
            tokio::time::timeout(WAIT, reader.wait_until_ready())
                .await
                .unwrap()
                .unwrap();
            task.abort();
            reader.services().iter().map(ToString::to_string).collect::<Vec<_>>()
        }
    };
    assert_eq!(names(Selection::All, None).await, ["other/api", "shop/db", "shop/web"]);
    assert_eq!(names(Selection::KubeProxy, None).await, ["other/api", "shop/web"]);
    assert_eq!(names(Selection::All, Some("shop")).await, ["shop/db", "shop/web"]);
}

/// Dropping the watches' future, polled or never polled, is not silent:
/// every subscription and the change stream close, `discover`'s stream
/// ends, `ready` returns `Stopped`, and the status says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_close_every_receiver_and_say_so() {
    use kube_endpoints::{NotReady, Status};
    let server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    let name = ServiceName::new("shop", "web");

    // Never polled.
    let (reader, run) = watch(server.client(), Config::default());
    let mut updates = reader.subscribe(&name);
    let mut changes = reader.changes();
    drop(run);
    let closed = tokio::time::timeout(WAIT, updates.changed()).await.unwrap();
    assert!(closed.is_err(), "the subscription closed");
    assert!(matches!(
        tokio::time::timeout(WAIT, changes.next()).await.unwrap(),
        Err(ChangesError::Stopped)
    ));
    assert_eq!(
        tokio::time::timeout(WAIT, reader.wait_until_ready()).await.unwrap(),
        Err(NotReady::Stopped)
    );
    assert_eq!(reader.status(), Status::Stopped);
    assert!(
        reader.subscribe(&name).changed().await.is_err(),
        "a later subscription is closed too"
    );

    // Running, then aborted: the view stays, every receiver closes.
    let (reader, task) = listed(&server, Config::default()).await;
    assert_eq!(reader.status(), Status::Current);
    let mut updates = reader.subscribe(&name);
    let mut discovered = reader.discover(&name, "http", Protocol::Tcp, |_| ());
    task.abort();
    let _ = task.await;
    assert!(tokio::time::timeout(WAIT, updates.changed()).await.unwrap().is_err());
    use futures::StreamExt;
    let ended = tokio::time::timeout(WAIT, async { while discovered.next().await.is_some() {} }).await;
    assert!(ended.is_ok(), "discover's stream ended");
    assert!(reader.get(&name).is_some(), "the last view is still there to read");
    assert!(!reader.is_ready());
    assert_eq!(reader.wait_until_ready().await, Err(NotReady::Stopped));
}

/// A token the API server refuses (401), a role that may not list (403),
/// an API server out of reach: `ready` gives up after the ready timeout
/// with each failing watch and its error, and the status says since when;
/// a slow but working server is waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_says_why_the_lists_do_not_come() {
    use kube_endpoints::{NotReady, Status};
    let short = Config {
        ready_timeout: Some(Duration::from_secs(2)),
        ..Config::default()
    };
    let failing = |r: Result<(), NotReady>| match r {
        Err(NotReady::Failing { failing, .. }) => failing,
        other => panic!("{other:?}"),
    };

    let server = FakeApiServer::start().await.unwrap();
    server.require_token("the-right-token");
    let (reader, run) = watch(server.client(), short.clone());
    let _task = tokio::spawn(run);
    let why = failing(tokio::time::timeout(WAIT, reader.wait_until_ready()).await.unwrap());
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(why.iter().all(|w| w.error.status() == Some(401)), "{why:?}");
    assert!(matches!(reader.status(), Status::Stale { failing, .. } if failing.len() == 2));

    let server = FakeApiServer::start().await.unwrap();
    server.forbid(Kind::EndpointSlice);
    let (reader, run) = watch(server.client(), short.clone());
    let _task = tokio::spawn(run);
    let why = failing(tokio::time::timeout(WAIT, reader.wait_until_ready()).await.unwrap());
    assert_eq!(why.len(), 1, "{why:?}");
    assert_eq!(why[0].kind, "EndpointSlice");
    assert_eq!(why[0].error.status(), Some(403), "{why:?}");
    // Granted again: the watch recovers, the reader becomes current.
    server.allow_all();
    tokio::time::timeout(WAIT, async {
        while reader.status() != Status::Current {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("current once the role allows the list");
    assert_eq!(reader.wait_until_ready().await, Ok(()));

    let mut server = FakeApiServer::start().await.unwrap();
    server.stop();
    let (reader, run) = watch(server.client(), short.clone());
    let _task = tokio::spawn(run);
    let why = failing(tokio::time::timeout(WAIT, reader.wait_until_ready()).await.unwrap());
    assert!(
        !why.is_empty()
            && why
                .iter()
                .all(|w| matches!(w.error, kube_endpoints::WatchError::Unreachable { .. })),
        "no answer, told from a refusal: {why:?}"
    );
    assert!(
        why.iter().all(|w| std::error::Error::source(&w.error).is_some()),
        "the client's error kept"
    );

    // Slow (each answer 3 s late, past the 2-s timeout), not failing.
    let server = FakeApiServer::start().await.unwrap();
    server.set_delay(Duration::from_secs(3));
    let (reader, run) = watch(server.client(), short);
    let _task = tokio::spawn(run);
    assert_eq!(reader.status(), Status::Starting);
    assert_eq!(
        tokio::time::timeout(WAIT, reader.wait_until_ready()).await.unwrap(),
        Ok(())
    );
}

/// An API server that stops answering without closing its connections
/// (frozen): the status turns `Stale` within the probe's bound, each watch
/// naming the silence, and `Current` again once it thaws.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_api_server_turns_the_status_stale_within_the_probe_bound() {
    use kube_endpoints::{Probe, Status, WatchError};
    let server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    let probe = Probe {
        after_quiet: Duration::from_secs(2),
        timeout: Duration::from_secs(1),
    };
    let config = Config {
        probe: Some(probe),
        ..Config::default()
    };
    let (reader, _task) = listed(&server, config).await;
    assert_eq!(reader.status(), Status::Current);

    server.set_frozen(true);
    let frozen = Instant::now();
    wait_for("stale", || matches!(reader.status(), Status::Stale { .. })).await;
    let noticed = frozen.elapsed();
    let Status::Stale { since, failing } = reader.status() else {
        unreachable!()
    };
    assert!(noticed <= probe.bound() + Duration::from_secs(1), "{noticed:?}");
    assert!(
        since <= std::time::SystemTime::now() - noticed,
        "stale since the server was last heard from"
    );
    assert!(
        failing.iter().all(|w| matches!(w.error, WatchError::Silent { .. })),
        "{failing:?}"
    );

    server.set_frozen(false);
    wait_for("current", || reader.status() == Status::Current).await;
}

/// Two ready pods behind two ports are two endpoints (once per address),
/// and each port still has both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_counted_once_per_address_whatever_the_ports() {
    let server = FakeApiServer::start().await.unwrap();
    server
        .apply(service(
            "shop",
            "two-ports",
            json!({"clusterIP": "10.96.0.11", "ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]}),
        ))
        .unwrap();
    let mut s = slice(
        "shop",
        "two-ports-1",
        "two-ports",
        "IPv4",
        &[("10.0.0.1", true, "node-1"), ("10.0.0.2", true, "node-2")],
    );
    s["ports"] = json!([{"name": "http", "protocol": "TCP", "port": 8080}, {"name": "metrics", "protocol": "TCP", "port": 9090}]);
    server.apply(s).unwrap();
    let (reader, task) = listed(&server, Config::default()).await;
    let view = reader.get(&ServiceName::new("shop", "two-ports")).unwrap();
    assert_eq!(view.ports().len(), 2);
    assert!(view.ports().iter().all(|p| p.endpoints.len() == 2));
    assert_eq!(view.endpoints().count(), 2, "once per address");
    assert_eq!(view.ready().count(), 2, "two ready pods");
    assert_eq!(view.serving().count(), 2);
    task.abort();
}

/// `discover` hands the function that makes a service of each endpoint
/// its facts (the hostname for TLS, the pod, the zone), and what it
/// returns can be shared between threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_hands_out_each_endpoints_facts() {
    use futures::StreamExt;
    use tower::discover::Change;
    let server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    server
        .apply(slice("shop", "web-v4", "web", "IPv4", &[("10.0.0.1", true, "node-1")]))
        .unwrap();
    let (reader, task) = listed(&server, Config::default()).await;
    let mut discovery = reader.discover(&ServiceName::new("shop", "web"), "http", Protocol::Tcp, |e| e.clone());
    fn shared<T: Send + Sync>(_: &T) {}
    shared(&discovery);
    let Some(Ok(Change::Insert(addr, e))) = tokio::time::timeout(WAIT, discovery.next()).await.unwrap() else {
        panic!("the endpoint is inserted first");
    };
    assert_eq!(addr.to_string(), "10.0.0.1:8080");
    assert!(e.endpoint.ready);
    let facts = e.facts.unwrap();
    assert_eq!(facts.hostname.as_deref(), Some("web-0"));
    assert_eq!(&*facts.target_ref.unwrap().name, "web-0");
    assert_eq!(facts.zone.as_deref(), Some("zone-a"));
    task.abort();
}

/// One reader answers for several nodes and zones: zone hints, node hints
/// and which endpoints are local are all judged for the location asked
/// about, in routing and in discover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_and_discover_at_any_node_and_zone_with_one_reader() {
    use futures::StreamExt;
    use kube_endpoints::Location;
    use tower::discover::Change;
    let server = FakeApiServer::start().await.unwrap();
    let zoned = |name: &str, spec: Value| service("shop", name, spec);
    server
        .apply(zoned(
            "zoned",
            json!({"clusterIP": "10.96.0.12", "ports": [{"name": "http", "port": 80}]}),
        ))
        .unwrap();
    let mut s = slice(
        "shop",
        "zoned-1",
        "zoned",
        "IPv4",
        &[("10.0.0.1", true, "node-1"), ("10.0.0.2", true, "node-2")],
    );
    s["endpoints"][0]["hints"] = json!({"forZones": [{"name": "zone-a"}]});
    s["endpoints"][1]["hints"] = json!({"forZones": [{"name": "zone-b"}]});
    server.apply(s).unwrap();
    // Internal traffic policy Local: only the asking node's endpoints.
    server
        .apply(zoned(
            "local",
            json!({"clusterIP": "10.96.0.13", "internalTrafficPolicy": "Local",
                   "ports": [{"name": "http", "port": 80}]}),
        ))
        .unwrap();
    server
        .apply(slice(
            "shop",
            "local-1",
            "local",
            "IPv4",
            &[("10.0.1.1", true, "node-1"), ("10.0.1.2", true, "node-2")],
        ))
        .unwrap();
    // PreferSameNode: node hints for the endpoint's own node.
    server
        .apply(zoned(
            "same-node",
            json!({"clusterIP": "10.96.0.14", "trafficDistribution": "PreferSameNode",
                   "ports": [{"name": "http", "port": 80}]}),
        ))
        .unwrap();
    let mut s = slice(
        "shop",
        "same-node-1",
        "same-node",
        "IPv4",
        &[("10.0.2.1", true, "node-1"), ("10.0.2.2", true, "node-2")],
    );
    s["endpoints"][0]["hints"] = json!({"forNodes": [{"name": "node-1"}], "forZones": [{"name": "zone-a"}]});
    s["endpoints"][1]["hints"] = json!({"forNodes": [{"name": "node-2"}], "forZones": [{"name": "zone-a"}]});
    server.apply(s).unwrap();
    let config = Config {
        node: Some("node-1".into()),
        zone: Some("zone-a".into()),
        ..Config::default()
    };
    let (reader, task) = listed(&server, config).await;
    let used = |name: &str, at: Option<&Location>| -> Vec<String> {
        let view = reader.get(&ServiceName::new("shop", name)).unwrap();
        let routing = match at {
            Some(at) => view.routing_at("http", Protocol::Tcp, Traffic::Internal, at),
            None => view.routing("http", Protocol::Tcp, Traffic::Internal),
        };
        routing.unwrap().used.iter().map(|e| e.addr.ip().to_string()).collect()
    };
    let node_2 = Location::new("node-2", "zone-b");
    assert_eq!(used("zoned", None), ["10.0.0.1"], "the reader's zone");
    assert_eq!(used("zoned", Some(&Location::zone("zone-b"))), ["10.0.0.2"]);
    assert_eq!(used("local", None), ["10.0.1.1"], "the reader's node");
    assert_eq!(
        used("local", Some(&node_2)),
        ["10.0.1.2"],
        "node-2's endpoint is local to it"
    );
    assert!(
        used("local", Some(&Location::zone("zone-a"))).is_empty(),
        "no node: none local"
    );
    assert_eq!(used("same-node", None), ["10.0.2.1"], "hinted for the reader's node");
    assert_eq!(used("same-node", Some(&node_2)), ["10.0.2.2"], "hinted for node-2");

    let mut b = reader.discover_at(
        &ServiceName::new("shop", "zoned"),
        "http",
        Protocol::Tcp,
        Location::zone("zone-b"),
        |e| e.addr,
    );
    let Some(Ok(Change::Insert(addr, _))) = tokio::time::timeout(WAIT, b.next()).await.unwrap() else {
        panic!("an insert");
    };
    assert_eq!(addr.ip().to_string(), "10.0.0.2");
    let mut local = reader.discover_at(&ServiceName::new("shop", "local"), "http", Protocol::Tcp, node_2, |e| {
        e.addr
    });
    let Some(Ok(Change::Insert(addr, _))) = tokio::time::timeout(WAIT, local.next()).await.unwrap() else {
        panic!("an insert");
    };
    assert_eq!(addr.ip().to_string(), "10.0.1.2");
    task.abort();
}

/// The resolver answers every form of name the DNS specification defines
/// by the query's name and type: a service's addresses and named ports, a
/// headless service's endpoints by hostname, reverse names through the
/// reader's address index, aliases, the schema version; and says which
/// names do not exist, which have no record of the type asked, and which
/// are another server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolver_answers_by_query_name_and_type() {
    use kube_endpoints::dns::{Answer, QueryType, Resolver};
    let server = FakeApiServer::start().await.unwrap();
    server.apply(web()).unwrap();
    server
        .apply(slice("shop", "web-v4", "web", "IPv4", &[("10.0.0.1", true, "node-1")]))
        .unwrap();
    server
        .apply(service(
            "shop",
            "db",
            json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}),
        ))
        .unwrap();
    server
        .apply(slice(
            "shop",
            "db-1",
            "db",
            "IPv4",
            &[("10.0.1.1", true, "node-1"), ("10.0.1.2", false, "node-2")],
        ))
        .unwrap();
    server
        .apply(service(
            "shop",
            "ext",
            json!({"type": "ExternalName", "externalName": "example.org"}),
        ))
        .unwrap();
    let (reader, task) = listed(&server, Config::default()).await;
    let dns = Resolver::new(reader.clone(), "cluster.local");
    let answers = |name: &str, q: QueryType| -> Vec<String> {
        match dns.resolve(name, q) {
            Answer::Records { ttl, records } => {
                assert_eq!(ttl, kube_endpoints::dns::DEFAULT_TTL);
                records.iter().map(|r| format!("{:?}", r.data)).collect()
            }
            other => vec![format!("{other:?}")],
        }
    };
    assert_eq!(
        answers("web.shop.svc.cluster.local", QueryType::A),
        ["Address(10.96.0.10)"]
    );
    assert_eq!(
        answers("WEB.shop.svc.cluster.local.", QueryType::Aaaa),
        ["Address(fd00::10)"]
    );
    assert_eq!(
        answers("_http._tcp.web.shop.svc.cluster.local.", QueryType::Srv),
        ["Srv { priority: 0, weight: 100, port: 80, target: \"web.shop.svc.cluster.local.\" }"]
    );
    assert_eq!(
        answers("10.0.96.10.in-addr.arpa.", QueryType::Ptr),
        ["Ptr(\"web.shop.svc.cluster.local.\")"]
    );
    // Headless: the ready endpoint, by name and by hostname, and its PTR.
    assert_eq!(
        answers("db.shop.svc.cluster.local.", QueryType::A),
        ["Address(10.0.1.1)"]
    );
    assert_eq!(
        answers("db-0.db.shop.svc.cluster.local.", QueryType::A),
        ["Address(10.0.1.1)"]
    );
    assert_eq!(
        answers("1.1.0.10.in-addr.arpa.", QueryType::Ptr),
        ["Ptr(\"db-0.db.shop.svc.cluster.local.\")"]
    );
    assert_eq!(
        answers("db-1.db.shop.svc.cluster.local.", QueryType::A),
        ["NxDomain"],
        "not ready"
    );
    // An alias answers every type.
    assert_eq!(
        answers("ext.shop.svc.cluster.local.", QueryType::A),
        ["Cname(\"example.org.\")"]
    );
    assert_eq!(
        answers("dns-version.cluster.local.", QueryType::Txt),
        ["Txt(\"1.1.0\")"]
    );
    assert_eq!(answers("web.shop.svc.cluster.local.", QueryType::Txt), ["NoData"]);
    assert_eq!(answers("nope.shop.svc.cluster.local.", QueryType::A), ["NxDomain"]);
    assert_eq!(answers("9.9.9.9.in-addr.arpa.", QueryType::Ptr), ["NxDomain"]);
    assert_eq!(answers("example.org.", QueryType::A), ["NotOurs"]);
    // Names with names below them exist without records; an empty
    // namespace does not.
    for branch in [
        "cluster.local.",
        "svc.cluster.local.",
        "shop.svc.cluster.local.",
        "_tcp.web.shop.svc.cluster.local.",
        "db.shop.svc.cluster.local.",
    ] {
        assert_eq!(answers(branch, QueryType::Srv), ["NoData"], "{branch}");
    }
    assert_eq!(answers("empty.svc.cluster.local.", QueryType::A), ["NxDomain"]);
    assert_eq!(dns.ttl(), kube_endpoints::dns::DEFAULT_TTL);
    assert_eq!(
        reader.services_at("10.0.1.1".parse().unwrap()),
        [ServiceName::new("shop", "db")]
    );
    task.abort();
}
