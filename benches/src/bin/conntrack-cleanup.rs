//! Conntrack cleanup at scale: a network namespace whose conntrack table
//! holds one UDP entry DNATed to each of STALE endpoints of one service,
//! plus OTHER entries that must survive; times proxyd's netlink cleanup
//! after a sync that leaves the service one serving endpoint of its own
//! (none of the STALE ones), checks what is left, and, for comparison, the
//! same with one `conntrack -D` run per stale endpoint. Needs root, `ip`
//! and `conntrack` (to create the entries).
//!
//!     cargo build --release -p proxyd-benches
//!     ./target/release/conntrack-cleanup [STALE] [OTHER]     # 1000 5000

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use linux_dataplane::Netns;
use linux_dataplane::{Conntrack, NetlinkConntrack};
use nft_dataplane::stale_flows::{Cleanup, Frontend};
use proxyd_benches::ScratchNetns;
use slice_model::IpFamily;

const VIP: &str = "10.96.0.10";

fn endpoint(n: u32) -> String {
    format!("10.{}.{}.{}", 128 + n / 65_536, (n / 256) % 256, n % 256)
}

/// Inserts entries with one `conntrack -I` each, 64 at a time in
/// parallel; each from its own client port.
fn insert(ns: &str, entries: &[(String, u16, String)]) -> Result<(), String> {
    for (c, chunk) in entries.chunks(64).enumerate() {
        let mut children = Vec::new();
        for (k, (dst, port, nat)) in chunk.iter().enumerate() {
            let sport = 1024 + ((c * 64 + k) % 60_000) as u16;
            let child = Command::new("ip")
                .args(["netns", "exec", ns, "conntrack", "-I", "-p", "udp"])
                .args([
                    "-s",
                    "10.0.0.1",
                    "-d",
                    dst,
                    "--sport",
                    &sport.to_string(),
                    "--dport",
                    &port.to_string(),
                ])
                .args(["-r", nat, "-q", "10.0.0.1", "--reply-port-src", &port.to_string()])
                .args(["--reply-port-dst", &sport.to_string(), "-t", "300"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("conntrack: {e}"))?;
            children.push(child);
        }
        for mut c in children {
            let _ = c.wait();
        }
    }
    Ok(())
}

fn count(ns: &str) -> usize {
    Command::new("ip")
        .args(["netns", "exec", ns, "conntrack", "-L", "-p", "udp"])
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0)
}

fn run(ns: &str, stale: u32, other: u32) -> Result<(), String> {
    let stale_entries: Vec<(String, u16, String)> = (0..stale).map(|n| (VIP.to_owned(), 53, endpoint(n))).collect();
    let other_entries: Vec<(String, u16, String)> = (0..other)
        .map(|n| {
            (
                format!("10.97.{}.{}", n / 256 % 256, n % 256),
                53,
                endpoint(100_000 + n),
            )
        })
        .collect();
    // After the sync the service's one serving endpoint is a new one.
    let vip: IpAddr = VIP.parse().map_err(|e| format!("{VIP}: {e}"))?;
    let serving: BTreeSet<IpAddr> = endpoint(99_999).parse().into_iter().collect();
    let mut cleanup = Cleanup::default();
    cleanup
        .frontends
        .insert(Frontend { addr: vip, port: 53 }, Arc::new(serving));
    for round in 0..3 {
        insert(ns, &stale_entries)?;
        insert(ns, &other_entries)?;
        let before = count(ns);
        let mut ct = NetlinkConntrack::new(Netns::Named(ns.to_owned()));
        let started = Instant::now();
        let (deleted, errors) = ct.delete(IpFamily::V4, &cleanup);
        let took = started.elapsed();
        let after = count(ns);
        println!(
            "round {}: netlink cleanup of {stale} stale endpoints' entries in a table of {before} UDP entries: \
             {took:.1?}, {deleted} deleted, {} errors, {after} entries left",
            round + 1,
            errors.len()
        );
        if let Some(e) = errors.first() {
            println!("  first error: {e}");
        }
        let _ = Command::new("ip")
            .args(["netns", "exec", ns, "conntrack", "-F"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    // The tool, one run per stale endpoint, as the cleanup was done before.
    insert(ns, &stale_entries)?;
    insert(ns, &other_entries)?;
    let started = Instant::now();
    for n in 0..stale {
        let _ = Command::new("ip")
            .args(["netns", "exec", ns, "conntrack", "-D", "-f", "ipv4", "-p", "udp"])
            .args(["--orig-dst", VIP, "--orig-port-dst", "53", "--dst-nat", &endpoint(n)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    println!(
        "the conntrack tool, one run per stale endpoint: {:.1?}, {} entries left",
        started.elapsed(),
        count(ns)
    );
    Ok(())
}

fn main() -> ExitCode {
    let arg = |n: usize, default: u32| std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (stale, other) = (arg(1, 1000), arg(2, 5000));
    let result = ScratchNetns::create("proxyd-ct").and_then(|ns| run(&ns.0, stale, other));
    proxyd_benches::exit("conntrack-cleanup", result)
}
