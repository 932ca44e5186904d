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
//! This crate has no features and no Kubernetes dependency.

mod map;
mod stale;

pub use map::{EndpointsMap, ServiceEndpoint, UpdateResult};

#[cfg(test)]
mod tests;
