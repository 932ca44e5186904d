//! [`EventFold`]: kube-runtime watcher events into handler calls, without
//! losing deletes.
//!
//! kube-runtime's watcher never sends a `Delete` for an object deleted while
//! the watch was down, or while a relist (after `410 Gone`) was under way:
//! such an object is only "known before `Init`, absent at `InitDone`". The
//! fold remembers what it has handed to the handler and turns that absence
//! into a delete.
//!
//! A list streams through: each listed object is handed over as it arrives
//! (it is the API server's current state, as a watch event would be), and
//! only the fold keeps the listed keys, so memory does not hold a whole
//! cluster's objects at once. Deletes wait for `InitDone`, because only a
//! complete list proves an absence: a list that fails part-way (a second
//! `Init` before `InitDone`) may have updated objects but deletes nothing.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// Receives object changes, as the seed's `EndpointSliceHandler` does.
pub trait EventHandler<K> {
    /// A new object.
    fn on_add(&mut self, obj: &K);
    /// A changed object, with its previous version.
    fn on_update(&mut self, old: &K, new: &K);
    /// A deleted object: the last version the handler was given (a
    /// tombstone), even when the watch never saw the deletion.
    fn on_delete(&mut self, obj: &K);
    /// The first complete list has been handed over. Called once.
    fn on_synced(&mut self);
}

/// Hands every call to each of several handlers (one per IP family).
pub struct Fanout<H>(pub Vec<H>);

impl<K, H: EventHandler<K>> EventHandler<K> for Fanout<H> {
    fn on_add(&mut self, obj: &K) {
        self.0.iter_mut().for_each(|h| h.on_add(obj));
    }

    fn on_update(&mut self, old: &K, new: &K) {
        self.0.iter_mut().for_each(|h| h.on_update(old, new));
    }

    fn on_delete(&mut self, obj: &K) {
        self.0.iter_mut().for_each(|h| h.on_delete(obj));
    }

    fn on_synced(&mut self) {
        self.0.iter_mut().for_each(|h| h.on_synced());
    }
}

/// Counters of what the fold has seen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FoldStats {
    /// Complete lists applied (the first one included).
    pub lists: u64,
    /// Lists abandoned part-way (an `Init` before the previous `InitDone`).
    pub aborted_lists: u64,
    /// Deletes found by a relist rather than seen on the watch.
    pub deletes_found_by_relist: u64,
    /// Objects dropped because they have no name.
    pub unnamed: u64,
}

type Key = (String, String);

/// What the fold keeps of an object once handed over.
type Slim<K> = Box<dyn Fn(&K) -> K + Send>;

/// The fold; see the module docs.
pub struct EventFold<K> {
    known: BTreeMap<Key, K>,
    /// The keys listed so far by the list under way (after `Init`, before
    /// `InitDone`).
    listed: Option<BTreeSet<Key>>,
    synced: bool,
    /// Objects the proxy does not handle; treated as absent.
    selected: Box<dyn Fn(&K) -> bool + Send>,
    /// What to keep of an object once handed over (see [`EventFold::slimmed`]).
    slim: Option<Slim<K>>,
    stats: FoldStats,
}

impl<K: ResourceExt + Clone> Default for EventFold<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: ResourceExt + Clone> EventFold<K> {
    /// A fold that hands over every object.
    pub fn new() -> Self {
        Self::with_selection(|_| true)
    }

    /// A fold that treats objects for which `selected` is false as absent
    /// (so an object that stops being selected is deleted).
    pub fn with_selection(selected: impl Fn(&K) -> bool + Send + 'static) -> Self {
        Self {
            known: BTreeMap::new(),
            listed: None,
            synced: false,
            selected: Box::new(selected),
            slim: None,
            stats: FoldStats::default(),
        }
    }

    /// Keeps only `slim(obj)` of each object after handing it over: enough
    /// for tombstones and for telling versions apart (name, namespace,
    /// resourceVersion, and what the handler's delete needs). The `old`
    /// object of an update and the tombstone of a delete are then slimmed.
    /// Without it the fold holds a full copy of every object.
    pub fn slimmed(mut self, slim: impl Fn(&K) -> K + Send + 'static) -> Self {
        self.slim = Some(Box::new(slim));
        self
    }

    fn keep(&self, obj: K) -> K {
        match &self.slim {
            Some(slim) => slim(&obj),
            None => obj,
        }
    }

    /// Whether the first complete list has been handed over.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Counters.
    pub fn stats(&self) -> FoldStats {
        self.stats
    }

    /// The objects the handler currently knows, by namespace and name.
    pub fn known(&self) -> impl Iterator<Item = &K> {
        self.known.values()
    }

    fn key(&mut self, obj: &K) -> Option<Key> {
        let name = obj.meta().name.clone().filter(|n| !n.is_empty());
        match name {
            Some(name) => Some((obj.namespace().unwrap_or_default(), name)),
            None => {
                self.stats.unnamed += 1;
                tracing::warn!(kind = %std::any::type_name::<K>(), "watched object without metadata.name; ignored");
                None
            }
        }
    }

    /// Applies one watcher event.
    pub fn apply(&mut self, event: Event<K>, handler: &mut impl EventHandler<K>) {
        match event {
            Event::Apply(obj) => {
                let Some(key) = self.key(&obj) else { return };
                if (self.selected)(&obj) {
                    self.upsert(key, obj, handler);
                } else {
                    self.delete(&key, handler);
                }
            }
            Event::Delete(obj) => {
                let Some(key) = self.key(&obj) else { return };
                if let Some(listed) = &mut self.listed {
                    listed.remove(&key);
                }
                self.delete(&key, handler);
            }
            Event::Init => {
                if self.listed.replace(BTreeSet::new()).is_some() {
                    self.stats.aborted_lists += 1;
                    tracing::info!(kind = %std::any::type_name::<K>(), "list restarted before it completed; deletes wait for a complete one");
                }
            }
            Event::InitApply(obj) => {
                let Some(key) = self.key(&obj) else { return };
                let selected = (self.selected)(&obj);
                // Without Init (not what kube-runtime does) this is an Apply.
                if let Some(listed) = &mut self.listed {
                    if selected {
                        listed.insert(key.clone());
                    } else {
                        listed.remove(&key);
                    }
                }
                if selected {
                    self.upsert(key, obj, handler);
                } else {
                    self.delete(&key, handler);
                }
            }
            Event::InitDone => {
                let Some(listed) = self.listed.take() else {
                    tracing::warn!(kind = %std::any::type_name::<K>(), "InitDone without Init; ignored");
                    return;
                };
                let gone: Vec<Key> = self.known.keys().filter(|k| !listed.contains(*k)).cloned().collect();
                for key in gone {
                    self.stats.deletes_found_by_relist += 1;
                    self.delete(&key, handler);
                }
                self.stats.lists += 1;
                if !self.synced {
                    self.synced = true;
                    handler.on_synced();
                }
            }
        }
    }

    fn upsert(&mut self, key: Key, obj: K, handler: &mut impl EventHandler<K>) {
        match self.known.get(&key) {
            Some(old) if same_version(old, &obj) => {}
            Some(old) => {
                handler.on_update(old, &obj);
                let kept = self.keep(obj);
                self.known.insert(key, kept);
            }
            None => {
                handler.on_add(&obj);
                let kept = self.keep(obj);
                self.known.insert(key, kept);
            }
        }
    }

    fn delete(&mut self, key: &Key, handler: &mut impl EventHandler<K>) {
        if let Some(old) = self.known.remove(key) {
            handler.on_delete(&old);
        }
    }
}

/// A relist hands back every object; one whose resourceVersion has not
/// moved has not changed.
fn same_version<K: ResourceExt>(a: &K, b: &K) -> bool {
    match (a.resource_version(), b.resource_version()) {
        (Some(x), Some(y)) => !x.is_empty() && x == y,
        _ => false,
    }
}
