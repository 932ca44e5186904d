//! Multus mode's daemon side: pods' namespaces from the container runtime
//! (CRI) and following the runtime. The planner and the per-pod sync are
//! the `multus-dataplane` crate.

pub mod cri;
pub mod runtime_watch;
