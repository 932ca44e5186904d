//! Where a run's objects come from: the handlers that feed the engines,
//! and the tasks that drive them, API watches or the manifest files.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use informer_glue::feed::{Part, Scope};
use informer_glue::fold::EventFold;
use informer_glue::lenient::Watched;
use informer_glue::liveness::{Liveness, Probe};
use informer_glue::multus::{NetworkRecorder, PodHandler, PodStore, ServiceNetworks};
use informer_glue::node::{NodeFacts, ThisNode, ThisNodeHandler};
use informer_glue::selection::Selection;
use informer_glue::service_cidr::ServiceCidrHandler;
use informer_glue::tombstone::{SlimServices, SlimSlices};
use informer_glue::watch_runner::{WatchMetrics, WatchSettings, run_watch};
use informer_glue::{ServiceError, ServiceHandler, ServiceWarning, SliceCacheHandler};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Api;
use slice_model::{SliceError, WarningKind};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics_registry::Metrics;
use crate::settings::flags::RunArgs;
use daemon_sources::manifest_source::{self, ServiceSink};
use endpoints_map::Engine;

/// The handlers of a run, before a source drives them.
pub struct Handlers {
    slices: SliceCacheHandler,
    services: ServiceSink,
    pods: Option<PodHandler>,
    /// This node as the source reports it (node mode).
    this_node: Option<ThisNode>,
    /// Where the ServiceCIDRs' ranges go (node mode, without
    /// --service-cidr): this node's facts.
    service_cidrs: Option<ThisNode>,
}

/// What the rest of a run reads of its sources.
pub struct SourceState {
    /// Set once each kind's first complete list is handed over.
    pub listed: Vec<Arc<AtomicBool>>,
    /// Each watch's counters (none with manifests), for `/healthz`.
    pub watches: Vec<Arc<WatchMetrics>>,
    /// Multus mode: this node's pods.
    pub pods: Option<Arc<Mutex<PodStore>>>,
    /// Multus mode: each service's network.
    pub networks: Arc<Mutex<ServiceNetworks>>,
    /// What the sources say of this node (its Node, the ServiceCIDRs);
    /// `None` in multus mode.
    pub facts: Option<watch::Receiver<NodeFacts>>,
    /// The API server's address, when the watches reach it through the
    /// `kubernetes` Service (the in-cluster configuration).
    pub through_own_service: Option<String>,
}

/// Handlers feeding `engines` (one per family), waking `changes`; their
/// rejections counted in `metrics`.
pub fn handlers(
    args: &RunArgs,
    node: &str,
    engines: &[Engine],
    metrics: &Metrics,
    changes: &Arc<Notify>,
) -> (Handlers, SourceState) {
    let slice_rejections = metrics
        .sources
        .rejections("EndpointSlice", SliceError::REASONS, WarningKind::REASONS);
    // One handler for every family's cache: each slice converted and
    // counted once.
    let slices = SliceCacheHandler::new(engines.iter().map(|e| e.feed().slices).collect(), changes.clone())
        .counting_into(slice_rejections);
    let mut listed = vec![slices.synced.clone()];
    let store = ServiceHandler::new(
        engines.iter().map(|e| e.feed().service_changes).collect(),
        changes.clone(),
    )
    .counting_into(
        metrics
            .sources
            .rejections("Service", ServiceError::REASONS, ServiceWarning::REASONS),
    );
    listed.push(store.synced.clone());
    // Multus mode: each service's network is recorded on its way to the
    // engine, and this node's pods are kept.
    let networks: Arc<Mutex<ServiceNetworks>> = Arc::default();
    let services: ServiceSink = if args.proxy.multus {
        Box::new(NetworkRecorder {
            inner: store,
            networks: networks.clone(),
        })
    } else {
        Box::new(store)
    };
    let pods = args.proxy.multus.then(|| PodHandler::new(node, changes.clone()));
    if let Some(p) = &pods {
        listed.push(p.synced.clone());
    }
    // Pods' tables do not read topology hints, and pods are not behind
    // load balancers' node health checks: multus mode needs no Node.
    let this_node = (!args.proxy.multus).then(|| ThisNode::new(node, changes.clone()));
    // --service-cidr wins: no need to watch the objects.
    let service_cidrs = this_node
        .as_ref()
        .filter(|_| args.proxy.service_cidr.is_empty())
        .cloned();
    let state = SourceState {
        listed,
        watches: Vec::new(),
        pods: pods.as_ref().map(|p| p.store.clone()),
        networks,
        facts: this_node.as_ref().map(ThisNode::facts),
        through_own_service: None,
    };
    let handlers = Handlers {
        slices,
        services,
        pods,
        this_node,
        service_cidrs,
    };
    (handlers, state)
}

/// Starts the source `args` name, driving `handlers` until `shutdown`.
pub async fn start(
    args: &RunArgs,
    selection: &Selection,
    handlers: Handlers,
    state: &mut SourceState,
    metrics: &Metrics,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    match &args.source.manifests {
        Some(path) => start_manifests(path, selection, handlers, tasks, shutdown),
        None => start_watches(args, selection, handlers, state, metrics, tasks, shutdown).await,
    }
}

fn start_manifests(
    path: &std::path::Path,
    selection: &Selection,
    h: Handlers,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let first = manifest_source::Read::new(path);
    // At startup nothing was read before: a broken file stops the start
    // (later, a broken edit keeps the last good read).
    if let Some(e) = first.error() {
        anyhow::bail!("--manifests: {e}; nothing was started");
    }
    if daemon_sources::manifests::files(path).is_ok_and(|f| f.is_empty()) {
        tracing::warn!(path = %path.display(), "no manifest files (.yaml, .yml, .json) there yet");
    }
    let sink = manifest_source::Sink::new(
        selection.clone(),
        h.slices,
        h.services,
        h.pods,
        h.this_node,
        h.service_cidrs,
    );
    tasks.spawn(manifest_source::watch_manifests(
        path.to_owned(),
        first,
        sink,
        shutdown.clone().cancelled_owned(),
    ));
    Ok(())
}

async fn start_watches(
    args: &RunArgs,
    selection: &Selection,
    h: Handlers,
    state: &mut SourceState,
    metrics: &Metrics,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let config = daemon_sources::kubeconfig::config(args.source.kubeconfig.as_deref()).await?;
    state.through_own_service = daemon_sources::kubeconfig::through_kubernetes_service(&config);
    let client = daemon_sources::kubeconfig::client_from(config)?;
    // One probe of a quiet API server serves every watch.
    let liveness = Arc::new(Liveness::new(client.clone(), Probe::default()));
    let settings = WatchSettings {
        label_selector: selection.label_selector(),
        field_selector: None,
        page_size: args.list_page_size,
        relist_every: Some(args.config_sync_period),
        liveness: Some(liveness),
    };
    let mut watch = |resource: &'static str, kind: &'static str| {
        let w = metrics.sources.watch(resource, kind);
        state.watches.push(w.clone());
        w
    };
    // Services and EndpointSlices: the feed every user of the watch glue
    // runs (kube-endpoints' reader too), with the proxy's selection.
    let (for_services, for_slices) = (selection.clone(), selection.clone());
    let scope = Scope {
        namespace: None,
        services: settings.clone(),
        slices: WatchSettings {
            label_selector: selection.slice_label_selector(),
            ..settings.clone()
        },
    };
    let services = Part {
        fold: EventFold::with_selection(move |s| for_services.selects_service(s)).keeping(SlimServices),
        handler: h.services,
        metrics: watch("services", "Service"),
    };
    let slices = Part {
        fold: EventFold::with_selection(move |s| for_slices.selects_slice(s)).keeping(SlimSlices),
        handler: h.slices,
        metrics: watch("endpointslices", "EndpointSlice"),
    };
    let stop = shutdown.clone();
    let (services, slices) =
        informer_glue::feed::services_and_slices(client.clone(), scope, services, slices, move || {
            stop.clone().cancelled_owned()
        });
    tasks.spawn(services);
    tasks.spawn(slices);
    // This node's objects only: the cluster's pods and nodes are never
    // cached.
    let on_this_node = |field: &str, name: &str| WatchSettings {
        label_selector: kube::core::Selector::default(),
        field_selector: Some(format!("{field}={name}")),
        ..settings.clone()
    };
    if let Some(pods) = h.pods {
        let node = pods.node.clone();
        tasks.spawn(run_watch(
            Api::<Watched<Pod>>::all(client.clone()),
            on_this_node("spec.nodeName", &node),
            EventFold::new(),
            pods,
            watch("pods", "Pod"),
            shutdown.clone().cancelled_owned(),
        ));
    }
    let cidrs_watch = match h.service_cidrs {
        Some(cidrs) => {
            let settings = WatchSettings {
                label_selector: kube::core::Selector::default(),
                ..settings.clone()
            };
            watch_service_cidrs(&client, cidrs, settings, metrics, &mut state.listed, tasks, shutdown).await
        }
        None => None,
    };
    if let Some(zone) = h.this_node {
        let handler = ThisNodeHandler::new(zone.clone());
        state.listed.push(handler.synced.clone());
        tasks.spawn(run_watch(
            Api::<Watched<Node>>::all(client),
            on_this_node("metadata.name", zone.node()),
            EventFold::new(),
            handler,
            watch("nodes", "Node"),
            shutdown.clone().cancelled_owned(),
        ));
    }
    state.watches.extend(cidrs_watch);
    Ok(())
}

/// The ServiceCIDRs' ranges into this node's facts, when the API server
/// serves them (said once when it does not); the watch's counters.
async fn watch_service_cidrs(
    client: &kube::Client,
    cidrs: ThisNode,
    settings: WatchSettings,
    metrics: &Metrics,
    listed: &mut Vec<Arc<AtomicBool>>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Option<Arc<WatchMetrics>> {
    if !serves_service_cidrs(client).await {
        tracing::info!(
            "the API server serves no ServiceCIDRs (networking.k8s.io/v1; Kubernetes before 1.33): traffic to \
             unallocated service addresses is dropped only with --service-cidr"
        );
        return None;
    }
    let handler = ServiceCidrHandler::new(cidrs);
    listed.push(handler.synced.clone());
    let counters = metrics.sources.watch("servicecidrs", "ServiceCIDR");
    tasks.spawn(run_watch(
        Api::<Watched<ServiceCIDR>>::all(client.clone()),
        settings,
        EventFold::new(),
        handler,
        counters.clone(),
        shutdown.clone().cancelled_owned(),
    ));
    Some(counters)
}

/// How long the start waits for the API server to say whether it serves
/// ServiceCIDRs: one that does not answer must not hold up the watches.
const ASK_SERVICE_CIDRS: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the API server serves ServiceCIDRs (`networking.k8s.io/v1`,
/// Kubernetes 1.33 and later). A server that cannot be asked now (or
/// within [`ASK_SERVICE_CIDRS`]) is taken to serve them: the watch then
/// retries like the others.
async fn serves_service_cidrs(client: &kube::Client) -> bool {
    let asked = tokio::time::timeout(
        ASK_SERVICE_CIDRS,
        client.list_api_group_resources("networking.k8s.io/v1"),
    );
    let Ok(answer) = asked.await else {
        tracing::debug!(
            "the API server did not say within {ASK_SERVICE_CIDRS:?} whether it serves ServiceCIDRs: watching them"
        );
        return true;
    };
    match answer {
        Ok(list) => list.resources.iter().any(|r| r.name == "servicecidrs"),
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        Err(e) => {
            tracing::debug!("cannot ask the API server whether it serves ServiceCIDRs ({e}): watching them");
            true
        }
    }
}
