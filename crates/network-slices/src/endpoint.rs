//! One pod as an endpoint of a Service on a secondary network: its
//! address there (from its `network-status`), its conditions, node, zone,
//! hostname and reference, and the ports it serves, each as Kubernetes'
//! EndpointSlice controller computes them for the pod's primary address.

use std::collections::BTreeMap;
use std::net::IpAddr;

use informer_glue::multus::{NETWORK_STATUS_ANNOTATION, NetworkName, parse_network_status};

use crate::dra::{ClaimNetwork, claim_names, claim_network};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The node label holding its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Where a Service's pods have the addresses it is served at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Network {
    /// A Multus network: each pod's `network-status` entry for it.
    Multus(NetworkName),
    /// A DRA network, by DeviceClass: the network data the driver reported
    /// in each pod's ResourceClaim for a device of the class.
    DeviceClass(String),
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Multus(n) => write!(f, "{n}"),
            Self::DeviceClass(c) => write!(f, "device class {c}"),
        }
    }
}

/// What an endpoint is made from besides the Service and the pod.
#[derive(Clone, Copy, Debug)]
pub struct Lookups<'a> {
    /// Nodes by name (their zone).
    pub nodes: &'a BTreeMap<String, Node>,
    /// ResourceClaims (as JSON) by namespace and name.
    pub claims: &'a BTreeMap<(String, String), serde_json::Value>,
}

/// An EndpointSlice's address type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressType {
    /// `IPv4`.
    V4,
    /// `IPv6`.
    V6,
}

impl AddressType {
    /// As the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }

    /// The API's value, if it is one of the two.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(Self::V4),
            "IPv6" => Some(Self::V6),
            _ => None,
        }
    }

    fn holds(self, ip: &IpAddr) -> bool {
        matches!((self, ip), (Self::V4, IpAddr::V4(_)) | (Self::V6, IpAddr::V6(_)))
    }
}

/// Why a pod selected by a Service has no endpoint on its network: each is
/// said and counted, naming the pod.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeftOut {
    /// The pod has no `network-status` annotation (yet).
    #[error("pod {pod}: no {NETWORK_STATUS_ANNOTATION} annotation")]
    NoNetworkStatus {
        /// `namespace/name`.
        pod: String,
    },
    /// The annotation cannot be read.
    #[error("pod {pod}: {reason}")]
    BadNetworkStatus {
        /// `namespace/name`.
        pod: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The annotation lists no interface on the network.
    #[error("pod {pod}: {NETWORK_STATUS_ANNOTATION} has no interface on network {network}")]
    NotOnNetwork {
        /// `namespace/name`.
        pod: String,
        /// The Service's network.
        network: String,
    },
    /// The pod's node is not known (and the Service does not publish
    /// addresses that are not ready), as upstream skips it.
    #[error("pod {pod}: its node {node} is not known")]
    NodeNotFound {
        /// `namespace/name`.
        pod: String,
        /// The node it names.
        node: String,
    },
    /// None of the pod's ResourceClaims requests a device of the class.
    #[error("pod {pod}: none of its ResourceClaims requests a device of class {class}")]
    NoClaim {
        /// `namespace/name`.
        pod: String,
        /// The DeviceClass.
        class: String,
    },
    /// The claim is not allocated yet, or its driver has reported no
    /// network data for the device yet.
    #[error("pod {pod}: ResourceClaim {claim} has no network data for its device of class {class} yet")]
    NetworkDataPending {
        /// `namespace/name`.
        pod: String,
        /// The claim's name.
        claim: String,
        /// The DeviceClass.
        class: String,
    },
}

/// A pod's endpoint for one Service: the endpoint and the ports it serves
/// (those of the Service's ports the pod has; a named target port the pod
/// lacks is left out, as upstream leaves it out).
#[derive(Clone, Debug, PartialEq)]
pub struct PodEndpoint {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its ports, in the Service's order.
    pub ports: Vec<EndpointPort>,
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether upstream's EndpointSlice controller lists the pod at all: not
/// one that has finished (`Succeeded`, `Failed`). Terminating pods are
/// listed, with their conditions saying so.
pub fn takes_part(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The pod's `Ready` condition is `True`.
fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's addresses of `address_type` on `network`.
pub fn addresses_on(
    pod: &Pod,
    network: &Network,
    address_type: AddressType,
    claims: &BTreeMap<(String, String), serde_json::Value>,
) -> Result<Vec<IpAddr>, LeftOut> {
    let ips = match network {
        Network::Multus(n) => multus_addresses(pod, n)?,
        Network::DeviceClass(class) => claim_addresses(pod, class, claims)?,
    };
    Ok(ips.into_iter().filter(|ip| address_type.holds(ip)).collect())
}

/// The addresses the pod's claims' devices of `class` have.
fn claim_addresses(
    pod: &Pod,
    class: &str,
    claims: &BTreeMap<(String, String), serde_json::Value>,
) -> Result<Vec<IpAddr>, LeftOut> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut pending = None;
    for name in claim_names(pod) {
        let Some(json) = claims.get(&(namespace.clone(), name.clone())) else {
            continue;
        };
        match claim_network(json, class) {
            Ok(ClaimNetwork::Attached { ips, .. }) => return Ok(ips),
            Ok(ClaimNetwork::Pending) => pending = Some(name),
            Ok(ClaimNetwork::NotRequested) | Err(_) => {}
        }
    }
    Err(match pending {
        Some(claim) => LeftOut::NetworkDataPending {
            pod: pod_key(pod),
            claim,
            class: class.to_owned(),
        },
        None => LeftOut::NoClaim {
            pod: pod_key(pod),
            class: class.to_owned(),
        },
    })
}

/// The pod's addresses on a Multus network.
fn multus_addresses(pod: &Pod, network: &NetworkName) -> Result<Vec<IpAddr>, LeftOut> {
    let key = pod_key(pod);
    let json = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NETWORK_STATUS_ANNOTATION))
        .ok_or_else(|| LeftOut::NoNetworkStatus { pod: key.clone() })?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let (attachments, _) = parse_network_status(json, namespace).map_err(|reason| LeftOut::BadNetworkStatus {
        pod: key.clone(),
        reason,
    })?;
    let attachment = attachments
        .iter()
        .find(|a| a.network == *network)
        .ok_or_else(|| LeftOut::NotOnNetwork {
            pod: key,
            network: network.to_string(),
        })?;
    Ok(attachment.ips.clone())
}

/// The ports of `svc` the pod serves: a numeric target port as it is (the
/// service port when none is given), a named one looked up among the
/// pod's container ports of the same protocol.
pub fn ports_of(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let Some(ports) = svc.spec.as_ref().and_then(|s| s.ports.as_ref()) else {
        return Vec::new();
    };
    ports
        .iter()
        .filter_map(|sp| {
            let protocol = sp.protocol.clone().unwrap_or_else(|| "TCP".into());
            let number = match &sp.target_port {
                None => sp.port,
                Some(IntOrString::Int(n)) => *n,
                Some(IntOrString::String(name)) => named_port(pod, name, &protocol)?,
            };
            Some(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(number),
                protocol: Some(protocol),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect()
}

/// The number of the pod's container port named `name` with `protocol`.
fn named_port(pod: &Pod, name: &str, protocol: &str) -> Option<i32> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(name) && p.protocol.as_deref().unwrap_or("TCP") == protocol)
        .map(|p| p.container_port)
}

/// The pod's endpoint of `address_type` for `svc` on `network`: `Ok(None)`
/// when it has no address of that type there (or has finished).
pub fn pod_endpoint(
    svc: &Service,
    pod: &Pod,
    network: &Network,
    address_type: AddressType,
    lookups: Lookups<'_>,
) -> Result<Option<PodEndpoint>, LeftOut> {
    if !takes_part(pod) {
        return Ok(None);
    }
    let nodes = lookups.nodes;
    let addresses = addresses_on(pod, network, address_type, lookups.claims)?;
    let Some(first) = addresses.first() else {
        return Ok(None);
    };
    let spec = svc.spec.as_ref();
    let publish_not_ready = spec.and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let node = node_name.as_ref().and_then(|n| nodes.get(n));
    if let Some(name) = &node_name
        && node.is_none()
        && !publish_not_ready
    {
        return Err(LeftOut::NodeNotFound {
            pod: pod_key(pod),
            node: name.clone(),
        });
    }
    let serving = publish_not_ready || is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    // As upstream: never ready while terminating, unless the Service
    // publishes addresses that are not ready.
    let ready = publish_not_ready || (serving && !terminating);
    let zone = node
        .and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(ZONE_LABEL))
        .cloned();
    let endpoint = Endpoint {
        addresses: vec![first.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: hostname(svc, pod),
        node_name,
        zone,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
        ..Endpoint::default()
    };
    Ok(Some(PodEndpoint {
        endpoint,
        ports: ports_of(svc, pod),
    }))
}

/// The pod's hostname, where upstream sets it: the pod names one and its
/// subdomain is the Service, in the Service's namespace.
fn hostname(svc: &Service, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let name = spec.hostname.as_ref().filter(|h| !h.is_empty())?;
    let same_namespace = svc.metadata.namespace == pod.metadata.namespace;
    (same_namespace && spec.subdomain.as_deref() == svc.metadata.name.as_deref()).then(|| name.clone())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn net() -> Network {
        Network::Multus(NetworkName::parse("macvlan1", "ns").unwrap())
    }

    const NO_CLAIMS: &BTreeMap<(String, String), serde_json::Value> = &BTreeMap::new();

    fn lookups_of(nodes: &BTreeMap<String, Node>) -> Lookups<'_> {
        Lookups {
            nodes,
            claims: NO_CLAIMS,
        }
    }

    fn status(entries: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(NETWORK_STATUS_ANNOTATION.to_owned(), entries.to_owned())])
    }

    fn pod(name: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                annotations: Some(status(
                    r#"[{"name":"cbr0","interface":"eth0","ips":["10.244.1.5"],"default":true},
                        {"name":"ns/macvlan1","interface":"net1","ips":["192.168.10.5","fd00:10::5"]}]"#,
                )),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-1".into()),
                containers: vec![Container {
                    name: "app".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: 8080,
                        protocol: Some("TCP".into()),
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn service(target: IntOrString) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("web".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(target),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn nodes() -> BTreeMap<String, Node> {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                labels: Some(BTreeMap::from([(ZONE_LABEL.to_owned(), "zone-a".to_owned())])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        BTreeMap::from([("node-1".to_owned(), node)])
    }

    fn conditions(e: &Endpoint) -> (bool, bool, bool) {
        let c = e.conditions.clone().unwrap_or_default();
        (
            c.ready.unwrap_or_default(),
            c.serving.unwrap_or_default(),
            c.terminating.unwrap_or_default(),
        )
    }

    #[test]
    fn the_address_on_the_network_with_node_zone_reference_and_named_port() {
        let svc = service(IntOrString::String("http".into()));
        let e = pod_endpoint(&svc, &pod("a", true), &net(), AddressType::V4, lookups_of(&nodes()))
            .unwrap()
            .unwrap();
        assert_eq!(
            e.endpoint.addresses,
            ["192.168.10.5"],
            "the secondary address, not 10.244.1.5"
        );
        assert_eq!(e.endpoint.node_name.as_deref(), Some("node-1"));
        assert_eq!(e.endpoint.zone.as_deref(), Some("zone-a"));
        let target = e.endpoint.target_ref.unwrap();
        assert_eq!(
            (target.kind.as_deref(), target.name.as_deref()),
            (Some("Pod"), Some("a"))
        );
        assert_eq!(target.uid.as_deref(), Some("uid-a"));
        assert_eq!(e.ports.len(), 1);
        assert_eq!(
            (e.ports[0].name.as_deref(), e.ports[0].port),
            (Some("http"), Some(8080))
        );
        let six = pod_endpoint(&svc, &pod("a", true), &net(), AddressType::V6, lookups_of(&nodes()))
            .unwrap()
            .unwrap();
        assert_eq!(six.endpoint.addresses, ["fd00:10::5"]);
    }

    #[test]
    fn conditions_as_upstream_computes_them() {
        let svc = service(IntOrString::Int(8080));
        let at = |p: &Pod, s: &Service| {
            let e = pod_endpoint(s, p, &net(), AddressType::V4, lookups_of(&nodes()))
                .unwrap()
                .unwrap();
            conditions(&e.endpoint)
        };
        assert_eq!(at(&pod("a", true), &svc), (true, true, false));
        assert_eq!(at(&pod("a", false), &svc), (false, false, false));
        let mut going = pod("a", true);
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(at(&going, &svc), (false, true, true), "terminating, still serving");
        let mut publish = service(IntOrString::Int(8080));
        publish.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        assert_eq!(at(&pod("a", false), &publish), (true, true, false));
        assert_eq!(at(&going, &publish), (true, true, true));
        let mut done = pod("a", true);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(
            pod_endpoint(&svc, &done, &net(), AddressType::V4, lookups_of(&nodes())),
            Ok(None)
        );
    }

    #[test]
    fn pods_without_an_address_on_the_network_are_left_out_with_the_reason() {
        let svc = service(IntOrString::Int(8080));
        let with = |annotations: Option<BTreeMap<String, String>>| {
            let mut p = pod("b", true);
            p.metadata.annotations = annotations;
            pod_endpoint(&svc, &p, &net(), AddressType::V4, lookups_of(&nodes()))
        };
        assert!(matches!(with(None), Err(LeftOut::NoNetworkStatus { .. })));
        let bad = with(Some(status("[{")));
        assert!(
            matches!(&bad, Err(LeftOut::BadNetworkStatus { pod, .. }) if pod == "ns/b"),
            "{bad:?}"
        );
        let elsewhere = with(Some(status(
            r#"[{"name":"ns/other","interface":"net1","ips":["192.168.20.5"]}]"#,
        )));
        assert!(matches!(elsewhere, Err(LeftOut::NotOnNetwork { .. })));
        let six_only = with(Some(status(
            r#"[{"name":"ns/macvlan1","interface":"net1","ips":["fd00:10::9"]}]"#,
        )));
        assert_eq!(
            six_only,
            Ok(None),
            "no IPv4 address there: not in the IPv4 slices, nothing wrong"
        );
        let mut lost = pod("c", true);
        lost.spec.as_mut().unwrap().node_name = Some("gone".into());
        assert!(matches!(
            pod_endpoint(&svc, &lost, &net(), AddressType::V4, lookups_of(&nodes())),
            Err(LeftOut::NodeNotFound { .. })
        ));
    }

    #[test]
    fn a_named_port_the_pod_lacks_is_left_out_of_its_ports() {
        let svc = service(IntOrString::String("grpc".into()));
        let e = pod_endpoint(&svc, &pod("a", true), &net(), AddressType::V4, lookups_of(&nodes()))
            .unwrap()
            .unwrap();
        assert!(e.ports.is_empty());
        let mut udp = service(IntOrString::String("http".into()));
        udp.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
        assert!(
            ports_of(&udp, &pod("a", true)).is_empty(),
            "the name with another protocol"
        );
    }

    #[test]
    fn the_hostname_only_for_a_pod_whose_subdomain_is_the_service() {
        let svc = service(IntOrString::Int(8080));
        let mut p = pod("a", true);
        p.spec.as_mut().unwrap().hostname = Some("db-0".into());
        assert_eq!(hostname(&svc, &p), None, "no subdomain");
        p.spec.as_mut().unwrap().subdomain = Some("web".into());
        assert_eq!(hostname(&svc, &p).as_deref(), Some("db-0"));
        p.metadata.namespace = Some("other".into());
        assert_eq!(hostname(&svc, &p), None, "another namespace");
    }
}
