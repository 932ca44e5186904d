//! Support shared by the root tests: the skip-or-fail rule, network
//! namespaces, commands, and child processes that die with the test.

#![allow(dead_code, reason = "each test crate uses a different part")]

use std::process::Command;
use std::time::{Duration, Instant};

pub mod daemon;
pub mod extremes;
pub mod image;
pub mod multus;

fn can_run() -> Result<(), String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not root (network namespaces and nftables need CAP_NET_ADMIN)".into());
    }
    for tool in ["ip", "nft", "python3", "conntrack"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Err(format!(
                "{tool} is not installed (apt-get install -y iproute2 nftables python3 conntrack)"
            ));
        }
    }
    Ok(())
}

/// Checks that a root test can run here; fails the test, naming what is
/// missing, when not. Root tests are `#[ignore]`d, so this runs only when
/// they were asked for (`cargo nextest run --run-ignored all`, as
/// `.ci/run` does): asked for and impossible is a failure, never a pass.
pub fn require() {
    if let Err(why) = can_run() {
        panic!("root test asked for but cannot run here: {why}");
    }
}

/// Runs a command; panics with its stderr when it fails.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace with `lo` up, deleted on drop (even when the test
/// fails).
pub struct Netns(pub String);

impl Netns {
    /// Creates `name` (replacing a leftover of that name).
    pub fn named(name: String) -> Self {
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        run("ip", &["netns", "add", &name]);
        let ns = Self(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS …`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.0];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// Runs a program inside the namespace.
    pub fn exec(&self, program: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.0, program];
        all.extend_from_slice(args);
        run("ip", &all)
    }
}

impl Netns {
    /// Starts `program args` inside the namespace and waits until it
    /// prints `ready` (a server listening); killed when dropped.
    pub fn spawn_ready(&self, program: &str, args: &[&str]) -> KillOnDrop {
        use std::io::BufRead;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.0, program])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program} in {}: {e}", self.0));
        let stdout = child.stdout.take();
        let guard = KillOnDrop(child);
        let mut line = String::new();
        if let Some(out) = stdout {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        assert_eq!(line.trim(), "ready", "{program} in {} did not start", self.0);
        guard
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Quietly: a namespace a test already removed is not news.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A child process killed when dropped, so a failing test leaves no
/// proxyd behind.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `signal` and waits (bounded) for the exit.
pub fn terminate(child: &mut KillOnDrop, signal: &str) -> std::process::ExitStatus {
    run("kill", &[&format!("-{signal}"), &child.id().to_string()]);
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap_or(None) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the process did not exit on {signal}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An async runtime for a test's fakes (API server, container runtime):
/// one worker thread, timers and I/O on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// `proxyd run` on the bundled example cluster as node-1, writing its
/// syncs to `dir` instead of applying them, with no health server and
/// `/metrics` on 127.0.0.1:`metrics_port`.
pub fn dry_run_on_the_example(dir: &std::path::Path, metrics_port: u16) -> std::process::Command {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_proxyd"));
    // One family, whatever the host has: the files are `sync-NNNNNN.nft`.
    cmd.args([
        "run",
        "--hostname-override",
        "node-1",
        "--ip-family",
        "ipv4",
        "--healthz-bind-address",
        "",
    ])
    .arg("--metrics-bind-address")
    .arg(format!("127.0.0.1:{metrics_port}"))
    .arg("--manifests")
    .arg(example)
    .arg("--dry-run-dir")
    .arg(dir);
    cmd
}

/// Unmounts (lazily, deepest first) whatever is mounted under `dir`: a
/// container runtime's leftovers, before its directory is removed.
pub fn unmount_under(dir: &std::path::Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let root = dir.display().to_string();
    let mut under: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| m.starts_with(&root))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in under {
        let _ = Command::new("umount")
            .args(["-l", m])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
