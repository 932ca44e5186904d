//! `deploy/monitoring/`: the alerting rules parse and fire as their tests
//! say (the real `promtool`), and every metric the rules and the Grafana
//! dashboard use is one proxyd exports (scraped from the real binary, in
//! node and in multus mode).

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, free_port};

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/monitoring")
}

#[test]
#[ignore = "needs promtool (Debian: apt-get install prometheus)"]
fn the_rules_parse_and_fire_as_their_tests_say() {
    for args in [
        &["check", "rules", "proxyd-rules.yaml"][..],
        &["test", "rules", "proxyd-rules.test.yaml"][..],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(monitoring())
            .output()
            .unwrap_or_else(|e| panic!("cannot run promtool (apt-get install prometheus): {e}"));
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The metric names in a PromQL expression: the identifiers of proxyd's
/// and kube-proxy's families (functions, labels and keywords are not).
fn metric_names(expr: &str, out: &mut BTreeSet<String>) {
    let mut word = String::new();
    let mut in_string = false;
    for ch in expr.chars().chain([' ']) {
        if ch == '"' {
            in_string = !in_string;
        }
        if !in_string && (ch.is_ascii_alphanumeric() || ch == '_' || ch == ':') {
            word.push(ch);
            continue;
        }
        if ["kubeproxy_", "proxyd_", "process_"]
            .iter()
            .any(|p| word.starts_with(p))
        {
            out.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
}

/// Every expression of the rules and the dashboard.
fn expressions() -> Vec<String> {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(monitoring().join("proxyd-rules.yaml")).unwrap()).unwrap();
    let mut exprs: Vec<String> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring().join("proxyd-dashboard.json")).unwrap()).unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    exprs.extend(
        dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["definition"].as_str().map(str::to_owned)),
    );
    exprs
}

/// `/metrics` of a dry-run proxyd with these extra flags.
fn scrape(tag: &str, extra: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!("proxyd-monitoring-{tag}-{}", std::process::id()));
    let port = free_port();
    let _child = KillOnDrop(
        common::dry_run_on_the_example(&dir, port)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    loop {
        use std::io::{Read, Write};
        if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut text = String::new();
            let _ = c.read_to_string(&mut text);
            if text.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds") {
                let _ = std::fs::remove_dir_all(&dir);
                return text;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no /metrics from proxyd {extra:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the exposition has `name`: a sample of it, or its family (a
/// family without series yet, such as a watch's with manifests).
fn exported(text: &str, name: &str) -> bool {
    let sample = |l: &str| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' ']));
    let family = |l: &str| {
        l.strip_prefix("# TYPE ")
            .and_then(|rest| rest.split(' ').next())
            .is_some_and(|base| {
                ["", "_total", "_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| format!("{base}{suffix}") == name)
            })
    };
    text.lines().any(|l| sample(l) || family(l))
}

#[test]
fn every_metric_the_rules_and_the_dashboard_use_is_exported() {
    let mut names = BTreeSet::new();
    for e in expressions() {
        metric_names(&e, &mut names);
    }
    assert!(names.len() >= 8, "{names:?}");
    let node = scrape("node", &[]);
    let multus_dir = std::env::temp_dir().join(format!("proxyd-monitoring-netns-{}", std::process::id()));
    std::fs::create_dir_all(&multus_dir).unwrap();
    let multus = scrape("multus", &["--multus", "--pod-netns-dir", multus_dir.to_str().unwrap()]);
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !exported(&node, n) && !exported(&multus, n))
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}\n{node}");
    // The check itself can fail.
    assert!(!exported(&node, "kubeproxy_no_such_metric_total"));
    let mut found = BTreeSet::new();
    metric_names(
        r#"rate(kubeproxy_a_total{code="proxyd_not_a_name"}[5m]) / proxyd_b"#,
        &mut found,
    );
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["kubeproxy_a_total", "proxyd_b"]);
    let _ = std::fs::remove_dir_all(&multus_dir);
}
