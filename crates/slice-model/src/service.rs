//! The model of a Service: what routing reads of it. Conversion from the API
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

/// The API's spelling: `ClusterIP`, `NodePort`, `LoadBalancer`,
/// `ExternalName`.
impl std::fmt::Display for ServiceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ClusterIp => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
            Self::ExternalName => "ExternalName",
        })
    }
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
    /// `ports[].appProtocol` (e.g. `kubernetes.io/h2c`), for clients that
    /// pick a protocol; a proxy does not read it.
    pub app_protocol: Option<Arc<str>>,
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
    /// `spec.publishNotReadyAddresses`: DNS publishes endpoints that are
    /// not ready (a proxy does not read it).
    pub publish_not_ready_addresses: bool,
    /// `spec.externalName`, for ExternalName services (what DNS answers
    /// with a CNAME; a proxy programs nothing for them).
    pub external_name: Option<Arc<str>>,
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
            publish_not_ready_addresses: false,
            external_name: None,
        }
    }

    /// Whether a proxier has anything to program for this service: not
    /// headless and not an ExternalName alias.
    pub fn is_proxied(&self) -> bool {
        !self.headless && self.service_type != ServiceType::ExternalName && !self.cluster_ips.is_empty()
    }
}

/// One port of a service in one IP family: its cluster IP of that
/// family, its number, node port, policies and affinity, as routing
/// (kube-proxy's, a load balancer's) reads them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ServicePortInfo {
    /// Service, port name and protocol.
    pub name: crate::ServicePortName,
    /// The service's cluster IP of this family.
    pub cluster_ip: IpAddr,
    /// The port on the cluster IP (and external/load-balancer IPs).
    pub port: NonZeroU16,
    /// The node port, for NodePort and LoadBalancer services.
    pub node_port: Option<NonZeroU16>,
    /// External IPs of this family.
    pub external_ips: Vec<IpAddr>,
    /// Load-balancer ingress IPs of this family.
    pub load_balancer_ips: Vec<IpAddr>,
    /// Load-balancer source ranges of this family.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// ClientIP affinity timeout.
    pub session_affinity: Option<Duration>,
    /// `externalTrafficPolicy: Local`.
    pub external_policy_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// The health-check node port (LoadBalancer with external policy Local).
    pub health_check_node_port: Option<NonZeroU16>,
}

impl ServicePortInfo {
    /// Reachable from outside the cluster.
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty() || !self.load_balancer_ips.is_empty()
    }
}

impl ServiceInfo {
    /// The ports a proxier of `family` programs, sorted by name and
    /// protocol; none for a headless or ExternalName service, or one without
    /// a cluster IP of this family (as kube-proxy skips them).
    pub fn ports_for(&self, family: crate::IpFamily) -> Vec<ServicePortInfo> {
        if !self.is_proxied() {
            return Vec::new();
        }
        let of_family = |ip: &&IpAddr| crate::IpFamily::of(ip) == family;
        let Some(cluster_ip) = self.cluster_ips.iter().find(of_family).copied() else {
            return Vec::new();
        };
        let node_ports = matches!(self.service_type, ServiceType::NodePort | ServiceType::LoadBalancer);
        let lb = self.service_type == ServiceType::LoadBalancer;
        let external_ips: Vec<IpAddr> = self.external_ips.iter().filter(of_family).copied().collect();
        let lb_ips: Vec<IpAddr> = if lb {
            self.load_balancer_ips.iter().filter(of_family).copied().collect()
        } else {
            Vec::new()
        };
        let ranges: Vec<IpNet> = if lb {
            let net_family = |n: &&IpNet| {
                matches!(
                    (n, family),
                    (IpNet::V4(_), crate::IpFamily::V4) | (IpNet::V6(_), crate::IpFamily::V6)
                )
            };
            self.load_balancer_source_ranges
                .iter()
                .filter(net_family)
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let external_local = self.external_traffic_policy == TrafficPolicy::Local;
        let mut ports: Vec<ServicePortInfo> = self
            .ports
            .iter()
            .map(|p| ServicePortInfo {
                name: crate::ServicePortName::new(self.name.clone(), p.name.clone(), p.protocol),
                cluster_ip,
                port: p.port,
                node_port: p.node_port.filter(|_| node_ports),
                external_ips: external_ips.clone(),
                load_balancer_ips: lb_ips.clone(),
                load_balancer_source_ranges: ranges.clone(),
                session_affinity: self.session_affinity,
                external_policy_local: external_local,
                internal_policy_local: self.internal_traffic_policy == TrafficPolicy::Local,
                health_check_node_port: self.health_check_node_port.filter(|_| lb && external_local),
            })
            .collect();
        ports.sort_by(|a, b| a.name.cmp(&b.name));
        ports.dedup_by(|b, a| a.name == b.name);
        ports
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IpFamily, ServiceName};

    fn svc() -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", "web"));
        s.cluster_ips = vec!["10.96.0.1".parse().unwrap(), "fd00::1".parse().unwrap()];
        s.ports = vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: NonZeroU16::new(80).unwrap(),
            node_port: NonZeroU16::new(30080),
            app_protocol: None,
        }];
        s.external_ips = vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        s
    }

    #[test]
    fn ports_are_per_family() {
        let s = svc();
        let v4 = s.ports_for(IpFamily::V4);
        assert_eq!(v4.len(), 1);
        assert_eq!(v4[0].cluster_ip.to_string(), "10.96.0.1");
        assert_eq!(v4[0].external_ips.len(), 1);
        assert_eq!(v4[0].node_port, None, "a ClusterIP service has no node port");
        let v6 = s.ports_for(IpFamily::V6);
        assert_eq!(v6[0].cluster_ip.to_string(), "fd00::1");
        assert_eq!(v6[0].external_ips[0].to_string(), "2001:db8::1");
    }

    #[test]
    fn skipped_services_have_no_ports() {
        let mut s = svc();
        s.cluster_ips.truncate(1);
        assert!(s.ports_for(IpFamily::V6).is_empty(), "no cluster IP of the family");
        s.headless = true;
        assert!(s.ports_for(IpFamily::V4).is_empty());
        let mut e = svc();
        e.service_type = ServiceType::ExternalName;
        assert!(e.ports_for(IpFamily::V4).is_empty());
    }

    #[test]
    fn load_balancer_fields_only_for_load_balancers() {
        let mut s = svc();
        s.load_balancer_ips = vec!["203.0.113.1".parse().unwrap()];
        s.load_balancer_source_ranges = vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()];
        s.health_check_node_port = NonZeroU16::new(32000);
        s.external_traffic_policy = TrafficPolicy::Local;
        let p = &s.ports_for(IpFamily::V4)[0];
        assert!(p.load_balancer_ips.is_empty() && p.health_check_node_port.is_none());
        s.service_type = ServiceType::LoadBalancer;
        let p = &s.ports_for(IpFamily::V4)[0];
        assert_eq!(p.load_balancer_ips.len(), 1);
        assert_eq!(p.load_balancer_source_ranges.len(), 1, "only the family's ranges");
        assert_eq!(p.health_check_node_port.map(|p| p.get()), Some(32000));
        assert_eq!(p.node_port.map(|p| p.get()), Some(30080));
        assert!(p.externally_accessible());
    }
}
