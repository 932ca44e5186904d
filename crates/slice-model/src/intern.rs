//! [`Interner`]: one shared copy of the strings that repeat across slices.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A multiply-rotate hasher for the short strings the caches key on (node,
/// zone, namespace and object names): several times cheaper than SipHash
/// per lookup, which every endpoint of every slice pays. The names come
/// from the API server, not from an attacker who could aim at collisions;
/// and a flood of collisions would only slow lookups, never make them
/// wrong.
#[derive(Default, Clone, Copy, Debug)]
pub struct FastHasher(u64);

/// Builds `FastHasher`s: the hasher of the caches' maps.
pub type FastHash = BuildHasherDefault<FastHasher>;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        // The tail in one word, not a round per byte (most names are
        // shorter than 16 bytes); its length in the top byte keeps "a"
        // and "a\0" apart.
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 8];
            for (w, b) in word.iter_mut().zip(tail) {
                *w = *b;
            }
            word[7] = tail.len() as u8;
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

use crate::{NodeName, ZoneHints};

/// How many single-zone sets are found by scanning; past that (a cluster
/// with very many zones) they are looked up in the process-wide table.
const MAX_SCANNED_ZONES: usize = 32;

/// Shares the strings that repeat across slices (zone, namespace and port
/// names, node names too long to be held inline by [`NodeName`]) and finds
/// zone-hint sets.
///
/// A cluster has few nodes and zones but many endpoints; without sharing,
/// every endpoint of every slice version would allocate its own copies.
/// Whoever decodes slices owns one interner and passes it to
/// [`SliceBuilder`](crate::SliceBuilder); [`prune`](Self::prune) now and then
/// forgets the strings no slice uses any more.
///
/// Object names (of slices and services) are not shared: there are as many
/// as objects, and looking one up in a set that large missed the CPU caches
/// at a cost above the allocation it saved.
#[derive(Debug, Default)]
pub struct Interner {
    /// Looked up for every endpoint: a small set, so it stays cache-hot.
    strings: HashSet<Arc<str>, FastHash>,
    /// Sets of one zone: the EndpointSlice controller gives each endpoint
    /// exactly one, and a cluster has a handful of zones, so a short scan
    /// beats hashing on the path almost always taken.
    single_zones: Vec<ZoneHints>,
    /// Sets of several zones found so far, so that the process-wide table
    /// (behind a lock) is asked once per set.
    zone_sets: HashMap<Box<[Arc<str>]>, ZoneHints, FastHash>,
    scratch: Vec<Arc<str>>,
    /// What [`Self::len`] was after the last prune.
    pruned_len: usize,
}

/// [`Interner::prune_if_grown`] does nothing below this size.
const PRUNE_FLOOR: usize = 4096;

impl Interner {
    /// An empty interner.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared copy of `s`: a zone, namespace, port or long node name.
    pub fn str(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(s) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(s);
        self.strings.insert(shared.clone());
        shared
    }

    /// The name of an endpoint's node: inline when short (nearly always),
    /// else a shared copy.
    pub fn node(&mut self, name: &str) -> NodeName {
        NodeName::inline(name).unwrap_or_else(|| NodeName::shared(self.str(name)))
    }

    /// The set of these zones (in any order, duplicates dropped), or `None`
    /// when the set is new and the process already keeps
    /// [`MAX_ZONE_SETS`](crate::MAX_ZONE_SETS) (see [`ZoneHints`]).
    pub fn zones<'z>(&mut self, zones: impl IntoIterator<Item = &'z str>) -> Option<ZoneHints> {
        let mut zones = zones.into_iter();
        let Some(first) = zones.next() else {
            return Some(ZoneHints::default());
        };
        let Some(second) = zones.next() else {
            let found = self
                .single_zones
                .iter()
                .find(|set| set.as_slice().first().is_some_and(|z| &**z == first));
            if let Some(set) = found {
                return Some(*set);
            }
            let set = ZoneHints::of_sorted(vec![self.str(first)])?;
            if self.single_zones.len() < MAX_SCANNED_ZONES {
                self.single_zones.push(set);
            }
            return Some(set);
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend([first, second].into_iter().chain(zones).map(|z| self.str(z)));
        scratch.sort_unstable();
        scratch.dedup();
        let set = match self.zone_sets.get(&scratch[..]) {
            Some(set) => Some(*set),
            None => ZoneHints::of_sorted(scratch.clone()).inspect(|set| {
                self.zone_sets.insert(scratch.clone().into_boxed_slice(), *set);
            }),
        };
        // Keep the capacity, not the strings: they must stay prunable.
        scratch.clear();
        self.scratch = scratch;
        set
    }

    /// Forgets the strings that nothing outside the interner holds. Costs a
    /// pass over everything held.
    pub fn prune(&mut self) {
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.pruned_len = self.len();
    }

    /// Prunes once the interner has doubled since the last prune (and holds
    /// at least a few thousand strings): callable after every change at an
    /// amortised constant cost, where pruning every time would cost a pass
    /// over the whole cluster's names per call.
    pub fn prune_if_grown(&mut self) {
        if self.len() >= PRUNE_FLOOR.max(2 * self.pruned_len) {
            self.prune();
        }
    }

    /// How many distinct strings are held.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether no string is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hasher_tells_apart_texts_that_differ_only_by_trailing_zeros() {
        use std::hash::BuildHasher;
        let hash = |s: &str| FastHash::default().hash_one(s);
        let texts = [
            "",
            "a",
            "a\0",
            "a\0\0",
            "abcdefg",
            "abcdefg\0",
            "abcdefgh",
            "abcdefgh\0",
            "node-1",
            "node-10",
        ];
        let hashes: HashSet<u64> = texts.iter().map(|t| hash(t)).collect();
        assert_eq!(hashes.len(), texts.len());
        assert_eq!(hash("node-1"), hash("node-1"));
    }

    #[test]
    fn equal_inputs_share_one_copy() {
        let mut i = Interner::new();
        let a = i.str("node-1");
        let b = i.str("node-1");
        assert!(Arc::ptr_eq(&a, &b));
        let z1 = i.zones(["b", "a", "a"]);
        let z2 = i.zones(["a", "b"]);
        assert_eq!(z1, z2);
        assert_eq!(i.zones(["a"]), Some(ZoneHints::new(["a"])));
        assert_eq!(i.zones(["a"]), i.zones(["a", "a"]));
        assert_eq!(z1, Some(ZoneHints::new(["a", "b"])), "one copy per set, however made");
        assert_eq!(Interner::new().zones(["b", "a"]), z1, "across interners too");
        assert!(i.zones([]).is_some_and(|z| z.is_empty()));
    }

    #[test]
    fn prune_if_grown_prunes_only_after_doubling() {
        let mut i = Interner::new();
        for n in 0..PRUNE_FLOOR - 1 {
            drop(i.str(&format!("s{n}")));
        }
        i.prune_if_grown();
        assert_eq!(i.len(), PRUNE_FLOOR - 1, "below the floor: kept");
        let held = i.str("held");
        i.prune_if_grown();
        assert_eq!(i.len(), 1, "at the floor: pruned to what is held");
        for n in 0..PRUNE_FLOOR - 2 {
            drop(i.str(&format!("t{n}")));
        }
        i.prune_if_grown();
        assert_eq!(i.len(), PRUNE_FLOOR - 1, "not doubled past the floor yet");
        drop(i.str("one more"));
        i.prune_if_grown();
        assert_eq!(i.len(), 1);
        assert_eq!(&*held, "held");
    }

    #[test]
    fn prune_forgets_what_nobody_holds() {
        let mut i = Interner::new();
        let kept = i.str("kept");
        let zones = i.zones(["prune-test-z", "prune-test-y"]);
        drop(i.str("dropped"));
        i.prune();
        assert_eq!(i.len(), 3, "kept, and the two zones of a set, which is never dropped");
        drop((kept, zones));
        i.prune();
        assert_eq!(i.len(), 2);
    }
}
