//! A client-side load balancer over a Service's endpoints: tower's
//! power-of-two-choices balancer fed by `Reader::discover`, sending HTTP/2
//! requests straight to the pods, following scale-ups, scale-downs and
//! terminating pods as kube-proxy would.
//!
//! Against the cluster of the kubeconfig kube finds, service `NS/NAME`,
//! port `PORT` (the Service's port name):
//!
//!     cargo run -p kube-endpoints --features tower --example balance -- NS/NAME PORT
//!
//! It sends 300 requests a round, says which endpoint answered each, and
//! goes on until stopped. `h2.rs` beside it is the per-endpoint HTTP/2
//! client (a tower `Service`); both files can be copied into an
//! application as they are.

use std::collections::BTreeMap;

use kube_endpoints::{Config, Discovered, Protocol, ServiceName, watch};
use tower::balance::p2c::Balance;
use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
use tower::{BoxError, Service, ServiceExt};

mod h2;

use h2::H2;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [service, port] = args.as_slice() else {
        return Err("usage: balance NAMESPACE/NAME PORT".into());
    };
    let (ns, name) = service.split_once('/').ok_or("the service is NAMESPACE/NAME")?;
    let service = ServiceName::new(ns, name);
    let client = kube::Client::try_default().await?;

    let (reader, watches) = watch(client, Config::default());
    tokio::spawn(watches);
    reader.wait_until_ready().await?;
    // One HTTP/2 client per endpoint; the endpoint's facts are there too
    // (its hostname for TLS, its pod and zone for metrics).
    let endpoints = reader.discover(&service, port, Protocol::Tcp, |e: &Discovered| H2(e.addr));
    let mut balancer = Balance::new(PendingRequestsDiscover::new(endpoints, CompleteOnResponse::default()));
    for round in 0.. {
        let mut answers: BTreeMap<String, u32> = BTreeMap::new();
        for _ in 0..300 {
            let answer = balancer.ready().await?.call(()).await?;
            *answers.entry(answer).or_default() += 1;
        }
        println!("round {round}: 300 requests to {service} port {port:?}");
        for (who, n) in &answers {
            println!("  {n:4}  {who}");
        }
    }
    Ok(())
}
