//! A small cluster in network namespaces: a node that routes between a
//! client and three pods over veth pairs, the fake API server, and the real
//! `proxyd` binary programming the node's namespace.
//!
//! ```text
//!   client 10.0.1.2 ── c0 10.0.1.1 ┐
//!                                  node (proxyd's nft + conntrack; forwards)
//!   pod1 10.0.11.2 ── p1 10.0.11.1 ┤
//!   pod2 10.0.12.2 ── p2 10.0.12.1 ┤   (and fd00:1::/64, fd00:11::/64, … for IPv6)
//!   pod3 10.0.13.2 ── p3 10.0.13.1 ┘
//! ```
//!
//! Each pod runs a server on TCP and UDP port 8080 that answers with the
//! pod's name. Every wait is bounded; namespaces, servers and proxyd are
//! removed on drop, also when a test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

/// The longest any wait may take.
pub const WAIT: Duration = Duration::from_secs(30);

pub use crate::common::{Netns, free_port, require, run};

/// Answers TCP and UDP on port 8080 (IPv4 and IPv6) with its name.
const SERVER: &str = r#"
import socket, sys, threading
name = sys.argv[1].encode()
def tcp():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 8080)); s.listen(128)
    while True:
        c, _ = s.accept()
        try: c.sendall(name)
        finally: c.close()
def udp():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 8080))
    while True:
        _, peer = s.recvfrom(64)
        s.sendto(name, peer)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
tcp()
"#;

/// Sends N requests; one line per answer (a pod's name, or `error: …`).
const CLIENT: &str = r#"
import socket, sys
proto, host, port, n, src_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
for _ in range(n):
    try:
        if proto == "tcp":
            c = socket.socket(fam, socket.SOCK_STREAM); c.settimeout(2)
            c.connect((host, port)); print(c.recv(64).decode()); c.close()
        else:
            c = socket.socket(fam, socket.SOCK_DGRAM); c.settimeout(1)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if src_port: c.bind(("", src_port))
            c.sendto(b"q", (host, port)); print(c.recv(64).decode()); c.close()
    except OSError as e:
        print("error:", e.__class__.__name__)
"#;

/// The names of the pods, by index.
pub const PODS: [&str; 3] = ["pod1", "pod2", "pod3"];

/// A pod's IPv4 address.
pub fn pod_ip(i: usize) -> String {
    format!("10.0.{}.2", 11 + i)
}

/// A pod's IPv6 address.
pub fn pod_ip6(i: usize) -> String {
    format!("fd00:{}::2", 11 + i)
}

/// The node's address on the client's link (node ports are reached here).
pub const NODE_IP: &str = "10.0.1.1";

/// The cluster.
pub struct Cluster {
    /// The API.
    pub server: FakeApiServer,
    /// The node (proxyd programs it).
    pub node: Netns,
    /// The client.
    pub client: Netns,
    /// Pods 1..3 (held so that their namespaces live as long as the
    /// cluster).
    #[allow(dead_code, reason = "kept for its Drop")]
    pods: Vec<Netns>,
    servers: Vec<Child>,
    proxyd: Option<Child>,
    /// proxyd's log lines.
    pub log: Arc<Mutex<Vec<String>>>,
    dir: PathBuf,
    /// proxyd's healthz port (on 127.0.0.1).
    pub healthz: u16,
    /// proxyd's metrics port (on 127.0.0.1).
    pub metrics: u16,
    /// Extra arguments for every proxyd start.
    pub args: Vec<String>,
    /// Extra environment for every proxyd start.
    pub env: Vec<(String, String)>,
}

impl Cluster {
    /// Builds the namespaces and starts the API server and the pods'
    /// servers (not proxyd).
    pub async fn new(tag: &str) -> Self {
        let id = std::process::id();
        let name = |role: &str| format!("e2e-{tag}-{role}-{id}");
        let node = Netns::named(name("node"));
        node.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
        node.exec("sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"]);
        // Service addresses must route somewhere for traffic without a
        // DNAT (no endpoints) to reach the filter hooks, as a node's default
        // route would take it; here they are delivered locally.
        node.ip(&["route", "add", "local", "10.96.0.0/16", "dev", "lo"]);
        node.ip(&["-6", "route", "add", "local", "fd00:96::/64", "dev", "lo"]);
        let link = |peer: &Netns, dev: &str, v4: &str, v6: &str| {
            node.ip(&[
                "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", &peer.0,
            ]);
            node.ip(&["addr", "add", &format!("{v4}.1/24"), "dev", dev]);
            node.ip(&["addr", "add", &format!("{v6}::1/64"), "dev", dev, "nodad"]);
            node.ip(&["link", "set", dev, "up"]);
            peer.ip(&["addr", "add", &format!("{v4}.2/24"), "dev", "eth0"]);
            peer.ip(&["addr", "add", &format!("{v6}::2/64"), "dev", "eth0", "nodad"]);
            peer.ip(&["link", "set", "eth0", "up"]);
            peer.ip(&["route", "add", "default", "via", &format!("{v4}.1")]);
            peer.ip(&["-6", "route", "add", "default", "via", &format!("{v6}::1")]);
        };
        let client = Netns::named(name("client"));
        link(&client, "c0", "10.0.1", "fd00:1");
        let mut pods = Vec::new();
        let mut servers = Vec::new();
        for (i, pod) in PODS.iter().enumerate() {
            let ns = Netns::named(name(pod));
            link(
                &ns,
                &format!("p{}", i + 1),
                &format!("10.0.{}", 11 + i),
                &format!("fd00:{}", 11 + i),
            );
            let mut child = Command::new("ip")
                .args(["netns", "exec", &ns.0, "python3", "-c", SERVER, pod])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut ready = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut ready)
                .unwrap();
            assert_eq!(ready.trim(), "ready");
            servers.push(child);
            pods.push(ns);
        }
        let server = FakeApiServer::start().await.unwrap();
        let dir = std::env::temp_dir().join(format!("proxyd-e2e-{tag}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            server,
            node,
            client,
            pods,
            servers,
            proxyd: None,
            log: Arc::default(),
            dir,
            healthz: free_port(),
            metrics: free_port(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Starts proxyd for node `node-1` against the API server.
    pub fn start_proxyd(&mut self) {
        let kubeconfig = self.dir.join("kubeconfig");
        std::fs::write(&kubeconfig, self.server.kubeconfig()).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--hostname-override", "node-1", "--netns", &self.node.0])
            .args(["--min-sync-period", "0", "--sync-period", "2s"])
            .args(if self.args.iter().any(|a| a == "--cluster-cidr") {
                &[][..]
            } else {
                &["--cluster-cidr", "10.0.0.0/16"][..]
            })
            .args(["--healthz-bind-address", &format!("127.0.0.1:{}", self.healthz)])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{}", self.metrics)])
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = self.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        });
        self.proxyd = Some(child);
        self.eventually("proxyd's first sync", || self.logged("synced"));
    }

    /// Whether some log line contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Sends `signal` to proxyd and waits for it to exit.
    pub fn stop_proxyd(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.proxyd.take().expect("proxyd is running");
        run("kill", &[&format!("-{signal}"), &child.id().to_string()]);
        let start = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < WAIT, "proxyd did not exit on {signal}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) until `check` holds; the failure shows proxyd's log.
    pub fn eventually(&self, what: &str, mut check: impl FnMut() -> bool) {
        let start = Instant::now();
        while !check() {
            if start.elapsed() > WAIT {
                let log = self.log.lock().unwrap().join("\n");
                panic!("timed out waiting for {what}; proxyd's log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `n` requests from the client (UDP from `src_port` if not 0).
    pub fn request(&self, proto: &str, host: &str, port: u16, n: u32, src_port: u16) -> Vec<String> {
        let out = self.client.exec(
            "python3",
            &[
                "-c",
                CLIENT,
                proto,
                host,
                &port.to_string(),
                &n.to_string(),
                &src_port.to_string(),
            ],
        );
        out.lines().map(str::to_owned).collect()
    }

    /// TCP requests.
    pub fn tcp(&self, host: &str, port: u16, n: u32) -> Vec<String> {
        self.request("tcp", host, port, n, 0)
    }

    /// GET `path` on 127.0.0.1:`port`: (status, whole response).
    pub fn http_get(&self, port: u16, path: &str) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return (0, String::new());
        };
        let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, text)
    }

    /// Applies an object to the API server.
    pub fn apply(&self, obj: Value) {
        self.server.apply(obj).unwrap();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut p) = self.proxyd.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Service object.
pub fn service(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

/// One endpoint of a slice: pod index, node, and conditions.
#[derive(Clone, Copy)]
pub struct Ep {
    /// Pod index (0..3).
    pub pod: usize,
    /// Runs on node-1 (the proxy's node).
    pub local: bool,
    /// `ready`.
    pub ready: bool,
    /// `serving`.
    pub serving: bool,
    /// `terminating`.
    pub terminating: bool,
    /// Zone hint.
    pub zone: Option<&'static str>,
}

impl Ep {
    /// A ready endpoint on another node.
    pub fn ready(pod: usize) -> Self {
        Self {
            pod,
            local: false,
            ready: true,
            serving: true,
            terminating: false,
            zone: None,
        }
    }
}

/// An EndpointSlice for service `svc` with port `port_name` (TCP or UDP,
/// 8080), IPv4 or IPv6 addresses.
pub fn slice(name: &str, svc: &str, port_name: &str, protocol: &str, eps: &[Ep], ipv6: bool) -> Value {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|e| {
            let addr = if ipv6 { pod_ip6(e.pod) } else { pod_ip(e.pod) };
            let mut v = json!({
                "addresses": [addr],
                "nodeName": if e.local { "node-1" } else { "node-2" },
                "conditions": {"ready": e.ready, "serving": e.serving, "terminating": e.terminating},
            });
            if let Some(z) = e.zone {
                v["zone"] = json!(z);
                v["hints"] = json!({"forZones": [{"name": z}]});
            }
            v
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": if ipv6 { "IPv6" } else { "IPv4" },
        "endpoints": endpoints,
        "ports": [{"name": port_name, "protocol": protocol, "port": 8080}],
    })
}

/// How many answers came from each pod name (and errors).
pub fn tally(answers: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut t = std::collections::BTreeMap::new();
    for a in answers {
        *t.entry(a.clone()).or_default() += 1;
    }
    t
}
