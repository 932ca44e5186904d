//! Multus mode end to end, as root: pods are network namespaces with a
//! primary `eth0` (its default route leads nowhere) and a secondary `net1`
//! on a bridge; the real `proxyd run --multus --manifests DIR
//! --pod-netns-dir /run/netns` programs each attached pod's namespace.
//!
//! ```text
//!   pod client 192.168.77.2 ─┐
//!   pod server1 192.168.77.11 ┤ net1 ── bridge (namespace "lan")
//!   pod server2 192.168.77.12 ┘
//!   pod other (no net1)          eth0 of each pod: 10.88.0.x, default via a gateway that does not exist
//! ```

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::multus::{CLIENT, SERVER, cluster_yaml, names, network_status, pod_yaml, write_manifests};
use common::{KillOnDrop, Netns, require, run, terminate};

const WAIT: Duration = Duration::from_secs(30);

struct Lab {
    /// Kubernetes namespace of the pods; their netns files are `NS_NAME`.
    ns: String,
    pods: BTreeMap<&'static str, Netns>,
    lan: Netns,
    manifests: PathBuf,
    servers: Vec<KillOnDrop>,
    proxyd: Option<KillOnDrop>,
    log: PathBuf,
    /// proxyd's /metrics port on 127.0.0.1.
    metrics: u16,
}

fn veth_names(tag: &str) -> (String, String) {
    let id = std::process::id() % 100_000;
    (format!("{tag}{id}a"), format!("{tag}{id}b"))
}

impl Lab {
    /// A lab whose names carry `tag` (one per test: `cargo test` runs
    /// the tests as threads of one process, so the process id alone would
    /// let two tests remove each other's namespaces).
    fn new(tag: &str) -> Self {
        let ns = format!("mt{tag}{}", std::process::id());
        let lan = Netns::named(format!("{ns}-lan"));
        lan.ip(&["link", "add", "br0", "type", "bridge"]);
        lan.ip(&["link", "set", "br0", "up"]);
        let mut pods = BTreeMap::new();
        let pod_defs: [(&str, Option<&str>, &str); 4] = [
            ("client", Some("192.168.77.2"), "10.88.0.2"),
            ("server1", Some("192.168.77.11"), "10.88.0.11"),
            ("server2", Some("192.168.77.12"), "10.88.0.12"),
            ("other", None, "10.88.0.9"),
        ];
        for (i, (name, net1, eth0)) in pod_defs.into_iter().enumerate() {
            let p = Netns::named(format!("{ns}_{name}"));
            // eth0: the primary network, whose default route leads nowhere.
            let (a, b) = veth_names(&format!("e{i}{tag}"));
            run(
                "ip",
                &[
                    "link", "add", &a, "netns", &p.0, "type", "veth", "peer", "name", &b, "netns", &lan.0,
                ],
            );
            p.ip(&["link", "set", &a, "name", "eth0"]);
            p.ip(&["addr", "add", &format!("{eth0}/24"), "dev", "eth0"]);
            p.ip(&["link", "set", "eth0", "up"]);
            p.ip(&["route", "add", "default", "via", "10.88.0.1"]);
            lan.ip(&["link", "set", &b, "up"]);
            if let Some(addr) = net1 {
                let (a, b) = veth_names(&format!("n{i}{tag}"));
                run(
                    "ip",
                    &[
                        "link", "add", &a, "netns", &p.0, "type", "veth", "peer", "name", &b, "netns", &lan.0,
                    ],
                );
                p.ip(&["link", "set", &a, "name", "net1"]);
                p.ip(&["addr", "add", &format!("{addr}/24"), "dev", "net1"]);
                p.ip(&["link", "set", "net1", "up"]);
                lan.ip(&["link", "set", &b, "master", "br0"]);
                lan.ip(&["link", "set", &b, "up"]);
            }
            pods.insert(name, p);
        }
        let manifests = std::env::temp_dir().join(format!("{ns}-manifests"));
        let _ = std::fs::remove_dir_all(&manifests);
        std::fs::create_dir_all(&manifests).unwrap();
        let mut lab = Self {
            log: std::env::temp_dir().join(format!("{ns}-proxyd.log")),
            metrics: common::free_port(),
            ns,
            pods,
            lan,
            manifests,
            servers: Vec::new(),
            proxyd: None,
        };
        for s in ["server1", "server2"] {
            lab.start_server(s);
        }
        lab
    }

    fn start_server(&mut self, pod: &str) {
        let server = self.pods[pod].spawn_ready("python3", &["-c", SERVER, pod]);
        self.servers.push(server);
    }

    /// Writes the cluster: the service on network `macvlan1`, the multus
    /// controller's slice with `ready` per server, the default controller's
    /// slice (primary addresses: never to be used), and the pods.
    fn write(&self, servers: &[(&str, bool)], with_client: bool) {
        write_manifests(&self.manifests, &self.cluster(servers, with_client));
    }

    /// The same objects, applied to an API server (deletes are not needed
    /// by the API test).
    fn publish(&self, server: &fake_apiserver::FakeApiServer, servers: &[(&str, bool)]) {
        for doc in self.cluster(servers, true).split("---\n") {
            let v: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
            server.apply(v).unwrap();
        }
    }

    /// The cluster as YAML documents.
    fn cluster(&self, servers: &[(&str, bool)], with_client: bool) -> String {
        let ns = &self.ns;
        let mut pods = vec![
            pod_yaml(ns, "server1", None, &network_status(ns, Some("192.168.77.11"))),
            pod_yaml(ns, "server2", None, &network_status(ns, Some("192.168.77.12"))),
            pod_yaml(ns, "other", None, &network_status(ns, None)),
        ];
        if with_client {
            pods.push(pod_yaml(ns, "client", None, &network_status(ns, Some("192.168.77.2"))));
        }
        cluster_yaml(ns, servers, &pods)
    }

    fn start_proxyd(&mut self) {
        self.start_proxyd_with(&["--pod-netns-dir", "/run/netns"]);
    }

    /// Starts proxyd with these flags saying where namespaces are.
    fn start_proxyd_with(&mut self, resolver: &[&str]) {
        let manifests = self.manifests.display().to_string();
        self.start_proxyd_from(resolver, &["--manifests", &manifests]);
    }

    /// Starts proxyd with these flags for namespaces and for the source.
    fn start_proxyd_from(&mut self, resolver: &[&str], source: &[&str]) {
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args(["run", "--multus", "--hostname-override", "node-1"])
            // A short sync period: the periodic sync repairs routes.
            .args([
                "--min-sync-period",
                "0",
                "--sync-period",
                "2s",
                "--healthz-bind-address",
                "",
            ])
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{}", self.metrics))
            // Last: a flag given here replaces the defaults above.
            .args(resolver)
            .args(source)
            .stderr(log)
            .spawn()
            .unwrap();
        self.proxyd = Some(KillOnDrop(child));
    }

    /// The value of a `/metrics` sample line starting with `name`.
    fn metric(&self, name: &str) -> Option<f64> {
        common::multus::metric(self.metrics, name)
    }

    fn requests(&self, proto: &str, port: u16, n: u32, src_port: u16) -> Vec<String> {
        let out = self.pods["client"].exec(
            "python3",
            &[
                "-c",
                CLIENT,
                proto,
                "10.96.77.10",
                &port.to_string(),
                &n.to_string(),
                &src_port.to_string(),
            ],
        );
        out.lines().map(str::to_owned).collect()
    }

    fn eventually(&self, what: &str, mut check: impl FnMut() -> bool) {
        let start = Instant::now();
        while !check() {
            if start.elapsed() > WAIT {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!("timed out waiting for: {what}\n--- proxyd log ---\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn routes(&self, pod: &str) -> Vec<String> {
        let out = self.pods[pod].exec("ip", &["route", "show", "proto", "201"]);
        out.lines().map(|l| l.trim().to_owned()).collect()
    }

    fn has_table(&self, pod: &str) -> bool {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.pods[pod].0,
                "nft",
                "list",
                "table",
                "ip",
                "proxyd-multus",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.manifests);
    }
}

fn host_has_multus_table() -> bool {
    Command::new("nft")
        .args(["list", "table", "ip", "proxyd-multus"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
fn a_pod_reaches_services_on_its_secondary_network() {
    require();
    let mut lab = Lab::new("a");
    lab.write(&[("server1", true), ("server2", true)], true);
    lab.start_proxyd();
    lab.eventually("the client's table", || lab.has_table("client"));

    // Through net1, with the client's net1 address, to both servers; the
    // default controller's slice (10.88.0.11, the primary network) never.
    let answers = lab.requests("tcp", 80, 40, 0);
    let by = names(&answers);
    assert_eq!(
        by.get("server1").copied().unwrap_or(0) + by.get("server2").copied().unwrap_or(0),
        40,
        "{answers:?}"
    );
    assert!(by.contains_key("server1") && by.contains_key("server2"), "{by:?}");
    assert!(
        answers.iter().all(|a| a.ends_with(" 192.168.77.2")),
        "the server sees net1's address: {answers:?}"
    );
    assert_eq!(
        lab.routes("client"),
        ["10.96.77.10 dev net1 scope link src 192.168.77.2"]
    );
    // Someone removes the route: the periodic sync puts it back.
    lab.pods["client"].ip(&["route", "del", "10.96.77.10/32", "dev", "net1", "proto", "201"]);
    assert!(lab.routes("client").is_empty());
    lab.eventually("the route restored", || lab.routes("client").len() == 1);
    // Programmed: the client and both servers (attached), not `other`.
    lab.eventually("the metrics", || {
        lab.metric("proxyd_multus_programmed_pods{ip_family=\"IPv4\"}") == Some(3.0)
    });
    assert_eq!(
        lab.metric("proxyd_multus_pod_sync_failures_total{ip_family=\"IPv4\"}"),
        Some(0.0)
    );

    // A pod without the network, and the host, are untouched.
    assert!(!lab.has_table("other"));
    assert!(lab.routes("other").is_empty());
    assert!(!host_has_multus_table(), "the host's namespace is not programmed");

    // UDP, and a stale conntrack entry replaced when its endpoint goes.
    let udp = lab.requests("udp", 53, 1, 40053);
    assert_eq!(udp.len(), 1);
    let first = udp[0].split(' ').next().unwrap().to_owned();
    let other = if first == "server1" { "server2" } else { "server1" };
    lab.write(&[(other, true)], true);
    lab.eventually(
        "the next datagram from the same port reaches the remaining server",
        || {
            lab.requests("udp", 53, 1, 40053)
                .first()
                .is_some_and(|a| a.starts_with(other))
        },
    );

    // Not-ready endpoints drop out; no endpoints: refused.
    lab.write(&[("server1", true), ("server2", false)], true);
    lab.eventually("only server1", || {
        names(&lab.requests("tcp", 80, 10, 0)).get("server1") == Some(&10)
    });
    lab.write(&[], true);
    lab.eventually("refused without endpoints", || {
        lab.requests("tcp", 80, 1, 0) == ["error: ConnectionRefusedError"]
    });

    // A restart finds its own routes: none doubled.
    lab.write(&[("server1", true), ("server2", true)], true);
    lab.eventually("served again", || {
        names(&lab.requests("tcp", 80, 4, 0)).values().sum::<usize>() == 4
    });
    let mut old = lab.proxyd.take().unwrap();
    terminate(&mut old, "TERM");
    assert!(lab.has_table("client"), "the rules stay when proxyd stops");
    assert_eq!(lab.requests("tcp", 80, 4, 0).len(), 4);
    lab.start_proxyd();
    lab.eventually("the restarted proxyd synced", || {
        std::fs::read_to_string(&lab.log).unwrap_or_default().contains("synced")
    });
    assert_eq!(lab.routes("client").len(), 1, "{:?}", lab.routes("client"));
    assert_eq!(names(&lab.requests("tcp", 80, 6, 0)).values().sum::<usize>(), 6);

    // The pod is deleted while its namespace still exists: its table and
    // routes go.
    lab.write(&[("server1", true), ("server2", true)], false);
    lab.eventually("the deleted pod's table and routes removed", || {
        !lab.has_table("client") && lab.routes("client").is_empty()
    });
    assert!(lab.has_table("server1"), "other pods keep theirs");

    // cleanup --multus: every namespace it is shown loses table and routes
    // (a directory of links to this test's namespaces only: other tests'
    // run at the same time).
    let mut old = lab.proxyd.take().unwrap();
    terminate(&mut old, "TERM");
    let links = std::env::temp_dir().join(format!("{}-links", lab.ns));
    let _ = std::fs::remove_dir_all(&links);
    std::fs::create_dir_all(&links).unwrap();
    for p in lab.pods.values() {
        std::os::unix::fs::symlink(format!("/run/netns/{}", p.0), links.join(&p.0)).unwrap();
    }
    assert!(!lab.routes("server1").is_empty() || lab.has_table("server1"));
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(["cleanup", "--multus", "--pod-netns-dir"])
        .arg(&links)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("removed table ip proxyd-multus"), "{said}");
    assert!(
        said.contains("nothing of proxyd's there"),
        "the pod without the network: {said}"
    );
    for pod in ["server1", "server2", "other", "client"] {
        assert!(!lab.has_table(pod), "{pod}'s table");
        assert!(lab.routes(pod).is_empty(), "{pod}'s routes");
    }
    let _ = std::fs::remove_dir_all(&links);
}

#[test]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
fn pods_are_found_through_the_container_runtime_once_it_answers() {
    require();
    let mut lab = Lab::new("b");
    lab.write(&[("server1", true), ("server2", true)], true);
    let rt = common::runtime();
    let _enter = rt.enter();
    let socket = std::env::temp_dir().join(format!("{}-cri.sock", lab.ns));
    let mut cri = fake_cri::FakeCri::new(&socket);
    let endpoint = cri.endpoint();
    // The runtime is down when proxyd starts: it keeps running and retries.
    lab.start_proxyd_with(&["--container-runtime-endpoint", &endpoint]);
    lab.eventually("the runtime's absence said, with why", || {
        std::fs::read_to_string(&lab.log)
            .unwrap_or_default()
            .contains("No such file or directory (socket missing)")
    });
    assert!(!lab.has_table("client"));
    assert!(
        lab.proxyd.as_mut().unwrap().try_wait().unwrap().is_none(),
        "still running"
    );
    // It answers: sandboxes name the pods' namespaces (as containerd does).
    for (i, pod) in ["client", "server1", "server2", "other"].into_iter().enumerate() {
        let netns = PathBuf::from(format!("/run/netns/{}", lab.pods[pod].0));
        cri.put(fake_cri::Sandbox::containerd(
            &format!("sb-{i}"),
            &lab.ns,
            pod,
            1,
            &netns,
        ));
    }
    cri.start().unwrap();
    lab.eventually("programmed once the runtime answers", || lab.has_table("client"));
    let answers = lab.requests("tcp", 80, 10, 0);
    assert_eq!(names(&answers).values().sum::<usize>(), 10, "{answers:?}");
    assert!(answers.iter().all(|a| a.ends_with(" 192.168.77.2")), "{answers:?}");
}

/// The event path: where the runtime streams sandbox events (containerd
/// 1.7+, CRI-O; here the fake runtime), a pod whose sandbox is re-created
/// (a new namespace, nothing on the Pod changed) is programmed there within
/// 2 s of the new sandbox being ready, with the periodic sync a minute away
/// and no pod pending (so no retry comes sooner either).
#[test]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
fn a_recreated_sandbox_is_followed_by_its_event() {
    require();
    let mut lab = Lab::new("d");
    lab.write(&[("server1", true), ("server2", true)], true);
    let rt = common::runtime();
    let _enter = rt.enter();
    let mut cri = fake_cri::FakeCri::new(&std::env::temp_dir().join(format!("{}-cri.sock", lab.ns)));
    let pod_ns = lab.ns.clone();
    let sandbox = |id: &str, pod: &str, netns: &str, created_at: i64| {
        let path = PathBuf::from(format!("/run/netns/{netns}"));
        fake_cri::Sandbox::containerd(id, &pod_ns, pod, created_at, &path)
    };
    for pod in ["client", "server1", "server2", "other"] {
        cri.put(sandbox(&format!("sb-{pod}"), pod, &lab.pods[pod].0, 1));
    }
    cri.start().unwrap();
    let endpoint = cri.endpoint();
    lab.start_proxyd_with(&["--container-runtime-endpoint", &endpoint, "--sync-period", "60s"]);
    lab.eventually("the client's table", || lab.has_table("client"));
    lab.eventually("nothing pending", || {
        lab.metric("proxyd_multus_pending_pods{ip_family=\"IPv4\"}") == Some(0.0)
    });

    // The sandbox dies (its net1 with it); the kubelet makes a new one.
    lab.pods["client"].ip(&["link", "del", "net1"]);
    let new = Netns::named(format!("{}_client2", lab.ns));
    let (a, b) = veth_names("nd");
    run(
        "ip",
        &[
            "link", "add", &a, "netns", &new.0, "type", "veth", "peer", "name", &b, "netns", &lab.lan.0,
        ],
    );
    new.ip(&["link", "set", &a, "name", "net1"]);
    new.ip(&["addr", "add", "192.168.77.2/24", "dev", "net1"]);
    new.ip(&["link", "set", "net1", "up"]);
    lab.lan.ip(&["link", "set", &b, "master", "br0"]);
    lab.lan.ip(&["link", "set", &b, "up"]);
    cri.remove("sb-client");
    cri.put(sandbox("sb-client-2", "client", &new.0, 2));
    let ready = Instant::now();
    let has_table = || {
        Command::new("ip")
            .args(["netns", "exec", &new.0, "nft", "list", "table", "ip", "proxyd-multus"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    lab.eventually("the new sandbox's table", has_table);
    let took = ready.elapsed();
    eprintln!("figure: event path: re-created sandbox programmed {took:?} after it was ready");
    assert!(took < Duration::from_secs(2), "{took:?}, not at the next periodic sync");
}

#[test]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
fn the_real_binary_follows_the_api_server() {
    require();
    let mut lab = Lab::new("c");
    let rt = common::runtime();
    let server = rt.block_on(fake_apiserver::FakeApiServer::start()).unwrap();
    lab.publish(&server, &[("server1", true), ("server2", true)]);
    let kubeconfig = std::env::temp_dir().join(format!("{}-kubeconfig", lab.ns));
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let kc = kubeconfig.display().to_string();
    lab.start_proxyd_from(&["--pod-netns-dir", "/run/netns"], &["--kubeconfig", &kc]);
    lab.eventually("the client's table, from the API", || lab.has_table("client"));
    let answers = lab.requests("tcp", 80, 20, 0);
    assert_eq!(names(&answers).values().sum::<usize>(), 20, "{answers:?}");
    assert!(answers.iter().all(|a| a.ends_with(" 192.168.77.2")), "{answers:?}");
    assert!(!lab.has_table("other"));
    // A change through the API, after the watches were dropped.
    server.drop_watches();
    lab.publish(&server, &[("server2", true)]);
    lab.eventually("only server2", || {
        names(&lab.requests("tcp", 80, 6, 0)).get("server2") == Some(&6)
    });
    let _ = std::fs::remove_file(&kubeconfig);
}
