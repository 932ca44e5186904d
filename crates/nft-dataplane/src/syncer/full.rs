//! Writing the whole table: a first load in short transactions, a rewrite
//! in place of a table of this shape, or a replacement in one transaction.

use std::collections::{BTreeMap, HashMap, HashSet};

use slice_model::ServiceName;

use crate::desired::DataplaneConfig;
use crate::element::{Element, Key, Value};
use crate::fragment::{ChainDef, Fragment, Shared};
use crate::lock_cost::LockCost;
use crate::names::{ChainId, SetId};
use crate::packed::Packed;
use crate::skeleton;
use crate::transaction::{Op, Transaction};
use crate::{Dataplane, DataplaneError, RulesDigest, TableObjects};

use super::changes::reassert_skeleton;
use super::programmed::Programmed;
use super::{NftSyncer, canary};

/// What a table holds that the view does not want.
#[derive(Default)]
pub(super) struct Stale {
    pub(super) chains: Vec<ChainId>,
    pub(super) sets: Vec<SetId>,
    /// How many sets the table holds (each named set found walks past them).
    pub(super) sets_in_table: usize,
    /// The elements of the sets the view wants (an absent set holds none),
    /// when the dataplane could read them all: only what differs is then
    /// written.
    pub(super) held: Option<Held>,
    /// The view's chains the table already holds, rule for rule (told by
    /// the rules' digests): not written again. Empty unless the digests
    /// are trusted (see [`NftSyncer::stale_if_in_place`]).
    pub(super) unchanged: HashSet<ChainId>,
}

/// Elements a table holds, by set.
pub(super) type Held = HashMap<SetId, HeldSet>;

/// The elements one set holds: keys and values as read back. A slot map's
/// keys are derived from its frontend set, and its values are known only
/// for the frontends whose digest says they are the ones wanted (`None`,
/// unknown, for the others).
pub(super) struct HeldSet {
    pub(super) elements: HashMap<Key, Option<Value>>,
}

impl HeldSet {
    /// Whether it holds `el`'s key: `Some(true)` with `el`'s value too,
    /// `Some(false)` with another or an unknown one.
    fn holds(&self, el: &Element) -> Option<bool> {
        let value = self.elements.get(&el.key)?;
        Some(*value == el.value)
    }
}

/// The table in place as read before the first sync, while the lists
/// arrive: its objects and the elements of its sets (the affinity ports'
/// clients aside), at one ruleset generation.
pub(super) struct ReadAhead {
    generation: u64,
    objects: TableObjects,
    held: Option<Held>,
}

impl<D: Dataplane> NftSyncer<D> {
    /// Reads the table in place now, so that the first sync, when it
    /// rewrites the table in place, need not: a restart then reads the
    /// table while the lists arrive, not after them. What was read is used
    /// only if nothing is committed in between (the ruleset's generation
    /// is unchanged); it is forgotten after the first sync either way.
    /// Does nothing after the first sync, or where the dataplane cannot
    /// tell its generation.
    pub fn read_ahead(&mut self) {
        if self.view.is_some() || self.replace_next {
            return;
        }
        let Some(generation) = self.dataplane.generation() else {
            return;
        };
        let Some(Ok(objects)) = self.dataplane.objects(self.config.family, self.config.table()) else {
            return;
        };
        let sets: Option<Vec<SetId>> = objects.sets.iter().map(|n| SetId::from_name(n)).collect();
        let Some(sets) = sets else {
            return; // not a table of proxyd's naming: the sync decides
        };
        let sets = sets.into_iter().filter(|s| !s.written_by_packets()).collect();
        let held = self.read_elements(sets);
        if self.dataplane.generation() == Some(generation) {
            self.read_ahead = Some(ReadAhead {
                generation,
                objects,
                held,
            });
        }
    }

    /// What the table holds beyond `view`, when it can be rewritten in
    /// place: the dataplane reads it back, it has this shape's canary, its
    /// slot chains have their one rule each (nft cannot rewrite them once
    /// their maps hold elements), and everything in it is named as proxyd
    /// names things. What was read `ahead` stands for reading it now while
    /// the ruleset's generation is the one it was read at. With
    /// `trust_digests` (a restart's first sync), a chain whose rules'
    /// digests are those of the view's rules is left as it is, and so are
    /// the slots of a frontend whose element carries their digest; later
    /// full syncs rewrite every chain and slot, repairing what others
    /// changed.
    pub(super) fn stale_if_in_place(
        &mut self,
        view: &Programmed,
        ahead: Option<ReadAhead>,
        trust_digests: bool,
    ) -> Option<Stale> {
        if self.replace_next {
            return None;
        }
        let ahead = ahead.filter(|a| self.dataplane.generation() == Some(a.generation));
        let (objects, held_ahead) = match ahead {
            Some(a) => (a.objects, Some(a.held)),
            None => (
                self.dataplane.objects(self.config.family, self.config.table())?.ok()?,
                None,
            ),
        };
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
        let mut wanted_chains: HashSet<ChainId> = fixed.into_iter().map(|(c, _)| c).collect();
        let mut wanted_sets: HashSet<SetId> = SetId::skeleton(self.config.scope).into_iter().collect();
        let held_digests: HashMap<&str, RulesDigest> = if trust_digests {
            objects.rule_digests.iter().map(|(c, d)| (c.as_str(), *d)).collect()
        } else {
            HashMap::new()
        };
        let mut unchanged = HashSet::new();
        let mut slotted = Vec::new();
        for f in view.fragments.values().map(Packed::unpack) {
            if trust_digests {
                slotted.extend(f.entries.iter().filter_map(crate::fragment::Entry::slot_elements));
            }
            for c in f.chains {
                if !held_digests.is_empty()
                    && held_digests.get(c.id.to_string().as_str()) == Some(&RulesDigest::of(&c.rules))
                {
                    unchanged.insert(c.id.clone());
                }
                wanted_chains.insert(c.id);
            }
            wanted_sets.extend(f.own_sets);
        }
        let mut stale = Stale {
            sets_in_table: objects.sets.len(),
            unchanged,
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
            } else if !set.written_by_packets() {
                present.push(set);
            }
        }
        stale.held = match held_ahead {
            // Only the sets the view keeps: the others are deleted whole.
            Some(held) => held.map(|mut held| {
                let present: std::collections::HashSet<&SetId> = present.iter().collect();
                held.retain(|set, _| present.contains(set));
                held
            }),
            None => self.read_elements(present),
        };
        if let Some(held) = stale.held.as_mut().filter(|_| trust_digests) {
            know_slot_values(held, slotted);
        }
        Some(stale)
    }

    /// The elements of `sets`, when the dataplane can read every one. A
    /// slot map is not read: the kernel dumps a set in time that grows
    /// with the square of its size (each reply walks it from the start),
    /// and the slot maps are the largest sets; their keys follow from the
    /// frontends of that width (slots `0..N` of each); their values are
    /// unknown here (see [`know_slot_values`]).
    pub(super) fn read_elements(&mut self, sets: Vec<SetId>) -> Option<Held> {
        let (family, table) = (self.config.family, self.config.table());
        let mut held = Held::with_capacity(sets.len());
        let (slot_maps, others): (Vec<SetId>, Vec<SetId>) = sets
            .into_iter()
            .partition(|s| matches!(s, SetId::ServiceSlots(_) | SetId::NodePortSlots(_)));
        for set in others {
            let elements = self.dataplane.elements(family, table, &set)?.ok()?;
            let elements = elements.into_iter().map(|e| (e.key, e.value)).collect();
            held.insert(set, HeldSet { elements });
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
            held.insert(map, HeldSet { elements });
        }
        Some(held)
    }
}

/// Fills in the slot map values the table holds for the frontends whose
/// element there carries the digest of the slots wanted (the frontend and
/// its slots are written together, so the digest stands for them).
fn know_slot_values(held: &mut Held, wanted: Vec<crate::fragment::SlotElements>) {
    for s in wanted {
        let digest_held = held
            .get(&s.frontends)
            .and_then(|h| h.elements.get(&s.frontend.key))
            .is_some_and(|v| *v == s.frontend.value);
        if !digest_held {
            continue;
        }
        let Some(map) = held.get_mut(&s.map) else {
            continue;
        };
        for el in s.slots {
            if let Some(v) = map.elements.get_mut(&el.key) {
                *v = el.value;
            }
        }
    }
}

/// The fragments, in service-name order (transactions are deterministic),
/// each decoded as it is reached.
pub(super) fn by_name(view: &Programmed) -> Vec<&Packed> {
    let mut names: Vec<&ServiceName> = view.fragments.keys().collect();
    names.sort_unstable();
    names.iter().filter_map(|n| view.fragments.get(*n)).collect()
}

/// Declares everything rules and elements may refer to, in an order nft
/// accepts: the fixed chains and the fragments' `chains`, then the fixed
/// sets and the fragments' `own_sets` (each with what `elements` gives
/// it), then the fixed chains' rules.
pub(super) fn declare(
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
    for counter in skeleton::counters(config) {
        tx.push(Op::AddCounter(counter));
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
pub(super) fn full_transaction(config: &DataplaneConfig, view: &Programmed) -> Transaction {
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
pub(super) fn shared_elements(view: &Programmed) -> HashMap<SetId, Vec<Element>> {
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
/// `tx` (flushing each chain first when it may hold rules already), but
/// for the chains the table holds `unchanged`. Declarations go with the
/// rules, a few services per transaction, because each costs more the more
/// sets the table holds.
pub(super) fn push_own_chains(f: &Fragment, tx: &mut Transaction, flush: bool, unchanged: &HashSet<ChainId>) {
    for set in &f.own_sets {
        tx.push(Op::AddSet(set.clone(), Vec::new()));
    }
    let written: Vec<&ChainDef> = f.chains.iter().filter(|c| !unchanged.contains(&c.id)).collect();
    for c in &written {
        tx.push(Op::AddChain(c.id.clone()));
    }
    for c in written {
        if flush {
            tx.push(Op::FlushChain(c.id.clone()));
        }
        for r in &c.rules {
            tx.push(Op::AddRule(c.id.clone(), r.clone()));
        }
    }
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
///    ([`write_differences`]); without, every set but the affinity ports'
///    clients (they stay sticky) emptied and refilled in one transaction
///    of elements alone;
/// 4. the chains and sets no service wants any more flushed and deleted
///    (chains last: a map of an affinity port's chains refers to them).
pub(super) fn rewrite_in_place(
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
        let from = rules.ops.len();
        push_own_chains(&f, &mut rules, true, &stale.unchanged);
        // Every service starts from the table's count of sets (above).
        let mut charged = cost;
        size += rules.ops[from..].iter().map(|op| charged.charge(op)).sum::<usize>();
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
                .filter(|s| !s.written_by_packets());
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
    // Flushed chains refer to no set; a deleted map of chains (an affinity
    // port's) no longer refers to its chains.
    let mut gone = new();
    for c in &stale.chains {
        gone.push(Op::FlushChain(c.clone()));
    }
    for s in &stale.sets {
        gone.push(Op::DeleteSet(s.clone()));
    }
    for c in &stale.chains {
        gone.push(Op::DeleteChain(c.clone()));
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
pub(super) fn write_differences(
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
pub(super) struct ElementBatch {
    pub(super) deletes: BTreeMap<SetId, Vec<Element>>,
    pub(super) adds: BTreeMap<SetId, Vec<Element>>,
    pub(super) size: usize,
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
pub(super) fn first_load(
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
    // The sets the table holds from here: the skeleton's, and its rules'
    // inline ones.
    let mut cost = LockCost::with_sets(0);
    for op in &first.ops {
        cost.charge(op);
    }
    drop(first);
    let (mut rules, mut rules_cost) = (new(), 0);
    let mut elements = ElementBatch::default();
    // A shared element (a cluster IP in the guard set, a hairpin pair)
    // comes with the first service that wants it.
    let mut added: std::collections::HashSet<Shared> = std::collections::HashSet::new();
    // The rules so far, and the elements so far when given.
    let mut commit = |rules: &mut Transaction, elements: Option<&mut ElementBatch>| {
        if !rules.is_empty() {
            apply(&std::mem::replace(rules, new()))?;
        }
        elements.map_or(Ok(()), |e| apply(&e.take(config)))
    };
    for f in by_name(view).into_iter().map(Packed::unpack) {
        // A service larger than a transaction (an affinity port of
        // thousands of endpoints) is cut between its operations: its sets
        // and chains are declared before any rule refers to them, and
        // nothing reaches its chains before its elements, which come after
        // them.
        let mut own = new();
        push_own_chains(&f, &mut own, false, &HashSet::new());
        for op in own.ops {
            rules_cost += cost.charge(&op);
            rules.push(op);
            if rules_cost >= chunk {
                commit(&mut rules, None)?;
                rules_cost = 0;
            }
        }
        f.for_each_element(|set, el| elements.add(set, el, &cost));
        for shared in f.shared {
            if added.insert(shared) {
                elements.add(shared.set(), shared.element(), &cost);
            }
        }
        if rules_cost + elements.size >= chunk {
            commit(&mut rules, Some(&mut elements))?;
            rules_cost = 0;
        }
    }
    elements.add(SetId::Canary, canary(), &cost);
    commit(&mut rules, Some(&mut elements))
}
