//! [`ByName`]: a small map keyed by slice name, kept sorted.

use std::sync::Arc;

/// Up to this many entries, a map's capacity is its length.
const EXACT_UP_TO: usize = 8;

/// A map from slice name to `V`, sorted by name.
///
/// A service has one slice, or a few; even big ones have a hundred. A sorted
/// vector is one allocation and one cache line for the common case, where a
/// B-tree allocates a 400-byte node per map.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ByName<V>(Vec<(Arc<str>, V)>);

impl<V> Default for ByName<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> ByName<V> {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(name))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    /// Inserts or replaces; returns the value replaced.
    pub(crate) fn insert(&mut self, name: Arc<str>, value: V) -> Option<V> {
        match self.find(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                // Most services have one slice, or a few: a small map grows
                // one entry at a time, so that it holds only what it uses
                // (pushing would reserve four).
                if self.0.len() == self.0.capacity() && self.0.len() < EXACT_UP_TO {
                    self.0.reserve_exact(1);
                }
                self.0.insert(i, (name, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<V> {
        self.find(name).ok().map(|i| self.0.remove(i).1)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Entries in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &V)> + Clone {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    /// Takes every entry, in name order, leaving the map empty.
    pub(crate) fn take(&mut self) -> Vec<(Arc<str>, V)> {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_sorted_map() {
        let mut m = ByName::default();
        assert_eq!(m.insert("b".into(), 2), None);
        assert_eq!(m.insert("a".into(), 1), None);
        assert_eq!(m.insert("c".into(), 3), None);
        assert_eq!(m.insert("b".into(), 20), Some(2));
        assert_eq!(
            m.iter().map(|(k, v)| (k.to_owned(), *v)).collect::<Vec<_>>(),
            [("a".to_owned(), 1), ("b".to_owned(), 20), ("c".to_owned(), 3)]
        );
        assert_eq!(m.get("b"), Some(&20));
        assert!(m.get("c").is_some() && m.get("d").is_none());
        assert_eq!(m.remove("a"), Some(1));
        assert_eq!(m.remove("a"), None);
        assert_eq!(m.take().len(), 2);
        assert!(m.is_empty());
    }

    #[test]
    fn a_small_map_holds_what_it_uses() {
        let mut m = ByName::default();
        for i in 0..EXACT_UP_TO {
            m.insert(format!("s{i}").into(), i);
            assert_eq!(m.0.capacity(), i + 1);
        }
    }
}
