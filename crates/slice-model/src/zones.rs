//! [`ZoneHints`]: an endpoint's zone hints, as one process-wide copy of
//! each distinct set.

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

/// How many distinct zone sets the process keeps. The EndpointSlice
/// controller hints each endpoint with its own zone, so a cluster has as
/// many sets as zones; this bound only stops hand-written hints from
/// growing memory without end.
pub const MAX_ZONE_SETS: usize = 4096;

/// The zone hints of an endpoint (`hints.forZones[].name`), sorted and
/// without duplicates.
///
/// Each distinct set is kept once for the life of the process, so a hint
/// is a plain reference: copying one counts no references, comparing two
/// compares addresses, and dropping an endpoint record never reads it
/// (dropping a merged service's endpoints read every one of them to count
/// down their sets, a cache miss per endpoint in a busy sync). Past
/// [`MAX_ZONE_SETS`] distinct sets, new ones are not kept and read as no
/// hints, which proxiers treat like an endpoint the controller did not
/// hint.
#[derive(Clone, Copy, Default)]
pub struct ZoneHints(Option<&'static [Arc<str>]>);

impl ZoneHints {
    /// The set of these zones, in any order, duplicates dropped. (Decoders
    /// use [`Interner::zones`](crate::Interner::zones), which asks the
    /// process-wide table less often.)
    pub fn new<I, S>(zones: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Arc<str>>,
    {
        let mut v: Vec<Arc<str>> = zones.into_iter().map(Into::into).collect();
        v.sort_unstable();
        v.dedup();
        Self::of_sorted(v).unwrap_or_default()
    }

    /// The kept copy of a set that is sorted and without duplicates; `None`
    /// if the table is full and the set is not in it.
    pub(crate) fn of_sorted(zones: Vec<Arc<str>>) -> Option<Self> {
        if zones.is_empty() {
            return Some(Self(None));
        }
        let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        table.get_or_keep(zones, MAX_ZONE_SETS).map(|set| Self(Some(set)))
    }

    /// The zones, sorted.
    pub fn as_slice(&self) -> &[Arc<str>] {
        self.0.unwrap_or(&[])
    }

    /// Whether the set names no zone.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether `zone` is one of the hints.
    pub fn contains(&self, zone: &str) -> bool {
        self.as_slice().iter().any(|z| &**z == zone)
    }
}

/// One copy per set: equal sets are the same copy.
impl PartialEq for ZoneHints {
    fn eq(&self, other: &Self) -> bool {
        match (self.0, other.0) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl Eq for ZoneHints {}

impl Hash for ZoneHints {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.map(<[Arc<str>]>::as_ptr).hash(state);
    }
}

impl fmt::Debug for ZoneHints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.as_slice()).finish()
    }
}

/// Every set kept so far.
static TABLE: Mutex<Table> = Mutex::new(Table(None));

/// The sets kept, created on first use.
struct Table(Option<HashSet<&'static [Arc<str>]>>);

impl Table {
    /// The kept copy of `zones`, kept now if new and fewer than `max` are.
    fn get_or_keep(&mut self, zones: Vec<Arc<str>>, max: usize) -> Option<&'static [Arc<str>]> {
        let sets = self.0.get_or_insert_with(HashSet::new);
        if let Some(kept) = sets.get(&zones[..]) {
            return Some(kept);
        }
        if sets.len() >= max {
            return None;
        }
        let kept: &'static [Arc<str>] = Box::leak(zones.into_boxed_slice());
        sets.insert(kept);
        Some(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_hints_are_sorted_unique_and_one_copy_per_set() {
        let z = ZoneHints::new(["b", "a", "b"]);
        assert_eq!(z.as_slice(), [Arc::from("a"), Arc::from("b")]);
        assert!(z.contains("a") && !z.contains("c"));
        assert!(ZoneHints::new(Vec::<String>::new()).is_empty());
        let again = ZoneHints::new(["a", "b"]);
        assert_eq!(z, again);
        assert!(std::ptr::eq(z.as_slice(), again.as_slice()));
        assert_ne!(z, ZoneHints::new(["a"]));
        assert_ne!(z, ZoneHints::default());
        assert_eq!(ZoneHints::default(), ZoneHints::new(Vec::<&str>::new()));
    }

    #[test]
    fn a_full_table_keeps_what_it_has_and_nothing_new() {
        let mut t = Table(None);
        let set = |z: &str| vec![Arc::<str>::from(z)];
        let a = t.get_or_keep(set("a"), 2).expect("room");
        assert!(t.get_or_keep(set("b"), 2).is_some());
        assert!(t.get_or_keep(set("c"), 2).is_none(), "full");
        assert!(std::ptr::eq(t.get_or_keep(set("a"), 2).expect("kept"), a));
    }
}
