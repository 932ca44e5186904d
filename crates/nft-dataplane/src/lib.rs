//! # nft-dataplane
//!
//! The nftables dataplane of a Kubernetes service proxy, as a library:
//! from the endpoint tracking crates' maps to the transactions that keep
//! one nftables table in step with them, rewriting only what changed.
//!
//! ```text
//!  desired      ServicesMap + EndpointsMap ─► ServiceTarget per port
//!  fragment     ServiceTarget ─► what one service adds to the table
//!  skeleton     the fixed sets, maps and chains
//!  syncer       NftSyncer: full or partial sync ─► one Transaction
//!  transaction  typed operations (names, rule) ─► nft text, streamed
//!  kernel       KernelModel: applies Transactions under nft's rules
//!  tracer       KernelModel::trace: what happens to a packet
//!  conntrack    which UDP conntrack entries a sync makes stale
//! ```
//!
//! Nothing here runs `nft` or needs root: a [`Dataplane`] applies
//! transactions (the binary's runs `nft -f -`; [`KernelModel`] applies
//! them to a model, [`Recording`] keeps them). It depends on no Kubernetes
//! client, no async runtime and no JSON library.
//!
//! Load balancing is exact: every ready endpoint of a service port gets
//! 1/N of its new connections, for any N, as kube-proxy's
//! `numgen random mod N` does.
//!
//! ```
//! use std::collections::BTreeSet;
//! use endpoints_map::{EndpointsMap, ServicesMap};
//! use nft_dataplane::{DataplaneConfig, KernelModel, NftSyncer, SyncKind};
//! use slice_model::IpFamily;
//!
//! let config = DataplaneConfig::new(IpFamily::V4);
//! let mut syncer = NftSyncer::new(config, KernelModel::default());
//! let report = syncer
//!     .sync(&ServicesMap::new(), &EndpointsMap::new(), &BTreeSet::new(), SyncKind::Changes)
//!     .expect("an empty ruleset applies");
//! assert!(report.full);
//! assert!(syncer.dataplane().table(IpFamily::V4).is_some());
//! ```

pub mod conntrack;
pub mod desired;
pub mod element;
pub mod fragment;
pub mod kernel;
pub mod names;
pub mod rule;
pub mod skeleton;
pub mod syncer;
pub mod tracer;
pub mod transaction;

pub use desired::{DataplaneConfig, ServiceTarget};
pub use fragment::Fragment;
pub use kernel::KernelModel;
pub use syncer::{NftSyncer, SyncKind, SyncReport};
pub use transaction::{Op, Transaction};

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// `nft` could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `nft` rejected the transaction; nothing of it was applied.
    #[error("nft rejected the transaction ({status}): {stderr}")]
    Rejected {
        /// Exit status.
        status: String,
        /// What nft said.
        stderr: String,
    },
    /// A dry run could not write its script.
    #[error("cannot write {path}: {source}")]
    Write {
        /// Where.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Applies transactions.
pub trait Dataplane {
    /// Applies one transaction: all of it or none. Returns the size of the
    /// nft text it wrote (0 for a dataplane that does not render it).
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError>;
}

impl<D: Dataplane + ?Sized> Dataplane for Box<D> {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        (**self).apply(tx)
    }
}

/// A dataplane that keeps the transactions it is given, for tests and for
/// `render`; it can be told to fail.
#[derive(Debug, Default)]
pub struct Recording {
    /// Transactions applied, in order.
    pub applied: Vec<Transaction>,
    /// Fail the next this many applies.
    pub fail_next: u32,
}

impl Dataplane for Recording {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Err(DataplaneError::Rejected {
                status: "injected".into(),
                stderr: "injected failure".into(),
            });
        }
        let bytes = tx.text().len();
        self.applied.push(tx.clone());
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests;
