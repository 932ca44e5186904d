//! `proxyd slices` (the real binary) against the fake API server: it
//! writes the slices of a Service on a secondary network from its pods'
//! network-status, answers /healthz once its caches are filled, and counts
//! its writes in /metrics; of two replicas one leads, and the other takes
//! over when the leader is killed.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::{expect_line, http_body, http_status, spawn_logged};
use fake_apiserver::{FakeApiServer, Kind};
use serde_json::json;

#[tokio::test]
async fn slices_writes_the_secondary_addresses_and_serves_health_and_metrics() {
    let server = FakeApiServer::start().await.unwrap();
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "web", "namespace": "ns",
            "labels": {"service.kubernetes.io/service-proxy-name": "multus-proxy"},
            "annotations": {"k8s.v1.cni.cncf.io/service-network": "net1"}},
            "spec": {"clusterIP": "10.96.0.10", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
        .unwrap();
    let status = json!([{"name": "ns/net1", "interface": "net1", "ips": ["192.168.1.7"]}]).to_string();
    server
        .apply(
            json!({"kind": "Pod", "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web"},
            "annotations": {"k8s.v1.cni.cncf.io/network-status": status}},
            "spec": {"containers": [{"name": "app"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .unwrap();
    let dir = std::env::temp_dir().join(format!("proxyd-slices-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let port = common::free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
    cmd.args(["slices", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--bind-address", &format!("127.0.0.1:{port}")]);
    let (_proxyd, _lines) = spawn_logged(cmd);
    let start = Instant::now();
    let addresses = || -> Vec<String> {
        server
            .objects(Kind::EndpointSlice)
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["addresses"][0].as_str().map(str::to_owned))
            .collect()
    };
    while addresses() != ["192.168.1.7"] || http_status(port, "/healthz") != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no slice: {:?}",
            server.objects(Kind::EndpointSlice)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = http_body(port, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "endpoint_slice_controller_changes_total{operation=\"create\"} 1"),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn pod(name: &str, ip: &str) -> serde_json::Value {
    let status = json!([{"name": "ns/net1", "interface": "net1", "ips": [ip]}]).to_string();
    json!({"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"},
        "annotations": {"k8s.v1.cni.cncf.io/network-status": status}},
        "spec": {"containers": [{"name": "app"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// Two replicas with a 2 s lease: the second stands by (healthy) while the
/// first leads; the first killed (SIGKILL, its lease not released), the
/// second writes a new pod's slice within about the lease's duration.
#[tokio::test]
async fn a_standby_replica_takes_over_from_a_killed_leader() {
    let server = FakeApiServer::start().await.unwrap();
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "web", "namespace": "ns",
            "labels": {"service.kubernetes.io/service-proxy-name": "multus-proxy"},
            "annotations": {"k8s.v1.cni.cncf.io/service-network": "net1"}},
            "spec": {"clusterIP": "10.96.0.10", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
        .unwrap();
    server.apply(pod("a", "192.168.1.7")).unwrap();
    let dir = std::env::temp_dir().join(format!("proxyd-slices-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let replica = |name: &str, port: u16| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
        cmd.env("POD_NAME", name)
            .args(["slices", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--bind-address", &format!("127.0.0.1:{port}")])
            .args([
                "--leader-elect-lease-duration",
                "2s",
                "--leader-elect-renew-deadline",
                "1500ms",
            ])
            .args(["--leader-elect-retry-period", "200ms"]);
        spawn_logged(cmd)
    };
    let (p1, p2) = (common::free_port(), common::free_port());
    let (mut first, first_lines) = replica("replica-1", p1);
    let mut log = Vec::new();
    expect_line(&first_lines, &mut log, &["leading", "replica-1"]).await;
    let (_second, second_lines) = replica("replica-2", p2);
    let start = Instant::now();
    while http_status(p2, "/healthz") != 200 {
        assert!(start.elapsed() < Duration::from_secs(10), "the standby is not healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        second_lines.try_iter().all(|l| !l.contains("leading")),
        "one leader at a time"
    );

    first.kill().unwrap();
    let killed = Instant::now();
    server.apply(pod("b", "192.168.1.8")).unwrap();
    let has_b = || {
        server
            .objects(Kind::EndpointSlice)
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .any(|e| e["addresses"][0] == "192.168.1.8")
    };
    while !has_b() {
        assert!(killed.elapsed() < Duration::from_secs(10), "no takeover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "a killed leader replaced in {took:?} (lease 2 s)"
    );
    eprintln!("a killed leader's work resumed after {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
