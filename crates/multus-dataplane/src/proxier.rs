//! [`MultusProxier`]: one family's engine, and a table and routes in each
//! target pod's namespace, rewritten only where a change lands.
//!
//! A sync applies the pending changes to the engine's maps, then visits the
//! pods on this node. Every served pod's namespace is looked up again (one
//! runtime list per sync): a pod whose sandbox was re-created has a new
//! namespace, with nothing on the Pod object changed, and is programmed
//! there afresh. A pod whose services (those on its networks) did not
//! change, and which did not change itself, is not written; the others get
//! a partial sync of their table (a full one when the set of services they
//! get changed), their routes reconciled and their stale UDP conntrack
//! entries deleted. A pod that cannot be brought up to date (no namespace
//! yet, the runtime down, a failed write) is pending: named in the sync's
//! result and retried until it is programmed or gone. One pod's failure
//! never stops the others.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use endpoints_map::Engine;
use informer_glue::multus::{PodStore, ServiceNetworks};
use linux_dataplane::{ConntrackError, Netns, NetnsId, RouteChange, RouteError};
use nft_dataplane::stale_flows::Cleanup;
use nft_dataplane::{Dataplane, DataplaneConfig, DataplaneError, NftSyncer, SyncKind, Target, Written};
use node_proxy::family::{FamilyProxier, FamilySync, PodProblem, PodsSync};
use slice_model::{IpFamily, PodName, ServiceName};

use super::plan::{PodPlan, Route, plan_pod};
use super::resolver::{PodNetnsResolver, ResolveError};
use crate::lock;

/// What a pod's namespace is changed with: the real commands, a dry run,
/// or (in tests) models.
pub trait PodBackend: Send {
    /// The dataplane that applies transactions in `pod`'s namespace.
    fn dataplane(&mut self, pod: &PodName, netns: &Netns) -> Box<dyn Dataplane + Send>;
    /// Makes proxyd's routes of `family` in the namespace exactly `want`.
    fn routes(
        &mut self,
        pod: &PodName,
        netns: &Netns,
        family: IpFamily,
        want: &BTreeSet<Route>,
    ) -> Result<RouteChange, RouteError>;
    /// Deletes conntrack entries in the namespace.
    fn conntrack(
        &mut self,
        pod: &PodName,
        netns: &Netns,
        family: IpFamily,
        cleanup: &Cleanup,
    ) -> (u64, Vec<ConntrackError>);
    /// Removes proxyd's table of `family` from the namespace.
    fn remove_table(&mut self, pod: &PodName, netns: &Netns, family: IpFamily) -> Result<(), DataplaneError>;
    /// Which namespace `netns` names now; `None` when it is gone.
    fn identify(&mut self, netns: &Netns) -> Option<NetnsId> {
        netns.identity()
    }
}

/// One target pod.
struct PodState {
    netns: Netns,
    /// The namespace programmed: a new one at the same path is not it.
    netns_id: NetnsId,
    /// The pod's table and what it owes (the node's proxier runs the same
    /// machine).
    target: Target<Box<dyn Dataplane + Send>>,
    plan: PodPlan,
    routes_in_place: bool,
}

/// Deletes the conntrack entries `cleanup` names in a pod's namespace,
/// counting them in `out`; what could not be deleted is a warning.
fn delete_flows(
    backend: &mut dyn PodBackend,
    key: &PodName,
    netns: &Netns,
    family: IpFamily,
    cleanup: &Cleanup,
    out: &mut FamilySync,
) {
    if cleanup.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    let (deleted, errors) = backend.conntrack(key, netns, family, cleanup);
    out.conntrack_flows += cleanup.len();
    out.conntrack_deleted += deleted;
    out.conntrack_duration += started.elapsed();
    // Said here, with the pod: the report's list is the node's.
    for e in errors {
        tracing::warn!(pod = %key, "conntrack cleanup: {e}");
    }
}

/// A pod's key, its plan, and whether its table is written now.
type Planned = (PodName, PodPlan, bool);

/// The pods' part of a multus sync's report.
fn pods_out(out: &mut FamilySync) -> &mut PodsSync {
    out.pods.get_or_insert_with(PodsSync::default)
}

/// How many pods' tables are written at once.
const WRITERS: usize = 8;

/// One family's multus proxier.
pub struct MultusProxier {
    /// The engine.
    pub engine: Engine,
    pods: Arc<Mutex<PodStore>>,
    networks: Arc<Mutex<ServiceNetworks>>,
    resolver: Box<dyn PodNetnsResolver>,
    backend: Box<dyn PodBackend>,
    state: BTreeMap<PodName, PodState>,
    /// Served pods not programmed up to date, and why: said when a pod
    /// enters or leaves it, not at every retry.
    pending: BTreeMap<PodName, PodProblem>,
    /// Every pod table's configuration.
    pod_config: DataplaneConfig,
}

impl MultusProxier {
    /// A proxier over `engine` for the pods in `pods`.
    pub fn new(
        engine: Engine,
        pods: Arc<Mutex<PodStore>>,
        networks: Arc<Mutex<ServiceNetworks>>,
        resolver: Box<dyn PodNetnsResolver>,
        backend: Box<dyn PodBackend>,
    ) -> Self {
        let family = engine.family();
        Self {
            engine,
            pods,
            networks,
            resolver,
            backend,
            state: BTreeMap::new(),
            pending: BTreeMap::new(),
            pod_config: DataplaneConfig::pod(family),
        }
    }

    /// Has the writer make the kernel refuse `service`'s rules in every
    /// pod's table ([`DataplaneConfig::refuse_for_tests`]).
    pub fn set_refuse_for_tests(&mut self, service: Option<slice_model::ServiceName>) {
        self.pod_config.refuse_for_tests = service;
    }

    /// The pods programmed now and the services each gets.
    pub fn programmed(&self) -> BTreeMap<PodName, BTreeSet<ServiceName>> {
        self.state
            .iter()
            .map(|(k, s)| (k.clone(), s.plan.services.clone()))
            .collect()
    }

    /// Deletes what `cleanup` names of the cluster IPs of `routes` (a pod
    /// reaches services through their cluster IPs only) in a pod's
    /// namespace.
    fn clear_stale(
        &mut self,
        key: &PodName,
        netns: &Netns,
        routes: &BTreeSet<Route>,
        cleanup: &Cleanup,
        out: &mut FamilySync,
    ) {
        let cluster_ips: BTreeSet<_> = routes.iter().map(|r| r.dest).collect();
        let mine = cleanup.only_addresses(|a| cluster_ips.contains(a));
        delete_flows(self.backend.as_mut(), key, netns, self.engine.family(), &mine, out);
    }

    fn drop_pod(&mut self, key: &PodName) {
        if let Some(st) = self.state.remove(key) {
            // Routes first, so that once the table is gone they are too. The
            // namespace may have gone with the pod: nothing to remove then.
            let cleared = match self
                .backend
                .routes(key, &st.netns, self.engine.family(), &BTreeSet::new())
            {
                Ok(_) => self
                    .backend
                    .remove_table(key, &st.netns, self.engine.family())
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = cleared {
                tracing::debug!(pod = %key, "nothing removed from its namespace: {e}");
            }
        }
    }

    /// Writes the tables of the planned pods marked for a write, a few at a
    /// time: per pod, what its target's sync handed over, or its error.
    fn write_tables(
        &mut self,
        planned: &[Planned],
        kind: SyncKind,
    ) -> BTreeMap<PodName, Result<Written, DataplaneError>> {
        let (services, endpoints) = (&self.engine.services, &self.engine.endpoints);
        let wanted: BTreeSet<&PodName> = planned
            .iter()
            .filter(|(_, _, write)| *write)
            .map(|(k, _, _)| k)
            .collect();
        let mut jobs: Vec<(&PodName, &mut PodState)> =
            self.state.iter_mut().filter(|(k, _)| wanted.contains(k)).collect();
        let per_worker = jobs.len().div_ceil(WRITERS).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .chunks_mut(per_worker)
                .map(|chunk| {
                    scope.spawn(move || {
                        chunk
                            .iter_mut()
                            .map(|(key, st)| {
                                // What the syncer says of a refused service names the pod.
                                let _pod = tracing::info_span!("pod", pod = %key).entered();
                                let r = st.target.sync(services, endpoints, kind);
                                ((*key).clone(), r)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        tracing::error!("a table writer panicked; its pods are written at the next sync");
                        Vec::new()
                    })
                })
                .collect()
        })
    }

    /// Finds `pod`'s namespace now and makes its state follow it: a new
    /// pod, or one whose namespace changed (a re-created sandbox), starts
    /// afresh there. `Err`: why it cannot be programmed now.
    fn follow_namespace(
        &mut self,
        key: &PodName,
        pod: &informer_glue::multus::PodInfo,
        out: &mut FamilySync,
    ) -> Result<(), PodProblem> {
        let path = match self.resolver.resolve(pod) {
            Ok(path) => path,
            // The runtime cannot be asked: a programmed pod keeps its
            // state (its rules stay, and are kept up to date).
            Err(ResolveError::Unavailable(why)) => {
                pods_out(out).runtime_errors += 1;
                return if self.state.contains_key(key) {
                    Ok(())
                } else {
                    Err(PodProblem::NoNamespace(why))
                };
            }
            Err(ResolveError::Gone(why)) => {
                if self.state.contains_key(key) {
                    tracing::info!(pod = %key, "the pod's sandbox is gone ({why}): programmed again once it has a new one");
                    self.drop_pod(key);
                }
                return Err(PodProblem::NoNamespace(why));
            }
        };
        let netns = Netns::Path(path);
        let Some(id) = self.backend.identify(&netns) else {
            // Gone: nothing in it to clean up.
            self.state.remove(key);
            return Err(PodProblem::NamespaceGone(netns));
        };
        if let Some(st) = self.state.get(key)
            && (st.netns != netns || st.netns_id != id)
        {
            tracing::info!(pod = %key, from = ?st.netns, to = ?netns, "the pod's network namespace changed (a new sandbox): programming the new one");
            // The old namespace is no longer the pod's: left as it is.
            self.state.remove(key);
        }
        if !self.state.contains_key(key) {
            let dataplane = self.backend.dataplane(key, &netns);
            self.state.insert(
                key.clone(),
                PodState {
                    netns,
                    netns_id: id,
                    target: Target::new(NftSyncer::new(self.pod_config.clone(), dataplane)),
                    plan: PodPlan::default(),
                    routes_in_place: false,
                },
            );
        }
        Ok(())
    }

    /// Brings every target pod's namespace in line with the maps.
    pub fn sync(&mut self, kind: SyncKind) -> FamilySync {
        let started = std::time::Instant::now();
        let update = self.engine.update();
        let mut out = FamilySync {
            changed: update.changed.clone(),
            endpoint_changes: update.endpoints.changed_services.len() as u64,
            service_changes: update.services.updated_services.len() as u64,
            ..FamilySync::default()
        };
        let pods = lock(&self.pods).pods.clone();
        let networks = lock(&self.networks).by_service.clone();
        let gone_pods: Vec<PodName> = self.state.keys().filter(|k| !pods.contains_key(*k)).cloned().collect();
        for key in gone_pods {
            self.drop_pod(&key);
        }
        let stale_flows = nft_dataplane::stale_flows::plan(&update, &self.engine.services, &self.engine.endpoints);
        // One look at the runtime for the whole sync; a failure shows in
        // each lookup below.
        let _ = self.resolver.refresh();

        // First each pod's plan, namespace and filter; then the tables;
        // then routes and conntrack.
        let mut planned: Vec<Planned> = Vec::new();
        let mut pending: BTreeMap<PodName, PodProblem> = BTreeMap::new();
        for (key, pod) in &pods {
            let plan = match plan_pod(pod, &networks, &self.engine.services, self.engine.family()) {
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
            if let Err(why) = self.follow_namespace(key, pod, &mut out) {
                pending.insert(key.clone(), why);
                continue;
            }
            let Some(st) = self.state.get_mut(key) else {
                continue;
            };
            let selection_changed = st.plan.services != plan.services;
            if selection_changed {
                let served = plan.services.clone();
                st.target.syncer_mut().set_filter(Box::new(move |n| served.contains(n)));
            }
            // Entries to a deleted service's cluster IP: the old plan knew it.
            let cluster_ips: BTreeSet<IpAddr> = plan.routes.iter().chain(&st.plan.routes).map(|r| r.dest).collect();
            let mine = stale_flows.only_addresses(|a| cluster_ips.contains(a));
            st.target.owe(&update, mine, |s| plan.services.contains(s));
            let write = kind == SyncKind::Periodic || st.target.owes();
            planned.push((key.clone(), plan, write));
        }

        // Each pod's table is its own nft transaction, mostly waiting on
        // the kernel: written by a few threads at once.
        let mut written = self.write_tables(&planned, kind);
        for (key, plan, _) in planned {
            let Some(st) = self.state.get_mut(&key) else {
                continue;
            };
            let flows = match written.remove(&key) {
                Some(Ok(w)) => {
                    let r = &w.report;
                    if r.full || r.services_written > 0 || r.script_bytes > 0 {
                        pods_out(&mut out).written += 1;
                    }
                    out.written += w.report;
                    out.trigger_times.extend(w.trigger_times);
                    w.cleanup
                }
                None => Cleanup::default(),
                Some(Err(e)) => {
                    let namespace_gone = self.backend.identify(&st.netns) != Some(st.netns_id);
                    let why = if namespace_gone {
                        // Not nft's failure: there was nothing to run it in.
                        self.state.remove(&key);
                        PodProblem::NamespaceGoneDuringWrite
                    } else {
                        PodProblem::TableNotWritten(e.to_string())
                    };
                    pods_out(&mut out).failures.push((key.clone(), why.clone()));
                    pending.insert(key, why);
                    continue;
                }
            };
            if st.plan.routes != plan.routes || !st.routes_in_place || kind == SyncKind::Periodic {
                match self.backend.routes(&key, &st.netns, self.engine.family(), &plan.routes) {
                    Ok(change) => {
                        st.routes_in_place = true;
                        if change != RouteChange::default() {
                            pods_out(&mut out).route_changes += 1;
                        }
                    }
                    Err(e) => {
                        st.routes_in_place = false;
                        let why = PodProblem::RoutesNotSet(e.to_string());
                        pods_out(&mut out).failures.push((key.clone(), why.clone()));
                        pending.insert(key.clone(), why);
                    }
                }
            }
            st.plan = plan;
            // The rules that replace them are in place.
            delete_flows(
                self.backend.as_mut(),
                &key,
                &st.netns,
                self.engine.family(),
                &flows,
                &mut out,
            );
        }
        self.note_pending(pending);
        let pods = pods_out(&mut out);
        pods.pending = self.pending.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        pods.programmed = self.state.len();
        // A change programmed in several pods is one change.
        out.trigger_times.sort_unstable();
        out.trigger_times.dedup();
        out.duration = started.elapsed();
        out
    }

    /// Says which pods became pending (or pending for another reason) and
    /// which are programmed again.
    fn note_pending(&mut self, now: BTreeMap<PodName, PodProblem>) {
        for (key, why) in &now {
            if self.pending.get(key) != Some(why) {
                tracing::warn!(pod = %key, "not programmed, retried until it is: {why}");
            }
        }
        for key in self.pending.keys() {
            if !now.contains_key(key) && self.state.contains_key(key) {
                tracing::info!(pod = %key, "programmed");
            }
        }
        self.pending = now;
    }
}

/// A pod that fails never fails the sync of the others: it is pending in
/// the report, and retried.
impl FamilyProxier for MultusProxier {
    fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Always a sync: each pod that owes nothing is skipped inside it.
    fn sync(&mut self, kind: SyncKind) -> Result<Option<FamilySync>, DataplaneError> {
        Ok(Some(MultusProxier::sync(self, kind)))
    }
}
