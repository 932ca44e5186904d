//! The daemon's memory with many services: writes manifests of SERVICES
//! services (default 10,000) with ENDPOINTS endpoints each (default 10),
//! starts the real `proxyd run --manifests … --netns …` (the release binary
//! next to this one) in a network namespace it makes, waits for the first
//! sync, and prints VmRSS/VmHWM. Needs root, `ip` and `nft`.
//!
//!     cargo build --release -p proxyd -p proxyd-benches
//!     ./target/release/daemon-rss [SERVICES] [ENDPOINTS]

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

fn manifests(services: u32, endpoints: u32) -> String {
    let mut out = String::from("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n");
    for i in 0..services {
        let vip = format!("10.{}.{}.{}", 96 + i / 65536, (i / 256) % 256, i % 256);
        let _ = writeln!(
            out,
            "{{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{{\"name\":\"svc-{i}\",\"namespace\":\"ns-{}\"}},\"spec\":{{\"clusterIP\":\"{vip}\",\"ports\":[{{\"name\":\"http\",\"port\":80,\"targetPort\":8080}}]}}}},",
            i % 50
        );
        let eps: Vec<String> = (0..endpoints)
            .map(|k| {
                let n = i * endpoints + k;
                format!(
                    "{{\"addresses\":[\"10.{}.{}.{}\"],\"nodeName\":\"node-{}\",\"conditions\":{{\"ready\":true}}}}",
                    128 + n / 65536,
                    (n / 256) % 256,
                    n % 256,
                    n % 100
                )
            })
            .collect();
        let sep = if i + 1 == services { "" } else { "," };
        let _ = writeln!(
            out,
            "{{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{{\"name\":\"svc-{i}-abcde\",\"namespace\":\"ns-{}\",\"labels\":{{\"kubernetes.io/service-name\":\"svc-{i}\"}}}},\"addressType\":\"IPv4\",\"ports\":[{{\"name\":\"http\",\"port\":8080,\"protocol\":\"TCP\"}}],\"endpoints\":[{}]}}{sep}",
            i % 50,
            eps.join(",")
        );
    }
    out.push_str("]}\n");
    out
}

fn status_field(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() -> ExitCode {
    let arg = |n: usize, default: u32| std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (services, endpoints) = (arg(1, 10_000), arg(2, 10));
    let Some(proxyd) = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.join("proxyd")))
    else {
        eprintln!("daemon-rss: cannot find the proxyd binary");
        return ExitCode::FAILURE;
    };
    let id = std::process::id();
    let dir = std::env::temp_dir().join(format!("proxyd-rss-{id}"));
    let ns = format!("proxyd-rss-{id}");
    let result = (|| -> Result<(), String> {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("cluster.json"), manifests(services, endpoints)).map_err(|e| e.to_string())?;
        let ok = Command::new("ip").args(["netns", "add", &ns]).status();
        if !ok.is_ok_and(|s| s.success()) {
            return Err("cannot create a network namespace (needs root and iproute2)".into());
        }
        let started = Instant::now();
        let mut child = Command::new(&proxyd)
            .args(["run", "--hostname-override", "node-1", "--netns", &ns])
            .args(["--healthz-bind-address", "", "--metrics-bind-address", ""])
            .arg("--manifests")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", proxyd.display()))?;
        let pid = child.id();
        let stderr = child.stderr.take().ok_or("no stderr")?;
        // Keep draining the log: a closed pipe would end the daemon.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(" synced ") {
                    let _ = tx.send(line);
                }
            }
        });
        let synced = rx.recv_timeout(Duration::from_secs(300)).ok();
        let first_sync = started.elapsed();
        // Let the allocator settle after the first sync's peak.
        std::thread::sleep(Duration::from_secs(2));
        let rss = status_field(pid, "VmRSS:");
        let hwm = status_field(pid, "VmHWM:");
        let _ = child.kill();
        let _ = child.wait();
        let synced = synced.ok_or("proxyd never synced")?;
        println!(
            "{services} services x {endpoints} endpoints: first sync after {first_sync:.2?} (start, read, apply); \
             VmRSS {} MiB, VmHWM {} MiB",
            rss.unwrap_or(0) / 1024,
            hwm.unwrap_or(0) / 1024
        );
        let took = synced
            .split_whitespace()
            .find(|w| w.starts_with("took_us="))
            .unwrap_or("");
        println!("  first sync: {took}");
        Ok(())
    })();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("daemon-rss: {e}");
            ExitCode::FAILURE
        }
    }
}
