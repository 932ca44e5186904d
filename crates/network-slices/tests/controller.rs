//! The controller against the fake API server (kube's real client and
//! kube-runtime's real watchers): slices of a Service on a secondary
//! network made from the pods' network-status, one write per pod change,
//! none after a restart, and the slices' end with the Service's network.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Kind};
use network_slices::controller::{ControllerConfig, SliceController};
use network_slices::metrics::ControllerMetrics;
use network_slices::reconcile::SliceRules;
use serde_json::{Value, json};

const CONTROLLER: &str = "multus-endpointslice-controller.npwg.k8s.io";

fn service(annotated: bool) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns",
                     "labels": {"service.kubernetes.io/service-proxy-name": "multus-proxy", "team": "a"}},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ipFamilies": ["IPv4"],
                 "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]},
    });
    if annotated {
        s["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/service-network": "net1"});
    }
    s
}

fn pod(name: &str, ip: Option<&str>, ready: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": "10.244.1.9",
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    });
    if let Some(ip) = ip {
        let status = json!([
            {"name": "cbr0", "interface": "eth0", "ips": ["10.244.1.9"], "default": true},
            {"name": "ns/net1", "interface": "net1", "ips": [ip]},
        ]);
        p["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/network-status": status.to_string()});
    }
    p
}

fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "zone-a"}}})
}

/// The controller on `server`, until the returned sender is dropped; the
/// receiver says when its caches are filled.
fn start(server: &FakeApiServer) -> (tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>) {
    start_with(server, false)
}

/// As [`start`], serving DRA networks too when `dra`.
fn start_with(
    server: &FakeApiServer,
    dra: bool,
) -> (tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready) = tokio::sync::oneshot::channel::<()>();
    let config = ControllerConfig {
        rules: SliceRules {
            controller: CONTROLLER.into(),
            max_endpoints_per_slice: 100,
        },
        proxy_name: "multus-proxy".into(),
        dra,
    };
    let controller = SliceController::new(server.client(), config, ControllerMetrics::default());
    tokio::spawn(controller.run(
        move || {
            let _ = ready_tx.send(());
        },
        async move {
            let _ = stopped.await;
        },
    ));
    (stop, ready)
}

/// The slices' endpoints: (address, ready) sorted.
fn endpoints(server: &FakeApiServer) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = server
        .objects(Kind::EndpointSlice)
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .map(|e| {
            (
                e["addresses"][0].as_str().unwrap_or_default().to_owned(),
                e["conditions"]["ready"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ready_endpoints(ips: &[&str]) -> Vec<(String, bool)> {
    ips.iter().map(|ip| (ip.to_string(), true)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_follow_the_pods_on_the_network_one_write_per_change() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(node()).unwrap();
    server.apply(service(true)).unwrap();
    for (name, ip) in [("a", "192.168.1.1"), ("b", "192.168.1.2"), ("c", "192.168.1.3")] {
        server.apply(pod(name, Some(ip), true)).unwrap();
    }
    server.apply(pod("no-status", None, true)).unwrap();
    let (stop, ready) = start(&server);
    ready.await.unwrap();
    let all = ready_endpoints(&["192.168.1.1", "192.168.1.2", "192.168.1.3"]);
    eventually("the pods' network addresses in a slice", || endpoints(&server) == all).await;
    let slices = server.objects(Kind::EndpointSlice);
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(
        s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        CONTROLLER
    );
    assert_eq!(s["metadata"]["labels"]["kubernetes.io/service-name"], "web");
    assert_eq!(s["metadata"]["labels"]["team"], "a", "the Service's labels mirrored");
    assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert_eq!(s["ports"][0]["port"], 8080, "the named target port, resolved");
    assert_eq!(s["endpoints"][0]["zone"], "zone-a");
    assert_eq!(s["endpoints"][0]["targetRef"]["kind"], "Pod");
    assert!(s["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"].is_string());

    // One pod turns not ready: one write.
    let writes = server.stats().writes;
    server.apply(pod("b", Some("192.168.1.2"), false)).unwrap();
    eventually("b not ready", || {
        endpoints(&server).contains(&("192.168.1.2".to_owned(), false))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.stats().writes - writes, 1, "one slice written");
    // One pod goes: one write.
    let writes = server.stats().writes;
    server.delete(Kind::Pod, "ns", "c").unwrap();
    eventually("c gone", || endpoints(&server).len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.stats().writes - writes, 1, "one slice written");

    // A restart over slices that are right writes nothing.
    drop(stop);
    let writes = server.stats().writes;
    let (stop, ready) = start(&server);
    ready.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.stats().writes, writes, "nothing written after a restart");

    // Off the network: its slices go. Deleted: the garbage collector's.
    server.apply(service(false)).unwrap();
    eventually("the slices of a Service off the network deleted", || {
        server.objects(Kind::EndpointSlice).is_empty()
    })
    .await;
    server.apply(service(true)).unwrap();
    eventually("back on the network", || endpoints(&server).len() == 2).await;
    server.delete(Kind::Service, "ns", "web").unwrap();
    assert!(
        server.objects(Kind::EndpointSlice).is_empty(),
        "owned slices go with it"
    );
    drop(stop);
}

/// A pod whose network comes from DRA: a claim generated from a template
/// (the pod's status names it), no network-status.
fn dra_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": {"app": "web"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app"}],
                 "resourceClaims": [{"name": "net", "resourceClaimTemplateName": "net1-template"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "resourceClaimStatuses": [{"name": "net", "resourceClaimName": format!("{name}-net-x7k2q")}]},
    })
}

/// The claim as the scheduler allocates it and, with `ip`, as the DRA
/// network driver then reports the interface it made.
fn claim(pod: &str, ip: Option<&str>) -> Value {
    let mut device = json!({"driver": "net.example.com", "pool": "node-1", "device": format!("{pod}-net1")});
    if let Some(ip) = ip {
        device["networkData"] =
            json!({"interfaceName": "net1", "ips": [format!("{ip}/24")], "hardwareAddress": "02:00:00:00:00:01"});
    }
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": format!("{pod}-net-x7k2q"), "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "macvlan-net1"}}]}},
        "status": {"allocation": {"devices": {"results": [
                       {"request": "net", "driver": "net.example.com", "pool": "node-1", "device": format!("{pod}-net1")}]}},
                   "devices": [device],
                   "reservedFor": [{"resource": "pods", "name": pod, "uid": format!("uid-{pod}")}]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dra_network_serves_the_addresses_the_driver_reported() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(node()).unwrap();
    let mut svc = service(false);
    svc["metadata"]["annotations"] = json!({"networking.proxyd.io/service-device-class": "macvlan-net1"});
    server.apply(svc).unwrap();
    server.apply(dra_pod("a")).unwrap();
    server.apply(claim("a", Some("192.168.50.1"))).unwrap();
    server.apply(dra_pod("b")).unwrap();
    server.apply(claim("b", None)).unwrap();
    let (stop, ready) = start_with(&server, true);
    ready.await.unwrap();
    eventually("a's DRA address in a slice", || {
        endpoints(&server) == ready_endpoints(&["192.168.50.1"])
    })
    .await;
    // b's driver reports its interface: b joins.
    server.apply(claim("b", Some("192.168.50.2"))).unwrap();
    eventually("b's address once reported", || {
        endpoints(&server) == ready_endpoints(&["192.168.50.1", "192.168.50.2"])
    })
    .await;
    drop(stop);
}
