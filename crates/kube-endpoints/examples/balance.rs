//! A client-side load balancer over a Service's endpoints: tower's
//! power-of-two-choices balancer fed by `Reader::discover`, sending HTTP/2
//! requests straight to the pods, following scale-ups, scale-downs and
//! terminating pods as kube-proxy would.
//!
//! Against a cluster (the kubeconfig kube finds), service `NS/NAME`, port `PORT`:
//!
//!     cargo run -p kube-endpoints --features tower --example balance -- NS/NAME PORT
//!
//! Without arguments it runs on its own: an API server (the workspace's
//! fake one) with service `shop/web`, three HTTP/2 servers on 127.0.0.2-4,
//! and a scale-down half-way.
//!
//!     cargo run -p kube-endpoints --features tower --example balance

use std::collections::BTreeMap;

use kube_endpoints::{Config, Protocol, ServiceName, watch};
use tower::balance::p2c::Balance;
use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
use tower::{BoxError, Service, ServiceExt};

#[path = "../tests/support/h2.rs"]
mod h2;

use h2::{H2, serve};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let demo = args.is_empty();
    let (client, service, port, _server) = if demo {
        let (server, client) = demo_cluster().await?;
        (client, ServiceName::new("shop", "web"), "http".to_owned(), Some(server))
    } else {
        let (ns, name) = args[0].split_once('/').ok_or("the service is NAMESPACE/NAME")?;
        let port = args.get(1).cloned().unwrap_or_default();
        (
            kube::Client::try_default().await?,
            ServiceName::new(ns, name),
            port,
            None,
        )
    };

    let (reader, watches) = watch(client, Config::default());
    tokio::spawn(watches);
    reader.wait_until_ready().await?;
    let endpoints = reader.discover(&service, &port, Protocol::Tcp, H2);
    let mut balancer = Balance::new(PendingRequestsDiscover::new(endpoints, CompleteOnResponse::default()));

    for round in 0..2 {
        let mut answers: BTreeMap<String, u32> = BTreeMap::new();
        for _ in 0..300 {
            let answer = balancer.ready().await?.call(()).await?;
            *answers.entry(answer).or_default() += 1;
        }
        println!("round {round}: 300 requests to {service} port {port:?}");
        for (who, n) in &answers {
            println!("  {n:4}  {who}");
        }
        if let (true, Some(server)) = (round == 0, &_server) {
            println!("scaling down: 127.0.0.2 leaves, 127.0.0.3 terminates");
            server
                .apply(demo_slice(&[("127.0.0.3", false), ("127.0.0.4", true)]))
                .map_err(|e| format!("{e:?}"))?;
            let mut updates = reader.subscribe(&service);
            updates
                .wait_for(|v| v.as_ref().is_some_and(|v| v.ready().count() == 1))
                .await?;
        }
    }
    Ok(())
}

const DEMO_PORT: u16 = 18_080;

fn demo_slice(endpoints: &[(&str, bool)]) -> serde_json::Value {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, ready)| {
            serde_json::json!({"addresses": [ip],
                               "conditions": {"ready": ready, "serving": true, "terminating": !ready}})
        })
        .collect();
    serde_json::json!({"kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": DEMO_PORT}]})
}

/// The demo's cluster: an API server holding `shop/web` and its slice, and
/// the three pods behind it, each answering with its name.
async fn demo_cluster() -> Result<(fake_apiserver::FakeApiServer, kube::Client), BoxError> {
    for (ip, name) in [("127.0.0.2", "web-a"), ("127.0.0.3", "web-b"), ("127.0.0.4", "web-c")] {
        serve(ip.parse()?, DEMO_PORT, format!("{name} at {ip}")).await?;
    }
    let server = fake_apiserver::FakeApiServer::start().await?;
    server
        .apply(
            serde_json::json!({"kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}}),
        )
        .map_err(|e| format!("{e:?}"))?;
    server
        .apply(demo_slice(&[
            ("127.0.0.2", true),
            ("127.0.0.3", true),
            ("127.0.0.4", true),
        ]))
        .map_err(|e| format!("{e:?}"))?;
    let client = server.client();
    Ok((server, client))
}
