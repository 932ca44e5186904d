#![doc = include_str!("../README.md")]

mod addr;
mod build;
mod endpoint;
mod facts;
mod intern;
mod lock;
mod names;
mod node;
mod node_hints;
mod protocol;
mod service;
mod slice;
mod trigger_time;
mod zones;

#[cfg(feature = "proptest")]
pub mod strategies;

pub use addr::parse_endpoint_ip;
pub use build::{
    HOSTNAME_TOPOLOGY_KEY, RawEndpoint, SERVICE_NAME_LABEL, SliceBuilder, SliceError, SliceWarning,
    TRIGGER_TIME_ANNOTATION, WarningKind, deleted_slice_name, slice_name,
};
pub use endpoint::{BaseEndpointInfo, Endpoint};
pub use facts::{EndpointFacts, RawTargetRef, TargetRef};
pub use intern::Interner;
/// `ipnet`'s CIDR type, as [`ServiceInfo`] uses it (so users need not
/// depend on `ipnet` themselves).
pub use ipnet::IpNet;
pub use names::{NamespacedName, PodName, ServiceName, ServicePortName, SliceName};
pub use node::NodeName;
pub use node_hints::{NodeHint, NodeHints};
pub use protocol::{IpFamily, Protocol, UnknownIpFamily, UnknownProtocol};
pub use service::{ServiceInfo, ServicePort, ServicePortInfo, ServiceType, TrafficPolicy};
pub use slice::{Conditions, EndpointSlice, SliceContent, SliceEndpoint, SlicePort};
pub use zones::ZoneHints;

/// The numbered rules by which every decoder reads slices; other docs
/// cite them as "rule N".
#[doc = include_str!("../RULES.md")]
pub mod rules {}

/// Helpers the sibling crates (`slice-cache`, `endpoints-map`) share with
/// this one; not part of the supported API, and may change in any release.
#[doc(hidden)]
pub mod internal {
    pub use crate::addr::ip_sort_key;
    pub use crate::intern::FastHash;
    pub use crate::lock::lock;
    pub use crate::slice::is_sorted_by_address;
}
