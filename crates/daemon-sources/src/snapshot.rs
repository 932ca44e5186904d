//! One look at the cluster, from manifest files or one API list of each
//! kind, for commands that work from a moment's state (`render`,
//! `explain`): the objects as read, handed out as the model sees them
//! ([`ServiceView`], [`SliceView`]) and fed into the caches through the
//! same handlers and selection as the watches ([`SnapshotFeed`]).

use informer_glue::node::NodeFacts;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher::Event;
use slice_cache::{EndpointSliceCache, ServiceChangeTracker};
use slice_model::ServiceName;

use crate::manifests::{self, ManifestError, Object, relist};
use informer_glue::fold::EventFold;
use informer_glue::lenient::{Watched, decoded};
use informer_glue::multus::{NetworkName, PodInfo, pod_from_k8s, service_network};
use informer_glue::selection::Selection;
use informer_glue::tombstone::{SlimServices, SlimSlices};
use informer_glue::{ServiceHandler, SliceCacheHandler};

/// Where a snapshot is read from.
#[derive(Clone, Copy)]
pub enum SnapshotSource<'a> {
    /// Manifest files (a file, or a directory of them).
    Manifests(&'a Path),
    /// The API server.
    Api(&'a kube::Client),
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The manifests could not be read.
    #[error(transparent)]
    Manifests(#[from] ManifestError),
    /// A list call failed.
    #[error("cannot list {what}")]
    List {
        /// What was listed (`services`, `endpoint slices`, …).
        what: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// The objects of a cluster at one moment. The Kubernetes objects stay in
/// here: commands read them as the model (the views below), never their
/// fields.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Services.
    services: Vec<Service>,
    /// EndpointSlices: from [`Snapshot::read`], only those its caller
    /// asked to keep (every slice is handed over as it is read).
    slices: Vec<EndpointSlice>,
    /// What the cluster says of this node: its Node's zone, pod ranges
    /// and primary addresses, and the ServiceCIDRs' union.
    pub facts: NodeFacts,
    /// This node's pods (multus mode; empty otherwise).
    pods: Vec<Pod>,
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

    /// Reads the objects `selection` picks once from `source`, for node
    /// `node`, handing each EndpointSlice to `each_slice` as it is read
    /// and keeping only those `keep` picks (a cluster's worth of typed
    /// slices is never held at once).
    pub async fn read(
        source: SnapshotSource<'_>,
        node: &str,
        selection: &Selection,
        keep: &dyn Fn(&EndpointSlice) -> bool,
        each_slice: &mut dyn FnMut(EndpointSlice),
    ) -> Result<Self, SnapshotError> {
        let mut kept = Vec::new();
        let mut take = |slice: EndpointSlice| {
            if keep(&slice) {
                kept.push(slice.clone());
            }
            each_slice(slice);
        };
        let mut snapshot = Self::default();
        match source {
            SnapshotSource::Manifests(path) => {
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
                let this = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node));
                snapshot.facts = NodeFacts::of(this);
                snapshot.facts.service_cidrs = informer_glue::service_cidr::union(cidrs.iter().map(Vec::as_slice));
            }
            SnapshotSource::Api(client) => {
                let list = |what| move |source| SnapshotError::List { what, source };
                let params = ListParams::default().labels_from(&selection.label_selector());
                let slice_params = ListParams::default().labels_from(&selection.slice_label_selector());
                snapshot.services = decoded(
                    Api::<Watched<Service>>::all(client.clone())
                        .list(&params)
                        .await
                        .map_err(list("services"))?
                        .items,
                );
                decoded(
                    Api::<Watched<EndpointSlice>>::all(client.clone())
                        .list(&slice_params)
                        .await
                        .map_err(list("endpoint slices"))?
                        .items,
                )
                .into_iter()
                .for_each(&mut take);
                if selection.multus {
                    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
                    snapshot.pods = decoded(
                        Api::<Watched<Pod>>::all(client.clone())
                            .list(&on_node)
                            .await
                            .map_err(list("this node's pods"))?
                            .items,
                    );
                }
                snapshot.facts = api_node(client, node).await;
                snapshot.facts.service_cidrs = api_service_cidrs(client).await;
            }
        }
        snapshot.slices = kept;
        Ok(snapshot)
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

    /// Hands these objects to `feed` (its slice list ended, the services
    /// handed over).
    pub fn feed_into(&self, mut feed: SnapshotFeed) {
        self.slices.iter().cloned().for_each(|s| feed.slice(s));
        feed.finish(&self.services);
    }

    /// Hands this snapshot's services to `feed`, ending it (for a feed
    /// that was given the slices as [`Snapshot::read`] read them).
    pub fn finish(&self, feed: SnapshotFeed) {
        feed.finish(&self.services);
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

/// Feeds EndpointSlices, handed over one at a time, and then services into
/// a slice cache and a service change tracker, through the same handlers,
/// selection and slimming as the watches.
pub struct SnapshotFeed {
    selection: Selection,
    handler: SliceCacheHandler,
    fold: EventFold<EndpointSlice, SlimSlices>,
    service_changes: Arc<Mutex<ServiceChangeTracker>>,
}

impl SnapshotFeed {
    /// A feed into `slices` and `service_changes`, its slice list begun.
    pub fn new(
        slices: Arc<Mutex<EndpointSliceCache>>,
        service_changes: Arc<Mutex<ServiceChangeTracker>>,
        selection: Selection,
    ) -> Self {
        let mut handler = SliceCacheHandler::new(vec![slices], Arc::default());
        let sel = selection.clone();
        let mut fold = EventFold::with_selection(move |x| sel.selects_slice(x)).keeping(SlimSlices);
        fold.apply(Event::Init, &mut handler);
        Self {
            selection,
            handler,
            fold,
            service_changes,
        }
    }

    /// Hands over one slice.
    pub fn slice(&mut self, slice: EndpointSlice) {
        self.fold.apply(Event::InitApply(slice), &mut self.handler);
    }

    /// Ends the slice list and hands over `services`.
    pub fn finish(mut self, services: &[Service]) {
        self.fold.apply(Event::InitDone, &mut self.handler);
        let sel = self.selection;
        let mut store = ServiceHandler::new(vec![self.service_changes], Arc::default());
        relist(
            &mut EventFold::with_selection(move |x| sel.selects_service(x)).keeping(SlimServices),
            services.iter().cloned(),
            &mut store,
        );
    }
}

/// Whether `slice` is one of `service`'s (by its service-name label).
fn is_slice_of(slice: &EndpointSlice, service: &ServiceName) -> bool {
    slice.metadata.namespace.as_deref() == Some(&*service.namespace)
        && slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(slice_model::SERVICE_NAME_LABEL))
            .map(String::as_str)
            == Some(&*service.name)
}

/// A [`Snapshot::read`] filter keeping the slices of `service` (none
/// when there is none).
pub fn slices_of(service: Option<ServiceName>) -> impl Fn(&EndpointSlice) -> bool {
    move |slice| service.as_ref().is_some_and(|name| is_slice_of(slice, name))
}

/// What node `name`'s Node says, read from the API; nothing (with a
/// warning) when it cannot be read.
async fn api_node(client: &kube::Client, name: &str) -> NodeFacts {
    let node = Api::<Watched<Node>>::all(client.clone()).get_opt(name).await;
    match node.map(|n| n.and_then(|n| decoded(vec![n]).pop())) {
        Ok(Some(node)) => NodeFacts::of(Some(&node)),
        Ok(None) => {
            tracing::warn!(node = name, "no Node object of this name: topology hints are not used");
            NodeFacts::default()
        }
        Err(e) => {
            tracing::warn!(
                node = name,
                "cannot read this node's Node ({e}): topology hints are not used"
            );
            NodeFacts::default()
        }
    }
}

/// The union of the ServiceCIDRs' ranges, read from the API; none (with
/// a warning) when they cannot be read.
async fn api_service_cidrs(client: &kube::Client) -> Vec<ipnet::IpNet> {
    match Api::<Watched<ServiceCIDR>>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let each: Vec<Vec<ipnet::IpNet>> = decoded(list.items)
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
