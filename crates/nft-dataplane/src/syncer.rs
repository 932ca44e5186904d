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
//!   a few services at a time, then every set emptied and refilled in one
//!   transaction of elements alone, then what no service wants any more
//!   deleted. No transaction holds the whole ruleset, and no service is
//!   ever without its rules and elements;
//! - any other table (another shape, after a failed apply, unreadable) is
//!   replaced in one transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use endpoints_map::{EndpointsMap, ServicesMap};
use slice_model::ServiceName;

use crate::desired::{DataplaneConfig, plan_service};
use crate::element::{Element, Frontend, Key, Value};
use crate::fragment::{self, ChainDef, Fragment, Shared};
use crate::lock_cost::LockCost;
use crate::names::{ChainId, SetId};
use crate::packed::Packed;
use crate::skeleton;
use crate::transaction::{Op, Transaction};
use crate::{Dataplane, DataplaneError};

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

/// What the kernel holds, as far as proxyd knows.
#[derive(Debug, Default)]
struct Programmed {
    /// Encoded: they are read back only when their service changes or
    /// the whole table is written.
    fragments: HashMap<ServiceName, Packed>,
    /// Which service holds each frontend (first come, first served).
    owners: HashMap<Frontend, ServiceName>,
    /// Services that wanted a frontend another one held.
    waiting: HashMap<Frontend, BTreeSet<ServiceName>>,
    /// How many services want each shared element.
    shared: HashMap<Shared, u32>,
    /// Shared elements that appeared (+1) or disappeared (-1) since the
    /// last [`Programmed::take_shared_changes`]: copying `shared` to diff it
    /// would cost a pass over every cluster IP per sync.
    shared_changes: HashMap<Shared, i8>,
}

impl Programmed {
    /// Replaces one service's fragment; returns the one it had and the
    /// services waiting for frontends it gave up.
    fn replace(
        &mut self,
        name: &ServiceName,
        build: impl FnOnce(&mut dyn FnMut(&Frontend) -> bool, Option<&Fragment>) -> Fragment,
    ) -> Replaced {
        let old = self.fragments.remove(name).map(|p| p.unpack());
        if let Some(o) = &old {
            for f in &o.frontends {
                if self.owners.get(f) == Some(name) {
                    self.owners.remove(f);
                }
            }
            for f in &o.blocked {
                if let Some(w) = self.waiting.get_mut(f) {
                    w.remove(name);
                    if w.is_empty() {
                        self.waiting.remove(f);
                    }
                }
            }
            for item in &o.shared {
                if let Some(n) = self.shared.get_mut(item) {
                    *n -= 1;
                    if *n == 0 {
                        self.shared.remove(item);
                        *self.shared_changes.entry(*item).or_default() -= 1;
                    }
                }
            }
        }
        let mut blocked = Vec::new();
        let owners = &mut self.owners;
        let mut claim = |f: &Frontend| match owners.get(f) {
            Some(other) if other != name => {
                tracing::warn!(
                    service = %name,
                    "{f} is already used by service {other}; this service's use of it waits until it is free"
                );
                blocked.push(*f);
                false
            }
            _ => {
                owners.insert(*f, name.clone());
                true
            }
        };
        let mut new = build(&mut claim, old.as_ref());
        blocked.shrink_to_fit();
        new.blocked = blocked;
        for f in &new.blocked {
            self.waiting.entry(*f).or_default().insert(name.clone());
        }
        for item in &new.shared {
            let n = self.shared.entry(*item).or_default();
            if *n == 0 {
                *self.shared_changes.entry(*item).or_default() += 1;
            }
            *n += 1;
        }
        let mut wake = Vec::new();
        if let Some(o) = &old {
            for f in o.frontends.iter().filter(|f| !self.owners.contains_key(f)) {
                wake.extend(self.waiting.get(f).into_iter().flatten().cloned());
            }
        }
        if !new.is_empty() {
            self.fragments.insert(name.clone(), Packed::pack(&new));
        }
        Replaced { old, new, wake }
    }

    /// The shared elements to add and to delete since the last call.
    fn take_shared_changes(&mut self) -> (Vec<Shared>, Vec<Shared>) {
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        for (item, delta) in self.shared_changes.drain() {
            match delta {
                1.. => added.push(item),
                ..0 => removed.push(item),
                0 => {}
            }
        }
        (added, removed)
    }
}

/// One service's fragment replaced in the view.
struct Replaced {
    /// The fragment it had.
    old: Option<Fragment>,
    /// The one it has now (the view keeps it packed; this spares a sync
    /// that diffs them decoding it again).
    new: Fragment,
    /// Services waiting for frontends it gave up.
    wake: Vec<ServiceName>,
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

/// What a table holds that the view does not want.
#[derive(Default)]
struct Stale {
    chains: Vec<ChainId>,
    sets: Vec<SetId>,
    /// How many sets the table holds (each named set found walks past them).
    sets_in_table: usize,
    /// The elements of the sets the view wants (an absent set holds none),
    /// when the dataplane could read them all: only what differs is then
    /// written.
    held: Option<Held>,
}

/// Elements a table holds, by set.
type Held = HashMap<SetId, HeldSet>;

/// The elements one set holds: keys and values as read back, or keys alone
/// (a slot map's, derived from its frontend set).
struct HeldSet {
    elements: HashMap<Key, Option<Value>>,
    values_read: bool,
}

impl HeldSet {
    /// Whether it holds `el`'s key: `Some(true)` with `el`'s value too,
    /// `Some(false)` with another or an unknown one.
    fn holds(&self, el: &Element) -> Option<bool> {
        let value = self.elements.get(&el.key)?;
        Some(self.values_read && *value == el.value)
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
        }
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

    fn serves(&self, name: &ServiceName) -> bool {
        self.filter.as_ref().is_none_or(|f| f(name))
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

    /// Whether the next sync will replace the whole table.
    pub fn needs_full_sync(&self) -> bool {
        self.view.is_none() || self.last_full.is_none_or(|t| t.elapsed() >= FULL_RESYNC_PERIOD)
    }

    /// Brings the table in line with the maps. `changed` are the services
    /// whose ports or endpoints changed since the last successful sync
    /// (ignored by a full sync, which writes everything).
    pub fn sync(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> Result<SyncReport, DataplaneError> {
        let started = Instant::now();
        let full = self.needs_full_sync();
        let plan = if full {
            let view = self.build_full(services, endpoints);
            let how = if self.dataplane.table_exists(self.config.family, self.config.table()) == Some(false) {
                FullLoad::FirstLoad
            } else {
                self.stale_if_in_place(&view)
                    .map_or(FullLoad::Replace, |stale| FullLoad::InPlace(Box::new(stale)))
            };
            Plan::Full { view, how }
        } else {
            // Re-asserting the fixed chains repairs what others committed;
            // when nobody has, a periodic sync is a sync of changes.
            let kind = match kind {
                SyncKind::Periodic if !self.dataplane.may_have_changed() => SyncKind::Changes,
                k => k,
            };
            let (tx, written) = self.partial(services, endpoints, changed, kind);
            if written == 0 && kind == SyncKind::Changes {
                // Nothing to write: don't spend an nft run on the canary alone.
                return Ok(SyncReport {
                    render: started.elapsed(),
                    ..SyncReport::default()
                });
            }
            Plan::Partial { tx, written }
        };
        let mut report = SyncReport {
            full,
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

    /// What the table holds beyond `view`, when it can be rewritten in
    /// place: the dataplane reads it back, it has this shape's canary, its
    /// slot chains have their one rule each (nft cannot rewrite them once
    /// their maps hold elements), and everything in it is named as proxyd
    /// names things.
    fn stale_if_in_place(&mut self, view: &Programmed) -> Option<Stale> {
        if self.replace_next {
            return None;
        }
        let objects = self.dataplane.objects(self.config.family, self.config.table())?.ok()?;
        let canary = SetId::Canary.to_string();
        if !objects.sets.contains(&canary) {
            return None;
        }
        let rules: HashMap<&str, usize> = objects.chains.iter().map(|(c, n)| (c.as_str(), *n)).collect();
        let fixed = skeleton::chains(&self.config);
        let intact = fixed
            .iter()
            .filter(|(c, _)| !skeleton::reassertable(c))
            .all(|(c, r)| rules.get(c.to_string().as_str()) == Some(&r.len()));
        if !intact {
            return None;
        }
        let mut wanted_chains: std::collections::HashSet<ChainId> = fixed.into_iter().map(|(c, _)| c).collect();
        let mut wanted_sets: std::collections::HashSet<SetId> =
            SetId::skeleton(self.config.scope).into_iter().collect();
        for f in view.fragments.values().map(Packed::unpack) {
            wanted_chains.extend(f.chains.into_iter().map(|c| c.id));
            wanted_sets.extend(f.own_sets);
        }
        let mut stale = Stale {
            sets_in_table: objects.sets.len(),
            ..Stale::default()
        };
        for (name, _) in &objects.chains {
            let chain = ChainId::from_name(name)?;
            if !wanted_chains.contains(&chain) {
                stale.chains.push(chain);
            }
        }
        let mut present = Vec::new();
        for name in &objects.sets {
            let set = SetId::from_name(name)?;
            if !wanted_sets.contains(&set) {
                stale.sets.push(set);
            } else if !matches!(set, SetId::Affinity(_)) {
                present.push(set);
            }
        }
        stale.held = self.read_elements(present);
        Some(stale)
    }

    /// The elements of `sets`, when the dataplane can read every one. A
    /// slot map is not read: the kernel dumps a set in time that grows
    /// with the square of its size (each reply walks it from the start),
    /// and the slot maps are the largest sets; their keys follow from the
    /// frontends of that width (slots `0..N` of each), their values are
    /// written again.
    fn read_elements(&mut self, sets: Vec<SetId>) -> Option<Held> {
        let (family, table) = (self.config.family, self.config.table());
        let mut held = Held::with_capacity(sets.len());
        let (slot_maps, others): (Vec<SetId>, Vec<SetId>) = sets
            .into_iter()
            .partition(|s| matches!(s, SetId::ServiceSlots(_) | SetId::NodePortSlots(_)));
        for set in others {
            let elements = self.dataplane.elements(family, table, &set)?.ok()?;
            let elements = elements.into_iter().map(|e| (e.key, e.value)).collect();
            held.insert(
                set,
                HeldSet {
                    elements,
                    values_read: true,
                },
            );
        }
        for map in slot_maps {
            let (node_port, n) = match map {
                SetId::ServiceSlots(n) => (false, n),
                SetId::NodePortSlots(n) => (true, n),
                _ => continue,
            };
            let frontends = held.get(&SetId::slot_frontends(node_port, n))?;
            let elements = frontends
                .elements
                .keys()
                .filter_map(|k| match k {
                    Key::Frontend(f) => Some(*f),
                    _ => None,
                })
                .flat_map(|f| (0..n).map(move |slot| (Key::Slot(f, slot), None)))
                .collect();
            held.insert(
                map,
                HeldSet {
                    elements,
                    values_read: false,
                },
            );
        }
        Some(held)
    }

    fn build_full(&self, services: &ServicesMap, endpoints: &EndpointsMap) -> Programmed {
        let mut view = Programmed::default();
        let mut names: Vec<&ServiceName> = services.iter().map(|p| &p.name.service).collect();
        names.dedup();
        // Sized up front: grown by doubling, each map would leave the
        // tables it outgrew as holes among what the sync keeps. Most
        // services have one frontend and one cluster IP.
        view.fragments.reserve(names.len());
        view.owners.reserve(names.len());
        view.shared.reserve(names.len());
        for name in names.into_iter().filter(|n| self.serves(n)) {
            let targets = plan_service(name, services, endpoints, &self.config);
            view.replace(name, |claim, old| fragment::build(&targets, &self.config, claim, old));
        }
        // The full transaction writes every shared element; a fresh map
        // also drops the large allocation the build's changes grew.
        view.shared_changes = HashMap::new();
        view
    }

    fn partial(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> (Transaction, usize) {
        let config = &self.config;
        let filter = &self.filter;
        let mut tx = Transaction::for_table(config.family, config.table());
        let Some(view) = self.view.as_mut() else {
            return (tx, 0);
        };
        // What the kernel holds for each service touched, before this sync.
        let mut originals: HashMap<ServiceName, Option<Fragment>> = HashMap::new();
        // And what it holds for them now.
        let mut latest: HashMap<ServiceName, Fragment> = HashMap::new();
        let mut queue: Vec<ServiceName> = changed.iter().rev().cloned().collect();
        let cap = 4 * (changed.len() + view.waiting.len()) + 16;
        let mut rounds = 0usize;
        while let Some(name) = queue.pop() {
            rounds += 1;
            if rounds > cap {
                // Each wake-up needs a frontend freed by an earlier round,
                // so this cannot loop; if it ever does, say so.
                debug_assert!(false, "frontend hand-over did not settle");
                tracing::error!("frontend hand-over did not settle after {cap} rounds; the next full sync repairs it");
                break;
            }
            let targets = if filter.as_ref().is_none_or(|f| f(&name)) {
                plan_service(&name, services, endpoints, config)
            } else {
                Vec::new()
            };
            let Replaced { old, new, wake } =
                view.replace(&name, |claim, old| fragment::build(&targets, config, claim, old));
            latest.insert(name.clone(), new);
            originals.entry(name).or_insert(old);
            queue.extend(wake);
        }
        let (came, went) = view.take_shared_changes();
        let mut names: Vec<&ServiceName> = originals.keys().collect();
        names.sort_unstable();
        let none = Fragment::default();
        let pairs: Vec<(&Fragment, &Fragment)> = names
            .iter()
            .map(|n| {
                let old = originals.get(*n).and_then(Option::as_ref).unwrap_or(&none);
                (old, latest.get(*n).unwrap_or(&none))
            })
            .filter(|(o, n)| o != n)
            .collect();

        tx.push(Op::AddElements(SetId::Canary, vec![canary()]));
        if kind == SyncKind::Periodic {
            reassert_skeleton(config, &mut tx);
        }
        // 1. New sets and chains exist before anything refers to them.
        for (old, new) in &pairs {
            for s in new.own_sets.iter().filter(|s| !old.own_sets.contains(s)) {
                tx.push(Op::AddSet(s.clone(), Vec::new()));
            }
            for c in new.chains.iter().filter(|c| !old.chains.iter().any(|o| o.id == c.id)) {
                tx.push(Op::AddChain(c.id.clone()));
            }
        }
        // 2. Chains that are new or changed are rewritten.
        for (old, new) in &pairs {
            for c in new.chains.iter().filter(|c| !old.chains.contains(c)) {
                tx.push(Op::FlushChain(c.id.clone()));
                for r in &c.rules {
                    tx.push(Op::AddRule(c.id.clone(), r.clone()));
                }
            }
        }
        // 3. Elements: deletes first, so a key whose value changes is
        // replaced.
        let mut deletes: BTreeMap<SetId, Vec<Element>> = BTreeMap::new();
        let mut adds: BTreeMap<SetId, Vec<Element>> = BTreeMap::new();
        for (old, new) in &pairs {
            let (before, after) = (old.entry_elements(), new.entry_elements());
            for ((set, key), value) in &before {
                if after.get(&(set.clone(), *key)) != Some(value) {
                    deletes.entry(set.clone()).or_default().push(Element {
                        key: *key,
                        value: value.clone(),
                    });
                }
            }
            for ((set, key), value) in &after {
                if before.get(&(set.clone(), *key)) != Some(value) {
                    adds.entry(set.clone()).or_default().push(Element {
                        key: *key,
                        value: value.clone(),
                    });
                }
            }
        }
        for (old, new) in &pairs {
            backend_changes(old, new, &mut deletes, &mut adds);
        }
        for s in went {
            deletes.entry(s.set()).or_default().push(s.element());
        }
        for s in came {
            adds.entry(s.set()).or_default().push(s.element());
        }
        for (set, mut elements) in deletes {
            elements.sort_unstable();
            tx.push(Op::DeleteElements(set, elements));
        }
        for (set, mut elements) in adds {
            elements.sort_unstable();
            tx.push(Op::AddElements(set, elements));
        }
        // 4. What is gone: flush every removed chain before deleting any
        // (they may jump to each other), then the sets only they used.
        let gone = |old: &Fragment, new: &Fragment| -> Vec<ChainId> {
            old.chains
                .iter()
                .filter(|c| !new.chains.iter().any(|n| n.id == c.id))
                .map(|c| c.id.clone())
                .collect()
        };
        for (old, new) in &pairs {
            for c in gone(old, new) {
                tx.push(Op::FlushChain(c));
            }
        }
        for (old, new) in &pairs {
            for c in gone(old, new) {
                tx.push(Op::DeleteChain(c));
            }
            for s in old.own_sets.iter().filter(|s| !new.own_sets.contains(s)) {
                tx.push(Op::DeleteSet(s.clone()));
            }
        }
        (tx, pairs.len())
    }
}

/// The backend-map elements that differ between two versions of a
/// fragment, position by position: a map of 100,000 endpoints is compared
/// as two lists, not hashed element by element.
fn backend_changes(
    old: &Fragment,
    new: &Fragment,
    deletes: &mut BTreeMap<SetId, Vec<Element>>,
    adds: &mut BTreeMap<SetId, Vec<Element>>,
) {
    fn find<'a>(f: &'a Fragment, set: &SetId) -> &'a [std::net::SocketAddr] {
        f.backends
            .iter()
            .find(|(s, _)| s == set)
            .map_or(&[], |(_, list)| &list[..])
    }
    let sets: BTreeSet<&SetId> = old.backends.iter().chain(&new.backends).map(|(s, _)| s).collect();
    for set in sets {
        let (before, after) = (find(old, set), find(new, set));
        for i in 0..before.len().max(after.len()) {
            let (b, a) = (before.get(i), after.get(i));
            if b == a {
                continue;
            }
            let key = Key::Index(u32::try_from(i).unwrap_or(u32::MAX));
            if let Some(ep) = b {
                deletes
                    .entry(set.clone())
                    .or_default()
                    .push(Element::map(key, Value::Endpoint(*ep)));
            }
            if let Some(ep) = a {
                adds.entry(set.clone())
                    .or_default()
                    .push(Element::map(key, Value::Endpoint(*ep)));
            }
        }
    }
}

/// Puts the skeleton back as it should be without touching any service's
/// elements: declarations are re-added (a no-op when they exist) and the
/// fixed chains are flushed and refilled.
fn reassert_skeleton(config: &DataplaneConfig, tx: &mut Transaction) {
    for set in SetId::skeleton(config.scope) {
        tx.push(Op::AddSet(set, Vec::new()));
    }
    let chains = skeleton::chains(config);
    for (chain, _) in &chains {
        tx.push(Op::AddChain(chain.clone()));
    }
    for (chain, rules) in chains.into_iter().filter(|(c, _)| skeleton::reassertable(c)) {
        tx.push(Op::FlushChain(chain.clone()));
        for r in rules {
            tx.push(Op::AddRule(chain.clone(), r));
        }
    }
}

/// The fragments, in service-name order (transactions are deterministic),
/// each decoded as it is reached.
fn by_name(view: &Programmed) -> Vec<&Packed> {
    let mut names: Vec<&ServiceName> = view.fragments.keys().collect();
    names.sort_unstable();
    names.iter().filter_map(|n| view.fragments.get(*n)).collect()
}

/// Declares everything rules and elements may refer to, in an order nft
/// accepts: the fixed chains and the fragments' `chains`, then the fixed
/// sets and the fragments' `own_sets` (each with what `elements` gives
/// it), then the fixed chains' rules.
fn declare(
    config: &DataplaneConfig,
    chains: &[ChainDef],
    own_sets: Vec<SetId>,
    tx: &mut Transaction,
    mut elements: impl FnMut(&SetId) -> Vec<Element>,
) {
    let fixed = skeleton::chains(config);
    for (chain, _) in &fixed {
        tx.push(Op::AddChain(chain.clone()));
    }
    for c in chains {
        tx.push(Op::AddChain(c.id.clone()));
    }
    for set in SetId::skeleton(config.scope).into_iter().chain(own_sets) {
        let e = elements(&set);
        tx.push(Op::AddSet(set, e));
    }
    for (chain, rules) in fixed {
        for r in rules {
            tx.push(Op::AddRule(chain.clone(), r));
        }
    }
}

/// The whole ruleset, replacing whatever the table held, as one
/// transaction: there is no moment without rules. Chains are declared
/// first, then sets with their elements (which may name chains), then
/// rules (which name both).
fn full_transaction(config: &DataplaneConfig, view: &Programmed) -> Transaction {
    let family = config.family;
    let mut tx = Transaction::for_table(family, config.table());
    // Creating the table first makes the delete valid whether or not it
    // exists.
    tx.push(Op::AddTable(family));
    tx.push(Op::DeleteTable(family));
    tx.push(Op::AddTable(family));
    let mut by_set = shared_elements(view);
    let (mut chains, mut own_sets) = (Vec::new(), Vec::new());
    for f in by_name(view).into_iter().map(Packed::unpack) {
        f.for_each_element(|set, el| by_set.entry(set).or_default().push(el));
        chains.extend(f.chains);
        own_sets.extend(f.own_sets);
    }
    declare(config, &chains, own_sets, &mut tx, |set| {
        by_set.remove(set).unwrap_or_default()
    });
    for c in chains {
        for r in c.rules {
            tx.push(Op::AddRule(c.id.clone(), r));
        }
    }
    tx
}

/// The elements of the table no fragment holds, by set: the canary and
/// the shared elements. A full sync adds each fragment's as it decodes it.
fn shared_elements(view: &Programmed) -> HashMap<SetId, Vec<Element>> {
    let mut by_set: HashMap<SetId, Vec<Element>> = HashMap::new();
    by_set.entry(SetId::Canary).or_default().push(canary());
    let mut shared: Vec<Shared> = view.shared.keys().copied().collect();
    shared.sort_unstable();
    for s in shared {
        by_set.entry(s.set()).or_default().push(s.element());
    }
    by_set
}

/// Declares a service's own sets and chains and appends their rules to
/// `tx` (flushing each chain first when it may hold rules already);
/// returns what they cost. Declarations go with the rules, a few services
/// per transaction, because each costs more the more sets the table holds.
fn push_own_chains(f: &Fragment, tx: &mut Transaction, flush: bool, cost: &mut LockCost) -> usize {
    let from = tx.ops.len();
    for set in &f.own_sets {
        tx.push(Op::AddSet(set.clone(), Vec::new()));
    }
    for c in &f.chains {
        tx.push(Op::AddChain(c.id.clone()));
    }
    for c in &f.chains {
        if flush {
            tx.push(Op::FlushChain(c.id.clone()));
        }
        for r in &c.rules {
            tx.push(Op::AddRule(c.id.clone(), r.clone()));
        }
    }
    tx.ops[from..].iter().map(|op| cost.charge(op)).sum()
}

/// The whole ruleset written over a table of this shape, in place (see the
/// module's introduction):
///
/// 1. the fixed sets and chains declared (a no-op for those that exist)
///    and the fixed chains reasserted;
/// 2. each service's sets and chains declared, its chains flushed and
///    refilled, whole services at a time, about `chunk` elements' worth
///    of the lock ([`LockCost`]) per transaction: a chain changes in one
///    step, and a new one is not reached before its elements exist;
/// 3. the elements: with the sets read back (`stale.held`), those that
///    differ written a few services per transaction
///    ([`write_differences`]); without, every set but the affinity sets
///    (their clients stay sticky) emptied and refilled in one transaction
///    of elements alone;
/// 4. the chains and sets no service wants any more, no longer referred
///    to, deleted.
fn rewrite_in_place(
    config: &DataplaneConfig,
    view: &Programmed,
    stale: &Stale,
    chunk: usize,
    apply: &mut impl FnMut(&Transaction) -> Result<(), DataplaneError>,
) -> Result<(), DataplaneError> {
    let new = || Transaction::for_table(config.family, config.table());
    let mut tx = new();
    reassert_skeleton(config, &mut tx);
    apply(&tx)?;
    let mut rules = new();
    // Without the sets read back, every set is refilled: its elements are
    // gathered as the rules are written.
    let refill = stale.held.is_none();
    let mut own_sets = Vec::new();
    let mut by_set = if refill { shared_elements(view) } else { HashMap::new() };
    // Every set is in the table already: each name walks past them all,
    // and declaring one again adds none.
    let cost = LockCost::with_sets(stale.sets_in_table);
    let mut size = 0;
    for f in by_name(view).into_iter().map(Packed::unpack) {
        size += push_own_chains(&f, &mut rules, true, &mut cost.clone());
        if refill {
            f.for_each_element(|set, el| by_set.entry(set).or_default().push(el));
            own_sets.extend(f.own_sets);
        }
        if size >= chunk {
            apply(&std::mem::replace(&mut rules, new()))?;
            size = 0;
        }
    }
    if !rules.is_empty() {
        apply(&rules)?;
    }
    drop(rules);
    match &stale.held {
        Some(held) => write_differences(config, view, held, chunk, cost, apply)?,
        None => {
            let mut elements = new();
            let sets = SetId::skeleton(config.scope)
                .into_iter()
                .chain(own_sets)
                .filter(|s| !matches!(s, SetId::Affinity(_)));
            for set in sets {
                elements.push(Op::FlushSet(set.clone()));
                if let Some(e) = by_set.remove(&set) {
                    elements.push(Op::AddElements(set, e));
                }
            }
            drop(by_set);
            apply(&elements)?;
        }
    }
    let mut gone = new();
    for c in &stale.chains {
        gone.push(Op::FlushChain(c.clone()));
    }
    for c in &stale.chains {
        gone.push(Op::DeleteChain(c.clone()));
    }
    for s in &stale.sets {
        gone.push(Op::DeleteSet(s.clone()));
    }
    if gone.is_empty() {
        return Ok(());
    }
    apply(&gone)
}

/// The element changes of a table rewritten in place whose sets were read
/// back (`held`): each service's elements that differ from what the table
/// holds (deleted and added again when the value changed or is not known,
/// added when missing), whole services at a time with the shared elements
/// they want, about `chunk` elements per transaction; then the canary; then
/// what no one wants any more, deleted. A service's elements change
/// together, so no service is half-written between two transactions.
fn write_differences(
    config: &DataplaneConfig,
    view: &Programmed,
    held: &Held,
    chunk: usize,
    cost: LockCost,
    apply: &mut impl FnMut(&Transaction) -> Result<(), DataplaneError>,
) -> Result<(), DataplaneError> {
    let mut batch = ElementBatch::default();
    let mut wanted: HashMap<&SetId, std::collections::HashSet<Key>> = HashMap::new();
    let mut bring = |set: SetId, el: Element, batch: &mut ElementBatch| {
        let now = match held.get_key_value(&set) {
            Some((known, elements)) => {
                if !wanted.entry(known).or_default().insert(el.key) {
                    // Brought already (a shared element two services want).
                    return;
                }
                elements.holds(&el)
            }
            None => None,
        };
        match now {
            Some(true) => {}
            Some(false) => {
                batch.delete(set.clone(), Element::key(el.key), &cost);
                batch.add(set, el, &cost);
            }
            None => batch.add(set, el, &cost),
        }
    };
    for f in by_name(view).into_iter().map(Packed::unpack) {
        f.for_each_element(|set, el| bring(set, el, &mut batch));
        // With the shared elements it wants (its cluster IPs), as a first
        // load writes them.
        for s in &f.shared {
            bring(s.set(), s.element(), &mut batch);
        }
        if batch.size >= chunk {
            apply(&batch.take(config))?;
        }
    }
    // Every shared element is some service's; the canary is the table's.
    bring(SetId::Canary, canary(), &mut batch);
    let mut sets: Vec<&SetId> = held.keys().collect();
    sets.sort_unstable();
    for set in sets {
        let keep = wanted.get(set);
        for key in held[set]
            .elements
            .keys()
            .filter(|k| keep.is_none_or(|w| !w.contains(*k)))
        {
            batch.delete(set.clone(), Element::key(*key), &cost);
            if batch.size >= chunk {
                apply(&batch.take(config))?;
            }
        }
    }
    if batch.size > 0 {
        apply(&batch.take(config))?;
    }
    Ok(())
}

/// Element deletions and additions by set, made into one transaction
/// (every deletion before every addition, so that a key deleted and
/// added again ends with its new value). `size` is what it costs the
/// kernel's lock: an element each, and a lookup for each set it names.
#[derive(Default)]
struct ElementBatch {
    deletes: BTreeMap<SetId, Vec<Element>>,
    adds: BTreeMap<SetId, Vec<Element>>,
    size: usize,
}

impl ElementBatch {
    fn delete(&mut self, set: SetId, el: Element, cost: &LockCost) {
        Self::put(&mut self.deletes, set, el, cost, &mut self.size);
    }

    fn add(&mut self, set: SetId, el: Element, cost: &LockCost) {
        Self::put(&mut self.adds, set, el, cost, &mut self.size);
    }

    fn put(to: &mut BTreeMap<SetId, Vec<Element>>, set: SetId, el: Element, cost: &LockCost, size: &mut usize) {
        let elements = to.entry(set).or_insert_with(|| {
            *size += cost.lookup();
            Vec::new()
        });
        elements.push(el);
        *size += 1;
    }

    fn take(&mut self, config: &DataplaneConfig) -> Transaction {
        let mut tx = Transaction::for_table(config.family, config.table());
        for (set, e) in std::mem::take(&mut self.deletes) {
            tx.push(Op::DeleteElements(set, e));
        }
        for (set, e) in std::mem::take(&mut self.adds) {
            tx.push(Op::AddElements(set, e));
        }
        self.size = 0;
        tx
    }
}

/// How many elements and rules one transaction of a first load holds: the
/// kernel holds the nftables lock for all of one transaction, and this
/// keeps each well under a second on a small node (figures in
/// `benches/RESULTS.md`).
pub const FIRST_LOAD_CHUNK: usize = 25_000;

/// The whole ruleset for a table that does not exist yet, as short
/// transactions: the first declares the table, the fixed sets and chains
/// and the fixed rules; then, for whole services at a time (about `chunk`
/// elements' worth of the lock, [`LockCost`]), one transaction of their own sets, chains
/// and rules and one of their elements and the shared elements they are
/// the first to want (cluster IPs, hairpin pairs); the last adds the
/// canary. The elements
/// come apart from the rules because a transaction of elements alone needs
/// no `nft` (a dataplane may send it over netlink), and they come second
/// because nothing reaches a chain before an element points to it: a
/// service is complete the moment its elements commit, and until then its
/// traffic passes the table untouched, as before the table existed. Each
/// transaction is handed to `apply` as soon as it is built; the first that
/// fails ends the load, and the next sync replaces the whole table
/// atomically.
fn first_load(
    config: &DataplaneConfig,
    view: &Programmed,
    chunk: usize,
    apply: &mut impl FnMut(&Transaction) -> Result<(), DataplaneError>,
) -> Result<(), DataplaneError> {
    let family = config.family;
    let new = || Transaction::for_table(family, config.table());
    let mut first = new();
    first.push(Op::AddTable(family));
    declare(config, &[], Vec::new(), &mut first, |_| Vec::new());
    apply(&first)?;
    drop(first);
    let (mut rules, mut rules_cost) = (new(), 0);
    let mut elements = ElementBatch::default();
    let mut cost = LockCost::with_sets(SetId::skeleton(config.scope).len());
    // A shared element (a cluster IP in the guard set, a hairpin pair)
    // comes with the first service that wants it.
    let mut added: std::collections::HashSet<Shared> = std::collections::HashSet::new();
    let mut commit = |rules: &mut Transaction, elements: &mut ElementBatch| {
        if !rules.is_empty() {
            apply(&std::mem::replace(rules, new()))?;
        }
        apply(&elements.take(config))
    };
    for f in by_name(view).into_iter().map(Packed::unpack) {
        rules_cost += push_own_chains(&f, &mut rules, false, &mut cost);
        f.for_each_element(|set, el| elements.add(set, el, &cost));
        for shared in f.shared {
            if added.insert(shared) {
                elements.add(shared.set(), shared.element(), &cost);
            }
        }
        if rules_cost + elements.size >= chunk {
            commit(&mut rules, &mut elements)?;
            rules_cost = 0;
        }
    }
    elements.add(SetId::Canary, canary(), &cost);
    commit(&mut rules, &mut elements)
}

/// Removes the table `table` of both families, whether or not they exist,
/// one transaction each (`proxyd cleanup`).
pub fn cleanup_transactions(table: &'static str) -> Vec<Transaction> {
    [slice_model::IpFamily::V4, slice_model::IpFamily::V6]
        .into_iter()
        .map(|f| Transaction::remove_table(f, table))
        .collect()
}
