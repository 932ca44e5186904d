//! UDP conntrack cleanup after a sync, as kube-proxy does it; which
//! entries are stale is decided by `nft_dataplane::conntrack`.
//!
//! UDP has no connection to end, so a conntrack entry keeps sending a
//! client's datagrams where the rules sent its first one:
//!
//! - to an endpoint that is gone (a *stale endpoint*): delete the entries
//!   DNATed to it from each of the service's frontends;
//! - nowhere, because the service had no endpoints when the flow began (a
//!   *stale service*, now with its first endpoint): delete the entries to
//!   its frontends;
//! - to a cluster IP of a deleted UDP port: delete the entries to that IP.
//!
//! The cleanup runs only after the rules that replace the entries are in
//! place (a successful apply), never before. It talks to the kernel over
//! netlink ([`NetlinkConntrack`]): one dump per sync, whatever the number of
//! stale flows.

use endpoints_map::ServicesMap;
pub use nft_dataplane::conntrack::Flow;
use slice_model::IpFamily;

use crate::engine::EngineUpdate;

/// The entries one sync's changes make stale.
pub fn plan(update: &EngineUpdate, services: &ServicesMap) -> Vec<Flow> {
    nft_dataplane::conntrack::plan(&update.endpoints, &update.services, services)
}

/// Why a deletion failed.
#[derive(Debug, thiserror::Error)]
#[error("conntrack {args}: {message}")]
pub struct ConntrackError {
    /// The arguments.
    pub args: String,
    /// What went wrong.
    pub message: String,
}

/// Deletes conntrack entries.
pub trait Conntrack {
    /// Deletes the entries of each flow; returns how many were deleted.
    /// Every flow is tried even when one fails.
    fn delete(&mut self, family: IpFamily, flows: &[Flow]) -> (u64, Vec<ConntrackError>);
}

pub use crate::netlink::NetlinkConntrack;

/// No cleanup (`--dry-run`, `--no-conntrack`).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoConntrack;

impl Conntrack for NoConntrack {
    fn delete(&mut self, _: IpFamily, _: &[Flow]) -> (u64, Vec<ConntrackError>) {
        (0, Vec::new())
    }
}

/// A conntrack that records what it was asked, for tests.
#[derive(Debug, Default)]
pub struct RecordingConntrack {
    /// Every flow asked for, in order.
    pub deleted: Vec<(IpFamily, Flow)>,
}

impl Conntrack for RecordingConntrack {
    fn delete(&mut self, family: IpFamily, flows: &[Flow]) -> (u64, Vec<ConntrackError>) {
        self.deleted.extend(flows.iter().map(|f| (family, *f)));
        (flows.len() as u64, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use slice_model::{
        EndpointSlice, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint, SliceName,
    };

    use super::*;
    use crate::engine::Engine;

    fn dns(node_port: bool) -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", "dns"));
        s.cluster_ips = vec!["10.96.0.10".parse().unwrap()];
        s.external_ips = vec!["192.0.2.1".parse().unwrap()];
        if node_port {
            s.service_type = ServiceType::NodePort;
        }
        s.ports = vec![ServicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: NonZeroU16::new(53).unwrap(),
            node_port: NonZeroU16::new(30053),
        }];
        s
    }

    fn slice(ips: &[&str]) -> EndpointSlice {
        let mut s = EndpointSlice::new("ns", "dns-1", "dns")
            .unwrap()
            .with_port("dns", Protocol::Udp, 53);
        for ip in ips {
            s = s.with_endpoint(SliceEndpoint::new(ip.parse().unwrap()));
        }
        s
    }

    #[test]
    fn stale_services_endpoints_and_deleted_ips() {
        let mut e = Engine::new("node-1", IpFamily::V4);
        e.update_service(&dns(true));
        e.update();
        // First endpoint: entries to every frontend may black-hole.
        e.update_slice(slice(&["10.1.0.1"]));
        let u = e.update();
        assert_eq!(
            plan(&u, &e.services),
            [
                Flow::ToFrontend {
                    addr: "10.96.0.10".parse().unwrap(),
                    port: 53
                },
                Flow::ToFrontend {
                    addr: "192.0.2.1".parse().unwrap(),
                    port: 53
                },
                Flow::ToNodePort { port: 30053 },
            ]
        );
        // The endpoint is replaced: entries DNATed to it go.
        e.update_slice(slice(&["10.1.0.2"]));
        let u = e.update();
        let flows = plan(&u, &e.services);
        assert_eq!(flows.len(), 3, "{flows:?}");
        assert!(flows.contains(&Flow::NodePortToEndpoint {
            port: 30053,
            endpoint: "10.1.0.1".parse().unwrap()
        }));
        assert_eq!(
            flows[0].args(IpFamily::V4).join(" "),
            "-D -f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --dst-nat 10.1.0.1"
        );
        // The service goes: its cluster IP's entries go.
        e.remove_service(&ServiceName::new("ns", "dns"));
        e.remove_slice(&SliceName::new("ns", "dns-1"));
        let u = e.update();
        assert_eq!(
            plan(&u, &e.services),
            [Flow::ToAddress {
                addr: "10.96.0.10".parse().unwrap()
            }]
        );
    }
}
