//! Behaviour tests of the dataplane: packets traced through the kernel
//! model after full and partial syncs.
//!
//! Addresses follow kube-proxy's test conventions: pods 10.0.0.0/8,
//! cluster IPs 172.30.0.0/16 (the service CIDR), this node 192.168.0.2
//! (and 192.168.1.2), external IPs 192.168.99.0/24, load-balancer IPs
//! 1.2.3.4 and 5.6.7.8, clients outside the cluster 203.0.113.0/24,
//! endpoints 10.180.0.0/16.

mod first_load;
mod flows;
mod mirror;
mod pod;
mod refused;
mod support;
mod sync;

use std::collections::BTreeSet;
use std::num::NonZeroU16;
use std::time::Duration;

use endpoints_map::{EndpointsMap, ServicesMap};
use slice_cache::{EndpointSliceCache, ServiceChangeTracker};
use slice_model::{
    EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint, SliceName,
    TrafficPolicy,
};

use crate::kernel::KernelModel;
use crate::syncer::{NftSyncer, SyncKind, SyncReport};
use crate::tracer::{Host, Packet, Trace};
use crate::{DataplaneConfig, Recording};

pub(crate) const NODE: &str = "test-node";
pub(crate) const POD: &str = "10.0.0.2";
pub(crate) const NODE_IP: &str = "192.168.0.2";
pub(crate) const NODE_IP_ALT: &str = "192.168.1.2";
pub(crate) const CLIENT: &str = "203.0.113.2";
pub(crate) const CLIENT_BLOCKED: &str = "203.0.113.130";

/// The caches and maps the binary drives, in miniature.
pub(crate) struct Engine {
    slices: EndpointSliceCache,
    service_changes: ServiceChangeTracker,
    pub services: ServicesMap,
    pub endpoints: EndpointsMap,
}

impl Engine {
    pub fn new(family: IpFamily) -> Self {
        Self {
            slices: EndpointSliceCache::new(NODE, mirror::family(family)),
            service_changes: ServiceChangeTracker::new(mirror::family(family)),
            services: ServicesMap::new(),
            endpoints: EndpointsMap::new(),
        }
    }

    pub fn service(&mut self, s: &ServiceInfo) -> &mut Self {
        self.service_changes.update(&mirror::service(s));
        self
    }

    pub fn slice(&mut self, s: EndpointSlice) -> &mut Self {
        self.slices.update(mirror::slice(s));
        self
    }

    pub fn remove_service(&mut self, ns: &str, name: &str) {
        self.service_changes.remove(&ServiceName::new(ns, name));
    }

    pub fn remove_slice(&mut self, ns: &str, name: &str) {
        self.slices.remove(&SliceName::new(ns, name));
    }

    /// Applies what is pending; returns the services that changed.
    pub fn update(&mut self) -> BTreeSet<ServiceName> {
        let s = self.services.update(&mut self.service_changes);
        let e = self.endpoints.update(&mut self.slices);
        s.updated_services.into_iter().chain(e.changed_services).collect()
    }
}

/// A service with one port named `p`.
pub(crate) fn service(ns: &str, name: &str, ip: &str, port: u16, protocol: Protocol) -> ServiceInfo {
    let mut s = ServiceInfo::new(ServiceName::new(ns, name));
    s.cluster_ips = vec![ip.parse().expect("test address")];
    s.ports = vec![ServicePort {
        name: "p".into(),
        protocol,
        port: NonZeroU16::new(port).expect("test port"),
        node_port: None,
        app_protocol: None,
    }];
    s
}

/// Makes `s` a NodePort service on `node_port`.
pub(crate) fn node_port(mut s: ServiceInfo, node_port: u16) -> ServiceInfo {
    s.service_type = ServiceType::NodePort;
    s.ports[0].node_port = NonZeroU16::new(node_port);
    s
}

/// Makes `s` a LoadBalancer service with these ingress IPs.
pub(crate) fn load_balancer(s: ServiceInfo, np: u16, ips: &[&str]) -> ServiceInfo {
    let mut s = node_port(s, np);
    s.service_type = ServiceType::LoadBalancer;
    s.load_balancer_ips = ips.iter().map(|a| a.parse().expect("test address")).collect();
    s
}

pub(crate) fn external_local(mut s: ServiceInfo) -> ServiceInfo {
    s.external_traffic_policy = TrafficPolicy::Local;
    s
}

pub(crate) fn affinity(mut s: ServiceInfo, secs: u64) -> ServiceInfo {
    s.session_affinity = Some(Duration::from_secs(secs));
    s
}

/// How an endpoint looks in a slice.
#[derive(Clone, Copy)]
pub(crate) enum Ep<'a> {
    /// Ready, on another node.
    Remote(&'a str),
    /// Ready, on this node.
    Local(&'a str),
    /// Not ready but serving and terminating, on another node.
    Terminating(&'a str),
    /// Not ready, not serving.
    NotReady(&'a str),
}

/// The slice `name` of service `svc` with port `p` on `port`.
pub(crate) fn slice(ns: &str, svc: &str, protocol: Protocol, port: u16, eps: &[Ep<'_>]) -> EndpointSlice {
    let mut s = EndpointSlice::new(ns, &format!("{svc}-1"), svc)
        .unwrap()
        .with_port("p", protocol, port);
    for e in eps {
        let (addr, local, (ready, serving, terminating)) = match *e {
            Ep::Remote(a) => (a, false, (true, true, false)),
            Ep::Local(a) => (a, true, (true, true, false)),
            Ep::Terminating(a) => (a, false, (false, true, true)),
            Ep::NotReady(a) => (a, false, (false, false, false)),
        };
        let ep = SliceEndpoint::new(addr.parse().expect("test address"))
            .with_conditions(slice_model::Conditions {
                ready,
                serving,
                terminating,
            })
            .on_node(if local { NODE } else { "node-2" });
        s = s.with_endpoint(ep);
    }
    s
}

/// kube-proxy's test configuration: pod CIDR, service CIDR.
pub(crate) fn config() -> DataplaneConfig {
    DataplaneConfig {
        cluster_cidrs: vec!["10.0.0.0/8".parse().expect("cidr")],
        service_cidrs: vec!["172.30.0.0/16".parse().expect("cidr")],
        ..DataplaneConfig::new(IpFamily::V4)
    }
}

pub(crate) fn host() -> Host {
    let mut h = support::host(&[NODE_IP, NODE_IP_ALT, "127.0.0.1"]);
    h.local_addrs = h.local_addrs.into_iter().map(mirror::addr).collect();
    h
}

/// What a fresh proxy would write for the engine's current maps.
/// `k` with each backend map's endpoints renumbered in sorted order: where
/// an endpoint sits in such a map is history (positions stay put so that a
/// change is one element), which endpoints it holds is not.
pub(crate) fn positions_sorted(k: &KernelModel) -> KernelModel {
    let mut k = k.clone();
    for table in k.tables.values_mut() {
        for (set, items) in &mut table.sets {
            if matches!(set, crate::names::SetId::Backends(..) | crate::names::SetId::Picks(_)) {
                let mut values: Vec<_> = std::mem::take(items).into_values().collect();
                values.sort();
                *items = (0u32..)
                    .zip(values)
                    .map(|(i, v)| (crate::element::Key::Index(i), v))
                    .collect();
            }
        }
    }
    k
}

pub(crate) fn fresh(engine: &Engine, config: &DataplaneConfig) -> KernelModel {
    let mut syncer = NftSyncer::new(mirror::config(config), KernelModel::default());
    syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .expect("a full sync applies to an empty kernel");
    syncer.dataplane().clone()
}

/// Syncs what changed; panics if the apply fails.
pub(crate) fn sync<D: crate::Dataplane>(syncer: &mut NftSyncer<D>, engine: &mut Engine) -> SyncReport {
    let changed = engine.update();
    syncer
        .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
        .expect("sync applies")
}

/// A periodic sync with no changes.
pub(crate) fn periodic<D: crate::Dataplane>(
    syncer: &mut NftSyncer<D>,
    engine: &Engine,
) -> Result<SyncReport, crate::DataplaneError> {
    syncer.sync(
        &engine.services,
        &engine.endpoints,
        &BTreeSet::new(),
        SyncKind::Periodic,
    )
}

/// Traces a packet through a fresh full sync of the engine.
pub(crate) fn trace(kernel: &KernelModel, p: Packet) -> Trace {
    kernel.trace(&host(), mirror::packet(p))
}

/// Asserts a trace's summary, naming the case.
#[track_caller]
pub(crate) fn expect(kernel: &KernelModel, case: &str, p: Packet, want: &str) {
    let got = trace(kernel, p).summary();
    assert_eq!(got, mirror::text(want), "{case}: {p:?}");
}

/// The recording of a full sync, for the renderer's golden test.
pub(crate) fn recorded(engine: &Engine, config: &DataplaneConfig) -> String {
    let mut syncer = NftSyncer::new(config.clone(), Recording::default());
    syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .expect("records");
    syncer.dataplane().applied.iter().map(|t| t.text()).collect()
}
