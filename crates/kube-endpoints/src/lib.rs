#![doc = include_str!("../README.md")]
//!
//! ```text
//!  kube::Client ─► watches (Services, EndpointSlices; lenient decoding)
//!                   │ event fold: relist-safe adds, updates, deletes
//!                   ▼
//!                 store (the writer) ─► per service: ServiceEndpoints ─► Reader::get
//!                                                   └─ watch::Sender ─► Reader::subscribe
//!                                                   └─ broadcast ────► Reader::changes
//! ```

#[cfg(feature = "tower")]
pub mod discover;
pub mod dns;
mod store;
mod view;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::{Arc, Mutex};

use informer_glue::feed::{Part, Scope};
use informer_glue::fold::EventFold;
use informer_glue::tombstone::{SlimServices, SlimSlices};
use informer_glue::watch_runner::{WatchMetrics, WatchSettings};
use kube::core::Selector;
use tokio::sync::{broadcast, watch as latest};

pub use endpoints_map::topology::{EndpointUse, TopologyMode};
pub use slice_cache::PortEndpoints;
pub use slice_model::{
    BaseEndpointInfo, EndpointFacts, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, ServiceType, TargetRef,
    TrafficPolicy,
};
pub use store::Latest;
pub use view::{Routing, ServiceEndpoints, Traffic};

use store::{Services, Slices, Store, lock};

/// Which services a reader keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Selection {
    /// Every Service, headless and ExternalName ones included (what a DNS
    /// server needs).
    #[default]
    All,
    /// What kube-proxy keeps: no headless services, none labelled with a
    /// `service.kubernetes.io/service-proxy-name`.
    KubeProxy,
}

/// What to watch, and from where topology is judged.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Only this namespace (`None`: every namespace).
    pub namespace: Option<String>,
    /// Only Services (and their slices, which carry the Service's labels)
    /// these labels select.
    pub label_selector: Selector,
    /// Which services to keep.
    pub selection: Selection,
    /// The node topology is judged from: its endpoints are local, and its
    /// node hints apply. `None`: no endpoint is local.
    pub node: Option<String>,
    /// The zone topology is judged from (zone hints).
    pub zone: Option<String>,
    /// Objects per list page (0: the watcher's default).
    pub page_size: u32,
}

/// A handle on the live endpoints; cheap to clone, for as many tasks as
/// need it.
#[derive(Clone)]
pub struct Reader {
    store: Arc<Mutex<Store>>,
    ready: latest::Receiver<bool>,
}

impl Reader {
    /// Waits until the first complete lists of Services and EndpointSlices
    /// are in (at once if they are). Returns early only if the watches
    /// were dropped before.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Whether the first lists are in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// A service's endpoints now; `None` when there is no such Service (a
    /// slice without its Service is held until the Service comes).
    pub fn get(&self, service: &ServiceName) -> Latest {
        lock(&self.store).get(service)
    }

    /// The services known now, sorted.
    pub fn services(&self) -> Vec<ServiceName> {
        lock(&self.store).names()
    }

    /// A receiver of `service`'s endpoints that changes only when they, or
    /// the Service, change; it holds `None` while there is no such
    /// Service.
    pub fn subscribe(&self, service: &ServiceName) -> latest::Receiver<Latest> {
        lock(&self.store).subscribe(service)
    }

    /// The name of every service whose endpoints or Service change, from
    /// now on. A receiver that falls more than 1,024 changes behind is
    /// told how many it missed (`RecvError::Lagged`): then read what it
    /// needs with [`Reader::get`].
    pub fn changes(&self) -> broadcast::Receiver<ServiceName> {
        lock(&self.store).changes()
    }
}

/// Starts watching Services and EndpointSlices through `client`: the
/// reader, and the future that runs the watches (spawn it; dropping it
/// stops them). Watches retry with backoff for as long as they run.
pub fn watch(client: kube::Client, config: Config) -> (Reader, impl Future<Output = ()> + Send + 'static) {
    let (store, ready) = Store::new(config.node.clone(), config.zone.clone());
    let store = Arc::new(Mutex::new(store));
    let reader = Reader {
        store: store.clone(),
        ready,
    };
    (reader, run(client, config, store))
}

async fn run(client: kube::Client, config: Config, store: Arc<Mutex<Store>>) {
    let kube_proxy = informer_glue::selection::Selection::default();
    let (mut services, mut slices) = (config.label_selector.clone(), config.label_selector.clone());
    if config.selection == Selection::KubeProxy {
        services.extend(kube_proxy.label_selector());
        slices.extend(kube_proxy.slice_label_selector());
    }
    let settings = |label_selector| WatchSettings {
        label_selector,
        field_selector: None,
        page_size: if config.page_size == 0 { 500 } else { config.page_size },
        relist_every: None,
    };
    let scope = Scope {
        namespace: config.namespace.clone(),
        services: settings(services),
        slices: settings(slices),
    };
    let service_fold = match config.selection {
        Selection::All => EventFold::new(),
        Selection::KubeProxy => EventFold::with_selection(move |s| kube_proxy.selects_service(s)),
    };
    let services = Part {
        fold: service_fold.keeping(SlimServices),
        handler: Services(store.clone()),
        metrics: Arc::new(WatchMetrics::default()),
    };
    let slices = Part {
        fold: EventFold::new().keeping(SlimSlices),
        handler: Slices(store),
        metrics: Arc::new(WatchMetrics::default()),
    };
    let (services, slices) =
        informer_glue::feed::services_and_slices(client, scope, services, slices, std::future::pending::<()>);
    futures::join!(services, slices);
}
