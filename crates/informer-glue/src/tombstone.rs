//! What the event fold keeps of an object after handing it over (see
//! [`EventFold::slimmed`](crate::fold::EventFold::slimmed)): enough to
//! delete it later and to tell versions apart, nothing of its contents. A
//! proxy of a large cluster would otherwise hold a second, full copy of
//! every Service and EndpointSlice.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn meta(m: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        resource_version: m.resource_version.clone(),
        ..ObjectMeta::default()
    }
}

/// A slice's name, namespace, resourceVersion and addressType (a delete
/// needs the type: FQDN slices were never added).
pub fn slim_slice(s: &EndpointSlice) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(&s.metadata),
        address_type: s.address_type.clone(),
        ..EndpointSlice::default()
    }
}

/// A service's name, namespace and resourceVersion.
pub fn slim_service(s: &Service) -> Service {
    Service {
        metadata: meta(&s.metadata),
        ..Service::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::slice_name_of;

    #[test]
    fn slim_slices_still_delete_by_name_and_keep_the_fqdn_rule() {
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "FQDN",
            "endpoints": [{"addresses": ["x.example"]}],
        }))
        .unwrap();
        let slim = slim_slice(&s);
        assert!(slim.endpoints.as_ref().is_none_or(Vec::is_empty));
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(slice_name_of(&slim).is_err(), slice_name_of(&s).is_err());
    }
}
