//! The daemon at scale: the real `proxyd run` (the release binary next to
//! this one) in a network namespace of its own, applying its ruleset with
//! the real `nft`, fed over HTTP by the fake API server (lists in pages of
//! 500, then watches), or by `--manifests`. Prints the figures issue 19
//! sets targets for. Needs root, `ip`, `nft` and `python3`.
//!
//!     cargo build --release -p proxyd -p proxyd-benches
//!     ./target/release/scale --services 50000 --endpoints 5
//!     ./target/release/scale --services 0 --big-service 100000
//!     ./target/release/scale --services 10000 --endpoints 2 --churn-rate 200 --churn-secs 600
//!     ./target/release/scale --services 150000 --endpoints 2 --manifests
//!     ./target/release/scale --services 50000 --endpoints 5 --real-objects --only-memory --proxyd OTHER
//!     ./target/release/scale --services 10000 --endpoints 2 --no-restart --churn-rate 50 --churn-secs 300
//!     ./target/release/scale --services 10000 --endpoints 2 --big-service 1000 --rolling-update --churn-rate 50
//!     ./target/release/scale --services 1000 --endpoints 2 --no-restart --freeze-secs 90 [--failover]
//!
//! The cluster: SERVICES ClusterIP services of ENDPOINTS ready endpoints
//! each, spread over 100 nodes, of which every tenth is a NodePort service
//! and every twentieth has `externalTrafficPolicy: Local`; optionally one
//! more service (`big`) with BIG endpoints in slices of 100.
//!
//! Figures, in order: the first sync (time from start, its own time, its
//! nft transaction), resident memory, one added service and one changed
//! endpoint (five of each), one changed endpoint of the big service, an idle
//! stretch (transactions sent while nothing changes), a restart with the
//! table in place (time to the first sync, and real TCP connections to an
//! existing service every 10 ms meanwhile: any that fail), churn (network
//! programming p50/p99 from the metrics, proxyd's CPU seconds, memory from
//! minute 2 to the end), and the longest nft transaction of the whole run.
//!
//! Network programming latency is measured from the moment the harness
//! hands a slice to the API server to the moment proxyd logs the sync that
//! applied it (after the kernel committed it): a new service whose slice
//! follows it 30 ms later, and one changed endpoint, `--latency-trials`
//! times each. The slices carry `last-change-trigger-time` as the
//! EndpointSlice controller sets it (the time of the change that caused
//! them), which proxyd's metric measures from.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use fake_apiserver::{FakeApiServer, Switch};
use proxyd_benches::{ScratchNetns, run_ok};
use serde_json::{Value, json};

/// What to build and measure.
#[derive(Parser, Debug)]
#[command(about = "proxyd at scale, in a network namespace, with the real nft")]
struct Args {
    /// Services of `--endpoints` endpoints.
    #[arg(long, default_value_t = 50_000)]
    services: u32,
    /// Endpoints per service.
    #[arg(long, default_value_t = 5)]
    endpoints: u32,
    /// One more service with this many endpoints (0: none).
    #[arg(long, default_value_t = 0)]
    big_service: u32,
    /// Endpoint changes per second in the churn phase (0: no churn).
    #[arg(long, default_value_t = 0)]
    churn_rate: u32,
    /// How long churn lasts, in seconds.
    #[arg(long, default_value_t = 600)]
    churn_secs: u64,
    /// proxyd's `--sync-period`; the idle stretch lasts two of them.
    #[arg(long, default_value_t = 10)]
    sync_period_secs: u64,
    /// Feed proxyd manifest files instead of the fake API server (no
    /// changes, restart or churn: only the first sync and memory).
    #[arg(long)]
    manifests: bool,
    /// Skip the restart phase.
    #[arg(long)]
    no_restart: bool,
    /// Objects as kube-apiserver sends them: managedFields, the last
    /// applied configuration, status conditions, endpoints' hostnames,
    /// zones and target references.
    #[arg(long)]
    real_objects: bool,
    /// Stop after the first sync's memory figure.
    #[arg(long)]
    only_memory: bool,
    /// The proxyd binary (default: the one next to this program).
    #[arg(long)]
    proxyd: Option<std::path::PathBuf>,
    /// Passed to proxyd as `--min-sync-period` (default: proxyd's own).
    #[arg(long)]
    min_sync_period: Option<String>,
    /// Passed to proxyd as `--list-page-size` (default: proxyd's own).
    #[arg(long)]
    list_page_size: Option<String>,
    /// New services and changed endpoints whose latency is measured, each.
    #[arg(long, default_value_t = 10)]
    latency_trials: u32,
    /// The churn is a rolling update of the big service (one pod at a
    /// time: the new one added unready, made ready while the old one
    /// terminates, the old one removed), not changes spread over services.
    #[arg(long, requires = "big_service")]
    rolling_update: bool,
    /// Every Nth service is dual-stack (an IPv6 cluster IP and an IPv6
    /// slice beside its IPv4 ones), and proxyd serves both families
    /// (`--ip-families ipv4,ipv6`); 0: IPv4 single-stack, as the recorded
    /// figures are.
    #[arg(long, default_value_t = 0)]
    dual_stack_every: u32,
    /// After the idle stretch, freeze the API server (open connections
    /// silent, new ones unanswered, as a SIGSTOPped kube-apiserver) for
    /// this many seconds with a new service made meanwhile: when proxyd
    /// says the watches fail, and when the service is programmed after the
    /// thaw (0: no freeze).
    #[arg(long, default_value_t = 0)]
    freeze_secs: u64,
    /// With `--freeze-secs`: proxyd reaches the API server through a
    /// forwarder (a load balancer's address), which sends new connections
    /// to a second, working API server once the first freezes; the figure
    /// is when the new service is programmed from the second one. Later
    /// changes go to the first server only: use with `--no-restart` and
    /// no churn.
    #[arg(long, requires = "freeze_secs")]
    failover: bool,
}

impl Args {
    /// Whether service `i` is dual-stack.
    fn dual_stack(&self, i: u32) -> bool {
        self.dual_stack_every > 0 && i.is_multiple_of(self.dual_stack_every)
    }
}

const NODES: u32 = 100;
const METRICS_PORT: u16 = 19_249;

fn namespace(i: u32) -> String {
    format!("ns-{}", i % 50)
}

fn cluster_ip(i: u32) -> String {
    format!("10.{}.{}.{}", 96 + i / 65_536, (i / 256) % 256, i % 256)
}

fn pod_ip(n: u32) -> String {
    format!("10.{}.{}.{}", 128 + n / 65_536, (n / 256) % 256, n % 256)
}

fn cluster_ip6(i: u32) -> String {
    format!("fd00:96::{:x}:{:x}", i >> 16, i & 0xffff)
}

fn pod_ip6(n: u32) -> String {
    format!("fd00:128::{:x}:{:x}", n >> 16, n & 0xffff)
}

/// Service `i` made dual-stack (RequireDualStack, IPv4 first).
fn dual_stack(mut service: Value, i: u32) -> Value {
    service["spec"]["clusterIPs"] = json!([cluster_ip(i), cluster_ip6(i)]);
    service["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    service["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
    service
}

/// `slice` as the IPv6 slice of the same endpoints.
fn ipv6_twin(mut slice: Value) -> Value {
    slice["metadata"]["name"] = json!(format!("{}-v6", slice["metadata"]["name"].as_str().unwrap_or("slice")));
    slice["addressType"] = json!("IPv6");
    if let Some(endpoints) = slice["endpoints"].as_array_mut() {
        for e in endpoints {
            let v4 = e["addresses"][0].as_str().unwrap_or("0.0.0.0").to_owned();
            let n = v4
                .parse::<std::net::Ipv4Addr>()
                .map_or(0, |a| u32::from(a) - u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0)));
            e["addresses"] = json!([pod_ip6(n)]);
        }
    }
    slice
}

fn service(i: u32) -> Value {
    let mut spec = json!({
        "clusterIP": cluster_ip(i),
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
    });
    if i.is_multiple_of(10) {
        spec["type"] = json!("NodePort");
        spec["ports"][0]["nodePort"] = json!(30_000 + i / 10);
        if i.is_multiple_of(20) {
            spec["externalTrafficPolicy"] = json!("Local");
        }
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i}"), "namespace": namespace(i)},
        "spec": spec,
    })
}

/// A slice of `svc-{service}` holding pods `first..first + count`;
/// `unready` (an index into it) is not ready.
fn slice(service: u32, part: u32, first: u32, count: u32, unready: Option<u32>) -> Value {
    let endpoints: Vec<Value> = (0..count)
        .map(|k| {
            let n = first + k;
            json!({
                "addresses": [pod_ip(n)],
                "nodeName": format!("node-{}", n % NODES),
                "conditions": {"ready": unready != Some(k)},
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("svc-{service}-{part}"), "namespace": namespace(service),
            "labels": {"kubernetes.io/service-name": format!("svc-{service}")},
            "annotations": {
                "endpoints.kubernetes.io/last-change-trigger-time": node_proxy::health::rfc3339(SystemTime::now()),
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

/// The big service's number: after every other one.
fn big_index(args: &Args) -> u32 {
    args.services
}

/// What a real API server adds to an object that proxyd does not read:
/// managedFields, the last applied configuration, status conditions, and
/// on endpoints their hostname, zone and target reference.
fn as_sent_by_the_api_server(mut obj: Value) -> Value {
    let applied = obj.to_string();
    let meta = &mut obj["metadata"];
    meta["uid"] = json!("0b7cfa3e-6b0a-4a53-9c0e-5f0d7f6a1c11");
    meta["creationTimestamp"] = json!("2026-11-30T09:12:44Z");
    meta["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!(applied);
    meta["managedFields"] = json!([
        {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T09:12:44Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                                                  "f:spec": {"f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}, "f:selector": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T09:13:02Z",
         "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {"f:conditions": {}}}}
    ]);
    if obj["kind"] == "Service" {
        obj["spec"]["selector"] = json!({"app": obj["metadata"]["name"]});
        obj["spec"]["sessionAffinity"] = json!("None");
        if obj["spec"]["ipFamilies"].is_null() {
            obj["spec"]["ipFamilies"] = json!(["IPv4"]);
            obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        }
        obj["status"] = json!({"loadBalancer": {}, "conditions": [{"type": "Available", "status": "True",
            "lastTransitionTime": "2026-11-30T09:13:02Z", "reason": "Ready", "message": "all endpoints are ready"}]});
    } else if let Some(endpoints) = obj["endpoints"].as_array_mut() {
        for (k, e) in endpoints.iter_mut().enumerate() {
            e["hostname"] = json!(format!("pod-{k}"));
            e["zone"] = json!("zone-a");
            e["targetRef"] = json!({"kind": "Pod", "namespace": "ns", "name": format!("pod-{k}-abcde"),
                                    "uid": "a3f0c2d1-0000-4000-8000-000000000001"});
        }
    }
    obj
}

fn objects(args: &Args) -> Vec<Value> {
    let plain = plain_objects(args);
    if args.real_objects {
        plain.into_iter().map(as_sent_by_the_api_server).collect()
    } else {
        plain
    }
}

fn plain_objects(args: &Args) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0..args.services {
        let its_slice = slice(i, 0, i * args.endpoints, args.endpoints, None);
        if args.dual_stack(i) {
            out.push(dual_stack(service(i), i));
            out.push(ipv6_twin(its_slice.clone()));
        } else {
            out.push(service(i));
        }
        out.push(its_slice);
    }
    if args.big_service > 0 {
        let big = big_index(args);
        out.push(service(big));
        let base = args.services * args.endpoints;
        for part in 0..args.big_service.div_ceil(100) {
            let count = (args.big_service - part * 100).min(100);
            out.push(slice(big, part, base + part * 100, count, None));
        }
    }
    out
}

/// One `synced` line of proxyd's log.
#[derive(Clone, Debug)]
struct Sync {
    /// When the harness read it.
    at: Instant,
    /// The longest network programming latency of its changes (`None`: a
    /// proxyd that does not log it).
    programming_max_us: Option<u64>,
    full: bool,
    nft_bytes: u64,
    apply_us: u64,
    transactions: u64,
    longest_tx_us: u64,
    took_us: u64,
}

impl Sync {
    fn parse(line: &str) -> Option<Self> {
        if !line.contains(" synced ") {
            return None;
        }
        let fields: BTreeMap<&str, &str> = line.split_whitespace().filter_map(|w| w.split_once('=')).collect();
        let num = |k: &str| fields.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        Some(Self {
            at: Instant::now(),
            programming_max_us: fields.get("programming_max_us").and_then(|v| v.parse().ok()),
            full: fields.get("full") == Some(&"true"),
            nft_bytes: num("nft_bytes"),
            apply_us: num("apply_us"),
            transactions: num("transactions"),
            longest_tx_us: num("longest_tx_us"),
            took_us: num("took_us"),
        })
    }
}

/// A running proxyd and the syncs it logs.
struct Daemon {
    child: Child,
    syncs: mpsc::Receiver<Sync>,
    started: Instant,
    /// When proxyd logged that its initial lists were complete.
    listed: Arc<OnceLock<Instant>>,
    /// When proxyd logged that a watch started failing.
    failing: Arc<std::sync::Mutex<Vec<Instant>>>,
}

impl Daemon {
    fn start(proxyd: &std::path::Path, ns: &str, source: &[String], args: &Args) -> Result<Self, String> {
        let started = Instant::now();
        let mut child = Command::new(proxyd)
            .args(["run", "--hostname-override", "node-1", "--netns", ns])
            // The recorded figures are IPv4 single-stack's (an IPv6 host
            // runs both families without a flag).
            .args(if args.dual_stack_every > 0 {
                ["--ip-families", "ipv4,ipv6"]
            } else {
                ["--ip-family", "ipv4"]
            })
            .args(["--healthz-bind-address", ""])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{METRICS_PORT}")])
            .args(["--sync-period", &format!("{}s", args.sync_period_secs)])
            .args(
                args.min_sync_period
                    .iter()
                    .flat_map(|d| ["--min-sync-period", d.as_str()]),
            )
            .args(
                args.list_page_size
                    .iter()
                    .flat_map(|n| ["--list-page-size", n.as_str()]),
            )
            .args(source)
            // RUST_LOG=info,nft_dataplane=debug shows each transaction.
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", proxyd.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let (tx, syncs) = mpsc::channel();
        let listed = Arc::new(OnceLock::new());
        let mark_listed = Arc::clone(&listed);
        let failing = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mark_failing = Arc::clone(&failing);
        // Keep draining the log: a closed pipe would end the daemon.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(s) = Sync::parse(&line) {
                    let _ = tx.send(s);
                } else if line.contains("initial lists complete") {
                    let _ = mark_listed.set(Instant::now());
                } else if ["ERROR", "WARN", "DEBUG"].iter().any(|level| line.contains(level)) {
                    if line.contains("watch failing") {
                        mark_failing
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Instant::now());
                    }
                    eprintln!("  proxyd: {line}");
                }
            }
        });
        Ok(Self {
            child,
            syncs,
            started,
            listed,
            failing,
        })
    }

    /// How long after start proxyd's initial lists were complete, as
    /// text ("?" when it has not said).
    fn listed_after(&self) -> String {
        match self.listed.get() {
            Some(at) => format!("{:.2?}", at.duration_since(self.started)),
            None => "?".into(),
        }
    }

    /// How long after `after` proxyd first said a watch fails, if it has.
    fn failing_after(&self, after: Instant) -> Option<Duration> {
        let said = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        said.iter().find(|t| **t >= after).map(|t| t.duration_since(after))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next sync that wrote something, within `timeout`.
    fn next_write(&self, timeout: Duration, longest: &mut u64) -> Result<Sync, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let s = self
                .syncs
                .recv_timeout(left)
                .map_err(|_| format!("no sync within {timeout:?}"))?;
            *longest = (*longest).max(s.longest_tx_us);
            if s.nft_bytes > 0 {
                return Ok(s);
            }
        }
    }

    /// The first sync that wrote, was read after `after` and applied a
    /// change with a trigger time (when proxyd logs them).
    fn write_after(&self, after: Instant, timeout: Duration, longest: &mut u64) -> Result<Sync, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.next_write(deadline.saturating_duration_since(Instant::now()), longest)?;
            if s.at > after && s.programming_max_us != Some(0) {
                return Ok(s);
            }
        }
    }

    /// Every sync logged within `d`.
    fn syncs_during(&self, d: Duration, longest: &mut u64) -> Vec<Sync> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Ok(s) = self
            .syncs
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            *longest = (*longest).max(s.longest_tx_us);
            out.push(s);
        }
        out
    }

    fn stop(self) {
        drop(self);
    }
}

/// A phase that fails leaves no proxyd behind (holding the metrics port,
/// writing to a namespace that is gone).
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// "median X, max Y (of [...] ms)" of latencies in microseconds.
fn spread(v: &[u64]) -> String {
    let in_ms: Vec<String> = v.iter().map(|us| format!("{:.1}", *us as f64 / 1000.0)).collect();
    format!(
        "median {}, max {} (of [{}] ms)",
        ms(median(v.to_vec())),
        ms(v.iter().copied().max().unwrap_or(0)),
        in_ms.join(", ")
    )
}

/// CPU seconds (user + system) a process has used, from `/proc/PID/stat`:
/// its own, and with the children it ran and waited for (`nft`).
fn cpu_seconds(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis: utime, stime,
    // cutime and cstime are the 12th to 15th of them, in clock ticks (100
    // per second).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|f| f.parse::<u64>().ok())
        .collect();
    let own = ticks.iter().take(2).sum::<u64>() as f64 / 100.0;
    let all = ticks.iter().sum::<u64>() as f64 / 100.0;
    (own, all)
}

/// One GET of proxyd's metrics page (plain HTTP/1.0 on loopback).
fn scrape() -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", METRICS_PORT)).map_err(|e| format!("metrics: {e}"))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| format!("metrics: {e}"))?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| format!("metrics: {e}"))?;
    Ok(body)
}

/// The `q` quantile of a Prometheus histogram's cumulative buckets: the
/// upper bound of the bucket it falls in, and the value Prometheus's
/// `histogram_quantile` interpolates within it; with the count.
fn histogram_quantile(buckets: &[(f64, u64)], q: f64) -> Option<(f64, f64, u64)> {
    let total = buckets.last()?.1;
    let rank = q * total as f64;
    let at = buckets.iter().position(|(_, c)| *c as f64 >= rank)?;
    let (le, count) = buckets[at];
    let (below_le, below) = if at == 0 { (0.0, 0) } else { buckets[at - 1] };
    let inside = (count - below).max(1) as f64;
    let interpolated = if le.is_finite() {
        below_le + (le - below_le) * (rank - below as f64) / inside
    } else {
        below_le
    };
    Some((le, interpolated, total))
}

/// The cumulative buckets of histogram `name` in a scrape, by bound.
fn histogram_buckets(metrics: &str, name: &str) -> Vec<(f64, u64)> {
    let mut buckets: Vec<(f64, u64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            let count = l.split_whitespace().last()?.parse::<f64>().ok()? as u64;
            Some((le, count))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// What a histogram observed between two scrapes: `after`'s buckets less
/// `before`'s.
fn histogram_since(after: &[(f64, u64)], before: &[(f64, u64)]) -> Vec<(f64, u64)> {
    after
        .iter()
        .map(|&(le, n)| {
            let earlier = before.iter().find(|(b, _)| *b == le).map_or(0, |(_, c)| *c);
            (le, n.saturating_sub(earlier))
        })
        .collect()
}

/// Accepts TCP connections on port 8080 inside the namespace, on the
/// addresses of `svc-1`'s endpoints.
fn start_backend(ns: &str, args: &Args) -> Result<Child, String> {
    for k in 0..args.endpoints {
        let addr = format!("{}/32", pod_ip(args.endpoints + k));
        run_ok("ip", &["netns", "exec", ns, "ip", "addr", "add", &addr, "dev", "lo"])?;
    }
    let server = "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
                  s.bind(('0.0.0.0',8080))\ns.listen(1024)\nwhile True:\n c,_=s.accept()\n c.close()";
    Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", server])
        .spawn()
        .map_err(|e| format!("python3: {e}"))
}

/// Connects to `svc-1`'s cluster IP from inside the namespace every 10 ms
/// until its standard input closes, then prints "OK FAILED".
fn start_prober(ns: &str) -> Result<Child, String> {
    let probe = format!(
        "import socket,sys,select,time\nok=fail=0\n\
         while not select.select([sys.stdin],[],[],0)[0]:\n\
         \ttry:\n\t\tc=socket.create_connection(('{}',80),timeout=0.5);c.close();ok+=1\n\
         \texcept Exception:\n\t\tfail+=1\n\
         \ttime.sleep(0.01)\nprint(ok,fail)",
        cluster_ip(1)
    );
    Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", &probe])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))
}

fn run(args: &Args, proxyd: &std::path::Path, ns: &ScratchNetns, dir: &std::path::Path) -> Result<(), String> {
    let ns = ns.0.as_str();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("no tokio runtime: {e}"))?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let made = Instant::now();
    let objects = objects(args);
    let count = objects.len();
    let mut source: Vec<String> = Vec::new();
    let mut failover = None;
    let server = if args.manifests {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let path = dir.join("cluster.json");
        std::fs::write(&path, list.to_string()).map_err(|e| e.to_string())?;
        source.extend(["--manifests".into(), dir.display().to_string()]);
        None
    } else {
        let start = || {
            let server = runtime
                .block_on(FakeApiServer::start())
                .map_err(|e| format!("fake API server: {e}"))?;
            for obj in &objects {
                server
                    .apply(obj.clone())
                    .map_err(|e| format!("fake API server: {e:?}"))?;
            }
            Ok::<_, String>(server)
        };
        let server = start()?;
        let mut kubeconfig = server.kubeconfig();
        if args.failover {
            let second = start()?;
            let switch = runtime
                .block_on(Switch::start(server.addr()))
                .map_err(|e| format!("forwarder: {e}"))?;
            kubeconfig = kubeconfig.replace(&server.url(), &format!("http://{}", switch.addr));
            failover = Some((second, switch));
        }
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig).map_err(|e| e.to_string())?;
        source.extend(["--kubeconfig".into(), path.display().to_string()]);
        Some(server)
    };
    println!(
        "{} services x {} endpoints{}, {count} objects from {} (made in {:.1?})",
        args.services,
        args.endpoints,
        if args.big_service > 0 {
            format!(" + one of {}", args.big_service)
        } else {
            String::new()
        },
        if args.manifests {
            "manifests"
        } else {
            "the fake API server"
        },
        made.elapsed()
    );
    let mut longest = 0u64;
    let daemon = Daemon::start(proxyd, ns, &source, args)?;
    let first = daemon.next_write(Duration::from_secs(600), &mut longest)?;
    println!(
        "first sync: {:.2?} after start, the lists complete at {}; the sync took {} (nft {} in {} transactions, the longest {}; {} KB, full={})",
        daemon.started.elapsed(),
        daemon.listed_after(),
        ms(first.took_us),
        ms(first.apply_us),
        first.transactions,
        ms(first.longest_tx_us),
        first.nft_bytes / 1000,
        first.full
    );
    if args.dual_stack_every > 0 {
        let second = daemon.next_write(Duration::from_secs(600), &mut longest)?;
        println!(
            "the other family's first sync: {:.2?} after start; it took {} ({} KB)",
            daemon.started.elapsed(),
            ms(second.took_us),
            second.nft_bytes / 1000
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    println!(
        "memory: VmRSS {:.0} MiB, VmHWM {:.0} MiB",
        proxyd_benches::memory_mib(daemon.pid(), "VmRSS:"),
        proxyd_benches::memory_mib(daemon.pid(), "VmHWM:")
    );
    let Some(server) = server.filter(|_| !args.only_memory) else {
        println!("longest nft transaction: {}", ms(longest));
        daemon.stop();
        return Ok(());
    };
    // With --failover both servers hold every object at the same
    // resourceVersions, as API servers sharing one etcd do.
    let apply = |obj: Value| {
        if let Some((second, _)) = &failover {
            second
                .apply(obj.clone())
                .map_err(|e| format!("fake API server: {e:?}"))?;
        }
        server.apply(obj).map_err(|e| format!("fake API server: {e:?}"))
    };
    let wait = Duration::from_secs(60);

    // New services whose slice follows 30 ms later (as the EndpointSlice
    // controller's does), each on a quiet table; then changed endpoints
    // (made unready) of existing services.
    let quiet = Duration::from_millis(300);
    let (mut added, mut added_took) = (Vec::new(), Vec::new());
    for k in 0..args.latency_trials {
        std::thread::sleep(quiet);
        let i = big_index(args) + 1 + k;
        // Stamped now: the trigger is the Service's creation.
        let its_slice = slice(i, 0, 1_000_000 + k * args.endpoints, args.endpoints.max(1), None);
        apply(service(i))?;
        std::thread::sleep(Duration::from_millis(30));
        let sent = Instant::now();
        apply(its_slice)?;
        let s = daemon.write_after(sent, wait, &mut longest)?;
        added.push(s.at.duration_since(sent).as_micros() as u64);
        added_took.push(s.took_us);
    }
    let (mut changed, mut changed_took) = (Vec::new(), Vec::new());
    for k in 0..args.latency_trials {
        if args.services == 0 {
            break;
        }
        std::thread::sleep(quiet);
        let i = (k * 7919) % args.services;
        let sent = Instant::now();
        apply(slice(i, 0, i * args.endpoints, args.endpoints, Some(0)))?;
        let s = daemon.write_after(sent, wait, &mut longest)?;
        changed.push(s.at.duration_since(sent).as_micros() as u64);
        changed_took.push(s.took_us);
    }
    println!(
        "a new service, its slice 30 ms later: slice sent to kernel {}; the sync {}",
        spread(&added),
        spread(&added_took)
    );
    if !changed.is_empty() {
        println!(
            "one changed endpoint: sent to kernel {}; the sync {}",
            spread(&changed),
            spread(&changed_took)
        );
    }
    if args.big_service > 0 {
        let big = big_index(args);
        let base = args.services * args.endpoints;
        let mut times = Vec::new();
        for unready in [Some(5), None, Some(17)] {
            apply(slice(
                big,
                3,
                base + 300,
                100.min(args.big_service.saturating_sub(300)),
                unready,
            ))?;
            let s = daemon.next_write(wait, &mut longest)?;
            times.push(format!(
                "{} ({} KB, nft {})",
                ms(s.took_us),
                s.nft_bytes / 1000,
                ms(s.apply_us)
            ));
        }
        println!("one endpoint of the big service changed: {}", times.join(", "));
    }

    // Idle: two sync periods with nothing changing.
    let idle = daemon.syncs_during(Duration::from_secs(2 * args.sync_period_secs + 1), &mut longest);
    let sent: Vec<&Sync> = idle.iter().filter(|s| s.nft_bytes > 0).collect();
    println!(
        "idle for {} s: {} syncs, {} transactions sent ({} bytes)",
        2 * args.sync_period_secs + 1,
        idle.len(),
        sent.len(),
        sent.iter().map(|s| s.nft_bytes).sum::<u64>()
    );

    if args.freeze_secs > 0 {
        freeze(args, &daemon, &server, failover.as_ref(), &mut longest)?;
    }

    let daemon = if args.no_restart || args.services < 2 {
        daemon
    } else {
        // Restart with the table in place, with traffic to svc-1 meanwhile.
        let mut backend = start_backend(ns, args)?;
        std::thread::sleep(Duration::from_millis(300));
        let mut prober = start_prober(ns)?;
        std::thread::sleep(Duration::from_millis(500));
        daemon.stop();
        let daemon = Daemon::start(proxyd, ns, &source, args)?;
        let first = daemon.next_write(Duration::from_secs(600), &mut longest)?;
        let after = daemon.started.elapsed();
        let peak = proxyd_benches::memory_mib(daemon.pid(), "VmHWM:");
        std::thread::sleep(Duration::from_millis(500));
        drop(prober.stdin.take());
        let mut counts = String::new();
        if let Some(mut out) = prober.stdout.take() {
            let _ = out.read_to_string(&mut counts);
        }
        let _ = prober.wait();
        let _ = backend.kill();
        let _ = backend.wait();
        let (ok, failed) = counts.trim().split_once(' ').unwrap_or(("?", "?"));
        println!(
            "restart with the table in place: first sync {after:.2?} after start, the lists complete at {} \
             (sync {}, nft {} in {} transactions, the longest {}; VmHWM {peak:.0} MiB); connections to svc-1 meanwhile: {ok} answered, {failed} failed",
            daemon.listed_after(),
            ms(first.took_us),
            ms(first.apply_us),
            first.transactions,
            ms(first.longest_tx_us),
        );
        daemon
    };

    if args.churn_rate > 0 && (args.services > 0 || args.rolling_update) {
        let started = Instant::now();
        let period = Duration::from_secs_f64(1.0 / f64::from(args.churn_rate));
        let (mut n, mut rss_at_2, mut next) = (0u64, None, Instant::now());
        let ready_before = scrape().ok();
        let cpu_before = cpu_seconds(daemon.pid());
        let (mut syncs, mut longest_programming) = (0u64, 0u64);
        let mut rolling = args.rolling_update.then(|| Rolling::new(args));
        while started.elapsed() < Duration::from_secs(args.churn_secs) {
            if let Some(r) = rolling.as_mut() {
                apply(r.step())?;
            } else {
                let i = ((n * 7919) % u64::from(args.services)) as u32;
                let unready = (n / u64::from(args.services)) % 2 == 0;
                apply(slice(i, 0, i * args.endpoints, args.endpoints, unready.then_some(0)))?;
            }
            n += 1;
            while let Ok(s) = daemon.syncs.try_recv() {
                longest = longest.max(s.longest_tx_us);
                longest_programming = longest_programming.max(s.programming_max_us.unwrap_or(0));
                syncs += 1;
            }
            if rss_at_2.is_none() && started.elapsed() >= Duration::from_secs(120.min(args.churn_secs / 5)) {
                rss_at_2 = Some((started.elapsed(), proxyd_benches::memory_mib(daemon.pid(), "VmRSS:")));
            }
            next += period;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        let cpu_after = cpu_seconds(daemon.pid());
        let cpu = (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1);
        let churned = started.elapsed();
        std::thread::sleep(Duration::from_secs(3));
        let metrics = scrape()?;
        let name = "kubeproxy_network_programming_duration_seconds";
        // Only what was observed during the churn: the first sync's
        // observations (objects made before proxyd started) are not.
        let before = ready_before
            .as_deref()
            .map(|m| histogram_buckets(m, name))
            .unwrap_or_default();
        let during = histogram_since(&histogram_buckets(&metrics, name), &before);
        let before = before.last().map_or(0, |(_, n)| *n);
        let (p50_le, p50, _) = histogram_quantile(&during, 0.5).ok_or("no network programming histogram")?;
        let (p99_le, p99, observed) = histogram_quantile(&during, 0.99).ok_or("no network programming histogram")?;
        let end = proxyd_benches::memory_mib(daemon.pid(), "VmRSS:");
        let (at, rss2) = rss_at_2.unwrap_or_default();
        println!(
            "churn{}: {n} changes in {churned:.0?} ({:.0}/s), {syncs} syncs; proxyd used {:.2} CPU seconds ({:.2} with the nft it ran); \
             network programming p50 {:.1} ms (<= {p50_le} s), p99 {:.1} ms (<= {p99_le} s), longest {} \
             ({observed} observations during the churn, {before} before it); \
             VmRSS {rss2:.0} MiB at {at:.0?}, {end:.0} MiB at the end ({:+.1}%)",
            if args.rolling_update {
                " (a rolling update of the big service)"
            } else {
                ""
            },
            n as f64 / churned.as_secs_f64(),
            cpu.0,
            cpu.1,
            p50 * 1000.0,
            p99 * 1000.0,
            ms(longest_programming),
            (end - rss2) / rss2.max(1.0) * 100.0
        );
    }
    println!("longest nft transaction: {}", ms(longest));
    daemon.stop();
    Ok(())
}

/// The API server freezes for `--freeze-secs` with a new service made
/// meanwhile (on both servers with `--failover`, whose forwarder then sends
/// new connections to the second): prints when proxyd said its watches
/// fail, and when the new service reached the kernel, after the thaw or
/// from the second server.
fn freeze(
    args: &Args,
    daemon: &Daemon,
    server: &FakeApiServer,
    failover: Option<&(FakeApiServer, Switch)>,
    longest: &mut u64,
) -> Result<(), String> {
    let i = big_index(args) + 1 + args.latency_trials;
    let its_slice = slice(i, 0, 3_000_000, args.endpoints.max(1), None);
    let frozen = Instant::now();
    server.set_frozen(true);
    let mut servers = vec![server];
    if let Some((second, switch)) = failover {
        switch.switch_to(second.addr());
        servers.push(second);
    }
    for s in servers {
        s.apply(service(i)).map_err(|e| format!("fake API server: {e:?}"))?;
        s.apply(its_slice.clone())
            .map_err(|e| format!("fake API server: {e:?}"))?;
    }
    let frozen_for = Duration::from_secs(args.freeze_secs);
    let noticed = |d: &Daemon| match d.failing_after(frozen) {
        Some(t) => format!("{t:.2?} after the freeze"),
        None => format!("not within {frozen_for:?}"),
    };
    if failover.is_some() {
        let programmed = match daemon.write_after(frozen, frozen_for, longest) {
            Ok(s) => format!("{:.2?} after the freeze", s.at.duration_since(frozen)),
            Err(_) => format!("not within {frozen_for:?}"),
        };
        std::thread::sleep(frozen_for.saturating_sub(frozen.elapsed()).min(Duration::from_secs(1)));
        println!(
            "API server frozen, new connections to a second one: proxyd said its watches fail {}; \
             a service made at the freeze was programmed {programmed} (the second server answered {:?})",
            noticed(daemon),
            failover.map(|(second, _)| (second.stats(), second.resource_version(), server.resource_version()))
        );
        server.set_frozen(false);
        return Ok(());
    }
    let _ = daemon.syncs_during(frozen_for.saturating_sub(frozen.elapsed()), longest);
    let thawed = Instant::now();
    server.set_frozen(false);
    let s = daemon.write_after(thawed, Duration::from_secs(120), longest)?;
    println!(
        "API server frozen for {frozen_for:?}: proxyd said its watches fail {}; \
         a service made during the freeze was programmed {:.2?} after the thaw",
        noticed(daemon),
        s.at.duration_since(thawed)
    );
    Ok(())
}

/// A rolling update of the big service, one pod at a time, as a
/// Deployment's controller and the EndpointSlice controller make it: the
/// new pod's endpoint appears unready, becomes ready while the old one
/// terminates (serving), then the old one goes. Each step is one slice
/// update.
struct Rolling {
    big: u32,
    /// Per slice of 100: its pods (number, ready, terminating).
    slices: Vec<Vec<(u32, bool, bool)>>,
    /// The pod being replaced: slice, position, step.
    at: (usize, usize, u8),
    next_pod: u32,
}

impl Rolling {
    fn new(args: &Args) -> Self {
        let base = args.services * args.endpoints;
        let slices = (0..args.big_service.div_ceil(100))
            .map(|part| {
                let first = base + part * 100;
                let count = (args.big_service - part * 100).min(100);
                (first..first + count).map(|n| (n, true, false)).collect()
            })
            .collect();
        Self {
            big: big_index(args),
            slices,
            at: (0, 0, 0),
            next_pod: 2_000_000,
        }
    }

    /// The next slice update.
    fn step(&mut self) -> Value {
        let (part, pos, step) = self.at;
        let pods = &mut self.slices[part];
        match step {
            0 => {
                pods.push((self.next_pod, false, false));
                self.next_pod += 1;
            }
            1 => {
                let new = pods.len() - 1;
                pods[new].1 = true;
                pods[pos] = (pods[pos].0, false, true);
            }
            _ => {
                let new = pods.pop().map(|(n, ..)| (n, true, false));
                if let Some(new) = new {
                    pods[pos] = new;
                }
            }
        }
        let value = self.slice_value(part);
        self.at = match step {
            0 | 1 => (part, pos, step + 1),
            _ if pos + 1 < self.slices[part].len() => (part, pos + 1, 0),
            _ => ((part + 1) % self.slices.len(), 0, 0),
        };
        value
    }

    fn slice_value(&self, part: usize) -> Value {
        let endpoints: Vec<Value> = self.slices[part]
            .iter()
            .map(|&(n, ready, terminating)| {
                json!({
                    "addresses": [pod_ip(n)],
                    "nodeName": format!("node-{}", n % NODES),
                    "conditions": {"ready": ready, "serving": ready || terminating, "terminating": terminating},
                })
            })
            .collect();
        let mut value = slice(self.big, part as u32, 0, 0, None);
        value["endpoints"] = json!(endpoints);
        value
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let next_to_this = || {
        std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.join("proxyd")))
    };
    let Some(proxyd) = args.proxyd.clone().or_else(next_to_this) else {
        eprintln!("scale: cannot find the proxyd binary");
        return ExitCode::FAILURE;
    };
    let dir = std::env::temp_dir().join(format!("proxyd-scale-{}", std::process::id()));
    let result = ScratchNetns::create("proxyd-scale").and_then(|ns| {
        // Cluster IPs are routed locally, so that probes from inside pass
        // output NAT.
        ns.ip(&["route", "add", "local", "10.96.0.0/12", "dev", "lo"])?;
        run(&args, &proxyd, &ns, &dir)
    });
    let _ = std::fs::remove_dir_all(&dir);
    proxyd_benches::exit("scale", result)
}
