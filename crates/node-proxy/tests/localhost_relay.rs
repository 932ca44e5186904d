//! The localhost node port relay over real sockets on this namespace's
//! loopback: endpoints on 127.0.0.2 onwards (all of 127.0.0.0/8 is local),
//! the relay on 127.0.0.1 or ::1 at a free port standing for the node port.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroU16;
use std::time::Duration;

use endpoints_map::Engine;
use linux_dataplane::Netns;
use nft_dataplane::desired::plan_service;
use nft_dataplane::{DataplaneConfig, Planned};
use node_proxy::localhost_relay::{LocalhostRelay, RelayMetrics};
use slice_model::{
    EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint, TrafficPolicy,
};

/// Servers at `addrs` (one port for all) answering each connection with
/// their own address, then echoing what they read.
fn servers(addrs: &[&str]) -> u16 {
    let first = TcpListener::bind((addrs[0], 0)).unwrap();
    let port = first.local_addr().unwrap().port();
    let mut all = vec![first];
    for a in &addrs[1..] {
        all.push(TcpListener::bind((*a, port)).unwrap());
    }
    for l in all {
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let me = c.local_addr().unwrap().ip().to_string();
                    let _ = c.write_all(format!("{me}\n").as_bytes());
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }
    port
}

/// A port nothing listens on now.
fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port()
}

struct Cluster {
    engine: Engine,
    relay: LocalhostRelay,
    metrics: RelayMetrics,
    config: DataplaneConfig,
    family: IpFamily,
    _runtime: tokio::runtime::Runtime,
}

impl Cluster {
    fn new(family: IpFamily) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let metrics = RelayMetrics::default();
        Self {
            engine: Engine::new("node-1", family),
            relay: {
                let (relay, listeners) = LocalhostRelay::start(family, Netns::Current, metrics.clone());
                runtime.spawn(listeners);
                relay
            },
            metrics,
            config: DataplaneConfig::new(family),
            family,
            _runtime: runtime,
        }
    }

    fn service(&mut self, name: &str, node_port: u16, edit: impl FnOnce(&mut ServiceInfo)) {
        let mut s = ServiceInfo::new(ServiceName::new("ns", name));
        s.service_type = ServiceType::NodePort;
        s.cluster_ips = vec![match self.family {
            IpFamily::V4 => "10.96.0.10".parse().unwrap(),
            IpFamily::V6 => "fd00::10".parse().unwrap(),
        }];
        s.ports = vec![ServicePort {
            name: "p".into(),
            protocol: Protocol::Tcp,
            port: NonZeroU16::new(80).unwrap(),
            node_port: NonZeroU16::new(node_port),
            app_protocol: None,
        }];
        edit(&mut s);
        self.engine.update_service(&s);
    }

    /// `name`'s endpoints: (address, node).
    fn endpoints(&mut self, name: &str, port: u16, eps: &[(&str, &str)]) {
        let mut s = EndpointSlice::new("ns", &format!("{name}-1"), name)
            .unwrap()
            .with_port("p", Protocol::Tcp, port);
        for (ip, node) in eps {
            s = s.with_endpoint(SliceEndpoint::new(ip.parse().unwrap()).on_node(node));
        }
        self.engine.update_slice(s);
    }

    /// Applies the changes and plans the changed services, as a sync
    /// does, and has the relay follow the plans.
    fn sync(&mut self) {
        let update = self.engine.update();
        let (services, endpoints) = (&self.engine.services, &self.engine.endpoints);
        let planned = Planned {
            full: false,
            services: update
                .changed
                .iter()
                .map(|name| {
                    let targets = plan_service(name, services, endpoints, &self.config);
                    (
                        name.clone(),
                        targets.into_iter().filter(LocalhostRelay::reads).collect(),
                    )
                })
                .collect(),
        };
        self.relay.follow(planned);
        assert!(self.relay.settled(), "the relay's task runs");
    }
}

/// Connects to `ip:port`, reads the endpoint's first line, echoes `hello`
/// through it; the endpoint's address.
fn reach(ip: &str, port: u16) -> std::io::Result<String> {
    let mut c = TcpStream::connect_timeout(&SocketAddr::new(ip.parse().unwrap(), port), Duration::from_secs(2))?;
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while c.read(&mut byte)? == 1 && byte[0] != b'\n' {
        got.push(byte[0]);
    }
    c.write_all(b"hello")?;
    let mut echo = [0u8; 5];
    c.read_exact(&mut echo)?;
    assert_eq!(&echo, b"hello", "bytes pass both ways");
    Ok(String::from_utf8(got).unwrap())
}

fn tally(ip: &str, port: u16, n: usize) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        *out.entry(reach(ip, port).unwrap()).or_default() += 1;
    }
    out
}

#[test]
fn connections_reach_every_endpoint_follow_changes_and_stop_when_the_service_goes() {
    let mut c = Cluster::new(IpFamily::V4);
    let target = servers(&["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
    let node_port = free_port("127.0.0.1");
    c.service("web", node_port, |_| {});
    c.endpoints(
        "web",
        target,
        &[
            ("127.0.0.2", "node-2"),
            ("127.0.0.3", "node-2"),
            ("127.0.0.4", "node-3"),
        ],
    );
    c.sync();
    assert_eq!(c.metrics.listeners.get(), 1);
    let counts = tally("127.0.0.1", node_port, 300);
    assert_eq!(counts.len(), 3, "every endpoint is used: {counts:?}");
    // A chi-square test over three endpoints at p = 0.001 (13.82).
    let stat: f64 = counts.values().map(|&o| (o as f64 - 100.0).powi(2) / 100.0).sum();
    assert!(stat < 13.82, "an even split: {counts:?} (chi-square {stat:.2})");

    // A connection open while the endpoints change keeps its endpoint;
    // new ones go to the new endpoints.
    let mut open = TcpStream::connect(("127.0.0.1", node_port)).unwrap();
    let mut first = [0u8; 10];
    let _ = open.read(&mut first).unwrap();
    c.endpoints("web", target, &[("127.0.0.4", "node-3")]);
    c.sync();
    assert_eq!(
        tally("127.0.0.1", node_port, 20),
        BTreeMap::from([("127.0.0.4".into(), 20)])
    );
    open.write_all(b"still").unwrap();
    let mut echo = [0u8; 5];
    open.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"still");

    // The service goes: the port closes, and so does the open connection.
    c.engine.remove_service(&ServiceName::new("ns", "web"));
    c.sync();
    assert_eq!(c.metrics.listeners.get(), 0);
    // Closed by the listener's task, on the runtime: at once, but not
    // within this call.
    let closing = std::time::Instant::now();
    while reach("127.0.0.1", node_port).is_ok() {
        assert!(closing.elapsed() < Duration::from_secs(2), "the port still answers");
        std::thread::sleep(Duration::from_millis(5));
    }
    open.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut rest = [0u8; 1];
    assert!(
        matches!(open.read(&mut rest), Ok(0) | Err(_)),
        "the open connection is closed, not left hanging"
    );
}

#[test]
fn affinity_pins_and_external_local_uses_only_this_nodes_endpoints() {
    let mut c = Cluster::new(IpFamily::V4);
    let target = servers(&["127.0.0.5", "127.0.0.6", "127.0.0.7"]);
    let (sticky, local, nowhere, udp) = (
        free_port("127.0.0.1"),
        free_port("127.0.0.1"),
        free_port("127.0.0.1"),
        free_port("127.0.0.1"),
    );
    let eps = [
        ("127.0.0.5", "node-1"),
        ("127.0.0.6", "node-2"),
        ("127.0.0.7", "node-1"),
    ];
    c.service("sticky", sticky, |s| s.session_affinity = Some(Duration::from_secs(60)));
    c.endpoints("sticky", target, &eps);
    c.service("local", local, |s| s.external_traffic_policy = TrafficPolicy::Local);
    c.endpoints("local", target, &eps);
    c.service("nowhere", nowhere, |s| s.external_traffic_policy = TrafficPolicy::Local);
    c.endpoints("nowhere", target, &[("127.0.0.6", "node-2")]);
    c.service("udp", udp, |s| s.ports[0].protocol = Protocol::Udp);
    c.sync();

    let pinned = tally("127.0.0.1", sticky, 30);
    assert_eq!(pinned.len(), 1, "every connection to one endpoint: {pinned:?}");
    let here = tally("127.0.0.1", local, 60);
    assert_eq!(
        here.keys().collect::<Vec<_>>(),
        ["127.0.0.5", "127.0.0.7"],
        "this node's endpoints only"
    );
    assert!(
        reach("127.0.0.1", nowhere).is_err(),
        "Local with none here: no listener"
    );
    assert!(reach("127.0.0.1", udp).is_err(), "UDP is not relayed");
    assert_eq!(c.metrics.listeners.get(), 2);
}

#[test]
fn a_port_another_program_holds_is_counted_and_taken_once_free() {
    let mut c = Cluster::new(IpFamily::V4);
    let target = servers(&["127.0.0.8"]);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let held = taken.local_addr().unwrap().port();
    let other = free_port("127.0.0.1");
    c.service("held", held, |_| {});
    c.endpoints("held", target, &[("127.0.0.8", "node-2")]);
    c.service("other", other, |_| {});
    c.endpoints("other", target, &[("127.0.0.8", "node-2")]);
    c.sync();
    assert_eq!(c.metrics.creation_failures.get(), 1);
    assert_eq!(c.metrics.listeners.get(), 1, "the other port listens");
    assert_eq!(reach("127.0.0.1", other).unwrap(), "127.0.0.8");

    drop(taken);
    c.endpoints("held", target, &[("127.0.0.8", "node-3")]);
    c.sync();
    assert_eq!(c.metrics.listeners.get(), 2, "tried again at the service's change");
    assert_eq!(reach("127.0.0.1", held).unwrap(), "127.0.0.8");
}

#[test]
fn ipv6_listens_on_the_ipv6_loopback() {
    if TcpListener::bind("[::1]:0").is_err() {
        panic!("this test needs IPv6 on loopback");
    }
    let mut c = Cluster::new(IpFamily::V6);
    let target = servers(&["::1"]);
    let node_port = free_port("::1");
    c.service("web6", node_port, |_| {});
    c.endpoints("web6", target, &[("::1", "node-2")]);
    c.sync();
    assert_eq!(c.relay.loopback(), "::1".parse::<IpAddr>().unwrap());
    assert_eq!(reach("::1", node_port).unwrap(), "::1");
}

/// Shutdown (the sync side's handle dropped, as the daemon drops it when
/// it stops): the listeners close, and so do the connections they relay,
/// as kube-proxy's relay closes them at shutdown.
#[test]
fn shutdown_closes_the_listeners_and_the_relayed_connections() {
    let mut c = Cluster::new(IpFamily::V4);
    let target = servers(&["127.0.0.8"]);
    let node_port = free_port("127.0.0.1");
    c.service("web", node_port, |_| {});
    c.endpoints("web", target, &[("127.0.0.8", "node-2")]);
    c.sync();
    let mut open = TcpStream::connect(("127.0.0.1", node_port)).unwrap();
    let mut first = [0u8; 10];
    let _ = open.read(&mut first).unwrap();
    open.write_all(b"alive").unwrap();
    let mut echo = [0u8; 5];
    open.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"alive", "relayed before the shutdown");

    let Cluster { relay, _runtime, .. } = c;
    drop(relay);
    let closing = std::time::Instant::now();
    while reach("127.0.0.1", node_port).is_ok() {
        assert!(closing.elapsed() < Duration::from_secs(2), "the port still answers");
        std::thread::sleep(Duration::from_millis(5));
    }
    open.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut rest = [0u8; 1];
    assert!(
        matches!(open.read(&mut rest), Ok(0) | Err(_)),
        "the relayed connection is closed at shutdown, not left open"
    );
}
