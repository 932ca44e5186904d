//! # endpoints-map
//!
//! The proxier's endpoints map: every service port's endpoints, updated from
//! the changes an [`slice_cache::EndpointSliceCache`] checks out.
//!
//! ```text
//!  EndpointSliceCache ──checkout──► [ServiceChange] ──► EndpointsMap::apply
//!                                                        │
//!      UpdateResult { stale UDP endpoints, stale UDP services (0 → >0),
//!                     changed services, local-ready count changes,
//!                     last-change trigger times }  ◄─────┘
//! ```
//!
//! An update costs time in proportion to the services that changed: the
//! local-ready endpoint counts that health checks report are kept per
//! service, not recounted over the whole map (as the seed does).
//!
//! ```
//! use endpoints_map::EndpointsMap;
//! use slice_cache::EndpointSliceCache;
//! use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceName, SliceEndpoint, SliceName};
//!
//! let mut cache = EndpointSliceCache::new("node-1", IpFamily::V4);
//! let mut map = EndpointsMap::new();
//!
//! let slice = EndpointSlice::new("default", "dns-abcde", "dns")
//!     .with_port("dns", Protocol::Udp, 53)
//!     .with_endpoint(SliceEndpoint::new("10.0.0.9".parse().unwrap()).on_node("node-1"));
//! assert!(cache.update(slice.clone()));
//! assert!(!cache.update(slice), "no change, nothing queued");
//!
//! let result = map.update(&mut cache);
//! let dns = ServiceName::new("default", "dns");
//! assert_eq!(result.changed_services, [dns.clone()]);
//! assert_eq!(result.stale_service_names.len(), 1, "UDP port went from 0 to 1 endpoint");
//! assert_eq!(map.local_ready_count(&dns), 1);
//!
//! cache.remove(&SliceName::new("default", "dns-abcde"));
//! let result = map.update(&mut cache);
//! assert_eq!(result.stale_endpoints[0].to_string(), "default/dns:dns -> 10.0.0.9:53");
//! assert!(map.is_empty());
//! ```
//!
//! [`ServicesMap`] does the same for service ports (from a
//! `ServiceChangeTracker`), reporting deleted UDP cluster IPs for conntrack.
//! [`topology::categorize`] picks, per service port, the endpoints a node
//! uses for Cluster and Local traffic policies (zone hints, terminating
//! fallback), as current kube-proxy does.
//!
//! This crate has no features and no Kubernetes dependency.

mod map;
mod services;
mod stale;
pub mod topology;

pub use map::{EndpointsMap, ServiceEndpoint, UpdateResult};
pub use services::{ServicesMap, ServicesUpdateResult};

#[cfg(test)]
mod tests;
