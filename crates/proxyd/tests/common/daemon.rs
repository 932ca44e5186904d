//! proxyd as a child process of a test: its log read line by line, and
//! its admin HTTP server asked as a probe asks it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::KillOnDrop;

/// How long a test waits for a log line.
const WAIT: Duration = Duration::from_secs(30);

/// Waits (bounded) for a log line containing every one of `parts`.
pub async fn expect_line(lines: &mpsc::Receiver<String>, log: &mut Vec<String>, parts: &[&str]) -> String {
    let start = Instant::now();
    loop {
        while let Ok(l) = lines.try_recv() {
            log.push(l.clone());
            if parts.iter().all(|p| l.contains(p)) {
                return l;
            }
        }
        assert!(
            start.elapsed() < WAIT,
            "no log line with {parts:?} within {WAIT:?}; log:\n{}",
            log.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `cmd` with its stderr read line by line into the receiver.
pub fn spawn_logged(mut cmd: Command) -> (KillOnDrop, mpsc::Receiver<String>) {
    let mut child = KillOnDrop(cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// `GET path` on 127.0.0.1:port: the whole answer (empty if none).
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// `GET path` on 127.0.0.1:port; the status code (0 if no answer).
pub fn http_status(port: u16, path: &str) -> u16 {
    http_get(port, path)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Waits (bounded by `within`) until `GET path` answers `code`; panics
/// with `why` and the last code otherwise. The first sync's log line is one
/// family's: with both families the other may still be writing, so a test
/// that needs `/healthz` 200 waits for it rather than asking once.
pub async fn await_status(port: u16, path: &str, code: u16, within: Duration, why: &str) -> Duration {
    let start = Instant::now();
    loop {
        let got = http_status(port, path);
        if got == code {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{why}: {path} answered {got}, not {code}, for {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` on 127.0.0.1:port; the body.
pub fn http_body(port: u16, path: &str) -> String {
    http_get(port, path)
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

/// `proxyd run --dry-run` (the real binary) against a fake API server,
/// with `/healthz` on a free port of 127.0.0.1; killed, and its scratch
/// directory removed, on drop.
pub struct Proxyd {
    _child: KillOnDrop,
    /// Its log, line by line.
    pub lines: mpsc::Receiver<String>,
    /// The lines read so far.
    pub log: Vec<String>,
    /// Where `/healthz` and `/livez` answer.
    pub port: u16,
    /// When it was started.
    pub started: Instant,
    dir: std::path::PathBuf,
}

impl Proxyd {
    /// Starts it against `server`'s kubeconfig with `--sync-period
    /// sync_period`; `tag` names its scratch directory.
    pub fn dry_run(server: &fake_apiserver::FakeApiServer, tag: &str, sync_period: Duration) -> Self {
        let dir = std::env::temp_dir().join(format!("proxyd-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
        let port = super::free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxyd"));
        cmd.args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args([
                "--hostname-override",
                "node-1",
                "--ip-family",
                "ipv4",
                "--min-sync-period",
                "0",
            ])
            .arg("--sync-period")
            .arg(format!("{}s", sync_period.as_secs()))
            .args(["--dry-run", "--metrics-bind-address", "", "--healthz-bind-address"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--dry-run-dir")
            .arg(dir.join("nft"));
        let started = Instant::now();
        let (child, lines) = spawn_logged(cmd);
        Self {
            _child: child,
            lines,
            log: Vec::new(),
            port,
            started,
            dir,
        }
    }
}

impl Drop for Proxyd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
