//! [`Interner`]: one shared copy of the strings that repeat across slices.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A multiply-rotate hasher, mixed once more at the end, for the short
/// strings the caches key on (node, zone, namespace and object names) and
/// endpoint addresses: several times cheaper than SipHash per lookup,
/// which every endpoint of every slice pays. The names come
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
        // The multiply leaves the low bits, which pick the bucket, depending
        // only on the low bits of the last word: fold the well-mixed high
        // half down and mix once more.
        let x = self.0 ^ (self.0 >> 32);
        x.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (x >> 29)
    }
}

use crate::{NodeName, ZoneHints};

/// How many single-zone sets are found by scanning; past that (a cluster
/// with very many zones) they are looked up by hashing, like larger sets.
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
    /// Every other set handed out, so that each has one shared copy.
    zone_sets: HashSet<ZoneHints, FastHash>,
    scratch: Vec<Arc<str>>,
    /// How much was held (strings and sets) after the last prune.
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

    /// The shared copy of the set of these zones (in any order, duplicates
    /// dropped).
    pub fn zones<'z>(&mut self, zones: impl IntoIterator<Item = &'z str>) -> ZoneHints {
        let mut zones = zones.into_iter();
        let Some(first) = zones.next() else {
            return ZoneHints::default();
        };
        let Some(second) = zones.next() else {
            return self.single_zone(first);
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend([first, second].into_iter().chain(zones).map(|z| self.str(z)));
        scratch.sort_unstable();
        scratch.dedup();
        let set = match &scratch[..] {
            [one] => self.single_zone(one),
            _ => self.zone_set(&scratch),
        };
        // Keep the capacity, not the strings: they must stay prunable.
        scratch.clear();
        self.scratch = scratch;
        set
    }

    /// The shared copy of the set of one zone.
    fn single_zone(&mut self, zone: &str) -> ZoneHints {
        let found = self
            .single_zones
            .iter()
            .find(|set| set.as_slice().first().is_some_and(|z| &**z == zone));
        if let Some(set) = found {
            return set.clone();
        }
        let zone = [self.str(zone)];
        if self.single_zones.len() < MAX_SCANNED_ZONES {
            let set = ZoneHints::of_sorted(&zone);
            self.single_zones.push(set.clone());
            return set;
        }
        self.zone_set(&zone)
    }

    /// The shared copy of a set of sorted, distinct zones.
    fn zone_set(&mut self, zones: &[Arc<str>]) -> ZoneHints {
        if let Some(set) = self.zone_sets.get(zones) {
            return set.clone();
        }
        let set = ZoneHints::of_sorted(zones);
        self.zone_sets.insert(set.clone());
        set
    }

    /// Forgets the strings that nothing outside the interner holds. Costs a
    /// pass over everything held.
    pub fn prune(&mut self) {
        // Sets first: they hold zone names.
        self.single_zones.retain(ZoneHints::is_shared);
        self.zone_sets.retain(ZoneHints::is_shared);
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.pruned_len = self.held();
    }

    /// Prunes once the interner has doubled since the last prune (and holds
    /// at least a few thousand strings): callable after every change at an
    /// amortised constant cost, where pruning every time would cost a pass
    /// over the whole cluster's names per call.
    pub fn prune_if_grown(&mut self) {
        if self.held() >= PRUNE_FLOOR.max(2 * self.pruned_len) {
            self.prune();
        }
    }

    /// Strings and zone sets held: what a prune can free.
    fn held(&self) -> usize {
        self.strings.len() + self.single_zones.len() + self.zone_sets.len()
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
    use std::hash::BuildHasher;

    use super::*;

    /// How many of the 65,536 values of the low 16 bits the keys' hashes take.
    fn low_bits_taken<K: std::hash::Hash>(keys: impl Iterator<Item = K>) -> usize {
        keys.map(|k| FastHash::default().hash_one(k) & 0xffff)
            .collect::<HashSet<u64>>()
            .len()
    }

    /// The low bits pick a map's bucket: keys that differ only in a few
    /// bytes (endpoints of one service: consecutive addresses, one port)
    /// must still spread over them, or a big service's sets degrade into
    /// long probe chains.
    #[test]
    fn the_low_bits_of_close_keys_spread() {
        let addrs =
            (0..100_000u32).map(|i| std::net::SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 8080)));
        // 100,000 random keys would take about 51,500 of the 65,536.
        assert!(low_bits_taken(addrs) > 45_000);
        assert!(low_bits_taken((0..100_000).map(|i| format!("svc-{i}"))) > 35_000);
    }

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
        assert!(std::ptr::eq(z1.as_slice(), z2.as_slice()), "one copy per set");
        let single = i.zones(["a"]);
        assert!(std::ptr::eq(single.as_slice(), i.zones(["a", "a"]).as_slice()));
        assert_eq!(single, ZoneHints::new(["a"]));
        assert_eq!(z1, ZoneHints::new(["a", "b"]), "equal however made");
        assert!(i.zones([]).is_empty());
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
        let zones = i.zones(["z", "y"]);
        let single = i.zones(["x"]);
        drop(i.str("dropped"));
        i.prune();
        assert_eq!(i.len(), 4, "kept, and the zones of the two sets still held");
        drop((kept, zones, single));
        i.prune();
        assert_eq!(i.len(), 0, "sets nobody holds go, and their zones with them");
        assert_eq!(i.held(), 0);
    }

    #[test]
    fn many_zone_sets_are_freed_as_they_go() {
        // A property test generating zone names across cases: nothing is
        // capped, nothing lost, and what is no longer held is freed.
        let mut i = Interner::new();
        for case in 0..3 * PRUNE_FLOOR {
            let (a, b) = (format!("zone-{case}"), format!("zone-{}", case + 1));
            let set = i.zones([a.as_str(), b.as_str()]);
            assert!(set.contains(&a) && set.contains(&b), "case {case}: hints kept");
            let one = i.zones([a.as_str()]);
            assert_eq!(one.as_slice(), [Arc::from(a)], "case {case}: one zone kept");
            drop((set, one));
            i.prune_if_grown();
        }
        assert!(i.held() < 3 * PRUNE_FLOOR, "pruned along the way: {} held", i.held());
        i.prune();
        assert_eq!(i.held(), 0);
    }
}
