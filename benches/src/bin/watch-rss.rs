//! Resident memory of `proxyd run` fed real-shaped objects by the fake API
//! server: objects as kube-apiserver sends them (managedFields, the last
//! applied configuration, full statuses and conditions; the shapes of
//! `crates/informer-glue/tests/fixtures`), in multus mode: PODS pods on
//! this node and ten services on their network. No root: proxyd runs with
//! `--dry-run-dir`. Prints the time to the first sync and VmRSS and VmHWM
//! two seconds after it. (Node mode's memory is the scale harness's: with
//! `--dry-run-dir` a large cluster's transaction rendered as text would
//! dominate the figure.)
//!
//!     cargo build --release -p proxyd -p proxyd-benches
//!     ./target/release/watch-rss --pods 200
//!     ./target/release/watch-rss --pods 200 --proxyd /path/to/another/proxyd

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

/// What to serve.
#[derive(Parser, Debug)]
#[command(about = "proxyd's resident memory with real-shaped objects")]
struct Args {
    /// Pods on this node.
    #[arg(long, default_value_t = 200)]
    pods: u32,
    /// The proxyd binary (default: the one next to this program).
    #[arg(long)]
    proxyd: Option<std::path::PathBuf>,
}

const SERVICE: &str = include_str!("../../../crates/informer-glue/tests/fixtures/service.json");
const SLICE: &str = include_str!("../../../crates/informer-glue/tests/fixtures/endpointslice.json");
const POD: &str = include_str!("../../../crates/informer-glue/tests/fixtures/pod.json");

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_default()
}

fn ip(base: u32, n: u32) -> String {
    format!("10.{}.{}.{}", base + n / 65_536, (n / 256) % 256, n % 256)
}

/// Services on the pods' network, and endpoints per service.
const SERVICES: u32 = 10;
const ENDPOINTS: u32 = 5;

/// Multus service `i` (and its slice), shaped as the fixtures.
fn service(i: u32) -> [Value; 2] {
    let (ns, name) = (format!("ns-{}", i % 50), format!("svc-{i}"));
    let mut svc = fixture(SERVICE);
    svc["metadata"]["name"] = json!(name);
    svc["metadata"]["namespace"] = json!(ns);
    svc["spec"]["clusterIP"] = json!(ip(96, i));
    svc["spec"]["clusterIPs"] = json!([ip(96, i)]);
    svc["spec"]["type"] = json!("ClusterIP");
    if let Some(ports) = svc["spec"]["ports"].as_array_mut() {
        for p in ports {
            p.as_object_mut().map(|p| p.remove("nodePort"));
        }
    }
    let mut slice = fixture(SLICE);
    slice["metadata"]["name"] = json!(format!("{name}-abcde"));
    slice["metadata"]["namespace"] = json!(ns);
    slice["metadata"]["labels"]["kubernetes.io/service-name"] = json!(name);
    svc["metadata"]["annotations"]["k8s.v1.cni.cncf.io/service-network"] = json!("macvlan1");
    svc["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = json!("multus-proxy");
    slice["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = json!("multus-proxy");
    slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] =
        json!("multus-endpointslice-controller.npwg.k8s.io");
    let template = slice["endpoints"][0].clone();
    slice["endpoints"] = (0..ENDPOINTS)
        .map(|k| {
            let mut e = template.clone();
            e["addresses"] = json!([ip(128, i * ENDPOINTS + k)]);
            e["nodeName"] = json!(format!("node-{}", (i + k) % 100));
            e["targetRef"]["name"] = json!(format!("{name}-{k}"));
            e
        })
        .collect();
    [svc, slice]
}

/// Pod `i` on this node, attached to network `macvlan1`.
fn pod(i: u32) -> Value {
    let mut pod = fixture(POD);
    pod["metadata"]["name"] = json!(format!("client-{i}"));
    pod["metadata"]["uid"] = json!(format!("uid-client-{i}"));
    let status = json!([
        {"name": "cbr0", "interface": "eth0", "ips": [ip(244, i)], "default": true},
        {"name": "apps/macvlan1", "interface": "net1", "ips": [ip(168, i)], "mac": "ae:12:34:56:78:9a"},
    ]);
    pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"] = json!(status.to_string());
    pod
}

fn run(args: &Args) -> Result<(), String> {
    let proxyd = match &args.proxyd {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("proxyd"),
    };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let server = runtime
        .block_on(FakeApiServer::start())
        .map_err(|e| format!("fake API server: {e}"))?;
    for i in 0..SERVICES {
        for obj in service(i) {
            server.apply(obj).map_err(|e| format!("{e:?}"))?;
        }
    }
    for i in 0..args.pods {
        server.apply(pod(i)).map_err(|e| format!("{e:?}"))?;
    }
    let dir = std::env::temp_dir().join(format!("watch-rss-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("netns")).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("kubeconfig"), server.kubeconfig()).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&proxyd);
    cmd.args([
        "run",
        "--hostname-override",
        "node-1",
        "--ip-family",
        "ipv4",
        "--kubeconfig",
    ])
    .arg(dir.join("kubeconfig"))
    .args(["--healthz-bind-address", "", "--metrics-bind-address", ""])
    .arg("--dry-run-dir")
    .arg(dir.join("nft"))
    .args(["--multus", "--pod-netns-dir"])
    .arg(dir.join("netns"))
    .stderr(Stdio::piped())
    .stdout(Stdio::null());
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("{}: {e}", proxyd.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let synced = loop {
        match rx.recv_timeout(Duration::from_secs(600)) {
            // Multus mode's sync line has no `first`: its first one is the first.
            Ok(l) if l.contains("synced") => break started.elapsed(),
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                return Err(format!("no first sync: {e}"));
            }
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    let pid = child.id();
    println!(
        "{} pods, {SERVICES} services x {ENDPOINTS} endpoints (real-shaped objects): first sync {synced:.2?} after start; \
         VmRSS {:.1} MiB, VmHWM {:.1} MiB ({})",
        args.pods,
        proxyd_benches::memory_mib(pid, "VmRSS:"),
        proxyd_benches::memory_mib(pid, "VmHWM:"),
        proxyd.display()
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("watch-rss: {e}");
            ExitCode::FAILURE
        }
    }
}
