//! The proxiers of a run and one sync of all of them: what the sync
//! runner calls, once per sync.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use informer_glue::multus::{PodStore, ServiceNetworks};
use informer_glue::node::NodeFacts;
use slice_model::IpFamily;
use tokio::sync::watch;

use crate::effective::effective;
use crate::metrics_registry::Metrics;
use crate::settings::flags::{ProxyArgs, RunArgs};
use endpoints_map::Engine;
use linux_dataplane::{Conntrack, NetlinkConntrack, NoConntrack};
use linux_dataplane::{DryRun, Netns, WatchedNft};
use multus_dataplane::backend::{Commands, DryRunPods};
use multus_dataplane::cri::CriResolver;
use multus_dataplane::{MultusProxier, NetnsDir, PodBackend, PodNetnsResolver};
use nft_dataplane::{Dataplane, DataplaneConfig};
use node_proxy::family::FamilyProxier;
use node_proxy::family::HealthChecks;
use node_proxy::health::ProxierHealth;
use node_proxy::localhost_relay::LocalhostRelay;
use node_proxy::proxier::Proxier;
use node_proxy::sync_runner::{Outcome, SyncReason};

/// The proxiers of a run, and the container runtime multus mode follows.
pub struct Proxiers {
    /// One per family, of either mode.
    pub families: Vec<Box<dyn FamilyProxier>>,
    /// Multus mode without `--pod-netns-dir`: the runtime the families ask
    /// for pods' namespaces, to follow (a new sandbox wakes a sync).
    pub runtime: Option<CriResolver>,
}

/// The proxiers `args` ask for, one per engine: the one place that decides
/// the mode. Multus mode's (each selected pod's tables) when `pods` are
/// kept, else the node's (this node's namespace, or --netns).
pub fn proxiers(
    args: &RunArgs,
    engines: Vec<Engine>,
    pods: Option<&Arc<Mutex<PodStore>>>,
    networks: &Arc<Mutex<ServiceNetworks>>,
    metrics: &Metrics,
) -> anyhow::Result<Proxiers> {
    let Some(pods) = pods else {
        let families = node_proxiers(args, engines, metrics).into_iter();
        return Ok(Proxiers {
            families: families.map(|p| Box::new(p) as Box<dyn FamilyProxier>).collect(),
            runtime: None,
        });
    };
    let (resolver, runtime) = pod_namespaces(args)?;
    let mut families = Vec::new();
    for engine in engines {
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
        let mut proxier = MultusProxier::new(
            engine,
            pods.clone(),
            networks.clone(),
            Box::new(resolver.clone()),
            backend,
        );
        proxier.set_refuse_for_tests(crate::effective::refuse_for_tests());
        families.push(Box::new(proxier) as Box<dyn FamilyProxier>);
    }
    Ok(Proxiers { families, runtime })
}

/// How multus mode finds pods' namespaces, made once for every family: a
/// directory, or the container runtime (also returned, to follow).
fn pod_namespaces(args: &RunArgs) -> anyhow::Result<(SharedResolver, Option<CriResolver>)> {
    if let Some(dir) = &args.pods.pod_netns_dir {
        return Ok((Arc::new(Mutex::new(NetnsDir { dir: dir.clone() })), None));
    }
    let runtime = args
        .pods
        .runtime()
        .map_err(|why| anyhow::anyhow!("--container-runtime-endpoint: {why}"))?;
    tracing::info!(endpoint = %runtime.endpoint(), "pod namespaces from the container runtime");
    Ok((Arc::new(Mutex::new(runtime.clone())), Some(runtime)))
}

/// One resolver the families share.
type SharedResolver = Arc<Mutex<dyn PodNetnsResolver>>;

fn node_proxiers(args: &RunArgs, engines: Vec<Engine>, metrics: &Metrics) -> Vec<Proxier> {
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
                Box::new(NetlinkConntrack::new(netns.clone()))
            };
            let proxier = Proxier::new(engine, config, dataplane, conntrack);
            match localhost_relay(args, family, netns, metrics) {
                Some(relay) => proxier.with_localhost_relay(relay),
                None => proxier,
            }
        })
        .collect()
}

/// `family`'s localhost node port relay, when the gate is on and
/// `--nodeport-addresses` names its loopback address (not in a dry run,
/// which opens nothing).
fn localhost_relay(args: &RunArgs, family: IpFamily, netns: Netns, metrics: &Metrics) -> Option<LocalhostRelay> {
    if !args.localhost_nodeports(family) || args.is_dry_run() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let relay = LocalhostRelay::new(family, netns, runtime, metrics.sync.relay_metrics(family));
    tracing::info!(
        %family,
        address = %relay.loopback(),
        "localhost node ports: each TCP node port with endpoints is answered on this address, relayed to them"
    );
    Some(relay)
}

/// Everything one sync touches besides the proxiers.
pub struct SyncLoop {
    /// The proxiers, one per family, of either mode.
    pub proxiers: Vec<Box<dyn FamilyProxier>>,
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
    /// Set when another process changed the ruleset: the next sync
    /// rewrites every family's table whole.
    pub repair: Arc<std::sync::atomic::AtomicBool>,
    /// Following other programs' changes, stopped while this loop writes
    /// (node mode, when nftables can be followed).
    pub following: Option<super::foreign::WhileWriting>,
}

impl SyncLoop {
    /// One sync of every family; the error (every family's that failed)
    /// is logged once, by the runner, with its retry.
    pub fn sync(&mut self, reason: SyncReason) -> Result<Outcome, String> {
        self.follow_sources(reason);
        if self.repair.swap(false, std::sync::atomic::Ordering::AcqRel) {
            for p in &mut self.proxiers {
                p.repair();
            }
        }
        let Some(mut following) = self.following.take() else {
            return self.sync_families(reason);
        };
        let result = following.quietly(|| self.sync_families(reason));
        self.following = Some(following);
        result
    }

    fn sync_families(&mut self, reason: SyncReason) -> Result<Outcome, String> {
        let mut outcome = Outcome::Done;
        let mut failures = Vec::new();
        let mut full = false;
        for p in &mut self.proxiers {
            match super::family::sync(p.as_mut(), reason, &self.metrics) {
                Ok(done) => {
                    self.health.updated(p.family(), SystemTime::now());
                    if done.outcome == Outcome::Incomplete {
                        outcome = Outcome::Incomplete;
                    }
                    full |= done.full;
                }
                Err(e) => failures.push(format!("{}: {e}", p.family())),
            }
        }
        if full {
            release_free_memory();
        }
        self.publish_health_checks();
        if failures.is_empty() {
            Ok(outcome)
        } else {
            Err(format!(
                "{}; the next sync rewrites the whole table",
                failures.join("; ")
            ))
        }
    }

    /// One listener per service; with two families, the larger local count.
    fn publish_health_checks(&self) {
        let mut merged = HealthChecks::new();
        for checks in self.proxiers.iter().filter_map(|p| p.health_checks()) {
            for (name, (port, count)) in checks {
                let e = merged.entry(name.clone()).or_insert((*port, 0));
                e.1 = e.1.max(*count);
            }
        }
        self.health_checks.send_if_modified(|current| {
            let changed = *current != merged;
            *current = merged;
            changed
        });
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
        let first = reason == SyncReason::Initial;
        let Some(facts) = changed(&mut self.facts, first) else {
            return;
        };
        let wanted = effective(&self.proxy, &facts);
        let mut before = None;
        for p in &mut self.proxiers {
            before = p.follow_node(&wanted).or(before);
        }
        let Some(before) = before else {
            return;
        };
        // Said at the first sync, and again whenever they are lost.
        if self.proxy.nodeport_primary()
            && wanted.nodeport_addresses.is_empty()
            && (first || !before.nodeport_addresses.is_empty())
        {
            tracing::warn!(
                "--nodeport-addresses primary: this node's primary addresses are not known (no Node object, or \
                 no addresses in its status): node ports answer on every local address until they are"
            );
        }
        // The proxiers start without a zone; the source's first report
        // (before the first sync) is a change like any later one.
        if before.node_zone != wanted.node_zone && !first {
            tracing::info!(
                zone = wanted.node_zone.as_deref().unwrap_or("(none)"),
                "this node's zone changed: every service is rewritten"
            );
        }
    }
}

/// Gives the allocator's free pages back to the kernel. A full sync follows
/// the bursts that free the most memory (the initial lists, a relist, a
/// restart), so the loop calls it after a sync in which any family wrote
/// its whole table: once, however many families did.
fn release_free_memory() {
    let started = std::time::Instant::now();
    let released = linux_dataplane::process::release_free_memory();
    tracing::debug!(
        released,
        took_us = started.elapsed().as_micros() as u64,
        "returned free memory to the kernel"
    );
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
    fn families_are_written_as_the_log_writes_them() {
        assert_eq!(families_text(&[IpFamily::V4, IpFamily::V6]), "ipv4,ipv6");
    }
}
