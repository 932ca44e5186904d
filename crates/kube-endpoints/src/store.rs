//! The reader's state: the services and slices the watches hand over, the
//! view of each service, and its subscribers. The watches' handlers are
//! the writer; [`crate::Reader`]s read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use informer_glue::fold::EventHandler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use slice_model::{Interner, ServiceInfo, ServiceName, SliceContent, SliceName};
use tokio::sync::{broadcast, watch};

use crate::view::{Location, ServiceEndpoints};

/// A service's latest view, as subscribers receive it (`None`: no such
/// service, or not any more).
pub type Latest = Option<Arc<ServiceEndpoints>>;

/// What the watches have handed over.
pub(crate) struct Store {
    services: HashMap<ServiceName, Arc<ServiceInfo>>,
    /// Each service's slices by slice name: the merge visits them in name
    /// order, as kube-proxy's cache does.
    /// Shared with the views, which merge them again for other nodes.
    slices: HashMap<ServiceName, BTreeMap<SliceName, Arc<SliceContent>>>,
    /// The service each slice was last filed under (a slice can move).
    owner: HashMap<SliceName, ServiceName>,
    views: HashMap<ServiceName, Arc<ServiceEndpoints>>,
    /// The services whose view holds each address (a cluster IP or an
    /// endpoint's): reverse lookups without visiting every service.
    by_address: HashMap<IpAddr, BTreeSet<ServiceName>>,
    /// One sender per name someone subscribed to. Entries nobody receives
    /// from any more are swept when the map has doubled since the last
    /// sweep, so that names asked about once do not stay forever.
    subscribers: HashMap<ServiceName, watch::Sender<Latest>>,
    /// The subscribers' entries after the last sweep.
    swept_to: usize,
    /// `None` once the watches stopped: every receiver is then closed.
    changes: Option<broadcast::Sender<ServiceName>>,
    interner: Interner,
    reader_at: Arc<Location>,
    listed: Listed,
    /// `None` once the watches stopped.
    ready: Option<watch::Sender<bool>>,
}

/// Which kinds have been listed once.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Listed {
    pub(crate) services: bool,
    pub(crate) slices: bool,
}

pub(crate) use slice_model::internal::lock;

impl Store {
    pub(crate) fn new(at: Location) -> (Self, watch::Receiver<bool>) {
        let (ready, ready_rx) = watch::channel(false);
        let store = Self {
            services: HashMap::new(),
            slices: HashMap::new(),
            owner: HashMap::new(),
            views: HashMap::new(),
            by_address: HashMap::new(),
            subscribers: HashMap::new(),
            swept_to: 0,
            changes: Some(broadcast::channel(crate::subscription::CHANGES_KEPT).0),
            interner: Interner::new(),
            reader_at: Arc::new(at),
            listed: Listed::default(),
            ready: Some(ready),
        };
        (store, ready_rx)
    }

    pub(crate) fn get(&self, name: &ServiceName) -> Latest {
        self.views.get(name).cloned()
    }

    /// The services whose cluster IPs or endpoints hold `ip`.
    pub(crate) fn services_at(&self, ip: IpAddr) -> Vec<ServiceName> {
        self.by_address
            .get(&ip)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn names(&self) -> Vec<ServiceName> {
        let mut names: Vec<ServiceName> = self.views.keys().cloned().collect();
        names.sort();
        names
    }

    pub(crate) fn subscribe(&mut self, name: &ServiceName) -> watch::Receiver<Latest> {
        let latest = self.get(name);
        if self.stopped() {
            // Closed at once: nothing will ever change it.
            return watch::channel(latest).1;
        }
        if self.subscribers.len() >= 2 * self.swept_to.max(64) {
            self.subscribers.retain(|_, tx| tx.receiver_count() > 0);
            self.swept_to = self.subscribers.len();
        }
        self.subscribers
            .entry(name.clone())
            .or_insert_with(|| watch::channel(latest).0)
            .subscribe()
    }

    /// How many names have a subscription entry (bounded by twice the
    /// names with live receivers, and at least 128).
    #[cfg(test)]
    pub(crate) fn subscription_entries(&self) -> usize {
        self.subscribers.len()
    }

    pub(crate) fn changes(&self) -> broadcast::Receiver<ServiceName> {
        match &self.changes {
            Some(tx) => tx.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Whether the watches stopped (their future was dropped).
    pub(crate) fn stopped(&self) -> bool {
        self.ready.is_none()
    }

    /// The watches stopped: every receiver closes (subscriptions, the
    /// change stream, `ready`), and the view stays as it was.
    pub(crate) fn stop(&mut self) {
        self.subscribers.clear();
        self.changes = None;
        self.ready = None;
    }

    /// Builds `name`'s view again; tells its subscribers and the change
    /// stream when it differs.
    fn refresh(&mut self, name: &ServiceName) {
        let view = self.services.get(name).map(|service| {
            let slices: Arc<[Arc<SliceContent>]> = self
                .slices
                .get(name)
                .into_iter()
                .flat_map(BTreeMap::values)
                .cloned()
                .collect();
            Arc::new(ServiceEndpoints::new(service.clone(), slices, self.reader_at.clone()))
        });
        if self.views.get(name) == view.as_ref() {
            return;
        }
        let addresses = |v: Option<&Arc<ServiceEndpoints>>| -> BTreeSet<IpAddr> {
            v.map(|v| {
                let endpoints = v.ports().iter().flat_map(|p| &p.endpoints).map(|e| e.addr.ip());
                v.service().cluster_ips.iter().copied().chain(endpoints).collect()
            })
            .unwrap_or_default()
        };
        let (before, after) = (addresses(self.views.get(name)), addresses(view.as_ref()));
        for ip in before.difference(&after) {
            if let Some(names) = self.by_address.get_mut(ip) {
                names.remove(name);
                if names.is_empty() {
                    self.by_address.remove(ip);
                }
            }
        }
        for ip in after.difference(&before) {
            self.by_address.entry(*ip).or_default().insert(name.clone());
        }
        match &view {
            Some(v) => self.views.insert(name.clone(), v.clone()),
            None => self.views.remove(name),
        };
        if let Some(tx) = self.subscribers.get(name) {
            tx.send_replace(view);
            if tx.receiver_count() == 0 {
                self.subscribers.remove(name);
            }
        }
        if let Some(changes) = &self.changes {
            let _ = changes.send(name.clone());
        }
    }

    fn listed(&mut self, which: fn(&mut Listed) -> &mut bool) {
        *which(&mut self.listed) = true;
        if let (true, true, Some(ready)) = (self.listed.services, self.listed.slices, &self.ready) {
            ready.send_replace(true);
        }
    }

    fn service_changed(&mut self, svc: &Service, deleted: bool) {
        match informer_glue::service_from_k8s(svc) {
            Ok((info, warnings)) => {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                let name = info.name.clone();
                if deleted {
                    self.services.remove(&name);
                } else {
                    self.services.insert(name.clone(), Arc::new(info));
                }
                self.refresh(&name);
            }
            Err(e) => tracing::warn!("{e}; skipped"),
        }
    }

    fn slice_changed(&mut self, slice: &EndpointSlice, deleted: bool) {
        if deleted {
            match informer_glue::slice_name_of(slice) {
                Ok(name) => self.forget_slice(&name),
                Err(e) => tracing::debug!("{e}"),
            }
            return;
        }
        match informer_glue::slice_with_facts_from_k8s(slice, &mut self.interner) {
            Ok((model, warnings)) => {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                let service = ServiceName::new(model.name.namespace.clone(), model.service.clone());
                if self.owner.get(&model.name) != Some(&service) {
                    // Moved to another service (relabelled): gone from the old one.
                    self.forget_slice(&model.name);
                    self.owner.insert(model.name.clone(), service.clone());
                }
                let slices = self.slices.entry(service.clone()).or_default();
                if slices.get(&model.name).is_some_and(|kept| **kept == model.content) {
                    return;
                }
                slices.insert(model.name, Arc::new(model.content));
                self.refresh(&service);
            }
            Err(e) => {
                tracing::warn!("{e}; skipped");
                // What it was filed under before is no longer right.
                if let Ok(name) = informer_glue::slice_name_of(slice) {
                    self.forget_slice(&name);
                }
            }
        }
    }

    fn forget_slice(&mut self, name: &SliceName) {
        let Some(service) = self.owner.remove(name) else { return };
        if let Some(slices) = self.slices.get_mut(&service) {
            slices.remove(name);
            if slices.is_empty() {
                self.slices.remove(&service);
            }
        }
        self.refresh(&service);
    }
}

/// Feeds Service events into the store.
pub(crate) struct Services(pub(crate) Arc<Mutex<Store>>);

impl EventHandler<Service> for Services {
    fn on_add(&mut self, obj: &Service) {
        lock(&self.0).service_changed(obj, false);
    }

    fn on_update(&mut self, _: &Service, new: &Service) {
        lock(&self.0).service_changed(new, false);
    }

    fn on_delete(&mut self, obj: &Service) {
        lock(&self.0).service_changed(obj, true);
    }

    fn on_synced(&mut self) {
        lock(&self.0).listed(|l| &mut l.services);
    }
}

/// Feeds EndpointSlice events into the store.
pub(crate) struct Slices(pub(crate) Arc<Mutex<Store>>);

impl EventHandler<EndpointSlice> for Slices {
    fn on_add(&mut self, obj: &EndpointSlice) {
        lock(&self.0).slice_changed(obj, false);
    }

    fn on_update(&mut self, _: &EndpointSlice, new: &EndpointSlice) {
        lock(&self.0).slice_changed(new, false);
    }

    fn on_delete(&mut self, obj: &EndpointSlice) {
        lock(&self.0).slice_changed(obj, true);
    }

    fn on_synced(&mut self) {
        lock(&self.0).listed(|l| &mut l.slices);
    }
}
