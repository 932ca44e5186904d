//! [`ZoneHints`]: an endpoint's zone hints, as a shared copy of its set.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The zone hints of an endpoint (`hints.forZones[].name`), sorted and
/// without duplicates.
///
/// A set is reference-counted: the endpoints that share it (decoders hand
/// out one copy per distinct set) hold it, and it is freed with the last of
/// them, so generated or hand-written zone names cost memory only while
/// some endpoint carries them.
///
/// The set sits behind a thin pointer (one word, where a shared slice
/// takes two): every endpoint carries a `ZoneHints`, most carry none.
#[derive(Clone, Default)]
pub struct ZoneHints(Option<Arc<Box<[Arc<str>]>>>);

impl ZoneHints {
    /// The set of these zones, in any order, duplicates dropped. (Decoders
    /// share one copy of each set, through slice-model's `Interner`.)
    pub fn new<I, S>(zones: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Arc<str>>,
    {
        let mut v: Vec<Arc<str>> = zones.into_iter().map(Into::into).collect();
        v.sort_unstable();
        v.dedup();
        Self::of_sorted(&v)
    }

    /// A set from zones that are sorted and without duplicates.
    pub(crate) fn of_sorted(zones: &[Arc<str>]) -> Self {
        Self((!zones.is_empty()).then(|| Arc::new(zones.into())))
    }

    /// The zones, sorted.
    pub fn as_slice(&self) -> &[Arc<str>] {
        self.0.as_deref().map_or(&[], |set| set)
    }

    /// Whether the set names no zone.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether `zone` is one of the hints.
    pub fn contains(&self, zone: &str) -> bool {
        self.as_slice().iter().any(|z| &**z == zone)
    }

    /// Whether something other than `self` holds this copy of the set.
    pub(crate) fn is_shared(&self) -> bool {
        self.0.as_ref().is_some_and(|set| Arc::strong_count(set) > 1)
    }
}

/// Equal sets are equal whether or not they are the same copy; the same
/// copy (the usual case, from one interner) compares without reading it.
impl PartialEq for ZoneHints {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl Eq for ZoneHints {}

/// Looked up by its zones (the interner keeps its sets in a hash set);
/// hashing and equality are the zones', so this is consistent.
impl std::borrow::Borrow<[Arc<str>]> for ZoneHints {
    fn borrow(&self) -> &[Arc<str>] {
        self.as_slice()
    }
}

impl Hash for ZoneHints {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl ZoneHints {
    /// The zones, sorted, as strings.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.as_slice().iter().map(|z| &**z)
    }
}

/// The zones, sorted and comma-separated (`zone-a,zone-b`); nothing for
/// no hints.
impl fmt::Display for ZoneHints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, zone) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(zone)?;
        }
        Ok(())
    }
}

impl fmt::Debug for ZoneHints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.as_slice()).finish()
    }
}

/// A list of zone names.
#[cfg(feature = "serde")]
impl serde::Serialize for ZoneHints {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_costs_an_endpoint_one_word() {
        assert_eq!(std::mem::size_of::<ZoneHints>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn zone_hints_are_sorted_and_unique() {
        let z = ZoneHints::new(["b", "a", "b"]);
        assert_eq!(z.as_slice(), [Arc::from("a"), Arc::from("b")]);
        assert!(z.contains("a") && !z.contains("c"));
        assert_eq!(z.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(z.to_string(), "a,b");
        assert_eq!(ZoneHints::default().to_string(), "");
        assert!(ZoneHints::new(Vec::<String>::new()).is_empty());
        assert_eq!(z, ZoneHints::new(["a", "b"]), "equal sets, different copies");
        assert_ne!(z, ZoneHints::new(["a"]));
        assert_ne!(z, ZoneHints::default());
        assert_eq!(ZoneHints::default(), ZoneHints::new(Vec::<&str>::new()));
    }

    #[test]
    fn a_set_is_freed_with_its_last_holder() {
        let z = ZoneHints::new(["a"]);
        let weak = Arc::downgrade(z.0.as_ref().expect("one zone"));
        let copy = z.clone();
        assert!(z.is_shared());
        drop(z);
        assert!(!copy.is_shared());
        drop(copy);
        assert!(weak.upgrade().is_none());
    }
}
