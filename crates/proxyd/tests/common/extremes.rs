//! The largest objects an API server accepts, of each kind, for one IP
//! family: a LoadBalancer with thousands of source ranges and external
//! IPs, a service of 100,000 endpoints over 100 slices, the same with
//! ClientIP affinity, a sticky UDP node port of 3,000 endpoints, and a
//! service with the longest names and the most ports an EndpointSlice
//! allows.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU16;
use std::time::Duration;

use slice_model::{
    EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint, TrafficPolicy,
};

/// The node the extremes' local endpoints are on.
pub const NODE: &str = "node-1";

/// Endpoints in the largest service.
pub const HUGE_ENDPOINTS: u32 = 100_000;

/// What the sticky service of 100,000 endpoints is called.
pub const STICKY_HUGE: &str = "a sticky service of 100,000 endpoints";

/// One of them: its service and slices.
pub struct Extreme {
    /// What it is, for messages.
    pub what: &'static str,
    /// The service.
    pub service: ServiceInfo,
    /// Its slices.
    pub slices: Vec<EndpointSlice>,
}

/// Addresses of `family` in ranges no other test object uses: `block`
/// picks the range, `i` the address in it.
pub fn addr(family: IpFamily, block: u8, i: u32) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(u32::from_be_bytes([10, block, 0, 0]) + i)),
        IpFamily::V6 => {
            let base = u128::from(Ipv6Addr::new(0xfd00, u16::from(block), 0, 0, 0, 0, 0, 0));
            IpAddr::V6(Ipv6Addr::from(base + u128::from(i)))
        }
    }
}

/// The cluster IP of extreme `i`.
pub fn cluster_ip(family: IpFamily, i: u32) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(10, 96, 200, u8::try_from(i).unwrap_or(0))),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::new(
            0xfd00,
            0x96,
            0,
            0,
            0,
            0,
            0x200,
            u16::try_from(i).unwrap_or(0),
        )),
    }
}

fn port(name: &str, protocol: Protocol, port: u16, node_port: Option<u16>) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol,
        port: NonZeroU16::new(port).expect("a test port"),
        node_port: node_port.and_then(NonZeroU16::new),
        app_protocol: None,
    }
}

fn slices(ns: &str, service: &str, ports: &[(&str, Protocol, u16)], eps: &[(IpAddr, &str)]) -> Vec<EndpointSlice> {
    eps.chunks(1_000)
        .enumerate()
        .map(|(i, chunk)| {
            let mut s = EndpointSlice::new(ns, &format!("{service}-{i}"), service).expect("a test slice");
            for (name, protocol, port) in ports {
                s = s.with_port(name, *protocol, *port);
            }
            for (ip, node) in chunk {
                s = s.with_endpoint(SliceEndpoint::new(*ip).on_node(node));
            }
            s
        })
        .collect()
}

/// The source ranges of the load balancer: `n` networks of `family`, of
/// several prefix lengths, none overlapping.
pub fn source_ranges(family: IpFamily, n: u32) -> Vec<ipnet::IpNet> {
    (0..n)
        .map(|i| {
            let len = match family {
                IpFamily::V4 => [24, 28, 32][(i % 3) as usize],
                IpFamily::V6 => [64, 96, 128][(i % 3) as usize],
            };
            let net = match (family, addr(family, 100, 0)) {
                (IpFamily::V4, _) => IpAddr::V4(Ipv4Addr::from(u32::from_be_bytes([100, 64, 0, 0]) + i * 256)),
                (IpFamily::V6, IpAddr::V6(base)) => {
                    IpAddr::V6(Ipv6Addr::from(u128::from(base) + (u128::from(i) << 64)))
                }
                (IpFamily::V6, IpAddr::V4(_)) => unreachable!("addr keeps the family"),
            };
            ipnet::IpNet::new(net, len).expect("a valid prefix")
        })
        .collect()
}

/// The largest of each kind, for `family`.
pub fn largest(family: IpFamily) -> Vec<Extreme> {
    let mut out = Vec::new();

    // A LoadBalancer with 2,000 source ranges, 1,000 external IPs, a
    // Local policy and three endpoints on this node.
    let mut lb = ServiceInfo::new(ServiceName::new("extreme", "lb"));
    lb.service_type = ServiceType::LoadBalancer;
    lb.cluster_ips = vec![cluster_ip(family, 1)];
    lb.ports = vec![port("http", Protocol::Tcp, 80, Some(30_101))];
    lb.load_balancer_ips = vec![addr(family, 201, 10)];
    lb.external_ips = (0..1_000).map(|i| addr(family, 202, i + 1)).collect();
    lb.load_balancer_source_ranges = source_ranges(family, 2_000);
    lb.external_traffic_policy = TrafficPolicy::Local;
    lb.health_check_node_port = NonZeroU16::new(32_101);
    let local: Vec<(IpAddr, &str)> = (1..=3).map(|i| (addr(family, 203, i), NODE)).collect();
    out.push(Extreme {
        what: "a LoadBalancer with 2,000 source ranges and 1,000 external IPs",
        slices: slices("extreme", "lb", &[("http", Protocol::Tcp, 8080)], &local),
        service: lb,
    });

    // 100,000 endpoints over 100 slices.
    let mut huge = ServiceInfo::new(ServiceName::new("extreme", "huge"));
    huge.cluster_ips = vec![cluster_ip(family, 2)];
    huge.ports = vec![port("http", Protocol::Tcp, 80, None)];
    let eps: Vec<(IpAddr, &str)> = (0..HUGE_ENDPOINTS)
        .map(|i| (addr(family, 128, i + 1), "node-2"))
        .collect();
    out.push(Extreme {
        what: "a service of 100,000 endpoints",
        slices: slices("extreme", "huge", &[("http", Protocol::Tcp, 8080)], &eps),
        service: huge,
    });

    // The same with ClientIP affinity.
    let mut sticky_huge = ServiceInfo::new(ServiceName::new("extreme", "sticky-huge"));
    sticky_huge.cluster_ips = vec![cluster_ip(family, 5)];
    sticky_huge.ports = vec![port("http", Protocol::Tcp, 80, None)];
    sticky_huge.session_affinity = Some(Duration::from_secs(10_800));
    let eps: Vec<(IpAddr, &str)> = (0..HUGE_ENDPOINTS)
        .map(|i| (addr(family, 132, i + 1), "node-2"))
        .collect();
    out.push(Extreme {
        what: STICKY_HUGE,
        slices: slices("extreme", "sticky-huge", &[("http", Protocol::Tcp, 8080)], &eps),
        service: sticky_huge,
    });

    // A sticky UDP node port of 3,000 endpoints.
    let mut sticky = ServiceInfo::new(ServiceName::new("extreme", "sticky"));
    sticky.service_type = ServiceType::NodePort;
    sticky.cluster_ips = vec![cluster_ip(family, 3)];
    sticky.ports = vec![port("dns", Protocol::Udp, 53, Some(30_053))];
    sticky.session_affinity = Some(Duration::from_secs(10_800));
    let eps: Vec<(IpAddr, &str)> = (0..3_000).map(|i| (addr(family, 130, i + 1), "node-2")).collect();
    out.push(Extreme {
        what: "a sticky UDP node port of 3,000 endpoints",
        slices: slices("extreme", "sticky", &[("dns", Protocol::Udp, 5353)], &eps),
        service: sticky,
    });

    // The longest names (63-character namespace and name, 15-character
    // port names) and the most ports a slice allows (100).
    let (ns, name) = ("n".repeat(63), "s".repeat(63));
    let mut names = ServiceInfo::new(ServiceName::new(ns.as_str(), name.as_str()));
    names.cluster_ips = vec![cluster_ip(family, 4)];
    let port_names: Vec<String> = (0..100).map(|i| format!("port-{i:010}")).collect();
    names.ports = port_names
        .iter()
        .zip(1u16..)
        .map(|(n, i)| port(n, Protocol::Tcp, i, None))
        .collect();
    let slice_ports: Vec<(&str, Protocol, u16)> = port_names
        .iter()
        .zip(1u16..)
        .map(|(n, i)| (n.as_str(), Protocol::Tcp, 9_000 + i))
        .collect();
    let eps: Vec<(IpAddr, &str)> = (0..10).map(|i| (addr(family, 131, i + 1), "node-2")).collect();
    out.push(Extreme {
        what: "the longest names and 100 ports",
        slices: slices(&ns, &name, &slice_ports, &eps),
        service: names,
    });
    out
}
