//! EndpointSlices of Kubernetes Services on secondary networks.
//!
//! A Service on a secondary network (multus mode's: labelled with the
//! proxy's name and annotated `k8s.v1.cni.cncf.io/service-network`) is
//! served at each selected pod's address *on that network*, which the
//! pod's `k8s.v1.cni.cncf.io/network-status` annotation lists. This crate
//! computes those endpoints ([`wanted`]) with everything Kubernetes' own
//! EndpointSlice controller writes for a pod (conditions, node, zone,
//! hostname, reference, resolved ports), and the fewest writes that keep a
//! Service's slices holding them ([`reconcile::reconcile`]), by the
//! upstream controller's rules: a change to one pod is one slice written.
//!
//! It reads objects and returns plans; it writes nothing. A controller
//! lists and watches Services, Pods, Nodes and the slices it owns, and
//! applies each [`reconcile::Plan`].
//!
//! ```
//! use std::collections::BTreeMap;
//! use k8s_openapi::api::core::v1::{Pod, Service};
//! use network_slices::reconcile::{SliceRules, reconcile};
//!
//! # fn objects() -> (Service, Vec<Pod>) { (Service::default(), Vec::new()) }
//! let (service, pods) = objects();
//! let network = network_slices::Network::Multus(informer_glue::multus::NetworkName::parse("macvlan1", "default").unwrap());
//! let lookups = network_slices::Lookups { nodes: &BTreeMap::new(), claims: &BTreeMap::new() };
//! let (wanted, left_out) = network_slices::wanted(&service, &pods, &network, lookups);
//! let rules = SliceRules { controller: "multus-endpointslice-controller.npwg.k8s.io".into(), max_endpoints_per_slice: 100 };
//! let plan = reconcile(&service, &wanted, &[], &rules, None);
//! assert!(left_out.is_empty());
//! assert_eq!(plan.create.len(), 1, "a Service without endpoints keeps a placeholder slice");
//! ```

pub mod controller;
pub mod dra;
pub mod endpoint;
pub mod leader;
pub mod metrics;
pub mod reconcile;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};

pub use endpoint::{AddressType, LeftOut, Lookups, Network, PodEndpoint};

/// The address types a Service's slices have: its `ipFamilies`, else its
/// cluster IPs' families, else IPv4 (as upstream).
pub fn address_types(svc: &Service) -> Vec<AddressType> {
    let spec = svc.spec.as_ref();
    let mut types: Vec<AddressType> = spec
        .and_then(|s| s.ip_families.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|f| AddressType::parse(f))
        .collect();
    if types.is_empty() {
        let ips = spec.and_then(|s| s.cluster_ips.clone()).unwrap_or_default();
        for ip in ips.iter().filter_map(|ip| ip.parse::<std::net::IpAddr>().ok()) {
            types.push(if ip.is_ipv4() { AddressType::V4 } else { AddressType::V6 });
        }
    }
    if types.is_empty() {
        types.push(AddressType::V4);
    }
    types.dedup();
    types
}

/// Whether `svc`'s selector picks `pod`: the same namespace, and every
/// label of a selector that is not empty (a Service without one has its
/// slices written by someone else, as upstream leaves it).
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(selector) = svc
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !s.is_empty())
    else {
        return false;
    };
    let labels = pod.metadata.labels.as_ref();
    svc.metadata.namespace == pod.metadata.namespace
        && selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// `svc`'s wanted endpoints on `network`, by address type, from the pods
/// its selector picks among `pods` (with the nodes, for zones, and the
/// claims, for DRA networks); and the pods left out, with why.
pub fn wanted<'a>(
    svc: &Service,
    pods: impl IntoIterator<Item = &'a Pod>,
    network: &Network,
    lookups: Lookups<'_>,
) -> (BTreeMap<AddressType, Vec<PodEndpoint>>, Vec<LeftOut>) {
    let mut out: BTreeMap<AddressType, Vec<PodEndpoint>> = BTreeMap::new();
    let mut left_out = Vec::new();
    let types = address_types(svc);
    for t in &types {
        out.entry(*t).or_default();
    }
    for pod in pods.into_iter().filter(|p| selects(svc, p)) {
        for (i, t) in types.iter().enumerate() {
            match endpoint::pod_endpoint(svc, pod, network, *t, lookups) {
                Ok(Some(e)) => out.entry(*t).or_default().push(e),
                Ok(None) => {}
                // Said once per pod, not once per address type.
                Err(why) if i == 0 => left_out.push(why),
                Err(_) => {}
            }
        }
    }
    (out, left_out)
}

#[cfg(test)]
mod tests {
    use informer_glue::multus::NETWORK_STATUS_ANNOTATION;
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(name: &str, app: &str, status: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
                annotations: status.map(|s| BTreeMap::from([(NETWORK_STATUS_ANNOTATION.to_owned(), s.to_owned())])),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn each_family_gets_the_selected_pods_addresses_and_a_pod_left_out_is_said_once() {
        let svc = Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("web".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                ip_families: Some(vec!["IPv4".into(), "IPv6".into()]),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        let both = r#"[{"name":"ns/net1","interface":"net1","ips":["192.168.1.2","fd00:1::2"]}]"#;
        let pods = [
            pod("a", "web", Some(both)),
            pod("b", "web", None),
            pod("c", "db", Some(both)),
        ];
        let network = Network::Multus(informer_glue::multus::NetworkName::parse("net1", "ns").unwrap());
        let lookups = Lookups {
            nodes: &BTreeMap::new(),
            claims: &BTreeMap::new(),
        };
        let (wanted, left_out) = wanted(&svc, &pods, &network, lookups);
        let addresses =
            |t: AddressType| -> Vec<String> { wanted[&t].iter().flat_map(|e| e.endpoint.addresses.clone()).collect() };
        assert_eq!(addresses(AddressType::V4), ["192.168.1.2"]);
        assert_eq!(addresses(AddressType::V6), ["fd00:1::2"]);
        assert_eq!(left_out, [LeftOut::NoNetworkStatus { pod: "ns/b".into() }]);
        let mut no_selector = svc.clone();
        no_selector.spec.as_mut().unwrap().selector = None;
        assert!(!selects(&no_selector, &pods[0]), "left to its owner, as upstream");
    }
}
