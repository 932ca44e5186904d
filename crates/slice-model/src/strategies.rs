//! `proptest` strategies for slices, endpoints and services with realistic
//! shapes (feature `proptest`).
//!
//! The pools of names and addresses are small on purpose, so that generated
//! cases meet what breaks caches: the same address in several slices of a
//! service, a slice relabelled to another service, both IP families in one
//! slice, several ports (named and unnamed, TCP and UDP, one name with two
//! protocols), zone and node hints, terminating and not-ready endpoints,
//! endpoints on this node and on others.
//!
//! ```
//! use proptest::prelude::*;
//! use slice_model::strategies::{NODES, endpoint_slice};
//!
//! proptest!(|(slice in endpoint_slice())| {
//!     // Every generated slice is one a decoder could have produced.
//!     prop_assert!(!slice.service.is_empty());
//!     prop_assert!(slice.content.endpoints.iter().all(|e| e.node.as_ref().is_none_or(|n| NODES.contains(&n.as_str()))));
//! });
//! ```

use std::num::NonZeroU16;

use proptest::prelude::*;

use crate::{
    Conditions, EndpointSlice, NodeHints, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceContent,
    SliceEndpoint, SliceName, SlicePort, TrafficPolicy, ZoneHints,
};

/// Namespaces the strategies draw from.
pub const NAMESPACES: [&str; 2] = ["default", "shop"];
/// Service names.
pub const SERVICES: [&str; 3] = ["web", "dns", "db"];
/// Slice names (each slice of a service is one of these).
pub const SLICES: [&str; 4] = ["s-a", "s-b", "s-c", "s-d"];
/// Nodes; the first is the one tests usually run the proxy on.
pub const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
/// Zones.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// Addresses, both families, and one IPv4-mapped IPv6 address.
pub const ADDRESSES: [&str; 8] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.0.10",
    "10.0.1.1",
    "fd00::1",
    "fd00::2",
    "fd00::a",
    "::ffff:10.0.0.1",
];
/// Ports: named and unnamed, one name with two protocols.
pub const PORTS: [(&str, Protocol, u16); 5] = [
    ("http", Protocol::Tcp, 80),
    ("dns", Protocol::Udp, 53),
    ("dns", Protocol::Tcp, 53),
    ("", Protocol::Udp, 5353),
    ("metrics", Protocol::Tcp, 9090),
];

/// Conditions as the API sends them: mostly ready, some terminating (still
/// serving or not), some not ready, and the odd ready-and-terminating.
pub fn conditions() -> impl Strategy<Value = Conditions> {
    prop_oneof![
        6 => Just(Conditions::READY),
        2 => Just(Conditions::SERVING_TERMINATING),
        2 => Just(Conditions::NOT_READY),
        1 => any::<(bool, bool, bool)>().prop_map(|(ready, serving, terminating)| Conditions {
            ready,
            serving,
            terminating,
        }),
    ]
}

/// One endpoint: an address from [`ADDRESSES`], a node from [`NODES`] (or
/// none), conditions, and zone and node hints (none, one or two).
pub fn slice_endpoint() -> impl Strategy<Value = SliceEndpoint> {
    (
        0..ADDRESSES.len(),
        proptest::option::weighted(0.9, 0..NODES.len()),
        conditions(),
        proptest::sample::subsequence(&ZONES[..], 0..=2),
        proptest::sample::subsequence(&NODES[..], 0..=2),
    )
        .prop_map(|(addr, node, conditions, zones, hinted)| {
            let mut e = SliceEndpoint::new(ADDRESSES[addr].parse().expect("the pool's addresses parse"));
            e.node = node.map(|n| NODES[n].into());
            e.conditions = conditions;
            e.zone_hints = ZoneHints::new(zones);
            e.node_hints = NodeHints::new(hinted);
            e
        })
}

/// A slice's content: up to three of [`PORTS`] and up to six endpoints, in
/// the normal form decoders leave it in.
pub fn slice_content() -> impl Strategy<Value = SliceContent> {
    (
        proptest::sample::subsequence(&PORTS[..], 0..=3),
        proptest::collection::vec(slice_endpoint(), 0..=6),
    )
        .prop_map(|(ports, endpoints)| {
            let mut content = SliceContent {
                ports: ports
                    .into_iter()
                    .filter_map(|(name, protocol, port)| {
                        Some(SlicePort {
                            name: name.into(),
                            protocol,
                            port: NonZeroU16::new(port)?,
                            app_protocol: None,
                        })
                    })
                    .collect(),
                endpoints,
            };
            content.normalize();
            content
        })
}

/// A whole slice: a name from [`NAMESPACES`] and [`SLICES`], a service from
/// [`SERVICES`] (so the same slice name may name another service later: a
/// relabel), and its content.
pub fn endpoint_slice() -> impl Strategy<Value = EndpointSlice> {
    (0..NAMESPACES.len(), 0..SLICES.len(), 0..SERVICES.len(), slice_content()).prop_map(
        |(ns, slice, service, content)| EndpointSlice {
            name: SliceName::new(NAMESPACES[ns], SLICES[slice]),
            service: SERVICES[service].into(),
            content,
            trigger_time: None,
        },
    )
}

/// A service: one of the names, a cluster IP of either family, the ports of
/// [`PORTS`] it serves, its type and traffic policies.
pub fn service_info() -> impl Strategy<Value = ServiceInfo> {
    (
        0..NAMESPACES.len(),
        0..SERVICES.len(),
        0..ADDRESSES.len(),
        proptest::sample::subsequence(&PORTS[..], 1..=3),
        prop_oneof![
            Just(ServiceType::ClusterIp),
            Just(ServiceType::NodePort),
            Just(ServiceType::LoadBalancer)
        ],
        any::<(bool, bool)>(),
    )
        .prop_map(|(ns, svc, ip, ports, service_type, (etp_local, itp_local))| {
            let mut s = ServiceInfo::new(ServiceName::new(NAMESPACES[ns], SERVICES[svc]));
            s.cluster_ips = vec![ADDRESSES[ip].parse().expect("the pool's addresses parse")];
            s.service_type = service_type;
            let policy = |local: bool| {
                if local {
                    TrafficPolicy::Local
                } else {
                    TrafficPolicy::Cluster
                }
            };
            s.external_traffic_policy = policy(etp_local);
            s.internal_traffic_policy = policy(itp_local);
            s.ports = ports
                .into_iter()
                .enumerate()
                .filter_map(|(i, (name, protocol, port))| {
                    let node_port = (service_type != ServiceType::ClusterIp)
                        .then(|| NonZeroU16::new(30000 + i as u16))
                        .flatten();
                    Some(ServicePort {
                        name: name.into(),
                        protocol,
                        port: NonZeroU16::new(port)?,
                        node_port,
                        app_protocol: None,
                    })
                })
                .collect();
            s
        })
}
