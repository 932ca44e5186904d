//! How long a slice change at the API server takes to reach a
//! `kube_endpoints` subscriber: the fake API server holds SERVICES
//! services with a slice each; one endpoint of one service changes 100
//! times, and each time the subscriber's wait is timed (from the write to
//! the receiver's wake-up). Prints the median and the maximum. Then, with
//! `--missing-names N`, subscribes to N distinct names that have no
//! Service and drops each receiver, and prints how much the resident size
//! grew (a proxy that subscribes to every host it is asked for).
//!
//!     cargo build --release -p proxyd-benches --bin subscribe-latency
//!     ./target/release/subscribe-latency --services 10000
//!     ./target/release/subscribe-latency --services 1000 --changes 10 --missing-names 1000000

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use fake_apiserver::FakeApiServer;
use kube_endpoints::{Config, ServiceName, watch};
use serde_json::{Value, json};

/// The cluster's size.
#[derive(Parser, Debug)]
struct Args {
    /// Services, one slice of two endpoints each.
    #[arg(long, default_value_t = 1000)]
    services: u32,
    /// Changes timed.
    #[arg(long, default_value_t = 100)]
    changes: u32,
    /// Names without a Service to subscribe to and let go, measuring the
    /// resident size's growth.
    #[arg(long, default_value_t = 0)]
    missing_names: u32,
}

/// This process's resident size, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn service(i: u32) -> Value {
    json!({"kind": "Service", "metadata": {"name": format!("svc-{i}"), "namespace": "ns"},
           "spec": {"clusterIP": format!("10.{}.{}.{}", 96 + i / 65_536, (i / 256) % 256, i % 256),
                    "ports": [{"name": "http", "port": 80}]}})
}

fn slice(i: u32, ready: bool) -> Value {
    let ip = |k: u32| format!("10.{}.{}.{}", 128 + i / 32_768, (i / 128) % 256, (i % 128) * 2 + k);
    json!({"kind": "EndpointSlice",
           "metadata": {"name": format!("svc-{i}-a"), "namespace": "ns", "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
           "addressType": "IPv4",
           "endpoints": [{"addresses": [ip(0)], "conditions": {"ready": ready}}, {"addresses": [ip(1)], "conditions": {"ready": true}}],
           "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]})
}

async fn run(args: &Args) -> Result<(), String> {
    let server = FakeApiServer::start().await.map_err(|e| e.to_string())?;
    for i in 0..args.services {
        server.apply(service(i)).map_err(|e| format!("{e:?}"))?;
        server.apply(slice(i, true)).map_err(|e| format!("{e:?}"))?;
    }
    let (reader, watches) = watch(server.client(), Config::default());
    tokio::spawn(watches);
    let listed = Instant::now();
    tokio::time::timeout(Duration::from_secs(300), reader.wait_until_ready())
        .await
        .map_err(|_| "no first list in 300 s")?
        .map_err(|e| e.to_string())?;
    println!("{} services listed in {:.2?}", args.services, listed.elapsed());
    let name = ServiceName::new("ns", "svc-0");
    let mut rx = reader.subscribe(&name);
    rx.latest();
    let mut times = Vec::new();
    for k in 0..args.changes {
        let written = Instant::now();
        server.apply(slice(0, k % 2 == 1)).map_err(|e| format!("{e:?}"))?;
        tokio::time::timeout(Duration::from_secs(30), rx.changed())
            .await
            .map_err(|_| "no change in 30 s")?
            .map_err(|e| e.to_string())?;
        times.push(written.elapsed());
        rx.latest();
    }
    let slowest = (0..times.len()).max_by_key(|&k| times[k]).unwrap_or_default();
    let after_first = times.iter().skip(1).max().copied().unwrap_or_default();
    times.sort();
    println!(
        "slice change to subscriber, {} changes: median {:.2?}, max {:.2?} (change #{slowest}); max after the first {after_first:.2?}",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    if args.missing_names > 0 {
        let before = rss_kib();
        for i in 0..args.missing_names {
            drop(reader.subscribe(&ServiceName::new("asked", format!("host-{i}.example"))));
        }
        let after = rss_kib();
        println!(
            "{} names without a Service subscribed to and let go: resident size {before} -> {after} KiB ({:+} KiB)",
            args.missing_names,
            after as i64 - before as i64
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("subscribe-latency: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("subscribe-latency: {e}");
            ExitCode::FAILURE
        }
    }
}
