//! ServiceCIDR objects (`networking.k8s.io/v1`, GA in Kubernetes 1.33): the
//! ranges the cluster allocates cluster IPs from.
//!
//! kube-proxy's nftables mode drops traffic to an address of these ranges
//! that is no service's cluster IP (and rejects traffic to an unused port
//! of one that is). [`ServiceCidrHandler`] keeps the union of every
//! object's `spec.cidrs` in this node's facts
//! ([`crate::node::NodeFacts`]), from a watch; the manifest source sets
//! it from each read of the files.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::ServiceCIDR;

use crate::fold::EventHandler;
use crate::node::ThisNode;

/// The ranges of one ServiceCIDR, and a warning naming the object and the
/// field for each that is not a CIDR (it is left out).
pub fn cidrs_of(obj: &ServiceCIDR) -> (Vec<IpNet>, Vec<String>) {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let mut cidrs = Vec::new();
    let mut warnings = Vec::new();
    let given = obj.spec.as_ref().and_then(|s| s.cidrs.as_ref());
    for (i, text) in given.into_iter().flatten().enumerate() {
        match text.trim().parse::<IpNet>() {
            Ok(net) => cidrs.push(net.trunc()),
            Err(e) => warnings.push(format!(
                "ServiceCIDR {name}: spec.cidrs[{i}] {text:?} is not a CIDR ({e}); left out"
            )),
        }
    }
    (cidrs, warnings)
}

/// The union of the ranges of `objects`, sorted and without repeats.
pub fn union<'a>(objects: impl IntoIterator<Item = &'a [IpNet]>) -> Vec<IpNet> {
    let mut all: Vec<IpNet> = objects.into_iter().flatten().copied().collect();
    all.sort();
    all.dedup();
    all
}

/// Folds watch events of ServiceCIDR objects into this node's facts
/// ([`ThisNode::set_service_cidrs`]).
pub struct ServiceCidrHandler {
    target: ThisNode,
    by_name: BTreeMap<String, Vec<IpNet>>,
    /// Set once the first list is handed over.
    pub synced: Arc<AtomicBool>,
}

impl ServiceCidrHandler {
    /// A handler feeding `target`.
    pub fn new(target: ThisNode) -> Self {
        Self {
            target,
            by_name: BTreeMap::new(),
            synced: Arc::default(),
        }
    }

    fn publish(&self) {
        if self.synced.load(Ordering::Acquire) {
            self.target
                .set_service_cidrs(union(self.by_name.values().map(Vec::as_slice)));
        }
    }

    fn take(&mut self, obj: &ServiceCIDR) {
        let (cidrs, warnings) = cidrs_of(obj);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let name = obj.metadata.name.clone().unwrap_or_default();
        self.by_name.insert(name, cidrs);
        self.publish();
    }
}

impl EventHandler<ServiceCIDR> for ServiceCidrHandler {
    fn on_add(&mut self, obj: &ServiceCIDR) {
        self.take(obj);
    }

    fn on_update(&mut self, _old: &ServiceCIDR, new: &ServiceCIDR) {
        self.take(new);
    }

    fn on_delete(&mut self, obj: &ServiceCIDR) {
        self.by_name.remove(obj.metadata.name.as_deref().unwrap_or_default());
        self.publish();
    }

    fn on_synced(&mut self) {
        // The whole list at once, not one range at a time.
        self.synced.store(true, Ordering::Release);
        self.publish();
        self.target.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use k8s_openapi::api::networking::v1::ServiceCIDRSpec;
    use tokio::sync::Notify;

    use super::*;

    fn cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        let mut o = ServiceCIDR::default();
        o.metadata.name = Some(name.into());
        o.spec = Some(ServiceCIDRSpec {
            cidrs: Some(cidrs.iter().map(|c| (*c).to_owned()).collect()),
        });
        o
    }

    #[test]
    fn the_union_of_every_objects_ranges_is_followed() {
        let changed = Arc::new(Notify::new());
        let node = ThisNode::new("node-1", changed.clone());
        let facts = node.facts();
        let rx = || facts.borrow().service_cidrs.clone();
        let mut h = ServiceCidrHandler::new(node.clone());
        h.on_add(&cidr("kubernetes", &["10.96.0.0/16", "fd00:10:96::/112"]));
        assert!(rx().is_empty(), "nothing before the list is complete");
        h.on_synced();
        let want: Vec<IpNet> = vec!["10.96.0.0/16".parse().unwrap(), "fd00:10:96::/112".parse().unwrap()];
        assert_eq!(rx(), want);
        assert!(changed.notified().now_or_never().is_some());
        h.on_add(&cidr("extra", &["10.97.0.0/16", "10.96.0.0/16", "bad", "10.98.0.1/16"]));
        assert_eq!(
            rx().iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["10.96.0.0/16", "10.97.0.0/16", "10.98.0.0/16", "fd00:10:96::/112"],
            "merged, host bits cleared, the bad one left out"
        );
        h.on_delete(&cidr("extra", &[]));
        assert_eq!(rx(), want);
        let _ = changed.notified().now_or_never();
        h.on_update(
            &cidr("kubernetes", &[]),
            &cidr("kubernetes", &["10.96.0.0/16", "fd00:10:96::/112"]),
        );
        assert!(changed.notified().now_or_never().is_none(), "no change: no wake-up");
        let (_, warnings) = cidrs_of(&cidr("x", &["10.0.0.0/33"]));
        assert!(warnings[0].contains("ServiceCIDR x: spec.cidrs[0]"), "{warnings:?}");
    }
}
