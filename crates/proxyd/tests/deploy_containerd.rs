//! The DaemonSet as an operator deploys it, as root: `deploy/proxyd.yaml`
//! unchanged but for the one thing the operator sets (the API server's
//! address in the ConfigMap's kubeconfig), its pod run as the kubelet
//! would run it — the image `deploy/image.sh` packs, in a containerd of
//! the test's own; the init container first; the pod spec's command, args
//! (with `$(VAR)` expanded), env (with the kubelet's `KUBERNETES_SERVICE_*`),
//! capabilities, read-only root, the ConfigMap and the service account
//! (token, CA) mounted, the node's network; the probes asked as the
//! kubelet asks them.
//!
//! The node (a network namespace of the test's) is one with no service
//! proxy yet: the API server (the fake, over TLS, requiring the service
//! account's token) is reachable only at its real address, and the
//! `kubernetes` Service's cluster IP leads nowhere (SYNs vanish, as on a
//! node without kube-proxy).
//!
//! ```text
//!   node netns: lo 192.0.2.10 (the API server, :6443), 192.0.2.20 (the node)
//!               svc0 (veth, its peer unaddressed): 10.96.0.0/12 routed
//!               there, to a MAC nobody has
//! ```
//!
//! ctr has no flag for `allowPrivilegeEscalation: false` (no_new_privs);
//! it changes nothing for a process started with its capabilities.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::daemon::spawn_logged;
use common::image::{Containerd, DEFAULT_CAPABILITIES, get, repo, require_containerd, table};
use common::{Netns, run};
use fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

const NODE: &str = "node-1";
/// The API server's real address, on the node's network.
const API_SERVER: &str = "192.0.2.10";
/// The node's own address (its Node's InternalIP; the pod IP of a
/// host-network pod, which the kubelet probes).
const NODE_IP: &str = "192.0.2.20";
/// The `kubernetes` Service's cluster IP: what the in-cluster
/// configuration reaches the API server through.
const KUBERNETES_SERVICE: &str = "10.96.0.1";
/// The service account's token, the only one the API server accepts.
const TOKEN: &str = "proxyd-service-account-token";
/// The address the shipped kubeconfig names until the operator sets it.
const PLACEHOLDER: &str = "https://api-server-address.invalid:6443";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const WAIT: Duration = Duration::from_secs(60);

/// The node: a network namespace where only a service proxy would make
/// the `kubernetes` Service reachable.
fn node() -> Netns {
    let node = Netns::named(format!("pdep-{}", std::process::id() % 100_000));
    node.ip(&["addr", "add", &format!("{API_SERVER}/32"), "dev", "lo"]);
    node.ip(&["addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"]);
    // The service range leads to a link where nothing answers: a SYN to
    // the cluster IP goes out and is never answered.
    node.ip(&["link", "add", "svc0", "type", "veth", "peer", "name", "svc1"]);
    node.ip(&["link", "set", "svc0", "up"]);
    node.ip(&["link", "set", "svc1", "up"]);
    node.ip(&["route", "add", "10.96.0.0/12", "dev", "svc0"]);
    node.ip(&[
        "neigh",
        "add",
        KUBERNETES_SERVICE,
        "lladdr",
        "02:00:00:00:00:01",
        "dev",
        "svc0",
        "nud",
        "permanent",
    ]);
    node
}

/// A CA, and the API server's certificate from it for its real address and
/// the `kubernetes` Service's cluster IP (as kube-apiserver's carries).
struct Certs {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn certs(dir: &Path) -> Certs {
    let p = |f: &str| dir.join(f).display().to_string();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    let (ca_key, ca_crt) = (p("ca.key"), p("ca.crt"));
    ca.extend([
        "-keyout",
        &ca_key,
        "-out",
        &ca_crt,
        "-days",
        "2",
        "-subj",
        "/CN=test-cluster-ca",
    ]);
    run("openssl", &ca);
    let mut req = vec!["req"];
    req.extend(ec);
    let (key, csr) = (p("server.key"), p("server.csr"));
    req.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=kube-apiserver"]);
    run("openssl", &req);
    std::fs::write(
        dir.join("server.ext"),
        format!(
            "subjectAltName=IP:{API_SERVER},IP:{KUBERNETES_SERVICE}\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    let (crt, ext) = (p("server.crt"), p("server.ext"));
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
    Certs {
        ca: dir.join("ca.crt"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    }
}

/// The fake API server on the node's network only, over TLS, with the
/// cluster's objects: this node, the `kubernetes` Service and its
/// endpoint, and one application Service.
fn api_server(rt: &tokio::runtime::Runtime, node: &Netns, certs: &Certs) -> FakeApiServer {
    let listener = linux_dataplane::Netns::Named(node.0.clone())
        .run(|| std::net::TcpListener::bind((API_SERVER, 6443)))
        .unwrap()
        .unwrap();
    listener.set_nonblocking(true).unwrap();
    let (cert, key) = (std::fs::read(&certs.cert).unwrap(), std::fs::read(&certs.key).unwrap());
    let server = rt.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        FakeApiServer::start_tls_on(listener, &cert, &key).unwrap()
    });
    server.require_token(TOKEN);
    let objects = [
        json!({"kind": "Node", "metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "z1"}},
               "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": NODE}]}}),
        json!({"kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default",
                                               "labels": {"component": "apiserver", "provider": "kubernetes"}},
               "spec": {"clusterIP": KUBERNETES_SERVICE, "clusterIPs": [KUBERNETES_SERVICE], "type": "ClusterIP",
                        "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": 6443}]}}),
        json!({"kind": "EndpointSlice", "metadata": {"name": "kubernetes", "namespace": "default",
                                                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [API_SERVER], "conditions": {"ready": true}}],
               "ports": [{"name": "https", "protocol": "TCP", "port": 6443}]}),
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"clusterIP": "10.96.0.50", "type": "ClusterIP",
                        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}}),
        json!({"kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "shop",
                                                     "labels": {"kubernetes.io/service-name": "web"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": "node-2"}],
               "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]}),
    ];
    for o in objects {
        server.apply(o).unwrap();
    }
    server
}

/// `deploy/FILE`, parsed.
fn manifest(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("deploy").join(file)).unwrap();
    serde_saphyr::from_multiple(&text).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap()
}

/// The DaemonSet's pod as the kubelet runs it on this node.
struct Pod<'a> {
    ctd: &'a Containerd,
    image: String,
    node: &'a Netns,
    spec: Value,
    /// Volume name -> the directory holding its files.
    volumes: BTreeMap<String, PathBuf>,
    /// The projected service account volume.
    service_account: PathBuf,
}

impl<'a> Pod<'a> {
    /// The pod of `docs`' DaemonSet, its ConfigMap's files as given by
    /// `config` (key -> content).
    fn new(
        ctd: &'a Containerd,
        image: &str,
        node: &'a Netns,
        docs: &[Value],
        config: &BTreeMap<String, String>,
        certs: &Certs,
    ) -> Self {
        let spec = of_kind(docs, "DaemonSet")["spec"]["template"]["spec"].clone();
        assert_eq!(spec["hostNetwork"], true, "the node's network");
        let mut volumes = BTreeMap::new();
        for v in spec["volumes"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            assert!(
                v["configMap"]["name"].is_string(),
                "volume {name}: only a ConfigMap is mounted"
            );
            let dir = ctd.dir.join(format!("volume-{name}-{}", config.len()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (key, content) in config {
                std::fs::write(dir.join(key), content).unwrap();
            }
            volumes.insert(name.to_owned(), dir);
        }
        let service_account = ctd.dir.join("serviceaccount");
        std::fs::create_dir_all(&service_account).unwrap();
        std::fs::write(service_account.join("token"), TOKEN).unwrap();
        std::fs::copy(&certs.ca, service_account.join("ca.crt")).unwrap();
        std::fs::write(service_account.join("namespace"), "kube-system").unwrap();
        Self {
            ctd,
            image: image.to_owned(),
            node,
            spec,
            volumes,
            service_account,
        }
    }

    /// `ctr run` arguments for container `c`, as the kubelet would make
    /// its spec (the parts the DaemonSet uses; anything else fails here).
    fn ctr_run(&self, c: &Value, id: &str) -> Vec<String> {
        let mut env: Vec<(String, String)> = vec![
            ("KUBERNETES_SERVICE_HOST".into(), KUBERNETES_SERVICE.into()),
            ("KUBERNETES_SERVICE_PORT".into(), "443".into()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), "443".into()),
            ("KUBERNETES_PORT".into(), format!("tcp://{KUBERNETES_SERVICE}:443")),
        ];
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match (&e["value"], &e["valueFrom"]["fieldRef"]["fieldPath"]) {
                (Value::String(v), _) => v.clone(),
                (_, Value::String(f)) if f == "spec.nodeName" => NODE.to_owned(),
                other => panic!("env {name}: {other:?} is not something this runner makes"),
            };
            env.push((name, value));
        }
        let expand = |s: &str| {
            env.iter()
                .fold(s.to_owned(), |s, (k, v)| s.replace(&format!("$({k})"), v))
        };
        let mut args: Vec<String> = vec!["run".into()];
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            args.push("--privileged".into());
        } else {
            let drop = sc["capabilities"]["drop"].as_array().cloned().unwrap_or_default();
            if drop.iter().any(|d| d == "ALL") {
                for cap in DEFAULT_CAPABILITIES {
                    args.extend(["--cap-drop".into(), cap.into()]);
                }
            }
            for cap in sc["capabilities"]["add"].as_array().into_iter().flatten() {
                let cap = format!("CAP_{}", cap.as_str().unwrap());
                if !host_can_grant(&cap) {
                    eprintln!("{id}: this host cannot grant {cap} (not in its bounding set): left out");
                    continue;
                }
                args.extend(["--cap-add".into(), cap]);
            }
        }
        if sc["readOnlyRootFilesystem"] == true {
            args.push("--read-only".into());
        }
        assert!(sc["runAsUser"].is_null() || sc["runAsUser"] == 0, "{id}: runs as root");
        args.extend(["--with-ns".into(), format!("network:/run/netns/{}", self.node.0)]);
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let src = &self.volumes[m["name"].as_str().unwrap()];
            let ro = if m["readOnly"] == true { "ro" } else { "rw" };
            args.extend([
                "--mount".into(),
                format!(
                    "type=bind,src={},dst={},options=rbind:{ro}",
                    src.display(),
                    m["mountPath"].as_str().unwrap()
                ),
            ]);
        }
        args.extend([
            "--mount".into(),
            format!(
                "type=bind,src={},dst={SA_DIR},options=rbind:ro",
                self.service_account.display()
            ),
        ]);
        for (k, v) in &env {
            args.extend(["--env".into(), format!("{k}={v}")]);
        }
        assert_eq!(c["image"], self.image.as_str(), "{id}: the image image.sh packs");
        args.extend([self.image.clone(), id.to_owned()]);
        for part in ["command", "args"] {
            for a in c[part].as_array().into_iter().flatten() {
                args.push(expand(a.as_str().unwrap()));
            }
        }
        args
    }

    fn ctr(&self, run_args: &[String]) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.args(["--address", &self.ctd.socket(), "-n", common::image::NAMESPACE]);
        cmd.args(run_args);
        cmd
    }

    /// Runs the init containers to completion, as the kubelet does before
    /// the pod's containers; each must succeed. Returns their logs.
    fn run_init_containers(&self) -> String {
        let mut logs = String::new();
        for (i, c) in self.spec["initContainers"].as_array().into_iter().flatten().enumerate() {
            let id = format!("init-{i}");
            let mut args = self.ctr_run(c, &id);
            args.insert(1, "--rm".into());
            let out = self.ctr(&args).output().unwrap();
            let log = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "init container {} failed:\n{log}", c["name"]);
            logs.push_str(&log);
        }
        logs
    }

    /// Starts the pod's container as `id`; its log lines arrive on the
    /// receiver.
    fn start(&self, id: &str) -> (common::KillOnDrop, std::sync::mpsc::Receiver<String>) {
        let containers = self.spec["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        spawn_logged(self.ctr(&self.ctr_run(&containers[0], id)))
    }

    /// The probe `kind` (`readinessProbe`, `livenessProbe`) as the kubelet
    /// makes it: an HTTP GET to the pod's IP; the status, or 0 when
    /// nothing answers.
    fn probe(&self, kind: &str) -> u16 {
        let c = &self.spec["containers"][0];
        let get_ = &c[kind]["httpGet"];
        let url = format!(
            "http://{NODE_IP}:{}{}",
            get_["port"].as_u64().unwrap(),
            get_["path"].as_str().unwrap()
        );
        get(self.node, &url).map_or(0, |(status, _)| status)
    }
}

/// Whether this host's bounding set holds `cap`: a container runtime
/// cannot grant more (runc fails the container), so a capability the
/// manifest asks for and the host lacks is left out, and said.
fn host_can_grant(cap: &str) -> bool {
    const BITS: [&str; 2] = ["CAP_NET_ADMIN", "CAP_SYS_RESOURCE"];
    let bit = match cap {
        "CAP_NET_ADMIN" => 12,
        "CAP_SYS_RESOURCE" => 24,
        other => panic!("{other}: not one of {BITS:?}, the capabilities this runner knows"),
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap();
    bounding >> bit & 1 == 1
}

fn lines_now(lines: &std::sync::mpsc::Receiver<String>, log: &mut Vec<String>) {
    while let Ok(l) = lines.try_recv() {
        log.push(l);
    }
}

/// The host's conntrack table size.
fn host_conntrack_max() -> u64 {
    let text = std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_max").unwrap();
    text.trim().parse().unwrap()
}

/// The table size kube-proxy's defaults ask for on this machine.
fn kube_proxys_conntrack_max() -> u64 {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|l| {
            l.trim().split(',').try_fold(0u64, |n, part| {
                Some(
                    n + match part.split_once('-') {
                        Some((a, b)) => b.parse::<u64>().ok()? - a.parse::<u64>().ok()? + 1,
                        None => 1,
                    },
                )
            })
        })
        .unwrap_or(1);
    (32_768 * cpus).clamp(131_072, 1 << 20)
}

/// A node with no service proxy, its containerd with the image imported,
/// and the cluster's API server.
struct Cluster {
    // Dropped in this order: the containers, then the node, the server.
    ctd: Containerd,
    image: String,
    node: Netns,
    certs: Certs,
    server: FakeApiServer,
    _rt: tokio::runtime::Runtime,
}

impl Cluster {
    fn start() -> Self {
        require_containerd();
        run("sh", &["-c", "command -v openssl"]);
        let ctd = Containerd::start();
        let image = ctd.import_image();
        let node = node();
        let certs = certs(&ctd.dir);
        let rt = common::runtime();
        let server = api_server(&rt, &node, &certs);
        Self {
            ctd,
            image,
            node,
            certs,
            server,
            _rt: rt,
        }
    }

    fn pod(&self, docs: &[Value], config: &BTreeMap<String, String>) -> Pod<'_> {
        Pod::new(&self.ctd, &self.image, &self.node, docs, config, &self.certs)
    }

    /// Runs `pod` as the kubelet does (init containers, then the
    /// container) while the API server is slow at first: the probes must
    /// see the health server answer 503 before there is any table, and 200
    /// only once the table holds the cluster's services; then the
    /// `kubernetes` Service answers through proxyd's rules, and the log
    /// holds no warning. Returns the log.
    fn ready_only_once_programmed(&self, pod: &Pod<'_>) -> Vec<String> {
        let init_log = pod.run_init_containers();
        // The node's namespace is not the host's: a table size below
        // kube-proxy's cannot be raised from it, which is a warning, never
        // a pod that does not start.
        let small_table = host_conntrack_max() < kube_proxys_conntrack_max();
        let said = if small_table {
            "--init-only: 1 conntrack setting(s) could not be made"
        } else {
            "--init-only: the startup settings are made"
        };
        assert!(init_log.contains(said), "{init_log}");
        self.server.set_hanging(true);
        let (_ctr, lines) = pod.start("proxyd");
        let started = Instant::now();
        let mut answers = Vec::new();
        let ready_at = loop {
            let status = pod.probe("readinessProbe");
            answers.push(status);
            if status == 200 {
                break started.elapsed();
            }
            // Slow until the probes have seen a few answers.
            if answers.iter().filter(|s| **s == 503).count() >= 5 {
                self.server.set_hanging(false);
            }
            assert!(
                started.elapsed() < WAIT,
                "not ready within {WAIT:?}: {answers:?}\n{}",
                self.ctd.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        // Ready means programmed: at the first 200 the table holds both
        // services.
        let programmed = table(&self.node);
        assert!(
            programmed.contains("10.96.0.50") && programmed.contains(KUBERNETES_SERVICE),
            "ready without the table:\n{programmed}"
        );
        let unready = answers.iter().filter(|s| **s == 503).count();
        assert!(unready >= 5, "503 while the API server was slow: {answers:?}");
        let first_answer = answers.iter().position(|s| *s != 0).unwrap();
        assert!(
            answers[first_answer..].iter().all(|s| *s != 0),
            "the health server, once up, always answers: {answers:?}"
        );
        assert_eq!(pod.probe("livenessProbe"), 200);
        eprintln!("ready {ready_at:?} after the start; {unready} probes answered 503 before");

        // The kubernetes Service now leads to the API server through
        // proxyd's rules (what every in-cluster client on the node needs).
        let check = format!(
            "import ssl, urllib.request\n\
             ctx = ssl.create_default_context(cafile='{}')\n\
             req = urllib.request.Request('https://{KUBERNETES_SERVICE}/version', headers={{'Authorization': 'Bearer {TOKEN}'}})\n\
             print(urllib.request.urlopen(req, context=ctx, timeout=5).status)\n",
            self.certs.ca.display()
        );
        assert_eq!(self.node.exec("python3", &["-c", &check]).trim(), "200");

        // What the node lacks of the conntrack settings is a metric.
        let scrape = "import urllib.request\n\
                      print(urllib.request.urlopen('http://127.0.0.1:10249/metrics', timeout=5).read().decode())\n";
        let metrics = self.node.exec("python3", &["-c", scrape]);
        let unset = metrics
            .lines()
            .find_map(|l| l.strip_prefix("proxyd_conntrack_settings_unset "))
            .unwrap_or_else(|| panic!("no proxyd_conntrack_settings_unset in\n{metrics}"));
        assert_eq!(unset.trim(), if small_table { "1" } else { "0" }, "the table size");

        // Quiet with the manifest's own privileges, and kube-proxy's OOM
        // score where the host can grant SYS_RESOURCE.
        std::thread::sleep(Duration::from_secs(1));
        let mut log = Vec::new();
        lines_now(&lines, &mut log);
        let noisy: Vec<&String> = log
            .iter()
            .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
            .filter(|l| !(small_table && l.contains("conntrack settings left as they are")))
            .collect();
        assert!(noisy.is_empty(), "warnings on a start as deployed:\n{noisy:#?}");
        let pid = self.ctd.pid("proxyd").expect("proxyd runs");
        let score = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
        if host_can_grant("CAP_SYS_RESOURCE") {
            assert_eq!(
                score.trim(),
                "-999",
                "--oom-score-adj's default, with the manifest's SYS_RESOURCE"
            );
        } else {
            assert!(
                log.iter().any(|l| l.contains("--oom-score-adj -999: cannot write")),
                "{log:#?}"
            );
        }
        assert!(
            log.iter().any(|l| l.contains(&format!("https://{API_SERVER}:6443"))),
            "{log:#?}"
        );
        log
    }
}

/// `deploy/proxyd.yaml` as shipped, with the API server's address set in
/// its kubeconfig; and, for contrast, the same pod with the in-cluster
/// configuration (the manifest before): out of reach, said once naming
/// the fix, never ready.
#[test]
#[ignore = "needs root, containerd, runc and openssl: runs deploy/proxyd.yaml's pod as the kubelet would"]
fn the_daemonset_as_shipped_reaches_the_api_server_and_is_ready_only_once_programmed() {
    let cluster = Cluster::start();
    let docs = manifest("proxyd.yaml");
    let shipped: BTreeMap<String, String> = of_kind(&docs, "ConfigMap")["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let kubeconfig = shipped
        .get("kubeconfig.conf")
        .expect("the ConfigMap carries a kubeconfig");
    assert!(kubeconfig.contains(PLACEHOLDER), "{kubeconfig}");

    let mut in_cluster = shipped.clone();
    let config = in_cluster.get_mut("config.yaml").unwrap();
    *config = config
        .lines()
        .filter(|l| !l.starts_with("kubeconfig:"))
        .collect::<Vec<_>>()
        .join("\n");
    in_cluster.remove("kubeconfig.conf");
    let pod = cluster.pod(&docs, &in_cluster);
    let (ctr, lines) = pod.start("proxyd-in-cluster");
    let mut log = Vec::new();
    let started = Instant::now();
    let hint = loop {
        lines_now(&lines, &mut log);
        if let Some(l) = log.iter().find(|l| l.contains("cannot reach the API server")) {
            break l.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no word of the unreachable API server:\n{}",
            log.join("\n")
        );
        assert_ne!(pod.probe("readinessProbe"), 200, "ready with no API server");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        hint.contains(&format!("https://{KUBERNETES_SERVICE}"))
            && hint.contains("kubeconfig.conf")
            && hint.contains("\"level\":\"ERROR\""),
        "{hint}"
    );
    assert_eq!(pod.probe("readinessProbe"), 503);
    assert_eq!(pod.probe("livenessProbe"), 200);
    cluster.ctd.remove("proxyd-in-cluster");
    drop(ctr);

    let mut configured = shipped.clone();
    configured.insert(
        "kubeconfig.conf".into(),
        kubeconfig.replace(PLACEHOLDER, &format!("https://{API_SERVER}:6443")),
    );
    cluster.ready_only_once_programmed(&cluster.pod(&docs, &configured));
}

/// `deploy/proxyd-kube-proxy-configmap.yaml` with kube-proxy's ConfigMap
/// as kubeadm writes it (its kubeconfig names the API server's address,
/// kubeadm's controlPlaneEndpoint): nothing to set.
#[test]
#[ignore = "needs root, containerd, runc and openssl: runs the kube-proxy-ConfigMap DaemonSet's pod as the kubelet would"]
fn the_kube_proxy_configmap_variant_is_ready_only_once_programmed() {
    let cluster = Cluster::start();
    let docs = manifest("proxyd-kube-proxy-configmap.yaml");
    let fixture = |f: &str| {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(f)).unwrap()
    };
    let kubeadm: BTreeMap<String, String> = [
        ("config.conf".to_owned(), fixture("kubeadm-kube-proxy-config.conf")),
        (
            "kubeconfig.conf".to_owned(),
            fixture("kubeadm-kubeconfig.conf").replace("control-plane.example", API_SERVER),
        ),
    ]
    .into_iter()
    .collect();
    cluster.ready_only_once_programmed(&cluster.pod(&docs, &kubeadm));
}
