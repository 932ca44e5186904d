//! Watched objects decoded leniently: only the fields proxyd reads, and a
//! field the API server sends as `null` read as if it were absent.
//!
//! `k8s-openapi`'s types make some fields required that the API server may
//! still send as `null` (a Service status condition's `lastTransitionTime`,
//! which Go clients read as a zero time). Decoding a watch event into them
//! fails the whole event, and kube-runtime's watcher then fails the stream:
//! one object nobody reads would blind the watch of every object of its
//! kind. So a watch decodes each object through a [`Lean`] type instead:
//!
//! * only what proxyd reads is decoded; everything else (`managedFields`,
//!   statuses, conditions, the containers of a Pod, annotations nobody reads)
//!   is skipped without being decoded or kept;
//! * `null` and absent are the same everywhere, as for Go's decoder: an
//!   optional field is `None`, a required one (or a `null` list element)
//!   its zero value, which the conversions then judge as they judge any
//!   value;
//! * an object that still cannot be decoded (a field proxyd reads holds
//!   the wrong JSON type) is a [`Watched`] with an [`Undecodable`] problem
//!   naming kind, object and field: the runner warns once per
//!   resourceVersion and skips it, and the watch goes on.
//!
//! ```text
//!  watch event ──RawValue──► Lean::Wire (serde, lenient) ──► k8s-openapi object (read fields only)
//!                   └─ error ──► Watched { problem: Undecodable { kind, namespace/name, field } }
//! ```

mod kinds;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, de};
use serde_json::value::RawValue;

pub use kinds::{NodeWire, PodWire, READ_ANNOTATIONS, ServiceCidrWire, ServiceWire, SliceWire};

/// A kind whose objects can be decoded leniently from a watch or a list.
pub trait Lean: Sized {
    /// The serde type that reads what proxyd reads of the kind.
    type Wire: DeserializeOwned;
    /// The object, with the fields read and every other field unset.
    fn from_wire(wire: Self::Wire) -> Self;
}

/// Decodes one object's JSON text leniently (see the module docs); the
/// error names the field that could not be decoded.
pub fn decode<K: Lean>(json: &str) -> Result<K, FieldError> {
    let mut de = serde_json::Deserializer::from_str(json);
    match serde_path_to_error::deserialize::<_, K::Wire>(&mut de) {
        Ok(wire) => Ok(K::from_wire(wire)),
        Err(e) => Err(FieldError {
            field: e.path().to_string(),
            error: e.into_inner().to_string(),
        }),
    }
}

/// A field that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path (`spec.ports[0].port`; `.` for the object itself).
    pub field: String,
    /// What was wrong with it.
    pub error: String,
}

/// An object that could not be decoded, named for the warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The object's kind.
    pub kind: String,
    /// `metadata.namespace` (empty for cluster-scoped kinds or when unreadable).
    pub namespace: String,
    /// `metadata.name` (empty when unreadable).
    pub name: String,
    /// `metadata.resourceVersion` (empty when unreadable).
    pub resource_version: String,
    /// The field, and why.
    pub problem: FieldError,
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let object = match (self.namespace.as_str(), self.name.as_str()) {
            ("", "") => "(unnamed)".to_owned(),
            ("", name) => name.to_owned(),
            (ns, name) => format!("{ns}/{name}"),
        };
        write!(
            f,
            "{} {object} (resourceVersion {:?}): {}: {}; skipped, the watch goes on",
            self.kind, self.resource_version, self.problem.field, self.problem.error
        )
    }
}

/// The objects of a list that could be decoded; each of the others is a
/// warning that names it, and is left out.
pub fn decoded<K>(items: Vec<Watched<K>>) -> Vec<K> {
    items
        .into_iter()
        .filter_map(|w| match w.into_result() {
            Ok(obj) => Some(obj),
            Err((_, problem)) => {
                tracing::warn!("{problem}");
                None
            }
        })
        .collect()
}

/// What a lenient watch hands out for one object: the object, or (when
/// `problem` is set) only its namespace, name and resourceVersion.
#[derive(Debug, Clone)]
pub struct Watched<K> {
    object: K,
    problem: Option<Box<Undecodable>>,
}

impl<K> Watched<K> {
    /// The decoded object, or what could not be decoded. A skipped
    /// object's namespace and name are in [`Resource::meta`].
    pub fn into_result(self) -> Result<K, (K, Box<Undecodable>)> {
        match self.problem {
            None => Ok(self.object),
            Some(p) => Err((self.object, p)),
        }
    }

    /// Why the object could not be decoded, if it could not.
    pub fn problem(&self) -> Option<&Undecodable> {
        self.problem.as_deref()
    }
}

impl<K: Lean + Resource<DynamicType = ()> + Default> Watched<K> {
    /// Decodes `json` leniently; never fails.
    pub fn from_json(json: &str) -> Self {
        match decode::<K>(json) {
            Ok(object) => Self { object, problem: None },
            Err(problem) => {
                let names: Names = serde_json::from_str(json).unwrap_or_default();
                let meta = names.metadata.unwrap_or_default();
                let mut object = K::default();
                let (namespace, name, version) =
                    (meta.namespace.text(), meta.name.text(), meta.resource_version.text());
                *object.meta_mut() = ObjectMeta {
                    namespace: (!namespace.is_empty()).then(|| namespace.clone()),
                    name: (!name.is_empty()).then(|| name.clone()),
                    resource_version: (!version.is_empty()).then(|| version.clone()),
                    ..ObjectMeta::default()
                };
                let problem = Undecodable {
                    kind: K::kind(&()).into_owned(),
                    namespace,
                    name,
                    resource_version: version,
                    problem,
                };
                Self {
                    object,
                    problem: Some(Box::new(problem)),
                }
            }
        }
    }
}

/// Taken as text first (serde_json's `RawValue`, borrowed from the input:
/// no copy), so that an error inside the object leaves the event, and the
/// list around it, readable. This needs serde_json to read the object
/// itself from text in memory, as kube's client does for lists and for
/// watch events written `type` before `object`, as kube-apiserver writes
/// them; an event written the other way round fails to decode as a whole
/// (kube-runtime then restarts the watch).
impl<'de, K: Lean + Resource<DynamicType = ()> + Default> Deserialize<'de> for Watched<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?;
        Ok(Self::from_json(raw.get()))
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Watched<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.object.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.object.meta_mut()
    }
}

/// Only the names of an object that could not be decoded; any of them may
/// be missing or of another JSON type.
#[derive(Deserialize, Default)]
struct Names {
    #[serde(default, deserialize_with = "anything")]
    metadata: Option<NamesMeta>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NamesMeta {
    #[serde(default)]
    name: Text,
    #[serde(default)]
    namespace: Text,
    #[serde(default)]
    resource_version: Text,
}

/// A string, or nothing when the JSON holds anything else.
#[derive(Default)]
struct Text(Option<String>);

impl Text {
    fn text(&self) -> String {
        self.0.clone().unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Ok(Text(value.as_str().map(str::to_owned)))
    }
}

/// A value that is `None` when it is not of its type.
fn anything<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// `null` or absent: the zero value, as Go's decoder reads `null`.
fn zero<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A list that may be `null`, of elements that may be `null` (zero values).
fn list<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    let items = Option::<Vec<Option<T>>>::deserialize(d)?;
    Ok(items.map(|v| v.into_iter().map(Option::unwrap_or_default).collect()))
}

/// A string map (labels) whose values may be `null` (`""`).
fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    d.deserialize_option(Keeping(|_: &str| true))
}

/// The annotations proxyd reads ([`READ_ANNOTATIONS`]); the others (the
/// last applied configuration among them) are skipped undecoded.
fn read_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    d.deserialize_option(Keeping(|key: &str| READ_ANNOTATIONS.contains(&key)))
}

/// Reads a string map keeping the keys `keep` accepts.
struct Keeping<F>(F);

impl<'de, F: Fn(&str) -> bool> Visitor<'de> for Keeping<F> {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if (self.0)(&key) {
                let value: Option<String> = map.next_value()?;
                out.insert(key.into_owned(), value.unwrap_or_default());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Some(out))
    }
}

/// `metadata`: what proxyd reads of it for every kind.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    #[serde(deserialize_with = "string_map")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "read_annotations")]
    annotations: Option<BTreeMap<String, String>>,
    /// Only whether it is set is read (a Node being deleted), so a time
    /// in another format still counts as set.
    #[serde(deserialize_with = "anything")]
    deletion_timestamp: Option<serde_json::Value>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        let deletion = m.deletion_timestamp.filter(|v| !v.is_null()).map(|v| {
            let parsed = v.as_str().and_then(|s| s.parse().ok());
            Time(parsed.unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
        });
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            annotations: m.annotations,
            deletion_timestamp: deletion,
            ..ObjectMeta::default()
        }
    }
}
