//! Multus mode against a real container runtime, as root: Debian's
//! containerd (1.6, CRI v1) started by the test with its root, state,
//! socket and CNI configuration in a temporary directory, runc, the CNI
//! bridge plugin for `eth0`, and a sandbox ("pause") image built here
//! (`containerd/pause-image.sh`: no registry is reachable). Pod sandboxes
//! are made through the CRI API with the kubelet's labels; as multus
//! would, the test then gives each a secondary `net1` on a bridge where
//! the servers are. The real `proxyd run --multus
//! --container-runtime-endpoint` finds the pods' namespaces through the
//! runtime.
//!
//! ```text
//!   sandbox "client" (containerd) ── net1 192.168.77.2 ─┐
//!   server1 192.168.77.11 (netns) ──────────────────────┤ bridge (netns "lan")
//!   server2 192.168.77.12 (netns) ──────────────────────┘
//! ```
//!
//! containerd 1.6 does not stream sandbox events, so these tests follow
//! re-created sandboxes through their namespace files; the event path is tested
//! against the fake runtime (`cri_resolver.rs`), as are CRI-O's replies
//! (CRI-O is not in Debian 12).

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::{
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListPodSandboxRequest, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, PodSandboxStatusRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StopPodSandboxRequest,
    VersionRequest,
};
use multus_dataplane::cri::{CriResolver, netns_from_info};
use tonic::transport::Channel;

mod common;

use common::multus::{CLIENT, CLUSTER_IP, SERVER, cluster_yaml, names, network_status, pod_yaml, write_manifests};
use common::{KillOnDrop, Netns, require, run, terminate};

const WAIT: Duration = Duration::from_secs(40);
/// proxyd's `--sync-period` here (except where the default's is tested):
/// the bound on following a re-created sandbox without runtime events but
/// for its namespace file.
const SYNC_PERIOD: Duration = Duration::from_secs(5);
/// How soon a re-created sandbox is followed with the default sync period
/// (30 s) on a runtime without sandbox events: its namespace file wakes a
/// sync.
const FOLLOWED_WITHIN: Duration = Duration::from_secs(2);
const IMAGE: &str = "proxyd.test/pause:1";

fn require_containerd() {
    require();
    for tool in ["containerd", "ctr", "runc", "cc"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "root test asked for but cannot run here: {tool} is not installed \
             (apt-get install -y containerd runc containernetworking-plugins gcc)"
        );
    }
    assert!(
        Path::new("/usr/lib/cni/bridge").exists(),
        "root test asked for but cannot run here: no CNI bridge plugin (apt-get install -y containernetworking-plugins)"
    );
}

/// A containerd of the test's own: started, stopped and started again on
/// the same state; on drop its sandboxes are removed and it is stopped.
struct Containerd {
    dir: PathBuf,
    bridge: String,
    process: Option<KillOnDrop>,
    rt: tokio::runtime::Runtime,
}

impl Containerd {
    /// `tag` keeps this test's names apart from the others' (`index`: its
    /// CNI subnet, 10.89.INDEX.0/24).
    fn start(tag: &str, index: u8) -> Self {
        let dir = std::env::temp_dir().join(format!("proxyd-ctd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cni")).unwrap();
        let bridge = format!("pxt{index}-{}", std::process::id() % 10_000);
        let d = dir.display();
        std::fs::write(
            dir.join("config.toml"),
            format!(
                "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
                 [grpc]\n  address = \"{d}/containerd.sock\"\n\
                 [ttrpc]\n  address = \"{d}/containerd-ttrpc.sock\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{IMAGE}\"\n\
                 # runc may not set the sandbox's oom_score_adj without CAP_SYS_RESOURCE\n\
                 restrict_oom_score_adj = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/usr/lib/cni\"\n  conf_dir = \"{d}/cni\"\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("cni/10-primary.conflist"),
            format!(
                r#"{{"cniVersion":"1.0.0","name":"proxyd-test-{tag}","plugins":[{{"type":"bridge","bridge":"{bridge}",
                "isGateway":true,"ipMasq":false,"ipam":{{"type":"host-local","dataDir":"{d}/ipam",
                "ranges":[[{{"subnet":"10.89.{index}.0/24"}}]]}}}}]}}"#
            ),
        )
        .unwrap();
        let image = dir.join("pause.tar");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/containerd/pause-image.sh");
        run(
            "bash",
            &[&script.display().to_string(), &image.display().to_string(), IMAGE],
        );
        let rt = common::runtime();
        let mut c = Self {
            dir,
            bridge,
            process: None,
            rt,
        };
        c.start_again();
        run(
            "ctr",
            &[
                "--address",
                &c.socket().display().to_string(),
                "-n",
                "k8s.io",
                "images",
                "import",
                &image.display().to_string(),
            ],
        );
        c
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// Starts containerd and waits until its CRI service answers.
    fn start_again(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.process = Some(KillOnDrop(child));
        let start = Instant::now();
        while self.client_now().is_none() {
            assert!(
                start.elapsed() < WAIT,
                "containerd did not answer:\n{}",
                std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops containerd as an operator would (SIGTERM); its sandboxes'
    /// shims and processes live on.
    fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            terminate(&mut p, "TERM");
        }
    }

    fn client_now(&self) -> Option<RuntimeServiceClient<Channel>> {
        let resolver = CriResolver::new(&self.endpoint(), Path::new("")).unwrap();
        self.rt.block_on(async {
            let mut c = resolver.connect().await.ok()?;
            c.version(VersionRequest::default()).await.ok()?;
            Some(c)
        })
    }

    fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client_now().expect("containerd answers")
    }

    /// Runs a sandbox for pod `ns/name` with the kubelet's labels; returns
    /// its id and the name of its network namespace (under /run/netns).
    fn run_sandbox(&self, ns: &str, name: &str, uid: &str, attempt: u32) -> (String, String) {
        let mut client = self.client();
        let logs = self.dir.join("logs").join(format!("{name}-{attempt}"));
        std::fs::create_dir_all(&logs).unwrap();
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: ns.into(),
                attempt,
            }),
            hostname: name.into(),
            log_directory: logs.display().to_string(),
            labels: HashMap::from([
                ("io.kubernetes.pod.namespace".to_owned(), ns.to_owned()),
                ("io.kubernetes.pod.name".to_owned(), name.to_owned()),
                ("io.kubernetes.pod.uid".to_owned(), uid.to_owned()),
            ]),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.rt.block_on(async {
            let id = client
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
                .unwrap_or_else(|s| {
                    panic!(
                        "RunPodSandbox {ns}/{name}: {}\n{}",
                        s.message(),
                        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
                    )
                })
                .into_inner()
                .pod_sandbox_id;
            let status = client
                .pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: id.clone(),
                    verbose: true,
                })
                .await
                .unwrap()
                .into_inner();
            let path = netns_from_info(&status.info).unwrap();
            let netns = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                Path::new("/run/netns").join(&netns).exists(),
                "containerd's namespace {} is under /run/netns",
                path.display()
            );
            (id, netns)
        })
    }

    /// Stops and removes a sandbox (its namespace goes with it).
    fn remove_sandbox(&self, id: &str) {
        let mut client = self.client();
        self.rt.block_on(async {
            client
                .stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: id.into(),
                })
                .await
                .unwrap();
            client
                .remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: id.into(),
                })
                .await
                .unwrap();
        });
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.process.is_none() {
            self.start_again();
        }
        if let Some(mut client) = self.client_now() {
            let ids: Vec<String> = self.rt.block_on(async {
                client
                    .list_pod_sandbox(ListPodSandboxRequest { filter: None })
                    .await
                    .map(|r| r.into_inner().items.into_iter().map(|s| s.id).collect())
                    .unwrap_or_default()
            });
            for id in ids {
                self.remove_sandbox(&id);
            }
        }
        self.stop();
        let quiet = |program: &str, args: &[&str]| {
            let _ = Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet("ip", &["link", "del", &self.bridge]);
        // Whatever containerd left mounted under its root.
        common::unmount_under(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The servers on the secondary network, proxyd, and the manifests it reads.
struct Lab {
    ns: String,
    ctd: Containerd,
    lan: Netns,
    _servers: Vec<(Netns, KillOnDrop)>,
    manifests: PathBuf,
    proxyd: Option<KillOnDrop>,
    log: PathBuf,
    metrics: u16,
    links: usize,
}

impl Lab {
    fn new(tag: &str, index: u8) -> Self {
        let ns = format!("ctd{index}-{}", std::process::id() % 100_000);
        let ctd = Containerd::start(tag, index);
        let lan = Netns::named(format!("{ns}-lan"));
        lan.ip(&["link", "add", "br0", "type", "bridge"]);
        lan.ip(&["link", "set", "br0", "up"]);
        let manifests = std::env::temp_dir().join(format!("{ns}-manifests"));
        let _ = std::fs::remove_dir_all(&manifests);
        std::fs::create_dir_all(&manifests).unwrap();
        let mut lab = Self {
            log: std::env::temp_dir().join(format!("{ns}-proxyd.log")),
            metrics: common::free_port(),
            ctd,
            lan,
            _servers: Vec::new(),
            manifests,
            proxyd: None,
            links: 0,
            ns,
        };
        for (name, ip) in [("server1", "192.168.77.11"), ("server2", "192.168.77.12")] {
            let server = Netns::named(format!("{}-{name}", lab.ns));
            lab.attach(&server.0, ip);
            let process = server.spawn_ready("python3", &["-c", SERVER, name]);
            lab._servers.push((server, process));
        }
        lab
    }

    /// Gives namespace `netns` a `net1` on the bridge with `ip`, as multus
    /// does for a pod's secondary network.
    fn attach(&mut self, netns: &str, ip: &str) {
        self.links += 1;
        let (a, b) = (format!("n{}a", self.links), format!("n{}b", self.links));
        self.lan.ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        self.lan.ip(&["link", "set", &a, "netns", netns]);
        self.lan.ip(&["link", "set", &b, "master", "br0"]);
        self.lan.ip(&["link", "set", &b, "up"]);
        let pod = |args: &[&str]| {
            let mut all = vec!["-n", netns];
            all.extend_from_slice(args);
            run("ip", &all);
        };
        pod(&["link", "set", &a, "name", "net1"]);
        pod(&["addr", "add", &format!("{ip}/24"), "dev", "net1"]);
        pod(&["link", "set", "net1", "up"]);
        pod(&["link", "set", "lo", "up"]);
    }

    /// Gives the sandbox whose namespace is `netns` a `net1` at `ip`
    /// through Debian's CNI `bridge` plugin (static IPAM, on the lan's
    /// bridge: run in that namespace, as Multus runs a delegate), and
    /// returns the network-status entry Multus writes from its result.
    fn cni_attach(&self, netns: &str, container: &str, ip: &str) -> serde_json::Value {
        let config = serde_json::json!({
            "cniVersion": "1.0.0", "name": "macvlan1", "type": "bridge", "bridge": "br0",
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/24")}]},
        });
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.lan.0, "/usr/lib/cni/bridge"])
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", container)
            .env("CNI_NETNS", format!("/run/netns/{netns}"))
            .env("CNI_IFNAME", "net1")
            .env("CNI_PATH", "/usr/lib/cni")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), config.to_string().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let result: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("the bridge plugin: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(out.status.success(), "the bridge plugin: {result}");
        // Multus: the result's addresses on the interface they name.
        let ips: Vec<String> = result["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["address"].as_str().unwrap().split('/').next().unwrap().to_owned())
            .collect();
        let interface = &result["interfaces"][result["ips"][0]["interface"].as_u64().unwrap() as usize];
        serde_json::json!({"name": format!("{}/macvlan1", self.ns), "interface": interface["name"],
                           "ips": ips, "mac": interface["mac"], "dns": {}})
    }

    /// A sandbox for pod `name` with `net1` at `ip`: what the kubelet and
    /// multus leave once the sandbox is ready.
    fn sandbox(&mut self, name: &str, uid: &str, attempt: u32, ip: &str) -> (String, String) {
        let (id, netns) = self.ctd.run_sandbox(&self.ns, name, uid, attempt);
        self.attach(&netns, ip);
        (id, netns)
    }

    /// The cluster with these pods: (name, uid, net1 address or none).
    fn write(&self, pods: &[(&str, &str, Option<&str>)]) {
        let docs: Vec<String> = pods
            .iter()
            .map(|(name, uid, ip)| pod_yaml(&self.ns, name, Some(uid), &network_status(&self.ns, *ip)))
            .collect();
        write_manifests(
            &self.manifests,
            &cluster_yaml(&self.ns, &[("server1", true), ("server2", true)], &docs),
        );
    }

    fn start_proxyd(&mut self) {
        self.start_proxyd_with(&["--sync-period", &format!("{}s", SYNC_PERIOD.as_secs())]);
    }

    fn start_proxyd_with(&mut self, extra: &[&str]) {
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args(["run", "--multus", "--hostname-override", "node-1"])
            .arg("--container-runtime-endpoint")
            .arg(self.ctd.endpoint())
            .arg("--manifests")
            .arg(&self.manifests)
            .args(["--healthz-bind-address", ""])
            .args(extra)
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{}", self.metrics))
            .stderr(log)
            .spawn()
            .unwrap();
        self.proxyd = Some(KillOnDrop(child));
    }

    fn proxyd_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn requests(&self, netns: &str, n: u32) -> Vec<String> {
        let out = run(
            "ip",
            &[
                "netns",
                "exec",
                netns,
                "python3",
                "-c",
                CLIENT,
                "tcp",
                CLUSTER_IP,
                "80",
                &n.to_string(),
                "0",
            ],
        );
        out.lines().map(str::to_owned).collect()
    }

    /// Both servers answer the pod in `netns`, seeing its net1 address.
    fn served(&self, netns: &str, ip: &str) -> bool {
        let answers = self.requests(netns, 20);
        let by = names(&answers);
        by.get("server1").is_some_and(|n| *n > 0)
            && by.get("server2").is_some_and(|n| *n > 0)
            && answers.iter().all(|a| a.ends_with(&format!(" {ip}")))
    }

    fn has_table(&self, netns: &str) -> bool {
        Command::new("ip")
            .args(["netns", "exec", netns, "nft", "list", "table", "ip", "proxyd-multus"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// How long `check` took to hold, polled every 50 ms; fails after `within`.
    fn until(&self, what: &str, within: Duration, mut check: impl FnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !check() {
            if start.elapsed() > within {
                panic!(
                    "timed out waiting for: {what}\n--- proxyd log ---\n{}",
                    self.proxyd_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    }

    fn metric(&self, name: &str) -> Option<f64> {
        common::multus::metric(self.metrics, name)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.manifests);
    }
}

#[test]
#[ignore = "needs root, containerd, runc, the CNI plugins, nft and python3"]
fn a_recreated_sandbox_is_programmed_in_its_new_namespace() {
    require_containerd();
    let mut lab = Lab::new("recreate", 1);
    let (first, netns) = lab.sandbox("client", "uid-c", 0, "192.168.77.2");
    lab.write(&[("client", "uid-c", Some("192.168.77.2"))]);
    // The default sync period (30 s): the namespace files wake the syncs.
    lab.start_proxyd_with(&[]);
    lab.until("the client served through the real runtime", WAIT, || {
        lab.served(&netns, "192.168.77.2")
    });
    assert!(
        lab.proxyd_log().contains("does not stream sandbox events"),
        "containerd 1.6: no events, the namespace files are watched"
    );

    // Ordering 2: the sandbox dies and the kubelet makes a new one; nothing
    // proxyd reads on the Pod changes (same net1 address).
    lab.ctd.remove_sandbox(&first);
    let (second, netns2) = lab.sandbox("client", "uid-c", 1, "192.168.77.2");
    assert_ne!(netns, netns2);
    let took = lab.until("the new sandbox programmed", FOLLOWED_WITHIN, || lab.has_table(&netns2));
    eprintln!("figure: re-created sandbox, Pod unchanged: table in place {took:?} after the sandbox was ready");
    lab.until("the new sandbox served", WAIT, || lab.served(&netns2, "192.168.77.2"));

    // Ordering 1: multus writes `network-status: []` on CNI DEL, then the
    // new status (same address) before the new sandbox is ready.
    lab.write(&[("client", "uid-c", None)]);
    lab.until("the detached pod's table removed", WAIT, || !lab.has_table(&netns2));
    lab.ctd.remove_sandbox(&second);
    lab.write(&[("client", "uid-c", Some("192.168.77.2"))]);
    lab.until("the pod pending, without a sandbox", WAIT, || {
        lab.metric("proxyd_multus_pending_pods{ip_family=\"IPv4\"}") == Some(1.0)
    });
    // Long enough for the retries' backoff to grow past the deadline.
    std::thread::sleep(Duration::from_secs(4));
    let (_, netns3) = lab.sandbox("client", "uid-c", 2, "192.168.77.2");
    let took = lab.until("the new sandbox programmed", FOLLOWED_WITHIN, || lab.has_table(&netns3));
    eprintln!("figure: re-created sandbox, status emptied then set before it was ready: table in place {took:?} after");
    lab.until("the new sandbox served", WAIT, || lab.served(&netns3, "192.168.77.2"));
    lab.until("nothing pending", WAIT, || {
        lab.metric("proxyd_multus_pending_pods{ip_family=\"IPv4\"}") == Some(0.0)
    });
    let log = lab.proxyd_log();
    assert!(
        !log.contains("nft rejected"),
        "a gone namespace is not an nft failure:\n{log}"
    );
}

#[test]
#[ignore = "needs root, containerd, runc, the CNI plugins, nft and python3"]
fn a_sandbox_of_an_earlier_pod_of_the_same_name_is_not_programmed() {
    require_containerd();
    let mut lab = Lab::new("uid", 2);
    // Left over from an earlier pod `client` (deleted and made again).
    let (_, leftover) = lab.sandbox("client", "uid-old", 0, "192.168.77.2");
    lab.write(&[("client", "uid-new", Some("192.168.77.2"))]);
    lab.start_proxyd();
    lab.until("the pod pending", WAIT, || {
        lab.metric("proxyd_multus_pending_pods{ip_family=\"IPv4\"}") == Some(1.0)
    });
    assert!(
        lab.proxyd_log().contains("belongs to another pod"),
        "{}",
        lab.proxyd_log()
    );
    assert!(!lab.has_table(&leftover), "the other pod's sandbox is left alone");
    // The pod's own sandbox.
    let (_, own) = lab.sandbox("client", "uid-new", 0, "192.168.77.3");
    lab.until("the pod's own sandbox programmed", WAIT, || lab.has_table(&own));
    assert!(!lab.has_table(&leftover));

    // cleanup --multus through the runtime: every sandbox's namespace.
    let mut p = lab.proxyd.take().unwrap();
    terminate(&mut p, "TERM");
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(["cleanup", "--multus", "--container-runtime-endpoint"])
        .arg(lab.ctd.endpoint())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("removed table ip proxyd-multus"), "{said}");
    assert!(!lab.has_table(&own), "{said}");
    let routes = run("ip", &["-n", &own, "route", "show", "proto", "201"]);
    assert!(routes.trim().is_empty(), "{routes}");
}

#[test]
#[ignore = "needs root, containerd, runc, the CNI plugins, nft and python3"]
fn a_runtime_stopped_and_started_is_followed() {
    require_containerd();
    let mut lab = Lab::new("outage", 3);
    let (_, a) = lab.sandbox("a", "uid-a", 0, "192.168.77.2");
    let (_, b) = lab.sandbox("b", "uid-b", 0, "192.168.77.3");
    lab.write(&[("a", "uid-a", Some("192.168.77.2"))]);
    lab.start_proxyd();
    lab.until("pod a served", WAIT, || lab.served(&a, "192.168.77.2"));

    lab.ctd.stop();
    // Pod b appears while the runtime is down: pending, and a keeps working.
    lab.write(&[
        ("a", "uid-a", Some("192.168.77.2")),
        ("b", "uid-b", Some("192.168.77.3")),
    ]);
    lab.until("pod b pending", WAIT, || {
        lab.metric("proxyd_multus_pending_pods{ip_family=\"IPv4\"}") == Some(1.0)
    });
    assert!(lab.served(&a, "192.168.77.2"), "programmed pods keep their rules");
    // Long enough for the retry backoff to reach 8 s.
    std::thread::sleep(Duration::from_secs(12));
    lab.ctd.start_again();
    let took = lab.until(
        "pod b programmed once the runtime answers",
        Duration::from_secs(4),
        || lab.has_table(&b),
    );
    eprintln!("figure: runtime back: pending pod programmed {took:?} after containerd answered");
    lab.until("pod b served", WAIT, || lab.served(&b, "192.168.77.3"));

    let log = lab.proxyd_log();
    let down = log.matches("the container runtime cannot be asked").count();
    assert_eq!(down, 1, "the outage said once:\n{log}");
    assert!(
        log.contains("No such file or directory (socket missing)"),
        "with why:\n{log}"
    );
    assert_eq!(log.matches("the container runtime answers again").count(), 1, "{log}");
    assert!(!log.contains("transport error"), "{log}");
}

/// Multus mode whole, as a user runs it: the objects in the (fake) API
/// server, the client's `net1` made by Debian's CNI `bridge` plugin and its
/// network-status written from the plugin's result as Multus writes it,
/// `proxyd slices` writing the secondary network's slices from the pods'
/// network-status, and `proxyd run --multus` reading them through the API
/// and programming the client pod's sandbox in the real runtime. Real
/// TCP and UDP over the secondary network reach both servers (TCP evenly:
/// a chi-square test); a server made not ready, then one deleted, stops
/// receiving within a second.
#[test]
#[ignore = "needs root, containerd, runc, the CNI plugins, nft and python3"]
fn the_slice_controller_and_multus_mode_serve_a_service_on_net1() {
    use fake_apiserver::{FakeApiServer, Kind};
    use serde_json::json;

    require_containerd();
    let mut lab = Lab::new("ctl", 4);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(FakeApiServer::start()).unwrap();
    let ns = lab.ns.clone();
    let pod = |name: &str, node: &str, ip: &str, ready: bool, labels: serde_json::Value| {
        json!({"kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                   "labels": labels,
                   "annotations": {"k8s.v1.cni.cncf.io/network-status": network_status(&ns, Some(ip))}},
               "spec": {"nodeName": node, "containers": [{"name": "app"}]},
               "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    };
    for node in ["node-1", "node-2"] {
        server
            .apply(json!({"kind": "Node", "metadata": {"name": node}}))
            .unwrap();
    }
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "web", "namespace": ns,
            "labels": {"service.kubernetes.io/service-proxy-name": "multus-proxy"},
            "annotations": {"k8s.v1.cni.cncf.io/service-network": "macvlan1"}},
            "spec": {"clusterIP": CLUSTER_IP, "clusterIPs": [CLUSTER_IP], "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                               {"name": "dns", "port": 53, "targetPort": 8080, "protocol": "UDP"}]}}))
        .unwrap();
    let web = || json!({"app": "web"});
    server
        .apply(pod("server1", "node-2", "192.168.77.11", true, web()))
        .unwrap();
    server
        .apply(pod("server2", "node-2", "192.168.77.12", true, web()))
        .unwrap();
    let mut client_pod = pod("client", "node-1", "192.168.77.2", true, json!({"app": "client"}));
    client_pod["metadata"]["annotations"] = json!({});
    let made = server.apply(client_pod.clone()).unwrap();
    // The kubelet makes the sandbox with the uid the API server gave; the
    // CNI bridge plugin gives it net1; Multus then writes what the plugin
    // returned into the pod's network-status.
    let uid = made["metadata"]["uid"].as_str().unwrap().to_owned();
    let (id, client) = lab.ctd.run_sandbox(&ns, "client", &uid, 0);
    let net1 = lab.cni_attach(&client, &id, "192.168.77.2");
    assert_eq!(net1["interface"], "net1");
    let primary = json!({"name": "cbr0", "interface": "eth0", "ips": ["10.88.0.2"], "default": true});
    client_pod["metadata"]["annotations"] =
        json!({"k8s.v1.cni.cncf.io/network-status": json!([primary, net1]).to_string()});
    server.apply(client_pod).unwrap();
    let kubeconfig = lab.manifests.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();

    let controller_log = std::fs::File::create(lab.manifests.join("slices.log")).unwrap();
    let _controller = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args(["slices", "--leader-elect=false", "--bind-address", "", "--kubeconfig"])
            .arg(&kubeconfig)
            .stderr(controller_log)
            .spawn()
            .unwrap(),
    );
    let log = std::fs::File::create(&lab.log).unwrap();
    lab.proxyd = Some(KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args([
                "run",
                "--multus",
                "--hostname-override",
                "node-1",
                "--healthz-bind-address",
                "",
            ])
            .arg("--container-runtime-endpoint")
            .arg(lab.ctd.endpoint())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{}", lab.metrics))
            .stderr(log)
            .spawn()
            .unwrap(),
    ));
    lab.until(
        "the client served over net1 through the controller's slices",
        WAIT,
        || lab.served(&client, "192.168.77.2"),
    );
    let slices = server.objects(Kind::EndpointSlice);
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert_eq!(
        slices[0]["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "multus-endpointslice-controller.npwg.k8s.io"
    );
    let counts = names(&lab.requests(&client, 200));
    let (a, b) = (
        counts.get("server1").copied().unwrap_or(0),
        counts.get("server2").copied().unwrap_or(0),
    );
    let chi2 = ((a as f64 - 100.0).powi(2) + (b as f64 - 100.0).powi(2)) / 100.0;
    assert!(
        a + b == 200 && chi2 < 10.83,
        "an even split at p = 0.001: {counts:?} (chi-square {chi2:.2})"
    );
    let udp = run(
        "ip",
        &[
            "netns", "exec", &client, "python3", "-c", CLIENT, "udp", CLUSTER_IP, "53", "40", "0",
        ],
    );
    let udp: Vec<String> = udp.lines().map(str::to_owned).collect();
    let by = names(&udp);
    assert!(
        by.contains_key("server1") && by.contains_key("server2") && by.len() == 2,
        "UDP: {udp:?}"
    );

    let only = |who: &str| {
        let answers = lab.requests(&client, 10);
        answers.iter().all(|a| a.starts_with(&format!("{who} ")))
    };
    server
        .apply(pod("server2", "node-2", "192.168.77.12", false, web()))
        .unwrap();
    let took = lab.until("server2 not ready: server1 only", Duration::from_secs(1), || {
        only("server1")
    });
    eprintln!("figure: a server made not ready stopped receiving {took:?} after the change");
    server
        .apply(pod("server2", "node-2", "192.168.77.12", true, web()))
        .unwrap();
    lab.until("server2 back", WAIT, || lab.served(&client, "192.168.77.2"));
    server.delete(Kind::Pod, &ns, "server1").unwrap();
    let took = lab.until("server1 deleted: server2 only", Duration::from_secs(1), || {
        only("server2")
    });
    eprintln!("figure: a deleted server stopped receiving {took:?} after the delete");
    drop(rt);
}
