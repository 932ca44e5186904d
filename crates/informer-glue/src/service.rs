//! `k8s-openapi` Services into [`ServiceInfo`].

use std::fmt;
use std::net::IpAddr;
use std::num::NonZeroU16;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1 as core;
use slice_model::{Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, TrafficPolicy, parse_endpoint_ip};

/// kube-proxy's default ClientIP affinity timeout (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);

/// Why a Service is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// `metadata.namespace` or `metadata.name` is missing or empty.
    #[error("service {namespace:?}/{name:?}: metadata.namespace and metadata.name must be set")]
    MissingName {
        /// The namespace as given.
        namespace: String,
        /// The name as given.
        name: String,
    },
}

impl ServiceError {
    /// Every [`reason`](Self::reason), for metrics that start at zero.
    pub const REASONS: &'static [&'static str] = &["missing_name"];

    /// A short label for metrics: `missing_name`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingName { .. } => "missing_name",
        }
    }
}

/// A part of a Service that was skipped, naming the service and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceWarning {
    /// The service.
    pub service: ServiceName,
    /// The field, e.g. `spec.ports[1].protocol`.
    pub field: String,
    /// A short label for metrics (one of [`ServiceWarning::REASONS`]).
    pub reason: &'static str,
    /// What was wrong with it.
    pub problem: String,
}

impl ServiceWarning {
    /// Every [`reason`](Self::reason), for metrics that start at zero.
    pub const REASONS: &'static [&'static str] = &[
        "invalid_address",
        "invalid_port",
        "invalid_traffic_policy",
        "invalid_type",
        "unknown_protocol",
        "invalid_cidr",
        "schema_mismatch",
    ];
}

impl fmt::Display for ServiceWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "service {}: {}: {}; ignored", self.service, self.field, self.problem)
    }
}

struct Ctx {
    name: ServiceName,
    warnings: Vec<ServiceWarning>,
}

impl Ctx {
    fn warn(&mut self, reason: &'static str, field: String, problem: String) {
        self.warnings.push(ServiceWarning {
            service: self.name.clone(),
            field,
            reason,
            problem,
        });
    }

    fn ip(&mut self, field: String, s: &str) -> Option<IpAddr> {
        let ip = parse_endpoint_ip(s);
        if ip.is_none() {
            self.warn("invalid_address", field, format!("{s:?} is not a valid IP address"));
        }
        ip
    }

    fn port(&mut self, field: String, p: i32) -> Option<NonZeroU16> {
        let port = u16::try_from(p).ok().and_then(NonZeroU16::new);
        if port.is_none() {
            self.warn("invalid_port", field, format!("{p} is outside 1..65535"));
        }
        port
    }

    fn policy(&mut self, field: &str, p: Option<&str>) -> TrafficPolicy {
        match p {
            None | Some("Cluster") => TrafficPolicy::Cluster,
            Some("Local") => TrafficPolicy::Local,
            Some(other) => {
                self.warn(
                    "invalid_traffic_policy",
                    field.into(),
                    format!("{other:?} is not Cluster or Local; using Cluster"),
                );
                TrafficPolicy::Cluster
            }
        }
    }
}

/// Converts a Service. Malformed parts (an invalid IP, port, protocol or
/// CIDR) are skipped and named in the warnings.
pub fn service_from_k8s(svc: &core::Service) -> Result<(ServiceInfo, Vec<ServiceWarning>), ServiceError> {
    let meta = &svc.metadata;
    let name = match (meta.namespace.as_deref(), meta.name.as_deref()) {
        (Some(ns), Some(n)) if !ns.is_empty() && !n.is_empty() => ServiceName::new(ns, n),
        (ns, n) => {
            return Err(ServiceError::MissingName {
                namespace: ns.unwrap_or_default().into(),
                name: n.unwrap_or_default().into(),
            });
        }
    };
    let mut cx = Ctx {
        name: name.clone(),
        warnings: Vec::new(),
    };
    let mut info = ServiceInfo::new(name);
    let Some(spec) = &svc.spec else {
        return Ok((info, cx.warnings));
    };

    info.service_type = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIp,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => ServiceType::ExternalName,
        Some(other) => {
            cx.warn(
                "invalid_type",
                "spec.type".into(),
                format!("unknown type {other:?}; using ClusterIP"),
            );
            ServiceType::ClusterIp
        }
    };
    info.headless = spec.cluster_ip.as_deref() == Some("None");
    if !info.headless {
        // clusterIPs, when set, starts with clusterIP; older objects have
        // only clusterIP.
        let ips: Vec<(String, &str)> = match (&spec.cluster_ips, &spec.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => ips
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("spec.clusterIPs[{i}]"), s.as_str()))
                .collect(),
            (_, Some(ip)) if !ip.is_empty() => vec![("spec.clusterIP".into(), ip.as_str())],
            _ => Vec::new(),
        };
        info.cluster_ips = ips.into_iter().filter_map(|(f, s)| cx.ip(f, s)).collect();
    }
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let protocol = match p.protocol.as_deref() {
            None => Protocol::Tcp,
            Some(s) => match s.parse() {
                Ok(p) => p,
                Err(e) => {
                    cx.warn("unknown_protocol", format!("spec.ports[{i}].protocol"), format!("{e}"));
                    continue;
                }
            },
        };
        let Some(port) = cx.port(format!("spec.ports[{i}].port"), p.port) else {
            continue;
        };
        let node_port = match p.node_port {
            None | Some(0) => None,
            Some(n) => cx.port(format!("spec.ports[{i}].nodePort"), n),
        };
        info.ports.push(ServicePort {
            name: p.name.as_deref().unwrap_or_default().into(),
            protocol,
            port,
            node_port,
            app_protocol: p.app_protocol.as_deref().map(Into::into),
        });
    }
    info.external_ips = (spec.external_ips.iter().flatten().enumerate())
        .filter_map(|(i, s)| cx.ip(format!("spec.externalIPs[{i}]"), s))
        .collect();
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for (i, ing) in ingress.into_iter().flatten().enumerate() {
        // ipMode Proxy means the load balancer delivers to the node itself:
        // kube-proxy must not short-circuit that IP.
        if !matches!(ing.ip_mode.as_deref(), None | Some("VIP")) {
            continue;
        }
        if let Some(ip) = ing.ip.as_deref()
            && let Some(ip) = cx.ip(format!("status.loadBalancer.ingress[{i}].ip"), ip)
        {
            info.load_balancer_ips.push(ip);
        }
    }
    for (i, r) in spec.load_balancer_source_ranges.iter().flatten().enumerate() {
        match r.trim().parse::<IpNet>() {
            Ok(net) => info.load_balancer_source_ranges.push(net),
            Err(_) => cx.warn(
                "invalid_cidr",
                format!("spec.loadBalancerSourceRanges[{i}]"),
                format!("{r:?} is not a CIDR"),
            ),
        }
    }
    if spec.session_affinity.as_deref() == Some("ClientIP") {
        let timeout = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds);
        info.session_affinity = Some(match timeout {
            Some(t) if t > 0 => Duration::from_secs(t.unsigned_abs().into()),
            _ => DEFAULT_AFFINITY_TIMEOUT,
        });
    }
    info.external_traffic_policy = cx.policy("spec.externalTrafficPolicy", spec.external_traffic_policy.as_deref());
    info.internal_traffic_policy = cx.policy("spec.internalTrafficPolicy", spec.internal_traffic_policy.as_deref());
    info.health_check_node_port = match spec.health_check_node_port {
        None | Some(0) => None,
        Some(p) => cx.port("spec.healthCheckNodePort".into(), p),
    };
    info.traffic_distribution = spec.traffic_distribution.as_deref().map(Into::into);
    info.publish_not_ready_addresses = spec.publish_not_ready_addresses.unwrap_or(false);
    info.external_name = spec.external_name.as_deref().filter(|n| !n.is_empty()).map(Into::into);
    Ok((info, cx.warnings))
}
