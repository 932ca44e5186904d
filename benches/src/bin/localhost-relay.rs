//! The localhost node port relay against connecting to the endpoint
//! directly, on this host's loopback (no root needed): bulk throughput of
//! one connection, connections per second (each reads one byte and ends),
//! and the memory each open connection costs the relay.
//!
//! `cargo build --release -p proxyd-benches --bin localhost-relay &&
//! ./target/release/localhost-relay`

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU16;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use endpoints_map::Engine;
use linux_dataplane::Netns;
use nft_dataplane::DataplaneConfig;
use node_proxy::localhost_relay::{LocalhostRelay, RelayMetrics};
use slice_model::{
    EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
struct Args {
    /// Bytes sent through one connection for the throughput figure.
    #[arg(long, default_value_t = 2 << 30)]
    bytes: u64,
    /// How long each connections-per-second run lasts, in seconds.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Clients connecting at once in the connections-per-second runs.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Connections held open for the memory figure (each relayed one uses
    /// four descriptors in this process while idle).
    #[arg(long, default_value_t = 4000)]
    open: usize,
}

/// The endpoint: what each connection asks for, by its first byte:
/// `s` sink (read to the end, answer `k`), `h` hello (answer one byte and
/// close), `w` wait (hold the connection until the client closes).
async fn serve(listener: TcpListener) {
    loop {
        let Ok((mut c, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut kind = [0u8; 1];
            if c.read_exact(&mut kind).await.is_err() {
                return;
            }
            match kind[0] {
                b's' => {
                    let mut buf = vec![0u8; 1 << 16];
                    while matches!(c.read(&mut buf).await, Ok(n) if n > 0) {}
                    let _ = c.write_all(b"k").await;
                }
                b'h' => {
                    let _ = c.write_all(b"k").await;
                }
                _ => {
                    let mut buf = [0u8; 1];
                    let _ = c.read(&mut buf).await;
                }
            }
        });
    }
}

/// GB/s through one connection to `to`.
async fn throughput(to: SocketAddr, bytes: u64) -> f64 {
    let mut c = TcpStream::connect(to).await.expect("connect");
    c.write_all(b"s").await.expect("write");
    let chunk = vec![7u8; 1 << 16];
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < bytes {
        c.write_all(&chunk).await.expect("write");
        sent += chunk.len() as u64;
    }
    c.shutdown().await.expect("shutdown");
    let mut k = [0u8; 1];
    c.read_exact(&mut k).await.expect("the sink's answer");
    sent as f64 / started.elapsed().as_secs_f64() / 1e9
}

/// Connections per second to `to` from `clients` clients for `seconds`.
async fn connections_per_second(to: SocketAddr, clients: usize, seconds: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let mut c = TcpStream::connect(to).await.expect("connect");
                c.write_all(b"h").await.expect("write");
                let mut k = [0u8; 1];
                c.read_exact(&mut k).await.expect("hello");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    done.load(Ordering::Relaxed) as f64 / seconds as f64
}

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

/// KiB of memory `n` connections to `to`, held open, add to this process.
async fn memory_per_connection(to: SocketAddr, n: usize) -> f64 {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib();
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = TcpStream::connect(to).await.expect("connect");
        c.write_all(b"w").await.expect("write");
        held.push(c);
    }
    // Every connection relayed and accepted.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib();
    drop(held);
    tokio::time::sleep(Duration::from_millis(500)).await;
    (after.saturating_sub(before)) as f64 / n as f64
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let endpoint_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let (endpoint, node_port) = runtime.block_on(async {
        let listener = TcpListener::bind((endpoint_ip, 0)).await.expect("the endpoint");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(serve(listener));
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        (addr, free.local_addr().expect("its port").port())
    });
    let mut engine = Engine::new("node-1", IpFamily::V4);
    let mut service = ServiceInfo::new(ServiceName::new("bench", "relay"));
    service.service_type = ServiceType::NodePort;
    service.cluster_ips = vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))];
    service.ports = vec![ServicePort {
        name: "p".into(),
        protocol: Protocol::Tcp,
        port: NonZeroU16::MIN,
        node_port: NonZeroU16::new(node_port),
        app_protocol: None,
    }];
    engine.update_service(&service);
    engine.update_slice(
        EndpointSlice::new("bench", "relay-1", "relay")
            .expect("a slice")
            .with_port("p", Protocol::Tcp, endpoint.port())
            .with_endpoint(SliceEndpoint::new(endpoint_ip)),
    );
    let update = engine.update();
    let metrics = RelayMetrics::default();
    let (relay, listeners) = LocalhostRelay::start(IpFamily::V4, Netns::Current, metrics.clone());
    let listeners = runtime.spawn(listeners);
    let config = DataplaneConfig::new(IpFamily::V4);
    let planned = nft_dataplane::Planned {
        full: false,
        services: update
            .changed
            .iter()
            .map(|name| {
                let targets = nft_dataplane::desired::plan_service(name, &engine.services, &engine.endpoints, &config);
                (
                    name.clone(),
                    targets.into_iter().filter(LocalhostRelay::reads).collect(),
                )
            })
            .collect(),
    };
    relay.follow(planned);
    assert!(relay.settled(), "the relay's task runs");
    assert_eq!(metrics.listeners.get(), 1, "the relay listens");
    let relayed = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), node_port);

    runtime.block_on(async {
        for (what, to) in [("direct", endpoint), ("relayed", relayed)] {
            let gbps = throughput(to, args.bytes).await;
            println!("{what}: one connection, {} MiB: {gbps:.2} GB/s", args.bytes >> 20);
        }
        for (what, to) in [("direct", endpoint), ("relayed", relayed)] {
            let cps = connections_per_second(to, args.clients, args.seconds).await;
            println!(
                "{what}: {} clients for {} s: {cps:.0} connections/s",
                args.clients, args.seconds
            );
        }
        let direct = memory_per_connection(endpoint, args.open).await;
        let through = memory_per_connection(relayed, args.open).await;
        println!(
            "{} open connections: {direct:.1} KiB each direct, {through:.1} KiB each relayed: the relay's share {:.1} KiB per connection",
            args.open,
            through - direct
        );
    });
    drop(relay);
    let _ = runtime.block_on(listeners);
}
