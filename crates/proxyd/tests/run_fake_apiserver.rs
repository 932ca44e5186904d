//! `proxyd run` (the real binary) against the fake API server, through a
//! kubeconfig: it lists, watches, syncs, follows changes, and stops cleanly
//! on SIGTERM.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

mod common;

use common::daemon::{Proxyd, await_status, expect_line, http_body, http_status, spawn_logged};

use std::process::Command;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Kind};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn slice(name: &str, svc: &str, ips: &[&str], node: &str) -> serde_json::Value {
    json!({
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "ns", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "nodeName": node})).collect::<Vec<_>>(),
        "ports": [{"name": "dns", "protocol": "UDP", "port": 53}],
    })
}

#[tokio::test]
async fn run_watches_syncs_and_stops_on_sigterm() {
    let server = FakeApiServer::start().await.unwrap();
    server
        .apply(
            json!({"kind": "Service", "metadata": {"name": "dns", "namespace": "ns"},
                      "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "protocol": "UDP", "port": 53}]}}),
        )
        .unwrap();
    server.apply(slice("dns-1", "dns", &["10.0.0.1"], "node-1")).unwrap();
    // Another proxy's service: the default proxy never sees it.
    server
        .apply(
            json!({"kind": "Service", "metadata": {"name": "other", "namespace": "ns",
                      "labels": {"service.kubernetes.io/service-proxy-name": "multus-proxy"}},
                      "spec": {"clusterIP": "10.96.0.11"}}),
        )
        .unwrap();

    let dir = std::env::temp_dir().join(format!("proxyd-run-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
    cmd.args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--hostname-override",
            "node-1",
            "--ip-family",
            "ipv4",
            "--min-sync-period",
            "0",
            "--list-page-size",
            "1",
        ])
        .args([
            "--dry-run",
            "--healthz-bind-address",
            "127.0.0.1:0",
            "--metrics-bind-address",
            "",
        ])
        .arg("--dry-run-dir")
        .arg(dir.join("nft"))
        .env("RUST_LOG", "debug");
    let (mut child, lines) = spawn_logged(cmd);
    let mut log = Vec::new();

    let first = expect_line(&lines, &mut log, &["synced", "first=true"]).await;
    assert!(first.contains("services=1"), "only the selected service: {first}");
    assert!(first.contains("service_ports_with_endpoints=1"), "{first}");
    assert!(
        first.contains("conntrack_flows=1"),
        "a UDP service got its first endpoint: its cluster IP's entries go: {first}"
    );

    // A new endpoint elsewhere, then the local one goes away.
    server.apply(slice("dns-1", "dns", &["10.0.0.2"], "node-2")).unwrap();
    let next = expect_line(&lines, &mut log, &["synced", "first=false", "changed_services=1"]).await;
    assert!(next.contains("conntrack_flows=1"), "10.0.0.1 went away: {next}");

    // Deleted while the watch is down: found by the relist after 410 Gone.
    server.drop_watches();
    server.delete(Kind::EndpointSlice, "ns", "dns-1").unwrap();
    server.compact();
    server.expire_next_watches(1);
    let gone = expect_line(
        &lines,
        &mut log,
        &["synced", "changed_services=1", "service_ports_with_endpoints=0"],
    )
    .await;
    assert!(gone.contains("conntrack_flows=1"), "{gone}");

    // --dry-run wrote each sync's transaction: a full one, then partial
    // ones naming only the service that changed.
    let script = |n: u32| std::fs::read_to_string(dir.join("nft").join(format!("sync-{n:06}.nft"))).unwrap();
    assert!(script(1).starts_with("add table ip proxyd\ndelete table ip proxyd\n"));
    assert!(
        script(1).contains("10.96.0.10 . udp . 53 . 0 : 10.0.0.1 . 53"),
        "{}",
        script(1)
    );
    let second = script(2);
    assert!(
        second.starts_with(&format!(
            "add element ip proxyd {} {{ 1 }}\n",
            nft_dataplane::names::SetId::Canary
        )),
        "{second}"
    );
    assert!(
        second.contains("add element ip proxyd service-slots-1 { 10.96.0.10 . udp . 53 . 0 : 10.0.0.2 . 53 }"),
        "{second}"
    );

    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < WAIT, "proxyd did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    expect_line(&lines, &mut log, &["stopped"]).await;
    assert!(status.success(), "exit status {status:?}; log:\n{}", log.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_fails_clearly_without_a_cluster() {
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args([
            "run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--hostname-override",
            "n",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read kubeconfig /nonexistent/kubeconfig"), "{err}");
}

/// A killed API server: `/healthz` turns 503 once the watches have been
/// down for 2 x --sync-period (`/livez` stays 200: a restart would not help),
/// and after the server is back (fresh watch cache) a change is synced and
/// `/healthz` is 200 again, within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_follows_the_watches_through_an_api_server_outage() {
    let mut server = FakeApiServer::start().await.unwrap();
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "a", "namespace": "ns"},
                      "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "p", "protocol": "TCP", "port": 80}]}}))
        .unwrap();
    let proxyd = Proxyd::dry_run(&server, "health-test", Duration::from_secs(2));
    let (lines, port, mut log) = (&proxyd.lines, proxyd.port, Vec::new());
    expect_line(lines, &mut log, &["synced", "first=true"]).await;
    await_status(port, "/healthz", 200, Duration::from_secs(5), "after the first sync").await;

    while let Ok(l) = lines.try_recv() {
        log.push(l);
    }
    let before_outage = log.len();
    server.stop();
    let stopped = std::time::Instant::now();
    let mut unready_after = None;
    while stopped.elapsed() < Duration::from_secs(15) {
        if http_status(port, "/healthz") == 503 {
            unready_after = Some(stopped.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let unready_after = unready_after.expect("/healthz never turned 503 while the API server was down");
    assert!(
        unready_after >= Duration::from_secs(4),
        "not before 2 x --sync-period: {unready_after:?}"
    );
    assert_eq!(
        http_status(port, "/livez"),
        200,
        "liveness does not depend on the API server"
    );

    // The outage's log, as an operator sees it, over a 45-s outage (a
    // dozen retries of each watch): each watch says its failure once;
    // kube-client's per-attempt errors are not there by default, nor each
    // retry's list.
    let lasting = Duration::from_secs(45);
    if let Some(rest) = lasting.checked_sub(stopped.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    while let Ok(l) = lines.try_recv() {
        log.push(l);
    }
    let outage: Vec<&String> = log[before_outage..]
        .iter()
        .filter(|l| !l.contains(" synced "))
        .collect();
    let text = outage.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("\n");
    assert!(!text.contains("kube_client"), "{text}");
    let watches = log
        .iter()
        .filter(|l| l.ends_with("informer_glue::watch_runner: starting"))
        .count();
    assert!(
        watches >= 4,
        "Services, EndpointSlices, the Node, ServiceCIDRs: {watches}"
    );
    assert_eq!(
        text.matches("watch failing").count(),
        watches,
        "once per watch:\n{text}"
    );
    assert!(
        !text.contains("list restarted"),
        "a retry's list is not a line of its own:\n{text}"
    );
    assert!(outage.len() <= 15, "{} lines:\n{text}", outage.len());
    let outage_lines = log.len();
    server.restart().await.unwrap();
    let back = std::time::Instant::now();
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "b", "namespace": "ns"},
                      "spec": {"clusterIP": "10.96.0.11", "ports": [{"name": "p", "protocol": "TCP", "port": 80}]}}))
        .unwrap();
    expect_line(lines, &mut log, &["synced", "changed_services=1"]).await;
    let synced_after = back.elapsed();
    let mut ready_after = None;
    while back.elapsed() < Duration::from_secs(15) {
        if http_status(port, "/healthz") == 200 {
            ready_after = Some(back.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "healthz 503 after {unready_after:?} down; after the restart the new service was synced in \
         {synced_after:?} and healthz was 200 after {ready_after:?}"
    );
    while let Ok(l) = lines.try_recv() {
        log.push(l);
    }
    assert!(synced_after < Duration::from_secs(8), "{synced_after:?}");
    let recovered = log[outage_lines..]
        .iter()
        .filter(|l| l.contains("watch recovered"))
        .count();
    assert_eq!(
        recovered,
        watches,
        "the recovery said once per watch:\n{}",
        log.join("\n")
    );
    assert!(
        ready_after.is_some_and(|d| d < Duration::from_secs(8)),
        "{ready_after:?}\n{}",
        log.join("\n")
    );
}

/// A draining node (KEP-3836): the cluster autoscaler taints this node
/// `ToBeDeletedByClusterAutoscaler`, and `/healthz` answers 503 with
/// `"nodeEligible": false` within one sync so that load balancers stop
/// sending it traffic; `/livez` stays 200; the taint removed, 200 again.
/// Both replies are counted as kube-proxy counts them. `--node-zone` does
/// not stop proxyd from following its Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_tainted_for_deletion_fails_healthz_within_a_sync() {
    let server = FakeApiServer::start().await.unwrap();
    let node = |taints: serde_json::Value| {
        json!({"kind": "Node", "metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "z1"}},
               "spec": {"taints": taints}})
    };
    server.apply(node(json!([]))).unwrap();
    let dir = std::env::temp_dir().join(format!("proxyd-drain-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let (port, metrics) = (common::free_port(), common::free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
    cmd.args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--hostname-override",
            "node-1",
            "--node-zone",
            "z1",
            "--sync-period",
            "2s",
        ])
        .args(["--dry-run", "--healthz-bind-address"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--metrics-bind-address")
        .arg(format!("127.0.0.1:{metrics}"))
        .arg("--dry-run-dir")
        .arg(dir.join("nft"));
    let (_child, lines) = spawn_logged(cmd);
    let mut log = Vec::new();
    expect_line(&lines, &mut log, &["synced", "first=true"]).await;
    await_status(port, "/healthz", 200, Duration::from_secs(5), "after the first sync").await;

    server
        .apply(node(
            json!([{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]),
        ))
        .unwrap();
    let tainted = Instant::now();
    while http_status(port, "/healthz") != 503 {
        assert!(
            tainted.elapsed() < Duration::from_secs(2),
            "/healthz still 200 one sync period after the taint"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("healthz 503 {:?} after the taint", tainted.elapsed());
    assert!(http_body(port, "/healthz").contains("\"nodeEligible\": false"));
    assert_eq!(http_status(port, "/livez"), 200, "liveness is not about the node");

    server.apply(node(json!([]))).unwrap();
    let cleared = Instant::now();
    while http_status(port, "/healthz") != 200 {
        assert!(
            cleared.elapsed() < Duration::from_secs(2),
            "/healthz still 503 after the taint went"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(http_body(port, "/healthz").contains("\"nodeEligible\": true"));
    let text = http_body(metrics, "/metrics");
    let count = |code: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(&format!("kubeproxy_proxy_healthz_total{{code=\"{code}\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    assert!(count("503") >= 2.0 && count("200") >= 3.0, "{text}");
    assert!(text.contains("kubeproxy_proxy_livez_total{code=\"200\"}"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// kube-proxy's place, as kubeadm deploys it: the `kube-proxy` ConfigMap's
/// `config.conf` (what kubeadm 1.36 writes) and `kubeconfig.conf` mounted
/// in one directory, and kube-proxy's own arguments,
/// `--config=DIR/config.conf --hostname-override=NODE`. proxyd reaches the
/// API server the kubeconfig names and applies the file's clusterCIDR
/// (off-cluster traffic to cluster IPs masqueraded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_proxys_configmap_and_arguments_work_unchanged() {
    let server = FakeApiServer::start().await.unwrap();
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "a", "namespace": "ns"},
                      "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "p", "protocol": "TCP", "port": 80}]}}))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("proxyd-kubeadm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    // The ConfigMap as mounted, pointing at this test's API server.
    let config = std::fs::read_to_string(fixtures.join("kubeadm-kube-proxy-config.conf")).unwrap();
    let kubeconfig_path = dir.join("kubeconfig.conf");
    std::fs::write(
        dir.join("config.conf"),
        config.replace("/var/lib/kube-proxy/kubeconfig.conf", kubeconfig_path.to_str().unwrap()),
    )
    .unwrap();
    std::fs::write(&kubeconfig_path, server.kubeconfig()).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
    cmd.arg("run")
        .arg(format!("--config={}", dir.join("config.conf").display()))
        .arg("--hostname-override=node-1")
        .arg("--ip-family=ipv4")
        // Test-only: write the rules to files, serve nothing on the node's ports.
        .args(["--dry-run-dir", dir.join("nft").to_str().unwrap()])
        .args(["--healthz-bind-address", "", "--metrics-bind-address", ""]);
    let (_child, lines) = spawn_logged(cmd);
    let mut log = Vec::new();
    expect_line(&lines, &mut log, &["synced", "first=true", "services=ns/a"]).await;
    let first = std::fs::read_to_string(dir.join("nft/sync-000001.nft")).unwrap();
    assert!(
        first.contains("ip saddr != 10.244.0.0/16"),
        "the file's clusterCIDR is used:\n{first}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("the iptables, ipvs, winkernel section(s) are for other modes")),
        "{}",
        log.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Service status condition with `lastTransitionTime: null` (what the
/// e2e "service status lifecycle" test writes; Go clients read it as a zero
/// time) does not freeze the Service: every later port change is
/// programmed, the Service watch never fails and never relists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_status_field_does_not_freeze_a_service() {
    let server = FakeApiServer::start().await.unwrap();
    let web = |port: u16| {
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
               "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "dns", "protocol": "UDP", "port": port}]},
               "status": {"loadBalancer": {}, "conditions": [{"type": "StatusUpdate", "status": "True",
                          "lastTransitionTime": null, "reason": "E2E", "message": "Set from e2e test"}]}})
    };
    server
        .apply(
            json!({"kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
                      "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "dns", "protocol": "UDP", "port": 80}]}}),
        )
        .unwrap();
    server.apply(slice("web-1", "web", &["10.0.0.1"], "node-1")).unwrap();
    let dir = std::env::temp_dir().join(format!("proxyd-null-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let metrics = common::free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
    cmd.args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--hostname-override", "node-1", "--min-sync-period", "0"])
        .args(["--dry-run", "--healthz-bind-address", "", "--metrics-bind-address"])
        .arg(format!("127.0.0.1:{metrics}"))
        .arg("--dry-run-dir")
        .arg(dir.join("nft"));
    let (_child, lines) = spawn_logged(cmd);
    let mut log = Vec::new();
    expect_line(
        &lines,
        &mut log,
        &["synced", "first=true", "service_ports_with_endpoints=1"],
    )
    .await;

    // The status write, then five port changes.
    server.apply(web(80)).unwrap();
    let programmed = |port: u16| {
        let wanted = format!("10.96.0.20 . udp . {port} . 0 : 10.0.0.1 . 53");
        std::fs::read_dir(dir.join("nft"))
            .unwrap()
            .any(|f| std::fs::read_to_string(f.unwrap().path()).is_ok_and(|t| t.contains(&wanted)))
    };
    for port in 81..=85 {
        server.apply(web(port)).unwrap();
        let start = Instant::now();
        while !programmed(port) {
            while let Ok(l) = lines.try_recv() {
                log.push(l);
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "port {port} never programmed; log:\n{}",
                log.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    while let Ok(l) = lines.try_recv() {
        log.push(l);
    }
    let text = log.join("\n");
    assert!(!text.contains("watch failing"), "{text}");
    let exported = http_body(metrics, "/metrics");
    for series in [
        "proxyd_watch_restarts_total{resource=\"services\"} 0",
        "proxyd_relists_total{resource=\"services\"} 0",
        "proxyd_rejected_objects_total{kind=\"Service\",reason=\"undecodable\"} 0",
    ] {
        assert!(exported.contains(series), "{series} in:\n{exported}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
