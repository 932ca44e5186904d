#![doc = include_str!("../README.md")]

pub mod desired;
pub mod digest;
pub mod element;
pub mod fragment;
pub mod kernel;
mod lock_cost;
pub mod names;
pub mod nodeport;
mod packed;
mod protocol;
pub mod rule;
pub mod skeleton;
pub mod stale_flows;
pub mod syncer;
pub mod target;
pub mod tracer;
pub mod transaction;

pub use desired::{DataplaneConfig, LocalDetector, ServiceTarget};
pub use digest::RulesDigest;
pub use fragment::Fragment;
pub use kernel::KernelModel;
pub use syncer::{NftSyncer, PlanFilter, Planned, SyncKind, SyncReport};
pub use target::{Target, Written};
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
    /// The kernel refused a transaction sent over netlink, or it could not
    /// be sent; nothing of it was applied.
    #[error("the kernel refused the transaction ({what}): {source}")]
    Netlink {
        /// The message it refused (`add 3 elements of set slot-frontends-2`),
        /// or what could not be done.
        what: String,
        /// The kernel's error.
        #[source]
        source: std::io::Error,
    },
    /// A message of the transaction cannot be encoded within netlink's
    /// limits (an attribute's 16-bit length): nothing was sent. Names the
    /// message, and so the chain or set (and the service and port whose
    /// they are).
    #[error("cannot encode the transaction ({what}): {why}")]
    Unencodable {
        /// The message (`add a rule to chain svc-…`).
        what: String,
        /// The limit it passes.
        why: String,
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

    /// Whether the kernel would accept `tx`, asked without committing it
    /// (nothing changes); `None` when the dataplane cannot ask. The syncer
    /// checks a refused transaction's services in a scratch table
    /// ([`names::CHECK_TABLE`]) to find the ones the kernel refuses.
    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        let _ = tx;
        None
    }

    /// Whether anything may have changed the ruleset since this
    /// dataplane's last successful [`apply`](Self::apply). A periodic sync
    /// with nothing to write sends nothing when this says no; a dataplane
    /// that cannot tell says yes (the default), and every periodic sync
    /// then re-asserts the fixed chains.
    fn may_have_changed(&mut self) -> bool {
        true
    }

    /// The ruleset's generation, which every commit bumps (whoever makes
    /// it); `None` when the dataplane cannot tell. A table read ahead of
    /// the first sync is used only while the generation is unchanged.
    fn generation(&mut self) -> Option<u64> {
        None
    }

    /// Whether the table `table` of `family` exists; `None` when the
    /// dataplane cannot tell. A full sync into a table that does not exist
    /// is split into short transactions (nothing is there to keep
    /// consistent); any other full sync is one transaction.
    fn table_exists(&mut self, family: slice_model::IpFamily, table: &str) -> Option<bool> {
        let _ = (family, table);
        None
    }

    /// The sets and chains the table `table` of `family` holds, read back;
    /// `None` when the dataplane cannot read them (or the table does not
    /// exist). A full sync over an existing table that can be read is
    /// written in place, in short transactions; otherwise it replaces the
    /// table in one.
    fn objects(&mut self, family: slice_model::IpFamily, table: &str) -> Option<Result<TableObjects, DataplaneError>> {
        let _ = (family, table);
        None
    }

    /// The elements of set `set` of the table `table` of `family`, read
    /// back; `None` when the dataplane cannot read them. A table rewritten
    /// in place whose sets can be read has only the elements that differ
    /// changed, a few services per transaction; otherwise every set is
    /// emptied and refilled in one transaction.
    fn elements(
        &mut self,
        family: slice_model::IpFamily,
        table: &str,
        set: &names::SetId,
    ) -> Option<Result<Vec<element::Element>, DataplaneError>> {
        let _ = (family, table, set);
        None
    }
}

/// What a table holds, by name, as a dataplane reads it back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableObjects {
    /// Its sets and maps.
    pub sets: Vec<String>,
    /// Its chains, each with how many rules it holds.
    pub chains: Vec<(String, usize)>,
    /// The chains each of whose rules carries its [`rule::Rule::digest`] (as the
    /// netlink writer stores it), with their [`RulesDigest`]: a chain whose
    /// digest is the one proxyd would write holds those rules.
    pub rule_digests: Vec<(String, RulesDigest)>,
}

impl<D: Dataplane + ?Sized> Dataplane for Box<D> {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        (**self).apply(tx)
    }

    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        (**self).check(tx)
    }

    fn may_have_changed(&mut self) -> bool {
        (**self).may_have_changed()
    }

    fn generation(&mut self) -> Option<u64> {
        (**self).generation()
    }

    fn table_exists(&mut self, family: slice_model::IpFamily, table: &str) -> Option<bool> {
        (**self).table_exists(family, table)
    }

    fn objects(&mut self, family: slice_model::IpFamily, table: &str) -> Option<Result<TableObjects, DataplaneError>> {
        (**self).objects(family, table)
    }

    fn elements(
        &mut self,
        family: slice_model::IpFamily,
        table: &str,
        set: &names::SetId,
    ) -> Option<Result<Vec<element::Element>, DataplaneError>> {
        (**self).elements(family, table, set)
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
