//! UDP conntrack cleanup after a sync, as kube-proxy does it; which
//! entries are wrong is decided by `nft_dataplane::stale_flows` (a
//! [`Cleanup`]: each changed UDP frontend keeps only the entries DNATed to
//! one of its serving endpoints).
//!
//! The cleanup runs only after the rules that replace the entries are in
//! place (a successful apply), never before. It talks to the kernel over
//! netlink ([`NetlinkConntrack`](crate::NetlinkConntrack)): one dump per sync, whatever the number of
//! stale flows.

pub use nft_dataplane::stale_flows::Cleanup;
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
    /// Deletes the entries `cleanup` names; returns how many were deleted.
    /// Every entry is tried even when one fails.
    fn delete(&mut self, family: IpFamily, cleanup: &Cleanup) -> (u64, Vec<ConntrackError>);
}

/// No cleanup (`--dry-run`, `--no-conntrack`).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoConntrack;

impl Conntrack for NoConntrack {
    fn delete(&mut self, _: IpFamily, _: &Cleanup) -> (u64, Vec<ConntrackError>) {
        (0, Vec::new())
    }
}

/// A conntrack that records what it was asked, for tests (feature
/// `test-util`).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
pub struct RecordingConntrack {
    /// Every cleanup asked for, in order.
    pub asked: Vec<(IpFamily, Cleanup)>,
}

#[cfg(any(test, feature = "test-util"))]
impl Conntrack for RecordingConntrack {
    fn delete(&mut self, family: IpFamily, cleanup: &Cleanup) -> (u64, Vec<ConntrackError>) {
        self.asked.push((family, cleanup.clone()));
        // What it names stands for what a kernel would have deleted.
        (cleanup.len() as u64, Vec::new())
    }
}
