//! `proxyd run`: watch the cluster and keep the nftables table in step.
//!
//! ```text
//!  API watches or --manifests ── handlers ──► engines (one per family)
//!        │ a change wakes `changes`
//!        ▼
//!  Forward task ── Changed, Listed ──────────┐
//!  Hearing thread (node mode) ── Repair ─────┼─► the sync actor's thread
//!  run(), on SIGTERM/SIGINT ── Stop ─────────┘   (node_proxy::actor):
//!                                                the proxiers, the schedule
//! ```
//!
//! [`run`] is the steps in order: check the flags and the host, start the
//! sources, the admin servers and the health-check listeners, build the
//! proxiers and hand them to the sync actor, then wait for a signal and
//! stop the actor (the rules stay in place).

mod families;
mod proxiers;
mod sources;

use std::process::ExitCode;
use std::sync::Arc;

use endpoints_map::Engine;
use linux_dataplane::Netns;
use slice_model::IpFamily;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics_registry::{CONTENT_TYPE, Metrics};
use crate::settings::flags::RunArgs;
use crate::snapshot_engine::{node_name, selection};
use node_proxy::actor::feed::{Forward, hear};
use node_proxy::actor::{Inbox, Running, SyncActor};
use node_proxy::families::families_text;
use node_proxy::family::HealthChecks;
use node_proxy::health::{ProxierHealth, ServiceHealth};
use node_proxy::http::{Reply, serve};
use node_proxy::localhost_rejects::LocalhostRejects;
use node_proxy::schedule::{Pacing, SyncTiming};

/// `proxyd run` from the command line.
pub fn main(args: RunArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    crate::block_on(runtime, run(args))
}

/// Checks the flags together; one message per problem.
pub fn validate(args: &RunArgs) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if let Some(min) = args.min_sync_period.filter(|min| *min > args.sync_period) {
        problems.push(format!(
            "--min-sync-period ({min:?}) is longer than --sync-period ({:?})",
            args.sync_period
        ));
    }
    if args.sync_period.is_zero() {
        problems.push("--sync-period must be more than 0".into());
    }
    // Families the host decides are checked once it is asked, at the start.
    if let Some(families) = args.families() {
        problems.extend(families::problems(args, &families));
    }
    problems.extend(args.pods.problems(args.proxy.multus));
    problems.extend(args.proxy.detect_local_problems());
    if args.proxy.multus && args.netns.is_some() {
        problems.push("--netns has no effect with --multus (each pod's namespace is used)".into());
    }
    if args.is_dry_run() && args.netns.is_some() {
        problems.push("--netns has no effect with --dry-run".into());
    }
    if let Some(path) = &args.source.manifests
        && !path.exists()
    {
        problems.push(format!("--manifests {}: no such file or directory", path.display()));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// What the host must offer a run that applies rules: nftables it may
/// change (over netlink, or with `nft` when `--nft-writer nft`: fatal), and
/// `conntrack` for the stale UDP entries
/// (a warning: the rules work without it).
pub fn check_host(args: &RunArgs) -> Result<(), String> {
    // The dry run is the other way to run without nft.
    let with_dry_run = |e: linux_dataplane::NftAccessError| match e {
        linux_dataplane::NftAccessError::Other { .. } => e.to_string(),
        _ => format!("{e}, or use --dry-run"),
    };
    if args.is_dry_run() {
        return Ok(());
    }
    let netns = if args.proxy.multus {
        Netns::Current
    } else {
        Netns::from_flag(args.netns.clone())
    };
    match args.nft_writer {
        linux_dataplane::NftWriter::Netlink => linux_dataplane::check_netlink(&netns),
        linux_dataplane::NftWriter::Nft => linux_dataplane::check_nft(&netns),
    }
    .map_err(with_dry_run)
}

/// Says once which `--feature-gates` proxyd leaves out, and when the
/// localhost node ports' gate keeps `--nodeport-addresses`'s loopback
/// addresses from being answered.
fn say_feature_gates(args: &RunArgs, families: &[IpFamily]) {
    let (typos, others): (Vec<_>, Vec<_>) = node_proxy::feature_gates::not_kube_proxys(&args.feature_gates)
        .into_iter()
        .partition(|(_, near)| near.is_some());
    for (name, near) in typos {
        let near = near.unwrap_or_default();
        tracing::warn!("--feature-gates {name}: not a gate of kube-proxy's; did you mean {near}? (left out)");
    }
    if !others.is_empty() {
        let names: Vec<&str> = others.iter().map(|(n, _)| *n).collect();
        tracing::info!(gates = ?names, "--feature-gates: not read by kube-proxy's proxying: no effect here");
    }
    let named = families.iter().any(|f| args.proxy.nodeport_names_loopback(*f));
    if named && !args.feature_gate(crate::settings::flags::LOCALHOST_NODEPORTS) {
        tracing::warn!(
            "--nodeport-addresses names loopback, but KubeProxyNFTablesLocalhostNodePorts is off: \
             localhost node ports are not answered"
        );
    }
}

/// kube-proxy's conntrack settings, where they are the node's: not in a
/// dry run, nor in multus mode (the node's own proxy sets them), nor with
/// `--netns` (they belong to that namespace, not to proxyd's).
/// Returns how many it could not make.
fn set_conntrack(args: &RunArgs) -> usize {
    if args.is_dry_run() || args.proxy.multus {
        return 0;
    }
    if let Some(ns) = &args.netns {
        tracing::info!(netns = %ns, "conntrack settings are left as they are with --netns");
        return 0;
    }
    let applied = args
        .conntrack
        .settings()
        .set(&linux_dataplane::sysctl::Sysctls::default());
    applied.refused.len()
}

/// What the start decided: this node, the families served, and how many
/// conntrack settings it could not make.
struct Start {
    node: String,
    families: Vec<IpFamily>,
    conntrack_unset: usize,
}

/// The checks and host settings before anything starts; `None` when
/// `--init-only` has done its job.
fn prepare(args: &RunArgs) -> anyhow::Result<Option<Start>> {
    if let Err(problems) = validate(args) {
        for p in &problems {
            tracing::error!("{p}");
        }
        anyhow::bail!("{} problem(s) with the flags; nothing was started", problems.len());
    }
    if args.init_only {
        // An init container's job is these settings; one it cannot make
        // (a read-only /proc/sys, a node whose namespace is not the host's)
        // is warned about, and the node is still proxied: its pod starts.
        match set_conntrack(args) {
            0 => tracing::info!("--init-only: the startup settings are made; exiting"),
            unset => tracing::warn!(
                "--init-only: {unset} conntrack setting(s) could not be made (see above); exiting: the proxy runs \
                 without them (metric proxyd_conntrack_settings_unset)"
            ),
        }
        return Ok(None);
    }
    check_host(args).map_err(|e| anyhow::anyhow!("{e}; nothing was started"))?;
    let conntrack_unset = set_conntrack(args);
    linux_dataplane::process::adjust_oom_score(args.kube_proxy.oom_score_adj);
    let node = node_name(&args.proxy)?;
    let chosen = families::choose(args).map_err(|e| anyhow::anyhow!("{e}; nothing was started"))?;
    let problems = families::problems(args, &chosen.families);
    if !problems.is_empty() {
        anyhow::bail!("{}; nothing was started", problems.join("; "));
    }
    tracing::info!(
        node = %node,
        families = %families_text(&chosen.families),
        why = %chosen.why,
        selector = %selection(&args.proxy).label_selector(),
        "starting"
    );
    say_feature_gates(args, &chosen.families);
    Ok(Some(Start {
        node,
        families: chosen.families,
        conntrack_unset,
    }))
}

/// What runs once the sources are started: what the sync actor is made
/// of, and where the sources say that something changed.
struct Serving {
    metrics: Arc<Metrics>,
    health: Arc<ProxierHealth>,
    changes: Arc<Notify>,
    engines: Vec<Engine>,
    state: sources::SourceState,
    health_checks: watch::Sender<HealthChecks>,
}

/// The tasks of a run, and their cancellation.
struct Tasks {
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let Some(Start {
        node,
        families,
        conntrack_unset,
    }) = prepare(&args)?
    else {
        return Ok(());
    };
    let tasks = Tasks {
        tracker: TaskTracker::new(),
        shutdown: CancellationToken::new(),
    };
    if !args.is_dry_run() && !args.proxy.multus {
        // Only a warning: it never holds up the start.
        let netns = Netns::from_flag(args.netns.clone());
        tasks
            .tracker
            .spawn_blocking(move || linux_dataplane::kube_proxy::warn_if_present(&netns));
    }
    let serving = start_serving(&args, &node, &families, &tasks).await?;
    serving
        .metrics
        .conntrack_unset
        .set(i64::try_from(conntrack_unset).unwrap_or(i64::MAX));
    let actor = start_syncing(&args, &families, serving, &tasks)?;
    tasks.tracker.spawn(stop_on_signal(tasks.shutdown.clone()));
    tasks.shutdown.cancelled().await;
    tokio::task::spawn_blocking(move || actor.stop()).await?;
    tasks.tracker.close();
    tasks.tracker.wait().await;
    if args.is_dry_run() {
        tracing::info!("stopped (a dry run: nothing was applied)");
    } else {
        tracing::info!("stopped; the rules stay in place");
    }
    Ok(())
}

/// The metrics, the admin servers, the sources and the health-check
/// listeners.
async fn start_serving(args: &RunArgs, node: &str, families: &[IpFamily], tasks: &Tasks) -> anyhow::Result<Serving> {
    let (tracker, shutdown) = (&tasks.tracker, &tasks.shutdown);
    let relayed = families.iter().copied().filter(|f| args.relays_localhost(*f)).collect();
    let rejects = LocalhostRejects::new(Netns::from_flag(args.netns.clone()), relayed);
    let metrics = Arc::new(Metrics::new(families, args.proxy.multus).counting_localhost_rejects(rejects));
    // The health server listens before anything else starts, answering
    // 503 until the first sync is written: a probe that cannot connect
    // says nothing an operator can act on.
    let health = Arc::new(ProxierHealth::new(families, 2 * args.sync_period).counting_into(metrics.health.clone()));
    start_admin_servers(args, &health, &metrics, tracker, shutdown).await?;
    let changes = Arc::new(Notify::new());
    let engines: Vec<Engine> = families.iter().map(|f| Engine::new(node, *f)).collect();
    let (handlers, mut state) = sources::handlers(args, node, &engines, &metrics, &changes);
    let selection = selection(&args.proxy);
    sources::start(args, &selection, handlers, &mut state, &metrics, tracker, shutdown).await?;
    follow_the_node(args, families, &state, &health, tracker);
    let health_checks = start_health_check_listeners(args, families[0], &health, tracker, shutdown);
    Ok(Serving {
        metrics,
        health,
        changes,
        engines,
        state,
        health_checks,
    })
}

/// The proxiers and the sync actor that owns them, and what tells it of
/// changes: the sources (through `Forward`), the kernel (the
/// hearing) and multus mode's container runtime.
fn start_syncing(args: &RunArgs, families: &[IpFamily], serving: Serving, tasks: &Tasks) -> anyhow::Result<Running> {
    let Serving {
        metrics,
        health,
        changes,
        engines,
        mut state,
        health_checks,
    } = serving;
    let (tracker, shutdown) = (&tasks.tracker, &tasks.shutdown);
    let inbox = Inbox::new();
    // The node's table is heard, not a dry run's nor the pods'.
    let hearing = (!args.is_dry_run() && !args.proxy.multus)
        .then(|| hear(&Netns::from_flag(args.netns.clone()), &inbox.commands()))
        .flatten();
    let proxiers = proxiers::proxiers(args, engines, &state, hearing.as_ref(), &metrics, tracker)?;
    if let Some(runtime) = proxiers.runtime {
        let follow = multus_dataplane::runtime_watch::follow_runtime(runtime, changes.clone(), shutdown.clone());
        tracker.spawn(follow);
    }
    if let Some(dir) = &args.dry_run_dir {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("--dry-run-dir {}: {e}", dir.display()))?;
    }
    let (listed, all_listed) = watch::channel(false);
    if let Some(server) = state.through_own_service.take() {
        let netns = Netns::from_flag(args.netns.clone());
        let hint = say_if_unreachable(server, netns, families.to_vec(), all_listed, shutdown.clone());
        tracker.spawn(hint);
    }
    let forward = Forward {
        changes,
        lists: state.listed.clone(),
        listed,
        commands: inbox.commands(),
    };
    tracker.spawn(forward.run(shutdown.clone().cancelled_owned()));
    let actor = SyncActor {
        proxiers: proxiers.families,
        health,
        metrics: metrics.sync.clone(),
        multus_metrics: metrics.multus.clone(),
        health_checks,
        node: state
            .facts
            .take()
            .map(|facts| proxiers::NodeFollower::boxed(&args.proxy, facts)),
        timing: SyncTiming {
            pacing: Pacing::from_min_sync_period(args.min_sync_period),
            max_interval: args.sync_period,
            ..SyncTiming::default()
        },
        hearing,
    };
    // The daemon stops when the actor does, however it ends.
    let ended = shutdown.clone().drop_guard();
    actor
        .spawn(inbox, move || drop(ended))
        .map_err(|e| anyhow::anyhow!("cannot start the sync thread: {e}"))
}

/// Health follows the Node (its deletion or draining), and the
/// configuration is checked against it once its addresses are known.
fn follow_the_node(
    args: &RunArgs,
    families: &[IpFamily],
    state: &sources::SourceState,
    health: &Arc<ProxierHealth>,
    tasks: &TaskTracker,
) {
    if let Some(facts) = &state.facts {
        health.follow_node(facts.clone());
        tasks.spawn(node_proxy::families::check_against_the_node(
            families::ip_config(args, families),
            facts.clone(),
        ));
    }
    for w in &state.watches {
        health.watch(w.clone());
    }
}

/// `/healthz` and `/livez`, and `/metrics`, where the flags ask for them.
async fn start_admin_servers(
    args: &RunArgs,
    health: &Arc<ProxierHealth>,
    metrics: &Arc<Metrics>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let hard_fail = args.kube_proxy.bind_address_hard_fail;
    let listen = |flag, addr| node_proxy::http::listen(flag, addr, hard_fail);
    if let Some(addr) = args.healthz_bind_address.0
        && let Some(listener) = listen("--healthz-bind-address", addr).await?
    {
        tracing::info!(address = %addr, "serving /healthz and /livez");
        tasks.spawn(serve(listener, health.handler(), shutdown.clone().cancelled_owned()));
    }
    if let Some(addr) = args.metrics_bind_address.0
        && let Some(listener) = listen("--metrics-bind-address", addr).await?
    {
        tracing::info!(address = %addr, "serving /metrics");
        let m = metrics.clone();
        let handler: node_proxy::http::Handler = Arc::new(move |path| match path {
            "/metrics" => Reply {
                status: 200,
                headers: vec![("Content-Type", CONTENT_TYPE.into())],
                body: m.render(),
            },
            _ => Reply::not_found(),
        });
        tasks.spawn(serve(listener, handler, shutdown.clone().cancelled_owned()));
    }
    Ok(())
}

/// The listeners on services' health-check node ports, opened and closed
/// as the syncs say (none in a dry run: it opens no port on the node's
/// behalf). Returns where the syncs say it.
fn start_health_check_listeners(
    args: &RunArgs,
    primary: IpFamily,
    health: &Arc<ProxierHealth>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> watch::Sender<HealthChecks> {
    let (tx, rx) = watch::channel(HealthChecks::new());
    if args.is_dry_run() {
        return tx;
    }
    let any: std::net::IpAddr = match primary {
        IpFamily::V4 => std::net::Ipv4Addr::UNSPECIFIED.into(),
        IpFamily::V6 => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let listeners = ServiceHealth::new(any, health.clone());
    tasks.spawn(listeners.follow(rx, shutdown.clone().cancelled_owned()));
    tx
}

/// How long the first lists may take before proxyd looks into why (a
/// refused connection is retried within seconds, and a connect that hangs
/// fails only after kube-client's 30-second connect timeout).
const UNLISTED_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Says once, as an error naming the fix, that proxyd cannot reach the API
/// server because it was told to reach it through the `kubernetes`
/// Service (the in-cluster configuration), which only a service proxy
/// makes reachable: when the lists have not come within
/// [`UNLISTED_AFTER`] and no proxyd table is on the node (a table left by
/// an earlier run still routes the Service's address).
async fn say_if_unreachable(
    server: String,
    netns: Netns,
    families: Vec<IpFamily>,
    mut listed: watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => return,
        // Listed (or the forwarder gone with the run): reachable.
        _ = listed.wait_for(|l| *l) => return,
        () = tokio::time::sleep(UNLISTED_AFTER) => {}
    }
    let any_table = tokio::task::spawn_blocking(move || {
        let mut nft = linux_dataplane::NftNetlink::open(&netns)?;
        families.iter().try_fold(false, |any, f| {
            Ok::<_, std::io::Error>(any || nft.table_exists(*f, nft_dataplane::names::TABLE)?)
        })
    })
    .await;
    // Without a look at the table (no access, a dry run's host), the hint
    // is still the likeliest cause.
    if let Ok(Ok(true)) = any_table {
        return;
    }
    tracing::error!(
        server = %server,
        "cannot reach the API server at {server}: that is the `kubernetes` Service's cluster IP (the in-cluster \
         configuration), which only a service proxy makes reachable, and proxyd is this node's service proxy. Give \
         proxyd the API server's real address: a kubeconfig naming it (deploy/proxyd.yaml's ConfigMap key \
         kubeconfig.conf, or --kubeconfig), with the address the nodes reach it by: the server of the kubelet's \
         kubeconfig on a node (/etc/kubernetes/kubelet.conf), or kubeadm's controlPlaneEndpoint"
    );
}

/// Cancels `shutdown` on SIGTERM or SIGINT.
async fn stop_on_signal(shutdown: CancellationToken) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = wait_for_signal() => {
            tracing::info!("shutting down");
            shutdown.cancel();
        }
    }
}

/// Until SIGTERM or SIGINT.
pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM ({e}); only SIGINT stops proxyd");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::settings::flags::{Cli, Command};

    fn run_args(args: &[&str]) -> RunArgs {
        let mut all = vec!["proxyd", "run"];
        all.extend_from_slice(args);
        match Cli::parse_from(all).command {
            Command::Run(a) => *a,
            _ => unreachable!("parsed `run`"),
        }
    }

    #[test]
    fn validation_reports_every_problem() {
        assert!(validate(&run_args(&["--hostname-override", "n"])).is_ok());
        let problems = validate(&run_args(&[
            "--min-sync-period",
            "1m",
            "--sync-period",
            "30s",
            "--ip-family",
            "ipv4",
            "--cluster-cidr",
            "fd00::/48",
            "--manifests",
            "/nonexistent",
        ]))
        .unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("--min-sync-period (60s) is longer than --sync-period (30s)"));
        assert!(
            problems[1].contains("--cluster-cidr holds only ipv6 networks, but proxyd serves ipv4"),
            "{problems:?}"
        );
        assert!(problems[2].contains("--manifests /nonexistent: no such file"));
        let dual = run_args(&["--ip-families", "ipv4,ipv6,ipv4", "--cluster-cidr", "fd00::/48"]);
        assert_eq!(dual.families(), Some(vec![IpFamily::V4, IpFamily::V6]));
        // Without a family flag the host decides, at the start.
        assert_eq!(run_args(&["--cluster-cidr", "fd00::/48"]).families(), None);
        assert!(validate(&dual).is_ok());
    }

    #[test]
    fn flags_that_cannot_be_parsed_say_which_and_why() {
        let err = |args: &[&str]| {
            let mut all = vec!["proxyd", "run"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all).unwrap_err().to_string()
        };
        let e = err(&["--healthz-bind-address", "localhost"]);
        assert!(
            e.contains("--healthz-bind-address") && e.contains("is not ADDRESS:PORT"),
            "{e}"
        );
        let e = err(&["--sync-period", "30"]);
        assert!(e.contains("--sync-period") && e.contains("the unit is missing"), "{e}");
        let e = err(&["--cluster-cidr", "10.244.0.0"]);
        assert!(e.contains("the prefix length is missing"), "{e}");
        let e = err(&["--manifests", "m", "--kubeconfig", "k"]);
        assert!(e.contains("cannot be used with"), "{e}");
        let off = run_args(&["--metrics-bind-address", ""]);
        assert_eq!(off.metrics_bind_address.0, None);
    }
}
