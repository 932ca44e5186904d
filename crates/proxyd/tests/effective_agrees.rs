//! `run`, `render` and `explain` decide "a flag beats what the cluster
//! says" the same way: given the same Node (zone, pod range, primary
//! address), the same ServiceCIDR and the same flags, `run`'s first sync
//! (written to a dry-run directory) is `render`'s ruleset, and every rule
//! `explain` shows for a service is one of them.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels: {topology.kubernetes.io/zone: zone-b}
spec:
  podCIDR: 10.244.1.0/24
  podCIDRs: [10.244.1.0/24]
status:
  addresses:
  - {type: Hostname, address: node-1}
  - {type: InternalIP, address: 192.0.2.10}
";

/// The example cluster with this test's Node.
fn cluster(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("proxyd-effective-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    for f in ["services.yaml", "endpointslices.yaml", "servicecidr.yaml"] {
        std::fs::copy(example.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("node.yaml"), NODE).unwrap();
    dir
}

/// Flags whose values the Node completes, and one that beats it.
fn flags(manifests: &Path) -> Vec<String> {
    [
        "--manifests",
        &manifests.display().to_string(),
        "--hostname-override",
        "node-1",
        "--ip-family",
        "ipv4",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--detect-local-mode",
        "NodeCIDR",
        "--nodeport-addresses",
        "primary",
        "--service-cidr",
        "10.96.0.0/12",
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

fn proxyd(command: &str, args: &[String], extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .arg(command)
        .args(args)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "proxyd {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `run`'s first sync, written to a dry-run directory.
fn run_first_sync(args: &[String], tag: &str) -> String {
    let out = std::env::temp_dir().join(format!("proxyd-effective-run-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .arg("run")
        .args(args)
        .args([
            "--healthz-bind-address",
            "",
            "--metrics-bind-address",
            "",
            "--dry-run-dir",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = out.join("sync-000001.nft");
    let started = Instant::now();
    while !first.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "run wrote no sync");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Written whole before it is renamed into place, or read after the
    // process is gone.
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&first).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    text
}

#[test]
fn run_render_and_explain_take_the_same_settings_from_node_and_flags() {
    let manifests = cluster("same");
    let args = flags(&manifests);

    let rendered = proxyd("render", &args, &["--nft-only"]);
    // The Node's facts are in use: its pod range decides what is local,
    // its primary address where node ports answer.
    assert!(rendered.contains("10.244.1.0/24"), "the Node's pod range:\n{rendered}");
    assert!(
        rendered.contains("192.0.2.10"),
        "the Node's primary address:\n{rendered}"
    );
    assert!(
        rendered.contains("10.96.0.0/12"),
        "--service-cidr beats the ServiceCIDR:\n{rendered}"
    );

    // And they change the rules: without the Node, or without the flag
    // (the ServiceCIDR object's range then), the ruleset differs.
    let no_node = cluster("no-node");
    std::fs::remove_file(no_node.join("node.yaml")).unwrap();
    assert_ne!(
        proxyd("render", &flags(&no_node), &["--nft-only"]),
        rendered,
        "the Node's facts are used"
    );
    let _ = std::fs::remove_dir_all(&no_node);
    let flag_at = args.iter().position(|a| a == "--service-cidr").unwrap();
    let mut without_flag = args.clone();
    without_flag.drain(flag_at..flag_at + 2);
    assert_ne!(
        proxyd("render", &without_flag, &["--nft-only"]),
        rendered,
        "--service-cidr is used"
    );

    assert_eq!(
        run_first_sync(&args, "same"),
        rendered,
        "run's first sync and render's ruleset"
    );

    let explained = proxyd("explain", &args, &["shop/ingress"]);
    assert!(explained.contains("zone zone-b"), "the Node's zone:\n{explained}");
    // A chain's rules are the lines indented under its `chain NAME:`.
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut chain: Option<(String, usize)> = None;
    let mut rules = 0;
    for line in explained.lines() {
        if let Some((name, depth)) = &chain {
            if indent(line) > *depth {
                let rule = format!("add rule ip proxyd {name} {}\n", line.trim());
                assert!(rendered.contains(&rule), "explain's rule is not render's: {rule}");
                rules += 1;
                continue;
            }
            chain = None;
        }
        if let Some(name) = line.trim().strip_prefix("chain ").and_then(|l| l.strip_suffix(':')) {
            chain = Some((name.to_owned(), indent(line)));
        }
    }
    assert!(
        rules >= 4,
        "explain showed the service's chains ({rules} rules):\n{explained}"
    );
    let _ = std::fs::remove_dir_all(&manifests);
}
