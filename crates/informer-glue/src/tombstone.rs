//! What the event fold keeps of a Service or EndpointSlice after handing it
//! over (see [`Keep`]): its resourceVersion, and for a slice its
//! addressType, nothing of its contents. A proxy of a large cluster would
//! otherwise hold a second copy of every object, and even an emptied
//! k8s-openapi object costs its full struct size (most of a kilobyte for a
//! Service).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::fold::Keep;

fn meta(namespace: &str, name: &str, version: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        resource_version: version.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

fn version_of(meta: &ObjectMeta) -> Option<Box<str>> {
    meta.resource_version.as_deref().map(Box::from)
}

/// Keeps a slice's resourceVersion and addressType (a delete needs the
/// type: FQDN slices were never added). Tombstones carry namespace, name,
/// resourceVersion and addressType.
#[derive(Debug, Default, Clone, Copy)]
pub struct SlimSlices;

/// What [`SlimSlices`] keeps of a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceRecord {
    version: Option<Box<str>>,
    address_type: AddressType,
}

/// A slice's addressType, without an allocation for the usual ones.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AddressType {
    Ipv4,
    Ipv6,
    Fqdn,
    Other(Box<str>),
}

impl AddressType {
    fn new(text: String) -> Self {
        match text.as_str() {
            "IPv4" => Self::Ipv4,
            "IPv6" => Self::Ipv6,
            "FQDN" => Self::Fqdn,
            _ => Self::Other(text.into_boxed_str()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Self::Ipv4 => "IPv4",
            Self::Ipv6 => "IPv6",
            Self::Fqdn => "FQDN",
            Self::Other(text) => text,
        }
    }
}

impl Keep<EndpointSlice> for SlimSlices {
    type Kept = SliceRecord;

    fn keep(&self, obj: EndpointSlice) -> SliceRecord {
        SliceRecord {
            version: version_of(&obj.metadata),
            address_type: AddressType::new(obj.address_type),
        }
    }

    fn version<'a>(&self, kept: &'a SliceRecord) -> Option<&'a str> {
        kept.version.as_deref()
    }

    fn object<'a>(&self, namespace: &str, name: &str, kept: &'a SliceRecord) -> Cow<'a, EndpointSlice> {
        Cow::Owned(EndpointSlice {
            metadata: meta(namespace, name, kept.version.as_deref()),
            address_type: kept.address_type.as_str().to_owned(),
            ..EndpointSlice::default()
        })
    }
}

/// Keeps a service's resourceVersion. Tombstones carry namespace, name and
/// resourceVersion.
#[derive(Debug, Default, Clone, Copy)]
pub struct SlimServices;

impl Keep<Service> for SlimServices {
    type Kept = Option<Box<str>>;

    fn keep(&self, obj: Service) -> Option<Box<str>> {
        version_of(&obj.metadata)
    }

    fn version<'a>(&self, kept: &'a Option<Box<str>>) -> Option<&'a str> {
        kept.as_deref()
    }

    fn object<'a>(&self, namespace: &str, name: &str, kept: &'a Option<Box<str>>) -> Cow<'a, Service> {
        Cow::Owned(Service {
            metadata: meta(namespace, name, kept.as_deref()),
            ..Service::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::slice_name_of;

    #[test]
    fn slim_slices_still_delete_by_name_and_keep_the_fqdn_rule() {
        for address_type in ["FQDN", "IPv4", "IPv6", "Unknown"] {
            let s: EndpointSlice = serde_json::from_value(json!({
                "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": address_type,
                "endpoints": [{"addresses": ["x.example"]}],
            }))
            .unwrap();
            let kept = SlimSlices.keep(s.clone());
            assert_eq!(SlimSlices.version(&kept), Some("7"));
            let tomb = SlimSlices.object("ns", "a", &kept);
            assert!(tomb.endpoints.as_ref().is_none_or(Vec::is_empty));
            assert_eq!(tomb.metadata.resource_version.as_deref(), Some("7"));
            assert_eq!(tomb.metadata.namespace.as_deref(), Some("ns"));
            assert_eq!(tomb.address_type, address_type);
            assert_eq!(
                slice_name_of(&tomb).map_err(|e| e.to_string()),
                slice_name_of(&s).map_err(|e| e.to_string())
            );
        }
    }

    #[test]
    fn slim_services_keep_name_and_version() {
        let s = Service {
            metadata: meta("ns", "web", Some("12")),
            spec: Some(Default::default()),
            ..Service::default()
        };
        let kept = SlimServices.keep(s.clone());
        let tomb = SlimServices.object("ns", "web", &kept);
        assert_eq!(tomb.metadata, s.metadata);
        assert!(tomb.spec.is_none());
        let unversioned = SlimServices.keep(Service::default());
        assert_eq!(SlimServices.version(&unversioned), None);
    }
}
