//! The image `deploy/image.sh` packs, and a containerd of the test's own
//! to run it in (Debian's, with runc; its root, state and socket in a
//! temporary directory; no CRI plugin): what the root tests that run
//! proxyd as the DaemonSets run it share.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{KillOnDrop, Netns, require, run, terminate};

const WAIT: Duration = Duration::from_secs(60);
/// containerd's namespace for the tests' containers.
pub const NAMESPACE: &str = "proxyd-image-test";
/// What containerd's default container spec grants.
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
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

pub fn require_containerd() {
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

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The image every DaemonSet in `deploy/` runs, all the same one.
pub fn daemonset_image() -> String {
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
pub struct Containerd {
    /// Its root, state, socket and log; the tests' scratch files too.
    pub dir: PathBuf,
    process: Option<KillOnDrop>,
}

impl Containerd {
    /// Starts one and waits until it answers.
    pub fn start() -> Self {
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

    /// containerd's own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    fn args<'a>(&'a self, socket: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--address", socket, "-n", NAMESPACE];
        all.extend_from_slice(args);
        all
    }

    /// containerd's socket.
    pub fn socket(&self) -> String {
        self.dir.join("containerd.sock").display().to_string()
    }

    /// `ctr ARGS` in the tests' namespace; its output (panics on failure).
    pub fn ctr(&self, args: &[&str]) -> String {
        let socket = self.socket();
        run("ctr", &self.args(&socket, args))
    }

    /// `ctr ARGS` in the tests' namespace; whether it succeeded.
    pub fn ctr_quiet(&self, args: &[&str]) -> bool {
        let socket = self.socket();
        Command::new("ctr")
            .args(self.args(&socket, args))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Containerd {
    /// The containers of the tests' namespace.
    pub fn containers(&self) -> Vec<String> {
        let socket = self.socket();
        let out = Command::new("ctr")
            .args(self.args(&socket, &["containers", "ls", "-q"]))
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Kills container `id`'s task and removes both.
    pub fn remove(&self, id: &str) {
        let _ = self.ctr_quiet(&["tasks", "kill", "-s", "SIGKILL", id]);
        let started = Instant::now();
        while !self.ctr_quiet(&["tasks", "delete", id]) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.ctr_quiet(&["containers", "delete", id]);
    }

    /// The process id of container `id`'s task, while it runs.
    pub fn pid(&self, id: &str) -> Option<u32> {
        let socket = self.socket();
        let out = Command::new("ctr")
            .args(self.args(&socket, &["tasks", "ls"]))
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut cols = l.split_whitespace();
            (cols.next() == Some(id)).then(|| cols.next()?.parse().ok()).flatten()
        })
    }

    /// Packs the image the DaemonSets run (`deploy/image.sh`, with the
    /// proxyd this test build made) and imports it; returns its name.
    pub fn import_image(&self) -> String {
        let archive = self.dir.join("proxyd.tar");
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
        self.ctr(&["images", "import", &archive.display().to_string()]);
        image
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        for id in self.containers() {
            self.remove(&id);
        }
        if let Some(mut p) = self.process.take() {
            terminate(&mut p, "TERM");
        }
        super::unmount_under(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP GET from inside `ns`: (status, body), or `None` while nothing
/// answers.
pub fn get(ns: &Netns, url: &str) -> Option<(u16, String)> {
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

/// `nft -j list table ip proxyd` in `ns`, with what differs between two
/// equal tables taken out: handles, and the order of a hash set's
/// elements (each set's random seed orders them).
pub fn table(ns: &Netns) -> String {
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
