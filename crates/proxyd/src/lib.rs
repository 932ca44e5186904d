//! # proxyd
//!
//! The daemon and its tools, as a library so that tests and fuzz targets
//! reach the same code the binary runs.
//!
//! ```text
//!  cli       clap arguments, one struct per subcommand
//!  replay    `proxyd replay`: JSON-lines watch trace ─► EndpointSliceCache
//!            ─► EndpointsMap ─► one JSON line per sync (docs/replay-format.md)
//!  engine    the caches and maps every command drives
//!  snapshot  one read of the cluster (manifests or API) into an engine
//!  run       `proxyd run`: watches or --manifests ─► engine ─► sync loop
//!  manifest_source  --manifests polled, checked, streamed in as relists
//!            ─► NftSyncer (partial syncs) ─► nft
//!  render    `proxyd render`: the ruleset and a services table
//!  explain   `proxyd explain`: why each endpoint is or isn't used
//!  sync_runner  when to sync (min/max interval, retry with backoff)
//!  dataplane    desired state ─► fragments ─► nft text ─► one transaction
//! ```

pub mod cleanup;
pub mod cli;
pub mod config;
pub mod conntrack;
pub mod dataplane;
pub mod engine;
pub mod explain;
pub mod health;
pub mod http;
pub mod kube_proxy;
pub mod kube_proxy_config;
pub mod logging;
pub mod manifest_source;
pub mod metrics;
pub mod multus;
pub mod netlink;
pub mod netns;
pub mod proxier;
pub mod render;
pub mod replay;
pub mod run;
pub mod snapshot;
pub mod sync_runner;
pub mod sysctls;
