//! End to end: the real `proxyd` binary, driven through the fake API
//! server, programs nftables and conntrack in a node namespace, and real
//! TCP/UDP traffic from a client namespace reaches pods in their own
//! namespaces (see [`harness`]). Each scenario is its own test.
//!
//! Needs root, `ip`, `nft`, `conntrack` and `python3`: each test is
//! `#[ignore]`d, run with `cargo nextest run --run-ignored all` (as
//! `.ci/run` does), and fails, saying what is missing, when it cannot run.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

#[path = "../common/mod.rs"]
mod common;
mod harness;

use std::time::Duration;

use fake_apiserver::Kind;
use harness::{Cluster, Ep, NODE_IP, PODS, require, service, slice, tally};
use serde_json::json;

fn web(cluster: &Cluster) {
    cluster.apply(service(
        "web",
        json!({"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn clusterip_tcp_balances_follows_readiness_and_rejects() {
    require();
    let mut c = Cluster::new("tcp").await;
    web(&c);
    c.apply(slice(
        "web-1",
        "web",
        "http",
        "TCP",
        &[Ep::ready(0), Ep::ready(1)],
        false,
    ));
    c.start_proxyd();

    c.eventually("both pods to answer", || {
        let t = tally(&c.tcp("10.96.0.10", 80, 40));
        t.get(PODS[0]).is_some_and(|n| *n > 5) && t.get(PODS[1]).is_some_and(|n| *n > 5) && t.len() == 2
    });
    // pod2 stops being ready: it stops receiving.
    let not_ready = Ep {
        ready: false,
        serving: false,
        ..Ep::ready(1)
    };
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(0), not_ready], false));
    c.eventually("only pod1", || {
        tally(&c.tcp("10.96.0.10", 80, 20)).get(PODS[0]) == Some(&20)
    });
    // The slice goes: no endpoints, connections are refused at once.
    c.server.delete(Kind::EndpointSlice, "default", "web-1").unwrap();
    c.eventually("REJECT", || {
        c.tcp("10.96.0.10", 80, 1) == ["error: ConnectionRefusedError"]
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn udp_conntrack_entries_follow_the_endpoints() {
    require();
    let mut c = Cluster::new("udp").await;
    c.apply(service(
        "dns",
        json!({"clusterIP": "10.96.0.53", "ports": [{"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 8080}]}),
    ));
    c.start_proxyd();
    let ask = |c: &Cluster| c.request("udp", "10.96.0.53", 53, 1, 40000);
    assert_ne!(ask(&c), [PODS[0]], "no endpoints yet");
    // 0 -> 1 endpoint: the client (same source port) is not black-holed.
    c.apply(slice("dns-1", "dns", "dns", "UDP", &[Ep::ready(0)], false));
    c.eventually("pod1 answers", || ask(&c) == [PODS[0]]);
    // The endpoint is swapped. The client keeps its source port, so
    // without cleanup its conntrack entry would keep it on pod1 forever.
    c.apply(slice("dns-1", "dns", "dns", "UDP", &[Ep::ready(1)], false));
    c.eventually("pod2 answers the same client", || ask(&c) == [PODS[1]]);
    assert!(c.logged("conntrack_deleted=1"), "the stale entry was deleted");
    // pod1 comes back: the client stays where it is (its endpoint serves).
    c.apply(slice(
        "dns-1",
        "dns",
        "dns",
        "UDP",
        &[Ep::ready(0), Ep::ready(1)],
        false,
    ));
    // Programmed once new clients (new source ports) reach pod1 too.
    let port = std::cell::Cell::new(41000);
    c.eventually("pod1 is programmed again", || {
        port.set(port.get() + 1);
        c.request("udp", "10.96.0.53", 53, 1, port.get()) == [PODS[0]]
    });
    assert_eq!(ask(&c), [PODS[1]], "a serving endpoint keeps its flow");
    // pod2 stops serving, still listed: the same client moves to pod1.
    let stopped = Ep {
        ready: false,
        serving: false,
        ..Ep::ready(1)
    };
    c.apply(slice("dns-1", "dns", "dns", "UDP", &[Ep::ready(0), stopped], false));
    c.eventually("pod1 answers once pod2 stops serving", || ask(&c) == [PODS[0]]);
}

/// A UDP node port through the API server's watch: a client that keeps
/// its source port follows its endpoint when the endpoint is swapped, and
/// once the Service is deleted its entry goes too (k8s#141371, kube-proxy
/// 1.38): without that, a client that keeps sending would keep reaching
/// the old endpoint for as long as it sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn udp_node_port_flows_follow_the_endpoints_and_end_with_the_service() {
    require();
    let mut c = Cluster::new("udpnp").await;
    c.apply(service(
        "dns",
        json!({"type": "NodePort", "clusterIP": "10.96.0.54",
               "ports": [{"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 8080, "nodePort": 30053}]}),
    ));
    c.apply(slice("dns-1", "dns", "dns", "UDP", &[Ep::ready(0)], false));
    c.start_proxyd();
    let ask = |c: &Cluster| c.request("udp", NODE_IP, 30053, 1, 40200);
    c.eventually("pod1 answers at the node port", || ask(&c) == [PODS[0]]);
    c.apply(slice("dns-1", "dns", "dns", "UDP", &[Ep::ready(1)], false));
    c.eventually("pod2 answers the same client", || ask(&c) == [PODS[1]]);
    c.server.delete(Kind::Service, "default", "dns").unwrap();
    c.eventually("the deleted service's flow ends", || ask(&c) != [PODS[1]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn nodeport_with_local_policy_and_its_health_check() {
    require();
    let mut c = Cluster::new("local").await;
    let hc = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // Only the pods' network is the cluster's: the client is external.
    c.args = vec!["--cluster-cidr".into(), "10.0.8.0/21".into()];
    c.apply(service(
        "ingress",
        json!({
            "type": "LoadBalancer", "clusterIP": "10.96.0.30", "externalTrafficPolicy": "Local",
            "healthCheckNodePort": hc,
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}],
        }),
    ));
    let local = Ep {
        local: true,
        ..Ep::ready(0)
    };
    c.apply(slice(
        "ingress-1",
        "ingress",
        "http",
        "TCP",
        &[local, Ep::ready(1)],
        false,
    ));
    c.start_proxyd();

    c.eventually("only the local pod behind the node port", || {
        tally(&c.tcp(NODE_IP, 30080, 20)).get(PODS[0]) == Some(&20)
    });
    c.eventually("the cluster IP uses both", || {
        tally(&c.tcp("10.96.0.30", 80, 40)).len() == 2
    });
    c.eventually("health check 200", || {
        let (status, body) = c.http_get(hc, "/");
        status == 200 && body.contains("\"localEndpoints\": 1")
    });
    // The local pod goes away: the node port drops, the check says 503.
    c.apply(slice("ingress-1", "ingress", "http", "TCP", &[Ep::ready(1)], false));
    c.eventually("health check 503", || c.http_get(hc, "/").0 == 503);
    c.eventually("external traffic dropped", || {
        c.tcp(NODE_IP, 30080, 1) == ["error: TimeoutError"]
    });
    c.apply(slice(
        "ingress-1",
        "ingress",
        "http",
        "TCP",
        &[local, Ep::ready(1)],
        false,
    ));
    c.eventually("health check 200 again", || c.http_get(hc, "/").0 == 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn client_ip_affinity_sticks_until_the_timeout() {
    require();
    let mut c = Cluster::new("affinity").await;
    c.apply(service(
        "sticky",
        json!({
            "clusterIP": "10.96.0.40", "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 3}},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        }),
    ));
    c.apply(slice(
        "sticky-1",
        "sticky",
        "http",
        "TCP",
        &[Ep::ready(0), Ep::ready(1), Ep::ready(2)],
        false,
    ));
    c.start_proxyd();
    c.eventually("the service answers", || {
        c.tcp("10.96.0.40", 80, 1).iter().all(|a| PODS.contains(&a.as_str()))
    });
    let t = tally(&c.tcp("10.96.0.40", 80, 30));
    assert_eq!(t.len(), 1, "one client, one pod: {t:?}");
    // The port's set of clients holds (client . endpoint) pairs.
    let remembered = |c: &Cluster| {
        let sets = c
            .node
            .exec("nft", &["list", "set", "ip", "proxyd", "clients-default/sticky/tcp/80"]);
        sets.contains("10.0.1.2 . ") && sets.contains(" . 8080 timeout 3s expires")
    };
    assert!(remembered(&c), "the client is in the port's set of clients");
    std::thread::sleep(Duration::from_secs(4));
    assert!(!remembered(&c), "forgotten after the 3 s timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn topology_hints_narrow_only_when_complete() {
    require();
    let mut c = Cluster::new("zones").await;
    c.args = vec!["--node-zone".into(), "zone-a".into()];
    zoned_web(&c, ["zone-a", "zone-b", "zone-a"]);
    c.start_proxyd();
    c.eventually("the zone's pods", || {
        let t = tally(&c.tcp("10.96.0.10", 80, 40));
        t.len() == 2 && !t.contains_key(PODS[1])
    });
    for _ in 0..3 {
        assert!(
            !tally(&c.tcp("10.96.0.10", 80, 20)).contains_key(PODS[1]),
            "pod2 is in zone-b"
        );
    }
    // One ready endpoint without a hint: hints are ignored for all.
    c.apply(slice(
        "web-1",
        "web",
        "http",
        "TCP",
        &[zoned(0, "zone-a"), zoned(1, "zone-b"), Ep::ready(2)],
        false,
    ));
    c.eventually("all three pods", || tally(&c.tcp("10.96.0.10", 80, 60)).len() == 3);
}

/// A ready endpoint of `pod` hinted for `zone`.
fn zoned(pod: usize, zone: &'static str) -> Ep {
    Ep {
        zone: Some(zone),
        ..Ep::ready(pod)
    }
}

/// Service web with one slice: pods 0, 1, 2 hinted for these zones.
fn zoned_web(c: &Cluster, zones: [&'static str; 3]) {
    web(c);
    c.apply(slice(
        "web-1",
        "web",
        "http",
        "TCP",
        &[zoned(0, zones[0]), zoned(1, zones[1]), zoned(2, zones[2])],
        false,
    ));
}

fn node(zone: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": zone}}})
}

/// kube-proxy follows its Node's zone label; so must proxyd: hinted
/// traffic moves to the new zone's endpoints after a relabel, with no
/// restart and no other change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn a_relabelled_node_moves_hinted_traffic_to_its_new_zone() {
    require();
    let mut c = Cluster::new("relabel").await;
    c.apply(node("zone-a"));
    zoned_web(&c, ["zone-a", "zone-b", "zone-b"]);
    c.start_proxyd();
    c.eventually("only zone-a's pod", || {
        let t = tally(&c.tcp("10.96.0.10", 80, 20));
        t.len() == 1 && t.contains_key(PODS[0])
    });
    // `kubectl label node node-1 topology.kubernetes.io/zone=zone-b --overwrite`
    c.apply(node("zone-b"));
    c.eventually("only zone-b's pods", || {
        let t = tally(&c.tcp("10.96.0.10", 80, 40));
        t.len() == 2 && !t.contains_key(PODS[0])
    });
    assert!(c.logged("this node's zone changed: every service is rewritten"));
    // The label removed: no zone, hints unused.
    c.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}));
    c.eventually("all three pods", || tally(&c.tcp("10.96.0.10", 80, 60)).len() == 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn terminating_endpoints_serve_when_none_is_ready() {
    require();
    let mut c = Cluster::new("term").await;
    web(&c);
    let terminating = |pod| Ep {
        ready: false,
        serving: true,
        terminating: true,
        ..Ep::ready(pod)
    };
    let gone = Ep {
        ready: false,
        serving: false,
        terminating: true,
        ..Ep::ready(2)
    };
    c.apply(slice(
        "web-1",
        "web",
        "http",
        "TCP",
        &[terminating(0), terminating(1), gone],
        false,
    ));
    c.start_proxyd();
    c.eventually("the serving, terminating pods", || {
        let t = tally(&c.tcp("10.96.0.10", 80, 40));
        t.len() == 2 && !t.contains_key(PODS[2])
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn restart_keeps_traffic_and_forgets_what_was_deleted_meanwhile() {
    require();
    let mut c = Cluster::new("restart").await;
    web(&c);
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(0)], false));
    c.apply(service(
        "old",
        json!({"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
    ));
    c.apply(slice("old-1", "old", "http", "TCP", &[Ep::ready(1)], false));
    c.start_proxyd();
    c.eventually("both services", || {
        c.tcp("10.96.0.10", 80, 1) == [PODS[0]] && c.tcp("10.96.0.20", 80, 1) == [PODS[1]]
    });
    let status = c.stop_proxyd("KILL");
    assert!(!status.success());
    assert_eq!(
        c.tcp("10.96.0.10", 80, 10),
        vec![PODS[0]; 10],
        "traffic flows while proxyd is down"
    );
    c.server.delete(Kind::Service, "default", "old").unwrap();
    c.server.delete(Kind::EndpointSlice, "default", "old-1").unwrap();
    c.start_proxyd();
    c.eventually("old is gone", || c.tcp("10.96.0.20", 80, 1) != [PODS[1]]);
    assert_eq!(c.tcp("10.96.0.10", 80, 10), vec![PODS[0]; 10], "web never stopped");
    let maps = c.node.exec("nft", &["list", "table", "ip", "proxyd"]);
    assert!(!maps.contains("10.96.0.20"), "{maps}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn a_deleted_table_is_restored() {
    require();
    let mut c = Cluster::new("tamper").await;
    web(&c);
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(0)], false));
    c.start_proxyd();
    c.eventually("web", || c.tcp("10.96.0.10", 80, 1) == [PODS[0]]);
    c.node.exec("nft", &["delete", "table", "ip", "proxyd"]);
    // proxyd follows the kernel's announcements and rewrites the table in
    // well under the time a connection attempt from here takes to start
    // (nft_netns.rs measures the gap), so the gap is not asserted here.
    c.eventually("the table back", || c.tcp("10.96.0.10", 80, 1) == [PODS[0]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn api_outages_keep_the_rules_and_converge_after() {
    require();
    let mut c = Cluster::new("api").await;
    web(&c);
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(0)], false));
    c.apply(service(
        "other",
        json!({"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
    ));
    c.apply(slice("other-1", "other", "http", "TCP", &[Ep::ready(1)], false));
    c.start_proxyd();
    c.eventually("both", || c.tcp("10.96.0.20", 80, 1) == [PODS[1]]);
    // The API goes away: the next watches get 410 Gone, the relists after
    // them fail, and the history they would resume from is compacted. The
    // faults are armed before the watches drop, so no reconnect slips by.
    c.server.expire_next_watches(4);
    c.server.fail_next_lists(2);
    c.server.drop_watches();
    c.server.delete(Kind::EndpointSlice, "default", "other-1").unwrap();
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(2)], false));
    c.server.compact();
    // While disconnected the rules stay as they were.
    assert_eq!(c.tcp("10.96.0.10", 80, 5), vec![PODS[0]; 5]);
    // After: the delete made while disconnected is applied, and the update.
    c.eventually("converged", || {
        c.tcp("10.96.0.20", 80, 1) == ["error: ConnectionRefusedError"] && c.tcp("10.96.0.10", 80, 1) == [PODS[2]]
    });
    assert!(c.server.stats().faults > 0, "the outage happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn a_failing_nft_is_retried_and_never_half_applied() {
    require();
    let mut c = Cluster::new("nftfail").await;
    // An `nft` that fails while a flag file exists.
    let dir = std::env::temp_dir().join(format!("proxyd-e2e-nft-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flag = dir.join("fail");
    let real = harness::run("sh", &["-c", "command -v nft"]).trim().to_owned();
    let wrapper = dir.join("nft");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ -e {} ]; then echo 'injected failure' >&2; cat >/dev/null; exit 1; fi\nexec {real} \"$@\"\n",
            flag.display()
        ),
    )
    .unwrap();
    harness::run("chmod", &["+x", &wrapper.display().to_string()]);
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    c.env = vec![("PATH".into(), path)];
    // The fallback writer: `nft` writes chains and rules (the default
    // sends them over netlink, past the wrapper).
    c.args.extend(["--nft-writer".to_owned(), "nft".to_owned()]);
    // externalTrafficPolicy: Local gives the port chains of its own: a
    // change of its one endpoint rewrites the rule that sends to it, which
    // is nft's to do (a change of elements alone goes over netlink, past
    // the wrapper, and so do the rules nft cannot read).
    c.apply(service(
        "web",
        json!({
            "type": "NodePort", "clusterIP": "10.96.0.10", "externalTrafficPolicy": "Local",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30081}],
        }),
    ));
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(0)], false));
    c.start_proxyd();
    c.eventually("web", || c.tcp("10.96.0.10", 80, 1) == [PODS[0]]);

    std::fs::write(&flag, "").unwrap();
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(1)], false));
    c.eventually("a failed sync", || c.logged("sync failed"));
    assert_eq!(c.tcp("10.96.0.10", 80, 5), vec![PODS[0]; 5], "the old rules, whole");
    std::fs::remove_file(&flag).unwrap();
    c.eventually("the retry", || c.tcp("10.96.0.10", 80, 1) == [PODS[1]]);
    // The sync thread logs its line after the rules are in place: the
    // traffic can see them a moment before the log does.
    c.eventually("the retry's sync line", || {
        let log = c.log.lock().unwrap().join("\n");
        log.find("sync failed").is_some_and(|at| log[at..].contains("synced"))
    });
    let log = c.log.lock().unwrap().join("\n");
    // nft's words once per failed sync, on the line that says it failed.
    let said: Vec<&str> = log.lines().filter(|l| l.contains("injected failure")).collect();
    assert!(!said.is_empty(), "nft's words are in the log:\n{log}");
    for line in said {
        assert!(line.contains("sync failed") && line.contains("retry_in_ms"), "{line}");
        assert_eq!(line.matches("injected failure").count(), 1, "{line}");
        assert!(
            line.contains("(exit status 1)") && !line.contains("exit exit"),
            "{line}"
        );
    }
    let after = &log[log.find("sync failed").unwrap()..];
    assert!(
        after.contains("full=true"),
        "the retry rewrote the whole table:\n{after}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn dual_stack_serves_ipv6_too() {
    require();
    let mut c = Cluster::new("dual").await;
    c.args = vec!["--ip-families".into(), "ipv4,ipv6".into()];
    c.apply(service(
        "web",
        json!({
            "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
            "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        }),
    ));
    c.apply(slice("web-v4", "web", "http", "TCP", &[Ep::ready(0)], false));
    c.apply(slice(
        "web-v6",
        "web",
        "http",
        "TCP",
        &[Ep::ready(1), Ep::ready(2)],
        true,
    ));
    c.start_proxyd();
    c.eventually("IPv4", || c.tcp("10.96.0.10", 80, 1) == [PODS[0]]);
    c.eventually("IPv6 over both pods", || {
        let t = tally(&c.tcp("fd00:96::10", 80, 40));
        t.len() == 2 && t.contains_key(PODS[1]) && t.contains_key(PODS[2])
    });
    // UDP over IPv6 with conntrack cleanup, too.
    c.apply(service(
        "dns",
        json!({
            "clusterIP": "fd00:96::53", "clusterIPs": ["fd00:96::53"], "ipFamilies": ["IPv6"],
            "ports": [{"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 8080}],
        }),
    ));
    c.apply(slice("dns-v6", "dns", "dns", "UDP", &[Ep::ready(1)], true));
    let ask = |c: &Cluster| c.request("udp", "fd00:96::53", 53, 1, 40001);
    c.eventually("pod2 over IPv6 UDP", || ask(&c) == [PODS[1]]);
    c.apply(slice("dns-v6", "dns", "dns", "UDP", &[Ep::ready(2)], true));
    c.eventually("pod3, same client", || ask(&c) == [PODS[2]]);
}

/// Issue #6's latency figure: 1,000 services whose slices change at once,
/// each stamped with `endpoints.kubernetes.io/last-change-trigger-time`;
/// proxyd's `kubeproxy_network_programming_duration_seconds` histogram must
/// count each change once. Prints p50/p99 (bucket bounds) and the mean
/// (`--no-capture` shows them); asserts no timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn network_programming_latency_for_1000_services() {
    require();
    const N: usize = 1000;
    let mut c = Cluster::new("latency").await;
    let vip = |i: usize| format!("10.96.{}.{}", 10 + i / 250, i % 250 + 1);
    for i in 0..N {
        c.apply(service(
            &format!("svc-{i}"),
            json!({"clusterIP": vip(i), "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
        ));
        c.apply(slice(
            &format!("svc-{i}-1"),
            &format!("svc-{i}"),
            "http",
            "TCP",
            &[Ep::ready(i % 3)],
            false,
        ));
    }
    c.start_proxyd();
    c.eventually("the last service", || c.tcp(&vip(N - 1), 80, 1) == [PODS[(N - 1) % 3]]);
    for i in 0..N {
        let mut s = slice(
            &format!("svc-{i}-1"),
            &format!("svc-{i}"),
            "http",
            "TCP",
            &[Ep::ready((i + 1) % 3)],
            false,
        );
        let stamp = node_proxy::health::rfc3339(std::time::SystemTime::now());
        s["metadata"]["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": stamp});
        c.apply(s);
    }
    let count_line = "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} ";
    let metrics = || c.http_get(c.metrics, "/metrics").1;
    c.eventually("1000 samples", || {
        metrics()
            .lines()
            .find_map(|l| l.strip_prefix(count_line))
            .is_some_and(|n| n.trim() == N.to_string())
    });
    c.eventually("the last change programmed", || {
        c.tcp(&vip(N - 1), 80, 1) == [PODS[N % 3]]
    });
    let text = metrics();
    // `name{labels} value`, whatever the labels' order.
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("kubeproxy_network_programming_duration_seconds_bucket{"))
        .filter_map(|l| {
            let (labels, n) = l.split_once("} ")?;
            let labels: Vec<&str> = labels.split(',').collect();
            if !labels.contains(&"ip_family=\"IPv4\"") {
                return None;
            }
            let le = labels
                .iter()
                .find_map(|x| x.strip_prefix("le=\""))?
                .trim_end_matches('"');
            Some((le.parse().unwrap_or(f64::INFINITY), n.trim().parse().ok()?))
        })
        .collect();
    assert!(buckets.len() > 70, "kube-proxy's buckets: {buckets:?}");
    let quantile = |q: f64| {
        buckets
            .iter()
            .find(|(_, n)| *n >= q * N as f64)
            .map_or(f64::INFINITY, |(le, _)| *le)
    };
    let sum: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("kubeproxy_network_programming_duration_seconds_sum{ip_family=\"IPv4\"} "))
        .and_then(|s| s.trim().parse().ok())
        .unwrap();
    eprintln!(
        "network programming latency, {N} services: p50 <= {} s, p99 <= {} s, mean {:.3} s",
        quantile(0.5),
        quantile(0.99),
        sum / N as f64
    );
    assert!(quantile(1.0).is_finite(), "every sample fell in a bucket");
}

/// ServiceCIDR objects guard the service ranges (kube-proxy's nftables
/// mode): a connection to an address of one that no service has is
/// dropped at the node instead of being routed on out of it. Here the
/// node routes 10.97.0.0/16 to an upstream namespace that answers
/// `leaked`; the guard follows ServiceCIDRs added and deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn service_cidr_objects_drop_unallocated_addresses() {
    require();
    let mut c = Cluster::new("scidr").await;
    let up = common::Netns::named(format!("e2e-scidr-up-{}", std::process::id()));
    common::run(
        "ip",
        &[
            "link", "add", "u0", "netns", &c.node.0, "type", "veth", "peer", "name", "eth0", "netns", &up.0,
        ],
    );
    c.node.ip(&["addr", "add", "10.0.99.1/24", "dev", "u0"]);
    c.node.ip(&["link", "set", "u0", "up"]);
    c.node.ip(&["route", "add", "10.97.0.0/16", "via", "10.0.99.2"]);
    up.ip(&["addr", "add", "10.0.99.2/24", "dev", "eth0"]);
    up.ip(&["link", "set", "eth0", "up"]);
    up.ip(&["route", "add", "default", "via", "10.0.99.1"]);
    up.ip(&["route", "add", "local", "10.97.0.0/16", "dev", "lo"]);
    let _upstream = common::KillOnDrop(
        std::process::Command::new("ip")
            .args(["netns", "exec", &up.0, "python3", "-c"])
            .arg(
                "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 s.bind(('0.0.0.0', 80)); s.listen(16)\nwhile True:\n    c, _ = s.accept(); c.sendall(b'leaked'); c.close()",
            )
            .spawn()
            .unwrap(),
    );
    web(&c);
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(0)], false));
    c.start_proxyd();
    c.eventually("web answers", || c.tcp("10.96.0.10", 80, 1) == [PODS[0]]);
    c.eventually("no ServiceCIDR: the address is routed on", || {
        c.tcp("10.97.0.250", 80, 1) == ["leaked"]
    });

    c.apply(json!({"kind": "ServiceCIDR", "metadata": {"name": "kubernetes"},
                   "spec": {"cidrs": ["10.96.0.0/16", "fd00:96::/112"]}}));
    c.apply(json!({"kind": "ServiceCIDR", "metadata": {"name": "extra"},
                   "spec": {"cidrs": ["10.97.0.0/16"]}}));
    c.eventually("an unallocated service address dropped at the node", || {
        c.tcp("10.97.0.250", 80, 1) == ["error: TimeoutError"]
    });
    assert_eq!(c.tcp("10.96.0.10", 80, 1), [PODS[0]], "services still answer");
    c.server.delete(Kind::ServiceCidr, "", "extra").unwrap();
    c.eventually("its range no longer guarded once deleted", || {
        c.tcp("10.97.0.250", 80, 1) == ["leaked"]
    });
}

/// Whether the last connection to 10.96.0.10:80 was masqueraded at the
/// node: its conntrack entry's reply goes to the node, not to the client.
fn masqueraded(c: &Cluster, from: &str, client_ns: &str) -> bool {
    c.node.exec("conntrack", &["-F"]);
    let answer = common::run(
        "ip",
        &[
            "netns",
            "exec",
            client_ns,
            "python3",
            "-c",
            "import socket\nc = socket.create_connection(('10.96.0.10', 80), timeout=3)\nprint(c.recv(64).decode())",
        ],
    );
    assert_eq!(answer.trim(), PODS[2], "served by pod3");
    let entries = c.node.exec("conntrack", &["-L", "-p", "tcp", "-d", "10.96.0.10"]);
    let entry = entries
        .lines()
        .find(|l| l.contains(&format!("src={from} ")))
        .unwrap_or_else(|| panic!("no conntrack entry from {from}:\n{entries}"));
    // Reply direction: `src=ENDPOINT dst=WHERE-THE-REPLY-GOES`.
    let reply_dst = entry
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("dst="))
        .nth(1)
        .unwrap_or_default();
    reply_dst != from
}

/// kube-proxy's `--detect-local-mode`, each mode, as real traffic: a
/// connection from a pod on this node to a cluster IP keeps its source; one
/// from the client outside is masqueraded. NodeCIDR reads this Node's
/// spec.podCIDRs from the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn each_detect_local_mode_tells_pods_from_the_rest() {
    require();
    let mut c = Cluster::new("dlocal").await;
    web(&c);
    c.apply(slice("web-1", "web", "http", "TCP", &[Ep::ready(2)], false));
    c.apply(json!({"kind": "Node", "metadata": {"name": "node-1"}, "spec": {"podCIDRs": ["10.0.8.0/21"]}}));
    let pod1 = format!("e2e-dlocal-pod1-{}", std::process::id());
    let client = c.client.0.clone();
    for mode in [
        &["--cluster-cidr", "10.0.8.0/21"][..],
        &["--detect-local-mode", "NodeCIDR"][..],
        &["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "p1"][..],
        &[
            "--detect-local-mode",
            "InterfaceNamePrefix",
            "--pod-interface-name-prefix",
            "p",
        ][..],
    ] {
        c.args = mode.iter().map(|a| (*a).to_owned()).collect();
        c.start_proxyd();
        c.eventually("web answers", || c.tcp("10.96.0.10", 80, 1) == [PODS[2]]);
        assert!(
            !masqueraded(&c, &harness::pod_ip(0), &pod1),
            "{mode:?}: a pod keeps its source"
        );
        assert!(
            masqueraded(&c, "10.0.1.2", &client),
            "{mode:?}: the client outside is masqueraded"
        );
        c.stop_proxyd("TERM");
    }
}

/// `--nodeport-addresses primary`, the default as in kube-proxy 1.36: node
/// ports answer on the node's primary address (its Node's first
/// InternalIP), not on its other addresses; while the Node says nothing,
/// on every local address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
async fn node_ports_answer_on_the_primary_address() {
    require();
    let mut c = Cluster::new("primary").await;
    c.apply(service(
        "np",
        json!({"type": "NodePort", "clusterIP": "10.96.0.31",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30081}]}),
    ));
    c.apply(slice("np-1", "np", "http", "TCP", &[Ep::ready(0)], false));
    c.start_proxyd();
    // 10.0.11.1: the node's address on pod1's link, reachable from the client.
    let other = "10.0.11.1";
    c.eventually("no Node yet: every local address", || {
        c.tcp(NODE_IP, 30081, 1) == [PODS[0]] && c.tcp(other, 30081, 1) == [PODS[0]]
    });
    c.apply(json!({"kind": "Node", "metadata": {"name": "node-1"},
                   "status": {"addresses": [{"type": "Hostname", "address": "node-1"},
                                            {"type": "InternalIP", "address": NODE_IP}]}}));
    c.eventually("only the primary address answers", || {
        c.tcp(other, 30081, 1) == ["error: ConnectionRefusedError"]
    });
    assert_eq!(c.tcp(NODE_IP, 30081, 1), [PODS[0]]);
}
