//! The proxiers of a run and one sync of all of them: what the sync
//! runner calls, once per sync.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use informer_glue::multus::{PodStore, ServiceNetworks};
use informer_glue::node::NodeFacts;
use slice_model::{IpFamily, ServiceName};
use tokio::sync::watch;

use crate::effective::effective;
use crate::metrics_registry::Metrics;
use crate::settings::flags::{ProxyArgs, RunArgs};
use endpoints_map::Engine;
use linux_dataplane::{Conntrack, NetlinkConntrack, NoConntrack};
use linux_dataplane::{DryRun, Netns, WatchedNft};
use multus_dataplane::backend::{Commands, DryRunPods};
use multus_dataplane::{MultusProxier, NetnsDir, PodBackend, PodNetnsResolver};
use nft_dataplane::{Dataplane, DataplaneConfig, SyncKind};
use node_proxy::health::ProxierHealth;
use node_proxy::kube_proxy_metrics::SyncObservation;
use node_proxy::proxier::{HealthChecks, Proxier};
use node_proxy::sync_runner::{Outcome, SyncReason};

/// The proxiers of a run: the node's tables, or (multus) pods' tables.
pub enum Proxiers {
    /// One per family, programming this node's namespace (or --netns).
    Node(Vec<Proxier>),
    /// One per family, programming each selected pod's namespace.
    Multus(Vec<MultusProxier>),
}

impl Proxiers {
    /// The proxiers `args` ask for, one per engine; multus mode's when
    /// `pods` are kept.
    pub fn new(
        args: &RunArgs,
        engines: Vec<Engine>,
        pods: Option<&Arc<Mutex<PodStore>>>,
        networks: &Arc<Mutex<ServiceNetworks>>,
    ) -> anyhow::Result<Self> {
        let Some(pods) = pods else {
            return Ok(Self::Node(node_proxiers(args, engines)));
        };
        let mut all = Vec::new();
        for engine in engines {
            let family = engine.family();
            let backend: Box<dyn PodBackend> = if args.is_dry_run() {
                Box::new(DryRunPods {
                    dir: args.dry_run_dir.clone(),
                })
            } else {
                Box::new(Commands {
                    no_conntrack: args.no_conntrack,
                    nft_writer: args.nft_writer,
                })
            };
            let resolver = resolver(args)?;
            all.push(MultusProxier::new(
                engine,
                family,
                pods.clone(),
                networks.clone(),
                resolver,
                backend,
            ));
        }
        Ok(Self::Multus(all))
    }
}

/// How multus mode finds pods' namespaces: a directory, or the runtime.
fn resolver(args: &RunArgs) -> anyhow::Result<Box<dyn PodNetnsResolver>> {
    if let Some(dir) = &args.pods.pod_netns_dir {
        return Ok(Box::new(NetnsDir { dir: dir.clone() }));
    }
    let runtime = args
        .pods
        .runtime()
        .map_err(|why| anyhow::anyhow!("--container-runtime-endpoint: {why}"))?;
    tracing::info!(endpoint = %runtime.endpoint(), "pod namespaces from the container runtime");
    Ok(Box::new(runtime))
}

fn node_proxiers(args: &RunArgs, engines: Vec<Engine>) -> Vec<Proxier> {
    let dual_stack = engines.len() > 1;
    engines
        .into_iter()
        .map(|engine| {
            let family = engine.family();
            let config = DataplaneConfig {
                family,
                ..effective(&args.proxy, &NodeFacts::default())
            };
            let netns = Netns::from_flag(args.netns.clone());
            let dataplane: Box<dyn Dataplane + Send> = if args.is_dry_run() {
                Box::new(DryRun {
                    dir: args.dry_run_dir.clone(),
                    count: 0,
                    prefix: if dual_stack {
                        format!("{family}-")
                    } else {
                        String::new()
                    },
                })
            } else {
                Box::new(WatchedNft::with_writer(netns.clone(), args.nft_writer))
            };
            let conntrack: Box<dyn Conntrack + Send> = if args.is_dry_run() || args.no_conntrack {
                Box::new(NoConntrack)
            } else {
                Box::new(NetlinkConntrack::new(netns))
            };
            Proxier::new(engine, config, dataplane, conntrack)
        })
        .collect()
}

/// Everything one sync touches besides the proxiers.
pub struct SyncLoop {
    /// The proxiers.
    pub proxiers: Proxiers,
    /// `/healthz`'s state.
    pub health: Arc<ProxierHealth>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Where the health-check listeners learn what to serve.
    pub health_checks: watch::Sender<HealthChecks>,
    /// The flags, which win over what the sources say.
    pub proxy: ProxyArgs,
    /// What the sources say of this node (its Node, the ServiceCIDRs);
    /// `None` in multus mode.
    pub facts: Option<watch::Receiver<NodeFacts>>,
}

/// The periodic sync also re-asserts the fixed skeleton.
fn sync_kind(reason: SyncReason) -> SyncKind {
    if reason == SyncReason::Periodic {
        SyncKind::Periodic
    } else {
        SyncKind::Changes
    }
}

/// At most this many changed services are named in a sync's log line.
const NAMED_SERVICES: usize = 5;

/// The changed services, named when there are few.
fn named(changed: &BTreeSet<ServiceName>) -> String {
    if changed.len() > NAMED_SERVICES {
        return format!("{} services", changed.len());
    }
    let names: Vec<String> = changed.iter().map(ToString::to_string).collect();
    names.join(" ")
}

impl SyncLoop {
    /// One sync of every family; the error (every family's that failed)
    /// is logged once, by the runner, with its retry.
    pub fn sync(&mut self, reason: SyncReason) -> Result<Outcome, String> {
        self.follow_sources(reason);
        match &mut self.proxiers {
            Proxiers::Node(p) => {
                sync_node(reason, p, &self.health, &self.metrics, &self.health_checks).map(|()| Outcome::Done)
            }
            // Pods' tables do not read topology hints.
            Proxiers::Multus(p) => sync_multus(reason, p, &self.health, &self.metrics),
        }
    }
}

/// The receiver's value when it changed since the last look (or
/// `always`).
fn changed<T: Clone>(rx: &mut Option<watch::Receiver<T>>, always: bool) -> Option<T> {
    let rx = rx.as_mut()?;
    (always || rx.has_changed().unwrap_or(false)).then(|| rx.borrow_and_update().clone())
}

impl SyncLoop {
    /// What the sources say of this node besides Services and slices (its
    /// Node's zone, pod ranges and primary addresses, the ServiceCIDRs)
    /// reaches the node's proxiers here, through [`effective`]: each
    /// rewrites its table on this sync when its configuration changed.
    fn follow_sources(&mut self, reason: SyncReason) {
        let Proxiers::Node(proxiers) = &mut self.proxiers else {
            return;
        };
        let first = reason == SyncReason::Initial;
        let Some(facts) = changed(&mut self.facts, first) else {
            return;
        };
        if self.proxy.nodeport_primary() && facts.primary_ips.is_empty() {
            tracing::warn!(
                "--nodeport-addresses primary: this node's primary addresses are not known (no Node object, or \
                 no addresses in its status): node ports answer on every local address until they are"
            );
        }
        let wanted = effective(&self.proxy, &facts);
        let mut zone_changed = false;
        for p in proxiers.iter_mut() {
            p.reconfigure(|c| {
                zone_changed |= c.node_zone != wanted.node_zone;
                *c = DataplaneConfig {
                    family: c.family,
                    ..wanted.clone()
                };
            });
        }
        // The proxiers start without a zone; the source's first report
        // (before the first sync) is a change like any later one.
        if zone_changed && !first {
            tracing::info!(
                zone = wanted.node_zone.as_deref().unwrap_or("(none)"),
                "this node's zone changed: every service is rewritten"
            );
        }
    }
}

fn sync_node(
    reason: SyncReason,
    proxiers: &mut [Proxier],
    health: &ProxierHealth,
    metrics: &Metrics,
    health_checks: &watch::Sender<HealthChecks>,
) -> Result<(), String> {
    let kind = sync_kind(reason);
    let mut failures = Vec::new();
    for p in proxiers.iter_mut() {
        let started = Instant::now();
        match p.sync(kind) {
            Ok(out) => {
                let now = SystemTime::now();
                health.updated(p.family, now);
                metrics.sync.observe_sync(p.family, &out.observation, now);
                for e in &out.conntrack_errors {
                    tracing::warn!(family = %p.family, "conntrack cleanup: {e}");
                }
                tracing::info!(
                    family = %p.family,
                    first = reason == SyncReason::Initial,
                    reason = %reason,
                    service_ports = p.engine.services.len(),
                    service_ports_with_endpoints = p.engine.endpoints.len(),
                    changed_services = out.changed.len(),
                    services = %named(&out.changed),
                    full = out.report.full,
                    services_written = out.report.services_written,
                    nft_bytes = out.report.script_bytes,
                    conntrack_flows = out.conntrack_flows,
                    conntrack_deleted = out.observation.conntrack_deleted,
                    render_us = out.report.render.as_micros() as u64,
                    apply_us = out.report.apply.as_micros() as u64,
                    transactions = out.report.transactions,
                    longest_tx_us = out.report.longest_apply.as_micros() as u64,
                    took_us = started.elapsed().as_micros() as u64,
                    programming_max_us = longest_programming(&out.observation.trigger_times, now),
                    "synced"
                );
            }
            Err(e) => {
                let failed = SyncObservation {
                    failed: true,
                    ..SyncObservation::default()
                };
                metrics.sync.observe_sync(p.family, &failed, SystemTime::now());
                failures.push(format!("{}: {e}", p.family));
            }
        }
        let (eps, svcs) = p.pending();
        metrics.sync.set_pending(p.family, eps, svcs);
    }
    // One listener per service; with two families, the larger local count.
    let mut merged = HealthChecks::new();
    for p in proxiers.iter() {
        for (name, (port, count)) in p.health_checks() {
            let e = merged.entry(name.clone()).or_insert((*port, 0));
            e.1 = e.1.max(*count);
        }
    }
    health_checks.send_if_modified(|current| {
        let changed = *current != merged;
        *current = merged;
        changed
    });
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}; the next sync rewrites the whole table",
            failures.join("; ")
        ))
    }
}

/// The longest network programming latency of the changes a sync applied
/// (from their trigger times to `now`), in microseconds; 0 when none
/// carried one.
fn longest_programming(trigger_times: &[SystemTime], now: SystemTime) -> u64 {
    trigger_times
        .iter()
        .filter_map(|t| now.duration_since(*t).ok())
        .max()
        .map_or(0, |d| d.as_micros() as u64)
}

/// How many pending pods a sync's log line names.
const NAMED_PODS: usize = 5;

/// The pending pods, named (with why) when there are few.
fn pending_text(pending: &[(slice_model::PodName, multus_dataplane::PodProblem)]) -> String {
    if pending.len() > NAMED_PODS {
        return format!("{} pods", pending.len());
    }
    let named: Vec<String> = pending.iter().map(|(pod, why)| format!("{pod} ({why})")).collect();
    named.join("; ")
}

/// One multus sync of every family. A pod that fails is logged and
/// counted; it never fails the sync of the others (nor health). Pods left
/// pending make the sync incomplete: the runner retries it with backoff.
fn sync_multus(
    reason: SyncReason,
    proxiers: &mut [MultusProxier],
    health: &ProxierHealth,
    metrics: &Metrics,
) -> Result<Outcome, String> {
    let kind = sync_kind(reason);
    let mut outcome = Outcome::Done;
    for p in proxiers.iter_mut() {
        let started = Instant::now();
        let out = p.sync(kind);
        let now = SystemTime::now();
        health.updated(p.family, now);
        if let Some(m) = &metrics.multus {
            m.observe(p.family, &out);
        }
        // A change programmed in several pods is one change.
        let mut programmed = out.trigger_times.clone();
        programmed.sort_unstable();
        programmed.dedup();
        metrics.sync.observe_programming(p.family, &programmed, now);
        tracing::info!(
            family = %p.family,
            reason = %reason,
            changed_services = out.changed_services,
            programmed_pods = out.programmed_pods,
            pods_written = out.transactions,
            route_changes = out.route_changes,
            conntrack_deleted = out.conntrack_deleted,
            failed_pods = out.failures.len(),
            pending_pods = out.pending.len(),
            pending = %pending_text(&out.pending),
            took_us = started.elapsed().as_micros() as u64,
            programming_max_us = longest_programming(&programmed, now),
            "synced"
        );
        if !out.pending.is_empty() {
            outcome = Outcome::Incomplete;
        }
    }
    Ok(outcome)
}

/// The families, as the log writes them: `ipv4`, `ipv4,ipv6`.
pub fn families_text(families: &[IpFamily]) -> String {
    let names: Vec<&str> = families.iter().map(|f| f.as_str()).collect();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_changed_services_are_named() {
        let few: BTreeSet<ServiceName> = [ServiceName::new("ns", "a"), ServiceName::new("ns", "b")].into();
        assert_eq!(named(&few), "ns/a ns/b");
        let many: BTreeSet<ServiceName> = (0..9)
            .map(|i| ServiceName::new("ns", format!("s{i}").as_str()))
            .collect();
        assert_eq!(named(&many), "9 services");
        assert_eq!(families_text(&[IpFamily::V4, IpFamily::V6]), "ipv4,ipv6");
    }

    #[test]
    fn few_pending_pods_are_named_with_why() {
        use multus_dataplane::PodProblem;
        use slice_model::PodName;
        let few = [(
            PodName::new("apps", "a"),
            PodProblem::NoNamespace("no ready sandbox".into()),
        )];
        assert_eq!(pending_text(&few), "apps/a (no ready sandbox)");
        let many: Vec<(PodName, PodProblem)> = (0..6)
            .map(|i| {
                (
                    PodName::new("apps", format!("p{i}")),
                    PodProblem::NamespaceGoneDuringWrite,
                )
            })
            .collect();
        assert_eq!(pending_text(&many), "6 pods");
    }
}
