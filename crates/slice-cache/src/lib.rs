//! # slice-cache
//!
//! The synchronous EndpointSlice cache of kube-proxy (and of multus-proxy's
//! copy of it), with pending/applied tracking per slice:
//!
//! ```text
//!  update(slice) / remove(name)          checkout()
//!        │                                   │
//!        ▼                                   ▼
//!  per service: pending ──── applied ──► ServiceChange { previous, current,
//!               (by slice)   (by slice)                  trigger_times }
//! ```
//!
//! * An update that changes nothing returns `false` and queues nothing;
//!   removing a slice never seen is a no-op.
//! * [`EndpointSliceCache::checkout`] merges each changed service's slices
//!   once into [`ServiceEndpoints`] (per service port, one entry per address
//!   and port, local copies preferred) and hands back previous and current.
//! * A slice relabelled to another service moves; a service with no slices
//!   left is dropped.
//!
//! [`ServiceChangeTracker`] does the same for Services: per IP family, the
//! ports a proxier programs, pending until checked out.
//!
//! `endpoints-map` applies the changes to the proxier's endpoints map. This
//! crate depends only on `slice-model`; it has no features.

mod by_name;
mod cache;
mod merged;
mod services;

pub use cache::{EndpointSliceCache, ServiceChange};
pub use merged::{PortEndpoints, ServiceEndpoints};
pub use services::{ServiceChangeTracker, ServicePorts, ServicePortsChange};

#[cfg(test)]
mod tests;
