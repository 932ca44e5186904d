//! A ClientIP-affinity service of many endpoints, written over netlink into
//! a network namespace the harness makes and removes (needs root, `ip` and
//! `nft`):
//!
//!     cargo run --release -p proxyd-benches --bin sticky-sync -- [ENDPOINTS]...
//!
//! For each ENDPOINTS (default 1,000 and 10,000): one sticky service of
//! that many endpoints beside 100 ordinary ones; prints the first sync, one
//! endpoint removed, one added, the longest transaction of each, and the
//! table's size as the kernel holds it (chains, rules, sets, elements:
//! `nft list table`, counted).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use endpoints_map::Engine;
use linux_dataplane::{Netns, WatchedNft};
use nft_dataplane::{DataplaneConfig, NftSyncer, SyncKind, SyncReport};
use slice_model::{EndpointSlice, IpFamily, Protocol, SliceEndpoint};

/// The ordinary services beside it.
const OTHERS: u32 = 100;

fn endpoints_slice(endpoints: &[u32]) -> EndpointSlice {
    let mut s = EndpointSlice::new("ns", "sticky-1", "sticky")
        .expect("a named slice")
        .with_port("p", Protocol::Tcp, 8080);
    for k in endpoints {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + k));
        s = s.with_endpoint(SliceEndpoint::new(ip).on_node("node-2"));
    }
    s
}

fn line(what: &str, took: Duration, r: &SyncReport) -> String {
    format!(
        "{what}: {took:.2?} ({} transactions, longest {:.2?}, {} elements)",
        r.transactions, r.longest_apply, r.elements
    )
}

/// Chains, rules, sets and elements of `nft list table ip proxyd`.
fn table_size(ns: &str) -> Result<String, String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "table", "ip", "proxyd"])
        .output()
        .map_err(|e| format!("nft: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |prefix: &str| text.lines().filter(|l| l.trim_start().starts_with(prefix)).count();
    let chains = count("chain ");
    let sets = count("set ") + count("map ");
    // Every line inside a chain that is not its header, a brace or a hook
    // declaration is a rule.
    let mut rules = 0;
    let mut in_chain = false;
    for l in text.lines().map(str::trim) {
        if l.starts_with("chain ") {
            in_chain = true;
        } else if l == "}" {
            in_chain = false;
        } else if in_chain && !l.is_empty() && !l.starts_with("type ") {
            rules += 1;
        }
    }
    Ok(format!(
        "{chains} chains, {rules} rules, {sets} sets and maps, {} bytes listed",
        text.len()
    ))
}

fn run(n: u32) -> Result<(), String> {
    let scratch = proxyd_benches::ScratchNetns::create("proxyd-sticky")?;
    let mut engine = Engine::new("node-1", IpFamily::V4);
    for i in 0..OTHERS {
        engine.update_service(&proxyd_benches::cluster_ip_service("ns", i));
    }
    let mut sticky = proxyd_benches::cluster_ip_service("ns", OTHERS);
    sticky.name = slice_model::ServiceName::new("ns", "sticky");
    sticky.session_affinity = Some(Duration::from_secs(10_800));
    engine.update_service(&sticky);
    let all: Vec<u32> = (0..n).collect();
    engine.update_slice(endpoints_slice(&all));
    let dataplane = WatchedNft::new(Netns::Named(scratch.0.clone()));
    let mut syncer = NftSyncer::new(DataplaneConfig::new(IpFamily::V4), dataplane);
    let mut sync = |engine: &mut Engine| -> Result<(Duration, SyncReport), String> {
        let changed: BTreeSet<_> = engine.update().changed;
        let started = Instant::now();
        let r = syncer
            .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
            .map_err(|e| e.to_string())?;
        Ok((started.elapsed(), r))
    };
    println!("{n} sticky endpoints beside {OTHERS} services:");
    let (took, r) = sync(&mut engine)?;
    println!("  {}", line("first sync", took, &r));
    println!("  table: {}", table_size(&scratch.0)?);
    let fewer: Vec<u32> = (1..n).collect();
    engine.update_slice(endpoints_slice(&fewer));
    let (took, r) = sync(&mut engine)?;
    println!("  {}", line("one endpoint removed", took, &r));
    engine.update_slice(endpoints_slice(&all));
    let (took, r) = sync(&mut engine)?;
    println!("  {}", line("one endpoint added", took, &r));
    Ok(())
}

fn main() -> ExitCode {
    let sizes: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000] } else { sizes };
    let result = sizes.into_iter().try_for_each(run);
    proxyd_benches::exit("sticky-sync", result)
}
