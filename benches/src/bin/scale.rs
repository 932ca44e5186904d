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
//! programming p99 from the metrics, memory from minute 2 to the end), and
//! the longest nft transaction of the whole run.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use fake_apiserver::FakeApiServer;
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
        obj["spec"]["ipFamilies"] = json!(["IPv4"]);
        obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
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
        out.push(service(i));
        out.push(slice(i, 0, i * args.endpoints, args.endpoints, None));
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
#[derive(Clone, Debug, Default)]
struct Sync {
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
}

impl Daemon {
    fn start(proxyd: &std::path::Path, ns: &str, source: &[String], sync_period: u64) -> Result<Self, String> {
        let started = Instant::now();
        let mut child = Command::new(proxyd)
            .args(["run", "--hostname-override", "node-1", "--netns", ns])
            .args(["--healthz-bind-address", ""])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{METRICS_PORT}")])
            .args(["--sync-period", &format!("{sync_period}s")])
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
        // Keep draining the log: a closed pipe would end the daemon.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(s) = Sync::parse(&line) {
                    let _ = tx.send(s);
                } else if line.contains("initial lists complete") {
                    let _ = mark_listed.set(Instant::now());
                } else if ["ERROR", "WARN", "DEBUG"].iter().any(|level| line.contains(level)) {
                    eprintln!("  proxyd: {line}");
                }
            }
        });
        Ok(Self {
            child,
            syncs,
            started,
            listed,
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

    fn stop(mut self) {
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

/// One GET of proxyd's metrics page (plain HTTP/1.0 on loopback).
fn scrape() -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", METRICS_PORT)).map_err(|e| format!("metrics: {e}"))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| format!("metrics: {e}"))?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| format!("metrics: {e}"))?;
    Ok(body)
}

/// The `q` quantile of a Prometheus histogram's cumulative buckets, as the
/// upper bound of the bucket it falls in (what `histogram_quantile` would interpolate within).
fn histogram_quantile(buckets: &[(f64, u64)], q: f64) -> Option<(f64, u64)> {
    let total = buckets.last()?.1;
    let rank = (q * total as f64).ceil() as u64;
    let (le, _) = buckets.iter().find(|(_, c)| *c >= rank)?;
    Some((*le, total))
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
    let server = if args.manifests {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let path = dir.join("cluster.json");
        std::fs::write(&path, list.to_string()).map_err(|e| e.to_string())?;
        source.extend(["--manifests".into(), dir.display().to_string()]);
        None
    } else {
        let server = runtime
            .block_on(FakeApiServer::start())
            .map_err(|e| format!("fake API server: {e}"))?;
        for obj in objects {
            server.apply(obj).map_err(|e| format!("fake API server: {e:?}"))?;
        }
        let path = dir.join("kubeconfig");
        std::fs::write(&path, server.kubeconfig()).map_err(|e| e.to_string())?;
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
    let daemon = Daemon::start(proxyd, ns, &source, args.sync_period_secs)?;
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
    let apply = |obj: Value| server.apply(obj).map_err(|e| format!("fake API server: {e:?}"));
    let wait = Duration::from_secs(60);

    // One added service, five times.
    let mut added = Vec::new();
    for k in 0..5 {
        let i = big_index(args) + 1 + k;
        apply(service(i))?;
        apply(slice(i, 0, 1_000_000 + k * args.endpoints, args.endpoints.max(1), None))?;
        let s = daemon.next_write(wait, &mut longest)?;
        added.push(s.took_us);
    }
    // One changed endpoint (made unready) of existing services.
    let mut changed = Vec::new();
    for k in 0..5u32 {
        if args.services == 0 {
            break;
        }
        let i = (k * 7919) % args.services;
        apply(slice(i, 0, i * args.endpoints, args.endpoints, Some(0)))?;
        let s = daemon.next_write(wait, &mut longest)?;
        changed.push(s.took_us);
    }
    println!(
        "one added service: median {} (of {added:?} µs)",
        ms(median(added.clone()))
    );
    if !changed.is_empty() {
        println!(
            "one changed endpoint: median {} (of {changed:?} µs)",
            ms(median(changed.clone()))
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

    let daemon = if args.no_restart || args.services < 2 {
        daemon
    } else {
        // Restart with the table in place, with traffic to svc-1 meanwhile.
        let mut backend = start_backend(ns, args)?;
        std::thread::sleep(Duration::from_millis(300));
        let mut prober = start_prober(ns)?;
        std::thread::sleep(Duration::from_millis(500));
        daemon.stop();
        let daemon = Daemon::start(proxyd, ns, &source, args.sync_period_secs)?;
        let first = daemon.next_write(Duration::from_secs(600), &mut longest)?;
        let after = daemon.started.elapsed();
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
             (sync {}, nft {} in {} transactions); connections to svc-1 meanwhile: {ok} answered, {failed} failed",
            daemon.listed_after(),
            ms(first.took_us),
            ms(first.apply_us),
            first.transactions,
        );
        daemon
    };

    if args.churn_rate > 0 && args.services > 0 {
        let started = Instant::now();
        let period = Duration::from_secs_f64(1.0 / f64::from(args.churn_rate));
        let (mut n, mut rss_at_2, mut next) = (0u64, None, Instant::now());
        let ready_before = scrape().ok();
        while started.elapsed() < Duration::from_secs(args.churn_secs) {
            let i = ((n * 7919) % u64::from(args.services)) as u32;
            let unready = (n / u64::from(args.services)) % 2 == 0;
            apply(slice(i, 0, i * args.endpoints, args.endpoints, unready.then_some(0)))?;
            n += 1;
            while let Ok(s) = daemon.syncs.try_recv() {
                longest = longest.max(s.longest_tx_us);
            }
            if rss_at_2.is_none() && started.elapsed() >= Duration::from_secs(120.min(args.churn_secs / 5)) {
                rss_at_2 = Some((started.elapsed(), proxyd_benches::memory_mib(daemon.pid(), "VmRSS:")));
            }
            next += period;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
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
        let (p99, observed) = histogram_quantile(&during, 0.99).ok_or("no network programming histogram")?;
        let end = proxyd_benches::memory_mib(daemon.pid(), "VmRSS:");
        let (at, rss2) = rss_at_2.unwrap_or_default();
        println!(
            "churn: {n} endpoint changes in {:.0?} ({:.0}/s); network programming p99 <= {p99} s \
             ({} observations during the churn, {before} before it); VmRSS {rss2:.0} MiB at {at:.0?}, {end:.0} MiB at the end ({:+.1}%)",
            started.elapsed(),
            n as f64 / started.elapsed().as_secs_f64(),
            observed,
            (end - rss2) / rss2.max(1.0) * 100.0
        );
    }
    println!("longest nft transaction: {}", ms(longest));
    daemon.stop();
    Ok(())
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
