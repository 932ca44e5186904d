//! The proxiers of a run, of the mode the flags ask for, and what the
//! sync actor hands them of this node's objects before each sync.

use std::sync::{Arc, Mutex};

use informer_glue::node::NodeFacts;
use slice_model::IpFamily;
use tokio::sync::watch;

use super::sources::SourceState;
use crate::effective::effective;
use crate::metrics_registry::Metrics;
use crate::settings::flags::{ProxyArgs, RunArgs};
use endpoints_map::Engine;
use linux_dataplane::{Conntrack, NetlinkConntrack, NoConntrack};
use linux_dataplane::{DryRun, Hearing, Netns, WatchedNft};
use multus_dataplane::backend::{Commands, DryRunPods};
use multus_dataplane::cri::CriResolver;
use multus_dataplane::{MultusProxier, NetnsDir, PodBackend, PodNetnsResolver};
use nft_dataplane::{Dataplane, DataplaneConfig};
use node_proxy::actor::FollowNode;
use node_proxy::family::FamilyProxier;
use node_proxy::localhost_relay::LocalhostRelay;
use node_proxy::proxier::Proxier;
use tokio_util::task::TaskTracker;

/// The proxiers of a run, and the container runtime multus mode follows.
pub struct Proxiers {
    /// One per family, of either mode.
    pub families: Vec<Box<dyn FamilyProxier>>,
    /// Multus mode without `--pod-netns-dir`: the runtime the families ask
    /// for pods' namespaces, to follow (a new sandbox wakes a sync).
    pub runtime: Option<CriResolver>,
}

/// The proxiers `args` ask for, one per engine: the one place that decides
/// the mode. Multus mode's (each selected pod's tables) when the sources
/// keep pods, else the node's (this node's namespace, or --netns), whose
/// writers `hearing` listens around.
pub fn proxiers(
    args: &RunArgs,
    engines: Vec<Engine>,
    sources: &SourceState,
    hearing: Option<&Hearing>,
    metrics: &Metrics,
    tasks: &TaskTracker,
) -> anyhow::Result<Proxiers> {
    let networks = &sources.networks;
    let Some(pods) = sources.pods.as_ref() else {
        let families = node_proxiers(args, engines, hearing, metrics, tasks).into_iter();
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

fn node_proxiers(
    args: &RunArgs,
    engines: Vec<Engine>,
    hearing: Option<&Hearing>,
    metrics: &Metrics,
    tasks: &TaskTracker,
) -> Vec<Proxier> {
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
                let nft = WatchedNft::with_writer(netns.clone(), args.nft_writer);
                Box::new(match hearing {
                    Some(h) => nft.heard_by(h.ear()),
                    None => nft,
                })
            };
            let conntrack: Box<dyn Conntrack + Send> = if args.is_dry_run() || args.no_conntrack {
                Box::new(NoConntrack)
            } else {
                Box::new(NetlinkConntrack::new(netns.clone()))
            };
            let proxier = Proxier::new(engine, config, dataplane, conntrack);
            match localhost_relay(args, family, netns, metrics, tasks) {
                Some(relay) => proxier.with_localhost_relay(relay),
                None => proxier,
            }
        })
        .collect()
}

/// `family`'s localhost node port relay, when the gate is on and
/// `--nodeport-addresses` names its loopback address (not in a dry run,
/// which opens nothing).
fn localhost_relay(
    args: &RunArgs,
    family: IpFamily,
    netns: Netns,
    metrics: &Metrics,
    tasks: &TaskTracker,
) -> Option<LocalhostRelay> {
    if !args.relays_localhost(family) {
        return None;
    }
    let (relay, listeners) = LocalhostRelay::start(family, netns, metrics.sync.relay_metrics(family));
    tasks.spawn(listeners);
    tracing::info!(
        %family,
        address = %relay.loopback(),
        "localhost node ports: each TCP node port with endpoints is answered on this address, relayed to them"
    );
    Some(relay)
}

/// What the sources say of this node besides Services and slices (its
/// Node's zone, pod ranges and primary addresses, the ServiceCIDRs),
/// combined with the flags ([`effective`]), for the node's proxiers.
pub struct NodeFollower {
    /// The flags, which win over what the sources say.
    proxy: ProxyArgs,
    facts: watch::Receiver<NodeFacts>,
}

impl NodeFollower {
    /// Follows `facts` for proxiers run with `proxy`.
    pub fn boxed(proxy: &ProxyArgs, facts: watch::Receiver<NodeFacts>) -> Box<dyn FollowNode> {
        Box::new(Self {
            proxy: proxy.clone(),
            facts,
        })
    }
}

/// The receiver's value when it changed since the last look (or
/// `always`).
fn changed<T: Clone>(rx: &mut watch::Receiver<T>, always: bool) -> Option<T> {
    (always || rx.has_changed().unwrap_or(false)).then(|| rx.borrow_and_update().clone())
}

impl FollowNode for NodeFollower {
    /// Each proxier rewrites its table on this sync when its configuration
    /// changed.
    fn follow(&mut self, proxiers: &mut [Box<dyn FamilyProxier>], first: bool) {
        let Some(facts) = changed(&mut self.facts, first) else {
            return;
        };
        let wanted = effective(&self.proxy, &facts);
        let mut before = None;
        for p in proxiers {
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
