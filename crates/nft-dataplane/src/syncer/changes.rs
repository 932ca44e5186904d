//! The transaction of a sync of changes: the changed services' fragments
//! against what the ledger says the kernel holds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use endpoints_map::{EndpointsMap, ServicesMap};
use slice_model::ServiceName;

use crate::Dataplane;
use crate::desired::{DataplaneConfig, NoLocalEndpoints, plan_service};
use crate::element::{Element, Key};
use crate::fragment::{self, BackendMap, Fragment};
use crate::names::{ChainId, SetId};
use crate::rule::Rule;
use crate::skeleton;
use crate::transaction::{Op, Transaction};

use super::programmed::Replaced;
use super::{NftSyncer, SyncKind, canary};

impl<D: Dataplane> NftSyncer<D> {
    /// The transaction that brings the `changed` services (and, for a
    /// periodic sync, the skeleton) in line with the maps, and how many
    /// services it writes.
    pub(super) fn partial(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> (Transaction, usize, Vec<(ServiceName, NoLocalEndpoints)>) {
        let config = &self.config;
        let filter = &self.filter;
        let refused = &self.refused;
        let (keep, planned) = (&self.keep_plans, &mut self.planned);
        let mut tx = Transaction::for_table(config.family, config.table());
        let Some(view) = self.view.as_mut() else {
            return (tx, 0, Vec::new());
        };
        // The last plan of each service is what is written.
        let mut no_local: BTreeMap<ServiceName, NoLocalEndpoints> = BTreeMap::new();
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
            let targets = if filter.as_ref().is_none_or(|f| f(&name)) && !refused.contains_key(&name) {
                plan_service(&name, services, endpoints, config)
            } else {
                Vec::new()
            };
            if let (Some(keep), Some(planned)) = (keep, planned.as_mut()) {
                planned.note(keep, &name, &targets);
            }
            no_local.insert(name.clone(), NoLocalEndpoints::of(&targets));
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
        // A large affinity port has thousands of chains and sets: they are
        // compared through maps, not list against list.
        type Chains<'a> = HashMap<&'a ChainId, &'a Vec<Rule>>;
        let olds: Vec<(Chains<'_>, HashSet<&SetId>)> = pairs
            .iter()
            .map(|(old, _)| {
                let chains = old.chains.iter().map(|c| (&c.id, &c.rules)).collect();
                (chains, old.own_sets.iter().collect())
            })
            .collect();
        // 1. New sets and chains exist before anything refers to them.
        for ((_, new), (old_chains, old_sets)) in pairs.iter().zip(&olds) {
            for s in new.own_sets.iter().filter(|s| !old_sets.contains(s)) {
                tx.push(Op::AddSet(s.clone(), Vec::new()));
            }
            for c in new.chains.iter().filter(|c| !old_chains.contains_key(&c.id)) {
                tx.push(Op::AddChain(c.id.clone()));
            }
        }
        // 2. Chains that are new or changed are rewritten.
        for ((_, new), (old_chains, _)) in pairs.iter().zip(&olds) {
            for c in new.chains.iter().filter(|c| old_chains.get(&c.id) != Some(&&c.rules)) {
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
        // (they may jump to each other), delete the sets only they used,
        // then the chains (an affinity port's map of chains refers to them).
        let gone = |old: &Fragment, new: &Fragment| -> Vec<ChainId> {
            let kept: HashSet<&ChainId> = new.chains.iter().map(|c| &c.id).collect();
            old.chains
                .iter()
                .filter(|c| !kept.contains(&c.id))
                .map(|c| c.id.clone())
                .collect()
        };
        let gone: Vec<Vec<ChainId>> = pairs.iter().map(|(old, new)| gone(old, new)).collect();
        for c in gone.iter().flatten() {
            tx.push(Op::FlushChain(c.clone()));
        }
        for ((old, new), gone) in pairs.iter().zip(gone) {
            let kept: HashSet<&SetId> = new.own_sets.iter().collect();
            for s in old.own_sets.iter().filter(|s| !kept.contains(s)) {
                tx.push(Op::DeleteSet(s.clone()));
            }
            for c in gone {
                tx.push(Op::DeleteChain(c));
            }
        }
        (tx, pairs.len(), no_local.into_iter().collect())
    }
}

/// The backend-map elements that differ between two versions of a
/// fragment, position by position: a map of 100,000 endpoints is compared
/// as two lists, not hashed element by element. A map the new version no
/// longer has is left to its set's deletion.
pub(super) fn backend_changes(
    old: &Fragment,
    new: &Fragment,
    deletes: &mut BTreeMap<SetId, Vec<Element>>,
    adds: &mut BTreeMap<SetId, Vec<Element>>,
) {
    fn find<'a>(f: &'a Fragment, set: &SetId) -> Option<&'a BackendMap> {
        f.backends.iter().find(|b| b.map == *set)
    }
    fn list(b: Option<&BackendMap>) -> &[std::net::SocketAddr] {
        b.map_or(&[], |b| &b.endpoints[..])
    }
    let sets: BTreeSet<&SetId> = old.backends.iter().chain(&new.backends).map(|b| &b.map).collect();
    for set in sets {
        let (was, is) = (find(old, set), find(new, set));
        if is.is_none() {
            // The map goes, deleted whole with its elements.
            continue;
        }
        let (before, after) = (list(was), list(is));
        for i in 0..before.len().max(after.len()) {
            let (b, a) = (before.get(i), after.get(i));
            if b == a {
                continue;
            }
            let key = Key::Index(u32::try_from(i).unwrap_or(u32::MAX));
            if let (Some(ep), Some(map)) = (b, was) {
                deletes
                    .entry(set.clone())
                    .or_default()
                    .push(Element::map(key, map.value(*ep)));
            }
            if let (Some(ep), Some(map)) = (a, is) {
                adds.entry(set.clone())
                    .or_default()
                    .push(Element::map(key, map.value(*ep)));
            }
        }
    }
}

/// Puts the skeleton back as it should be without touching any service's
/// elements: declarations are re-added (a no-op when they exist) and the
/// fixed chains are flushed and refilled.
pub(super) fn reassert_skeleton(config: &DataplaneConfig, tx: &mut Transaction) {
    for set in SetId::skeleton(config.scope) {
        tx.push(Op::AddSet(set, Vec::new()));
    }
    for counter in skeleton::counters(config) {
        tx.push(Op::AddCounter(counter));
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
