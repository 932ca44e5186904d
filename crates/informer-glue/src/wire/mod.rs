//! Watch-event objects decoded straight from JSON text, borrowing strings
//! from the input, and handed to the same [`SliceBuilder`] as the
//! `k8s-openapi` conversion.
//!
//! This is the fast path for `proxyd replay`: it reads only what the cache
//! needs, skips what it doesn't (managedFields, targetRef, ...) without
//! allocating, and still type-checks the EndpointSlice fields it knows, so
//! that a slice whose fields have the wrong JSON types is an error.
//! [`event`] decodes the event around an object, one JSON line each.

pub mod event;

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use slice_model::{
    EndpointSlice, HOSTNAME_TOPOLOGY_KEY, Interner, NamespacedName, RawEndpoint, SERVICE_NAME_LABEL, ServiceInfo,
    SliceBuilder, SliceError, SliceName, SliceWarning, TRIGGER_TIME_ANNOTATION,
};

use crate::service::{ServiceError, ServiceWarning, service_from_k8s};

/// A JSON string that borrows from the input when it has no escapes.
///
/// serde's own `Cow<str>` impl always allocates unless the field is a bare
/// `#[serde(borrow)] Cow<str>`; inside `Option` or a map it never borrows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Str<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Str<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// An object of a watch event: an EndpointSlice, a Service, or anything
/// else (only `kind` and `metadata` matter then).
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct WireObject<'a> {
    /// `kind`.
    #[serde(borrow, default)]
    pub kind: Option<Str<'a>>,
    /// `metadata`.
    #[serde(borrow, default)]
    pub metadata: Option<WireMeta<'a>>,
    /// EndpointSlice `addressType`.
    #[serde(borrow, default)]
    pub address_type: Option<Str<'a>>,
    /// EndpointSlice `endpoints`.
    #[serde(borrow, default, deserialize_with = "endpoints_with_room")]
    pub endpoints: Option<Vec<WireEndpoint<'a>>>,
    /// EndpointSlice `ports`.
    #[serde(borrow, default)]
    pub ports: Option<Vec<WirePort<'a>>>,
    /// Service `spec`, kept as text and decoded only for Services.
    #[serde(borrow, default)]
    pub spec: Option<&'a RawValue>,
    /// Service `status`, likewise.
    #[serde(borrow, default)]
    pub status: Option<&'a RawValue>,
    /// `apiVersion`, type-checked and otherwise unused.
    #[serde(borrow, default)]
    pub api_version: Option<Str<'a>>,
}

/// `metadata`, with the one label and the one annotation the cache reads.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct WireMeta<'a> {
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub namespace: Option<Str<'a>>,
    /// `labels["kubernetes.io/service-name"]`.
    #[serde(borrow, default, rename = "labels")]
    pub service_name: Option<PickKey<'a, ServiceNameLabel>>,
    /// `annotations["endpoints.kubernetes.io/last-change-trigger-time"]`.
    #[serde(borrow, default, rename = "annotations")]
    pub trigger_time: Option<PickKey<'a, TriggerTimeAnnotation>>,
    #[serde(borrow, default)]
    pub generate_name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub uid: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub resource_version: Option<Str<'a>>,
    #[serde(default)]
    pub generation: Option<i64>,
    #[serde(borrow, default)]
    pub creation_timestamp: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub deletion_timestamp: Option<Str<'a>>,
}

/// One endpoint.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct WireEndpoint<'a> {
    /// `addresses[0]` (the rest are type-checked and dropped).
    #[serde(borrow, default)]
    pub addresses: Option<FirstString<'a>>,
    #[serde(default)]
    pub conditions: Option<WireConditions>,
    #[serde(borrow, default)]
    pub node_name: Option<Str<'a>>,
    /// `deprecatedTopology["kubernetes.io/hostname"]`.
    #[serde(borrow, default, rename = "deprecatedTopology")]
    pub topology_hostname: Option<PickKey<'a, HostnameTopology>>,
    #[serde(borrow, default)]
    pub hints: Option<WireHints<'a>>,
    /// `hostname`, type-checked only.
    #[serde(default)]
    pub hostname: Option<CheckedStr>,
    /// `zone`, type-checked only (the cache reads hints, not zones).
    #[serde(default)]
    pub zone: Option<CheckedStr>,
}

/// `conditions`.
#[derive(Deserialize, Debug, Default, Clone, Copy)]
#[allow(missing_docs)]
pub struct WireConditions {
    #[serde(default)]
    pub ready: Option<bool>,
    #[serde(default)]
    pub serving: Option<bool>,
    #[serde(default)]
    pub terminating: Option<bool>,
}

/// `hints`.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct WireHints<'a> {
    #[serde(borrow, default)]
    pub for_zones: Option<Names<'a>>,
    #[serde(borrow, default)]
    pub for_nodes: Option<Names<'a>>,
}

/// `hints.forZones[]` and `hints.forNodes[]`: a name.
#[derive(Deserialize, Debug, Default)]
#[allow(missing_docs)]
pub struct WireZone<'a> {
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
}

/// The names of `hints.forZones` or `hints.forNodes` (a missing name reads
/// as `""`). An endpoint has one hint, or a few: the first is kept inline,
/// so that decoding one allocates nothing.
#[derive(Debug, Default)]
pub struct Names<'a> {
    first: Option<Str<'a>>,
    rest: Vec<Str<'a>>,
}

impl Names<'_> {
    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.first.iter().chain(&self.rest).map(|s| &**s)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Names<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Names<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of objects with a name")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let mut names = Names::default();
                while let Some(z) = s.next_element::<WireZone<'de>>()? {
                    let name = z.name.unwrap_or_default();
                    if names.first.is_none() {
                        names.first = Some(name);
                    } else {
                        names.rest.push(name);
                    }
                }
                Ok(names)
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// A JSON string that is type-checked and not kept: a field the cache never
/// reads, but whose wrong type makes the object invalid, as in Go.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CheckedStr;

impl<'de> Deserialize<'de> for CheckedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CheckedStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<CheckedStr, E> {
                Ok(CheckedStr)
            }
        }
        d.deserialize_str(V)
    }
}

/// Endpoints, with room for as many as the EndpointSlice controller puts in
/// a slice by default (`--max-endpoints-per-slice`, 100): the list then
/// never grows (and moves) while it is decoded.
fn endpoints_with_room<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<WireEndpoint<'a>>>, D::Error> {
    struct WithRoom<'a>(Vec<WireEndpoint<'a>>);
    impl<'de: 'a, 'a> Deserialize<'de> for WithRoom<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = WithRoom<'a>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an array of endpoints")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                    let mut all = Vec::with_capacity(s.size_hint().unwrap_or(0).max(DEFAULT_MAX_ENDPOINTS_PER_SLICE));
                    while let Some(e) = s.next_element()? {
                        all.push(e);
                    }
                    Ok(WithRoom(all))
                }
            }
            d.deserialize_seq(V(PhantomData))
        }
    }
    Ok(Option::<WithRoom<'a>>::deserialize(d)?.map(|w| w.0))
}

/// The EndpointSlice controller's default `--max-endpoints-per-slice`.
const DEFAULT_MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// `ports[]`.
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct WirePort<'a> {
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub protocol: Option<Str<'a>>,
    #[serde(default)]
    pub port: Option<i32>,
    #[serde(borrow, default)]
    pub app_protocol: Option<Str<'a>>,
}

/// A key of a string-to-string map that [`PickKey`] keeps.
pub trait MapKey {
    /// The key.
    const KEY: &'static str;
}

/// Picks [`SERVICE_NAME_LABEL`] out of `labels`.
#[derive(Debug)]
pub struct ServiceNameLabel;
impl MapKey for ServiceNameLabel {
    const KEY: &'static str = SERVICE_NAME_LABEL;
}

/// Picks [`TRIGGER_TIME_ANNOTATION`] out of `annotations`.
#[derive(Debug)]
pub struct TriggerTimeAnnotation;
impl MapKey for TriggerTimeAnnotation {
    const KEY: &'static str = TRIGGER_TIME_ANNOTATION;
}

/// Picks [`HOSTNAME_TOPOLOGY_KEY`] out of `deprecatedTopology`.
#[derive(Debug)]
pub struct HostnameTopology;
impl MapKey for HostnameTopology {
    const KEY: &'static str = HOSTNAME_TOPOLOGY_KEY;
}

/// The value of one key of a JSON object of strings; every value must be a
/// string or `null`, as in a Kubernetes `map[string]string`.
#[derive(Debug)]
pub struct PickKey<'a, K>(pub Option<Str<'a>>, PhantomData<K>);

impl<'a, K> PickKey<'a, K> {
    /// The value, if the key was present with a non-null value.
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a, K: MapKey> Deserialize<'de> for PickKey<'a, K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a, K>(PhantomData<(&'a (), K)>);
        impl<'de: 'a, 'a, K: MapKey> Visitor<'de> for V<'a, K> {
            type Value = PickKey<'a, K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut found = None;
                while let Some(k) = m.next_key::<Str<'de>>()? {
                    let v: Option<Str<'de>> = m.next_value()?;
                    if &*k == K::KEY {
                        found = v;
                    }
                }
                Ok(PickKey(found, PhantomData))
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// The first string of a JSON array of strings (`null` elements read as
/// `""`, as Go's decoder leaves them); the rest are type-checked only.
#[derive(Debug, Default)]
pub struct FirstString<'a>(pub Option<Str<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstString<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FirstString<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let first = s.next_element::<Option<Str<'de>>>()?.map(Option::unwrap_or_default);
                while s.next_element::<Option<Str<'de>>>()?.is_some() {}
                Ok(FirstString(first))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

impl<'a> WireObject<'a> {
    /// `kind`, or `""`.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or_default()
    }

    fn meta_str<'s>(&'s self, f: impl Fn(&'s WireMeta<'a>) -> Option<&'s Str<'a>>) -> Option<&'s str> {
        self.metadata.as_ref().and_then(f).map(|s| &**s)
    }

    /// `metadata.namespace`/`metadata.name`, when both are set and not empty.
    pub fn name(&self) -> Option<NamespacedName> {
        match (
            self.meta_str(|m| m.namespace.as_ref()),
            self.meta_str(|m| m.name.as_ref()),
        ) {
            (Some(ns), Some(n)) if !ns.is_empty() && !n.is_empty() => Some(NamespacedName::new(ns, n)),
            _ => None,
        }
    }

    /// The slice's name, for a DELETED event: namespace and name are all a
    /// delete needs ([rule 6](slice_model::rules)); FQDN slices are ignored ([rule 4](slice_model::rules)).
    pub fn deleted_slice_name(&self) -> Result<SliceName, SliceError> {
        slice_model::deleted_slice_name(
            self.meta_str(|m| m.namespace.as_ref()),
            self.meta_str(|m| m.name.as_ref()),
            self.address_type.as_deref(),
        )
    }

    /// Converts an EndpointSlice from an ADDED or MODIFIED event; the same
    /// rules as [`crate::slice_from_k8s`].
    pub fn to_slice(&self, interner: &mut Interner) -> Result<(EndpointSlice, Vec<SliceWarning>), SliceError> {
        let meta = self.metadata.as_ref();
        let label = meta.and_then(|m| m.service_name.as_ref()).and_then(PickKey::get);
        let mut b = SliceBuilder::new(
            interner,
            self.meta_str(|m| m.namespace.as_ref()),
            self.meta_str(|m| m.name.as_ref()),
            label,
            self.address_type.as_deref(),
        )?;
        b.reserve(
            self.ports.as_ref().map_or(0, Vec::len),
            self.endpoints.as_ref().map_or(0, Vec::len),
        );
        for (i, p) in self.ports.iter().flatten().enumerate() {
            b.port(i, p.name.as_deref(), p.protocol.as_deref(), p.port.map(i64::from));
        }
        for (i, e) in self.endpoints.iter().flatten().enumerate() {
            let c = e.conditions.unwrap_or_default();
            let raw = RawEndpoint {
                first_address: e.addresses.as_ref().and_then(|a| a.0.as_deref()),
                ready: c.ready,
                serving: c.serving,
                terminating: c.terminating,
                node_name: e.node_name.as_deref(),
                topology_hostname: e.topology_hostname.as_ref().and_then(PickKey::get),
                // A proxy's replay keeps no facts.
                ..RawEndpoint::default()
            };
            let zones = e.hints.iter().flat_map(|h| h.for_zones.iter().flat_map(Names::iter));
            let nodes = e.hints.iter().flat_map(|h| h.for_nodes.iter().flat_map(Names::iter));
            b.endpoint_with_node_hints(i, raw, zones, nodes);
        }
        let trigger = meta.and_then(|m| m.trigger_time.as_ref()).and_then(PickKey::get);
        Ok(b.finish(trigger))
    }

    /// Converts a Service. A `spec` or `status` that does not fit the v1
    /// Service schema is dropped with a warning (the service is still
    /// tracked by name).
    pub fn to_service(&self) -> Result<(ServiceInfo, Vec<ServiceWarning>), ServiceError> {
        let mut misfits = Vec::new();
        let spec = self
            .spec
            .and_then(|r| match serde_json::from_str::<core::ServiceSpec>(r.get()) {
                Ok(s) => Some(s),
                Err(e) => {
                    misfits.push(("spec", e.to_string()));
                    None
                }
            });
        let status = self
            .status
            .and_then(|r| match serde_json::from_str::<core::ServiceStatus>(r.get()) {
                Ok(s) => Some(s),
                Err(e) => {
                    misfits.push(("status", e.to_string()));
                    None
                }
            });
        let svc = core::Service {
            metadata: ObjectMeta {
                name: self.meta_str(|m| m.name.as_ref()).map(Into::into),
                namespace: self.meta_str(|m| m.namespace.as_ref()).map(Into::into),
                ..ObjectMeta::default()
            },
            spec,
            status,
        };
        let (info, mut warnings) = service_from_k8s(&svc)?;
        for (field, problem) in misfits {
            warnings.push(ServiceWarning {
                service: info.name.clone(),
                field: field.into(),
                reason: "schema_mismatch",
                problem: format!("does not fit the v1 Service schema ({problem})"),
            });
        }
        Ok((info, warnings))
    }
}

/// Only `kind` and `metadata` of an object, for objects whose other fields
/// do not fit an EndpointSlice (a Service with odd fields, another kind).
#[derive(Deserialize, Debug, Default)]
pub struct KindAndMeta<'a> {
    /// `kind`.
    #[serde(borrow, default)]
    pub kind: Option<Str<'a>>,
    /// `metadata`, when it fits.
    #[serde(borrow, default, deserialize_with = "lenient")]
    pub metadata: Option<WireMeta<'a>>,
}

fn lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Option<WireMeta<'de>>, D::Error> {
    let raw: &RawValue = Deserialize::deserialize(d)?;
    Ok(serde_json::from_str(raw.get()).ok())
}

impl<'a> KindAndMeta<'a> {
    /// As a [`WireObject`] with only these fields.
    pub fn into_object(self) -> WireObject<'a> {
        WireObject {
            kind: self.kind,
            metadata: self.metadata,
            ..WireObject::default()
        }
    }
}
