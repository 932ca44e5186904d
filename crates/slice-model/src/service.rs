//! The model of a Service as a proxier needs it. Conversion from the API
//! object lives in `informer-glue`.

use std::net::IpAddr;
use std::num::NonZeroU16;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use crate::{Protocol, ServiceName};

/// The service's `spec.type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum ServiceType {
    /// A virtual IP inside the cluster.
    #[default]
    ClusterIp,
    /// ClusterIP plus a port on every node.
    NodePort,
    /// NodePort plus an external load balancer.
    LoadBalancer,
    /// A DNS alias: nothing to proxy.
    ExternalName,
}

/// `spec.internalTrafficPolicy` / `spec.externalTrafficPolicy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum TrafficPolicy {
    /// Any ready endpoint in the cluster.
    #[default]
    Cluster,
    /// Only endpoints on the receiving node.
    Local,
}

/// One port of a service.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ServicePort {
    /// `ports[].name` (`""` when the service has one unnamed port).
    pub name: Arc<str>,
    /// `ports[].protocol` (TCP when absent).
    pub protocol: Protocol,
    /// `ports[].port`, the port on the cluster IP.
    pub port: NonZeroU16,
    /// `ports[].nodePort`, for NodePort and LoadBalancer services.
    pub node_port: Option<NonZeroU16>,
}

/// A service, with what kube-proxy reads of it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ServiceInfo {
    /// Namespace and name.
    pub name: ServiceName,
    /// `spec.type`.
    pub service_type: ServiceType,
    /// `spec.clusterIPs` (or `spec.clusterIP`); empty for headless services.
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.clusterIP` is `None`.
    pub headless: bool,
    /// `spec.ports`.
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` whose `ipMode` is unset or `VIP`.
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// ClientIP session affinity and its timeout; `None` without affinity.
    pub session_affinity: Option<Duration>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: TrafficPolicy,
    /// `spec.internalTrafficPolicy`.
    pub internal_traffic_policy: TrafficPolicy,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: Option<NonZeroU16>,
    /// `spec.trafficDistribution` (e.g. `PreferClose`).
    pub traffic_distribution: Option<Arc<str>>,
}

impl ServiceInfo {
    /// A ClusterIP service with no IPs and no ports: what a Service object
    /// without a `spec` amounts to.
    pub fn new(name: ServiceName) -> Self {
        Self {
            name,
            service_type: ServiceType::default(),
            cluster_ips: Vec::new(),
            headless: false,
            ports: Vec::new(),
            external_ips: Vec::new(),
            load_balancer_ips: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            session_affinity: None,
            external_traffic_policy: TrafficPolicy::default(),
            internal_traffic_policy: TrafficPolicy::default(),
            health_check_node_port: None,
            traffic_distribution: None,
        }
    }

    /// Whether a proxier has anything to program for this service: not
    /// headless and not an ExternalName alias.
    pub fn is_proxied(&self) -> bool {
        !self.headless && self.service_type != ServiceType::ExternalName && !self.cluster_ips.is_empty()
    }
}
