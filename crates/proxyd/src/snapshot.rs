//! One look at the cluster (manifest files or one API list), fed through
//! the same handlers and selection as `proxyd run`: what `render` and
//! `explain` work from.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use informer_glue::fold::EventFold;
use informer_glue::manifests::{self, Object, relist};
use informer_glue::multus::{NetworkName, PodInfo, pod_from_k8s, service_network};
use informer_glue::selection::Selection;
use informer_glue::tombstone::{SlimServices, SlimSlices};
use informer_glue::{ServiceHandler, SliceCacheHandler};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher::Event;
use slice_model::ServiceName;

use crate::cli::{ProxyArgs, SourceArgs};
use endpoints_map::Engine;
use nft_dataplane::DataplaneConfig;

/// The objects of a cluster at one moment. The Kubernetes objects stay in
/// here: commands read them as the model (the views below), never their
/// fields.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Services.
    services: Vec<Service>,
    /// EndpointSlices: from [`Snapshot::fetch`], only those its caller
    /// asked to keep (every slice goes to the engine as it is read).
    slices: Vec<EndpointSlice>,
    /// This node's zone label, if its Node object was found.
    pub node_zone: Option<String>,
    /// This node's pods (multus mode; empty otherwise).
    pods: Vec<Pod>,
    /// The union of the ServiceCIDR objects' ranges.
    pub service_cidrs: Vec<ipnet::IpNet>,
    /// This Node's pod ranges (`spec.podCIDRs`), for `--detect-local-mode
    /// NodeCIDR`.
    pub node_pod_cidrs: Vec<ipnet::IpNet>,
    /// This Node's primary addresses, for `--nodeport-addresses primary`.
    pub node_primary_ips: Vec<std::net::IpAddr>,
}

/// The node name: --hostname-override, else the kernel's host name.
pub fn node_name(proxy: &ProxyArgs) -> anyhow::Result<String> {
    if let Some(n) = proxy
        .hostname_override
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        return Ok(n.to_lowercase());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the host name; set --hostname-override")?;
    Ok(host.trim().to_lowercase())
}

/// The proxy name multus mode serves by default.
pub const MULTUS_PROXY_NAME: &str = "multus-proxy";

/// The objects this proxy handles, as `proxy` selects them.
pub fn selection(proxy: &ProxyArgs) -> Selection {
    let proxy_name = match (&proxy.service_proxy_name, proxy.multus) {
        (None, true) => Some(MULTUS_PROXY_NAME.to_owned()),
        (name, _) => name.clone(),
    };
    Selection {
        proxy_name,
        multus: proxy.multus,
    }
}

/// The dataplane settings; `--node-zone` wins over the zone the source
/// reported.
pub fn dataplane_config(proxy: &ProxyArgs, source_zone: Option<String>) -> DataplaneConfig {
    DataplaneConfig {
        family: proxy.ip_family,
        scope: nft_dataplane::desired::Scope::Node,
        node_zone: proxy.node_zone.clone().or(source_zone),
        cluster_cidrs: proxy.cluster_cidr.clone(),
        detect_local: proxy.local_detector(),
        masquerade_all: proxy.masquerade_all,
        nodeport_addresses: proxy.nodeport_cidrs(),
        service_cidrs: proxy.service_cidr.clone(),
    }
}

/// A client from `--kubeconfig`, or inferred.
pub async fn client(source: &SourceArgs) -> anyhow::Result<kube::Client> {
    let config = match &source.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster")?,
    };
    tracing::info!(server = %config.cluster_url, "connecting to the API server");
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

/// What proxyd reads of node `name`, from the API.
type NodeFacts = (Option<String>, Vec<ipnet::IpNet>, Vec<std::net::IpAddr>);

/// The zone label, pod ranges and primary addresses of node `name`, read
/// from the API; none (with a warning) when it cannot be read.
pub async fn api_node(client: &kube::Client, name: &str) -> NodeFacts {
    match Api::<Node>::all(client.clone()).get_opt(name).await {
        Ok(Some(node)) => (
            informer_glue::node::zone_of(&node),
            informer_glue::node::pod_cidrs_of(&node),
            informer_glue::node::primary_ips_of(&node),
        ),
        Ok(None) => {
            tracing::warn!(node = name, "no Node object of this name: topology hints are not used");
            (None, Vec::new(), Vec::new())
        }
        Err(e) => {
            tracing::warn!(
                node = name,
                "cannot read this node's Node ({e}): topology hints are not used"
            );
            (None, Vec::new(), Vec::new())
        }
    }
}

/// The union of the ServiceCIDRs' ranges, read from the API; none (with
/// a warning) when they cannot be read.
pub async fn api_service_cidrs(client: &kube::Client) -> Vec<ipnet::IpNet> {
    match Api::<ServiceCIDR>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let each: Vec<Vec<ipnet::IpNet>> = list
                .items
                .iter()
                .map(|o| {
                    let (cidrs, warnings) = informer_glue::service_cidr::cidrs_of(o);
                    for w in warnings {
                        tracing::warn!("{w}");
                    }
                    cidrs
                })
                .collect();
            informer_glue::service_cidr::union(each.iter().map(Vec::as_slice))
        }
        Err(e) => {
            tracing::warn!("cannot list ServiceCIDRs ({e}): traffic to unallocated service addresses is not dropped");
            Vec::new()
        }
    }
}

impl Snapshot {
    /// A snapshot of these objects (this node's zone unknown; no pods, no
    /// ServiceCIDRs, no Node), for code that has them at hand.
    pub fn of(services: Vec<Service>, slices: Vec<EndpointSlice>) -> Self {
        Self {
            services,
            slices,
            ..Self::default()
        }
    }

    /// Reads the objects once from `source`, handing each EndpointSlice to
    /// the engine as it is read and keeping only those `keep` picks (a
    /// cluster's worth of typed slices is never held at once); returns
    /// them with the engine, applied.
    pub async fn fetch(
        source: &SourceArgs,
        node: &str,
        proxy: &ProxyArgs,
        keep: &dyn Fn(&EndpointSlice) -> bool,
    ) -> anyhow::Result<(Self, Engine)> {
        let selection = selection(proxy);
        let mut feed = EngineFeed::new(node, proxy);
        let mut kept = Vec::new();
        let mut take = |slice: EndpointSlice| {
            if keep(&slice) {
                kept.push(slice.clone());
            }
            feed.slice(slice);
        };
        let mut snapshot = Self::default();
        if let Some(path) = &source.manifests {
            let mut nodes = Vec::new();
            let mut cidrs = Vec::new();
            manifests::Texts::read(path)?.for_each(|object| match object {
                Object::Service(s) => snapshot.services.push(*s),
                Object::Slice(s) => take(*s),
                Object::Node(n) => nodes.push(*n),
                Object::Pod(p) if selection.multus => snapshot.pods.push(*p),
                Object::Pod(_) => {}
                Object::ServiceCidr(c) => cidrs.push(c),
                Object::Skipped(s) => tracing::debug!("skipped {s}"),
            })?;
            snapshot.node_zone = informer_glue::node::zone_of_named(&nodes, node);
            let this = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node));
            snapshot.node_pod_cidrs = this.map(informer_glue::node::pod_cidrs_of).unwrap_or_default();
            snapshot.node_primary_ips = this.map(informer_glue::node::primary_ips_of).unwrap_or_default();
            snapshot.service_cidrs = informer_glue::service_cidr::union(cidrs.iter().map(Vec::as_slice));
        } else {
            let client = client(source).await?;
            let params = ListParams::default().labels_from(&selection.label_selector());
            let slice_params = ListParams::default().labels_from(&selection.slice_label_selector());
            snapshot.services = Api::<Service>::all(client.clone())
                .list(&params)
                .await
                .context("cannot list services")?
                .items;
            Api::<EndpointSlice>::all(client.clone())
                .list(&slice_params)
                .await
                .context("cannot list endpoint slices")?
                .items
                .into_iter()
                .for_each(&mut take);
            if selection.multus {
                let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
                snapshot.pods = Api::<Pod>::all(client.clone())
                    .list(&on_node)
                    .await
                    .context("cannot list this node's pods")?
                    .items;
            }
            (snapshot.node_zone, snapshot.node_pod_cidrs, snapshot.node_primary_ips) = api_node(&client, node).await;
            snapshot.service_cidrs = api_service_cidrs(&client).await;
        }
        snapshot.slices = kept;
        let engine = feed.finish(&snapshot.services);
        Ok((snapshot, engine))
    }

    /// Multus mode's view: this node's pods (converted; warnings logged)
    /// and the network of each selected service.
    pub fn multus_view(&self, node: &str, selection: &Selection) -> (Vec<PodInfo>, BTreeMap<ServiceName, NetworkName>) {
        let pods = self
            .pods
            .iter()
            .map(|p| {
                let (info, warnings) = pod_from_k8s(p);
                for w in warnings {
                    tracing::warn!("{w}");
                }
                info
            })
            .filter(|p| p.node.as_deref() == Some(node))
            .collect();
        let networks = self
            .services
            .iter()
            .filter(|s| selection.selects_service(s))
            .filter_map(|s| {
                let net = service_network(s).ok().flatten()?;
                let name = ServiceName::new(s.metadata.namespace.as_deref()?, s.metadata.name.as_deref()?);
                Some((name, net))
            })
            .collect();
        (pods, networks)
    }

    /// One service as the model has it, and what this proxy does with it;
    /// when there is no such service, the names of those in its namespace.
    pub fn service(&self, name: &ServiceName, selection: &Selection) -> Result<ServiceView, Vec<String>> {
        let named = |s: &&Service| {
            s.metadata.namespace.as_deref() == Some(&*name.namespace) && s.metadata.name.as_deref() == Some(&*name.name)
        };
        let Some(svc) = self.services.iter().find(named) else {
            let mut known: Vec<String> = self
                .services
                .iter()
                .filter(|s| s.metadata.namespace.as_deref() == Some(&*name.namespace))
                .filter_map(|s| s.metadata.name.clone())
                .collect();
            known.sort();
            return Err(known);
        };
        let info = informer_glue::service_from_k8s(svc)
            .map(|(info, _)| info)
            .unwrap_or_else(|_| slice_model::ServiceInfo::new(name.clone()));
        Ok(ServiceView {
            info,
            handling: selection.handling(svc),
        })
    }

    /// The slices of `service`, each converted by the watch path's own
    /// conversion, or why it is not used.
    pub fn slices_of_service(&self, service: &ServiceName, selection: &Selection) -> Vec<SliceView> {
        let mut interner = slice_model::Interner::new();
        self.slices
            .iter()
            .filter(|s| is_slice_of(s, service))
            .map(|raw| SliceView {
                name: raw.metadata.name.clone().unwrap_or_else(|| "(no name)".into()),
                address_type: raw.address_type.clone(),
                converted: if selection.selects_slice(raw) {
                    informer_glue::slice_from_k8s(raw, &mut interner).map_err(|e| e.to_string())
                } else {
                    Err("not selected: its labels hand it to another proxy or controller".into())
                },
            })
            .collect()
    }

    /// An engine holding these objects (applied), as proxy `node` would
    /// see them.
    pub fn engine(&self, node: &str, proxy: &ProxyArgs) -> Engine {
        let mut feed = EngineFeed::new(node, proxy);
        self.slices.iter().cloned().for_each(|s| feed.slice(s));
        feed.finish(&self.services)
    }
}

/// A service as the model has it, and what this proxy does with it.
#[derive(Debug)]
pub struct ServiceView {
    /// The converted Service.
    pub info: slice_model::ServiceInfo,
    /// Whether this proxy handles it, and if not, why.
    pub handling: informer_glue::selection::Handling,
}

/// One EndpointSlice of a service as the watch path converts it, or why it
/// is not used.
#[derive(Debug)]
pub struct SliceView {
    /// Its name.
    pub name: String,
    /// Its `addressType`.
    pub address_type: String,
    /// The model slice and the conversion's warnings, or why there is none.
    pub converted: Result<(slice_model::EndpointSlice, Vec<slice_model::SliceWarning>), String>,
}

/// Builds an engine from EndpointSlices handed over one at a time, through
/// the same handlers and selection as `proxyd run`, keeping of each slice
/// only what `run` keeps.
pub struct EngineFeed {
    engine: Engine,
    selection: Selection,
    handler: SliceCacheHandler,
    fold: EventFold<EndpointSlice, SlimSlices>,
}

impl EngineFeed {
    /// An empty engine for proxy `node`, its slice list begun.
    pub fn new(node: &str, proxy: &ProxyArgs) -> Self {
        let engine = Engine::new(node, proxy.ip_family);
        let mut handler = SliceCacheHandler::new(engine.slices.clone(), Arc::default());
        let selection = selection(proxy);
        let sel = selection.clone();
        let mut fold = EventFold::with_selection(move |x| sel.selects_slice(x)).keeping(SlimSlices);
        fold.apply(Event::Init, &mut handler);
        Self {
            engine,
            selection,
            handler,
            fold,
        }
    }

    /// Hands over one slice.
    pub fn slice(&mut self, slice: EndpointSlice) {
        self.fold.apply(Event::InitApply(slice), &mut self.handler);
    }

    /// Ends the slice list, hands over `services`, and applies it all.
    pub fn finish(mut self, services: &[Service]) -> Engine {
        self.fold.apply(Event::InitDone, &mut self.handler);
        let sel = self.selection;
        let mut store = ServiceHandler::new(vec![self.engine.service_changes.clone()], Arc::default());
        relist(
            &mut EventFold::with_selection(move |x| sel.selects_service(x)).keeping(SlimServices),
            services.iter().cloned(),
            &mut store,
        );
        self.engine.update();
        self.engine
    }
}

/// Whether `slice` is one of `service`'s (by its service-name label).
pub fn is_slice_of(slice: &EndpointSlice, service: &ServiceName) -> bool {
    slice.metadata.namespace.as_deref() == Some(&*service.namespace)
        && slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(slice_model::SERVICE_NAME_LABEL))
            .map(String::as_str)
            == Some(&*service.name)
}

/// A [`Snapshot::fetch`] filter keeping the slices of `service` (none
/// when there is none).
pub fn slices_of(service: Option<ServiceName>) -> impl Fn(&EndpointSlice) -> bool {
    move |slice| service.as_ref().is_some_and(|name| is_slice_of(slice, name))
}

/// What a one-shot command (`render`, `explain`) works from.
pub struct Loaded {
    /// The node this view is for.
    pub node: String,
    /// The objects as read.
    pub snapshot: Snapshot,
    /// The engine holding them.
    pub engine: Engine,
    /// The dataplane settings.
    pub config: DataplaneConfig,
}

/// Reads the cluster once, runs `body` on it and prints its text, or the
/// error prefixed with `proxyd COMMAND:` (exit status 1).
pub fn one_shot(
    command: &str,
    source: &SourceArgs,
    proxy: &ProxyArgs,
    keep_slices: &dyn Fn(&EndpointSlice) -> bool,
    body: impl FnOnce(&Loaded) -> anyhow::Result<String>,
) -> std::process::ExitCode {
    let result = (|| -> anyhow::Result<String> {
        let node = node_name(proxy)?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (snapshot, engine) = runtime.block_on(Snapshot::fetch(source, &node, proxy, keep_slices))?;
        let mut config = dataplane_config(proxy, snapshot.node_zone.clone());
        // --service-cidr wins over the ServiceCIDR objects.
        if config.service_cidrs.is_empty() {
            config.service_cidrs.clone_from(&snapshot.service_cidrs);
        }
        if let nft_dataplane::LocalDetector::NodeCidr(ranges) = &mut config.detect_local {
            ranges.clone_from(&snapshot.node_pod_cidrs);
        }
        if proxy.nodeport_primary() {
            config.nodeport_addresses = snapshot
                .node_primary_ips
                .iter()
                .map(|ip| ipnet::IpNet::from(*ip))
                .collect();
        }
        let loaded = Loaded {
            node,
            snapshot,
            engine,
            config,
        };
        let text = body(&loaded);
        // The process ends next: freeing a cluster's worth of small
        // allocations one by one would only cost time.
        std::mem::forget(loaded);
        text
    })();
    match result {
        Ok(text) => {
            // `proxyd render | head`: a reader that stops early is fine.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            crate::logging::say(&format!("proxyd {command}: {e:#}"));
            std::process::ExitCode::FAILURE
        }
    }
}
