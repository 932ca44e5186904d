//! The `tower` Discover end to end: real HTTP/2 servers on loopback
//! addresses, the fake API server, kube's client and kube-runtime's
//! watcher, and tower's power-of-two-choices balancer over the Discover.
//! New servers get requests within a second of their slice change; a
//! removed or terminating endpoint gets none once the change is seen;
//! a relist (410 Gone) in the middle loses nothing.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use kube_endpoints::{Config, Protocol, ServiceName, watch};
use serde_json::json;
use tower::balance::p2c::Balance;
use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
use tower::{Service, ServiceExt};

const WAIT: Duration = Duration::from_secs(20);

#[path = "support/h2.rs"]
mod h2;
#[path = "../examples/balance/h2.rs"]
mod h2_client;

use h2::serve;
use h2_client::H2;

/// The slice of `web`: endpoints `(ip, state)` on `port`.
fn slice(port: u16, endpoints: &[(&str, &str)]) -> serde_json::Value {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, state)| {
            let (ready, terminating) = match *state {
                "ready" => (true, false),
                "terminating" => (false, true),
                _ => (false, false),
            };
            json!({"addresses": [ip], "conditions": {"ready": ready, "serving": ready || terminating, "terminating": terminating}})
        })
        .collect();
    json!({"kind": "EndpointSlice",
           "metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
           "addressType": "IPv4", "endpoints": endpoints,
           "ports": [{"name": "http", "protocol": "TCP", "port": port}]})
}

type Balancer = Balance<PendingRequestsDiscover<kube_endpoints::discover::Discovery<H2>, CompleteOnResponse>, ()>;

/// `n` requests through the balancer: answers per server.
async fn send(balancer: &mut Balancer, n: usize) -> BTreeMap<String, usize> {
    let mut by_server = BTreeMap::new();
    for _ in 0..n {
        let answer = tokio::time::timeout(WAIT, balancer.ready().await.unwrap().call(()))
            .await
            .unwrap()
            .unwrap();
        *by_server.entry(answer).or_default() += 1;
    }
    by_server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balancer_follows_the_service() {
    let ips: Vec<IpAddr> = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let port = {
        let probe = std::net::TcpListener::bind((ips[0], 0)).unwrap();
        probe.local_addr().unwrap().port()
    };
    for ip in &ips {
        serve(*ip, port, ip.to_string()).await.unwrap();
    }
    let server = FakeApiServer::start().await.unwrap();
    server
        .apply(
            json!({"kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
                      "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}}),
        )
        .unwrap();
    server
        .apply(slice(port, &[("127.0.0.2", "ready"), ("127.0.0.3", "ready")]))
        .unwrap();
    let (reader, run) = watch(server.client(), Config::default());
    let task = tokio::spawn(run);
    tokio::time::timeout(WAIT, reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    let web = ServiceName::new("shop", "web");
    let discovery = reader.discover(&web, "http", Protocol::Tcp, |e: &kube_endpoints::Discovered| H2(e.addr));
    let mut balancer: Balancer = Balance::new(PendingRequestsDiscover::new(discovery, CompleteOnResponse::default()));

    // Both endpoints share the requests (p2c over equal loads picks at
    // random: each of 200 lands on either with p = 1/2; 50..=150 fails by
    // chance with p < 1e-12).
    let first = send(&mut balancer, 200).await;
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first.values().all(|n| (50..=150).contains(n)), "{first:?}");

    // Scale up: the new server gets requests within a second.
    let changed = Instant::now();
    server
        .apply(slice(
            port,
            &[("127.0.0.2", "ready"), ("127.0.0.3", "ready"), ("127.0.0.4", "ready")],
        ))
        .unwrap();
    let reached = loop {
        if send(&mut balancer, 1).await.contains_key("127.0.0.4") {
            break changed.elapsed();
        }
        assert!(changed.elapsed() < WAIT, "127.0.0.4 never got a request");
    };
    assert!(
        reached < Duration::from_secs(1),
        "new endpoint reached after {reached:?}"
    );
    let three = send(&mut balancer, 300).await;
    assert_eq!(three.len(), 3, "{three:?}");

    // .3 terminating while others are ready: no new requests.
    server
        .apply(slice(
            port,
            &[
                ("127.0.0.2", "ready"),
                ("127.0.0.3", "terminating"),
                ("127.0.0.4", "ready"),
            ],
        ))
        .unwrap();
    let seen = |reader: &kube_endpoints::Reader, ready: usize| {
        reader
            .get(&web)
            .is_some_and(|v| v.ready().count() == ready && v.endpoints().count() >= ready)
    };
    let start = Instant::now();
    while !seen(&reader, 2) {
        assert!(start.elapsed() < WAIT);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = send(&mut balancer, 200).await;
    assert!(
        !after.contains_key("127.0.0.3"),
        "a terminating endpoint got requests: {after:?}"
    );

    // Scale down: .2 removed gets nothing more.
    server
        .apply(slice(port, &[("127.0.0.3", "terminating"), ("127.0.0.4", "ready")]))
        .unwrap();
    let start = Instant::now();
    while !seen(&reader, 1) {
        assert!(start.elapsed() < WAIT);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = send(&mut balancer, 100).await;
    assert_eq!(after.keys().collect::<Vec<_>>(), ["127.0.0.4"], "{after:?}");

    // A relist: the watch is cut, history compacted, the next watch gets
    // 410 Gone. Meanwhile .4 goes and .5 comes: the relist finds both.
    server.expire_next_watches(2);
    server.compact();
    server.drop_watches();
    server
        .apply(slice(port, &[("127.0.0.3", "terminating"), ("127.0.0.5", "ready")]))
        .unwrap();
    let start = Instant::now();
    let mut last = BTreeMap::new();
    while start.elapsed() < WAIT {
        last = send(&mut balancer, 20).await;
        if last.keys().collect::<Vec<_>>() == ["127.0.0.5"] {
            break;
        }
    }
    assert_eq!(last.keys().collect::<Vec<_>>(), ["127.0.0.5"], "{last:?}");

    // No ready endpoint left: the serving, terminating one takes the
    // traffic (kube-proxy's fallback).
    server.apply(slice(port, &[("127.0.0.3", "terminating")])).unwrap();
    let start = Instant::now();
    while start.elapsed() < WAIT {
        last = send(&mut balancer, 5).await;
        if last.keys().collect::<Vec<_>>() == ["127.0.0.3"] {
            break;
        }
    }
    assert_eq!(last.keys().collect::<Vec<_>>(), ["127.0.0.3"], "{last:?}");
    task.abort();
}
