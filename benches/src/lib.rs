//! # proxyd-benches
//!
//! Deterministic workloads of model slices for the engine benchmarks in
//! `benches/engine.rs` (no JSON, no Kubernetes types: these measure the
//! cache and the map alone). Trace-level comparisons with the Go reference
//! go through `proxyd replay --timing` instead (`benches/compare.sh`).

use std::net::{IpAddr, Ipv4Addr};

use slice_model::{EndpointSlice, Interner, Protocol, SliceEndpoint};

/// The shape of a cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Services.
    pub services: u32,
    /// Endpoints per service.
    pub endpoints: u32,
    /// Endpoints per slice.
    pub slice_size: u32,
    /// Nodes (the proxy runs on `node-0`).
    pub nodes: u32,
    /// Every `udp_every`-th service is UDP.
    pub udp_every: u32,
}

impl Shape {
    /// `services` services of `endpoints` endpoints, 100 per slice.
    pub fn new(services: u32, endpoints: u32) -> Self {
        Self {
            services,
            endpoints,
            slice_size: 100,
            nodes: 500,
            udp_every: 10,
        }
    }

    /// How many slices one service has.
    pub fn slices_per_service(&self) -> u32 {
        self.endpoints.div_ceil(self.slice_size).max(1)
    }
}

/// The node the benchmarks' proxy runs on.
pub const NODE: &str = "node-0";

/// Builds slices of a [`Shape`]; `generation` shifts every address so that
/// two generations of the same slice differ.
pub struct Workload {
    shape: Shape,
    interner: Interner,
}

impl Workload {
    /// A workload of this shape.
    pub fn new(shape: Shape) -> Self {
        Self {
            shape,
            interner: Interner::new(),
        }
    }

    /// Slice `slice` of service `service`, in generation `generation`.
    pub fn slice(&mut self, service: u32, slice: u32, generation: u32) -> EndpointSlice {
        let s = self.shape;
        let protocol = if service.is_multiple_of(s.udp_every) {
            Protocol::Udp
        } else {
            Protocol::Tcp
        };
        let mut out = EndpointSlice::new("ns", &format!("svc-{service}-{slice}"), &format!("svc-{service}"))
            .expect("a named slice")
            .with_port("p", protocol, 8080);
        let first = slice * s.slice_size;
        let last = (first + s.slice_size).min(s.endpoints);
        for i in first..last {
            let n = service.wrapping_mul(7919).wrapping_add(i).wrapping_add(generation);
            let addr = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (service << 12 | i) & 0x00ff_ffff));
            let node = self.interner.node(&format!("node-{}", n % s.nodes));
            let mut ep = SliceEndpoint::new(addr).with_conditions(slice_model::Conditions {
                ready: n % 17 != 0,
                serving: true,
                terminating: false,
            });
            ep.node = Some(node);
            ep.zone_hints = self.interner.zones([["zone-a", "zone-b", "zone-c"][(n % 3) as usize]]);
            out = out.with_endpoint(ep);
        }
        out
    }

    /// Every slice of every service, generation 0.
    pub fn all_slices(&mut self) -> Vec<EndpointSlice> {
        let s = self.shape;
        (0..s.services)
            .flat_map(|svc| (0..s.slices_per_service()).map(move |sl| (svc, sl)))
            .map(|(svc, sl)| self.slice(svc, sl, 0))
            .collect()
    }
}

/// Service `svc-I` in `namespace` of the dataplane harnesses: cluster IP
/// 10.96.0.0 + I, one TCP port 80.
pub fn cluster_ip_service(namespace: &str, i: u32) -> slice_model::ServiceInfo {
    let mut s = slice_model::ServiceInfo::new(slice_model::ServiceName::new(namespace, format!("svc-{i}").as_str()));
    s.cluster_ips = vec![IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + i))];
    s.ports = vec![slice_model::ServicePort {
        name: "p".into(),
        protocol: Protocol::Tcp,
        port: std::num::NonZeroU16::MIN.saturating_add(79),
        node_port: None,
        app_protocol: None,
    }];
    s
}

/// A network namespace of the harness's own (`PREFIX-PID`, loopback up),
/// removed when dropped. Needs root and iproute2.
#[derive(Debug)]
pub struct ScratchNetns(pub String);

impl ScratchNetns {
    /// Creates it.
    pub fn create(prefix: &str) -> Result<Self, String> {
        let name = format!("{prefix}-{}", std::process::id());
        run_ok("ip", &["netns", "add", &name])
            .map_err(|e| format!("cannot create a network namespace (needs root and iproute2): {e}"))?;
        let ns = Self(name);
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `ip ARGS` inside it.
    pub fn ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["netns", "exec", &self.0, "ip"];
        all.extend_from_slice(args);
        run_ok("ip", &all)
    }
}

impl Drop for ScratchNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

/// Runs `program args`; its stderr is the error when it fails.
pub fn run_ok(program: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A harness's exit: its error, named, on stderr.
pub fn exit(harness: &str, result: Result<(), String>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{harness}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A process's `/proc/PID/status` memory field (`VmRSS:`, `VmHWM:`) in
/// MiB; 0 when it cannot be read.
pub fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}
