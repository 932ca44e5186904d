//! Which Services and EndpointSlices a proxy handles, as kube-proxy decides
//! it: by label, in the API request where possible.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::core::{Expression, Selector, SelectorExt};

use crate::multus::{MANAGED_BY_LABEL, MULTUS_SLICE_CONTROLLER, SERVICE_NETWORK_ANNOTATION, service_network};

/// The label that hands a service to a non-default proxy.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// The label the EndpointSlice controller puts on the slices of headless
/// services.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// What to select.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `None`: the default proxy, which skips everything labelled with a
    /// proxy name. `Some(name)`: only objects labelled with this name (the
    /// multus-proxy mode).
    pub proxy_name: Option<String>,
    /// Multus mode: services must also name their network
    /// ([`crate::multus::SERVICE_NETWORK_ANNOTATION`]) and slices must come
    /// from the multus EndpointSlice controller.
    pub multus: bool,
}

/// What the proxy does with a Service ([`Selection::handling`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handling {
    /// It is proxied.
    Proxied,
    /// Its labels do not match this proxy's selector: another proxy's.
    NotSelected,
    /// `clusterIP: None`: clients reach its pods directly.
    Headless,
    /// Multus mode: an ExternalName alias (multus mode serves cluster IPs).
    ExternalName,
    /// Multus mode: no cluster IP.
    NoClusterIp,
    /// Multus mode: labelled for this proxy but names no network.
    NoNetwork,
    /// Multus mode: its network annotation does not parse.
    BadNetwork(String),
}

impl std::fmt::Display for Handling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Proxied => f.write_str("proxied"),
            Self::NotSelected => f.write_str("its labels do not match this proxy's selector"),
            Self::Headless => f.write_str("headless (clusterIP: None): clients reach the pods directly"),
            Self::ExternalName => f.write_str("an ExternalName service: multus mode serves ClusterIP services only"),
            Self::NoClusterIp => f.write_str("without a cluster IP: multus mode serves ClusterIP services only"),
            Self::NoNetwork => write!(
                f,
                "labelled for this proxy but has no {SERVICE_NETWORK_ANNOTATION} annotation"
            ),
            Self::BadNetwork(e) => write!(f, "{SERVICE_NETWORK_ANNOTATION}: {e}"),
        }
    }
}

impl Selection {
    /// The label selector for Service list and watch requests (its
    /// `Display` is the query's text); the client side checks what the
    /// server returned against the same value.
    pub fn label_selector(&self) -> Selector {
        let proxy = match &self.proxy_name {
            None => Expression::DoesNotExist(SERVICE_PROXY_NAME_LABEL.into()),
            Some(name) => Expression::Equal(SERVICE_PROXY_NAME_LABEL.into(), name.clone()),
        };
        Selector::from_iter([proxy, Expression::DoesNotExist(HEADLESS_LABEL.into())])
    }

    /// The label selector for EndpointSlice list and watch requests: in
    /// multus mode only the multus controller's slices (the default
    /// controller copies the service's labels onto slices of primary
    /// addresses).
    pub fn slice_label_selector(&self) -> Selector {
        let mut selector = self.label_selector();
        if self.multus {
            selector.extend(Expression::Equal(
                MANAGED_BY_LABEL.into(),
                MULTUS_SLICE_CONTROLLER.into(),
            ));
        }
        selector
    }

    /// The Service selector on the client side, for what a server (or a
    /// manifest file) returned.
    pub fn selects_labels(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.label_selector().matches(labels.unwrap_or(&BTreeMap::new()))
    }

    /// What the proxy does with this service, and if it leaves it out,
    /// why: the one place that decides (the watches, `render` and `explain`
    /// all ask here).
    pub fn handling(&self, svc: &Service) -> Handling {
        if !self.selects_labels(svc.metadata.labels.as_ref()) {
            return Handling::NotSelected;
        }
        let spec = svc.spec.as_ref();
        let cluster_ip = spec.and_then(|s| s.cluster_ip.as_deref());
        // A headless service's clients reach its pods directly; it is left
        // out before anything else (`clusterIP: None` cannot be selected by
        // label).
        if cluster_ip == Some("None") {
            return Handling::Headless;
        }
        if !self.multus {
            // ExternalName services and services without a cluster IP are
            // taken, as kube-proxy takes them: they program nothing.
            return Handling::Proxied;
        }
        // Multus mode serves cluster IPs only.
        if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            return Handling::ExternalName;
        }
        if cluster_ip.is_none_or(str::is_empty) {
            return Handling::NoClusterIp;
        }
        match service_network(svc) {
            Ok(Some(_)) => Handling::Proxied,
            Ok(None) => Handling::NoNetwork,
            Err(e) => Handling::BadNetwork(e.to_string()),
        }
    }

    /// Whether the proxy handles this service ([`Selection::handling`]);
    /// what multus mode cannot serve is said, and never reaches a pod's
    /// rules.
    pub fn selects_service(&self, svc: &Service) -> bool {
        match self.handling(svc) {
            Handling::Proxied => true,
            Handling::NotSelected | Handling::Headless => false,
            why => {
                tracing::warn!(
                    service = %format!(
                        "{}/{}",
                        svc.metadata.namespace.as_deref().unwrap_or("default"),
                        svc.metadata.name.as_deref().unwrap_or_default()
                    ),
                    "{why}; skipped"
                );
                false
            }
        }
    }

    /// Whether the proxy handles this slice (in multus mode: only the
    /// multus controller's).
    pub fn selects_slice(&self, slice: &EndpointSlice) -> bool {
        let labels = slice.metadata.labels.as_ref();
        self.slice_label_selector().matches(labels.unwrap_or(&BTreeMap::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn default_proxy_skips_named_and_headless() {
        let s = Selection::default();
        assert_eq!(
            s.label_selector().to_string(),
            "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
        );
        assert!(s.selects_labels(None));
        assert!(s.selects_labels(Some(&labels(&[("app", "x")]))));
        assert!(!s.selects_labels(Some(&labels(&[(SERVICE_PROXY_NAME_LABEL, "multus-proxy")]))));
        assert!(!s.selects_labels(Some(&labels(&[(HEADLESS_LABEL, "")]))));
    }

    #[test]
    fn named_proxy_takes_only_its_own() {
        let s = Selection {
            proxy_name: Some("multus-proxy".into()),
            multus: false,
        };
        assert_eq!(
            s.label_selector().to_string(),
            "service.kubernetes.io/service-proxy-name=multus-proxy,!service.kubernetes.io/headless"
        );
        assert!(!s.selects_labels(None));
        assert!(s.selects_labels(Some(&labels(&[(SERVICE_PROXY_NAME_LABEL, "multus-proxy")]))));
        assert!(!s.selects_labels(Some(&labels(&[(SERVICE_PROXY_NAME_LABEL, "other")]))));
    }

    #[test]
    fn headless_services_are_skipped() {
        let mut svc = Service {
            spec: Some(Default::default()),
            ..Service::default()
        };
        assert!(Selection::default().selects_service(&svc));
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        assert!(!Selection::default().selects_service(&svc));
    }

    #[test]
    fn multus_takes_annotated_services_and_the_multus_controllers_slices() {
        let s = Selection {
            proxy_name: Some("multus-proxy".into()),
            multus: true,
        };
        assert_eq!(
            s.slice_label_selector().to_string(),
            "service.kubernetes.io/service-proxy-name=multus-proxy,!service.kubernetes.io/headless,\
             endpointslice.kubernetes.io/managed-by=multus-endpointslice-controller.npwg.k8s.io"
        );
        let mut svc = Service {
            spec: Some(Default::default()),
            ..Service::default()
        };
        assert_eq!(s.handling(&svc), Handling::NotSelected);
        svc.metadata.labels = Some(labels(&[(SERVICE_PROXY_NAME_LABEL, "multus-proxy")]));
        assert!(!s.selects_service(&svc), "no network annotation");
        assert_eq!(s.handling(&svc), Handling::NoClusterIp, "said first");
        svc.metadata.annotations = Some(labels(&[(SERVICE_NETWORK_ANNOTATION, "macvlan1")]));
        assert!(!s.selects_service(&svc), "no cluster IP");
        assert_eq!(s.handling(&svc), Handling::NoClusterIp);
        svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.1".into());
        assert!(s.selects_service(&svc));
        assert_eq!(s.handling(&svc), Handling::Proxied);
        let annotations = svc.metadata.annotations.take();
        assert_eq!(s.handling(&svc), Handling::NoNetwork);
        svc.metadata.annotations = annotations;
        svc.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(!s.selects_service(&svc), "ExternalName");
        assert_eq!(s.handling(&svc), Handling::ExternalName);
        // Outside multus mode an ExternalName service is taken (it programs
        // nothing), a headless one is not.
        let plain = Selection::default();
        svc.metadata.labels = None;
        assert_eq!(plain.handling(&svc), Handling::Proxied);
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        assert_eq!(plain.handling(&svc), Handling::Headless);
        svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.1".into());
        svc.spec.as_mut().unwrap().type_ = None;
        svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        assert!(!s.selects_service(&svc), "headless");
        svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.1".into());
        svc.metadata.annotations = Some(labels(&[(SERVICE_NETWORK_ANNOTATION, "a/b/c")]));
        assert!(!s.selects_service(&svc), "a malformed network name");

        let mut slice = EndpointSlice::default();
        slice.metadata.labels = Some(labels(&[(SERVICE_PROXY_NAME_LABEL, "multus-proxy")]));
        assert!(
            !s.selects_slice(&slice),
            "the default controller's copy of the service's labels"
        );
        slice.metadata.labels = Some(labels(&[
            (SERVICE_PROXY_NAME_LABEL, "multus-proxy"),
            (MANAGED_BY_LABEL, "endpointslice-controller.k8s.io"),
        ]));
        assert!(!s.selects_slice(&slice));
        slice.metadata.labels = Some(labels(&[
            (SERVICE_PROXY_NAME_LABEL, "multus-proxy"),
            (MANAGED_BY_LABEL, MULTUS_SLICE_CONTROLLER),
        ]));
        assert!(s.selects_slice(&slice));
    }
}
