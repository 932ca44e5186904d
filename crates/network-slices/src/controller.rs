//! The controller: keeps the EndpointSlices of every Service on a
//! secondary network, against the API server.
//!
//! ```text
//!  watch Services (labelled with the proxy's name) ─┐
//!  watch Pods ── the Services whose selector        ├─► queue of Services ─► sync one:
//!         picks them, before and after the change   │     wanted endpoints, its slices
//!  watch Nodes ── every Service, on a zone change   │     (from the cache) ─► Plan ─► writes
//!  watch the controller's slices ── their Service ──┘
//! ```
//!
//! One task per watch (kube-runtime's watcher and reflector) feeds one
//! queue; one loop syncs the queued Services one at a time. The slice cache
//! lags the controller's own writes: a Service whose slices the cache has
//! not yet seen as written is tried again shortly, not planned from the
//! old view (which would write twice), as upstream's slice tracker does.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use informer_glue::multus::service_network;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

use crate::dra::SERVICE_DEVICE_CLASS_ANNOTATION;
use crate::endpoint::{LeftOut, Lookups, Network};
use crate::metrics::{ControllerMetrics, OperationLabels, ReasonLabels, ResultLabels};
use crate::reconcile::{MANAGED_BY_LABEL, Plan, SERVICE_NAME_LABEL, SliceRules, reconcile};

/// The label naming the proxy a Service is for.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// How long a Service waits for the cache to see the controller's writes
/// before it is planned anyway (someone else may have changed them).
const STALE_PATIENCE: Duration = Duration::from_secs(5);

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// How slices are written.
    pub rules: SliceRules,
    /// The Services handled: those labelled
    /// `service.kubernetes.io/service-proxy-name` with this value
    /// (multus-proxy's is `multus-proxy`).
    pub proxy_name: String,
    /// Also serve DRA networks: watch `resource.k8s.io/v1` ResourceClaims
    /// (the cluster must serve them, and the controller read them).
    pub dra: bool,
}

/// A Service, by namespace and name.
type ServiceKey = (String, String);

fn key_of<K: kube::Resource>(o: &K) -> ServiceKey {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

/// When a change was first seen that a Service's slices do not reflect
/// yet: what their trigger-time annotation says (as upstream's, the
/// earliest change a write reflects).
type Trigger = k8s_openapi::jiff::Timestamp;

/// The Services waiting for a sync, each once, with their trigger time.
#[derive(Default)]
struct Queue {
    pending: Mutex<BTreeMap<ServiceKey, Trigger>>,
    wake: Notify,
}

impl Queue {
    /// Queues `keys` for a change seen now.
    fn push(&self, keys: impl IntoIterator<Item = ServiceKey>) {
        let now = Trigger::now();
        self.push_at(keys.into_iter().map(|k| (k, now)));
    }

    /// Queues each key for a change seen at its time (the earliest wins).
    fn push_at(&self, keys: impl IntoIterator<Item = (ServiceKey, Trigger)>) {
        let mut added = false;
        {
            let mut p = lock(&self.pending);
            for (k, at) in keys {
                let entry = p.entry(k).or_insert(at);
                added = true;
                *entry = (*entry).min(at);
            }
        }
        if added {
            self.wake.notify_one();
        }
    }

    async fn take(&self) -> BTreeMap<ServiceKey, Trigger> {
        loop {
            let batch = std::mem::take(&mut *lock(&self.pending));
            if !batch.is_empty() {
                return batch;
            }
            self.wake.notified().await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the controller wrote and has not yet seen in its cache: per
/// Service, each slice's name with the resourceVersion written (`None`:
/// deleted), and when.
#[derive(Default)]
struct Written(HashMap<ServiceKey, HashMap<String, (Option<String>, Instant)>>);

fn newer_or_same(seen: &str, written: &str) -> bool {
    match (seen.parse::<u64>(), written.parse::<u64>()) {
        (Ok(a), Ok(b)) => a >= b,
        _ => seen == written,
    }
}

impl Written {
    /// Whether the cache's `slices` of `key` show every write (forgetting
    /// those it shows, and those older than [`STALE_PATIENCE`]).
    fn seen(&mut self, key: &ServiceKey, slices: &[Arc<EndpointSlice>]) -> bool {
        let Some(w) = self.0.get_mut(key) else {
            return true;
        };
        w.retain(|name, (rv, at)| {
            if at.elapsed() > STALE_PATIENCE {
                return false;
            }
            let held = slices.iter().find(|s| s.metadata.name.as_deref() == Some(name));
            let held_rv = held.and_then(|s| s.metadata.resource_version.as_deref());
            match (rv.as_deref(), held_rv) {
                (Some(written), Some(seen)) => !newer_or_same(seen, written),
                (Some(_), None) => held.is_none(),
                (None, _) => held.is_some(),
            }
        });
        let done = w.is_empty();
        if done {
            self.0.remove(key);
        }
        done
    }

    fn record(&mut self, key: &ServiceKey, name: String, rv: Option<String>) {
        self.0
            .entry(key.clone())
            .or_default()
            .insert(name, (rv, Instant::now()));
    }
}

/// Every reason a pod is left out, as the metric labels it.
const REASONS: [&str; 6] = [
    "no_network_status",
    "bad_network_status",
    "not_on_network",
    "node_not_found",
    "no_claim",
    "network_data_pending",
];

/// The ResourceClaims' API resource (read as dynamic objects, so that any
/// `resource.k8s.io/v1` server's claims decode).
fn claims_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("resource.k8s.io", "v1", "ResourceClaim"),
        "resourceclaims",
    )
}

/// The caches the syncs read.
#[derive(Clone)]
struct Caches {
    services: Store<Service>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    /// With DRA networks only.
    claims: Option<Store<DynamicObject>>,
}

impl Caches {
    /// The handled Services whose selector picks a pod with these labels in
    /// `namespace`.
    fn services_selecting(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> Vec<ServiceKey> {
        self.services
            .state()
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .filter(|s| {
                let selector = s
                    .spec
                    .as_ref()
                    .and_then(|sp| sp.selector.as_ref())
                    .filter(|m| !m.is_empty());
                selector.is_some_and(|sel| sel.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)))
            })
            .map(|s| key_of(s.as_ref()))
            .collect()
    }

    fn all_services(&self) -> Vec<ServiceKey> {
        self.services.state().iter().map(|s| key_of(s.as_ref())).collect()
    }

    fn slices_of(&self, key: &ServiceKey) -> Vec<Arc<EndpointSlice>> {
        self.slices.state_filter(|s| {
            s.metadata.namespace.as_deref() == Some(key.0.as_str())
                && s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) == Some(&key.1)
        })
    }
}

/// Why a sync did not finish.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The cache has not yet seen the controller's last writes.
    #[error("the slice cache has not yet seen this controller's last writes")]
    Stale,
    /// The API server refused or failed a write.
    #[error("service {namespace}/{name}: {operation} of an EndpointSlice failed: {source}")]
    Write {
        /// The Service's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// `create`, `update` or `delete`.
        operation: &'static str,
        /// The API's error.
        #[source]
        source: Box<kube::Error>,
    },
}

/// The controller.
pub struct SliceController {
    client: Client,
    config: ControllerConfig,
    metrics: ControllerMetrics,
    written: Mutex<Written>,
    /// Each (Service, pod) left out, with the reason last said.
    left_out: Mutex<BTreeMap<(ServiceKey, String), &'static str>>,
}

fn reason_label(why: &LeftOut) -> &'static str {
    match why {
        LeftOut::NoNetworkStatus { .. } => "no_network_status",
        LeftOut::BadNetworkStatus { .. } => "bad_network_status",
        LeftOut::NotOnNetwork { .. } => "not_on_network",
        LeftOut::NodeNotFound { .. } => "node_not_found",
        LeftOut::NoClaim { .. } => "no_claim",
        LeftOut::NetworkDataPending { .. } => "network_data_pending",
    }
}

fn pod_of(why: &LeftOut) -> &str {
    match why {
        LeftOut::NoNetworkStatus { pod }
        | LeftOut::BadNetworkStatus { pod, .. }
        | LeftOut::NotOnNetwork { pod, .. }
        | LeftOut::NodeNotFound { pod, .. }
        | LeftOut::NoClaim { pod, .. }
        | LeftOut::NetworkDataPending { pod, .. } => pod,
    }
}

impl SliceController {
    /// A controller writing through `client`.
    pub fn new(client: Client, config: ControllerConfig, metrics: ControllerMetrics) -> Self {
        Self {
            client,
            config,
            metrics,
            written: Mutex::new(Written::default()),
            left_out: Mutex::new(BTreeMap::new()),
        }
    }

    /// Runs until `shutdown` completes: watches, and syncs each Service
    /// whose inputs changed. Returns once the watches' first lists are in
    /// through `ready` (a health check may wait on it).
    pub async fn run(self, ready: impl FnOnce() + Send, shutdown: impl Future<Output = ()> + Send) {
        let this = Arc::new(self);
        let queue = Arc::new(Queue::default());
        let (caches, watches) = this.start_watches(&queue);
        let work = async {
            for store in [
                caches.services.wait_until_ready().await,
                caches.pods.wait_until_ready().await,
            ] {
                if store.is_err() {
                    return;
                }
            }
            let _ = caches.nodes.wait_until_ready().await;
            let _ = caches.slices.wait_until_ready().await;
            if let Some(claims) = &caches.claims {
                let _ = claims.wait_until_ready().await;
            }
            tracing::info!(
                services = caches.services.state().len(),
                "the caches are filled: syncing every Service"
            );
            queue.push(caches.all_services());
            ready();
            let mut failures: HashMap<ServiceKey, u32> = HashMap::new();
            loop {
                for (key, trigger) in queue.take().await {
                    match this.sync(&caches, &key, trigger).await {
                        Ok(()) => {
                            failures.remove(&key);
                        }
                        Err(e) => {
                            let n = failures.entry(key.clone()).or_default();
                            *n += 1;
                            let delay = match e {
                                SyncError::Stale => Duration::from_millis(50),
                                SyncError::Write { .. } => {
                                    tracing::warn!("{e}; tried again");
                                    Duration::from_millis(100 << (*n).min(9))
                                }
                            };
                            let (queue, key) = (queue.clone(), key.clone());
                            tokio::spawn(async move {
                                tokio::time::sleep(delay).await;
                                queue.push_at([(key, trigger)]);
                            });
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = work => {}
            () = shutdown => {}
        }
        for w in watches {
            w.abort();
        }
    }

    /// One task per watch, each feeding its cache and the queue.
    fn start_watches(self: &Arc<Self>, queue: &Arc<Queue>) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
        let (services, services_w) = reflector::store::<Service>();
        let (pods, pods_w) = reflector::store::<Pod>();
        let (nodes, nodes_w) = reflector::store::<Node>();
        let (slices, slices_w) = reflector::store::<EndpointSlice>();
        let claims_writer = self
            .config
            .dra
            .then(|| reflector::store::Writer::<DynamicObject>::new(claims_resource()));
        let caches = Caches {
            services,
            pods,
            nodes,
            slices,
            claims: claims_writer.as_ref().map(reflector::store::Writer::as_reader),
        };
        let c = &self.client;
        let proxy = format!("{SERVICE_PROXY_NAME_LABEL}={}", self.config.proxy_name);
        let ours = format!("{MANAGED_BY_LABEL}={}", self.config.rules.controller);
        let mut tasks = Vec::new();

        let q = queue.clone();
        let stream = reflector::reflector(
            services_w,
            watcher(
                Api::<Service>::all(c.clone()),
                watcher::Config::default().labels(&proxy),
            )
            .default_backoff(),
        );
        tasks.push(tokio::spawn(each_event(stream, move |e| {
            if let Some(s) = touched(e) {
                q.push([key_of(s)]);
            }
        })));

        let (q, cs) = (queue.clone(), caches.clone());
        let mut labels_seen: HashMap<ServiceKey, Option<BTreeMap<String, String>>> = HashMap::new();
        let stream = reflector::reflector(
            pods_w,
            watcher(Api::<Pod>::all(c.clone()), watcher::Config::default()).default_backoff(),
        );
        tasks.push(tokio::spawn(each_event(stream, move |e| {
            let (pod, gone) = match e {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                watcher::Event::Delete(p) => (p, true),
                _ => return,
            };
            let key = key_of(pod);
            let before = if gone {
                labels_seen.remove(&key)
            } else {
                labels_seen.insert(key.clone(), pod.metadata.labels.clone())
            };
            let mut keys = cs.services_selecting(&key.0, pod.metadata.labels.as_ref());
            if let Some(Some(old)) = before.as_ref().filter(|old| **old != pod.metadata.labels) {
                keys.extend(cs.services_selecting(&key.0, Some(old)));
            }
            q.push(keys);
        })));

        let (q, cs) = (queue.clone(), caches.clone());
        let mut zones: HashMap<String, Option<String>> = HashMap::new();
        let stream = reflector::reflector(
            nodes_w,
            watcher(Api::<Node>::all(c.clone()), watcher::Config::default()).default_backoff(),
        );
        tasks.push(tokio::spawn(each_event(stream, move |e| {
            let Some(node) = touched(e) else { return };
            let name = node.metadata.name.clone().unwrap_or_default();
            let zone = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::endpoint::ZONE_LABEL))
                .cloned();
            // Heartbeats change nodes all the time; only a zone (or a node
            // that appears or goes) changes an endpoint.
            if zones.insert(name, zone.clone()) != Some(zone) {
                q.push(cs.all_services());
            }
        })));

        let q = queue.clone();
        let stream = reflector::reflector(
            slices_w,
            watcher(
                Api::<EndpointSlice>::all(c.clone()),
                watcher::Config::default().labels(&ours),
            )
            .default_backoff(),
        );
        tasks.push(tokio::spawn(each_event(stream, move |e| {
            if let Some(s) = touched(e) {
                let ns = s.metadata.namespace.clone().unwrap_or_default();
                if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
                    q.push([(ns, svc.clone())]);
                }
            }
        })));
        if let Some(writer) = claims_writer {
            let (q, cs) = (queue.clone(), caches.clone());
            let api = Api::<DynamicObject>::all_with(c.clone(), &claims_resource());
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
            tasks.push(tokio::spawn(each_event(stream, move |e| {
                // A claim's network data: the Services of its namespace.
                if let Some(claim) = touched(e) {
                    let ns = claim.metadata.namespace.clone().unwrap_or_default();
                    q.push(cs.all_services().into_iter().filter(|(n, _)| *n == ns));
                }
            })));
        }
        (caches, tasks)
    }

    /// Syncs one Service.
    async fn sync(&self, caches: &Caches, key: &ServiceKey, trigger: Trigger) -> Result<(), SyncError> {
        let slices = caches.slices_of(key);
        if !lock(&self.written).seen(key, &slices) {
            self.metrics
                .syncs
                .get_or_create(&ResultLabels { result: "stale" })
                .inc();
            return Err(SyncError::Stale);
        }
        let service = caches.services.get(&ObjectRef::new(&key.1).within(&key.0));
        let existing: Vec<EndpointSlice> = slices.iter().map(|s| (**s).clone()).collect();
        let plan = match service.as_deref().and_then(|s| self.network_of(s).map(|n| (s, n))) {
            // Gone: its slices are the garbage collector's (they name it
            // as owner).
            None if service.is_none() => Plan::default(),
            // No longer on a network (or without a selector): its slices go.
            None => Plan {
                delete: existing.iter().filter_map(|s| s.metadata.name.clone()).collect(),
                ..Plan::default()
            },
            Some((svc, network)) => self.plan(caches, svc, &network, &existing, trigger),
        };
        let result = self.apply(key, &plan).await;
        let label = if result.is_ok() { "success" } else { "error" };
        self.metrics.syncs.get_or_create(&ResultLabels { result: label }).inc();
        self.metrics.endpoints_added_per_sync.observe(plan.added as f64);
        self.metrics.endpoints_removed_per_sync.observe(plan.removed as f64);
        self.metrics.slices_changed_per_sync.observe(plan.writes() as f64);
        self.metrics
            .slices
            .set(i64::try_from(caches.slices.state().len()).unwrap_or(i64::MAX));
        result
    }

    /// The Service's network, when this controller writes its slices: on a
    /// network (Multus's annotation, or with DRA networks the device class
    /// one; not both) and with a selector.
    fn network_of(&self, svc: &Service) -> Option<Network> {
        let selector = svc.spec.as_ref().and_then(|s| s.selector.as_ref());
        if selector.is_none_or(BTreeMap::is_empty) {
            return None;
        }
        let (ns, name) = key_of(svc);
        let class = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SERVICE_DEVICE_CLASS_ANNOTATION))
            .filter(|_| self.config.dra)
            .map(|c| Network::DeviceClass(c.trim().to_owned()));
        let multus = match service_network(svc) {
            Ok(n) => n.map(Network::Multus),
            Err(e) => {
                tracing::warn!("service {ns}/{name}: {e}: its slices are not written");
                return None;
            }
        };
        match (multus, class) {
            (Some(_), Some(_)) => {
                tracing::warn!(
                    "service {ns}/{name}: names both a Multus network and a device class: its slices are not written"
                );
                None
            }
            (m, c) => m.or(c),
        }
    }

    fn plan(
        &self,
        caches: &Caches,
        svc: &Service,
        network: &Network,
        existing: &[EndpointSlice],
        trigger: Trigger,
    ) -> Plan {
        let key = key_of(svc);
        let pods = caches
            .pods
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(key.0.as_str()));
        let mut nodes = BTreeMap::new();
        for pod in &pods {
            if let Some(name) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref())
                && let Some(node) = caches.nodes.get(&ObjectRef::new(name))
            {
                nodes.insert(name.clone(), (*node).clone());
            }
        }
        let mut claims = BTreeMap::new();
        if let (Network::DeviceClass(_), Some(store)) = (network, &caches.claims) {
            for name in pods.iter().flat_map(|p| crate::dra::claim_names(p)) {
                let key = ObjectRef::new_with(&name, claims_resource()).within(&key.0);
                if let Some(json) = store.get(&key).and_then(|c| serde_json::to_value(&*c).ok()) {
                    claims.insert((key.namespace.clone().unwrap_or_default(), name), json);
                }
            }
        }
        let lookups = Lookups {
            nodes: &nodes,
            claims: &claims,
        };
        let (wanted, left_out) = crate::wanted(svc, pods.iter().map(|p| p.as_ref()), network, lookups);
        self.say_left_out(&key, &left_out);
        reconcile(svc, &wanted, existing, &self.config.rules, Some(&trigger.to_string()))
    }

    /// Warns once for each pod that starts being left out (or for another
    /// reason), and keeps the gauge by reason.
    fn say_left_out(&self, key: &ServiceKey, left_out: &[LeftOut]) {
        let mut known = lock(&self.left_out);
        let now: BTreeMap<String, (&'static str, &LeftOut)> = left_out
            .iter()
            .map(|w| (pod_of(w).to_owned(), (reason_label(w), w)))
            .collect();
        known.retain(|(svc, pod), _| svc != key || now.contains_key(pod));
        for (pod, (reason, why)) in &now {
            if known.insert((key.clone(), pod.clone()), reason) != Some(reason) {
                tracing::warn!("service {}/{}: {why}: left out of its slices", key.0, key.1);
            }
        }
        let mut counts: BTreeMap<&'static str, i64> = BTreeMap::new();
        for reason in known.values() {
            *counts.entry(reason).or_default() += 1;
        }
        for reason in REASONS {
            let n = counts.get(reason).copied().unwrap_or(0);
            self.metrics
                .pods_left_out
                .get_or_create(&ReasonLabels { reason })
                .set(n);
        }
    }

    /// Writes the plan, recording each write for the stale-cache check.
    async fn apply(&self, key: &ServiceKey, plan: &Plan) -> Result<(), SyncError> {
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &key.0);
        let failed = |operation: &'static str| {
            let key = key.clone();
            move |e: kube::Error| SyncError::Write {
                namespace: key.0,
                name: key.1,
                operation,
                source: Box::new(e),
            }
        };
        let count = |operation: &'static str| {
            self.metrics.changes.get_or_create(&OperationLabels { operation }).inc();
        };
        for slice in &plan.create {
            let made = api
                .create(&PostParams::default(), slice)
                .await
                .map_err(failed("create"))?;
            count("create");
            self.track(key, &made);
        }
        for slice in &plan.update {
            let name = slice.metadata.name.clone().unwrap_or_default();
            let made = api
                .replace(&name, &PostParams::default(), slice)
                .await
                .map_err(failed("update"))?;
            count("update");
            self.track(key, &made);
        }
        for name in &plan.delete {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => count("delete"),
                // Deleted already: what was wanted.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(failed("delete")(e)),
            }
            lock(&self.written).record(key, name.clone(), None);
        }
        Ok(())
    }

    fn track(&self, key: &ServiceKey, slice: &EndpointSlice) {
        if let Some(name) = slice.metadata.name.clone() {
            lock(&self.written).record(key, name, slice.metadata.resource_version.clone());
        }
    }
}

/// The object of an event that adds, changes or deletes one.
fn touched<K>(e: &watcher::Event<K>) -> Option<&K> {
    match e {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => Some(o),
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

/// Drives a reflector's stream, handing each event to `f`; a watch error
/// is said and the watcher retries (with its backoff).
async fn each_event<K, S>(stream: S, mut f: impl FnMut(&watcher::Event<K>) + Send)
where
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) => f(&e),
            Err(e) => tracing::warn!("a watch failed (retried): {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_service_queued_again_keeps_the_earliest_change_it_has_not_written() {
        let q = Queue::default();
        let key = ("ns".to_owned(), "web".to_owned());
        let first = Trigger::now();
        q.push_at([(key.clone(), first)]);
        tokio::time::sleep(Duration::from_millis(5)).await;
        q.push([key.clone(), ("ns".to_owned(), "db".to_owned())]);
        let batch = q.take().await;
        assert_eq!(batch[&key], first, "the earliest change is the trigger");
        assert!(batch[&("ns".to_owned(), "db".to_owned())] > first);
        q.push([key.clone()]);
        assert!(q.take().await[&key] > first, "after a sync, a new change starts afresh");
    }
}
