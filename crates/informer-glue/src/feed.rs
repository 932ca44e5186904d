//! The feed every user of this crate starts: the Services and
//! EndpointSlices watches, each decoding objects leniently
//! ([`crate::lenient`]), folding events relist-safely ([`EventFold`]) and
//! retrying with backoff ([`run_watch`]), into the caller's handlers. The
//! proxy daemon and `kube-endpoints`' reader both run this one; they
//! differ only in their handlers and folds.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;

use crate::fold::{EventFold, EventHandler};
use crate::lenient::Watched;
use crate::liveness::{Liveness, Probe};
use crate::tombstone::{SlimServices, SlimSlices};
use crate::watch_runner::{WatchMetrics, WatchSettings, run_watch};

/// One kind's part of the feed: its fold, its handler, its counters.
pub struct Part<K: Clone, P: crate::fold::Keep<K>, H> {
    /// The fold (with the caller's selection, keeping slim records).
    pub fold: EventFold<K, P>,
    /// Where the objects go.
    pub handler: H,
    /// The watch's counters.
    pub metrics: Arc<WatchMetrics>,
}

/// Where to watch and how.
#[derive(Clone, Debug)]
pub struct Scope {
    /// One namespace, or all (`None`).
    pub namespace: Option<String>,
    /// Services' list and watch settings (label selector, page size,
    /// periodic relist).
    pub services: WatchSettings,
    /// EndpointSlices' list and watch settings.
    pub slices: WatchSettings,
}

/// The Services and EndpointSlices watches through `client`, each until
/// the future `shutdown` makes for it completes (it is called once per
/// watch). Two futures, so that a caller can spawn them as two tasks: a
/// large cluster's two first lists then decode on two threads.
pub fn services_and_slices<S, E, F>(
    client: kube::Client,
    scope: Scope,
    services: Part<Service, SlimServices, S>,
    slices: Part<EndpointSlice, SlimSlices, E>,
    shutdown: impl Fn() -> F,
) -> (impl Future<Output = S>, impl Future<Output = E>)
where
    S: EventHandler<Service>,
    E: EventHandler<EndpointSlice>,
    F: Future<Output = ()>,
{
    let mut scope = scope;
    // The two watches share one probe of a quiet API server unless the
    // caller gave theirs.
    if scope.services.liveness.is_none() || scope.slices.liveness.is_none() {
        let shared = Arc::new(Liveness::new(client.clone(), Probe::default()));
        for settings in [&mut scope.services, &mut scope.slices] {
            settings.liveness.get_or_insert_with(|| shared.clone());
        }
    }
    let (services_api, slices_api): (Api<Watched<Service>>, Api<Watched<EndpointSlice>>) = match &scope.namespace {
        Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client, ns)),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    (
        run_watch(
            services_api,
            scope.services,
            services.fold,
            services.handler,
            services.metrics,
            shutdown(),
        ),
        run_watch(
            slices_api,
            scope.slices,
            slices.fold,
            slices.handler,
            slices.metrics,
            shutdown(),
        ),
    )
}
