//! # node-inspect
//!
//! What a node service proxy programs for a moment's state of a cluster
//! (a [`daemon_sources::snapshot::Snapshot`] fed into an
//! [`endpoints_map::Engine`]), and why, as people read it:
//!
//! * [`render`]: the nftables ruleset a syncer would apply, and a table of
//!   service ports with the endpoints their traffic reaches;
//! * [`explain`]: one service, endpoint by endpoint: the slices it came
//!   from, its conditions, and why each kind of traffic uses it or not,
//!   with the elements and chains that implement it. [`explain::explain_port`]
//!   is that decision as data;
//! * [`listing`]: long lists cut to their first items and a count, so no
//!   line grows with an object's size.
//!
//! Everything here reads the planner the proxier runs
//! (`nft_dataplane`), never a second copy of its rules.

pub mod explain;
pub mod listing;
pub mod render;
