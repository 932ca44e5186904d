//! Multus mode: services on secondary networks, programmed inside each
//! selected pod's network namespace.
//!
//! ```text
//!  Services (labelled + service-network) ─► engine, and service -> network
//!  EndpointSlices (multus controller's)  ─► engine
//!  Pods on this node (network-status)    ─► pod store
//!                        │
//!  MultusProxier.sync ── plan_pod: services on the pod's networks, routes
//!                        ├─ resolver: the pod's namespace (directory, CRI)
//!                        └─ per pod: nft table `proxyd-multus` (output
//!                           hook, DNAT with the pod's source kept), routes
//!                           to cluster IPs through its secondary interface,
//!                           stale UDP conntrack entries deleted
//! ```

pub mod backend;
pub mod cri;
pub mod plan;
pub mod proxier;
pub mod resolver;
pub mod runtime_watch;
pub mod view;

pub use plan::{PodPlan, Route, Skip, plan_pod};
pub use proxier::{MultusProxier, MultusSync, PodBackend};
pub use resolver::{NetnsDir, PodNetnsResolver, ResolveError};

#[cfg(test)]
mod tests;
