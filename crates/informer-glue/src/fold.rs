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

use std::borrow::Cow;
use std::cmp::Ordering;
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

impl<K, H: EventHandler<K> + ?Sized> EventHandler<K> for Box<H> {
    fn on_add(&mut self, obj: &K) {
        (**self).on_add(obj);
    }

    fn on_update(&mut self, old: &K, new: &K) {
        (**self).on_update(old, new);
    }

    fn on_delete(&mut self, obj: &K) {
        (**self).on_delete(obj);
    }

    fn on_synced(&mut self) {
        (**self).on_synced();
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

/// An object's namespace and name, in one allocation (a large cluster's
/// fold holds one per object), ordered as the pair `(namespace, name)`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    /// The namespace followed by the name.
    text: Box<str>,
    /// Where the name starts in `text`.
    split: usize,
}

impl Key {
    fn new(namespace: &str, name: &str) -> Self {
        let mut text = String::with_capacity(namespace.len() + name.len());
        text.push_str(namespace);
        text.push_str(name);
        Self {
            text: text.into_boxed_str(),
            split: namespace.len(),
        }
    }

    fn namespace(&self) -> &str {
        self.text.get(..self.split).unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.text.get(self.split..).unwrap_or_default()
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What the fold keeps of an object it has handed over.
struct Known<T> {
    kept: T,
    /// The list that last listed it (see [`EventFold::list`]).
    listed_in: u64,
}

/// What the fold keeps of each object it has handed over: enough to give
/// the handler a tombstone (or an update's old version) and to tell
/// versions apart. [`Whole`] keeps everything; a proxy of a large cluster
/// keeps a few strings per object instead (see [`crate::tombstone`]).
pub trait Keep<K: Clone> {
    /// The record kept per object.
    type Kept;
    /// The record of `obj`, just handed over.
    fn keep(&self, obj: K) -> Self::Kept;
    /// The recorded `metadata.resourceVersion`.
    fn version<'a>(&self, kept: &'a Self::Kept) -> Option<&'a str>;
    /// The object rebuilt from its record (and its namespace and name),
    /// as the handler's tombstone or an update's old version.
    fn object<'a>(&self, namespace: &str, name: &str, kept: &'a Self::Kept) -> Cow<'a, K>;
}

/// Keeps a whole copy of every object.
#[derive(Debug, Default, Clone, Copy)]
pub struct Whole;

impl<K: ResourceExt + Clone> Keep<K> for Whole {
    type Kept = K;

    fn keep(&self, obj: K) -> K {
        obj
    }

    fn version<'a>(&self, kept: &'a K) -> Option<&'a str> {
        kept.meta().resource_version.as_deref()
    }

    fn object<'a>(&self, _: &str, _: &str, kept: &'a K) -> Cow<'a, K> {
        Cow::Borrowed(kept)
    }
}

/// The fold; see the module docs.
pub struct EventFold<K: Clone, P: Keep<K> = Whole> {
    known: BTreeMap<Key, Known<P::Kept>>,
    /// The number of the list under way (after `Init`, before `InitDone`):
    /// what it listed so far is what it marked with its number, so a list
    /// costs no set of its keys. Numbers start at 1, and 0 marks what no
    /// list has listed.
    list: Option<u64>,
    /// The number of the last list begun.
    lists_begun: u64,
    /// Objects the list under way listed that a watch event then
    /// unselected: listed still, should the watch select them again.
    unselected_after_listing: BTreeSet<Key>,
    synced: bool,
    /// Objects the proxy does not handle; treated as absent.
    selected: Box<dyn Fn(&K) -> bool + Send>,
    keep: P,
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
            list: None,
            lists_begun: 0,
            unselected_after_listing: BTreeSet::new(),
            synced: false,
            selected: Box::new(selected),
            keep: Whole,
            stats: FoldStats::default(),
        }
    }

    /// The same fold keeping only `keep`'s records of the objects it hands
    /// over (see [`Keep`]). Call it before the first event.
    pub fn keeping<Q: Keep<K>>(self, keep: Q) -> EventFold<K, Q> {
        debug_assert!(
            self.known.is_empty() && self.list.is_none(),
            "keeping() after events would forget them"
        );
        EventFold {
            known: BTreeMap::new(),
            list: None,
            lists_begun: 0,
            unselected_after_listing: BTreeSet::new(),
            synced: false,
            selected: self.selected,
            keep,
            stats: FoldStats::default(),
        }
    }
}

impl<K: ResourceExt + Clone, P: Keep<K>> EventFold<K, P>
where
    K::DynamicType: Default,
{
    /// Whether the first complete list has been handed over.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Counters.
    pub fn stats(&self) -> FoldStats {
        self.stats
    }

    /// How many objects the handler currently knows.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether the handler knows no object.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    fn key(&mut self, obj: &K) -> Option<Key> {
        let name = obj.meta().name.clone().filter(|n| !n.is_empty());
        match name {
            Some(name) => Some(Key::new(obj.meta().namespace.as_deref().unwrap_or_default(), &name)),
            None => {
                self.stats.unnamed += 1;
                tracing::warn!(
                    kind = %K::kind(&K::DynamicType::default()),
                    namespace = obj.namespace().unwrap_or_default(),
                    "watched object without metadata.name; ignored"
                );
                None
            }
        }
    }

    /// Applies one watcher event.
    pub fn apply(&mut self, event: Event<K>, handler: &mut impl EventHandler<K>) {
        match event {
            Event::Apply(obj) => self.apply_object(obj, None, handler),
            Event::Delete(obj) => {
                let Some(key) = self.key(&obj) else { return };
                self.unselected_after_listing.remove(&key);
                self.delete(&key, handler);
            }
            Event::Init => {
                if self.list.is_some() {
                    // Every retry of a failing watch restarts its list: the
                    // outage is said by the watch (once when it starts, once
                    // when it ends), this is counted.
                    self.stats.aborted_lists += 1;
                    tracing::debug!(kind = %std::any::type_name::<K>(), "list restarted before it completed; deletes wait for a complete one");
                }
                self.lists_begun += 1;
                self.list = Some(self.lists_begun);
                self.unselected_after_listing.clear();
            }
            // Without Init (not what kube-runtime does) this is an Apply.
            Event::InitApply(obj) => self.apply_object(obj, self.list, handler),
            Event::InitDone => {
                let Some(list) = self.list.take() else {
                    tracing::warn!(kind = %std::any::type_name::<K>(), "InitDone without Init; ignored");
                    return;
                };
                self.unselected_after_listing.clear();
                let gone: Vec<Key> = self
                    .known
                    .iter()
                    .filter(|(_, known)| known.listed_in != list)
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in gone {
                    self.stats.deletes_found_by_relist += 1;
                    self.delete(&key, handler);
                }
                self.stats.lists += 1;
                // A list arrives in key order, and a B-tree node that fills
                // at its end splits into one that keeps 6 of its 11 entries
                // and one that takes the rest: in-order inserts leave every
                // node little more than half full. Rebuilt from sorted
                // entries, the nodes are full.
                self.known = std::mem::take(&mut self.known).into_iter().collect();
                if !self.synced {
                    self.synced = true;
                    handler.on_synced();
                }
            }
        }
    }

    /// The list under way listed an object that could not be decoded (see
    /// [`crate::lenient`]): the version the handler has stays, and is not
    /// taken for deleted when the list completes. Outside a list, nothing
    /// changes.
    pub fn still_listed(&mut self, namespace: &str, name: &str) {
        let Some(list) = self.list else { return };
        if let Some(known) = self.known.get_mut(&Key::new(namespace, name)) {
            known.listed_in = list;
        }
    }

    /// An object applied by the watch, or listed by list `listed_in`.
    fn apply_object(&mut self, obj: K, listed_in: Option<u64>, handler: &mut impl EventHandler<K>) {
        let Some(key) = self.key(&obj) else { return };
        let selected = (self.selected)(&obj);
        let listed_in = match listed_in {
            Some(list) => {
                self.unselected_after_listing.remove(&key);
                Some(list)
            }
            None if selected => self
                .unselected_after_listing
                .remove(&key)
                .then_some(self.list)
                .flatten(),
            None => {
                let listed = |list| self.known.get(&key).is_some_and(|known| known.listed_in == list);
                if self.list.is_some_and(listed) {
                    self.unselected_after_listing.insert(key.clone());
                }
                None
            }
        };
        if selected {
            self.upsert(key, obj, listed_in, handler);
        } else {
            self.delete(&key, handler);
        }
    }

    fn upsert(&mut self, key: Key, obj: K, listed_in: Option<u64>, handler: &mut impl EventHandler<K>) {
        let version = obj.meta().resource_version.as_deref();
        match self.known.get_mut(&key) {
            Some(known) if same_version(self.keep.version(&known.kept), version) => {
                known.listed_in = listed_in.unwrap_or(known.listed_in);
            }
            Some(known) => {
                handler.on_update(&self.keep.object(key.namespace(), key.name(), &known.kept), &obj);
                known.kept = self.keep.keep(obj);
                known.listed_in = listed_in.unwrap_or(known.listed_in);
            }
            None => {
                handler.on_add(&obj);
                let kept = self.keep.keep(obj);
                self.known.insert(
                    key,
                    Known {
                        kept,
                        listed_in: listed_in.unwrap_or(0),
                    },
                );
            }
        }
    }

    fn delete(&mut self, key: &Key, handler: &mut impl EventHandler<K>) {
        if let Some(old) = self.known.remove(key) {
            handler.on_delete(&self.keep.object(key.namespace(), key.name(), &old.kept));
        }
    }
}

/// A relist hands back every object; one whose resourceVersion has not
/// moved has not changed.
fn same_version(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a, b), (Some(x), Some(y)) if !x.is_empty() && x == y)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Key;

    proptest! {
        #[test]
        fn keys_keep_their_parts_and_order_as_pairs(
            a in ("[a-c-]{0,3}", "[a-c-]{0,3}"),
            b in ("[a-c-]{0,3}", "[a-c-]{0,3}"),
        ) {
            let (ka, kb) = (Key::new(&a.0, &a.1), Key::new(&b.0, &b.1));
            prop_assert_eq!((ka.namespace(), ka.name()), (a.0.as_str(), a.1.as_str()));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
        }
    }
}
