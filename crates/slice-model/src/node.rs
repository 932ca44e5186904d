//! [`NodeName`]: the node an endpoint runs on, held inline when short.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// The longest name held inline: the record stays as large as a shared
/// string's (32 bytes with its tag).
const INLINE: usize = 30;

/// The name of the node an endpoint runs on.
///
/// Every endpoint of every slice names its node, and every merge compares
/// that name with the proxy's own. Names of up to 30 bytes (`node-12`,
/// `ip-10-0-1-23.ec2.internal`, kind's and k3s's) are held in the record
/// itself, so neither reads another cache line nor counts references;
/// longer ones are shared copies from the [`Interner`](crate::Interner).
/// Equality, order and hashing are those of the text.
#[derive(Clone)]
pub struct NodeName(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<str>),
}

impl NodeName {
    /// The name `name`, inline if it fits, else in a new shared copy.
    pub fn new(name: &str) -> Self {
        Self::inline(name).unwrap_or_else(|| Self(Repr::Shared(name.into())))
    }

    /// The name inline, if it is short enough.
    pub(crate) fn inline(name: &str) -> Option<Self> {
        let len = u8::try_from(name.len()).ok().filter(|&l| usize::from(l) <= INLINE)?;
        let mut bytes = [0; INLINE];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(Self(Repr::Inline { len, bytes }))
    }

    /// A name held in a shared copy (the interner's, for long names).
    pub(crate) fn shared(name: Arc<str>) -> Self {
        Self(Repr::Shared(name))
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Shared(s) => s.as_bytes(),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Always valid: the bytes are a whole `&str`, copied.
            Repr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Shared(s) => s,
        }
    }

    /// Whether this is `name`: compared as bytes, without reading a shared
    /// copy for a short name.
    pub fn is(&self, name: &str) -> bool {
        self.as_bytes() == name.as_bytes()
    }
}

impl Deref for NodeName {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for NodeName {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl PartialEq for NodeName {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // Unused bytes are zero, so whole arrays compare like the texts,
            // in a few vector instructions where a slice compare called
            // `memcmp` (for every endpoint of every slice compared).
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => a == b && x == y,
            _ => self.as_bytes() == other.as_bytes(),
        }
    }
}

impl Eq for NodeName {}

impl PartialOrd for NodeName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for NodeName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for NodeName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn short_names_are_inline_and_long_ones_shared_and_both_compare_as_text() {
        let short = NodeName::new("node-1");
        assert!(matches!(short.0, Repr::Inline { .. }));
        let edge = "n".repeat(INLINE);
        assert!(matches!(NodeName::new(&edge).0, Repr::Inline { .. }));
        let long = "gke-production-default-pool-1a2b3c4d-x9z8";
        assert!(matches!(NodeName::new(long).0, Repr::Shared(_)));
        assert_eq!(
            NodeName::shared(Arc::from("node-1")),
            short,
            "equal by text, whichever way it is held"
        );
        for name in ["", "node-1", &edge, long, "nœud-ü"] {
            let n = NodeName::new(name);
            assert_eq!(n.as_str(), name);
            assert_eq!(&*n, name);
            assert!(n.is(name) && !n.is("other"));
            assert_eq!(n.to_string(), name);
            assert_eq!(n, NodeName::shared(Arc::from(name)));
        }
        let set: HashSet<NodeName> = ["a", "b", "a", long, long].into_iter().map(NodeName::new).collect();
        assert_eq!(set.len(), 3);
        assert!(NodeName::new("a") < NodeName::new("b"));
        for (a, b) in [("node-1", "node-10"), ("a", "a\0"), ("", "\0"), ("node-1", "node-2")] {
            assert_ne!(NodeName::new(a), NodeName::new(b), "{a:?} and {b:?}");
        }
        assert_eq!(std::mem::size_of::<Option<NodeName>>(), 32);
    }
}
