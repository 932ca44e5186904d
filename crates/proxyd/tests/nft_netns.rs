//! The rendered ruleset applied with the real `nft` in a fresh network
//! namespace, checked by reading it back and by real TCP traffic.
//!
//! Needs root, `ip` and `nft`. Without them the test says why and skips,
//! unless PROXYD_REQUIRE_ROOT_TESTS=1 (set by .ci/run), where that is a
//! failure.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::process::Command;

use proxyd::dataplane::desired::{DesiredState, ServiceTarget};
use proxyd::dataplane::nft::render_full;
use proxyd::dataplane::{Dataplane, DataplaneError, NftCommand};
use slice_model::{IpFamily, Protocol, ServiceName, ServicePortName};

fn can_run() -> Result<(), String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not root (network namespaces and nftables need CAP_NET_ADMIN)".into());
    }
    for tool in ["ip", "nft", "python3"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Err(format!(
                "{tool} is not installed (apt-get install -y iproute2 nftables python3)"
            ));
        }
    }
    Ok(())
}

/// Skips (or fails in CI) when the machine cannot run the test.
fn require() -> bool {
    match can_run() {
        Ok(()) => true,
        Err(why) if std::env::var("PROXYD_REQUIRE_ROOT_TESTS").as_deref() == Ok("1") => {
            panic!("root/nft test required here but cannot run: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            false
        }
    }
}

/// A network namespace deleted on drop, even when the test fails.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Self {
        let name = format!("proxyd-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        run("ip", &["netns", "add", &name]);
        let ns = Self(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.0];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    fn exec(&self, program: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.0, program];
        all.extend_from_slice(args);
        run("ip", &all)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn target(name: &str, vip: &str, port: u16, eps: &[&str]) -> ServiceTarget {
    ServiceTarget {
        name: ServicePortName::new(ServiceName::new("ns", name), "p", Protocol::Tcp),
        vip: vip.parse().unwrap(),
        port,
        endpoints: eps.iter().map(|e| e.parse().unwrap()).collect(),
        has_any_endpoints: !eps.is_empty(),
    }
}

/// Connects `n` times to `vip:port` inside the namespace, where listeners
/// on 10.1.0.1 and 10.1.0.2 (port 8080) answer with their own address;
/// prints one line per answer, or the error of a failed connect.
const CLIENT: &str = r#"
import socket, sys, threading, time
def serve(addr):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 8080)); s.listen(64)
    while True:
        c, _ = s.accept(); c.sendall(addr.encode()); c.close()
for a in ("10.1.0.1", "10.1.0.2"):
    threading.Thread(target=serve, args=(a,), daemon=True).start()
time.sleep(0.2)
vip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    try:
        c = socket.create_connection((vip, port), timeout=2)
        print(c.recv(64).decode()); c.close()
    except OSError as e:
        print("error:", e.__class__.__name__)
"#;

fn connect(ns: &Netns, vip: &str, port: u16, n: u32) -> Vec<String> {
    let out = ns.exec("python3", &["-c", CLIENT, vip, &port.to_string(), &n.to_string()]);
    out.lines().map(str::to_owned).collect()
}

#[test]
fn ruleset_loads_balances_rejects_and_replaces_atomically() {
    if !require() {
        return;
    }
    let ns = Netns::new("nft");
    for addr in ["10.1.0.1/32", "10.1.0.2/32"] {
        ns.ip(&["addr", "add", addr, "dev", "lo"]);
    }
    // Service IPs are routed locally so that output NAT sees them.
    ns.ip(&["route", "add", "local", "10.96.0.0/16", "dev", "lo"]);

    let mut dp = NftCommand {
        netns: Some(ns.0.clone()),
    };
    let mut state = DesiredState {
        family: IpFamily::V4,
        services: vec![
            target("web", "10.96.0.10", 80, &["10.1.0.1:8080", "10.1.0.2:8080"]),
            target("gone", "10.96.0.30", 443, &[]),
        ],
    };
    dp.apply(&render_full(&state)).unwrap();

    // Read back: the slots map holds 16 elements for the service.
    let json = ns.exec("nft", &["-j", "list", "map", "ip", "proxyd", "service-slots"]);
    assert_eq!(json.matches("\"10.96.0.10\"").count(), 16, "16 slots: {json}");

    // Traffic is spread over both endpoints...
    let answers = connect(&ns, "10.96.0.10", 80, 200);
    let one = answers.iter().filter(|a| *a == "10.1.0.1").count();
    let two = answers.iter().filter(|a| *a == "10.1.0.2").count();
    assert_eq!(one + two, 200, "every connection reached an endpoint: {answers:?}");
    assert!(one > 40 && two > 40, "both endpoints get traffic: {one}/{two}");
    // ...and a service without endpoints is refused at once.
    assert_eq!(connect(&ns, "10.96.0.30", 443, 1), ["error: ConnectionRefusedError"]);

    // Replace: one endpoint left.
    state.services[0].endpoints.truncate(1);
    dp.apply(&render_full(&state)).unwrap();
    let answers = connect(&ns, "10.96.0.10", 80, 50);
    assert!(answers.iter().all(|a| a == "10.1.0.1"), "{answers:?}");

    // A rejected transaction changes nothing.
    let err = dp
        .apply("table ip proxyd { chain broken { this is not nft } }")
        .unwrap_err();
    assert!(matches!(err, DataplaneError::Rejected { .. }), "{err}");
    let answers = connect(&ns, "10.96.0.10", 80, 20);
    assert!(
        answers.iter().all(|a| a == "10.1.0.1"),
        "rules intact after a failed apply: {answers:?}"
    );
}

#[test]
fn golden_ruleset_loads_in_the_kernel() {
    if !require() {
        return;
    }
    let ns = Netns::new("golden");
    let golden = include_str!("golden-nft/basic-ipv4.nft");
    let mut dp = NftCommand {
        netns: Some(ns.0.clone()),
    };
    dp.apply(golden).unwrap();
    dp.apply(golden).unwrap();
    let chains = ns.exec("nft", &["list", "chains", "ip"]);
    assert!(chains.contains("svc-ns/dns/udp/53"), "{chains}");
}
