//! Dataplane load time with the real `nft`, in a network namespace it makes
//! and removes itself (needs root, `ip` and `nft`):
//!
//!     cargo run --release -p proxyd-benches --bin nft-sync -- [SERVICES] [ENDPOINTS]
//!
//! Prints the render and apply time of a full sync of SERVICES services
//! (default 10,000) of ENDPOINTS endpoints (default 2), and of one changed
//! service applied by re-rendering everything (what a sync costs until
//! partial syncs exist).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, ExitCode};
use std::time::Instant;

use proxyd::dataplane::desired::{DesiredState, ServiceTarget};
use proxyd::dataplane::nft::render_full;
use proxyd::dataplane::{Dataplane, NftCommand};
use slice_model::{IpFamily, Protocol, ServiceName, ServicePortName};

fn target(i: u32, endpoints: u32, generation: u32) -> ServiceTarget {
    ServiceTarget {
        name: ServicePortName::new(ServiceName::new("ns", format!("svc-{i}")), "p", Protocol::Tcp),
        vip: IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + i)),
        port: 80,
        endpoints: (0..endpoints)
            .map(|k| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i * 64 + k + generation)), 8080))
            .collect(),
        has_any_endpoints: true,
    }
}

fn main() -> ExitCode {
    let arg = |n: usize, default: u32| std::env::args().nth(n).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (services, endpoints) = (arg(1, 10_000), arg(2, 2));
    let ns = format!("proxyd-bench-{}", std::process::id());
    if !Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("nft-sync: cannot create a network namespace (needs root and iproute2)");
        return ExitCode::FAILURE;
    }
    let mut dp = NftCommand {
        netns: Some(ns.clone()),
    };
    let mut state = DesiredState {
        family: IpFamily::V4,
        services: (0..services).map(|i| target(i, endpoints, 0)).collect(),
    };
    let result = (|| -> Result<(), String> {
        let t = Instant::now();
        let text = render_full(&state);
        let render = t.elapsed();
        let t = Instant::now();
        dp.apply(&text).map_err(|e| e.to_string())?;
        let apply = t.elapsed();
        println!(
            "full sync, {services} services x {endpoints} endpoints: render {render:.2?}, apply {apply:.2?}, script {} KiB",
            text.len() / 1024
        );
        state.services[services as usize / 2] = target(services / 2, endpoints, 1);
        let t = Instant::now();
        let text = render_full(&state);
        dp.apply(&text).map_err(|e| e.to_string())?;
        println!("one changed service, full re-render and replace: {:.2?}", t.elapsed());
        Ok(())
    })();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nft-sync: {e}");
            ExitCode::FAILURE
        }
    }
}
