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

    /// Whether the proxy handles this service: selected by label and not
    /// headless (`clusterIP: None` cannot be selected by label); in multus
    /// mode it must also name a network (a labelled service without one is
    /// skipped with a warning).
    pub fn selects_service(&self, svc: &Service) -> bool {
        let spec = svc.spec.as_ref();
        let cluster_ip = spec.and_then(|s| s.cluster_ip.as_deref());
        let headless = cluster_ip == Some("None");
        let name = || {
            format!(
                "{}/{}",
                svc.metadata.namespace.as_deref().unwrap_or("default"),
                svc.metadata.name.as_deref().unwrap_or_default()
            )
        };
        if !self.selects_labels(svc.metadata.labels.as_ref()) {
            return false;
        }
        if !self.multus {
            return !headless;
        }
        // Multus mode serves cluster IPs only; what it cannot serve is said,
        // and never reaches a pod's rules.
        let external_name = spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName");
        let why = if headless {
            Some("headless")
        } else if external_name {
            Some("an ExternalName service")
        } else if cluster_ip.is_none_or(str::is_empty) {
            Some("without a cluster IP")
        } else {
            None
        };
        if let Some(why) = why {
            tracing::warn!(service = %name(), "{why}: multus mode serves ClusterIP services only; skipped");
            return false;
        }
        match service_network(svc) {
            Ok(Some(_)) => true,
            Ok(None) => {
                tracing::warn!(
                    service = %name(),
                    "labelled for this proxy but has no {SERVICE_NETWORK_ANNOTATION} annotation; skipped"
                );
                false
            }
            Err(e) => {
                tracing::warn!(service = %name(), "{SERVICE_NETWORK_ANNOTATION}: {e}; skipped");
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
        svc.metadata.labels = Some(labels(&[(SERVICE_PROXY_NAME_LABEL, "multus-proxy")]));
        assert!(!s.selects_service(&svc), "no network annotation");
        svc.metadata.annotations = Some(labels(&[(SERVICE_NETWORK_ANNOTATION, "macvlan1")]));
        assert!(!s.selects_service(&svc), "no cluster IP");
        svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.1".into());
        assert!(s.selects_service(&svc));
        svc.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(!s.selects_service(&svc), "ExternalName");
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
