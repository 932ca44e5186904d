//! The secondary-network EndpointSlice controller (`proxyd slices`' code,
//! in this process) against the fake API server: `--services` Services on
//! a network, `--pods` pods each (every pod with an address on it); the
//! time from start to every slice written and the writes it took; then,
//! one pod at a time, a change of readiness, and the writes each cost; and
//! a restart, and what it writes.
//!
//! `cargo build --release -p proxyd-benches --bin slices-controller &&
//! ./target/release/slices-controller --services 50 --pods 20`

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use fake_apiserver::{FakeApiServer, Kind};
use network_slices::controller::{ControllerConfig, SliceController};
use network_slices::metrics::ControllerMetrics;
use network_slices::reconcile::SliceRules;
use proxyd_benches::exit;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Services on the network.
    #[arg(long, default_value_t = 50)]
    services: u32,
    /// Pods per Service.
    #[arg(long, default_value_t = 20)]
    pods: u32,
    /// Single-pod changes measured.
    #[arg(long, default_value_t = 20)]
    changes: u32,
}

fn service(i: u32) -> Value {
    json!({"kind": "Service", "metadata": {"name": format!("svc-{i}"), "namespace": "ns",
        "labels": {"service.kubernetes.io/service-proxy-name": "multus-proxy"},
        "annotations": {"k8s.v1.cni.cncf.io/service-network": "net1"}},
        "spec": {"clusterIP": format!("10.96.{}.{}", i / 250, i % 250), "selector": {"app": format!("app-{i}")},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
}

fn pod(svc: u32, n: u32, ready: bool) -> Value {
    let ip = format!("192.168.{}.{}", svc, n + 1);
    let status = json!([{"name": "ns/net1", "interface": "net1", "ips": [ip]}]).to_string();
    json!({"kind": "Pod", "metadata": {"name": format!("pod-{svc}-{n}"), "namespace": "ns",
        "labels": {"app": format!("app-{svc}")}, "annotations": {"k8s.v1.cni.cncf.io/network-status": status}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

fn endpoints(server: &FakeApiServer) -> (usize, usize) {
    let slices = server.objects(Kind::EndpointSlice);
    let eps = slices
        .iter()
        .map(|s| s["endpoints"].as_array().map_or(0, Vec::len))
        .sum();
    (slices.len(), eps)
}

fn start(server: &FakeApiServer) -> (tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready) = tokio::sync::oneshot::channel::<()>();
    let config = ControllerConfig {
        rules: SliceRules {
            controller: "multus-endpointslice-controller.npwg.k8s.io".into(),
            max_endpoints_per_slice: 100,
        },
        proxy_name: "multus-proxy".into(),
        dra: false,
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

async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Result<Duration, String> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > limit {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(started.elapsed())
}

async fn run(args: Args) -> Result<(), String> {
    let server = FakeApiServer::start().await.map_err(|e| e.to_string())?;
    let total = (args.services * args.pods) as usize;
    server
        .apply(json!({"kind": "Node", "metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "a"}}}))
        .map_err(|e| format!("{e:?}"))?;
    for i in 0..args.services {
        server.apply(service(i)).map_err(|e| format!("{e:?}"))?;
        for n in 0..args.pods {
            server.apply(pod(i, n, true)).map_err(|e| format!("{e:?}"))?;
        }
    }
    let started = Instant::now();
    let (stop, ready) = start(&server);
    ready.await.map_err(|e| e.to_string())?;
    let filled = started.elapsed();
    until("every slice", Duration::from_secs(120), || {
        endpoints(&server).1 == total
    })
    .await
    .map_err(|e| format!("{e}: {:?} of {total}", endpoints(&server)))?;
    let cold = started.elapsed();
    let (slices, eps) = endpoints(&server);
    println!(
        "{} services x {} pods: caches filled {filled:.1?} after start; {slices} slices holding {eps} endpoints written {cold:.1?} after start, in {} writes",
        args.services,
        args.pods,
        server.stats().writes
    );
    let mut per_change = Vec::new();
    let mut latency = Vec::new();
    for c in 0..args.changes {
        let (svc, n) = (c % args.services, c % args.pods);
        let before = server.stats().writes;
        let at = Instant::now();
        server.apply(pod(svc, n, false)).map_err(|e| format!("{e:?}"))?;
        let name = format!("svc-{svc}");
        let took = until("the change written", Duration::from_secs(10), || {
            server.objects(Kind::EndpointSlice).iter().any(|s| {
                s["metadata"]["labels"]["kubernetes.io/service-name"] == name.as_str()
                    && s["endpoints"]
                        .as_array()
                        .is_some_and(|e| e.iter().any(|e| e["conditions"]["ready"] == false))
            })
        })
        .await?;
        let _ = at;
        tokio::time::sleep(Duration::from_millis(100)).await;
        per_change.push(server.stats().writes - before);
        latency.push(took);
        server.apply(pod(svc, n, true)).map_err(|e| format!("{e:?}"))?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    latency.sort();
    println!(
        "one pod's readiness changed, {} times: writes each {:?}; written after (median, max) {:.1?}, {:.1?}",
        args.changes,
        per_change,
        latency[latency.len() / 2],
        latency[latency.len() - 1]
    );
    drop(stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.stats().writes;
    let started = Instant::now();
    let (stop, ready) = start(&server);
    ready.await.map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "restarted over them: caches filled {:.1?} after start; {} writes in the second after",
        started.elapsed() - Duration::from_secs(1),
        server.stats().writes - before
    );
    drop(stop);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return exit("slices-controller", Err(e.to_string())),
    };
    exit("slices-controller", runtime.block_on(run(args)))
}
