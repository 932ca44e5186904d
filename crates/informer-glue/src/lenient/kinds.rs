//! What proxyd reads of each kind it watches, and the `k8s-openapi`
//! object those fields make. A field not named here is never decoded.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use serde::Deserialize;
use slice_model::TRIGGER_TIME_ANNOTATION;

use super::{Lean, Meta, list, string_map, zero};
use crate::versions::ListField;

/// A decoded list's elements as the `k8s-openapi` type's.
fn each<T: Into<U>, U>(list: Option<Vec<T>>) -> Option<Vec<U>> {
    list.map(|l| l.into_iter().map(Into::into).collect())
}

impl From<ServicePort> for core::ServicePort {
    fn from(p: ServicePort) -> Self {
        Self {
            name: p.name,
            protocol: p.protocol,
            port: p.port,
            node_port: p.node_port,
            app_protocol: p.app_protocol,
            ..Default::default()
        }
    }
}

impl From<Ingress> for core::LoadBalancerIngress {
    fn from(i: Ingress) -> Self {
        Self {
            ip: i.ip,
            ip_mode: i.ip_mode,
            ..Default::default()
        }
    }
}

impl From<Endpoint> for discovery::Endpoint {
    fn from(e: Endpoint) -> Self {
        Self {
            addresses: e.addresses.unwrap_or_default(),
            conditions: e.conditions.map(|c| discovery::EndpointConditions {
                ready: c.ready,
                serving: c.serving,
                terminating: c.terminating,
            }),
            node_name: e.node_name,
            deprecated_topology: e.deprecated_topology,
            hints: e.hints.map(|h| discovery::EndpointHints {
                for_zones: each(h.for_zones),
                for_nodes: each(h.for_nodes),
            }),
            hostname: e.hostname,
            zone: e.zone,
            target_ref: e.target_ref.map(|r| core::ObjectReference {
                kind: r.kind,
                namespace: r.namespace,
                name: r.name,
                uid: r.uid,
                ..Default::default()
            }),
        }
    }
}

impl From<Named> for discovery::ForZone {
    fn from(n: Named) -> Self {
        Self { name: n.name }
    }
}

impl From<Named> for discovery::ForNode {
    fn from(n: Named) -> Self {
        Self { name: n.name }
    }
}

impl From<SlicePort> for discovery::EndpointPort {
    fn from(p: SlicePort) -> Self {
        Self {
            name: p.name,
            protocol: p.protocol,
            port: p.port,
            app_protocol: p.app_protocol,
        }
    }
}

impl From<Taint> for core::Taint {
    fn from(t: Taint) -> Self {
        Self {
            key: t.key,
            ..Default::default()
        }
    }
}

impl From<NodeAddress> for core::NodeAddress {
    fn from(a: NodeAddress) -> Self {
        Self {
            type_: a.type_,
            address: a.address,
        }
    }
}
use crate::multus::{NETWORK_STATUS_ANNOTATION, SERVICE_NETWORK_ANNOTATION};

/// The annotations proxyd reads, of any kind: an EndpointSlice's trigger
/// time, a Service's network and a Pod's network status (multus mode).
pub const READ_ANNOTATIONS: [&str; 3] = [
    TRIGGER_TIME_ANNOTATION,
    SERVICE_NETWORK_ANNOTATION,
    NETWORK_STATUS_ANNOTATION,
];

// ---- Service ----

#[derive(Deserialize, Default)]
#[serde(default)]
/// What proxyd reads of a Service (see [`Lean`]).
pub struct ServiceWire {
    #[serde(deserialize_with = "zero")]
    metadata: Meta,
    spec: Option<ServiceSpec>,
    status: Option<ServiceStatus>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ServiceSpec {
    #[serde(rename = "type")]
    type_: Option<String>,
    #[serde(rename = "clusterIP")]
    cluster_ip: Option<String>,
    #[serde(rename = "clusterIPs", deserialize_with = "list")]
    cluster_ips: Option<Vec<String>>,
    #[serde(deserialize_with = "list")]
    ports: Option<Vec<ServicePort>>,
    #[serde(rename = "externalIPs", deserialize_with = "list")]
    external_ips: Option<Vec<String>>,
    #[serde(deserialize_with = "list")]
    load_balancer_source_ranges: Option<Vec<String>>,
    session_affinity: Option<String>,
    session_affinity_config: Option<AffinityConfig>,
    external_traffic_policy: Option<String>,
    internal_traffic_policy: Option<String>,
    health_check_node_port: Option<i32>,
    traffic_distribution: Option<String>,
    publish_not_ready_addresses: Option<bool>,
    external_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ServicePort {
    name: Option<String>,
    protocol: Option<String>,
    #[serde(deserialize_with = "zero")]
    port: i32,
    node_port: Option<i32>,
    app_protocol: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AffinityConfig {
    #[serde(rename = "clientIP")]
    client_ip: Option<ClientIp>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ClientIp {
    timeout_seconds: Option<i32>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ServiceStatus {
    load_balancer: Option<LoadBalancer>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LoadBalancer {
    #[serde(deserialize_with = "list")]
    ingress: Option<Vec<Ingress>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Ingress {
    ip: Option<String>,
    ip_mode: Option<String>,
}

impl Lean for core::Service {
    type Wire = ServiceWire;

    fn from_wire(w: ServiceWire) -> Self {
        let spec = w.spec.map(|s| core::ServiceSpec {
            type_: s.type_,
            cluster_ip: s.cluster_ip,
            cluster_ips: s.cluster_ips,
            ports: each(s.ports),
            external_ips: s.external_ips,
            load_balancer_source_ranges: s.load_balancer_source_ranges,
            session_affinity: s.session_affinity,
            session_affinity_config: s.session_affinity_config.map(|c| core::SessionAffinityConfig {
                client_ip: c.client_ip.map(|c| core::ClientIPConfig {
                    timeout_seconds: c.timeout_seconds,
                }),
            }),
            external_traffic_policy: s.external_traffic_policy,
            internal_traffic_policy: s.internal_traffic_policy,
            health_check_node_port: s.health_check_node_port,
            traffic_distribution: s.traffic_distribution,
            publish_not_ready_addresses: s.publish_not_ready_addresses,
            external_name: s.external_name,
            ..Default::default()
        });
        let status = w.status.map(|s| core::ServiceStatus {
            load_balancer: s.load_balancer.map(|lb| core::LoadBalancerStatus {
                ingress: each(lb.ingress),
            }),
            ..Default::default()
        });
        core::Service {
            metadata: w.metadata.into(),
            spec,
            status,
        }
    }
}

// ---- EndpointSlice ----

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
/// What proxyd reads of an EndpointSlice (see [`Lean`]).
pub struct SliceWire {
    #[serde(deserialize_with = "zero")]
    metadata: Meta,
    #[serde(deserialize_with = "zero")]
    address_type: String,
    #[serde(deserialize_with = "list")]
    endpoints: Option<Vec<Endpoint>>,
    #[serde(deserialize_with = "list")]
    ports: Option<Vec<SlicePort>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Endpoint {
    #[serde(deserialize_with = "list")]
    addresses: Option<Vec<String>>,
    conditions: Option<Conditions>,
    node_name: Option<String>,
    #[serde(deserialize_with = "string_map")]
    deprecated_topology: Option<std::collections::BTreeMap<String, String>>,
    hints: Option<Hints>,
    hostname: Option<String>,
    zone: Option<String>,
    target_ref: Option<TargetRef>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TargetRef {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Conditions {
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Hints {
    #[serde(deserialize_with = "list")]
    for_zones: Option<Vec<Named>>,
    #[serde(deserialize_with = "list")]
    for_nodes: Option<Vec<Named>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Named {
    #[serde(deserialize_with = "zero")]
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SlicePort {
    name: Option<String>,
    protocol: Option<String>,
    port: Option<i32>,
    app_protocol: Option<String>,
}

impl Lean for discovery::EndpointSlice {
    type Wire = SliceWire;

    fn from_wire(w: SliceWire) -> Self {
        discovery::EndpointSlice {
            metadata: w.metadata.into(),
            address_type: w.address_type,
            endpoints: ListField::of(each(w.endpoints)),
            ports: each(w.ports),
        }
    }
}

// ---- Node ----

#[derive(Deserialize, Default)]
#[serde(default)]
/// What proxyd reads of a Node (see [`Lean`]).
pub struct NodeWire {
    #[serde(deserialize_with = "zero")]
    metadata: Meta,
    spec: Option<NodeSpec>,
    status: Option<NodeStatus>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeSpec {
    #[serde(rename = "podCIDR")]
    pod_cidr: Option<String>,
    #[serde(rename = "podCIDRs", deserialize_with = "list")]
    pod_cidrs: Option<Vec<String>>,
    #[serde(deserialize_with = "list")]
    taints: Option<Vec<Taint>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Taint {
    #[serde(deserialize_with = "zero")]
    key: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeStatus {
    #[serde(deserialize_with = "list")]
    addresses: Option<Vec<NodeAddress>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeAddress {
    #[serde(rename = "type", deserialize_with = "zero")]
    type_: String,
    #[serde(deserialize_with = "zero")]
    address: String,
}

impl Lean for core::Node {
    type Wire = NodeWire;

    fn from_wire(w: NodeWire) -> Self {
        core::Node {
            metadata: w.metadata.into(),
            spec: w.spec.map(|s| core::NodeSpec {
                pod_cidr: s.pod_cidr,
                pod_cidrs: s.pod_cidrs,
                taints: each(s.taints),
                ..Default::default()
            }),
            status: w.status.map(|s| core::NodeStatus {
                addresses: each(s.addresses),
                ..Default::default()
            }),
        }
    }
}

// ---- Pod ----

#[derive(Deserialize, Default)]
#[serde(default)]
/// What proxyd reads of a Pod (see [`Lean`]).
pub struct PodWire {
    #[serde(deserialize_with = "zero")]
    metadata: Meta,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodSpec {
    node_name: Option<String>,
    host_network: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PodStatus {
    phase: Option<String>,
}

impl Lean for core::Pod {
    type Wire = PodWire;

    fn from_wire(w: PodWire) -> Self {
        core::Pod {
            metadata: w.metadata.into(),
            spec: w.spec.map(|s| core::PodSpec {
                node_name: s.node_name,
                host_network: s.host_network,
                ..Default::default()
            }),
            status: w.status.map(|s| core::PodStatus {
                phase: s.phase,
                ..Default::default()
            }),
        }
    }
}

// ---- ServiceCIDR ----

#[derive(Deserialize, Default)]
#[serde(default)]
/// What proxyd reads of a ServiceCIDR (see [`Lean`]).
pub struct ServiceCidrWire {
    #[serde(deserialize_with = "zero")]
    metadata: Meta,
    spec: Option<ServiceCidrSpec>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ServiceCidrSpec {
    #[serde(deserialize_with = "list")]
    cidrs: Option<Vec<String>>,
}

impl Lean for networking::ServiceCIDR {
    type Wire = ServiceCidrWire;

    fn from_wire(w: ServiceCidrWire) -> Self {
        networking::ServiceCIDR {
            metadata: w.metadata.into(),
            spec: w.spec.map(|s| networking::ServiceCIDRSpec { cidrs: s.cidrs }),
            status: None,
        }
    }
}
