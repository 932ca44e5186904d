//! # slice-model
//!
//! Plain data for tracking Kubernetes endpoints the way kube-proxy does, with
//! no dependency on Kubernetes client crates:
//!
//! ```text
//!   names      NamespacedName, ServicePortName
//!   protocol   Protocol (TCP/UDP/SCTP), IpFamily
//!   endpoint   the Endpoint trait + BaseEndpointInfo
//!   zones      ZoneHints: one process-wide copy of each zone-hint set
//!   slice      EndpointSlice { name, service, content: ports + endpoints, trigger time }
//!   node       NodeName: an endpoint's node, inline when short
//!   intern     Interner: one shared copy of zone, namespace and port names
//!              and long node names
//!   addr       parse_endpoint_ip: rule 5's addresses
//!   build      SliceBuilder: decoded fields -> EndpointSlice, applying the
//!              replay contract's rules (canonical IPs, defaults, rejections)
//!   service    ServiceInfo: what a proxier reads of a Service
//! ```
//!
//! Decoders (the Kubernetes client glue, the replay reader) hand raw fields to
//! [`SliceBuilder`], so the normalisation rules exist once. The caches in
//! `slice-cache` and `endpoints-map` consume the resulting [`EndpointSlice`].
//!
//! This crate has no feature flags.

mod addr;
mod build;
mod endpoint;
mod intern;
mod names;
mod node;
mod node_hints;
mod protocol;
mod service;
mod slice;
mod trigger_time;
mod zones;

pub use addr::{ip_sort_key, parse_endpoint_ip};
pub use build::{
    HOSTNAME_TOPOLOGY_KEY, RawEndpoint, SERVICE_NAME_LABEL, SliceBuilder, SliceError, SliceWarning,
    TRIGGER_TIME_ANNOTATION, WarningKind, deleted_slice_name, slice_name,
};
pub use endpoint::{BaseEndpointInfo, Endpoint};
pub use intern::{FastHash, FastHasher, Interner};
pub use names::{NamespacedName, ServiceName, ServicePortName, SliceName};
pub use node::NodeName;
pub use node_hints::{NodeHint, NodeHints};
pub use protocol::{IpFamily, Protocol, UnknownIpFamily, UnknownProtocol};
pub use service::{ServiceInfo, ServicePort, ServicePortInfo, ServiceType, TrafficPolicy};
pub use slice::{
    Conditions, EndpointSlice, SliceContent, SliceEndpoint, SlicePort, is_sorted_by_address, sort_by_address,
};
pub use trigger_time::parse_rfc3339;
pub use zones::{MAX_ZONE_SETS, ZoneHints};
