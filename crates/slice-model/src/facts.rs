//! What an EndpointSlice says of an endpoint and a port beyond what a
//! proxy uses: the facts DNS servers, meshes, ingresses and service
//! discovery read. A [`SliceBuilder`](crate::SliceBuilder) keeps them only
//! when asked ([`keeping_facts`](crate::SliceBuilder::keeping_facts)), so
//! a proxy does not pay for them.

use std::sync::Arc;

/// An endpoint's facts (each `None` when the slice does not give it).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct EndpointFacts {
    /// `hostname`: the name a headless service's DNS records give the
    /// endpoint (`hostname.service.namespace.svc`).
    pub hostname: Option<Arc<str>>,
    /// `nodeName`, as given (the model's node also falls back to the
    /// deprecated topology label).
    pub node_name: Option<Arc<str>>,
    /// `zone`.
    pub zone: Option<Arc<str>>,
    /// `targetRef`: the object behind the endpoint, usually a Pod.
    pub target_ref: Option<TargetRef>,
}

impl EndpointFacts {
    /// Whether the slice gave none of the facts.
    pub fn is_empty(&self) -> bool {
        self.hostname.is_none() && self.node_name.is_none() && self.zone.is_none() && self.target_ref.is_none()
    }
}

/// `targetRef`: the object an endpoint stands for (a missing part is `""`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TargetRef {
    /// `kind`, e.g. `Pod`.
    pub kind: Arc<str>,
    /// `namespace`.
    pub namespace: Arc<str>,
    /// `name`.
    pub name: Arc<str>,
    /// `uid`: tells this object from an earlier one of the same name.
    pub uid: Arc<str>,
}

/// `targetRef` as decoded, before it is kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawTargetRef<'a> {
    /// `kind`.
    pub kind: Option<&'a str>,
    /// `namespace`.
    pub namespace: Option<&'a str>,
    /// `name`.
    pub name: Option<&'a str>,
    /// `uid`.
    pub uid: Option<&'a str>,
}

impl From<RawTargetRef<'_>> for TargetRef {
    fn from(r: RawTargetRef<'_>) -> Self {
        let text = |s: Option<&str>| Arc::from(s.unwrap_or_default());
        Self {
            kind: text(r.kind),
            namespace: text(r.namespace),
            name: text(r.name),
            uid: text(r.uid),
        }
    }
}
