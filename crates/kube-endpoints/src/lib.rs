#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! ```text
//!  kube::Client ─► watches (Services, EndpointSlices; lenient decoding)
//!                   │ event fold: relist-safe adds, updates, deletes
//!                   ▼
//!                 store (the writer) ─► per service: ServiceEndpoints ─► Reader::get
//!                                                   └─ latest value ─► Reader::subscribe (Subscription)
//!                                                   └─ every name ───► Reader::changes (Changes)
//! ```

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod discover;
pub mod dns;
mod store;
mod subscription;
mod view;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use informer_glue::feed::{Part, Scope};
use informer_glue::fold::EventFold;
use informer_glue::liveness::Liveness;
use informer_glue::tombstone::{SlimServices, SlimSlices};
use informer_glue::watch_runner::{WatchMetrics, WatchSettings};
use tokio::sync::watch as latest;

#[cfg(feature = "tower")]
pub use discover::{Discovered, Discovery};
pub use endpoints_map::topology::{EndpointUse, TopologyMode};
pub use informer_glue::liveness::{Probe, guard_connections};
pub use informer_glue::watch_error::WatchError;
/// The label selector type of [`Config::label_selector`] (kube's).
pub use kube::core::Selector;
pub use slice_cache::PortEndpoints;
// Every type the reader's views name, so that an application needs no
// other crate to use them; each keeps its own summary in the index.
pub use slice_model::{
    BaseEndpointInfo, Conditions, Endpoint, EndpointFacts, IpFamily, IpNet, NamespacedName, NodeHint, Protocol,
    RawTargetRef, ServiceInfo, ServiceName, ServicePort, ServicePortInfo, ServicePortName, ServiceType, TargetRef,
    TrafficPolicy, UnknownIpFamily, UnknownProtocol, ZoneHints,
};
pub use store::Latest;
pub use subscription::{CHANGES_KEPT, Changes, ChangesError, Stopped, Subscription};
pub use view::{Location, Routing, ServiceEndpoints, Traffic};

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
    /// How long [`Reader::wait_until_ready`] waits for the first lists before it
    /// gives up on a watch that is failing (a refused token, a role that
    /// may not list, an API server out of reach); `None`:
    /// [`DEFAULT_READY_TIMEOUT`]. A watch that is slow but not failing is
    /// waited for.
    pub ready_timeout: Option<Duration>,
    /// How an API server that stops answering without closing its
    /// connections is noticed (see [`Probe`]); `None`: [`Probe::default`],
    /// client-go's figures, so that [`Reader::status`] turns
    /// [`Status::Stale`] at most 45 s after the server last said anything.
    pub probe: Option<Probe>,
}

/// [`Config::ready_timeout`]'s default: 30 seconds.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How current a reader's view is ([`Reader::status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// The first lists are not in yet, and no watch has failed.
    Starting,
    /// Every watch works: the view is the API server's as of its last
    /// event.
    Current,
    /// A watch has been failing since `since`: changes made since may be
    /// missing from the view (before the first lists: the view is
    /// incomplete).
    Stale {
        /// When the first of the failing watches started failing.
        since: SystemTime,
        /// Each failing watch.
        failing: Vec<WatchFailure>,
    },
    /// The watches were stopped (the future [`watch`] returned was
    /// dropped): the view is frozen, and every subscription and change
    /// stream has closed.
    Stopped,
}

/// A watch that is failing, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchFailure {
    /// What it watches: `Service` or `EndpointSlice`.
    pub kind: &'static str,
    /// Since when.
    pub since: SystemTime,
    /// Its last error: the API server's answer with its HTTP status
    /// ([`WatchError::status`]: 401, 403, ...), no answer, an unusable
    /// answer, or the stream ended.
    pub error: WatchError,
}

/// Why [`Reader::wait_until_ready`] gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// The watches were stopped (the future [`watch`] returned was
    /// dropped), before or after the first lists came: the view will not
    /// change any more.
    Stopped,
    /// The first lists were not in after the ready timeout, and a watch is
    /// failing (the watches go on retrying).
    Failing {
        /// How long [`Reader::wait_until_ready`] waited.
        waited: Duration,
        /// Each failing watch.
        failing: Vec<WatchFailure>,
    },
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("the watches stopped before the first lists were in"),
            Self::Failing { waited, failing } => {
                write!(f, "the first lists are not in after {waited:?}:")?;
                for w in failing {
                    write!(f, " {} watch failing: {};", w.kind, w.error)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for NotReady {}

/// A handle on the live endpoints; cheap to clone, for as many tasks as
/// need it.
#[derive(Clone)]
pub struct Reader {
    store: Arc<Mutex<Store>>,
    ready: latest::Receiver<bool>,
    watches: Arc<Watches>,
    ready_timeout: Duration,
}

/// The counters of the reader's two watches.
struct Watches {
    services: Arc<WatchMetrics>,
    slices: Arc<WatchMetrics>,
}

impl Watches {
    fn failing(&self, now: SystemTime) -> Vec<WatchFailure> {
        [("Service", &self.services), ("EndpointSlice", &self.slices)]
            .into_iter()
            .filter_map(|(kind, w)| {
                let down = w.down_for(now)?;
                Some(WatchFailure {
                    kind,
                    since: now.checked_sub(down).unwrap_or(now),
                    error: w.last_error().unwrap_or(WatchError::Ended),
                })
            })
            .collect()
    }
}

impl Reader {
    /// Waits until the first complete lists of Services and EndpointSlices
    /// are in (at once if they are). Gives up with [`NotReady::Failing`]
    /// once [`Config::ready_timeout`] has passed while a watch is failing
    /// (a refused token, a role that may not list, an API server out of
    /// reach: the watches go on retrying), and with [`NotReady::Stopped`]
    /// when the watches were stopped.
    pub async fn wait_until_ready(&self) -> Result<(), NotReady> {
        let started = tokio::time::Instant::now();
        let mut deadline = started + self.ready_timeout;
        let mut ready = self.ready.clone();
        loop {
            tokio::select! {
                listed = ready.wait_for(|r| *r) => {
                    return match listed {
                        Ok(_) if !lock(&self.store).stopped() => Ok(()),
                        _ => Err(NotReady::Stopped),
                    };
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
            let failing = self.watches.failing(SystemTime::now());
            if !failing.is_empty() {
                return Err(NotReady::Failing {
                    waited: started.elapsed(),
                    failing,
                });
            }
            // Slow, not failing: look again in a second.
            deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        }
    }

    /// Whether the first lists are in and the watches run.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow() && !lock(&self.store).stopped()
    }

    /// How current the view is now: starting, current, stale since when
    /// and why, or stopped.
    pub fn status(&self) -> Status {
        if lock(&self.store).stopped() {
            return Status::Stopped;
        }
        let failing = self.watches.failing(SystemTime::now());
        if let Some(since) = failing.iter().map(|f| f.since).min() {
            return Status::Stale { since, failing };
        }
        if *self.ready.borrow() {
            Status::Current
        } else {
            Status::Starting
        }
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

    /// The services one of whose cluster IPs or endpoints is `ip`, sorted
    /// (kept as an index: no service is visited to answer).
    pub fn services_at(&self, ip: std::net::IpAddr) -> Vec<ServiceName> {
        lock(&self.store).services_at(ip)
    }

    /// `service`'s latest endpoints, changing only when they, or the
    /// Service, change; `None` while there is no such Service. Any name
    /// may be asked for: a dropped subscription costs nothing.
    pub fn subscribe(&self, service: &ServiceName) -> Subscription {
        Subscription::new(lock(&self.store).subscribe(service))
    }

    /// The name of every service whose endpoints or Service change, from
    /// now on (a reader that falls more than [`CHANGES_KEPT`] names behind
    /// is told how many it missed).
    pub fn changes(&self) -> Changes {
        Changes::new(lock(&self.store).changes())
    }
}

/// Starts watching Services and EndpointSlices through `client`: the
/// reader, and the future that runs the watches (spawn it). Watches retry
/// with backoff for as long as they run. Dropping the future stops them,
/// and the readers say so: every subscription and change stream closes,
/// [`Reader::wait_until_ready`] returns [`NotReady::Stopped`], and
/// [`Reader::status`] is [`Status::Stopped`]. A future that is held but
/// never polled runs nothing: the readers stay [`Status::Starting`] (and
/// `wait_until_ready` waits) until it is polled or dropped.
pub fn watch(client: kube::Client, config: Config) -> (Reader, impl Future<Output = ()> + Send + 'static) {
    let (store, ready) = Store::new(Location {
        node: config.node.clone(),
        zone: config.zone.clone(),
    });
    let store = Arc::new(Mutex::new(store));
    let watches = Arc::new(Watches {
        services: Arc::default(),
        slices: Arc::default(),
    });
    let reader = Reader {
        store: store.clone(),
        ready,
        watches: watches.clone(),
        ready_timeout: config.ready_timeout.unwrap_or(DEFAULT_READY_TIMEOUT),
    };
    // Dropped with the future, polled or not.
    let stop = StopOnDrop(store.clone());
    let run = run(client, config, store, watches);
    (reader, async move {
        let _stop = stop;
        run.await;
    })
}

/// Stops the store when the watches' future goes.
struct StopOnDrop(Arc<Mutex<Store>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        lock(&self.0).stop();
    }
}

async fn run(client: kube::Client, config: Config, store: Arc<Mutex<Store>>, watches: Arc<Watches>) {
    let kube_proxy = informer_glue::selection::Selection::default();
    let (mut services, mut slices) = (config.label_selector.clone(), config.label_selector.clone());
    if config.selection == Selection::KubeProxy {
        services.extend(kube_proxy.label_selector());
        slices.extend(kube_proxy.slice_label_selector());
    }
    let liveness = Arc::new(Liveness::new(client.clone(), config.probe.unwrap_or_default()));
    let settings = |label_selector| WatchSettings {
        label_selector,
        field_selector: None,
        page_size: if config.page_size == 0 { 500 } else { config.page_size },
        relist_every: None,
        liveness: Some(liveness.clone()),
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
        metrics: watches.services.clone(),
    };
    let slices = Part {
        fold: EventFold::new().keeping(SlimSlices),
        handler: Slices(store),
        metrics: watches.slices.clone(),
    };
    let (services, slices) =
        informer_glue::feed::services_and_slices(client, scope, services, slices, std::future::pending::<()>);
    futures::join!(services, slices);
}
