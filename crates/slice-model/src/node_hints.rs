//! Node hints (`hints.forNodes[].name`): the nodes an endpoint is meant to
//! serve, set by the EndpointSlice controller for
//! `trafficDistribution: PreferSameNode`.

use std::sync::Arc;

use crate::NodeName;

/// The node hints of a slice endpoint, sorted and without duplicates.
///
/// Most endpoints carry none, so the empty set costs one word (a thin
/// pointer) and no allocation; a hinted endpoint shares its set when its
/// slice is cloned.
#[derive(Clone, Default, PartialEq, Eq, Hash, Debug)]
pub struct NodeHints(Option<Arc<Box<[NodeName]>>>);

impl NodeHints {
    /// The set of these node names, in any order; duplicates and empty
    /// names are dropped.
    pub fn new<'a>(nodes: impl IntoIterator<Item = &'a str>) -> Self {
        let mut v: Vec<NodeName> = nodes.into_iter().filter(|n| !n.is_empty()).map(NodeName::new).collect();
        v.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        v.dedup();
        Self((!v.is_empty()).then(|| Arc::new(v.into_boxed_slice())))
    }

    /// The node names, sorted.
    pub fn as_slice(&self) -> &[NodeName] {
        self.0.as_deref().map_or(&[], |set| set)
    }

    /// Whether the set names no node.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether `node` is one of the hints (never when `node` is empty).
    pub fn contains(&self, node: &str) -> bool {
        self.as_slice().iter().any(|n| n.is(node))
    }

    /// What the hints say to `node`.
    pub fn for_node(&self, node: &str) -> NodeHint {
        if self.is_empty() {
            NodeHint::Unhinted
        } else if self.contains(node) {
            NodeHint::ThisNode
        } else {
            NodeHint::OtherNodes
        }
    }
}

/// What an endpoint's node hints say to one node: all routing
/// needs of them, in one byte.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Debug)]
pub enum NodeHint {
    /// The endpoint has no node hints.
    #[default]
    Unhinted,
    /// The endpoint is hinted for this node (among others, perhaps).
    ThisNode,
    /// The endpoint is hinted only for other nodes.
    OtherNodes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_costs_an_endpoint_one_word() {
        assert_eq!(std::mem::size_of::<NodeHints>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn hints_are_a_sorted_set_read_per_node() {
        let h = NodeHints::new(["node-b", "node-a", "node-b", ""]);
        let names: Vec<&str> = h.as_slice().iter().map(NodeName::as_str).collect();
        assert_eq!(names, ["node-a", "node-b"]);
        assert_eq!(h, NodeHints::new(["node-a", "node-b"]));
        assert_eq!(h.for_node("node-a"), NodeHint::ThisNode);
        assert_eq!(h.for_node("node-c"), NodeHint::OtherNodes);
        assert_eq!(h.for_node(""), NodeHint::OtherNodes);
        assert_eq!(NodeHints::new([""]).for_node("node-a"), NodeHint::Unhinted);
        assert!(NodeHints::default().is_empty());
    }
}
