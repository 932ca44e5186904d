//! Which Services and EndpointSlices a proxy handles, as kube-proxy decides
//! it: by label, in the API request where possible.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

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
}

impl Selection {
    /// The label selector for list and watch requests.
    pub fn label_selector(&self) -> String {
        match &self.proxy_name {
            None => format!("!{SERVICE_PROXY_NAME_LABEL},!{HEADLESS_LABEL}"),
            Some(name) => format!("{SERVICE_PROXY_NAME_LABEL}={name},!{HEADLESS_LABEL}"),
        }
    }

    /// The same decision on the client side, for what a server returned.
    pub fn selects_labels(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        if get(HEADLESS_LABEL).is_some() {
            return false;
        }
        match (&self.proxy_name, get(SERVICE_PROXY_NAME_LABEL)) {
            (None, None) => true,
            (Some(want), Some(have)) => want == have,
            _ => false,
        }
    }

    /// Whether the proxy handles this service: selected by label and not
    /// headless (`clusterIP: None` cannot be selected by label).
    pub fn selects_service(&self, svc: &Service) -> bool {
        let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
        !headless && self.selects_labels(svc.metadata.labels.as_ref())
    }

    /// Whether the proxy handles this slice.
    pub fn selects_slice(&self, slice: &EndpointSlice) -> bool {
        self.selects_labels(slice.metadata.labels.as_ref())
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
            s.label_selector(),
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
        };
        assert_eq!(
            s.label_selector(),
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
}
