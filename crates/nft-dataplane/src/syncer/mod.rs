//! [`NftSyncer`]: keeps the kernel's table in step with the engine's maps,
//! writing only what changed.
//!
//! It remembers what it programmed, per service ([`Fragment`]s, frontend
//! owners, shared elements with their users). A sync rewrites only the
//! services the engine reports as changed; the first sync, a sync after any
//! failed apply, and one per [`FULL_RESYNC_PERIOD`] write the whole table.
//! On a failed apply the remembered view is dropped: nothing partial is
//! trusted.
//!
//! A full sync writes the whole table one of three ways:
//!
//! - a table that does not exist gets a first load of short transactions
//!   (nothing there to keep consistent);
//! - a table of this shape ([`crate::names::SHAPE`]) that the dataplane can
//!   read back is rewritten in place: declarations and every chain's rules
//!   a few services at a time, then the elements that differ from what the
//!   table holds (every set emptied and refilled in one transaction where
//!   they cannot be read), then what no service wants any more deleted. No
//!   transaction holds the whole ruleset, and no service is ever without
//!   its rules and elements. A restart's first sync trusts the digests the
//!   netlink writer stores with rules and slot frontends: the chains and
//!   slots that hold what it would write are left as they are;
//! - any other table (another shape, after a failed apply, unreadable) is
//!   replaced in one transaction.
//!
//! The parts: `programmed` keeps the ledger of what the kernel holds,
//! `full` writes the whole table (a first load, in place, or replacing
//! it) and `changes` the changed services' transaction.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use endpoints_map::{EndpointsMap, ServicesMap};
use slice_model::ServiceName;

use crate::desired::{DataplaneConfig, NoLocalEndpoints, ServiceTarget, plan_service};
use crate::element::{Element, Frontend, Key};
use crate::fragment::{self, Fragment};
use crate::packed::Packed;
use crate::transaction::Transaction;
use crate::{Dataplane, DataplaneError};

mod changes;
mod full;
mod programmed;
mod refused;

pub use full::FIRST_LOAD_CHUNK;
use full::{Stale, first_load, full_transaction, rewrite_in_place};
use programmed::Programmed;
use refused::Narrowed;
pub use refused::{FIRST_RECHECK, LAST_RECHECK, Refusal};

/// How many times one sync narrows a refused transaction down and writes
/// again without the refused services before it gives up.
const NARROWING_ROUNDS: usize = 3;

/// How often the whole table is rewritten even when nothing failed
/// (kube-proxy's nftables mode uses the same hour): it repairs element-level
/// tampering that the canary cannot see.
pub const FULL_RESYNC_PERIOD: Duration = Duration::from_secs(3600);

/// The element every incremental transaction adds first (a no-op when it
/// is there): if the table was removed or replaced from outside, its set is
/// gone, the add fails and the whole transaction with it, so the next sync
/// is a full one. Only an add: any element delete makes the kernel wait for
/// an RCU grace period at commit, which would triple the cost of a sync
/// that only adds.
fn canary() -> Element {
    Element::key(Key::Port(1))
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The whole table was replaced.
    pub full: bool,
    /// Services whose rules were written (all of them in a full sync).
    pub services_written: usize,
    /// Size of the nft transaction's text (0 when the dataplane did not
    /// render it).
    pub script_bytes: usize,
    /// Elements added or deleted.
    pub elements: usize,
    /// Time to decide what to write.
    pub render: Duration,
    /// Time to apply (rendering the text as it streams to nft, and nft).
    pub apply: Duration,
    /// Transactions applied (more than one only for the first load of a
    /// table that did not exist).
    pub transactions: usize,
    /// The longest of them.
    pub longest_apply: Duration,
    /// Transactions the kernel refused during this sync. Each was
    /// narrowed down to the services whose rules it refused, which are
    /// left out (see [`NftSyncer::refused`]), and the table written again
    /// without them.
    pub refused_transactions: usize,
    /// Services whose rules the kernel refuses, after this sync: not in
    /// the table.
    pub refused_services: usize,
    /// Time spent checking services in the scratch table: finding the
    /// ones a refused transaction refused, and checking refused ones again.
    pub checking: Duration,
    /// Services' ports dropped for want of local endpoints, as the rules
    /// just written decide it: every service planned in a sync of changes
    /// (zero included), and in a full sync only those with any (the rest
    /// have none).
    pub no_local_endpoints: Vec<(ServiceName, NoLocalEndpoints)>,
}

/// Several tables' reports as one (multus mode writes one per pod): sums,
/// the longest transaction of any, full when any was.
impl std::ops::AddAssign for SyncReport {
    fn add_assign(&mut self, mut r: SyncReport) {
        self.full |= r.full;
        self.services_written += r.services_written;
        self.script_bytes += r.script_bytes;
        self.elements += r.elements;
        self.render += r.render;
        self.apply += r.apply;
        self.transactions += r.transactions;
        self.longest_apply = self.longest_apply.max(r.longest_apply);
        self.refused_transactions += r.refused_transactions;
        self.refused_services += r.refused_services;
        self.checking += r.checking;
        self.no_local_endpoints.append(&mut r.no_local_endpoints);
    }
}

/// What a sync writes: the whole table (as one transaction, or as a first
/// load of several when the table does not exist), or the changes.
enum Plan {
    Full { view: Programmed, how: FullLoad },
    Partial { tx: Transaction, written: usize },
}

/// How a full sync writes the table.
enum FullLoad {
    /// It does not exist: short transactions.
    FirstLoad,
    /// It is readable and of this shape: in place, deleting these.
    InPlace(Box<Stale>),
    /// One transaction that deletes it and writes it again.
    Replace,
}

impl FullLoad {
    /// For the log.
    fn name(&self) -> &'static str {
        match self {
            FullLoad::FirstLoad => "first load",
            FullLoad::InPlace(_) => "in place",
            FullLoad::Replace => "replace",
        }
    }
}

/// Why a sync is happening.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Something changed.
    Changes,
    /// The periodic sync: also re-assert the fixed skeleton.
    Periodic,
}

/// Which services a table serves (a pod's: those on its networks).
pub type ServiceFilter = Box<dyn Fn(&ServiceName) -> bool + Send + Sync>;

/// Builds and applies the table for one IP family.
pub struct NftSyncer<D> {
    config: DataplaneConfig,
    dataplane: D,
    view: Option<Programmed>,
    last_full: Option<Instant>,
    filter: Option<ServiceFilter>,
    first_load_chunk: usize,
    /// An apply failed since the last full sync: the next replaces the
    /// table whole, trusting nothing in it.
    replace_next: bool,
    /// The table as read before the first sync (see [`Self::read_ahead`]).
    read_ahead: Option<full::ReadAhead>,
    /// Services whose rules the kernel refuses: not written.
    refused: BTreeMap<ServiceName, Refusal>,
    /// Which planned targets a reader of the plans keeps, when one does.
    keep_plans: Option<PlanFilter>,
    /// What the sync under way planned, for that reader.
    planned: Option<Planned>,
}

/// Which of a sync's planned targets a reader of the plans keeps.
pub type PlanFilter = Box<dyn Fn(&ServiceTarget) -> bool + Send>;

/// The plans a sync made, for what reads them besides the rules (the
/// localhost relay): planned once, by the syncer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Planned {
    /// The sync planned every service it serves: one not here has no
    /// target kept now.
    pub full: bool,
    /// Each service planned, with those of its targets the reader keeps
    /// (none: it keeps none now).
    pub services: BTreeMap<ServiceName, Vec<ServiceTarget>>,
}

impl Planned {
    /// Notes `name`'s plan, keeping what `keep` selects (after a full
    /// sync, a service with nothing kept is left out: absent says it).
    fn note(&mut self, keep: &PlanFilter, name: &ServiceName, targets: &[ServiceTarget]) {
        let kept: Vec<ServiceTarget> = targets.iter().filter(|t| keep(t)).cloned().collect();
        if !(kept.is_empty() && self.full) {
            self.services.insert(name.clone(), kept);
        }
    }
}

impl<D: Dataplane> NftSyncer<D> {
    /// A syncer whose first sync is a full one.
    pub fn new(config: DataplaneConfig, dataplane: D) -> Self {
        Self {
            config,
            dataplane,
            view: None,
            last_full: None,
            filter: None,
            first_load_chunk: FIRST_LOAD_CHUNK,
            replace_next: false,
            read_ahead: None,
            refused: BTreeMap::new(),
            keep_plans: None,
            planned: None,
        }
    }

    /// Keeps the targets `keep` selects of every service each sync plans,
    /// for [`Self::take_plans`].
    pub fn keep_plans(&mut self, keep: PlanFilter) {
        self.keep_plans = Some(keep);
    }

    /// What the last successful sync planned, when plans are kept
    /// ([`Self::keep_plans`]); taken once.
    pub fn take_plans(&mut self) -> Option<Planned> {
        self.planned.take()
    }

    /// Sets how many elements and rules each transaction of a first load
    /// holds (default [`FIRST_LOAD_CHUNK`]).
    pub fn set_first_load_chunk(&mut self, chunk: usize) {
        self.first_load_chunk = chunk.max(1);
    }

    /// Serves only the services `filter` selects; the next sync is a full
    /// one (the selection may have changed anything).
    pub fn set_filter(&mut self, filter: ServiceFilter) {
        self.filter = Some(filter);
        self.view = None;
    }

    /// Whether this table writes `name`'s rules: the filter selects it
    /// and the kernel does not refuse them.
    fn serves(&self, name: &ServiceName) -> bool {
        self.filter.as_ref().is_none_or(|f| f(name)) && !self.refused.contains_key(name)
    }

    /// Changes the configuration (the Node was relabelled, the cluster's
    /// ServiceCIDRs or the Node's pod ranges or addresses changed). Returns
    /// whether that is a change; if so the next sync is a full one, as
    /// kube-proxy's is: any service, and the fixed chains, may now be
    /// written differently.
    pub fn reconfigure(&mut self, change: impl FnOnce(&mut DataplaneConfig)) -> bool {
        let mut config = self.config.clone();
        change(&mut config);
        if config == self.config {
            return false;
        }
        self.config = config;
        self.view = None;
        self.recheck_refused_soon();
        true
    }

    /// The configuration.
    pub fn config(&self) -> &DataplaneConfig {
        &self.config
    }

    /// The dataplane (tests read a [`crate::Recording`] or a
    /// [`crate::KernelModel`] through it).
    pub fn dataplane(&mut self) -> &mut D {
        &mut self.dataplane
    }

    /// What the table holds for `service` since the last sync: its
    /// fragment, with the frontends it holds and those it waits for
    /// (`blocked`: another service held them first). `None` when it
    /// contributes nothing, or before the first sync.
    pub fn programmed(&self, service: &ServiceName) -> Option<Fragment> {
        self.view.as_ref()?.fragments.get(service).map(Packed::unpack)
    }

    /// The service that holds `frontend` in the table (first come, first
    /// served), if any.
    pub fn frontend_owner(&self, frontend: &Frontend) -> Option<&ServiceName> {
        self.view.as_ref()?.owners.get(frontend)
    }

    /// Makes the next sync a full one, as the periodic one is, without
    /// waiting the period (tests): the view is forgotten, the record of
    /// the last full sync kept. (Moving that record back a period cannot be
    /// done on a machine up for less than one.)
    #[cfg(test)]
    pub(crate) fn make_full_sync_due(&mut self) {
        self.view = None;
    }

    /// Makes the next sync a full one that trusts nothing the table holds
    /// (no rule digest): someone else changed the ruleset. The table is
    /// loaded anew if it is gone, else rewritten in place, every chain and
    /// every set element that differs.
    pub fn rewrite_next(&mut self) {
        self.view = None;
        self.last_full.get_or_insert_with(Instant::now);
    }

    /// Whether the next sync will replace the whole table.
    pub fn needs_full_sync(&self) -> bool {
        self.view.is_none() || self.last_full.is_none_or(|t| t.elapsed() >= FULL_RESYNC_PERIOD)
    }

    /// Brings the table in line with the maps. `changed` are the services
    /// whose ports or endpoints changed since the last successful sync
    /// (ignored by a full sync, which writes everything).
    ///
    /// When the kernel refuses the transaction, the services it wrote are
    /// narrowed down to those whose rules it refuses; they are left out
    /// ([`Self::refused`]) and everything else is written in this sync.
    /// An error means the kernel refuses what no single service is to
    /// blame for (the fixed chains, the table): nothing is written then.
    pub fn sync(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> Result<SyncReport, DataplaneError> {
        let started = Instant::now();
        let accepted = self.recheck_refused(services, endpoints, changed);
        let mut checking = started.elapsed();
        let changed = if accepted.is_empty() {
            Cow::Borrowed(changed)
        } else {
            let mut all = changed.clone();
            all.extend(accepted);
            Cow::Owned(all)
        };
        let mut refused_transactions = 0;
        loop {
            let full = self.needs_full_sync();
            let error = match self.sync_once(services, endpoints, &changed, kind) {
                Ok(report) => {
                    return Ok(SyncReport {
                        refused_transactions,
                        refused_services: self.refused.len(),
                        checking,
                        ..report
                    });
                }
                Err(e) => e,
            };
            refused_transactions += 1;
            if refused_transactions > NARROWING_ROUNDS {
                return Err(error);
            }
            let suspects: Vec<ServiceName> = if full {
                let mut all: Vec<ServiceName> = services.iter().map(|p| p.name.service.clone()).collect();
                all.dedup();
                all
            } else {
                changed.iter().cloned().collect()
            };
            let suspects = suspects.into_iter().filter(|n| self.serves(n)).collect();
            let narrowing = Instant::now();
            let narrowed = self.narrow(services, endpoints, suspects);
            checking += narrowing.elapsed();
            match narrowed {
                Narrowed::Refused(found) => {
                    self.refuse(found);
                    // The kernel applied none of the refused transaction
                    // (a first load, those before it): the table is read
                    // back and rewritten in place without the refused
                    // services, not replaced whole.
                    self.replace_next = false;
                }
                Narrowed::Unattributed => return Err(error),
            }
        }
    }

    /// One attempt at [`Self::sync`].
    fn sync_once(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> Result<SyncReport, DataplaneError> {
        let started = Instant::now();
        let full = self.needs_full_sync();
        self.planned = self.keep_plans.as_ref().map(|_| Planned {
            full,
            services: BTreeMap::new(),
        });
        let no_local_endpoints;
        let plan = if full {
            // What was read ahead serves this full sync or none: a later
            // one reads the table afresh.
            let ahead = self.read_ahead.take();
            let (view, no_local) = self.build_full(services, endpoints);
            no_local_endpoints = no_local;
            let built = started.elapsed();
            let how = if self.dataplane.table_exists(self.config.family, self.config.table()) == Some(false) {
                FullLoad::FirstLoad
            } else {
                // Only a restart's first sync trusts what the rules'
                // digests say; the periodic full sync rewrites every chain.
                let trust_digests = self.last_full.is_none();
                self.stale_if_in_place(&view, ahead, trust_digests)
                    .map_or(FullLoad::Replace, |stale| FullLoad::InPlace(Box::new(stale)))
            };
            tracing::debug!(
                build_ms = built.as_secs_f64() * 1e3,
                read_back_ms = (started.elapsed() - built).as_secs_f64() * 1e3,
                how = how.name(),
                "full sync planned"
            );
            Plan::Full { view, how }
        } else {
            // Re-asserting the fixed chains repairs what others committed;
            // when nobody has, a periodic sync is a sync of changes.
            let kind = match kind {
                SyncKind::Periodic if !self.dataplane.may_have_changed() => SyncKind::Changes,
                k => k,
            };
            let (tx, written, no_local) = self.partial(services, endpoints, changed, kind);
            no_local_endpoints = no_local;
            if written == 0 && kind == SyncKind::Changes {
                // Nothing to write: don't spend an nft run on the canary alone.
                return Ok(SyncReport {
                    render: started.elapsed(),
                    no_local_endpoints,
                    ..SyncReport::default()
                });
            }
            Plan::Partial { tx, written }
        };
        let mut report = SyncReport {
            full,
            no_local_endpoints,
            ..SyncReport::default()
        };
        let dataplane = &mut self.dataplane;
        let mut apply = |tx: &Transaction| -> Result<(), DataplaneError> {
            let applied = Instant::now();
            let bytes = dataplane.apply(tx)?;
            let took = applied.elapsed();
            tracing::debug!(
                ops = tx.ops.len(),
                elements = tx.element_count(),
                bytes,
                took_ms = took.as_secs_f64() * 1e3,
                "transaction applied"
            );
            report.script_bytes += bytes;
            report.elements += tx.element_count();
            report.apply += took;
            report.transactions += 1;
            report.longest_apply = report.longest_apply.max(took);
            Ok(())
        };
        let applied = match &plan {
            // Each of a first load's transactions is applied as soon as it
            // is built, so that memory holds one of them, not the table twice.
            Plan::Full {
                view,
                how: FullLoad::FirstLoad,
            } => first_load(&self.config, view, self.first_load_chunk, &mut apply),
            Plan::Full {
                view,
                how: FullLoad::InPlace(stale),
            } => rewrite_in_place(&self.config, view, stale, self.first_load_chunk, &mut apply),
            Plan::Full {
                view,
                how: FullLoad::Replace,
            } => apply(&full_transaction(&self.config, view)),
            Plan::Partial { tx, .. } => apply(tx),
        };
        if let Err(e) = applied {
            // The kernel kept its state before the failed transaction,
            // which no longer matches the view: forget it (the next sync
            // replaces the whole table).
            self.view = None;
            self.replace_next = true;
            self.planned = None;
            return Err(e);
        }
        report.render = started.elapsed().saturating_sub(report.apply);
        match plan {
            Plan::Full { view, .. } => {
                report.services_written = view.fragments.len();
                self.view = Some(view);
                self.last_full = Some(Instant::now());
                self.replace_next = false;
            }
            Plan::Partial { written, .. } => report.services_written = written,
        }
        Ok(report)
    }

    /// The ledger of the whole table as the maps want it, and the services
    /// with ports dropped for want of local endpoints.
    fn build_full(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
    ) -> (Programmed, Vec<(ServiceName, NoLocalEndpoints)>) {
        let mut no_local = Vec::new();
        let mut view = Programmed::default();
        let mut names: Vec<&ServiceName> = services.iter().map(|p| &p.name.service).collect();
        names.dedup();
        // Sized up front: grown by doubling, each map would leave the
        // tables it outgrew as holes among what the sync keeps. Most
        // services have one frontend and one cluster IP.
        view.fragments.reserve(names.len());
        view.owners.reserve(names.len());
        view.shared.reserve(names.len());
        let mut planned = self.planned.take();
        for name in names.into_iter().filter(|n| self.serves(n)) {
            let targets = plan_service(name, services, endpoints, &self.config);
            if let (Some(keep), Some(planned)) = (&self.keep_plans, planned.as_mut()) {
                planned.note(keep, name, &targets);
            }
            let dropped = NoLocalEndpoints::of(&targets);
            if !dropped.is_zero() {
                no_local.push((name.clone(), dropped));
            }
            view.replace(name, |claim, old| fragment::build(&targets, &self.config, claim, old));
        }
        // The full transaction writes every shared element; a fresh map
        // also drops the large allocation the build's changes grew.
        view.shared_changes = HashMap::new();
        self.planned = planned;
        (view, no_local)
    }
}

/// Removes the table `table` of both families, whether or not they exist,
/// one transaction each (`proxyd cleanup`).
pub fn cleanup_transactions(table: &'static str) -> Vec<Transaction> {
    [slice_model::IpFamily::V4, slice_model::IpFamily::V6]
        .into_iter()
        .map(|f| Transaction::remove_table(f, table))
        .collect()
}
