//! # proxyd
//!
//! The daemon and its tools, as a library so that tests and fuzz targets
//! reach the same code the binary runs.
//!
//! ```text
//!  cli     clap arguments, one struct per subcommand
//!  replay  `proxyd replay`: JSON-lines watch trace ─► EndpointSliceCache
//!          ─► EndpointsMap ─► one JSON line per sync (replay-format.md)
//!  run     `proxyd run`: kube watches ─► caches ─► sync loop (logs for now)
//!  sync_runner  when to sync (min/max interval, retry with backoff)
//!  dataplane    desired state -> nft text -> one `nft -f -` transaction
//! ```

pub mod cli;
pub mod dataplane;
pub mod replay;
pub mod run;
pub mod sync_runner;
