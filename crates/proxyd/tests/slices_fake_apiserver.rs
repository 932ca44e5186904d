//! `proxyd slices` (the real binary) against the fake API server: it
//! writes the slices of a Service on a secondary network from its pods'
//! network-status, answers /healthz once its caches are filled, and counts
//! its writes in /metrics.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::{http_body, http_status, spawn_logged};
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
