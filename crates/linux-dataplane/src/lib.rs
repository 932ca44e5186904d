//! The Linux side of a node service proxy: everything that touches the
//! host. The plans it carries out (rules, elements, stale conntrack flows,
//! routes) are made elsewhere, by pure code (`nft-dataplane`).
//!
//! ```text
//!  hearing    other programs' changes to proxyd's tables (Hearing, and
//!             the Ear each WatchedNft writes under): announced, or
//!             counted from the ruleset's generation around a write
//!  nft        `nft -f -` (NftCommand); whole transactions over netlink
//!             and the ruleset generation (WatchedNft, `nft` the fallback
//!             NftWriter selects); --dry-run (DryRun): the
//!             nft_dataplane::Dataplane implementations
//!  netlink    nftables (generation, tables, set declarations, chains,
//!             rules, elements, reading a table back) and conntrack
//!             (dump, delete) over netfilter netlink
//!  flow_cleanup  deleting stale UDP flows (Conntrack; NetlinkConntrack)
//!  routes     routes to cluster IPs in a pod's namespace, over rtnetlink
//!  netns      which network namespace, and working inside it (setns)
//!  process    this process's OOM score adjustment
//!  sysctl     the conntrack table's size and timeouts (/proc/sys), and
//!             its hash table (the nf_conntrack module's hashsize)
//!  kube_proxy what kube-proxy left on a node (its nftables tables, its
//!             iptables chains): found and removed
//! ```
//!
//! No program is run in steady state: namespaces are entered by a thread
//! (`setns`), nftables, routes and conntrack go over netlink. `nft` runs
//! with `--nft-writer nft`, for cleanup, and (with the iptables save and
//! restore tools) for kube-proxy's leftovers.
//!
//! Netlink messages are the field's crates': rtnetlink's
//! (`netlink-packet-route`) for routes, and `netlink-packet-netfilter`'s for
//! conntrack (ctnetlink dump and delete) and nftables (generation, tables,
//! set, chain and rule dumps, set elements, batches), framed and read with
//! `netlink-packet-core`. Four pieces are ours: a rule's expressions and a
//! set's declaration as `nft` compiles them (the crate has six of the
//! fourteen expressions proxyd's rules need, and no notion of the user
//! data `nft` lists a set's `typeof` from; root tests compare `nft list
//! table` and the kernel's expressions of tables written both ways); the byte layout of
//! proxyd's concatenated set keys and values (`nft`'s: each field padded to
//! four bytes), which the crates have no notion of; the elements of an
//! element list, written in place (the crate's typed elements, a few
//! vectors each and measured again at every nesting level, are too slow
//! for a large load; a test checks the bytes are the crate's); and a rule dump that decodes only each rule's table
//! and chain (the rule counts it serves need nothing else, and a large
//! table has hundreds of thousands of expressions).
//! Sockets are rustix's, one type for netfilter and rtnetlink. Every
//! read is bounds-checked: a malformed reply is an error, never a panic.

pub mod flow_cleanup;
pub mod hearing;
pub mod kube_proxy;
mod netlink;
pub mod netns;
pub mod nft;
pub mod process;
pub mod routes;
pub mod sysctl;

#[cfg(any(test, feature = "test-util"))]
pub use flow_cleanup::RecordingConntrack;
pub use flow_cleanup::{Conntrack, ConntrackError, NoConntrack};
pub use hearing::{Ear, Hearing};
#[cfg(feature = "test-util")]
pub use netlink::wire;
pub use netlink::{Listening, NetlinkConntrack, NftChange, NftMonitor, NftNetlink, RawElement};
#[cfg(any(test, feature = "test-util"))]
pub use netns::ScratchNetns;
pub use netns::{Netns, NetnsError, NetnsId};
pub use nft::{DryRun, NftAccessError, NftCommand, NftWriter, RemovedTables, WatchedNft, check_netlink, check_nft};
pub use routes::{Route, RouteChange, RouteError};
