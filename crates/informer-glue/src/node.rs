//! This node's Node object, for its topology zone.
//!
//! Topology hints are read against the zone of the node the proxy runs on,
//! and a node can be relabelled while the proxy runs; kube-proxy then
//! re-syncs every service. [`NodeZone`] holds the zone the source last
//! reported and wakes the sync loop when it changes; [`NodeZoneHandler`]
//! feeds it from a watch on the one Node (`metadata.name=NODE`), and the
//! manifest source feeds it from each read of the files.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Node;
use tokio::sync::{Notify, watch};

use crate::fold::EventHandler;

/// The label that holds a node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The zone a Node object's labels give (an empty label is no zone).
pub fn zone_of(node: &Node) -> Option<String> {
    node.metadata
        .labels
        .as_ref()?
        .get(ZONE_LABEL)
        .filter(|z| !z.is_empty())
        .cloned()
}

/// The zone of node `name` among `nodes`, if it is there and has one.
pub fn zone_of_named(nodes: &[Node], name: &str) -> Option<String> {
    zone_of(nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name))?)
}

/// The zone of the node the proxy runs on, as its source last reported it.
#[derive(Debug, Clone)]
pub struct NodeZone {
    node: String,
    zone: watch::Sender<Option<String>>,
    changed: Arc<Notify>,
}

impl NodeZone {
    /// No zone known yet for `node`; a change wakes `changed`.
    pub fn new(node: &str, changed: Arc<Notify>) -> Self {
        Self {
            node: node.to_owned(),
            zone: watch::Sender::new(None),
            changed,
        }
    }

    /// The node whose zone this is.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The zone now.
    pub fn get(&self) -> Option<String> {
        self.zone.borrow().clone()
    }

    /// A receiver that sees each new zone (`has_changed`, `borrow`).
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.zone.subscribe()
    }

    /// Records the zone the source reports; says so and wakes the sync
    /// loop when it differs from the one before.
    pub fn set(&self, zone: Option<String>) -> bool {
        let changed = self.zone.send_if_modified(|now| {
            let differs = *now != zone;
            if differs {
                now.clone_from(&zone);
            }
            differs
        });
        if changed {
            tracing::info!(node = %self.node, zone = zone.as_deref().unwrap_or("(none)"), "node zone");
            self.changed.notify_one();
        }
        changed
    }
}

/// Folds watch events of this node's Node object into a [`NodeZone`].
pub struct NodeZoneHandler {
    zone: NodeZone,
    seen: bool,
    /// Set once the first list is handed over.
    pub synced: Arc<AtomicBool>,
}

impl NodeZoneHandler {
    /// A handler feeding `zone`.
    pub fn new(zone: NodeZone) -> Self {
        Self {
            zone,
            seen: false,
            synced: Arc::default(),
        }
    }

    fn take(&mut self, node: &Node) {
        // The watch asks for one name; anything else is not this node.
        if node.metadata.name.as_deref() == Some(self.zone.node()) {
            self.seen = true;
            self.zone.set(zone_of(node));
        }
    }
}

impl EventHandler<Node> for NodeZoneHandler {
    fn on_add(&mut self, obj: &Node) {
        self.take(obj);
    }

    fn on_update(&mut self, _old: &Node, new: &Node) {
        self.take(new);
    }

    fn on_delete(&mut self, obj: &Node) {
        if obj.metadata.name.as_deref() == Some(self.zone.node()) {
            self.seen = false;
            tracing::warn!(node = %self.zone.node(), "this node's Node object was deleted: topology hints are not used");
            self.zone.set(None);
        }
    }

    fn on_synced(&mut self) {
        if !self.seen {
            tracing::warn!(
                node = %self.zone.node(),
                "no Node object of this name (yet): topology hints are not used until it appears with a {ZONE_LABEL} label"
            );
        }
        self.synced.store(true, Ordering::Release);
        // Like every handler: the run waits on this for its first sync.
        self.zone.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn node(name: &str, zone: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = zone.map(|z| [(ZONE_LABEL.to_owned(), z.to_owned())].into());
        n
    }

    #[test]
    fn the_handler_follows_this_nodes_zone_label() {
        let changed = Arc::new(Notify::new());
        let zone = NodeZone::new("node-1", changed.clone());
        let mut rx = zone.subscribe();
        let mut h = NodeZoneHandler::new(zone.clone());
        h.on_add(&node("node-2", Some("zone-x")));
        assert_eq!(zone.get(), None, "another node's label is not ours");
        h.on_add(&node("node-1", Some("zone-a")));
        assert_eq!(zone.get().as_deref(), Some("zone-a"));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        h.on_update(&node("node-1", Some("zone-a")), &node("node-1", Some("zone-a")));
        assert!(!rx.has_changed().unwrap(), "same zone: no change");
        h.on_update(&node("node-1", Some("zone-a")), &node("node-1", Some("zone-b")));
        assert_eq!(rx.borrow_and_update().as_deref(), Some("zone-b"));
        h.on_update(&node("node-1", Some("zone-b")), &node("node-1", Some("")));
        assert_eq!(zone.get(), None, "an empty label is no zone");
        h.on_update(&node("node-1", None), &node("node-1", Some("zone-c")));
        h.on_delete(&node("node-1", Some("zone-c")));
        assert_eq!(zone.get(), None);
        let _ = changed.notified().now_or_never();
        h.on_synced();
        assert!(h.synced.load(Ordering::Acquire));
        assert!(changed.notified().now_or_never().is_some(), "listed: the run is woken");
    }
}
