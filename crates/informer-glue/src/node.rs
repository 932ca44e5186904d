//! This node's Node object: its topology zone, and whether load balancers
//! should still send it traffic.
//!
//! Topology hints are read against the zone of the node the proxy runs on,
//! and a node can be relabelled while the proxy runs; kube-proxy then
//! re-syncs every service. A node being deleted, or tainted
//! `ToBeDeletedByClusterAutoscaler`, is no longer eligible for load
//! balancer traffic (KEP-3836): `/healthz` then answers 503. [`ThisNode`]
//! holds what the source last reported and wakes the sync loop when the
//! zone changes; [`ThisNodeHandler`] feeds it from a watch on the one Node
//! (`metadata.name=NODE`), and the manifest source feeds it from each read
//! of the files.

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

/// A Node's pod ranges (`spec.podCIDRs`, else `spec.podCIDR`); ranges
/// that are not CIDRs are left out with a warning naming the node.
pub fn pod_cidrs_of(node: &Node) -> Vec<ipnet::IpNet> {
    let spec = node.spec.as_ref();
    let listed = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    let texts = if listed.is_empty() {
        spec.and_then(|s| s.pod_cidr.clone()).into_iter().collect()
    } else {
        listed
    };
    let name = node.metadata.name.as_deref().unwrap_or_default();
    texts
        .iter()
        .filter_map(|t| match t.trim().parse::<ipnet::IpNet>() {
            Ok(n) => Some(n.trunc()),
            Err(e) => {
                tracing::warn!("Node {name}: spec.podCIDRs {t:?} is not a CIDR ({e}); left out");
                None
            }
        })
        .collect()
}

/// A Node's primary addresses, as kube-proxy picks them: the first
/// InternalIP of each family, else its first ExternalIP.
pub fn primary_ips_of(node: &Node) -> Vec<std::net::IpAddr> {
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
    let of_type = |kind: &str| -> Vec<std::net::IpAddr> {
        addresses
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == kind)
            .filter_map(|a| a.address.trim().parse().ok())
            .collect()
    };
    let (internal, external) = (of_type("InternalIP"), of_type("ExternalIP"));
    let mut out = Vec::new();
    for v4 in [true, false] {
        if let Some(ip) = internal.iter().chain(external.iter()).find(|ip| ip.is_ipv4() == v4) {
            out.push(*ip);
        }
    }
    out
}

/// The taint the cluster autoscaler puts on a node it is about to remove.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Whether load balancers should still send this node traffic: not being
/// deleted, and not tainted [`TO_BE_DELETED_TAINT`] (kube-proxy's rule).
pub fn eligible(node: &Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT));
    node.metadata.deletion_timestamp.is_none() && !tainted
}

/// Whether node `name` among `nodes` is eligible; one that is not there is
/// (nothing says otherwise, as while kube-proxy starts).
pub fn eligible_named(nodes: &[Node], name: &str) -> bool {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
        .is_none_or(eligible)
}

/// What the cluster says about the node the proxy runs on: its Node's
/// zone, eligibility, pod ranges and primary addresses, and the cluster's
/// ServiceCIDRs. Flags given by the operator win over each
/// (`proxyd`'s `effective`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// The zone label ([`ZONE_LABEL`]).
    pub zone: Option<String>,
    /// Eligible for load balancer traffic ([`eligible`]); true while
    /// nothing says otherwise, as kube-proxy.
    pub eligible: bool,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<ipnet::IpNet>,
    /// The primary addresses in `status.addresses`.
    pub primary_ips: Vec<std::net::IpAddr>,
    /// The union of the ServiceCIDR objects' ranges.
    pub service_cidrs: Vec<ipnet::IpNet>,
}

impl Default for NodeFacts {
    fn default() -> Self {
        Self {
            zone: None,
            eligible: true,
            pod_cidrs: Vec::new(),
            primary_ips: Vec::new(),
            service_cidrs: Vec::new(),
        }
    }
}

impl NodeFacts {
    /// What a Node object says (none: nothing known, and eligible), with
    /// no ServiceCIDRs.
    pub fn of(node: Option<&Node>) -> Self {
        Self {
            zone: node.and_then(zone_of),
            eligible: node.is_none_or(eligible),
            pod_cidrs: node.map(pod_cidrs_of).unwrap_or_default(),
            primary_ips: node.map(primary_ips_of).unwrap_or_default(),
            service_cidrs: Vec::new(),
        }
    }
}

/// The node the proxy runs on, as its sources last reported it: one
/// [`NodeFacts`] value the Node watch and the ServiceCIDR watch both write.
#[derive(Debug, Clone)]
pub struct ThisNode {
    node: String,
    facts: Arc<watch::Sender<NodeFacts>>,
    pub(crate) changed: Arc<Notify>,
}

impl ThisNode {
    /// Nothing known yet of `node`; a change the sync loop acts on wakes
    /// `changed`.
    pub fn new(node: &str, changed: Arc<Notify>) -> Self {
        Self {
            node: node.to_owned(),
            facts: Arc::new(watch::Sender::new(NodeFacts::default())),
            changed,
        }
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// A receiver that sees each new value (`has_changed`, `borrow`).
    pub fn facts(&self) -> watch::Receiver<NodeFacts> {
        self.facts.subscribe()
    }

    /// The facts now.
    pub fn get(&self) -> NodeFacts {
        self.facts.borrow().clone()
    }

    /// Records what a Node object says (its ServiceCIDRs kept); says what
    /// changed, and wakes the sync loop when the rules depend on it.
    pub fn set_from(&self, node: Option<&Node>) {
        self.update(|facts| {
            let service_cidrs = std::mem::take(&mut facts.service_cidrs);
            *facts = NodeFacts {
                service_cidrs,
                ..NodeFacts::of(node)
            };
        });
    }

    /// Records that the Node object is gone: nothing known of it, and not
    /// eligible.
    fn set_deleted(&self) {
        self.update(|facts| {
            let service_cidrs = std::mem::take(&mut facts.service_cidrs);
            *facts = NodeFacts {
                eligible: false,
                service_cidrs,
                ..NodeFacts::default()
            };
        });
    }

    /// Records the ServiceCIDRs' union.
    pub fn set_service_cidrs(&self, cidrs: Vec<ipnet::IpNet>) {
        self.update(|facts| facts.service_cidrs = cidrs);
    }

    /// Changes the facts in place, under the watch's lock (the Node and
    /// ServiceCIDR watches write from their own tasks); then says what
    /// changed.
    fn update(&self, change: impl FnOnce(&mut NodeFacts)) {
        let mut changed = None;
        self.facts.send_if_modified(|facts| {
            let old = facts.clone();
            change(facts);
            let differs = *facts != old;
            if differs {
                changed = Some((old, facts.clone()));
            }
            differs
        });
        if let Some((old, new)) = changed {
            self.say(&old, &new);
        }
    }

    /// Logs what changed from `old` to `new`; wakes the sync loop when the
    /// rules depend on it.
    fn say(&self, old: &NodeFacts, new: &NodeFacts) {
        let node = &self.node;
        let list = |items: &[String]| items.join(",");
        if old.zone != new.zone {
            tracing::info!(node, zone = new.zone.as_deref().unwrap_or("(none)"), "node zone");
        }
        if old.eligible != new.eligible {
            if new.eligible {
                tracing::info!(
                    node,
                    "this node is eligible for load balancer traffic again: /healthz follows the proxy's health"
                );
            } else {
                tracing::warn!(
                    node,
                    "this node is being deleted or is tainted {TO_BE_DELETED_TAINT}: /healthz answers 503 so that load balancers stop sending it traffic"
                );
            }
        }
        if old.pod_cidrs != new.pod_cidrs {
            let text: Vec<String> = new.pod_cidrs.iter().map(ToString::to_string).collect();
            tracing::info!(node, pod_cidrs = %list(&text), "node pod ranges");
        }
        if old.primary_ips != new.primary_ips {
            let text: Vec<String> = new.primary_ips.iter().map(ToString::to_string).collect();
            tracing::info!(node, addresses = %list(&text), "node primary addresses");
        }
        if old.service_cidrs != new.service_cidrs {
            let text: Vec<String> = new.service_cidrs.iter().map(ToString::to_string).collect();
            tracing::info!(cidrs = %list(&text), "service CIDRs");
        }
        // Eligibility is read by /healthz, not by the rules.
        let rules_change = NodeFacts {
            eligible: old.eligible,
            ..new.clone()
        } != *old;
        if rules_change {
            self.changed.notify_one();
        }
    }
}

/// Folds watch events of this node's Node object into a [`ThisNode`].
pub struct ThisNodeHandler {
    zone: ThisNode,
    seen: bool,
    /// Set once the first list is handed over.
    pub synced: Arc<AtomicBool>,
}

impl ThisNodeHandler {
    /// A handler feeding `zone`.
    pub fn new(zone: ThisNode) -> Self {
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
            self.zone.set_from(Some(node));
        }
    }
}

impl EventHandler<Node> for ThisNodeHandler {
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
            self.zone.set_deleted();
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
        let zone = ThisNode::new("node-1", changed.clone());
        let mut rx = zone.facts();
        let mut h = ThisNodeHandler::new(zone.clone());
        h.on_add(&node("node-2", Some("zone-x")));
        assert_eq!(zone.get().zone, None, "another node's label is not ours");
        h.on_add(&node("node-1", Some("zone-a")));
        assert_eq!(zone.get().zone.as_deref(), Some("zone-a"));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        h.on_update(&node("node-1", Some("zone-a")), &node("node-1", Some("zone-a")));
        assert!(!rx.has_changed().unwrap(), "same zone: no change");
        h.on_update(&node("node-1", Some("zone-a")), &node("node-1", Some("zone-b")));
        assert_eq!(rx.borrow_and_update().zone.as_deref(), Some("zone-b"));
        h.on_update(&node("node-1", Some("zone-b")), &node("node-1", Some("")));
        assert_eq!(zone.get().zone, None, "an empty label is no zone");
        h.on_update(&node("node-1", None), &node("node-1", Some("zone-c")));
        h.on_delete(&node("node-1", Some("zone-c")));
        assert_eq!(zone.get().zone, None);
        let _ = changed.notified().now_or_never();
        h.on_synced();
        assert!(h.synced.load(Ordering::Acquire));
        assert!(changed.notified().now_or_never().is_some(), "listed: the run is woken");
    }

    #[test]
    fn a_node_being_removed_is_not_eligible() {
        use k8s_openapi::api::core::v1::{NodeSpec, Taint};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let changed = Arc::new(Notify::new());
        let this = ThisNode::new("node-1", changed.clone());
        let facts = this.facts();
        let eligible = || facts.borrow().eligible;
        let mut h = ThisNodeHandler::new(this.clone());
        let plain = node("node-1", Some("zone-a"));
        h.on_add(&plain);
        assert!(eligible());
        let mut tainted = plain.clone();
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: TO_BE_DELETED_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        });
        let _ = changed.notified().now_or_never();
        h.on_update(&plain, &tainted);
        assert!(!eligible(), "tainted by the autoscaler");
        assert!(
            changed.notified().now_or_never().is_none(),
            "no sync needed: the zone is the same"
        );
        h.on_update(&tainted, &plain);
        assert!(eligible(), "the taint is gone");
        let mut other_taint = tainted.clone();
        other_taint.spec.as_mut().unwrap().taints.as_mut().unwrap()[0].key = "node.kubernetes.io/unschedulable".into();
        h.on_update(&plain, &other_taint);
        assert!(eligible(), "a cordoned node still serves");
        let mut deleting = plain.clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        h.on_update(&plain, &deleting);
        assert!(!eligible(), "being deleted");
        h.on_update(&deleting, &plain);
        h.on_delete(&plain);
        assert!(!eligible(), "the Node object is gone");
        assert!(eligible_named(&[], "node-1"), "no Node known: eligible");
    }

    #[test]
    fn primary_addresses_are_the_first_internal_ip_of_each_family() {
        use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
        let mut n = node("node-1", None);
        let addr = |t: &str, a: &str| NodeAddress {
            type_: t.into(),
            address: a.into(),
        };
        n.status = Some(NodeStatus {
            addresses: Some(vec![
                addr("Hostname", "node-1"),
                addr("ExternalIP", "203.0.113.7"),
                addr("InternalIP", "10.0.1.1"),
                addr("InternalIP", "10.0.1.2"),
                addr("ExternalIP", "2001:db8::7"),
            ]),
            ..NodeStatus::default()
        });
        let ips: Vec<String> = primary_ips_of(&n).iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["10.0.1.1", "2001:db8::7"], "InternalIP first, else ExternalIP");
        assert!(primary_ips_of(&node("node-1", None)).is_empty());
    }

    #[test]
    fn the_nodes_pod_ranges_are_followed() {
        use k8s_openapi::api::core::v1::NodeSpec;
        let changed = Arc::new(Notify::new());
        let this = ThisNode::new("node-1", changed.clone());
        let facts = this.facts();
        let rx = || facts.borrow().pod_cidrs.clone();
        let mut h = ThisNodeHandler::new(this);
        let mut n = node("node-1", None);
        n.spec = Some(NodeSpec {
            pod_cidr: Some("10.244.1.0/24".into()),
            ..NodeSpec::default()
        });
        h.on_add(&n);
        assert_eq!(
            rx().iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.244.1.0/24"]
        );
        let mut dual = n.clone();
        dual.spec.as_mut().unwrap().pod_cidrs =
            Some(vec!["10.244.2.0/24".into(), "fd00:10:244:2::/64".into(), "x".into()]);
        let _ = changed.notified().now_or_never();
        h.on_update(&n, &dual);
        assert_eq!(
            rx().iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.244.2.0/24", "fd00:10:244:2::/64"],
            "podCIDRs win; a bad one is left out"
        );
        assert!(changed.notified().now_or_never().is_some(), "a change wakes a sync");
    }

    /// The Node watch and the ServiceCIDR watch write the one value from
    /// their own tasks: neither loses what the other wrote.
    #[test]
    fn two_sources_writing_at_once_lose_nothing() {
        let this = ThisNode::new("node-1", Arc::new(Notify::new()));
        let last = 2_000;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..=last {
                    this.set_from(Some(&node("node-1", Some(&format!("zone-{i}")))));
                }
            });
            s.spawn(|| {
                for i in 0..=last {
                    this.set_service_cidrs(vec![format!("10.{}.{}.0/24", i / 256, i % 256).parse().unwrap()]);
                }
            });
        });
        let facts = this.get();
        assert_eq!(facts.zone.as_deref(), Some(format!("zone-{last}").as_str()));
        assert_eq!(
            facts.service_cidrs,
            vec!["10.7.208.0/24".parse::<ipnet::IpNet>().unwrap()]
        );
    }
}
