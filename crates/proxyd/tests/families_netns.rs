//! An IPv6-only node and a dual-stack node, each a network namespace with
//! an outside client on a veth pair, programmed by `proxyd run` started
//! with no family flag (as kube-proxy's DaemonSet starts it): real TCP
//! connections to every kind of service meet the fate kube-proxy gives
//! them (an endpoint of the right family; dropped where it drops).
//!
//! Needs root, `ip`, `nft` and `python3`: `#[ignore]`d, run with
//! `cargo nextest run --run-ignored all` (as `.ci/run` does).

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{KillOnDrop, Netns, require};

/// Answers each TCP connection to one of the given addresses on port 8080
/// with that address; or connects to `VIP PORT` `N` times, printing each
/// answer or the error.
const TCP: &str = r#"
import socket, sys, threading, time
if sys.argv[1] == "serve":
    def serve(addr):
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, 8080)); s.listen(64)
        while True:
            c, _ = s.accept(); c.sendall(addr.encode()); c.close()
    for a in sys.argv[2:]:
        threading.Thread(target=serve, args=(a,), daemon=True).start()
    time.sleep(0.3)
    print("ready", flush=True)
    while True:
        time.sleep(60)
vip, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for _ in range(n):
    try:
        c = socket.create_connection((vip, port), timeout=1)
        print(c.recv(64).decode()); c.close()
    except OSError as e:
        print("error:", e.__class__.__name__)
"#;

/// What a connection should meet.
#[derive(Clone, Debug)]
enum Fate {
    /// Answered by one of these endpoints (every one of them, over the
    /// tries, when `all`).
    Endpoints { any_of: Vec<&'static str>, all: bool },
    /// Dropped: no answer.
    Dropped,
    /// Refused at once: nothing listens.
    Refused,
}

/// Where a connection starts.
#[derive(Clone, Copy, Debug)]
enum From {
    /// A process on the node.
    Node,
    /// The client outside, across the veth.
    Outside,
}

struct Probe {
    what: &'static str,
    from: From,
    vip: &'static str,
    port: u16,
    fate: Fate,
}

fn endpoints(any_of: &[&'static str]) -> Fate {
    Fate::Endpoints {
        any_of: any_of.to_vec(),
        all: true,
    }
}

fn sticky(any_of: &[&'static str]) -> Fate {
    Fate::Endpoints {
        any_of: any_of.to_vec(),
        all: false,
    }
}

/// A node with its client, its endpoints' server and proxyd.
struct Node {
    node: Netns,
    client: Netns,
    dir: PathBuf,
    log: PathBuf,
    _server: KillOnDrop,
    proxyd: KillOnDrop,
}

impl Node {
    /// `tag`'s namespaces: the node has `addresses` on its veth (the
    /// client the next one of each family), the endpoints `local` on its
    /// loopback, service ranges routed to itself; proxyd runs with
    /// `flags` and these manifests.
    fn start(tag: &str, addresses: &[&str], local: &[&str], flags: &[&str], manifests: &str) -> Self {
        let node = Netns::named(format!("proxyd-{tag}-n-{}", std::process::id()));
        let client = Netns::named(format!("proxyd-{tag}-c-{}", std::process::id()));
        let (a, b) = (
            format!("{tag}{}a", std::process::id() % 10_000),
            format!("{tag}{}b", std::process::id() % 10_000),
        );
        common::run(
            "ip",
            &[
                "link", "add", &a, "netns", &node.0, "type", "veth", "peer", "name", &b, "netns", &client.0,
            ],
        );
        for addr in addresses {
            let (mine, theirs, six) = peer(addr);
            let dad: &[&str] = if six { &["nodad"] } else { &[] };
            let mut args = vec!["addr", "add", mine.as_str(), "dev", &a];
            args.extend_from_slice(dad);
            node.ip(&args);
            let mut args = vec!["addr", "add", theirs.as_str(), "dev", &b];
            args.extend_from_slice(dad);
            client.ip(&args);
        }
        node.ip(&["link", "set", &a, "up"]);
        client.ip(&["link", "set", &b, "up"]);
        for l in local {
            let six = l.contains(':');
            let prefix = if six { format!("{l}/128") } else { format!("{l}/32") };
            let mut args = vec!["addr", "add", prefix.as_str(), "dev", "lo"];
            if six {
                args.push("nodad");
            }
            node.ip(&args);
        }
        for (net, six) in [("10.96.0.0/16", false), ("fd00:96::/64", true)] {
            let mut args = if six { vec!["-6"] } else { vec![] };
            args.extend(["route", "add", "local", net, "dev", "lo"]);
            node.ip(&args);
        }
        // The outside client reaches load balancer and external IPs
        // through the node.
        for addr in addresses {
            let (_, _, six) = peer(addr);
            let via = addr.split('/').next().unwrap();
            let nets: &[&str] = if six {
                &["fd00:201::/64", "fd00:202::/64"]
            } else {
                &["10.201.0.0/16", "10.202.0.0/16"]
            };
            for net in nets {
                client.ip(&["route", "add", net, "via", via]);
            }
        }
        let mut serve = vec!["-c", TCP, "serve"];
        serve.extend_from_slice(local);
        let server = node.spawn_ready("python3", &serve);
        let dir = std::env::temp_dir().join(format!("proxyd-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cluster.yaml"), manifests).unwrap();
        let log = dir.join("proxyd.log");
        let proxyd = spawn_proxyd(&node, &dir, &log, flags);
        Self {
            node,
            client,
            dir,
            log,
            _server: server,
            proxyd,
        }
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops proxyd (its table stays, as kube-proxy's does) and starts it
    /// again with `flags`, logging afresh.
    fn restart(&mut self, flags: &[&str]) {
        let _ = common::terminate(&mut self.proxyd, "TERM");
        self.proxyd = spawn_proxyd(&self.node, &self.dir, &self.log, flags);
    }

    /// Waits until both families' first syncs are written.
    fn wait_until_programmed(&self) {
        let start = Instant::now();
        while self.said().matches("first=true").count() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no first sync of both families:\n{}",
                self.said()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn connect(&self, from: From, vip: &str, port: u16, n: u32) -> Vec<String> {
        let ns = match from {
            From::Node => &self.node,
            From::Outside => &self.client,
        };
        let out = ns.exec(
            "python3",
            &["-c", TCP, "connect", vip, &port.to_string(), &n.to_string()],
        );
        out.lines().map(str::to_owned).collect()
    }

    /// Sends `n` UDP datagrams from the node to `lo:port`, where a socket
    /// of the node's is bound: `sent=N refused=R received=K` (refused: the
    /// send, or the one after it, failed as the kernel refused it).
    fn datagrams_to_a_squatter(&self, lo: &str, port: u16, n: u32) -> String {
        let out = self
            .node
            .exec("python3", &["-c", DATAGRAMS, lo, &port.to_string(), &n.to_string()]);
        out.trim().to_owned()
    }

    fn check(&self, probes: &[Probe]) {
        for p in probes {
            let n = match p.fate {
                Fate::Dropped | Fate::Refused => 2,
                Fate::Endpoints { .. } => 30,
            };
            let answers = self.connect(p.from, p.vip, p.port, n);
            match &p.fate {
                Fate::Dropped => {
                    assert!(
                        answers.iter().all(|a| a == "error: TimeoutError"),
                        "{}: dropped, got {answers:?}",
                        p.what
                    );
                }
                Fate::Refused => {
                    assert!(
                        answers.iter().all(|a| a == "error: ConnectionRefusedError"),
                        "{}: refused, got {answers:?}",
                        p.what
                    );
                }
                Fate::Endpoints { any_of, all } => {
                    let seen: BTreeSet<&str> = answers.iter().map(String::as_str).collect();
                    let allowed: BTreeSet<&str> = any_of.iter().copied().collect();
                    assert!(seen.is_subset(&allowed), "{}: {answers:?}, not only {any_of:?}", p.what);
                    if *all {
                        assert_eq!(seen, allowed, "{}: every endpoint answers over {n} tries", p.what);
                    } else {
                        assert_eq!(
                            seen.len(),
                            1,
                            "{}: one client sticks to one endpoint: {answers:?}",
                            p.what
                        );
                    }
                }
            }
        }
    }
}

/// `proxyd run` for `node`, with `flags` and the manifests in `dir`.
fn spawn_proxyd(node: &Netns, dir: &std::path::Path, log: &std::path::Path, flags: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args(["run", "--hostname-override", "node-1", "--netns", &node.0])
            .args(["--healthz-bind-address", "", "--metrics-bind-address", ""])
            .args(flags)
            .arg("--manifests")
            .arg(dir.join("cluster.yaml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = common::terminate(&mut self.proxyd, "TERM");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The node's address (`addr/len`), the client's (the next one) and
/// whether it is IPv6.
fn peer(addr: &str) -> (String, String, bool) {
    let (ip, len) = addr.split_once('/').unwrap();
    let ip: std::net::IpAddr = ip.parse().unwrap();
    let next = match ip {
        std::net::IpAddr::V4(a) => std::net::IpAddr::V4((u32::from(a) + 1).into()),
        std::net::IpAddr::V6(a) => std::net::IpAddr::V6((u128::from(a) + 1).into()),
    };
    (addr.to_owned(), format!("{next}/{len}"), ip.is_ipv6())
}

/// A Service.
fn service(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n{spec}\n---\n")
}

/// An EndpointSlice of `service` with ready endpoints `(address, node)`.
fn slice(service: &str, name: &str, family: &str, eps: &[(&str, &str)]) -> String {
    let mut s = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  namespace: ns\n  \
         labels: {{kubernetes.io/service-name: {service}}}\naddressType: {family}\nports: [{{name: p, port: 8080, protocol: TCP}}]\nendpoints:\n"
    );
    for (addr, node) in eps {
        s.push_str(&format!(
            "- addresses: [\"{addr}\"]\n  nodeName: {node}\n  conditions: {{ready: true}}\n"
        ));
    }
    s.push_str("---\n");
    s
}

fn node_object(addresses: &[&str], pod_cidrs: &[&str]) -> String {
    let addrs: Vec<String> = addresses
        .iter()
        .map(|a| format!("{{type: InternalIP, address: \"{a}\"}}"))
        .collect();
    let cidrs: Vec<String> = pod_cidrs.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node-1}}\nspec: {{podCIDRs: [{}]}}\nstatus: {{addresses: [{}]}}\n---\n",
        cidrs.join(", "),
        addrs.join(", ")
    )
}

const PORT: &str = "  ports: [{name: p, port: 80, targetPort: 8080, protocol: TCP";

/// `python3 -c DATAGRAMS ADDR PORT N`: a UDP socket bound at ADDR:PORT,
/// N datagrams sent to it, each from a socket of its own; prints what was
/// sent, refused (EPERM or ECONNREFUSED on the send) and received.
const DATAGRAMS: &str = r#"
import socket, sys
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
squatter = socket.socket(fam, socket.SOCK_DGRAM)
squatter.bind((addr, port))
squatter.settimeout(0.2)
refused = received = 0
for i in range(n):
    # A socket per datagram: no error an earlier one left pending.
    client = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        client.sendto(b"x", (addr, port))
    except (PermissionError, ConnectionRefusedError):
        refused += 1
        continue
    try:
        squatter.recv(16)
        received += 1
    except socket.timeout:
        pass
print(f"sent={n} refused={refused} received={received}")
"#;

/// An IPv6-only node (its only addresses IPv6, a cluster of IPv6 services),
/// with no family flag: proxyd runs both families with IPv6 primary, as
/// kube-proxy does, and every kind of IPv6 service works.
#[test]
#[ignore = "needs root, nft, iproute2 and python3"]
fn an_ipv6_only_node_serves_every_kind_of_service_with_no_family_flag() {
    require();
    let (ep1, ep2, local, remote) = ("fd00:244::1", "fd00:244::2", "fd00:244::3", "fd00:244:2::1");
    let mut m = node_object(&["fd00:50::1"], &["fd00:244::/64"]);
    let single = "  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv6]\n";
    m += &service(
        "web",
        &format!("  type: ClusterIP\n{single}  clusterIPs: [\"fd00:96::10\"]\n{PORT}}}]"),
    );
    m += &slice("web", "web-1", "IPv6", &[(ep1, "node-1"), (ep2, "node-2")]);
    m += &service(
        "np",
        &format!("  type: NodePort\n{single}  clusterIPs: [\"fd00:96::11\"]\n{PORT}, nodePort: 30080}}]"),
    );
    m += &slice("np", "np-1", "IPv6", &[(ep1, "node-1"), (ep2, "node-2")]);
    m += &service(
        "lb",
        &format!(
            "  type: LoadBalancer\n{single}  clusterIPs: [\"fd00:96::12\"]\n  loadBalancerSourceRanges: [\"fd00:50::/64\"]\n{PORT}, nodePort: 30081}}]\nstatus: {{loadBalancer: {{ingress: [{{ip: \"fd00:201::10\"}}]}}}}"
        ),
    );
    m += &slice("lb", "lb-1", "IPv6", &[(ep1, "node-1"), (ep2, "node-2")]);
    m += &service(
        "closed",
        &format!(
            "  type: LoadBalancer\n{single}  clusterIPs: [\"fd00:96::13\"]\n  loadBalancerSourceRanges: [\"fd00:99::/64\"]\n{PORT}, nodePort: 30082}}]\nstatus: {{loadBalancer: {{ingress: [{{ip: \"fd00:201::11\"}}]}}}}"
        ),
    );
    m += &slice("closed", "closed-1", "IPv6", &[(ep1, "node-1")]);
    m += &service(
        "ext",
        &format!(
            "  type: ClusterIP\n{single}  clusterIPs: [\"fd00:96::14\"]\n  externalIPs: [\"fd00:202::1\"]\n{PORT}}}]"
        ),
    );
    m += &slice("ext", "ext-1", "IPv6", &[(ep2, "node-2")]);
    m += &service(
        "local",
        &format!(
            "  type: NodePort\n{single}  clusterIPs: [\"fd00:96::15\"]\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32001\n{PORT}, nodePort: 30083}}]"
        ),
    );
    m += &slice("local", "local-1", "IPv6", &[(local, "node-1"), (remote, "node-2")]);
    m += &service(
        "itp",
        &format!(
            "  type: ClusterIP\n{single}  clusterIPs: [\"fd00:96::16\"]\n  internalTrafficPolicy: Local\n{PORT}}}]"
        ),
    );
    m += &slice("itp", "itp-1", "IPv6", &[(remote, "node-2")]);
    m += &service(
        "sticky",
        &format!("  type: ClusterIP\n{single}  clusterIPs: [\"fd00:96::17\"]\n  sessionAffinity: ClientIP\n{PORT}}}]"),
    );
    m += &slice("sticky", "sticky-1", "IPv6", &[(ep1, "node-1"), (ep2, "node-2")]);

    let n = Node::start(
        "v6",
        &["fd00:50::1/64"],
        &[ep1, ep2, local],
        &["--cluster-cidr", "fd00:244::/56"],
        &m,
    );
    n.wait_until_programmed();
    let said = n.said();
    assert!(said.contains("families=ipv4,ipv6"), "{said}");
    n.check(&[
        Probe {
            what: "a cluster IP from the node",
            from: From::Node,
            vip: "fd00:96::10",
            port: 80,
            fate: endpoints(&[ep1, ep2]),
        },
        Probe {
            what: "a node port from outside",
            from: From::Outside,
            vip: "fd00:50::1",
            port: 30080,
            fate: endpoints(&[ep1, ep2]),
        },
        Probe {
            what: "a load balancer IP from an allowed range",
            from: From::Outside,
            vip: "fd00:201::10",
            port: 80,
            fate: endpoints(&[ep1, ep2]),
        },
        Probe {
            what: "a load balancer IP from outside its ranges",
            from: From::Outside,
            vip: "fd00:201::11",
            port: 80,
            fate: Fate::Dropped,
        },
        Probe {
            what: "an external IP",
            from: From::Outside,
            vip: "fd00:202::1",
            port: 80,
            fate: endpoints(&[ep2]),
        },
        Probe {
            what: "an externalTrafficPolicy: Local node port",
            from: From::Outside,
            vip: "fd00:50::1",
            port: 30083,
            fate: endpoints(&[local]),
        },
        Probe {
            what: "an internalTrafficPolicy: Local service without a local endpoint",
            from: From::Node,
            vip: "fd00:96::16",
            port: 80,
            fate: Fate::Dropped,
        },
        Probe {
            what: "a ClientIP-affinity service",
            from: From::Node,
            vip: "fd00:96::17",
            port: 80,
            fate: sticky(&[ep1, ep2]),
        },
    ]);
    // A Node of IPv6 addresses with an IPv6 cluster network: nothing to
    // warn about.
    assert!(!n.said().contains("cluster is"), "{}", n.said());
}

/// A dual-stack node with no family flag: a service of each
/// `ipFamilyPolicy`, traffic to each of a dual-stack service's cluster IPs
/// (the other family's too), and a dual-stack node port on both families.
#[test]
#[ignore = "needs root, nft, iproute2 and python3"]
fn a_dual_stack_node_serves_each_family_policy_with_no_family_flag() {
    require();
    let (v4a, v4b, v6a, v6b) = ("10.244.1.1", "10.244.1.2", "fd00:244::1", "fd00:244::2");
    let mut m = node_object(&["192.168.50.1", "fd00:50::1"], &["10.244.1.0/24", "fd00:244::/64"]);
    m += &service(
        "single6",
        &format!("  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv6]\n  clusterIPs: [\"fd00:96::20\"]\n{PORT}}}]"),
    );
    m += &slice("single6", "single6-1", "IPv6", &[(v6a, "node-1"), (v6b, "node-2")]);
    m += &service(
        "single4",
        &format!("  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv4]\n  clusterIPs: [10.96.0.23]\n{PORT}}}]"),
    );
    m += &slice("single4", "single4-1", "IPv4", &[(v4a, "node-1"), (v4b, "node-2")]);
    m += &service(
        "prefer",
        &format!(
            "  ipFamilyPolicy: PreferDualStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIPs: [10.96.0.21, \"fd00:96::21\"]\n{PORT}}}]"
        ),
    );
    m += &slice("prefer", "prefer-4", "IPv4", &[(v4a, "node-1")]);
    m += &slice("prefer", "prefer-6", "IPv6", &[(v6b, "node-2")]);
    m += &service(
        "require",
        &format!(
            "  type: NodePort\n  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv6, IPv4]\n  clusterIPs: [\"fd00:96::22\", 10.96.0.22]\n{PORT}, nodePort: 30084}}]"
        ),
    );
    m += &slice("require", "require-6", "IPv6", &[(v6a, "node-1"), (v6b, "node-2")]);
    m += &slice("require", "require-4", "IPv4", &[(v4a, "node-1"), (v4b, "node-2")]);
    let n = Node::start(
        "ds",
        &["192.168.50.1/24", "fd00:50::1/64"],
        &[v4a, v4b, v6a, v6b],
        &["--cluster-cidr", "10.244.0.0/16,fd00:244::/56"],
        &m,
    );
    n.wait_until_programmed();
    let said = n.said();
    assert!(said.contains("families=ipv4,ipv6"), "{said}");
    n.check(&[
        Probe {
            what: "SingleStack IPv6",
            from: From::Node,
            vip: "fd00:96::20",
            port: 80,
            fate: endpoints(&[v6a, v6b]),
        },
        Probe {
            what: "SingleStack IPv4",
            from: From::Node,
            vip: "10.96.0.23",
            port: 80,
            fate: endpoints(&[v4a, v4b]),
        },
        Probe {
            what: "PreferDualStack, its IPv4 cluster IP",
            from: From::Node,
            vip: "10.96.0.21",
            port: 80,
            fate: endpoints(&[v4a]),
        },
        Probe {
            what: "PreferDualStack, its IPv6 cluster IP",
            from: From::Node,
            vip: "fd00:96::21",
            port: 80,
            fate: endpoints(&[v6b]),
        },
        Probe {
            what: "RequireDualStack (IPv6 first), its IPv4 cluster IP",
            from: From::Node,
            vip: "10.96.0.22",
            port: 80,
            fate: endpoints(&[v4a, v4b]),
        },
        Probe {
            what: "a dual-stack node port over IPv4",
            from: From::Outside,
            vip: "192.168.50.1",
            port: 30084,
            fate: endpoints(&[v4a, v4b]),
        },
        Probe {
            what: "a dual-stack node port over IPv6",
            from: From::Outside,
            vip: "fd00:50::1",
            port: 30084,
            fate: endpoints(&[v6a, v6b]),
        },
    ]);
    assert!(!n.said().contains("cluster is"), "{}", n.said());
}

/// Localhost node ports (kube-proxy 1.37's KEP-6032) on a dual-stack
/// node: with kube-proxy's default `--nodeport-addresses primary` nothing
/// answers on loopback; restarted over its table with `primary,localhost`
/// (the restart kube-proxy's bug #142183 misses), `127.0.0.1:NODEPORT` and
/// `[::1]:NODEPORT` reach the node port's endpoints of their family, a
/// Local policy without an endpoint here has no listener, affinity sticks,
/// the primary address still answers from outside, and the listeners are
/// counted per family. UDP there is rejected (kube-proxy 1.38's rule), even
/// where a socket of the host's is bound, and counted per family and
/// protocol, across a restart.
#[test]
#[ignore = "needs root, nft, iproute2 and python3"]
fn localhost_node_ports_answer_on_both_loopbacks_once_named_even_after_a_restart() {
    require();
    let (v4a, v4b, v6a, v6b) = ("10.244.1.1", "10.244.1.2", "fd00:244::1", "fd00:244::2");
    let mut m = node_object(&["192.168.51.1", "fd00:51::1"], &["10.244.1.0/24", "fd00:244::/64"]);
    m += &service(
        "both",
        &format!(
            "  type: NodePort\n  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIPs: [10.96.0.31, \"fd00:96::31\"]\n{PORT}, nodePort: 30085}}]"
        ),
    );
    m += &slice("both", "both-4", "IPv4", &[(v4a, "node-1"), (v4b, "node-2")]);
    m += &slice("both", "both-6", "IPv6", &[(v6a, "node-1"), (v6b, "node-2")]);
    m += &service(
        "elsewhere",
        &format!(
            "  type: NodePort\n  externalTrafficPolicy: Local\n  clusterIPs: [10.96.0.32]\n{PORT}, nodePort: 30086}}]"
        ),
    );
    m += &slice("elsewhere", "elsewhere-4", "IPv4", &[(v4b, "node-2")]);
    m += &service(
        "sticky",
        &format!(
            "  type: NodePort\n  sessionAffinity: ClientIP\n  clusterIPs: [10.96.0.33]\n{PORT}, nodePort: 30087}}]"
        ),
    );
    m += &slice("sticky", "sticky-4", "IPv4", &[(v4a, "node-1"), (v4b, "node-2")]);
    m += &service(
        "datagrams",
        "  type: NodePort\n  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIPs: [10.96.0.34, \"fd00:96::34\"]\n  \
         ports: [{name: p, port: 53, targetPort: 8080, protocol: UDP, nodePort: 30088}]",
    );
    for (family, addr) in [("IPv4", v4a), ("IPv6", v6a)] {
        m += &slice("datagrams", &format!("datagrams-{family}"), family, &[(addr, "node-1")]).replace("TCP", "UDP");
    }
    let mut n = Node::start(
        "lo",
        &["192.168.51.1/24", "fd00:51::1/64"],
        &[v4a, v4b, v6a, v6b],
        &["--cluster-cidr", "10.244.0.0/16,fd00:244::/56"],
        &m,
    );
    n.wait_until_programmed();
    n.check(&[Probe {
        what: "kube-proxy's default: loopback is not a node port address",
        from: From::Node,
        vip: "127.0.0.1",
        port: 30085,
        fate: Fate::Refused,
    }]);
    for lo in ["127.0.0.1", "::1"] {
        assert_eq!(
            n.datagrams_to_a_squatter(lo, 30088, 5),
            "sent=5 refused=0 received=5",
            "{lo}: without localhost node ports, the host's own UDP socket there gets them"
        );
    }

    let metrics = common::free_port();
    let address = format!("127.0.0.1:{metrics}");
    n.restart(&[
        "--cluster-cidr",
        "10.244.0.0/16,fd00:244::/56",
        "--nodeport-addresses",
        "primary,localhost",
        "--metrics-bind-address",
        &address,
    ]);
    n.wait_until_programmed();
    n.check(&[
        Probe {
            what: "127.0.0.1 at the node port",
            from: From::Node,
            vip: "127.0.0.1",
            port: 30085,
            fate: endpoints(&[v4a, v4b]),
        },
        Probe {
            what: "::1 at the node port",
            from: From::Node,
            vip: "::1",
            port: 30085,
            fate: endpoints(&[v6a, v6b]),
        },
        Probe {
            what: "Local policy, no endpoint on this node: no listener",
            from: From::Node,
            vip: "127.0.0.1",
            port: 30086,
            fate: Fate::Refused,
        },
        Probe {
            what: "ClientIP affinity through the relay",
            from: From::Node,
            vip: "127.0.0.1",
            port: 30087,
            fate: sticky(&[v4a, v4b]),
        },
        Probe {
            what: "the primary address still answers from outside",
            from: From::Outside,
            vip: "192.168.51.1",
            port: 30085,
            fate: endpoints(&[v4a, v4b]),
        },
    ]);
    // UDP is not relayed: rejected at once (the sender hears so), never
    // delivered, even to a socket of the host's bound there; counted.
    for (lo, sent) in [("127.0.0.1", 7), ("::1", 4)] {
        assert_eq!(
            n.datagrams_to_a_squatter(lo, 30088, sent),
            format!("sent={sent} refused={sent} received=0"),
            "{lo}: UDP to a localhost node port"
        );
    }
    let text = common::daemon::http_body(metrics, "/metrics");
    for line in [
        "kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family=\"IPv4\",protocol=\"UDP\"} 7",
        "kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family=\"IPv6\",protocol=\"UDP\"} 4",
        "kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family=\"IPv4\",protocol=\"SCTP\"} 0",
        "kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv4\"} 2",
        "kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv6\"} 1",
        "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family=\"IPv4\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // The kernel keeps the counts: a restart rewrites the table in place
    // and reads them back, one more datagram on top.
    n.restart(&[
        "--cluster-cidr",
        "10.244.0.0/16,fd00:244::/56",
        "--nodeport-addresses",
        "primary,localhost",
        "--metrics-bind-address",
        &address,
    ]);
    n.wait_until_programmed();
    assert_eq!(
        n.datagrams_to_a_squatter("127.0.0.1", 30088, 1),
        "sent=1 refused=1 received=0"
    );
    let text = common::daemon::http_body(metrics, "/metrics");
    let line = "kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family=\"IPv4\",protocol=\"UDP\"} 8";
    assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
}
