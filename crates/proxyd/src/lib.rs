//! # proxyd
//!
//! The daemon and its tools, as a library so that tests and fuzz targets
//! reach the same code the binary runs.
//!
//! ```text
//!  cli, config      the command line; --config files (proxyd's and
//!                   kube-proxy's KubeProxyConfiguration), merged into it
//!  kube_proxy_config  KubeProxyConfiguration -> settings
//!  logging          the tracing subscriber and its filter
//!  replay           `proxyd replay`: JSON-lines watch trace ─► EndpointSliceCache
//!                   ─► EndpointsMap ─► one JSON line per sync (docs/replay-format.md)
//!  snapshot         one read of the cluster (manifests or API) into an Engine
//!  run              `proxyd run`: sources ─► engines ─► the sync thread
//!  metrics          the run's registry: kube-proxy's, the sources', multus
//!                   mode's and the process metrics
//!  sysctls          kube-proxy's conntrack settings at startup
//!  render, explain  `proxyd render` and `proxyd explain`
//!  cleanup          `proxyd cleanup`
//! ```
//!
//! The engine (`endpoints_map::Engine`), the dataplane's plans and its
//! sync machine (`nft_dataplane`), the node's sync loop with kube-proxy's
//! health and metrics (`node_proxy`), multus mode (`multus_dataplane`: the
//! per-pod planner and sync, the CRI resolver) and everything that touches
//! the host (`linux_dataplane`: nft, netlink, namespaces, routes,
//! kube-proxy's leftovers) are library crates of their own.

pub mod cleanup;
pub mod cli;
pub mod config;
pub mod explain;
pub(crate) mod kube_proxy_config;
pub mod logging;
pub(crate) mod metrics;
pub mod render;
pub mod replay;
pub mod run;
pub mod snapshot;
pub(crate) mod sysctls;
