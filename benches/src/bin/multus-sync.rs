//! Multus mode's cost with the real `nft` and `ip`, in network namespaces it
//! makes and removes itself (needs root, `ip`, `nft`, `nsenter`):
//!
//!     cargo run --release -p proxyd-benches --bin multus-sync -- [PODS] [SERVICES]
//!
//! PODS pods (default 50), each a namespace with a `net1` (a veth) on network
//! `blue`; SERVICES services (default 50) on `blue` with 3 endpoints each.
//! Prints the first sync (a table and routes in every pod), then one
//! endpoint change of one service (one transaction in each pod), a few
//! times, and the nft transactions each wrote.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use endpoints_map::Engine;
use informer_glue::multus::{Attachment, NetworkName, PodInfo, PodStore, ServiceNetworks};
use multus_dataplane::backend::Commands;
use multus_dataplane::{MultusProxier, NetnsDir};
use nft_dataplane::SyncKind;
use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, SliceEndpoint};

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn service(i: u32) -> ServiceInfo {
    proxyd_benches::cluster_ip_service("bench", i)
}

fn slice(i: u32, generation: u32) -> EndpointSlice {
    let mut s = EndpointSlice::new("bench", &format!("svc-{i}-1"), &format!("svc-{i}"))
        .expect("a named slice")
        .with_port("p", Protocol::Tcp, 8080);
    for k in 0..3 {
        let addr = IpAddr::V4(Ipv4Addr::from(0xc0a8_0000 + i * 8 + k + generation));
        s = s.with_endpoint(SliceEndpoint::new(addr).on_node("node-2"));
    }
    s
}

fn main() -> ExitCode {
    let arg = |n: usize, default: u32| std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (pods, services) = (arg(1, 50), arg(2, 50));
    let tag = format!("mb{}", std::process::id());
    let dir = std::path::PathBuf::from("/run/netns");
    let names: Vec<String> = (0..pods).map(|i| format!("{tag}_p{i}")).collect();
    let result = (|| -> Result<(), String> {
        let started = Instant::now();
        for (i, n) in names.iter().enumerate() {
            ip(&["netns", "add", n])?;
            ip(&["-n", n, "link", "add", "net1", "type", "veth", "peer", "name", "peer1"])?;
            ip(&["-n", n, "link", "set", "peer1", "up"])?;
            ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("172.31.{}.{}/16", i / 250, i % 250 + 1),
                "dev",
                "net1",
            ])?;
            ip(&["-n", n, "link", "set", "net1", "up"])?;
        }
        println!("{pods} pod namespaces made in {:.2?}", started.elapsed());

        let store: Arc<Mutex<PodStore>> = Arc::default();
        let networks: Arc<Mutex<ServiceNetworks>> = Arc::default();
        let blue = NetworkName::parse("blue", "bench").map_err(|e| e.to_string())?;
        let engine = Engine::new("node-1", IpFamily::V4);
        for i in 0..services {
            engine.update_service(&service(i));
            engine.update_slice(slice(i, 0));
            networks
                .lock()
                .map_err(|e| e.to_string())?
                .by_service
                .insert(ServiceName::new("bench", format!("svc-{i}").as_str()), blue.clone());
        }
        for i in 0..pods {
            let pod = PodInfo {
                namespace: tag.clone(),
                name: format!("p{i}"),
                uid: None,
                node: Some("node-1".into()),
                running: true,
                host_network: false,
                attachments: vec![Attachment {
                    network: blue.clone(),
                    interface: "net1".into(),
                    ips: vec![IpAddr::V4(Ipv4Addr::new(172, 31, (i / 250) as u8, (i % 250 + 1) as u8))],
                }],
            };
            store.lock().map_err(|e| e.to_string())?.set(pod.key(), Some(pod));
        }
        let mut proxier = MultusProxier::new(
            engine,
            store,
            networks,
            Box::new(NetnsDir { dir: dir.clone() }),
            Box::new(Commands {
                no_conntrack: true,
                ..Commands::default()
            }),
        );
        let t = Instant::now();
        let out = proxier.sync(SyncKind::Changes);
        println!(
            "first sync: {} pods programmed, {} transactions, {} route changes, {} failures, {:.2?}",
            out.pods().programmed,
            out.pods().written,
            out.pods().route_changes,
            out.pods().failures.len(),
            t.elapsed()
        );
        if !out.pods().failures.is_empty() {
            return Err(format!("{:?}", out.pods().failures.first()));
        }
        for round in 1..=3 {
            proxier.engine.update_slice(slice(services / 2, round));
            let t = Instant::now();
            let out = proxier.sync(SyncKind::Changes);
            println!(
                "one endpoint change: {} transactions ({} pods), {} route changes, {:.2?}",
                out.pods().written,
                out.pods().programmed,
                out.pods().route_changes,
                t.elapsed()
            );
        }
        let t = Instant::now();
        let out = proxier.sync(SyncKind::Changes);
        println!(
            "nothing changed: {} transactions, {:.2?}",
            out.pods().written,
            t.elapsed()
        );
        Ok(())
    })();
    for n in &names {
        let _ = ip(&["netns", "del", n]);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multus-sync: {e}");
            ExitCode::FAILURE
        }
    }
}
