//! [`MultusProxier`]: one family's engine, and a table and routes in each
//! target pod's namespace, rewritten only where a change lands.
//!
//! A sync applies the pending changes to the engine's maps, then visits the
//! pods on this node: a pod whose services (those on its networks) did not
//! change, and which did not change itself, is not touched; the others get
//! a partial sync of their table (a full one when the set of services they
//! get changed), their routes reconciled and their stale UDP conntrack
//! entries deleted. One pod's failure never stops the others.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use informer_glue::multus::{PodStore, ServiceNetworks};
use nft_dataplane::conntrack::Flow;
use nft_dataplane::{Dataplane, DataplaneConfig, NftSyncer, SyncKind};
use slice_model::{IpFamily, ServiceName};

use super::plan::{PodPlan, Route, plan_pod};
use super::resolver::{PodNetnsResolver, ResolveError};
use super::routes::RouteChange;
use crate::conntrack::ConntrackError;
use crate::engine::Engine;
use crate::netns::Netns;

/// What a pod's namespace is changed with: the real commands, a dry run,
/// or (in tests) models.
pub trait PodBackend: Send {
    /// The dataplane that applies transactions in `pod`'s namespace.
    fn dataplane(&mut self, pod: &str, netns: &Netns) -> Box<dyn Dataplane + Send>;
    /// Makes proxyd's routes of `family` in the namespace exactly `want`.
    fn routes(
        &mut self,
        pod: &str,
        netns: &Netns,
        family: IpFamily,
        want: &BTreeSet<Route>,
    ) -> Result<RouteChange, String>;
    /// Deletes conntrack entries in the namespace.
    fn conntrack(&mut self, pod: &str, netns: &Netns, family: IpFamily, flows: &[Flow]) -> (u64, Vec<ConntrackError>);
    /// Removes proxyd's table of `family` from the namespace.
    fn remove_table(&mut self, pod: &str, netns: &Netns, family: IpFamily) -> Result<(), String>;
}

/// One target pod.
struct PodState {
    netns: Netns,
    syncer: NftSyncer<Box<dyn Dataplane + Send>>,
    plan: PodPlan,
    routes_in_place: bool,
}

/// What one multus sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultusSync {
    /// Services whose ports or endpoints changed.
    pub changed_services: usize,
    /// Pods with a table after the sync.
    pub programmed_pods: usize,
    /// Pods whose table was written (one nft transaction each).
    pub transactions: usize,
    /// Pods whose routes changed.
    pub route_changes: usize,
    /// Conntrack entries deleted.
    pub conntrack_deleted: u64,
    /// `(pod, why)` for each pod that could not be brought up to date.
    pub failures: Vec<(String, String)>,
    /// Pods whose namespace the runtime could not be asked about.
    pub runtime_errors: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One family's multus proxier.
pub struct MultusProxier {
    /// The engine.
    pub engine: Engine,
    /// The family.
    pub family: IpFamily,
    pods: Arc<Mutex<PodStore>>,
    networks: Arc<Mutex<ServiceNetworks>>,
    resolver: Box<dyn PodNetnsResolver>,
    backend: Box<dyn PodBackend>,
    state: BTreeMap<String, PodState>,
    /// Pods whose namespace is gone: warned about once, tried again only
    /// when the pod changes.
    gone: BTreeSet<String>,
    networks_version: Option<u64>,
}

impl MultusProxier {
    /// A proxier over `engine` for the pods in `pods`.
    pub fn new(
        engine: Engine,
        family: IpFamily,
        pods: Arc<Mutex<PodStore>>,
        networks: Arc<Mutex<ServiceNetworks>>,
        resolver: Box<dyn PodNetnsResolver>,
        backend: Box<dyn PodBackend>,
    ) -> Self {
        Self {
            engine,
            family,
            pods,
            networks,
            resolver,
            backend,
            state: BTreeMap::new(),
            gone: BTreeSet::new(),
            networks_version: None,
        }
    }

    /// The pods programmed now and the services each gets.
    pub fn programmed(&self) -> BTreeMap<String, BTreeSet<ServiceName>> {
        self.state
            .iter()
            .map(|(k, s)| (k.clone(), s.plan.services.clone()))
            .collect()
    }

    /// Deletes the stale UDP entries among `flows` to the cluster IPs of
    /// `routes` in a pod's namespace.
    fn clear_stale(
        &mut self,
        key: &str,
        netns: &Netns,
        routes: &BTreeSet<Route>,
        flows: &[Flow],
        out: &mut MultusSync,
    ) {
        let cluster_ips: BTreeSet<_> = routes.iter().map(|r| r.dest).collect();
        let mine: Vec<Flow> = flows
            .iter()
            .filter(|f| match f {
                Flow::ToFrontend { addr, .. } | Flow::FrontendToEndpoint { addr, .. } | Flow::ToAddress { addr } => {
                    cluster_ips.contains(addr)
                }
                Flow::ToNodePort { .. } | Flow::NodePortToEndpoint { .. } => false,
            })
            .copied()
            .collect();
        if mine.is_empty() {
            return;
        }
        let (deleted, errors) = self.backend.conntrack(key, netns, self.family, &mine);
        out.conntrack_deleted += deleted;
        for e in errors {
            tracing::warn!(pod = %key, "conntrack cleanup: {e}");
        }
    }

    fn drop_pod(&mut self, key: &str) {
        if let Some(st) = self.state.remove(key) {
            // The namespace may be gone with the pod: then there is
            // nothing to remove.
            let cleared = self
                .backend
                .remove_table(key, &st.netns, self.family)
                .and_then(|()| self.backend.routes(key, &st.netns, self.family, &BTreeSet::new()));
            if let Err(e) = cleared {
                tracing::debug!(pod = %key, "nothing removed from its namespace: {e}");
            }
        }
    }

    /// Brings every target pod's namespace in line with the maps.
    pub fn sync(&mut self, kind: SyncKind) -> MultusSync {
        let update = self.engine.update();
        let mut out = MultusSync {
            changed_services: update.changed.len(),
            ..MultusSync::default()
        };
        let (pods, dirty) = {
            let mut store = lock(&self.pods);
            (store.pods.clone(), store.take_dirty())
        };
        let (networks, version) = {
            let n = lock(&self.networks);
            (n.by_service.clone(), n.version)
        };
        self.networks_version = Some(version);
        let gone_pods: Vec<String> = self.state.keys().filter(|k| !pods.contains_key(*k)).cloned().collect();
        for key in gone_pods {
            self.drop_pod(&key);
        }
        self.gone.retain(|k| pods.contains_key(k) && !dirty.contains(k));
        let stale_flows = crate::conntrack::plan(&update, &self.engine.services);

        for (key, pod) in &pods {
            let plan = match plan_pod(pod, &networks, &self.engine.services, self.family) {
                Ok(p) => p,
                Err(skip) => {
                    if let Some(st) = self.state.get(key) {
                        tracing::info!(pod = %key, "no longer served ({skip}): its table and routes are removed");
                        // The pod lives on: its flows to services that
                        // went away are cleared as for any other pod.
                        let (netns, routes) = (st.netns.clone(), st.plan.routes.clone());
                        self.drop_pod(key);
                        self.clear_stale(key, &netns, &routes, &stale_flows, &mut out);
                    }
                    continue;
                }
            };
            if self.gone.contains(key) {
                continue;
            }
            if !self.state.contains_key(key) {
                match self.resolver.resolve(pod) {
                    Ok(path) => {
                        let netns = Netns::Path(path);
                        let dataplane = self.backend.dataplane(key, &netns);
                        self.state.insert(
                            key.clone(),
                            PodState {
                                netns,
                                syncer: NftSyncer::new(DataplaneConfig::pod(self.family), dataplane),
                                plan: PodPlan::default(),
                                routes_in_place: false,
                            },
                        );
                    }
                    Err(ResolveError::Gone(why)) => {
                        tracing::warn!(pod = %key, "not programmed: {why}");
                        self.gone.insert(key.clone());
                        out.failures.push((key.clone(), why));
                        continue;
                    }
                    Err(ResolveError::Unavailable(why)) => {
                        tracing::warn!(pod = %key, "not programmed yet, retried at the next sync: {why}");
                        out.runtime_errors += 1;
                        continue;
                    }
                }
            }
            let Some(st) = self.state.get_mut(key) else {
                continue;
            };
            let selection_changed = st.plan.services != plan.services;
            if selection_changed {
                let served = plan.services.clone();
                st.syncer.set_filter(Box::new(move |n| served.contains(n)));
            }
            let touched: BTreeSet<ServiceName> = update.changed.intersection(&plan.services).cloned().collect();
            let write = kind == SyncKind::Periodic || !touched.is_empty() || st.syncer.needs_full_sync();
            if write {
                match st
                    .syncer
                    .sync(&self.engine.services, &self.engine.endpoints, &touched, kind)
                {
                    Ok(r) if r.full || r.services_written > 0 || r.script_bytes > 0 => out.transactions += 1,
                    Ok(_) => {}
                    Err(e) => {
                        let missing = matches!(&st.netns, Netns::Path(p) if !p.exists());
                        tracing::warn!(pod = %key, "table not written: {e}");
                        out.failures.push((key.clone(), e.to_string()));
                        if missing {
                            // Its namespace went away: forget it until the
                            // pod changes, without a retry loop.
                            self.state.remove(key);
                            self.gone.insert(key.clone());
                        }
                        continue;
                    }
                }
            }
            if st.plan.routes != plan.routes || !st.routes_in_place || kind == SyncKind::Periodic {
                match self.backend.routes(key, &st.netns, self.family, &plan.routes) {
                    Ok(change) => {
                        st.routes_in_place = true;
                        if change != RouteChange::default() {
                            out.route_changes += 1;
                        }
                    }
                    Err(e) => {
                        st.routes_in_place = false;
                        tracing::warn!(pod = %key, "routes not set: {e}");
                        out.failures.push((key.clone(), e));
                    }
                }
            }
            // Entries to a deleted service's cluster IP: the old plan knew it.
            let routes: BTreeSet<Route> = plan.routes.union(&st.plan.routes).cloned().collect();
            let netns = st.netns.clone();
            st.plan = plan;
            self.clear_stale(key, &netns, &routes, &stale_flows, &mut out);
        }
        out.programmed_pods = self.state.len();
        out
    }
}
