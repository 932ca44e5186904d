//! A model of the kernel's side of the subset of nft that proxyd writes:
//! tables with named sets and maps and chains of typed rules, changed by
//! [`Transaction`]s under nft's rules (all or nothing; deleting what is
//! missing, not empty or still referred to fails; a key holds one value;
//! an element must fit its set). [`KernelModel::trace`] sends packets
//! through it (see [`crate::tracer`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use slice_model::IpFamily;

use crate::element::{Element, Frontend, Key, Value};
use crate::names::{ChainId, CounterId, KeyShape, SetId, SetKind};
use crate::rule::Rule;
use crate::transaction::{Op, Transaction};
use crate::{Dataplane, DataplaneError};

/// One family's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// Sets and maps: key -> value (`None` in plain sets).
    pub sets: BTreeMap<SetId, BTreeMap<Key, Option<Value>>>,
    /// Chains and their rules.
    pub chains: BTreeMap<ChainId, Vec<Rule>>,
    /// Named counters (the model counts no packets: it only holds them).
    pub counters: BTreeSet<CounterId>,
}

/// The tables proxyd owns, by family.
///
/// Two models are equal when their tables are; the generations are history.
#[derive(Clone, Debug, Default)]
pub struct KernelModel {
    /// The tables that exist.
    pub tables: BTreeMap<IpFamily, Table>,
    /// Bumped by every committed transaction, as the kernel's ruleset
    /// generation is, whoever commits it. (Tests that change `tables`
    /// directly bypass it: tamper with [`Self::apply_transaction`].)
    pub generation: u64,
    /// The generation this model's own last [`Dataplane::apply`] made.
    own_generation: Option<u64>,
}

impl PartialEq for KernelModel {
    fn eq(&self, other: &Self) -> bool {
        self.tables == other.tables
    }
}

impl Eq for KernelModel {}

fn reject(why: String) -> DataplaneError {
    DataplaneError::Rejected {
        status: "model".into(),
        stderr: why,
    }
}

/// Whether `key` (and `value`) have the shape `set` holds, in `family`.
fn fits(family: IpFamily, set: &SetId, e: &Element) -> bool {
    let addr_ok = |ip: IpAddr| IpFamily::of(&ip) == family;
    let ip_frontend = |f: &Frontend| matches!(f, Frontend::Ip { addr, .. } if addr_ok(*addr));
    let frontend_ok = |f: &Frontend, node_port: bool| {
        if node_port { f.is_node_port() } else { ip_frontend(f) }
    };
    let key_ok = match (set.key_shape(), &e.key) {
        (KeyShape::Port, Key::Port(_)) | (KeyShape::Index, Key::Index(_)) => true,
        (KeyShape::Addr, Key::Addr(a)) => addr_ok(*a),
        (KeyShape::AddrPair, Key::AddrPair(a, b)) => addr_ok(*a) && addr_ok(*b),
        (KeyShape::Frontend { node_port }, Key::Frontend(f)) => frontend_ok(f, node_port),
        (KeyShape::Slot { node_port, width }, Key::Slot(f, slot)) => frontend_ok(f, node_port) && *slot < width,
        (KeyShape::Client, Key::Client(client, ep)) => addr_ok(*client) && addr_ok(ep.ip()),
        _ => false,
    };
    let value_ok = match (set.kind(), &e.value) {
        (SetKind::Set, None | Some(Value::Digest(_))) => true,
        (SetKind::VerdictMap, Some(Value::Goto(_))) => true,
        (SetKind::EndpointMap, Some(Value::Endpoint(ep))) => addr_ok(ep.ip()),
        _ => false,
    };
    key_ok && value_ok
}

impl Table {
    fn check_rule(&self, rule: &Rule) -> Result<(), String> {
        let (sets, chains) = rule.references();
        if let Some(s) = sets.iter().find(|s| !self.sets.contains_key(*s)) {
            return Err(format!("no set {s}"));
        }
        if let Some(c) = chains.iter().find(|c| !self.chains.contains_key(*c)) {
            return Err(format!("no chain {c}"));
        }
        if let Some(c) = rule.counters().find(|c| !self.counters.contains(c)) {
            return Err(format!("no counter {c}"));
        }
        Ok(())
    }

    fn set_referenced(&self, set: &SetId) -> bool {
        self.chains.values().flatten().any(|r| r.references().0.contains(set))
    }

    fn chain_referenced(&self, chain: &ChainId) -> bool {
        let by_rule = self.chains.values().flatten().any(|r| r.references().1.contains(chain));
        let by_element = self
            .sets
            .values()
            .flat_map(|s| s.values())
            .any(|v| matches!(v, Some(Value::Goto(c)) if c == chain));
        by_rule || by_element
    }

    fn add_elements(&mut self, family: IpFamily, set: &SetId, elements: &[Element]) -> Result<(), String> {
        for e in elements {
            if !fits(family, set, e) {
                return Err(format!("element {e} does not fit set {set}"));
            }
            if let Some(Value::Goto(c)) = &e.value
                && !self.chains.contains_key(c)
            {
                return Err(format!("element {e}: no chain {c}"));
            }
        }
        let items = self.sets.get_mut(set).ok_or_else(|| format!("no set {set}"))?;
        for e in elements {
            match items.get(&e.key) {
                Some(old) if *old != e.value => {
                    return Err(format!("element {} exists in {set} with another value", e.key));
                }
                _ => {
                    items.insert(e.key, e.value.clone());
                }
            }
        }
        Ok(())
    }

    fn apply(&mut self, family: IpFamily, op: &Op) -> Result<(), String> {
        match op {
            Op::AddTable(_) | Op::DeleteTable(_) => unreachable!("handled by the model"),
            Op::AddSet(set, elements) => {
                self.sets.entry(set.clone()).or_default();
                self.add_elements(family, set, elements)
            }
            Op::DeleteSet(set) => {
                if !self.sets.contains_key(set) || self.set_referenced(set) {
                    return Err(format!("set {set} missing or in use"));
                }
                self.sets.remove(set);
                Ok(())
            }
            Op::AddChain(chain) => {
                self.chains.entry(chain.clone()).or_default();
                Ok(())
            }
            Op::AddCounter(counter) => {
                self.counters.insert(*counter);
                Ok(())
            }
            Op::FlushChain(chain) => {
                self.chains
                    .get_mut(chain)
                    .ok_or_else(|| format!("no chain {chain}"))?
                    .clear();
                Ok(())
            }
            Op::DeleteChain(chain) => {
                let empty = self.chains.get(chain).is_some_and(Vec::is_empty);
                if !empty || self.chain_referenced(chain) {
                    return Err(format!("chain {chain} missing, not empty or in use"));
                }
                self.chains.remove(chain);
                Ok(())
            }
            Op::AddRule(chain, rule) => {
                self.check_rule(rule)?;
                self.chains
                    .get_mut(chain)
                    .ok_or_else(|| format!("no chain {chain}"))?
                    .push(rule.clone());
                Ok(())
            }
            Op::AddElements(set, elements) => self.add_elements(family, set, elements),
            Op::FlushSet(set) => {
                self.sets.get_mut(set).ok_or_else(|| format!("no set {set}"))?.clear();
                Ok(())
            }
            Op::DeleteElements(set, elements) => {
                let items = self.sets.get_mut(set).ok_or_else(|| format!("no set {set}"))?;
                for e in elements {
                    items
                        .remove(&e.key)
                        .ok_or_else(|| format!("no element {} in {set}", e.key))?;
                }
                Ok(())
            }
        }
    }
}

impl KernelModel {
    /// The table of a family, if it exists.
    pub fn table(&self, family: IpFamily) -> Option<&Table> {
        self.tables.get(&family)
    }

    /// Applies one transaction: all of it, or (on the first error) none.
    pub fn apply_transaction(&mut self, tx: &Transaction) -> Result<(), DataplaneError> {
        let mut next = self.clone();
        for (i, op) in tx.ops.iter().enumerate() {
            let at = |why: String| reject(format!("operation {}: {why}", i + 1));
            match op {
                Op::AddTable(f) => {
                    next.tables.entry(*f).or_default();
                }
                Op::DeleteTable(f) => {
                    next.tables.remove(f).ok_or_else(|| at("no table".into()))?;
                }
                other => {
                    let table = next.tables.get_mut(&tx.family).ok_or_else(|| at("no table".into()))?;
                    table.apply(tx.family, other).map_err(at)?;
                }
            }
        }
        next.generation += 1;
        *self = next;
        Ok(())
    }
}

impl Dataplane for KernelModel {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        self.apply_transaction(tx)?;
        self.own_generation = Some(self.generation);
        Ok(0)
    }

    /// Applies `tx` to a copy of the model's table of its family (a
    /// scratch table's transaction starts from nothing, as the kernel's
    /// would).
    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        let mut scratch = KernelModel::default();
        if tx.table != crate::names::CHECK_TABLE
            && let Some(table) = self.tables.get(&tx.family)
        {
            scratch.tables.insert(tx.family, table.clone());
        }
        Some(scratch.apply_transaction(tx))
    }

    fn may_have_changed(&mut self) -> bool {
        self.own_generation != Some(self.generation)
    }

    fn generation(&mut self) -> Option<u64> {
        Some(self.generation)
    }

    fn table_exists(&mut self, family: IpFamily, _table: &str) -> Option<bool> {
        Some(self.tables.contains_key(&family))
    }

    fn objects(&mut self, family: IpFamily, _table: &str) -> Option<Result<crate::TableObjects, DataplaneError>> {
        let table = self.tables.get(&family)?;
        Some(Ok(crate::TableObjects {
            sets: table.sets.keys().map(ToString::to_string).collect(),
            chains: table
                .chains
                .iter()
                .map(|(c, rules)| (c.to_string(), rules.len()))
                .collect(),
            // As the netlink writer stores them: every rule has its digest.
            rule_digests: table
                .chains
                .iter()
                .map(|(c, rules)| (c.to_string(), crate::RulesDigest::of(rules)))
                .collect(),
        }))
    }

    fn elements(
        &mut self,
        family: IpFamily,
        _table: &str,
        set: &crate::names::SetId,
    ) -> Option<Result<Vec<crate::element::Element>, DataplaneError>> {
        let held = self.tables.get(&family)?.sets.get(set)?;
        let elements = held.iter().map(|(key, value)| crate::element::Element {
            key: *key,
            value: value.clone(),
        });
        Some(Ok(elements.collect()))
    }
}
