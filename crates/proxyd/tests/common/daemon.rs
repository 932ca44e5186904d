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

/// `GET path` on 127.0.0.1:port; the body.
pub fn http_body(port: u16, path: &str) -> String {
    http_get(port, path)
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}
