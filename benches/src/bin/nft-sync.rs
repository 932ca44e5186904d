//! Dataplane sync time with the real `nft`, in a network namespace it makes
//! and removes itself (needs root, `ip` and `nft`):
//!
//!     cargo run --release -p proxyd-benches --bin nft-sync -- [SERVICES] [ENDPOINTS]
//!
//! Prints, for SERVICES services (default 10,000) of ENDPOINTS endpoints
//! (default 2): the full sync (render, apply, transaction size), then
//! partial syncs of one service whose endpoints changed and of one service
//! added, each a few times. With `NFT_SYNC_DUMP=FILE` it also writes the
//! full sync's nft text to FILE (to time `nft -f FILE` on its own). With
//! `NFT_SYNC_NETLINK=1` it writes over netlink, as `proxyd run` does, not
//! through `nft`; with `NFT_SYNC_REFUSE=I` the kernel refuses service
//! `svc-I`'s rules (the writer's test hook), to time how a sync finds it.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;

use endpoints_map::Engine;
use linux_dataplane::NftCommand;
use nft_dataplane::{DataplaneConfig, NftSyncer, Recording, SyncKind, SyncReport};
use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceInfo, SliceEndpoint};

fn service(i: u32) -> ServiceInfo {
    proxyd_benches::cluster_ip_service("ns", i)
}

fn slice(i: u32, endpoints: u32, generation: u32) -> EndpointSlice {
    let mut s = EndpointSlice::new("ns", &format!("svc-{i}-1"), &format!("svc-{i}"))
        .expect("a named slice")
        .with_port("p", Protocol::Tcp, 8080);
    for k in 0..endpoints {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i * 64 + k + generation));
        s = s.with_endpoint(SliceEndpoint::new(ip).on_node("node-2"));
    }
    s
}

fn print(what: &str, r: &SyncReport) {
    use std::io::Write;
    // A closed stdout (e.g. piped into `head`) ends the output, not the run.
    let _ = writeln!(
        std::io::stdout(),
        "{what}: {} sync, {} services written, {} elements, {} bytes, render {:.2?}, apply {:.2?}, total {:.2?}, \
         {} transactions refused, {} services refused, checks {:.2?}",
        if r.full { "full" } else { "partial" },
        r.services_written,
        r.elements,
        r.script_bytes,
        r.render,
        r.apply,
        r.render + r.apply,
        r.refused_transactions,
        r.refused_services,
        r.checking
    );
}

fn main() -> ExitCode {
    let arg = |n: usize, default: u32| std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (services, endpoints) = (arg(1, 10_000), arg(2, 2));
    let result = proxyd_benches::ScratchNetns::create("proxyd-bench").and_then(|scratch| {
        let ns = scratch.0.clone();
        let mut engine = Engine::new("node-1", IpFamily::V4);
        for i in 0..services {
            engine.update_service(&service(i));
            engine.update_slice(slice(i, endpoints, 0));
        }
        if let Some(path) = std::env::var_os("NFT_SYNC_DUMP") {
            // The full transaction's text, for timing nft on its own.
            let mut rec = NftSyncer::new(DataplaneConfig::new(IpFamily::V4), Recording::default());
            engine.update();
            rec.sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
                .map_err(|e| e.to_string())?;
            let text: String = rec.dataplane().applied.iter().map(|t| t.text()).collect();
            std::fs::write(&path, text).map_err(|e| e.to_string())?;
        }
        let netns = linux_dataplane::Netns::Named(ns.clone());
        let dp: Box<dyn nft_dataplane::Dataplane> = if std::env::var_os("NFT_SYNC_NETLINK").is_some() {
            Box::new(linux_dataplane::WatchedNft::new(netns))
        } else {
            Box::new(NftCommand { netns })
        };
        let config = DataplaneConfig {
            refuse_for_tests: std::env::var("NFT_SYNC_REFUSE")
                .ok()
                .map(|i| slice_model::ServiceName::new("ns", format!("svc-{i}").as_str())),
            ..DataplaneConfig::new(IpFamily::V4)
        };
        let mut syncer = NftSyncer::new(config, dp);
        let mut sync = |engine: &mut Engine| {
            let changed = engine.update().changed;
            syncer
                .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
                .map_err(|e| e.to_string())
        };
        print(
            &format!("{services} services x {endpoints} endpoints"),
            &sync(&mut engine)?,
        );
        for round in 1..=3 {
            let i = services / 2 + round;
            engine.update_slice(slice(i, endpoints, round));
            print("one service's endpoints changed", &sync(&mut engine)?);
            engine.update_service(&service(services + round));
            engine.update_slice(slice(services + round, endpoints, 0));
            print("one service added", &sync(&mut engine)?);
        }
        let r = syncer
            .sync(
                &engine.services,
                &engine.endpoints,
                &BTreeSet::new(),
                SyncKind::Periodic,
            )
            .map_err(|e| e.to_string())?;
        print("periodic re-assertion, nothing changed", &r);
        Ok(())
    });
    proxyd_benches::exit("nft-sync", result)
}
