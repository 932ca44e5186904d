//! `proxyd run --manifests DIR --dry-run-dir OUT` (the real binary): the
//! first sync writes the whole table, an edit to the files is noticed and
//! written as a partial sync, a broken file changes nothing; /healthz,
//! /livez, /metrics and the LoadBalancer's health-check port answer as
//! kube-proxy's do; SIGTERM stops it with exit 0.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

mod common;

use common::{KillOnDrop, free_port};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn wait_for(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(start.elapsed() < WAIT, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// GET over HTTP/1.0: (status, headers and body).
fn get(port: u16, path: &str) -> (u16, String) {
    request(port, "GET", path)
}

fn request(port: u16, method: &str, path: &str) -> (u16, String) {
    let start = Instant::now();
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) => assert!(start.elapsed() < WAIT, "cannot connect to {port}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

#[test]
fn manifests_are_watched_and_each_sync_is_written() {
    let dir = std::env::temp_dir().join(format!("proxyd-run-manifests-{}", std::process::id()));
    let (input, out) = (dir.join("cluster"), dir.join("nft"));
    std::fs::create_dir_all(&input).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    for f in ["node.yaml", "services.yaml", "endpointslices.yaml"] {
        std::fs::copy(example.join(f), input.join(f)).unwrap();
    }
    let (healthz, metrics) = (free_port(), free_port());
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args(["run", "--hostname-override", "node-1", "--min-sync-period", "0"])
            .args(["--ip-family", "ipv4"])
            // --dry-run-dir alone means a dry run.
            .args(["--healthz-bind-address", &format!("127.0.0.1:{healthz}")])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
            .arg("--manifests")
            .arg(&input)
            .arg("--dry-run-dir")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let first = wait_for(&out.join("sync-000001.nft"));
    assert!(first.starts_with("add table ip proxyd\ndelete table ip proxyd\n"));
    assert!(first.contains("10.96.0.10 . tcp . 80 . 0 : 10.244.1.11 . 8080"));

    // Health and metrics, as kube-proxy serves them.
    let (status, text) = get(healthz, "/healthz");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("application/json") && text.contains("\"nodeEligible\": true"),
        "{text}"
    );
    assert_eq!(get(healthz, "/livez").0, 200);
    assert_eq!(get(healthz, "/nope").0, 404);
    let (status, text) = request(healthz, "HEAD", "/healthz");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("nodeEligible"), "HEAD: headers only: {text}");
    for method in ["POST", "DELETE", "PUT"] {
        let (status, text) = request(metrics, method, "/metrics");
        assert_eq!(status, 405, "{method}: {text}");
        assert!(text.to_lowercase().contains("allow: get, head"), "{text}");
    }
    let (status, text) = get(metrics, "/metrics");
    assert_eq!(status, 200);
    for needle in [
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}",
        "kubeproxy_sync_proxy_rules_service_changes_total{ip_family=\"IPv4\"} 9",
        // Failures are counted from zero, before the first one.
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"} 0",
        "proxyd_rejected_objects_total{kind=\"EndpointSlice\",reason=\"missing_service_name\"} 0",
        "proxyd_skipped_fields_total{kind=\"Service\",reason=\"invalid_address\"} 0",
        // No watches with manifests: the family is there, without series.
        "# TYPE proxyd_watch_restarts counter",
        "process_resident_memory_bytes ",
    ] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
    // The Node in the files is tainted for deletion by the autoscaler:
    // /healthz 503, not eligible; /livez still 200.
    let node = std::fs::read_to_string(example.join("node.yaml")).unwrap();
    std::fs::write(
        input.join("node.yaml"),
        format!("{node}spec:\n  taints: [{{key: ToBeDeletedByClusterAutoscaler, effect: NoSchedule}}]\n"),
    )
    .unwrap();
    let start = Instant::now();
    while get(healthz, "/healthz").0 != 503 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the taint in the files is followed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(get(healthz, "/healthz").1.contains("\"nodeEligible\": false"));
    assert_eq!(get(healthz, "/livez").0, 200);
    std::fs::write(input.join("node.yaml"), node).unwrap();
    while get(healthz, "/healthz").0 != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the taint removed in the files"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A dry run opens no port for shop/ingress's healthCheckNodePort (the
    // root e2e tests check what a real run serves there).
    assert!(
        TcpStream::connect(("127.0.0.1", 32000)).is_err(),
        "a dry run listens on a health-check node port"
    );

    // A broken file: reported, nothing changes (no sync is written).
    std::fs::write(
        input.join("broken.yaml"),
        "kind: Service\nmetadata: {name: x}\nspec: {ports: [{port: x}]}\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !out.join("sync-000002.nft").exists(),
        "a broken file must not change the rules"
    );
    std::fs::remove_file(input.join("broken.yaml")).unwrap();

    // A new service and its slice.
    std::fs::write(
        input.join("new.yaml"),
        "kind: Service\nmetadata: {name: new, namespace: shop}\nspec: {clusterIP: 10.96.0.99, ports: [{port: 80}]}\n---\n\
         kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {name: new-1, namespace: shop, labels: {kubernetes.io/service-name: new}}\n\
         addressType: IPv4\nports: [{name: \"\", port: 8080}]\nendpoints: [{addresses: [10.244.9.9]}]\n",
    )
    .unwrap();
    let start = Instant::now();
    let partial = loop {
        let text = wait_for(&out.join("sync-000002.nft"));
        if text.contains("10.244.9.9") || start.elapsed() > WAIT {
            break text;
        }
        // The service alone may come first; its endpoints follow.
        if let Ok(t) = std::fs::read_to_string(out.join("sync-000003.nft"))
            && t.contains("10.244.9.9")
        {
            break t;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        partial.starts_with(&format!(
            "add element ip proxyd {} {{ 1 }}\n",
            nft_dataplane::names::SetId::Canary
        )),
        "{partial}"
    );
    assert!(
        partial.contains("add element ip proxyd service-slots-1 { 10.96.0.99 . tcp . 80 . 0 : 10.244.9.9 . 8080 }")
    );
    assert!(!partial.contains("10.96.0.10"), "nothing else is rewritten: {partial}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < WAIT, "proxyd did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dual_stack_runs_one_table_per_family() {
    let dir = std::env::temp_dir().join(format!("proxyd-run-dual-{}", std::process::id()));
    let out = dir.join("nft");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args([
                "run",
                "--hostname-override",
                "node-1",
                "--ip-families",
                "ipv4,ipv6",
                "--dry-run",
            ])
            .args(["--healthz-bind-address", "", "--metrics-bind-address", ""])
            .arg("--manifests")
            .arg(&example)
            .arg("--dry-run-dir")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let v4 = wait_for(&out.join("ipv4-sync-000001.nft"));
    let v6 = wait_for(&out.join("ipv6-sync-000001.nft"));
    let _ = child.kill();
    let _ = child.wait();
    assert!(v4.starts_with("add table ip proxyd\n") && v4.contains("10.96.0.10 . tcp . 80 . 0 : 10.244.1.11 . 8080"));
    assert!(v6.starts_with("add table ip6 proxyd\n"), "{v6}");
    assert!(
        v6.contains("fd00:96::10 . tcp . 80 . 0 : fd00:10:244:1::11 . 8080"),
        "{v6}"
    );
    assert!(
        !v6.contains("10.96.0.20"),
        "IPv4-only services are not in the IPv6 table"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whoever reads the log may go away (`proxyd run … 2>&1 | head -2`): the
/// writes that fail are dropped, never a panic, and the run goes on.
#[test]
fn a_closed_stderr_is_no_panic() {
    use std::io::BufRead;
    let cluster = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/cluster");
    for _ in 0..3 {
        let mut child = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_proxyd"))
                .args([
                    "run",
                    "--manifests",
                    cluster,
                    "--hostname-override",
                    "node-1",
                    "--dry-run",
                    "-v",
                ])
                .args([
                    "--healthz-bind-address",
                    "",
                    "--metrics-bind-address",
                    "",
                    "--sync-period",
                    "1s",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let stderr = child.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(stderr).lines();
        for _ in 0..2 {
            let _ = lines.next();
        }
        drop(lines);
        // Long enough for several more log lines (periodic syncs).
        std::thread::sleep(Duration::from_millis(2500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "proxyd exited when its stderr closed: {:?}",
            child.try_wait()
        );
        common::run("kill", &["-TERM", &child.id().to_string()]);
        let status = child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

/// A manifest that does not parse at startup stops the start, naming file
/// and field (nothing was ever read, so nothing could be kept); an empty
/// directory is warned about and waited on.
#[test]
fn a_broken_manifest_at_startup_stops_the_start() {
    let dir = std::env::temp_dir().join(format!("proxyd-broken-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args(["run", "--hostname-override", "node-1", "--dry-run"])
            .args([
                "--healthz-bind-address",
                "",
                "--metrics-bind-address",
                "",
                "--manifests",
            ])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Empty: a warning, and it runs.
    let mut child = KillOnDrop(run(&dir));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "an empty directory is waited on");
    common::run("kill", &["-TERM", &child.id().to_string()]);
    let out = child.0.wait_with_output_after_kill();
    assert!(out.contains("no manifest files"), "{out}");

    std::fs::write(
        dir.join("svc.yaml"),
        "kind: Service\nmetadata: {name: x}\nspec: {ports: [{port: x}]}\n",
    )
    .unwrap();
    let started = Instant::now();
    let out = run(&dir).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        stderr.contains("svc.yaml") && stderr.contains("spec.ports[0].port"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was started"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

trait AfterKill {
    fn wait_with_output_after_kill(&mut self) -> String;
}

impl AfterKill for std::process::Child {
    /// Waits for a child that was told to stop; its stderr.
    fn wait_with_output_after_kill(&mut self) -> String {
        let _ = self.wait();
        let mut text = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut text);
        }
        text
    }
}

/// With the `nft` fallback writer, a host without `nft` is told so at
/// startup, once, instead of failing every sync.
#[test]
fn run_without_nft_says_so_and_stops() {
    let empty = std::env::temp_dir().join(format!("proxyd-no-nft-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let cluster = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(["run", "--hostname-override", "node-1", "--healthz-bind-address", ""])
        // The default writes over netlink and needs no `nft`: the fallback
        // writer does.
        .args(["--metrics-bind-address", "", "--nft-writer", "nft"])
        .arg("--manifests")
        .arg(&cluster)
        .env("PATH", &empty)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nft: not found; install nftables"), "{err}");
    assert!(err.contains("nothing was started"), "{err}");
    let _ = std::fs::remove_dir_all(&empty);
}

/// kube-proxy's process flags: `--proxy-mode` other than nftables is
/// refused; a metrics port that is taken is said and left out unless
/// `--bind-address-hard-fail`, which stops the start; `--oom-score-adj` is
/// the process's.
#[test]
fn kube_proxys_process_flags_work() {
    let dir = std::env::temp_dir().join(format!("proxyd-kp-flags-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(["run", "--proxy-mode", "ipvs", "--dry-run"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("nftables mode"), "{said}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let start = |extra: &[&str]| {
        common::dry_run_on_the_example(&dir, port)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Raised, which needs no privilege (lowering it, as kube-proxy's -999
    // does, needs CAP_SYS_RESOURCE: without it, a warning).
    let mut child = KillOnDrop(start(&["--oom-score-adj", "500"]));
    wait_for(&dir.join("sync-000001.nft"));
    let adj = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", child.id())).unwrap();
    assert_eq!(adj.trim(), "500");
    common::run("kill", &["-TERM", &child.id().to_string()]);
    let log = child.0.wait_with_output_after_kill();
    assert!(
        log.contains("cannot listen") && log.contains("running without it"),
        "{log}"
    );

    let out = start(&["--bind-address-hard-fail"]).wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("--metrics-bind-address 127.0.0.1:{port}: cannot listen")),
        "{said}"
    );
    drop(taken);
    let _ = std::fs::remove_dir_all(&dir);
}
