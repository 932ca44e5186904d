//! The daemon's memory with many services: SERVICES services (default
//! 10,000) with ENDPOINTS endpoints each (default 10), fed to the real
//! `proxyd run --netns …` (the release binary next to this one) in a network
//! namespace it makes, either as manifests (`--manifests`, the default) or
//! through the fake API server (`--api`: list and watch over HTTP, pages of
//! 500, as a DaemonSet gets them). Waits for the first sync and prints
//! VmRSS/VmHWM. Needs root, `ip` and `nft`.
//!
//!     cargo build --release -p proxyd -p proxyd-benches
//!     ./target/release/daemon-rss [SERVICES] [ENDPOINTS] [--api]

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The cluster: a Service and one EndpointSlice per service; endpoints
/// spread over 100 nodes.
fn objects(services: u32, endpoints: u32) -> impl Iterator<Item = Value> {
    (0..services).flat_map(move |i| {
        let ns = format!("ns-{}", i % 50);
        let vip = format!("10.{}.{}.{}", 96 + i / 65536, (i / 256) % 256, i % 256);
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("svc-{i}"), "namespace": ns},
            "spec": {"clusterIP": vip, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        });
        let eps: Vec<Value> = (0..endpoints)
            .map(|k| {
                let n = i * endpoints + k;
                json!({
                    "addresses": [format!("10.{}.{}.{}", 128 + n / 65536, (n / 256) % 256, n % 256)],
                    "nodeName": format!("node-{}", n % 100),
                    "conditions": {"ready": true},
                })
            })
            .collect();
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("svc-{i}-abcde"), "namespace": ns,
                         "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": eps,
        });
        [service, slice]
    })
}

fn status_field(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let api = args.iter().any(|a| a == "--api");
    let numbers: Vec<u32> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (services, endpoints) = (
        numbers.first().copied().unwrap_or(10_000),
        numbers.get(1).copied().unwrap_or(10),
    );
    let Some(proxyd) = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.join("proxyd")))
    else {
        eprintln!("daemon-rss: cannot find the proxyd binary");
        return ExitCode::FAILURE;
    };
    let id = std::process::id();
    let dir = std::env::temp_dir().join(format!("proxyd-rss-{id}"));
    let ns = format!("proxyd-rss-{id}");
    // The fake API server runs on this process's runtime while proxyd runs.
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("daemon-rss: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = (|| -> Result<(), String> {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut source: Vec<String> = Vec::new();
        let _server = if api {
            let server = runtime
                .block_on(fake_apiserver::FakeApiServer::start())
                .map_err(|e| format!("fake API server: {e}"))?;
            for obj in objects(services, endpoints) {
                server.apply(obj).map_err(|e| format!("fake API server: {e:?}"))?;
            }
            let path = dir.join("kubeconfig");
            std::fs::write(&path, server.kubeconfig()).map_err(|e| e.to_string())?;
            source.extend(["--kubeconfig".into(), path.display().to_string()]);
            Some(server)
        } else {
            let list =
                json!({"apiVersion": "v1", "kind": "List", "items": objects(services, endpoints).collect::<Vec<_>>()});
            let path = dir.join("cluster.json");
            std::fs::write(&path, list.to_string()).map_err(|e| e.to_string())?;
            source.extend(["--manifests".into(), dir.display().to_string()]);
            None
        };
        let ok = Command::new("ip").args(["netns", "add", &ns]).status();
        if !ok.is_ok_and(|s| s.success()) {
            return Err("cannot create a network namespace (needs root and iproute2)".into());
        }
        let started = Instant::now();
        let mut child = Command::new(&proxyd)
            .args(["run", "--hostname-override", "node-1", "--netns", &ns])
            .args(["--healthz-bind-address", "", "--metrics-bind-address", ""])
            .args(&source)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", proxyd.display()))?;
        let pid = child.id();
        let stderr = child.stderr.take().ok_or("no stderr")?;
        // Keep draining the log: a closed pipe would end the daemon.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(" synced ") && line.contains("took_us=") {
                    let _ = tx.send(line);
                }
            }
        });
        let synced = rx.recv_timeout(Duration::from_secs(300)).ok();
        let first_sync = started.elapsed();
        // Let the allocator settle after the first sync's peak.
        std::thread::sleep(Duration::from_secs(2));
        let rss = status_field(pid, "VmRSS:");
        let hwm = status_field(pid, "VmHWM:");
        let _ = child.kill();
        let _ = child.wait();
        let synced = synced.ok_or("proxyd never synced")?;
        println!(
            "{services} services x {endpoints} endpoints from {}: first sync after {first_sync:.2?} (start, read, apply); \
             VmRSS {} MiB, VmHWM {} MiB",
            if api { "the fake API server" } else { "manifests" },
            rss.unwrap_or(0) / 1024,
            hwm.unwrap_or(0) / 1024
        );
        let took = synced
            .split_whitespace()
            .find(|w| w.starts_with("took_us="))
            .unwrap_or("");
        println!("  first sync: {took}");
        Ok(())
    })();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("daemon-rss: {e}");
            ExitCode::FAILURE
        }
    }
}
