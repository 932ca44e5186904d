//! Digests: a word standing for what proxyd writes, stored with it in the
//! kernel where `nft` shows nothing (a rule's or an element's user data),
//! so that a restart can tell what the table already holds without reading
//! all of it: a chain's rules, a slot frontend's endpoints.

use std::hash::{Hash, Hasher};

use crate::rule::Rule;

/// A digest of `value` as this version of proxyd writes it (its writers
/// are versioned with it). Equal values have equal digests; two different
/// ones collide as rarely as any 64-bit hash's.
pub fn of<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut h = Fnv1a::default();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

impl Rule {
    /// The rule's digest: the netlink writer stores it with the rule.
    pub fn digest(&self) -> u64 {
        of(self)
    }
}

/// A word standing for a chain's rules: their [`Rule::digest`]s folded in
/// order (see [`crate::TableObjects::rule_digests`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RulesDigest(u64);

impl Default for RulesDigest {
    fn default() -> Self {
        Self(Fnv1a::default().0)
    }
}

impl RulesDigest {
    /// The digest of `rules`, in order.
    pub fn of(rules: &[Rule]) -> Self {
        let mut d = Self::default();
        for r in rules {
            d.push(r.digest());
        }
        d
    }

    /// Adds the next rule's digest.
    pub fn push(&mut self, rule_digest: u64) {
        let mut h = Fnv1a(self.0);
        h.write(&rule_digest.to_le_bytes());
        self.0 = h.finish();
    }
}

/// 64-bit FNV-1a: a hash whose value does not depend on the process, the
/// platform's hasher keys or the standard library's version.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Statement;

    #[test]
    fn equal_values_have_equal_digests_and_order_counts() {
        let (a, b) = (
            Rule::always(vec![Statement::Drop]),
            Rule::always(vec![Statement::Reject]),
        );
        assert_eq!(a.digest(), a.clone().digest());
        assert_ne!(a.digest(), b.digest());
        assert_eq!(
            RulesDigest::of(&[a.clone(), b.clone()]),
            RulesDigest::of(&[a.clone(), b.clone()])
        );
        assert_ne!(
            RulesDigest::of(&[a.clone(), b.clone()]),
            RulesDigest::of(&[b, a.clone()])
        );
        assert_ne!(
            RulesDigest::of(std::slice::from_ref(&a)),
            RulesDigest::of(&[a.clone(), a])
        );
        assert_ne!(RulesDigest::of(&[]), RulesDigest::of(&[Rule::always(Vec::new())]));
    }
}
