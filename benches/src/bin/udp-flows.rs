//! UDP flows through `proxyd run` in network namespaces, fed by the fake
//! API server's watch, with
//! real traffic: a client namespace sends request/answer datagrams on
//! `--flows` flows (one source port each, `--rate` a second each) to a
//! UDP service of three endpoints, each in a namespace of its own behind a
//! bridge on the node. While the traffic runs, the harness restarts proxyd
//! (SIGTERM, then SIGKILL), turns one endpoint not serving, another
//! terminating (still serving), removes every endpoint, brings one back,
//! and deletes the Service. For each step: the datagrams sent and lost, the flows that moved
//! to another endpoint (and how many had to: their endpoint went), when an
//! endpoint that stopped serving last answered, and how long the flows
//! took to be answered again.
//!
//! Needs root, iproute2 and python3.
//!
//! `cargo build --release -p proxyd -p proxyd-benches --bin udp-flows &&
//! ./target/release/udp-flows --family ipv4` (`--proxyd PATH` runs another
//! build's binary; `--upgrade-from PATH` starts with an earlier release's
//! and upgrades at the first restart; `--affinity` makes it sticky).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use fake_apiserver::{FakeApiServer, Kind};
use proxyd_benches::{ScratchNetns, exit, run_ok};
use serde_json::{Value, json};

const CLIENT: &str = include_str!("../../udp-flows/client.py");
const SERVER: &str = include_str!("../../udp-flows/server.py");

#[derive(Parser)]
struct Args {
    /// `ipv4` or `ipv6`.
    #[arg(long, default_value = "ipv4")]
    family: String,
    /// Flows (client source ports).
    #[arg(long, default_value_t = 30)]
    flows: u32,
    /// Datagrams a second on each flow.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Seconds each step's traffic runs before the next step.
    #[arg(long, default_value_t = 4)]
    step_secs: u64,
    /// The proxyd binary (default: the one beside this harness).
    #[arg(long)]
    proxyd: Option<PathBuf>,
    /// Start with this proxyd (an earlier release's): the first restart
    /// is then the upgrade to `--proxyd`, over the table it left.
    #[arg(long)]
    upgrade_from: Option<PathBuf>,
    /// The Service has ClientIP session affinity.
    #[arg(long)]
    affinity: bool,
}

/// One family's addresses.
struct Addresses {
    client: &'static str,
    node: &'static str,
    prefix: &'static str,
    bridge: &'static str,
    bridge_prefix: &'static str,
    endpoints: [&'static str; 3],
    vip: &'static str,
    services: &'static str,
    cluster: &'static str,
    address_type: &'static str,
    six: bool,
}

const V4: Addresses = Addresses {
    client: "192.168.70.2",
    node: "192.168.70.1",
    prefix: "24",
    bridge: "10.244.1.1",
    bridge_prefix: "24",
    endpoints: ["10.244.1.11", "10.244.1.12", "10.244.1.13"],
    vip: "10.96.0.53",
    services: "10.96.0.0/16",
    cluster: "10.244.0.0/16",
    address_type: "IPv4",
    six: false,
};

const V6: Addresses = Addresses {
    client: "fd00:70::2",
    node: "fd00:70::1",
    prefix: "64",
    bridge: "fd00:244:1::1",
    bridge_prefix: "64",
    endpoints: ["fd00:244:1::11", "fd00:244:1::12", "fd00:244:1::13"],
    vip: "fd00:96::53",
    services: "fd00:96::/64",
    cluster: "fd00:244::/48",
    address_type: "IPv6",
    six: true,
};

const NAMES: [&str; 3] = ["a", "b", "c"];
const PORT: u16 = 5353;

/// An endpoint's conditions in the slice.
#[derive(Clone, Copy)]
struct Conditions {
    ready: bool,
    serving: bool,
    terminating: bool,
}

const READY: Conditions = Conditions {
    ready: true,
    serving: true,
    terminating: false,
};
const NOT_SERVING: Conditions = Conditions {
    ready: false,
    serving: false,
    terminating: false,
};
const TERMINATING: Conditions = Conditions {
    ready: false,
    serving: true,
    terminating: true,
};

/// What a step does.
enum Action {
    /// Stops proxyd with this signal and starts it again.
    Restart(&'static str),
    /// Writes the slice with these endpoints (by name).
    Slice(Vec<(&'static str, Conditions)>),
    /// Deletes the Service (its slice stays, as it does until the garbage
    /// collector deletes it).
    DeleteService,
}

/// One step: its mark, what it does, and the endpoints that no longer
/// serve from then on.
struct Step {
    mark: &'static str,
    action: Action,
    gone: Vec<&'static str>,
}

fn steps() -> Vec<Step> {
    let slice = |eps: &[(&'static str, Conditions)]| Action::Slice(eps.to_vec());
    vec![
        Step {
            mark: "restart, SIGTERM",
            action: Action::Restart("TERM"),
            gone: vec![],
        },
        Step {
            mark: "restart, SIGKILL",
            action: Action::Restart("KILL"),
            gone: vec![],
        },
        Step {
            mark: "a not serving (still listed)",
            action: slice(&[("a", NOT_SERVING), ("b", READY), ("c", READY)]),
            gone: vec!["a"],
        },
        Step {
            mark: "b terminating, still serving",
            action: slice(&[("a", NOT_SERVING), ("b", TERMINATING), ("c", READY)]),
            gone: vec!["a"],
        },
        Step {
            mark: "no endpoint left",
            action: slice(&[]),
            gone: vec!["a", "b", "c"],
        },
        Step {
            mark: "c back",
            action: slice(&[("c", READY)]),
            gone: vec!["a", "b"],
        },
        Step {
            mark: "service deleted",
            action: Action::DeleteService,
            gone: vec!["a", "b", "c"],
        },
    ]
}

/// The Service: UDP port 53 to the endpoints' 5353 (with ClientIP
/// affinity when `affinity`).
fn service(addr: &Addresses, affinity: bool) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dns", "namespace": "ns"},
        "spec": {"clusterIP": addr.vip, "clusterIPs": [addr.vip], "ipFamilies": [addr.address_type],
                 "ports": [{"name": "dns", "protocol": "UDP", "port": 53, "targetPort": PORT}]},
    });
    if affinity {
        s["spec"]["sessionAffinity"] = json!("ClientIP");
    }
    s
}

/// Its slice, with these endpoints (by name).
fn slice(addr: &Addresses, eps: &[(&str, Conditions)]) -> Value {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(name, c)| {
            let i = NAMES.iter().position(|n| n == name).unwrap_or_default();
            json!({"addresses": [addr.endpoints[i]], "nodeName": "node-2",
                   "conditions": {"ready": c.ready, "serving": c.serving, "terminating": c.terminating}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "dns-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "dns"}},
        "addressType": addr.address_type,
        "ports": [{"name": "dns", "protocol": "UDP", "port": PORT}],
        "endpoints": endpoints,
    })
}

/// A child killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exec_in(ns: &str, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]).args(args);
    c
}

/// Starts `python3 -c script args` in `ns` and waits for its `ready`.
fn python(ns: &str, script: &str, args: &[&str]) -> Result<(Running, BufReader<std::process::ChildStdout>), String> {
    let mut all = vec!["-c", script];
    all.extend_from_slice(args);
    let mut child = exec_in(ns, "python3", &all)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3 in {ns}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut out = BufReader::new(stdout);
    let mut line = String::new();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        return Err(format!("python3 in {ns} did not start: {line:?}"));
    }
    Ok((Running(child), out))
}

/// The namespaces: client ─ node (proxyd) ─ bridge ─ three endpoints.
struct Topology {
    client: ScratchNetns,
    node: ScratchNetns,
    _endpoints: Vec<ScratchNetns>,
    _servers: Vec<Running>,
}

fn topology(addr: &Addresses) -> Result<Topology, String> {
    let client = ScratchNetns::create("udpf-client")?;
    let node = ScratchNetns::create("udpf-node")?;
    let six = |args: &mut Vec<String>| {
        if addr.six {
            args.push("nodad".into());
        }
    };
    let pid = std::process::id() % 100_000;
    let veth = format!("uc{pid}");
    run_ok(
        "ip",
        &[
            "link", "add", &veth, "netns", &client.0, "type", "veth", "peer", "name", "uplink", "netns", &node.0,
        ],
    )?;
    let add = |ns: &ScratchNetns, ip: &str, prefix: &str, dev: &str| {
        let mut args: Vec<String> = ["addr", "add", &format!("{ip}/{prefix}"), "dev", dev]
            .iter()
            .map(|s| s.to_string())
            .collect();
        six(&mut args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ns.ip(&args)
    };
    add(&client, addr.client, addr.prefix, &veth)?;
    add(&node, addr.node, addr.prefix, "uplink")?;
    client.ip(&["link", "set", &veth, "up"])?;
    node.ip(&["link", "set", "uplink", "up"])?;
    client.ip(&["route", "add", addr.services, "via", addr.node])?;
    client.ip(&["route", "add", addr.cluster, "via", addr.node])?;
    node.ip(&["link", "add", "br0", "type", "bridge"])?;
    add(&node, addr.bridge, addr.bridge_prefix, "br0")?;
    node.ip(&["link", "set", "br0", "up"])?;
    let forwarding = if addr.six {
        "net.ipv6.conf.all.forwarding=1"
    } else {
        "net.ipv4.ip_forward=1"
    };
    run_ok("ip", &["netns", "exec", &node.0, "sysctl", "-qw", forwarding])?;
    let mut endpoints = Vec::new();
    let mut servers = Vec::new();
    for (i, ip) in addr.endpoints.iter().enumerate() {
        let ns = ScratchNetns::create(&format!("udpf-ep{i}"))?;
        let (inner, outer) = ("eth0".to_owned(), format!("ue{i}{pid}"));
        run_ok(
            "ip",
            &[
                "link", "add", &inner, "netns", &ns.0, "type", "veth", "peer", "name", &outer, "netns", &node.0,
            ],
        )?;
        node.ip(&["link", "set", &outer, "master", "br0"])?;
        node.ip(&["link", "set", &outer, "up"])?;
        add(&ns, ip, addr.bridge_prefix, &inner)?;
        ns.ip(&["link", "set", &inner, "up"])?;
        ns.ip(&["route", "add", "default", "via", addr.bridge])?;
        let (server, _) = python(&ns.0, SERVER, &[NAMES[i], ip, &PORT.to_string()])?;
        servers.push(server);
        endpoints.push(ns);
    }
    Ok(Topology {
        client,
        node,
        _endpoints: endpoints,
        _servers: servers,
    })
}

/// Starts proxyd on the node, reading the API server `kubeconfig` names,
/// and waits for its first sync.
fn start_proxyd(
    proxyd: &PathBuf,
    node: &str,
    family: &str,
    cluster: &str,
    kubeconfig: &PathBuf,
    log: &PathBuf,
) -> Result<Running, String> {
    let child = Command::new(proxyd)
        .args([
            "run",
            "--hostname-override",
            "node-1",
            "--netns",
            node,
            "--ip-family",
            family,
        ])
        .args([
            "--cluster-cidr",
            cluster,
            "--healthz-bind-address",
            "",
            "--metrics-bind-address",
            "",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("{}: {e}", proxyd.display()))?;
    let started = Instant::now();
    while !std::fs::read_to_string(log).unwrap_or_default().contains("synced") {
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!("proxyd: no first sync in 30 s; {}", log.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Running(child))
}

/// One datagram as the client saw it.
struct Datagram {
    flow: u64,
    sent: f64,
    endpoint: Option<String>,
}

/// A mark the client timed.
struct Mark {
    at: f64,
    name: String,
}

/// What the client saw.
struct Report {
    marks: Vec<Mark>,
    datagrams: Vec<Datagram>,
}

fn decode(out: &str) -> Result<Report, String> {
    let v: serde_json::Value = serde_json::from_str(out).map_err(|e| format!("the client's report: {e}"))?;
    let marks = v["marks"]
        .as_array()
        .ok_or("no marks")?
        .iter()
        .filter_map(|m| {
            Some(Mark {
                at: m[0].as_f64()?,
                name: m[1].as_str()?.to_owned(),
            })
        })
        .collect();
    let datagrams = v["datagrams"]
        .as_array()
        .ok_or("no datagrams")?
        .iter()
        .filter_map(|d| {
            Some(Datagram {
                flow: d[0].as_u64()?,
                sent: d[2].as_f64()?,
                endpoint: d[3].as_str().map(str::to_owned),
            })
        })
        .collect();
    Ok(Report { marks, datagrams })
}

/// A step's figures.
struct Figures {
    sent: usize,
    lost: usize,
    moved: usize,
    had_to_move: usize,
    /// When a newly gone endpoint last answered, after the step.
    last_stale_ms: Option<f64>,
    recovery_ms: f64,
}

/// Each flow's endpoint at the end of a span: the one that answered its
/// last answered datagram.
fn settled<'a>(datagrams: &[&'a Datagram]) -> BTreeMap<u64, &'a str> {
    let mut out = BTreeMap::new();
    for d in datagrams {
        if let Some(e) = &d.endpoint {
            out.insert(d.flow, e.as_str());
        }
    }
    out
}

/// The figures of the span `during` (from `start`) after the span
/// `before`: `gone` do not serve in it, `newly_gone` stopped at its start.
fn figures(before: &[&Datagram], during: &[&Datagram], start: f64, gone: &[&str], newly_gone: &[&str]) -> Figures {
    let (was, now) = (settled(before), settled(during));
    let moved = was.iter().filter(|(f, e)| now.get(*f).is_some_and(|n| n != *e)).count();
    let had_to_move = was.values().filter(|e| gone.contains(e)).count();
    let last_stale_ms = during
        .iter()
        .filter(|d| d.endpoint.as_deref().is_some_and(|e| newly_gone.contains(&e)))
        .map(|d| (d.sent - start) * 1000.0)
        .reduce(f64::max);
    // Per flow: from the step to the first answer after its last loss.
    let mut recovery: f64 = 0.0;
    let mut flows: BTreeMap<u64, Vec<&Datagram>> = BTreeMap::new();
    for d in during {
        flows.entry(d.flow).or_default().push(d);
    }
    for ds in flows.values() {
        if let Some(last_lost) = ds.iter().rposition(|d| d.endpoint.is_none()) {
            let back = ds[last_lost + 1..].iter().find(|d| d.endpoint.is_some());
            let at = back.map_or(f64::INFINITY, |d| d.sent);
            recovery = recovery.max(at - start);
        }
    }
    Figures {
        sent: during.len(),
        lost: during.iter().filter(|d| d.endpoint.is_none()).count(),
        moved,
        had_to_move,
        last_stale_ms,
        recovery_ms: recovery * 1000.0,
    }
}

fn mark(stdin: &mut ChildStdin, name: &str) -> Result<(), String> {
    writeln!(stdin, "{name}").map_err(|e| format!("the client: {e}"))
}

fn run(args: &Args) -> Result<(), String> {
    let (addr, family) = match args.family.as_str() {
        "ipv4" => (&V4, "ipv4"),
        "ipv6" => (&V6, "ipv6"),
        other => return Err(format!("--family {other:?}: ipv4 or ipv6")),
    };
    let proxyd = match &args.proxyd {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("proxyd"),
    };
    let t = topology(addr)?;
    let dir = std::env::temp_dir().join(format!("udp-flows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("no tokio runtime: {e}"))?;
    let server = runtime
        .block_on(FakeApiServer::start())
        .map_err(|e| format!("fake API server: {e}"))?;
    let apply = |obj: Value| {
        server
            .apply(obj)
            .map(drop)
            .map_err(|e| format!("fake API server: {e:?}"))
    };
    apply(service(addr, args.affinity))?;
    apply(slice(addr, &[("a", READY), ("b", READY), ("c", READY)]))?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).map_err(|e| e.to_string())?;
    let log = |n: usize| dir.join(format!("proxyd-{n}.log"));
    let first = args.upgrade_from.as_ref().unwrap_or(&proxyd);
    let mut daemon = start_proxyd(first, &t.node.0, family, addr.cluster, &kubeconfig, &log(0))?;
    let (mut client, mut out) = python(
        &t.client.0,
        CLIENT,
        &[addr.vip, "53", &args.flows.to_string(), &args.rate.to_string(), "40000"],
    )?;
    let mut stdin = client.0.stdin.take().ok_or("no stdin")?;
    let step = Duration::from_secs(args.step_secs);
    std::thread::sleep(step);
    mark(&mut stdin, "steady")?;
    std::thread::sleep(step);
    let steps = steps();
    for (n, s) in steps.iter().enumerate() {
        mark(&mut stdin, s.mark)?;
        match &s.action {
            Action::Restart(signal) => {
                run_ok("kill", &[&format!("-{signal}"), &daemon.0.id().to_string()])?;
                let _ = daemon.0.wait();
                daemon = start_proxyd(&proxyd, &t.node.0, family, addr.cluster, &kubeconfig, &log(n + 1))?;
            }
            Action::Slice(eps) => apply(slice(addr, eps))?,
            Action::DeleteService => drop(
                server
                    .delete(Kind::Service, "ns", "dns")
                    .map_err(|e| format!("fake API server: {e:?}"))?,
            ),
        }
        std::thread::sleep(step);
    }
    mark(&mut stdin, "stop")?;
    let mut report = String::new();
    std::io::Read::read_to_string(&mut out, &mut report).map_err(|e| e.to_string())?;
    drop(daemon);
    let report = decode(&report)?;
    let at = |name: &str| report.marks.iter().find(|m| m.name == name).map(|m| m.at);
    let span = |from: f64, to: f64| -> Vec<&Datagram> {
        report
            .datagrams
            .iter()
            .filter(|d| d.sent >= from && d.sent < to)
            .collect()
    };
    println!(
        "{family}, {} flows at {}/s each, {} s a step, proxyd {}{}{}",
        args.flows,
        args.rate,
        args.step_secs,
        proxyd.display(),
        args.upgrade_from.as_ref().map_or(String::new(), |p| format!(
            ", upgraded at the first restart from {}",
            p.display()
        )),
        if args.affinity { ", ClientIP affinity" } else { "" }
    );
    println!(
        "| step | sent | lost | flows moved | of which had to | a gone endpoint last answered | answered again after |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut previous = at("steady").ok_or("no steady mark")?;
    let steady = span(previous, at(steps[0].mark).unwrap_or(f64::MAX));
    let f = figures(&[], &steady, previous, &[], &[]);
    println!("| steady | {} | {} | - | - | - | - |", f.sent, f.lost);
    let mut gone_before: Vec<&str> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let start = at(s.mark).ok_or_else(|| format!("no mark {:?}", s.mark))?;
        let end = steps
            .get(i + 1)
            .and_then(|n| at(n.mark))
            .or_else(|| at("stop"))
            .unwrap_or(f64::MAX);
        let newly: Vec<&str> = s.gone.iter().copied().filter(|g| !gone_before.contains(g)).collect();
        let f = figures(&span(previous, start), &span(start, end), start, &s.gone, &newly);
        let recovery = if f.recovery_ms.is_finite() {
            format!("{:.0} ms", f.recovery_ms)
        } else {
            "never".into()
        };
        let stale = f.last_stale_ms.map_or("-".into(), |ms| format!("{ms:.0} ms"));
        println!(
            "| {} | {} | {} | {} | {} | {stale} | {recovery} |",
            s.mark, f.sent, f.lost, f.moved, f.had_to_move
        );
        previous = start;
        gone_before = s.gone.clone();
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    exit("udp-flows", run(&args))
}
