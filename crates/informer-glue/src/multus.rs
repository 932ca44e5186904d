//! Multus mode: services on secondary networks, as multus-proxy serves
//! them.
//!
//! A Service belongs to a secondary network when it is labelled
//! `service.kubernetes.io/service-proxy-name=<name>` and annotated
//! `k8s.v1.cni.cncf.io/service-network` with a network-attachment name; its
//! EndpointSlices come from the multus EndpointSlice controller (the default
//! controller copies the service's labels onto slices holding the pods'
//! primary addresses, which must not be used). A Pod takes part through its
//! `k8s.v1.cni.cncf.io/network-status` annotation, which lists the
//! interfaces and addresses CNI gave it on each network.

use slice_model::internal::lock;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, Service};
use serde::Deserialize;
use slice_model::{PodName, ServiceName};
use tokio::sync::Notify;

use crate::fold::EventHandler;

/// The annotation naming a service's network.
pub const SERVICE_NETWORK_ANNOTATION: &str = "k8s.v1.cni.cncf.io/service-network";

/// The annotation in which multus reports a pod's attachments.
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// The label naming the controller that manages an EndpointSlice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// The multus EndpointSlice controller's name in [`MANAGED_BY_LABEL`].
pub const MULTUS_SLICE_CONTROLLER: &str = "multus-endpointslice-controller.npwg.k8s.io";

/// A network attachment definition: `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetworkName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Why a network name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetworkNameError {
    /// Nothing but spaces.
    #[error("the network name is empty")]
    Empty,
    /// More than one `/`, or an empty side of it.
    #[error("{0:?} is not a network name (NAME or NAMESPACE/NAME)")]
    Malformed(String),
}

impl NetworkName {
    /// Parses `name` (in `default_namespace`) or `namespace/name`; spaces
    /// are stripped, as multus does.
    pub fn parse(text: &str, default_namespace: &str) -> Result<Self, NetworkNameError> {
        let cleaned: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if cleaned.is_empty() {
            return Err(NetworkNameError::Empty);
        }
        let (namespace, name) = match cleaned.split_once('/') {
            None => (default_namespace.to_owned(), cleaned.clone()),
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                (ns.to_owned(), name.to_owned())
            }
            Some(_) => return Err(NetworkNameError::Malformed(text.to_owned())),
        };
        Ok(Self { namespace, name })
    }
}

impl fmt::Display for NetworkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One interface a pod has on a network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// The network.
    pub network: NetworkName,
    /// The interface inside the pod (`net1`).
    pub interface: String,
    /// Its addresses.
    pub ips: Vec<IpAddr>,
}

/// A pod as multus mode sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`: tells this pod from an earlier one of the same name
    /// (the kubelet labels each sandbox with it). `None` in manifests that
    /// leave it out.
    pub uid: Option<String>,
    /// The node it is scheduled on.
    pub node: Option<String>,
    /// `status.phase` is `Running`.
    pub running: bool,
    /// It uses the node's network namespace.
    pub host_network: bool,
    /// Its secondary-network interfaces (the cluster's default network is
    /// not listed).
    pub attachments: Vec<Attachment>,
}

impl PodInfo {
    /// Its name, the key multus mode knows it by.
    pub fn key(&self) -> PodName {
        PodName::new(self.namespace.as_str(), self.name.as_str())
    }

    /// The pod's interface on `network`, if it has one.
    pub fn attachment(&self, network: &NetworkName) -> Option<&Attachment> {
        self.attachments.iter().find(|a| a.network == *network)
    }
}

/// One entry of the network-status annotation (multus's format).
#[derive(Deserialize)]
struct StatusEntry {
    name: Option<String>,
    interface: Option<String>,
    #[serde(default)]
    ips: Vec<String>,
    #[serde(default)]
    default: bool,
}

/// Reads a pod's network-status annotation: its secondary-network
/// attachments, and a warning for each entry or address that could not be
/// used. A bare network name means the pod's namespace.
pub fn parse_network_status(json: &str, pod_namespace: &str) -> Result<(Vec<Attachment>, Vec<String>), String> {
    let entries: Vec<StatusEntry> =
        serde_json::from_str(json).map_err(|e| format!("{NETWORK_STATUS_ANNOTATION} is not valid: {e}"))?;
    let mut attachments = Vec::new();
    let mut warnings = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if e.default {
            continue;
        }
        let network = match e.name.as_deref().map(|n| NetworkName::parse(n, pod_namespace)) {
            Some(Ok(n)) => n,
            Some(Err(err)) => {
                warnings.push(format!("{NETWORK_STATUS_ANNOTATION}[{i}].name: {err}"));
                continue;
            }
            None => {
                warnings.push(format!("{NETWORK_STATUS_ANNOTATION}[{i}] has no name"));
                continue;
            }
        };
        let Some(interface) = e.interface.filter(|s| !s.is_empty()) else {
            warnings.push(format!("{NETWORK_STATUS_ANNOTATION}[{i}] ({network}) has no interface"));
            continue;
        };
        let mut ips = Vec::new();
        for (j, ip) in e.ips.iter().enumerate() {
            match ip.parse::<IpAddr>() {
                Ok(a) => ips.push(a),
                Err(_) => warnings.push(format!(
                    "{NETWORK_STATUS_ANNOTATION}[{i}].ips[{j}] {ip:?} is not an IP address"
                )),
            }
        }
        attachments.push(Attachment {
            network,
            interface,
            ips,
        });
    }
    Ok((attachments, warnings))
}

/// Converts a Pod; the warnings name the pod and the field.
pub fn pod_from_k8s(pod: &Pod) -> (PodInfo, Vec<String>) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut info = PodInfo {
        namespace,
        name,
        uid: pod.metadata.uid.clone().filter(|u| !u.is_empty()),
        node: spec.and_then(|s| s.node_name.clone()),
        running: pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"),
        host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        attachments: Vec::new(),
    };
    let mut warnings = Vec::new();
    let status = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NETWORK_STATUS_ANNOTATION));
    if let Some(json) = status {
        match parse_network_status(json, &info.namespace) {
            Ok((attachments, w)) => {
                info.attachments = attachments;
                warnings.extend(w.into_iter().map(|w| format!("pod {}: {w}", info.key())));
            }
            Err(e) => warnings.push(format!("pod {}: {e}", info.key())),
        }
    }
    (info, warnings)
}

/// The network a service is on: `Ok(None)` when it has no
/// [`SERVICE_NETWORK_ANNOTATION`].
pub fn service_network(svc: &Service) -> Result<Option<NetworkName>, NetworkNameError> {
    let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
    svc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SERVICE_NETWORK_ANNOTATION))
        .map(|text| NetworkName::parse(text, ns))
        .transpose()
}

/// Which network each selected service is on.
#[derive(Debug, Default)]
pub struct ServiceNetworks {
    /// Service -> network.
    pub by_service: BTreeMap<ServiceName, NetworkName>,
    /// Service -> what it asks for that multus mode does not serve (said
    /// once, when it changes).
    pub ignored: BTreeMap<ServiceName, Vec<&'static str>>,
}

/// Records each service's network, then hands the service on to `inner`
/// (the handler that feeds the engine).
pub struct NetworkRecorder<H> {
    /// The handler that feeds the engine.
    pub inner: H,
    /// The shared record.
    pub networks: Arc<Mutex<ServiceNetworks>>,
}

/// What a Service on a secondary network asks for that multus mode does
/// not serve: inside a pod, a Service is reached at its cluster IP only.
pub fn not_served(svc: &Service) -> Vec<&'static str> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer")) {
        out.push("its node ports and load-balancer addresses (type NodePort or LoadBalancer)");
    }
    if spec.external_ips.as_ref().is_some_and(|e| !e.is_empty()) {
        out.push("its externalIPs");
    }
    if spec.external_traffic_policy.as_deref() == Some("Local") {
        out.push("externalTrafficPolicy: Local (no external traffic)");
    }
    if spec.traffic_distribution.is_some() {
        out.push("trafficDistribution (the secondary network's slices carry no hints)");
    }
    out
}

impl<H> NetworkRecorder<H> {
    fn record(&self, svc: &Service) {
        let (Some(ns), Some(name)) = (svc.metadata.namespace.as_deref(), svc.metadata.name.as_deref()) else {
            return;
        };
        let key = ServiceName::new(ns, name);
        let mut n = lock(&self.networks);
        match service_network(svc) {
            Ok(Some(net)) => {
                let ignored = not_served(svc);
                let before = n.ignored.insert(key.clone(), ignored.clone());
                if !ignored.is_empty() && before.as_ref() != Some(&ignored) {
                    tracing::warn!(
                        "service {key} on {net}: multus mode serves it at its cluster IP inside the pods only; \
                         left out: {}",
                        ignored.join("; ")
                    );
                }
                n.by_service.insert(key, net);
            }
            _ => {
                n.by_service.remove(&key);
            }
        }
    }
}

impl<H: EventHandler<Service>> EventHandler<Service> for NetworkRecorder<H> {
    fn on_add(&mut self, obj: &Service) {
        self.record(obj);
        self.inner.on_add(obj);
    }

    fn on_update(&mut self, old: &Service, new: &Service) {
        self.record(new);
        self.inner.on_update(old, new);
    }

    fn on_delete(&mut self, obj: &Service) {
        if let (Some(ns), Some(name)) = (obj.metadata.namespace.as_deref(), obj.metadata.name.as_deref()) {
            let mut n = lock(&self.networks);
            n.by_service.remove(&ServiceName::new(ns, name));
            n.ignored.remove(&ServiceName::new(ns, name));
        }
        self.inner.on_delete(obj);
    }

    fn on_synced(&mut self) {
        self.inner.on_synced();
    }
}

/// The pods on this node.
#[derive(Debug, Default)]
pub struct PodStore {
    /// `namespace/name` -> pod.
    pub pods: BTreeMap<PodName, PodInfo>,
}

impl PodStore {
    /// Puts a pod in (or takes it out, for `None`); returns whether that
    /// changed anything.
    pub fn set(&mut self, key: PodName, pod: Option<PodInfo>) -> bool {
        match pod {
            Some(p) => self.pods.insert(key, p.clone()).as_ref() != Some(&p),
            None => self.pods.remove(&key).is_some(),
        }
    }
}

/// Keeps the [`PodStore`] of one node: pods scheduled elsewhere are
/// ignored (the watch asks for this node's pods only; manifests may hold
/// any).
pub struct PodHandler {
    /// The store.
    pub store: Arc<Mutex<PodStore>>,
    /// This node.
    pub node: String,
    /// Notified after every change, and once synced.
    changed: Arc<Notify>,
    /// Set once the first complete list has been handed over.
    pub synced: Arc<AtomicBool>,
}

impl PodHandler {
    /// A handler for `node`'s pods that wakes `changed` on every change.
    pub fn new(node: &str, changed: Arc<Notify>) -> Self {
        Self {
            store: Arc::default(),
            node: node.to_owned(),
            changed,
            synced: Arc::new(AtomicBool::new(false)),
        }
    }

    fn upsert(&mut self, pod: &Pod) {
        let (info, warnings) = pod_from_k8s(pod);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let key = info.key();
        let here = info.node.as_deref() == Some(self.node.as_str());
        if lock(&self.store).set(key, here.then_some(info)) {
            self.changed.notify_one();
        }
    }
}

impl EventHandler<Pod> for PodHandler {
    fn on_add(&mut self, obj: &Pod) {
        self.upsert(obj);
    }

    fn on_update(&mut self, _old: &Pod, new: &Pod) {
        self.upsert(new);
    }

    fn on_delete(&mut self, obj: &Pod) {
        let ns = obj.metadata.namespace.as_deref().unwrap_or("default");
        let key = PodName::new(ns, obj.metadata.name.as_deref().unwrap_or_default());
        if lock(&self.store).set(key, None) {
            self.changed.notify_one();
        }
    }

    fn on_synced(&mut self) {
        self.synced.store(true, Ordering::Release);
        self.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn what_multus_mode_does_not_serve_is_named() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"type": "LoadBalancer", "externalIPs": ["203.0.113.9"], "externalTrafficPolicy": "Local",
                     "trafficDistribution": "PreferClose", "sessionAffinity": "ClientIP", "internalTrafficPolicy": "Local"},
        }))
        .unwrap();
        let said = not_served(&svc);
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(said[0].contains("NodePort or LoadBalancer") && said[1].contains("externalIPs"));
        let plain: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP", "internalTrafficPolicy": "Local"},
        }))
        .unwrap();
        assert!(not_served(&plain).is_empty(), "affinity and internal policy are served");
    }

    #[test]
    fn network_names() {
        let n = |t: &str| NetworkName::parse(t, "svc-ns").map(|n| n.to_string());
        assert_eq!(n("net").unwrap(), "svc-ns/net");
        assert_eq!(n(" other / net ").unwrap(), "other/net");
        assert_eq!(n("   "), Err(NetworkNameError::Empty));
        assert!(matches!(n("a/b/c"), Err(NetworkNameError::Malformed(_))));
        assert!(matches!(n("/net"), Err(NetworkNameError::Malformed(_))));
        assert!(matches!(n("ns/"), Err(NetworkNameError::Malformed(_))));
    }

    #[test]
    fn network_status_lists_secondary_attachments() {
        let json = r#"[
            {"name": "cbr0", "interface": "eth0", "ips": ["10.244.1.5"], "default": true},
            {"name": "macvlan1", "interface": "net1", "ips": ["192.168.10.5", "fd00:10::5"]},
            {"name": "other/sriov", "interface": "net2", "ips": ["192.168.20.5", "300.1.1.1"]},
            {"name": "noif", "ips": ["192.168.30.5"]}
        ]"#;
        let (a, warnings) = parse_network_status(json, "pods").unwrap();
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(
            a[0].network.to_string(),
            "pods/macvlan1",
            "a bare name is the pod's namespace"
        );
        assert_eq!(a[0].interface, "net1");
        assert_eq!(
            a[0].ips,
            ["192.168.10.5".parse::<IpAddr>().unwrap(), "fd00:10::5".parse().unwrap()]
        );
        assert_eq!(a[1].network.to_string(), "other/sriov");
        assert_eq!(a[1].ips.len(), 1);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("[2].ips[1] \"300.1.1.1\""), "{warnings:?}");
        assert!(warnings[1].contains("[3] (pods/noif) has no interface"), "{warnings:?}");
        assert!(parse_network_status("{not json", "pods").is_err());
        assert!(
            parse_network_status(r#"{"name": "x"}"#, "pods").is_err(),
            "an object, not a list"
        );
    }

    fn pod(annotation: Option<&str>, phase: &str, host_network: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some("pods".into());
        p.metadata.name = Some("client".into());
        if let Some(a) = annotation {
            p.metadata.annotations = Some(BTreeMap::from([(NETWORK_STATUS_ANNOTATION.to_owned(), a.to_owned())]));
        }
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("node-1".into()),
            host_network: Some(host_network),
            ..Default::default()
        });
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pods_convert_with_warnings_that_name_them() {
        let (info, w) = pod_from_k8s(&pod(
            Some(r#"[{"name":"net","interface":"net1","ips":["192.168.10.5"]}]"#),
            "Running",
            false,
        ));
        assert!(w.is_empty());
        assert!(info.running && !info.host_network);
        assert_eq!(info.node.as_deref(), Some("node-1"));
        let net = NetworkName::parse("net", "pods").unwrap();
        assert_eq!(info.attachment(&net).map(|a| a.interface.as_str()), Some("net1"));

        let (info, w) = pod_from_k8s(&pod(Some("[{"), "Pending", true));
        assert!(!info.running && info.host_network && info.attachments.is_empty());
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("pod pods/client: k8s.v1.cni.cncf.io/network-status is not valid"),
            "{w:?}"
        );

        let (info, w) = pod_from_k8s(&pod(None, "Running", false));
        assert!(
            info.attachments.is_empty() && w.is_empty(),
            "no annotation yet: not attached"
        );
    }

    #[test]
    fn service_networks() {
        let mut s = Service::default();
        s.metadata.namespace = Some("apps".into());
        assert_eq!(service_network(&s), Ok(None));
        s.metadata.annotations = Some(BTreeMap::from([(
            SERVICE_NETWORK_ANNOTATION.to_owned(),
            "net".to_owned(),
        )]));
        assert_eq!(service_network(&s).unwrap().unwrap().to_string(), "apps/net");
    }

    proptest! {
        /// Any text: an error or attachments, never a panic.
        #[test]
        fn network_status_never_panics(s in "\\PC*") {
            let _ = parse_network_status(&s, "ns");
        }

        /// Any JSON-shaped list of entries: every attachment has a name and
        /// an interface, and only addresses that parse.
        #[test]
        fn network_status_entries(entries in proptest::collection::vec(
            (proptest::option::of("[a-z/ ]{0,8}"), proptest::option::of("[a-z0-9]{0,4}"),
             proptest::collection::vec("[0-9.:a-f]{0,12}", 0..3), any::<bool>()), 0..6)) {
            let json = serde_json::to_string(&entries.iter().map(|(n, i, ips, d)| serde_json::json!({
                "name": n, "interface": i, "ips": ips, "default": d
            })).collect::<Vec<_>>()).unwrap();
            let (attachments, _) = parse_network_status(&json, "ns").unwrap();
            prop_assert!(attachments.len() <= entries.iter().filter(|e| !e.3).count());
            for a in attachments {
                prop_assert!(!a.interface.is_empty());
                prop_assert!(!a.network.name.is_empty() && !a.network.namespace.is_empty());
            }
        }
    }

    #[test]
    fn the_pod_handler_keeps_this_nodes_pods_and_wakes_on_changes() {
        let changed = Arc::new(Notify::new());
        let woken = || futures::FutureExt::now_or_never(changed.notified()).is_some();
        let mut h = PodHandler::new("node-1", changed.clone());
        let mut p = pod(
            Some(r#"[{"name":"net","interface":"net1","ips":["192.168.10.5"]}]"#),
            "Running",
            false,
        );
        p.metadata.uid = Some("u-1".into());
        h.on_add(&p);
        assert!(woken());
        let client = PodName::new("pods", "client");
        assert_eq!(lock(&h.store).pods.keys().collect::<Vec<_>>(), [&client]);
        assert_eq!(lock(&h.store).pods[&client].uid.as_deref(), Some("u-1"));
        h.on_update(&p, &p);
        assert!(!woken(), "no change, nothing to do");
        let mut moved = p.clone();
        moved.spec.as_mut().unwrap().node_name = Some("node-2".into());
        h.on_update(&p, &moved);
        assert!(lock(&h.store).pods.is_empty(), "scheduled elsewhere: not ours");
        assert!(woken());
        h.on_add(&p);
        h.on_delete(&p);
        assert!(lock(&h.store).pods.is_empty());
    }
}
