//! UDP conntrack cleanup after a sync, as kube-proxy does it; which
//! entries are stale is decided by `nft_dataplane::stale_flows`.
//!
//! UDP has no connection to end, so a conntrack entry keeps sending a
//! client's datagrams where the rules sent its first one:
//!
//! - to an endpoint that is gone (a *stale endpoint*): delete the entries
//!   DNATed to it from each of the service's frontends;
//! - nowhere, because the service had no endpoints when the flow began (a
//!   *stale service*, now with its first endpoint): delete the entries to
//!   its frontends;
//! - to a cluster IP of a deleted UDP port: delete the entries to that IP.
//!
//! The cleanup runs only after the rules that replace the entries are in
//! place (a successful apply), never before. It talks to the kernel over
//! netlink ([`NetlinkConntrack`](crate::NetlinkConntrack)): one dump per sync, whatever the number of
//! stale flows.

pub use nft_dataplane::stale_flows::Flow;
use slice_model::IpFamily;

/// Why a deletion failed.
#[derive(Debug, thiserror::Error)]
#[error("conntrack {args}: {message}")]
pub struct ConntrackError {
    /// The arguments.
    pub args: String,
    /// What went wrong.
    pub message: String,
}

/// Deletes conntrack entries.
pub trait Conntrack {
    /// Deletes the entries of each flow; returns how many were deleted.
    /// Every flow is tried even when one fails.
    fn delete(&mut self, family: IpFamily, flows: &[Flow]) -> (u64, Vec<ConntrackError>);
}

/// No cleanup (`--dry-run`, `--no-conntrack`).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoConntrack;

impl Conntrack for NoConntrack {
    fn delete(&mut self, _: IpFamily, _: &[Flow]) -> (u64, Vec<ConntrackError>) {
        (0, Vec::new())
    }
}

/// A conntrack that records what it was asked, for tests (feature
/// `test-util`).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
pub struct RecordingConntrack {
    /// Every flow asked for, in order.
    pub deleted: Vec<(IpFamily, Flow)>,
}

#[cfg(any(test, feature = "test-util"))]
impl Conntrack for RecordingConntrack {
    fn delete(&mut self, family: IpFamily, flows: &[Flow]) -> (u64, Vec<ConntrackError>) {
        self.deleted.extend(flows.iter().map(|f| (family, *f)));
        (flows.len() as u64, Vec::new())
    }
}
