//! Multus mode: services on secondary networks, programmed inside each
//! selected pod's network namespace, as multus-proxy serves them.
//!
//! ```text
//!  Services (labelled + service-network) ─► engine, and service -> network
//!  EndpointSlices (multus controller's)  ─► engine
//!  Pods on this node (network-status)    ─► pod store
//!                        │
//!  MultusProxier.sync ── plan_pod: services on the pod's networks, routes
//!                        ├─ resolver: the pod's namespace (a directory,
//!                        │  or the container runtime over CRI)
//!                        └─ per pod, a Target (the node's sync machine):
//!                           nft table `proxyd-multus` (output hook, DNAT
//!                           with the pod's source kept), routes to cluster
//!                           IPs through its secondary interface, stale UDP
//!                           conntrack entries deleted once the table is in
//!                           place
//! ```
//!
//! - [`plan`]: which services each pod gets and the routes its namespace
//!   needs, a pure function of the pod, the services' networks and the
//!   services map; [`view`] renders and explains it.
//! - [`proxier`]: the per-pod sync over a [`PodNetnsResolver`] and a
//!   [`PodBackend`] (the host's in [`backend`], or models in tests).
//! - [`cri`]: the resolver that asks the container runtime (CRI v1);
//!   [`runtime_watch`] follows the runtime (sandbox events, or its socket).

pub mod backend;
pub mod cri;
pub mod plan;
pub mod proxier;
pub mod resolver;
pub mod runtime_watch;
pub mod view;

pub use node_proxy::family::PodProblem;
pub use plan::{PodPlan, Route, Skip, plan_pod};
pub use proxier::{MultusProxier, PodBackend};
pub use resolver::{NetnsDir, PodNetnsResolver, ResolveError};

#[cfg(test)]
mod tests;

use slice_model::internal::lock;
