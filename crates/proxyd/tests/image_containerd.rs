//! proxyd as operators run it, as root: the image `deploy/image.sh`
//! packs (no registry, no base image), imported into a containerd of the
//! test's own (Debian's, with runc) and run as a container the way the
//! DaemonSet runs it: every capability dropped but `NET_ADMIN`, a
//! read-only root filesystem, the node's network namespace (here a
//! namespace of the test's, standing for the host's), the configuration
//! mounted read-only. It must start, sync the example cluster, answer
//! `/healthz`, and leave its table in the namespace.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{KillOnDrop, Netns, free_port, require, run, terminate};

const WAIT: Duration = Duration::from_secs(60);
const NAMESPACE: &str = "proxyd-image-test";
/// What containerd's default container spec grants.
const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

fn require_containerd() {
    require();
    for tool in ["containerd", "ctr", "runc", "strip", "ldd", "python3"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "root test asked for but cannot run here: {tool} is not installed \
             (apt-get install -y containerd runc binutils python3)"
        );
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The image every DaemonSet in `deploy/` runs, all the same one.
fn daemonset_image() -> String {
    let mut names: Vec<String> = ["proxyd.yaml", "proxyd-kube-proxy-configmap.yaml", "proxyd-multus.yaml"]
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(repo().join("deploy").join(f)).unwrap();
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("image:").map(|i| i.trim().to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    names.dedup();
    assert_eq!(names.len(), 1, "the DaemonSets name one image: {names:?}");
    names.remove(0)
}

/// A containerd with its root, state and socket in a temporary directory;
/// stopped, and what it mounted released, on drop.
struct Containerd {
    dir: PathBuf,
    process: Option<KillOnDrop>,
}

impl Containerd {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("proxyd-image-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        std::fs::write(
            dir.join("config.toml"),
            format!(
                "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{d}/containerd.sock\"\n\
                 [ttrpc]\n  address = \"{d}/containerd-ttrpc.sock\"\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Self {
            dir,
            process: Some(KillOnDrop(child)),
        };
        let started = Instant::now();
        while !c.ctr_quiet(&["version"]) {
            assert!(started.elapsed() < WAIT, "containerd did not answer:\n{}", c.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    fn args<'a>(&'a self, socket: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--address", socket, "-n", NAMESPACE];
        all.extend_from_slice(args);
        all
    }

    fn socket(&self) -> String {
        self.dir.join("containerd.sock").display().to_string()
    }

    fn ctr(&self, args: &[&str]) -> String {
        let socket = self.socket();
        run("ctr", &self.args(&socket, args))
    }

    fn ctr_quiet(&self, args: &[&str]) -> bool {
        let socket = self.socket();
        Command::new("ctr")
            .args(self.args(&socket, args))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.ctr_quiet(&["tasks", "kill", "-s", "SIGKILL", "proxyd"]);
        std::thread::sleep(Duration::from_millis(300));
        let _ = self.ctr_quiet(&["tasks", "delete", "proxyd"]);
        let _ = self.ctr_quiet(&["containers", "delete", "proxyd"]);
        if let Some(mut p) = self.process.take() {
            terminate(&mut p, "TERM");
        }
        common::unmount_under(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP GET from inside `ns`: (status, body), or `None` while nothing
/// answers.
fn get(ns: &Netns, url: &str) -> Option<(u16, String)> {
    let script = "import sys, urllib.request, urllib.error\n\
                  try:\n    r = urllib.request.urlopen(sys.argv[1], timeout=2); print(r.status); print(r.read().decode())\n\
                  except urllib.error.HTTPError as e:\n    print(e.code); print(e.read().decode())\n";
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, "python3", "-c", script, url])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, body) = text.split_once('\n')?;
    Some((status.trim().parse().ok()?, body.to_owned()))
}

#[test]
#[ignore = "needs root, containerd and runc: packs the image, imports it and runs it as a container"]
fn the_image_runs_as_the_daemonset_runs_it() {
    require_containerd();
    let ctd = Containerd::start();
    let archive = ctd.dir.join("proxyd.tar");
    let packed = run(
        "bash",
        &[
            &repo().join("deploy/image.sh").display().to_string(),
            &archive.display().to_string(),
            env!("CARGO_BIN_EXE_proxyd"),
        ],
    );
    let image = daemonset_image();
    assert!(
        packed.starts_with(&format!("{image} ")),
        "image.sh tags what the DaemonSets run ({image}): {packed}"
    );
    ctd.ctr(&["images", "import", &archive.display().to_string()]);

    let node = Netns::named(format!("pimg-{}", std::process::id() % 100_000));
    let healthz = free_port();
    let cluster = std::fs::canonicalize(repo().join("examples/cluster")).unwrap();
    let mount = format!(
        "type=bind,src={},dst=/etc/proxyd/cluster,options=rbind:ro",
        cluster.display()
    );
    let netns = format!("network:/run/netns/{}", node.0);
    let bind = format!("127.0.0.1:{healthz}");
    // ctr has no `ALL`: the capabilities containerd's default spec grants,
    // each dropped (the DaemonSet drops all), and NET_ADMIN added.
    let mut args = vec!["run", "--detach", "--read-only"];
    for cap in DEFAULT_CAPABILITIES {
        args.extend(["--cap-drop", cap]);
    }
    args.extend(["--cap-add", "CAP_NET_ADMIN"]);
    args.extend([
        "--with-ns",
        &netns,
        "--mount",
        &mount,
        &image,
        "proxyd",
        "/usr/local/bin/proxyd",
        "run",
        "--manifests",
        "/etc/proxyd/cluster",
        "--hostname-override",
        "node-1",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--healthz-bind-address",
        &bind,
        "--metrics-bind-address",
        "",
    ]);
    ctd.ctr(&args);

    let started = Instant::now();
    let url = format!("http://{bind}/healthz");
    let answer = loop {
        match get(&node, &url) {
            Some((200, body)) => break body,
            other => {
                let running = ctd.ctr_quiet(&["tasks", "ps", "proxyd"]);
                assert!(
                    running && started.elapsed() < WAIT,
                    "/healthz did not answer 200 within {WAIT:?} (last: {other:?}; task running: {running}):\n{}",
                    ctd.ctr(&["tasks", "ls"])
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert!(answer.contains("lastUpdated"), "kube-proxy's /healthz body: {answer}");

    // The table in the node's namespace is the one proxyd writes outside
    // a container for the same cluster and flags.
    let outside = Netns::named(format!("pimg-out-{}", std::process::id() % 100_000));
    let _direct = KillOnDrop(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &outside.0,
                env!("CARGO_BIN_EXE_proxyd"),
                "run",
                "--manifests",
            ])
            .arg(&cluster)
            .args(["--hostname-override", "node-1", "--cluster-cidr", "10.244.0.0/16"])
            .args(["--healthz-bind-address", &bind, "--metrics-bind-address", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while get(&outside, &url).map(|(s, _)| s) != Some(200) {
        assert!(
            started.elapsed() < WAIT,
            "proxyd outside a container did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let inside = table(&node);
    assert!(
        inside.contains("10.96.0.60"),
        "the example's services programmed:\n{inside}"
    );
    assert_eq!(inside, table(&outside), "the container's table and proxyd's own");
}

/// `nft -j list table ip proxyd` in `ns`, with what differs between two
/// equal tables taken out: handles, and the order of a hash set's
/// elements (each set's random seed orders them).
fn table(ns: &Netns) -> String {
    let json = ns.exec("nft", &["-j", "list", "table", "ip", "proxyd"]);
    let script = "import json, sys\n\
                  doc = json.load(sys.stdin)\n\
                  def clean(v):\n\
                  \x20   if isinstance(v, dict):\n\
                  \x20       v = {k: clean(x) for k, x in v.items() if k != 'handle'}\n\
                  \x20       if 'elem' in v: v['elem'] = sorted(v['elem'], key=json.dumps)\n\
                  \x20       return v\n\
                  \x20   if isinstance(v, list): return [clean(x) for x in v]\n\
                  \x20   return v\n\
                  print(json.dumps(clean(doc), indent=1, sort_keys=True))\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(json.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "normalising the table failed");
    String::from_utf8(out.stdout).unwrap()
}
