//! The watch glue against the fake API server, over real HTTP with kube's
//! client and kube-runtime's watcher: lists, watches, drops, 410 Gone,
//! broken lists, selection, bookmarks, chunked lists, and a soak with random
//! faults.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use endpoints_map::EndpointsMap;
use fake_apiserver::{FakeApiServer, Kind};
use informer_glue::fold::{EventFold, EventHandler};
use informer_glue::lenient::{Lean, Watched};
use informer_glue::liveness::{Liveness, Probe};
use informer_glue::selection::Selection;
use informer_glue::watch_error::WatchError;
use informer_glue::watch_runner::{WatchMetrics, WatchSettings, run_watch};
use informer_glue::{SliceCacheHandler, slice_from_k8s};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use slice_cache::EndpointSliceCache;
use slice_model::{Interner, IpFamily};
use tokio::sync::oneshot;

/// Every wait in these tests is bounded by this.
const WAIT: Duration = Duration::from_secs(30);

fn slice(ns: &str, name: &str, svc: &str, ips: &[&str]) -> Value {
    json!({
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node-1"})).collect::<Vec<_>>(),
        "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
    })
}

fn service(ns: &str, name: &str, labels: Value, cluster_ip: &str) -> Value {
    json!({
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 80}]},
    })
}

/// What a handler has been told: name -> resourceVersion, plus counters.
#[derive(Default, Debug)]
struct Seen {
    objects: BTreeMap<String, String>,
    adds: u32,
    updates: u32,
    deletes: u32,
    synced: u32,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Seen>>);

impl Recorder {
    fn get(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap()
    }
}

fn key<K: ResourceExt>(o: &K) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

impl<K: ResourceExt> EventHandler<K> for Recorder {
    fn on_add(&mut self, obj: &K) {
        let mut s = self.get();
        s.adds += 1;
        assert!(
            s.objects
                .insert(key(obj), obj.resource_version().unwrap_or_default())
                .is_none()
        );
    }
    fn on_update(&mut self, old: &K, new: &K) {
        let mut s = self.get();
        s.updates += 1;
        assert_eq!(s.objects.get(&key(old)), old.resource_version().as_ref());
        s.objects.insert(key(new), new.resource_version().unwrap_or_default());
    }
    fn on_delete(&mut self, obj: &K) {
        let mut s = self.get();
        s.deletes += 1;
        assert!(s.objects.remove(&key(obj)).is_some(), "delete of an unknown object");
    }
    fn on_synced(&mut self) {
        self.get().synced += 1;
    }
}

/// The server's state as name -> resourceVersion.
fn server_view(server: &FakeApiServer, kind: Kind, keep: impl Fn(&Value) -> bool) -> BTreeMap<String, String> {
    server
        .objects(kind)
        .into_iter()
        .filter(|o| keep(o))
        .map(|o| {
            let m = &o["metadata"];
            (
                format!("{}/{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap()),
                m["resourceVersion"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out after {WAIT:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Watch<H> {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<H>,
    metrics: Arc<WatchMetrics>,
}

impl<H> Watch<H> {
    async fn stop(mut self) -> H {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await.expect("the watch task does not panic")
    }
}

fn spawn<K, H>(
    api: Api<Watched<K>>,
    selector: kube::core::Selector,
    page_size: u32,
    fold: EventFold<K>,
    handler: H,
) -> Watch<H>
where
    K: Lean + kube::Resource<DynamicType = ()> + Default + Clone + std::fmt::Debug + Send + 'static,
    H: EventHandler<K> + Send + 'static,
{
    spawn_with(api, selector, page_size, None, fold, handler)
}

fn spawn_with<K, H>(
    api: Api<Watched<K>>,
    selector: kube::core::Selector,
    page_size: u32,
    relist_every: Option<Duration>,
    fold: EventFold<K>,
    handler: H,
) -> Watch<H>
where
    K: Lean + kube::Resource<DynamicType = ()> + Default + Clone + std::fmt::Debug + Send + 'static,
    H: EventHandler<K> + Send + 'static,
{
    let settings = WatchSettings {
        field_selector: None,
        label_selector: selector,
        page_size,
        relist_every,
        liveness: None,
    };
    spawn_settings(api, settings, fold, handler)
}

fn spawn_settings<K, H>(api: Api<Watched<K>>, settings: WatchSettings, fold: EventFold<K>, handler: H) -> Watch<H>
where
    K: Lean + kube::Resource<DynamicType = ()> + Default + Clone + std::fmt::Debug + Send + 'static,
    H: EventHandler<K> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let metrics = Arc::new(WatchMetrics::default());
    let shutdown: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
        let _ = stopped.await;
    });
    let task = tokio::spawn(run_watch(api, settings, fold, handler, metrics.clone(), shutdown));
    Watch {
        stop: Some(stop),
        task,
        metrics,
    }
}

fn slices_api(server: &FakeApiServer) -> Api<Watched<EndpointSlice>> {
    Api::all(server.client())
}

/// A server holding slices `s0`.. `s{n-1}` of service `ns/web`.
async fn seeded_server(n: usize) -> FakeApiServer {
    let server = FakeApiServer::start().await.unwrap();
    for i in 0..n {
        server
            .apply(slice("ns", &format!("s{i}"), "web", &["10.0.0.1"]))
            .unwrap();
    }
    server
}

/// Every slice of `server`, watched with `page_size`, into `rec`.
fn all_slices(server: &FakeApiServer, page_size: u32, rec: &Recorder) -> Watch<Recorder> {
    spawn(
        slices_api(server),
        kube::core::Selector::default(),
        page_size,
        EventFold::new(),
        rec.clone(),
    )
}

/// Watches every slice into a [`Recorder`] and waits for the first list.
async fn watch_slices(server: &FakeApiServer, page_size: u32) -> (Recorder, Watch<Recorder>) {
    let rec = Recorder::default();
    let w = all_slices(server, page_size, &rec);
    wait_for("synced", || rec.get().synced == 1).await;
    (rec, w)
}

/// Waits until the recorder knows exactly the server's slices.
async fn converged(server: &FakeApiServer, rec: &Recorder, what: &str) {
    let want = server_view(server, Kind::EndpointSlice, |_| true);
    wait_for(what, || rec.get().objects == want).await;
}

#[tokio::test]
async fn periodic_relists_keep_the_view_and_count() {
    let server = seeded_server(3).await;
    let rec = Recorder::default();
    let w = spawn_with(
        slices_api(&server),
        kube::core::Selector::default(),
        500,
        Some(Duration::from_millis(200)),
        EventFold::new(),
        rec.clone(),
    );
    wait_for("three relists", || w.metrics.lists.load(Ordering::Relaxed) >= 4).await;
    server.apply(slice("ns", "s9", "web", &["10.0.0.9"])).unwrap();
    server.delete(Kind::EndpointSlice, "ns", "s0").unwrap();
    converged(&server, &rec, "changes between relists").await;
    assert_eq!(rec.get().synced, 1, "synced is reported once");
    w.stop().await;
}

#[tokio::test]
async fn initial_list_then_add_update_delete() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(slice("ns", "a", "web", &["10.0.0.1"])).unwrap();
    server.apply(slice("ns", "b", "web", &["10.0.0.2"])).unwrap();
    let (rec, w) = watch_slices(&server, 500).await;
    assert_eq!(rec.get().objects, server_view(&server, Kind::EndpointSlice, |_| true));

    server.apply(slice("ns", "c", "web", &["10.0.0.3"])).unwrap();
    server.apply(slice("ns", "a", "web", &["10.0.0.9"])).unwrap();
    server.delete(Kind::EndpointSlice, "ns", "b").unwrap();
    converged(&server, &rec, "changes to flow through").await;
    {
        let s = rec.get();
        assert_eq!((s.adds, s.updates, s.deletes, s.synced), (3, 1, 1, 1));
    }
    w.stop().await;
}

#[tokio::test]
async fn dropped_watch_resumes_and_converges() {
    let server = seeded_server(5).await;
    let (rec, w) = watch_slices(&server, 500).await;
    // Slow the server so that the changes land while no watch is open.
    server.set_delay(Duration::from_millis(300));
    server.drop_watches();
    server.apply(slice("ns", "s0", "web", &["10.0.0.2"])).unwrap();
    server.delete(Kind::EndpointSlice, "ns", "s1").unwrap();
    server.apply(slice("ns", "new", "web", &["10.0.0.3"])).unwrap();
    server.set_delay(Duration::ZERO);
    converged(&server, &rec, "convergence after the drop").await;
    assert_eq!(rec.get().synced, 1, "synced fires once");
    w.stop().await;
}

#[tokio::test]
async fn gone_relists_and_surfaces_deletes() {
    let server = seeded_server(4).await;
    let (rec, w) = watch_slices(&server, 500).await;
    let lists_before = server.stats().lists;
    // Deletes that no watch will ever report: the history is compacted and
    // the next watch gets 410 Gone, so only a relist can reveal them.
    server.set_delay(Duration::from_millis(300));
    server.drop_watches();
    server.delete(Kind::EndpointSlice, "ns", "s1").unwrap();
    server.delete(Kind::EndpointSlice, "ns", "s2").unwrap();
    server.apply(slice("ns", "s3", "web", &["10.0.0.7"])).unwrap();
    server.compact();
    server.expire_next_watches(1);
    server.set_delay(Duration::ZERO);
    converged(&server, &rec, "deletes surfaced by the relist").await;
    assert!(server.stats().lists > lists_before, "a relist happened");
    assert!(
        w.metrics
            .deletes_found_by_relist
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    w.stop().await;
}

#[tokio::test]
async fn list_failing_part_way_loses_nothing() {
    let server = FakeApiServer::start().await.unwrap();
    for i in 0..30 {
        server
            .apply(slice("ns", &format!("s{i:02}"), "web", &["10.0.0.1"]))
            .unwrap();
    }
    // The first list breaks after its first page, twice; errors are counted
    // and the watch retries with backoff.
    server.fail_next_continues(2);
    let rec = Recorder::default();
    let w = all_slices(&server, 10, &rec);
    wait_for("synced", || rec.get().synced == 1).await;
    assert_eq!(rec.get().objects, server_view(&server, Kind::EndpointSlice, |_| true));
    assert_eq!(rec.get().deletes, 0, "nothing invented or lost");
    assert!(w.metrics.errors.get() >= 2);

    // A relist that breaks part-way after the first sync loses nothing either.
    server.set_delay(Duration::from_millis(200));
    server.drop_watches();
    server.compact();
    server.expire_next_watches(1);
    server.fail_next_continues(1);
    server.delete(Kind::EndpointSlice, "ns", "s05").unwrap();
    server.set_delay(Duration::ZERO);
    converged(&server, &rec, "convergence after a broken relist").await;
    assert_eq!(rec.get().deletes, 1);
    w.stop().await;
}

#[tokio::test]
async fn failed_lists_are_retried() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(slice("ns", "a", "web", &["10.0.0.1"])).unwrap();
    server.fail_next_lists(2);
    let rec = Recorder::default();
    let w = all_slices(&server, 500, &rec);
    wait_for("synced despite failing lists", || rec.get().synced == 1).await;
    assert_eq!(rec.get().objects.len(), 1);
    assert!(w.metrics.errors.get() >= 2);
    w.stop().await;
}

#[tokio::test]
async fn selection_by_proxy_name_and_headless() {
    let server = FakeApiServer::start().await.unwrap();
    let name = "service.kubernetes.io/service-proxy-name";
    server.apply(service("ns", "plain", json!({}), "10.96.0.1")).unwrap();
    server
        .apply(service("ns", "mine", json!({name: "multus-proxy"}), "10.96.0.2"))
        .unwrap();
    server
        .apply(service("ns", "other", json!({name: "other"}), "10.96.0.3"))
        .unwrap();
    server.apply(service("ns", "headless", json!({}), "None")).unwrap();
    let mut s = slice("ns", "hl-1", "headless", &["10.0.0.1"]);
    s["metadata"]["labels"]["service.kubernetes.io/headless"] = json!("");
    server.apply(s).unwrap();
    server.apply(slice("ns", "plain-1", "plain", &["10.0.0.2"])).unwrap();

    let api: Api<Watched<Service>> = Api::all(server.client());
    let default = Selection::default();
    let multus = Selection {
        proxy_name: Some("multus-proxy".into()),
        multus: false,
    };
    let (d, m) = (Recorder::default(), Recorder::default());
    let sel = default.clone();
    let wd = spawn(
        api.clone(),
        default.label_selector(),
        500,
        EventFold::with_selection(move |s| sel.selects_service(s)),
        d.clone(),
    );
    let sel = multus.clone();
    let wm = spawn(
        api,
        multus.label_selector(),
        500,
        EventFold::with_selection(move |s| sel.selects_service(s)),
        m.clone(),
    );
    let rs = Recorder::default();
    let ws = spawn(
        slices_api(&server),
        default.label_selector(),
        500,
        EventFold::new(),
        rs.clone(),
    );
    wait_for("all synced", || {
        d.get().synced == 1 && m.get().synced == 1 && rs.get().synced == 1
    })
    .await;
    assert_eq!(d.get().objects.keys().collect::<Vec<_>>(), ["ns/plain"]);
    assert_eq!(m.get().objects.keys().collect::<Vec<_>>(), ["ns/mine"]);
    assert_eq!(
        rs.get().objects.keys().collect::<Vec<_>>(),
        ["ns/plain-1"],
        "headless slices skipped"
    );

    // Relabelling moves a service between proxies: a delete for one, an
    // add for the other.
    server
        .apply(service("ns", "plain", json!({name: "multus-proxy"}), "10.96.0.1"))
        .unwrap();
    wait_for("the move", || d.get().objects.is_empty() && m.get().objects.len() == 2).await;
    wd.stop().await;
    wm.stop().await;
    ws.stop().await;
}

#[tokio::test]
async fn bookmarks_cause_no_events() {
    let server = seeded_server(1).await;
    server.set_bookmark_interval(Duration::from_millis(50));
    let (rec, w) = watch_slices(&server, 500).await;
    wait_for("a few bookmarks", || server.stats().bookmarks >= 5).await;
    {
        let s = rec.get();
        assert_eq!((s.adds, s.updates, s.deletes), (1, 0, 0));
    }
    w.stop().await;
}

#[tokio::test]
async fn a_thousand_slices_across_chunked_lists() {
    let server = FakeApiServer::start().await.unwrap();
    for i in 0..1000 {
        server
            .apply(slice(
                &format!("ns-{}", i % 7),
                &format!("s-{i}"),
                &format!("svc-{}", i % 50),
                &["10.0.0.1"],
            ))
            .unwrap();
    }
    let rec = Recorder::default();
    let w = all_slices(&server, 100, &rec);
    wait_for("synced", || rec.get().synced == 1).await;
    assert_eq!(rec.get().objects.len(), 1000);
    assert!(
        server.stats().continued_lists >= 9,
        "the list came in pages: {:?}",
        server.stats()
    );
    w.stop().await;
}

#[tokio::test]
async fn writes_through_the_http_api() {
    let server = FakeApiServer::start().await.unwrap();
    let api: Api<EndpointSlice> = Api::namespaced(server.client(), "ns");
    let obj: EndpointSlice = serde_json::from_value(slice("ns", "a", "web", &["10.0.0.1"])).unwrap();
    api.create(&Default::default(), &obj).await.unwrap();
    assert!(
        api.create(&Default::default(), &obj).await.is_err(),
        "409 on a second create"
    );
    let got = api.get("a").await.unwrap();
    assert_eq!(got.endpoints.unwrap().len(), 1);
    api.delete("a", &Default::default()).await.unwrap();
    assert!(api.get("a").await.is_err());
    assert!(server.objects(Kind::EndpointSlice).is_empty());
}

/// A small deterministic generator (no dependency needed for a soak).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// The engine fed through the watch equals the engine fed straight from
/// the server's final state, after a bounded run of churn and random faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_random_faults() {
    let server = FakeApiServer::start().await.unwrap();
    server.set_bookmark_interval(Duration::from_millis(300));
    let mut rng = Lcg(42);
    let ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"];
    let put = |server: &FakeApiServer, rng: &mut Lcg| {
        let i = rng.next(40);
        let n = 1 + rng.next(3) as usize;
        let start = rng.next(4) as usize;
        let chosen: Vec<&str> = (0..n).map(|k| ips[(start + k) % 4]).collect();
        server
            .apply(slice("ns", &format!("s{i}"), &format!("svc{}", rng.next(8)), &chosen))
            .unwrap();
    };
    for _ in 0..40 {
        put(&server, &mut rng);
    }
    let cache = Arc::new(Mutex::new(EndpointSliceCache::new("node-1", IpFamily::V4)));
    let handler = SliceCacheHandler::new(vec![cache.clone()], Arc::default());
    let synced = handler.synced.clone();
    let w = spawn(
        slices_api(&server),
        Selection::default().label_selector(),
        7,
        EventFold::new(),
        handler,
    );
    wait_for("synced", || synced.load(std::sync::atomic::Ordering::Acquire)).await;

    // Random churn and watch drops (which resume from the last
    // resourceVersion); every 1.2 s an error fault: 410 Gone, 410 plus a
    // relist that breaks part-way, or compaction while writes land. Errors
    // put the watcher in backoff (0.8 s, doubling), hence the spacing.
    let start = Instant::now();
    let mut next_fault = start + Duration::from_millis(600);
    let mut cycle = 0;
    while start.elapsed() < Duration::from_secs(6) {
        if Instant::now() >= next_fault {
            match cycle % 3 {
                0 => server.expire_next_watches(1),
                1 => {
                    server.expire_next_watches(1);
                    server.fail_next_continues(1);
                }
                _ => server.compact(),
            }
            server.drop_watches();
            cycle += 1;
            next_fault += Duration::from_millis(1200);
        }
        match rng.next(100) {
            0..=14 => server.drop_watches(),
            15..=39 => {
                let i = rng.next(40);
                let _ = server.delete(Kind::EndpointSlice, "ns", &format!("s{i}"));
            }
            _ => put(&server, &mut rng),
        }
        tokio::time::sleep(Duration::from_millis(10 + rng.next(40))).await;
    }

    // The engine fed directly from the server's final state.
    let mut direct = EndpointSliceCache::new("node-1", IpFamily::V4);
    let mut interner = Interner::new();
    for obj in server.objects(Kind::EndpointSlice) {
        let s: EndpointSlice = serde_json::from_value(obj).unwrap();
        direct.update(slice_from_k8s(&s, &mut interner).unwrap().0);
    }
    let mut want = EndpointsMap::new();
    let _ = want.update(&mut direct);
    let want: Vec<String> = want.iter().map(|(s, p)| format!("{s} {p:?}")).collect();

    let mut got_map = EndpointsMap::new();
    wait_for("the watched engine to converge", || {
        let _ = got_map.update(&mut cache.lock().unwrap());
        got_map.iter().map(|(s, p)| format!("{s} {p:?}")).collect::<Vec<_>>() == want
    })
    .await;
    let errors = w.metrics.errors.get();
    let lists = w.metrics.lists.load(std::sync::atomic::Ordering::Relaxed);
    w.stop().await;
    let stats = server.stats();
    eprintln!("soak: {lists} complete lists, {errors} watch errors, server {stats:?}");
    assert!(lists > 1, "the soak forced relists ({lists})");
    assert!(
        stats.watches >= 8,
        "the watch reconnected many times ({})",
        stats.watches
    );
    assert!(stats.faults >= 2, "error faults were served ({})", stats.faults);
}

fn pod(name: &str, node: &str, ip: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "apps", "annotations": {
            "k8s.v1.cni.cncf.io/network-status":
                format!(r#"[{{"name":"blue","interface":"net1","ips":["{ip}"]}}]"#)}},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    })
}

/// A watch of `api` restricted by a field selector (as proxyd watches this
/// node's pods and its Node), until the returned sender fires.
fn watch_by_field<K, H>(
    api: Api<Watched<K>>,
    fields: &str,
    handler: H,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<H>)
where
    K: Lean + kube::Resource<DynamicType = ()> + Default + Clone + std::fmt::Debug + Send + 'static,
    H: EventHandler<K> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let settings = WatchSettings {
        label_selector: kube::core::Selector::default(),
        field_selector: Some(fields.into()),
        page_size: 100,
        relist_every: None,
        liveness: None,
    };
    let task = tokio::spawn(run_watch(
        api,
        settings,
        EventFold::new(),
        handler,
        Arc::new(WatchMetrics::default()),
        async move {
            let _ = stopped.await;
        },
    ));
    (stop, task)
}

/// Multus mode watches this node's pods only (a field selector the server
/// applies), through drops and a pod moving away.
#[tokio::test]
async fn only_this_nodes_pods_are_watched() {
    use informer_glue::multus::PodHandler;
    let server = FakeApiServer::start().await.unwrap();
    server.apply(pod("a", "node-1", "192.168.10.1")).unwrap();
    server.apply(pod("b", "node-2", "192.168.10.2")).unwrap();
    let handler = PodHandler::new("node-1", Arc::default());
    let store = handler.store.clone();
    let (stop, task) = watch_by_field(
        Api::<Watched<k8s_openapi::api::core::v1::Pod>>::all(server.client()),
        "spec.nodeName=node-1",
        handler,
    );
    let names = || {
        store
            .lock()
            .unwrap()
            .pods
            .keys()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    wait_for("node-1's pod", || names() == ["apps/a"]).await;
    server.apply(pod("c", "node-1", "192.168.10.3")).unwrap();
    server.drop_watches();
    wait_for("a new pod, after a dropped watch", || names() == ["apps/a", "apps/c"]).await;
    // Moved (a new pod of that name elsewhere): it leaves the selection.
    server.apply(pod("a", "node-2", "192.168.10.1")).unwrap();
    wait_for("the pod that left", || names() == ["apps/c"]).await;
    assert_eq!(
        store.lock().unwrap().pods[&slice_model::PodName::new("apps", "c")].attachments[0].ips[0].to_string(),
        "192.168.10.3"
    );
    let _ = stop.send(());
    let _ = task.await;
}

fn node(name: &str, zone: Option<&str>) -> Value {
    let labels = zone.map_or(json!({}), |z| json!({"topology.kubernetes.io/zone": z}));
    json!({"kind": "Node", "metadata": {"name": name, "labels": labels}})
}

/// The one Node watched by name: its zone label is followed through
/// relabels, a dropped watch and a 410, other nodes never matter.
#[tokio::test]
async fn this_nodes_zone_is_followed() {
    use informer_glue::node::{ThisNode, ThisNodeHandler};
    let server = FakeApiServer::start().await.unwrap();
    server.apply(node("node-1", Some("zone-a"))).unwrap();
    server.apply(node("node-2", Some("zone-x"))).unwrap();
    let changed = Arc::new(tokio::sync::Notify::new());
    let zone = ThisNode::new("node-1", changed.clone());
    let handler = ThisNodeHandler::new(zone.clone());
    let synced = handler.synced.clone();
    let (stop, task) = watch_by_field(
        Api::<Watched<k8s_openapi::api::core::v1::Node>>::all(server.client()),
        "metadata.name=node-1",
        handler,
    );
    wait_for("the first list", || synced.load(Ordering::Acquire)).await;
    assert_eq!(zone.get().zone.as_deref(), Some("zone-a"));
    server.apply(node("node-1", Some("zone-b"))).unwrap();
    wait_for("the relabel", || zone.get().zone.as_deref() == Some("zone-b")).await;
    server.apply(node("node-2", Some("zone-y"))).unwrap();
    server.expire_next_watches(1);
    server.drop_watches();
    server.apply(node("node-1", Some("zone-c"))).unwrap();
    wait_for("a relabel across a 410", || {
        zone.get().zone.as_deref() == Some("zone-c")
    })
    .await;
    server.apply(node("node-1", None)).unwrap();
    wait_for("the label removed", || zone.get().zone.is_none()).await;
    let _ = stop.send(());
    let _ = task.await;
}

/// A frozen API server (SIGSTOP, a frozen control-plane node) keeps its
/// watch connections open and silent, so no error ever reaches the
/// watcher: the probe of a quiet server notices within its bound, the
/// watch fails since the server was last heard from, and once the server
/// thaws the view is current again within seconds, the change made
/// during the freeze included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_api_server_is_noticed_within_the_probe_bound_and_its_thaw_recovers() {
    let server = seeded_server(2).await;
    let probe = Probe {
        after_quiet: Duration::from_secs(2),
        timeout: Duration::from_secs(1),
    };
    let settings = WatchSettings {
        field_selector: None,
        label_selector: kube::core::Selector::default(),
        page_size: 500,
        relist_every: None,
        liveness: Some(Arc::new(Liveness::new(server.client(), probe))),
    };
    let rec = Recorder::default();
    let w = spawn_settings(slices_api(&server), settings, EventFold::new(), rec.clone());
    converged(&server, &rec, "the first list").await;
    // Quiet but answering: the probes keep it working.
    tokio::time::sleep(probe.bound() * 2).await;
    assert_eq!(w.metrics.failing.get(), 0, "a quiet server that answers is not failing");

    server.set_frozen(true);
    let frozen = Instant::now();
    server.apply(slice("ns", "during", "web", &["10.0.0.7"])).unwrap();
    wait_for("the freeze noticed", || w.metrics.failing.get() == 1).await;
    let noticed = frozen.elapsed();
    let down = w.metrics.down_for(std::time::SystemTime::now()).unwrap_or_default();
    let error = w.metrics.last_error();
    eprintln!(
        "a frozen server noticed after {noticed:?} (bound {:?}); failing for {down:?}; {error:?}",
        probe.bound()
    );
    assert!(matches!(error, Some(WatchError::Silent { .. })), "{error:?}");
    assert!(
        noticed <= probe.bound() + Duration::from_secs(1),
        "noticed after {noticed:?}"
    );
    assert!(
        down + Duration::from_millis(200) >= noticed,
        "failing since it was last heard: {down:?}"
    );

    server.set_frozen(false);
    let thawed = Instant::now();
    converged(&server, &rec, "the change made while frozen").await;
    wait_for("working again", || w.metrics.failing.get() == 0).await;
    eprintln!("current again {:?} after the thaw", thawed.elapsed());
    assert!(thawed.elapsed() < Duration::from_secs(5), "{:?}", thawed.elapsed());
    w.stop().await;
}

/// Behind a load balancer, an API server freezes and new connections go
/// to another one: the probe's new connection reaches the one that
/// answers, so it is the watch's own timeout that replaces the silent
/// connection, within the probe's bound plus kube-runtime's 5-s margin,
/// and a change made on the other server arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hanging_on_a_frozen_server_moves_to_the_one_that_answers() {
    let first = seeded_server(2).await;
    let second = seeded_server(2).await;
    let balancer = fake_apiserver::Switch::start(first.addr()).await.unwrap();
    let probe = Probe {
        after_quiet: Duration::from_secs(2),
        timeout: Duration::from_secs(1),
    };
    let mut config = kube::Config::new(format!("http://{}", balancer.addr).parse().unwrap());
    informer_glue::liveness::guard_connections(&mut config, probe);
    let client = kube::Client::try_from(config).unwrap();
    let settings = WatchSettings {
        field_selector: None,
        label_selector: kube::core::Selector::default(),
        page_size: 500,
        relist_every: None,
        liveness: Some(Arc::new(Liveness::new(client.clone(), probe))),
    };
    let rec = Recorder::default();
    let api: Api<Watched<EndpointSlice>> = Api::all(client);
    let w = spawn_settings(api, settings, EventFold::new(), rec.clone());
    converged(&first, &rec, "the first list").await;

    first.set_frozen(true);
    balancer.switch_to(second.addr());
    let frozen = Instant::now();
    for server in [&first, &second] {
        server.apply(slice("ns", "moved", "web", &["10.0.0.8"])).unwrap();
    }
    wait_for("the change from the server that answers", || {
        rec.0.lock().unwrap().objects.contains_key("ns/moved")
    })
    .await;
    let took = frozen.elapsed();
    eprintln!("seen {took:?} after the freeze (bound {:?} + 5 s)", probe.bound());
    assert!(took <= probe.bound() + Duration::from_secs(7), "{took:?}");
    first.set_frozen(false);
    w.stop().await;
}

/// How long after `applied` the recorder first holds `key`.
async fn seen_after(rec: &Recorder, key: &str, applied: Instant) -> Duration {
    wait_for(key, || rec.0.lock().unwrap().objects.contains_key(key)).await;
    applied.elapsed()
}

/// The API server is killed (connections refused, watches cut) and comes
/// back with a fresh watch cache (the watch's resourceVersion is 410 Gone):
/// a change made just after it is back is seen within seconds, whether the
/// outage was short or long, and while it is down the watch is retried
/// every few seconds, never in a tight loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_after_an_api_server_outage_and_restart() {
    let mut server = FakeApiServer::start().await.unwrap();
    server.apply(service("ns", "before", json!({}), "10.96.0.1")).unwrap();
    let rec = Recorder::default();
    let w = spawn(
        Api::<Watched<Service>>::all(server.client()),
        kube::core::Selector::default(),
        100,
        EventFold::new(),
        rec.clone(),
    );
    wait_for("the first list", || {
        rec.0.lock().unwrap().objects.contains_key("ns/before")
    })
    .await;
    for (i, outage) in [Duration::from_secs(3), Duration::from_secs(45)]
        .into_iter()
        .enumerate()
    {
        server.stop();
        let errors_before = w.metrics.errors.get();
        tokio::time::sleep(outage).await;
        let attempts = w.metrics.errors.get() - errors_before;
        let down = w.metrics.down_for(std::time::SystemTime::now()).unwrap_or_default();
        assert_eq!(w.metrics.failing.get(), 1, "proxyd_watch_failing during the outage");
        server.restart().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let name = format!("after-{i}");
        let applied = Instant::now();
        server.apply(service("ns", &name, json!({}), "10.96.0.2")).unwrap();
        let took = seen_after(&rec, &format!("ns/{name}"), applied).await;
        eprintln!(
            "outage {outage:?}: {attempts} failed attempts, down for {down:?} by the metrics; \
             a change after the restart seen in {took:?}"
        );
        assert!(
            took < Duration::from_secs(8),
            "recovery took {took:?} after a {outage:?} outage"
        );
        let secs = outage.as_secs_f64();
        assert!(
            (attempts as f64) <= secs / 1.5 + 3.0,
            "{attempts} attempts in {outage:?}: retries must be seconds apart"
        );
        // The metric starts at the first failed attempt: after the watch
        // notices its connection is gone and the first retry delay (up to
        // twice RETRY_MIN with jitter), which on a loaded machine has taken
        // just over a second.
        let first_failure = Duration::from_secs(1) + 2 * informer_glue::watch_runner::RETRY_MIN;
        assert!(
            attempts >= 1 && down + first_failure >= outage,
            "{attempts} attempts, down {down:?}"
        );
        wait_for("the metrics say it recovered", || {
            w.metrics.down_for(std::time::SystemTime::now()).is_none() && w.metrics.failing.get() == 0
        })
        .await;
    }
    // No outage, only a 410: the watch is cut and its resourceVersion has
    // left the server's window (compacted), so it must relist.
    let relists_before = w.metrics.relists.get();
    server.expire_next_watches(1);
    server.drop_watches();
    let applied = Instant::now();
    server
        .apply(service("ns", "after-410", json!({}), "10.96.0.3"))
        .unwrap();
    let took = seen_after(&rec, "ns/after-410", applied).await;
    eprintln!("410 Gone: a change made with it seen in {took:?}");
    assert!(took < Duration::from_secs(8), "recovery took {took:?} after a 410");
    wait_for("the relist counted", || w.metrics.relists.get() > relists_before).await;
    w.stop().await;
}
