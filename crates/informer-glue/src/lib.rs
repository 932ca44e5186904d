//! # informer-glue
//!
//! The one crate that names Kubernetes types. It turns API objects into the
//! plain model of `slice-model`:
//!
//! ```text
//!  k8s_openapi EndpointSlice ──convert──┐
//!  watch-event JSON (borrowed) ──wire───┼──► SliceBuilder ──► slice_model::EndpointSlice
//!  k8s_openapi Service ───────service───┴──────────────────► slice_model::ServiceInfo
//! ```
//!
//! Both slice paths go through [`slice_model::SliceBuilder`], so the replay
//! [slice rules](slice_model::rules) (FQDN ignored, invalid IPs skipped with a warning that
//! names slice and field, canonical IP text, TCP by default, `serving`
//! defaulting to `ready`, a missing service-name label rejected) hold the
//! same whether objects come from a live watch or a recorded trace.
//!
//! Watching a live cluster:
//!
//! ```text
//!  kube-runtime watcher (list-then-watch, default backoff, label selector)
//!        │ Init / InitApply / InitDone / Apply / Delete of Watched<K>
//!        ▼
//!  lenient: only the fields proxyd reads, null read as absent; an object
//!        │ that cannot be decoded is warned about and skipped
//!        ▼
//!  EventFold ── add / update(old, new) / delete(tombstone) / synced ──► EventHandler
//! ```
//!
//! One object the decoder cannot read never fails a watch ([`lenient`]).
//! The fold turns "known before a relist, absent after it" into a delete, so
//! nothing deleted while the watch was down survives ([`fold`]); the runner
//! logs and counts watch errors and never gives up ([`watch_runner`]); selection
//! follows kube-proxy's labels ([`selection`]). What only the daemon reads
//! (manifest files as a source, the one-time snapshot, kube-proxy's
//! configuration file) is the `daemon-sources` crate's, so that a library
//! user of this crate does not carry it.
//!
//! Watches and handlers count what they do in [`counters`] (plain
//! atomics); the `prometheus` feature makes those counters
//! `prometheus-client` metrics and adds `source_metrics`, which registers
//! them.
//!
//! Library users pick the Kubernetes version: this crate enables no
//! `k8s-openapi` version feature.

mod cache_handler;
mod convert;
pub mod counters;
pub mod feed;
pub mod fold;
pub mod lenient;
pub mod liveness;
pub mod multus;
pub mod node;
pub mod rejections;
pub mod selection;
mod service;
pub mod service_cidr;
mod service_handler;
#[cfg(feature = "prometheus")]
pub mod source_metrics;
pub mod tombstone;
pub mod versions;
pub mod watch_error;
pub mod watch_runner;
pub mod wire;

pub use cache_handler::SliceCacheHandler;
pub use convert::{slice_from_k8s, slice_name_of, slice_with_facts_from_k8s};
pub use service::{DEFAULT_AFFINITY_TIMEOUT, ServiceError, ServiceWarning, service_from_k8s};
pub use service_handler::ServiceHandler;

#[cfg(test)]
mod fold_tests;
#[cfg(test)]
mod tests;
