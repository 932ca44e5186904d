//! `proxyd run`: watch the cluster and keep the nftables table in step.
//!
//! ```text
//!  API watches or --manifests ── ServiceHandler ───► ServiceChangeTracker ┐
//!                             └─ SliceCacheHandler ─► EndpointSliceCache ─┤ sync_needed
//!                                                                         ▼
//!  SyncRunner: starts once both kinds are listed; at most one sync per
//!  --min-sync-period, at least one per --sync-period, retries with backoff
//!  after a failure. Each sync applies the pending changes to the maps and
//!  hands the changed services to the NftSyncer (full on the first sync and
//!  after a failure, partial otherwise). SIGTERM/SIGINT stop everything;
//!  the rules stay in place.
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use informer_glue::fold::{EventFold, Fanout};
use informer_glue::multus::{NetworkRecorder, PodHandler, ServiceNetworks};
use informer_glue::rejections::Rejections;
use informer_glue::runner::{WatchMetrics, WatchSettings, run_watch};
use informer_glue::tombstone::{SlimServices, SlimSlices};
use informer_glue::{ServiceHandler, SliceCacheHandler};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use slice_model::IpFamily;
use tokio::sync::{Notify, watch};

use crate::cli::RunArgs;
use crate::conntrack::{Conntrack, ConntrackTool, NoConntrack};
use crate::dataplane::{Dataplane, DataplaneConfig, DataplaneError, DryRun, Netns, NftCommand, SyncKind};
use crate::engine::Engine;
use crate::health::{ProxierHealth, ServiceHealth};
use crate::http::{Reply, serve};
use crate::manifest_source::{self, ServiceSink};
use crate::metrics::{Metrics, SyncObservation};
use crate::multus::backend::{Commands, DryRunPods};
use crate::multus::{MultusProxier, NetnsDir, PodBackend, PodNetnsResolver};
use crate::proxier::{HealthChecks, Proxier};
use crate::snapshot::{api_node_zone, client, dataplane_config, node_name, selection};
use crate::sync_runner::{SyncReason, SyncRunner, SyncTiming};

/// `proxyd run` from the command line.
pub fn main(args: RunArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

type Stop = watch::Receiver<bool>;

async fn stopped(mut rx: Stop) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Checks the flags together; one message per problem.
pub fn validate(args: &RunArgs) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if args.min_sync_period > args.sync_period {
        problems.push(format!(
            "--min-sync-period ({:?}) is longer than --sync-period ({:?})",
            args.min_sync_period, args.sync_period
        ));
    }
    if args.sync_period.is_zero() {
        problems.push("--sync-period must be more than 0".into());
    }
    for (flag, value) in [
        ("--healthz-bind-address", &args.healthz_bind_address),
        ("--metrics-bind-address", &args.metrics_bind_address),
    ] {
        if !value.is_empty() && value.parse::<SocketAddr>().is_err() {
            problems.push(format!(
                "{flag} {value:?} is not an address:port (e.g. 0.0.0.0:10256); empty disables it"
            ));
        }
    }
    let families = args.families();
    let cidr_flags = [
        ("--cluster-cidr", &args.proxy.cluster_cidr),
        ("--service-cidr", &args.proxy.service_cidr),
    ];
    for (flag, cidrs) in cidr_flags {
        for cidr in cidrs {
            let f = match cidr {
                ipnet::IpNet::V4(_) => IpFamily::V4,
                ipnet::IpNet::V6(_) => IpFamily::V6,
            };
            if !families.contains(&f) {
                problems.push(format!("{flag} {cidr} is {f}, but proxyd serves only {families:?}"));
            }
        }
    }
    problems.extend(args.pods.problems(args.proxy.multus));
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

/// Binds a server address given on the command line.
async fn bind(flag: &str, addr: &str) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if addr.is_empty() {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("{flag} {addr}: cannot listen: {e}"))?;
    Ok(Some(listener))
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    if let Err(problems) = validate(&args) {
        for p in &problems {
            tracing::error!("{p}");
        }
        anyhow::bail!("{} problem(s) with the flags; nothing was started", problems.len());
    }
    let node = node_name(&args.proxy)?;
    let families = args.families();
    let selection = selection(&args.proxy);
    tracing::info!(node = %node, families = ?families, selector = %selection.label_selector(), "starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let engines: Vec<Engine> = families.iter().map(|f| Engine::new(&node, *f)).collect();
    // Handlers wake `changes`; a forwarder records the queueing time for
    // health and metrics and wakes the runner (which coalesces wake-ups).
    let changes = Arc::new(Notify::new());
    let sync_needed = Arc::new(Notify::new());
    let slice_handlers: Vec<SliceCacheHandler> = engines
        .iter()
        .map(|e| SliceCacheHandler::new(e.slices.clone(), changes.clone()))
        .collect();
    let slices_synced: Vec<_> = slice_handlers.iter().map(|h| h.synced.clone()).collect();
    // Every family's handler sees the same slices: count the first one's.
    let slices_rejected = slice_handlers.first().map(|h| h.rejected.clone()).unwrap_or_default();
    let slices = Fanout(slice_handlers);
    let store = ServiceHandler::new(
        engines.iter().map(|e| e.service_changes.clone()).collect(),
        changes.clone(),
    );
    let services_synced = store.synced.clone();
    let services_rejected = store.rejected.clone();
    let slice_watch = Arc::new(WatchMetrics::default());
    let service_watch = Arc::new(WatchMetrics::default());
    let pod_watch = Arc::new(WatchMetrics::default());
    // Multus mode: each service's network is recorded on its way to the
    // engine, and this node's pods are kept.
    let networks: Arc<Mutex<ServiceNetworks>> = Arc::default();
    let service_sink: ServiceSink = if args.proxy.multus {
        Box::new(NetworkRecorder {
            inner: store,
            networks: networks.clone(),
        })
    } else {
        Box::new(store)
    };
    let pod_handler = args.proxy.multus.then(|| PodHandler::new(&node, changes.clone()));
    let pods_synced = pod_handler.as_ref().map(|h| h.synced.clone());
    let pod_store = pod_handler.as_ref().map(|h| h.store.clone());

    let (tasks, node_zone) = match &args.source.manifests {
        Some(path) => {
            let first = manifest_source::Read::new(path);
            // At startup nothing was read before: a broken file stops the
            // start (later, a broken edit keeps the last good read).
            if let Some(e) = first.error() {
                anyhow::bail!("--manifests: {e}; nothing was started");
            }
            if informer_glue::manifests::files(path).is_ok_and(|f| f.is_empty()) {
                tracing::warn!(path = %path.display(), "no manifest files (.yaml, .yml, .json) there yet");
            }
            let zone = first.summary().and_then(|s| s.node_zone(&node));
            let task = tokio::spawn(manifest_source::watch_manifests(
                path.clone(),
                first,
                selection.clone(),
                slices,
                service_sink,
                pod_handler,
                stop_rx.clone(),
            ));
            (vec![tokio::spawn(async move { drop(task.await) })], zone)
        }
        None => {
            let client = client(&args.source).await?;
            let zone = match &args.proxy.node_zone {
                Some(_) => None,
                None => api_node_zone(&client, &node).await,
            };
            let settings = WatchSettings {
                label_selector: selection.label_selector(),
                field_selector: None,
                page_size: args.list_page_size,
                relist_every: Some(args.config_sync_period),
            };
            let sel = selection.clone();
            let slice_settings = WatchSettings {
                label_selector: selection.slice_label_selector(),
                ..settings.clone()
            };
            let slice_task = tokio::spawn(run_watch(
                Api::<EndpointSlice>::all(client.clone()),
                slice_settings,
                EventFold::with_selection(move |s| sel.selects_slice(s)).keeping(SlimSlices),
                slices,
                slice_watch.clone(),
                stopped(stop_rx.clone()),
            ));
            let sel = selection.clone();
            let service_task = tokio::spawn(run_watch(
                Api::<Service>::all(client.clone()),
                settings.clone(),
                EventFold::with_selection(move |s| sel.selects_service(s)).keeping(SlimServices),
                service_sink,
                service_watch.clone(),
                stopped(stop_rx.clone()),
            ));
            // Multus mode: this node's pods only; the cluster's are never
            // cached.
            let pod_task = pod_handler.map(|handler| {
                let pod_settings = WatchSettings {
                    label_selector: String::new(),
                    field_selector: Some(format!("spec.nodeName={node}")),
                    ..settings
                };
                tokio::spawn(run_watch(
                    Api::<Pod>::all(client),
                    pod_settings,
                    EventFold::new(),
                    handler,
                    pod_watch.clone(),
                    stopped(stop_rx.clone()),
                ))
            });
            let both = tokio::spawn(async move {
                let _ = tokio::join!(slice_task, service_task);
                if let Some(t) = pod_task {
                    let _ = t.await;
                }
            });
            (vec![both], zone)
        }
    };

    let health = Arc::new(ProxierHealth::new(&families, 2 * args.sync_period));
    for w in [&slice_watch, &service_watch, &pod_watch] {
        health.watch(w.clone());
    }
    let metrics = Arc::new(Metrics::default());
    let mut servers = Vec::new();
    if let Some(l) = bind("--healthz-bind-address", &args.healthz_bind_address).await? {
        tracing::info!(address = %args.healthz_bind_address, "serving /healthz and /livez");
        servers.push(tokio::spawn(serve(l, health.handler(), stopped(stop_rx.clone()))));
    }
    if let Some(l) = bind("--metrics-bind-address", &args.metrics_bind_address).await? {
        tracing::info!(address = %args.metrics_bind_address, "serving /metrics");
        let m = metrics.clone();
        let handler: crate::http::Handler = Arc::new(move |path| match path {
            "/metrics" => Reply {
                status: 200,
                headers: vec![("Content-Type", "text/plain; version=0.0.4; charset=utf-8".into())],
                body: m.render(),
            },
            _ => Reply::not_found(),
        });
        servers.push(tokio::spawn(serve(l, handler, stopped(stop_rx.clone()))));
    }
    // Health-check listeners live in their own task: binding is async.
    let (hc_tx, mut hc_rx) = watch::channel(HealthChecks::new());
    let hc_bind: std::net::IpAddr = match families[0] {
        IpFamily::V4 => std::net::Ipv4Addr::UNSPECIFIED.into(),
        IpFamily::V6 => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let mut service_health = ServiceHealth::new(hc_bind, health.clone());
    let mut hc_stop = stop_rx.clone();
    // A dry run opens no ports on the node's behalf.
    let serve_health_checks = !args.is_dry_run();
    servers.push(tokio::spawn(async move {
        if !serve_health_checks {
            let _ = hc_stop.wait_for(|s| *s).await;
            drop(hc_rx);
            return;
        }
        loop {
            let changed = tokio::select! {
                _ = hc_stop.wait_for(|s| *s) => false,
                r = hc_rx.changed() => r.is_ok(),
            };
            if !changed {
                break;
            }
            let wanted = hc_rx.borrow_and_update().clone();
            service_health.sync(&wanted).await;
        }
    }));
    let (h, m, forward_to, mut fwd_stop) = (health.clone(), metrics.clone(), sync_needed.clone(), stop_rx.clone());
    let forward = changes.clone();
    servers.push(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = fwd_stop.wait_for(|s| *s) => break,
                () = forward.notified() => {
                    let now = SystemTime::now();
                    h.queued(now);
                    m.queued(now);
                    forward_to.notify_one();
                }
            }
        }
    }));

    let mut proxiers = if let Some(pods) = &pod_store {
        Proxiers::Multus(
            engines
                .into_iter()
                .map(|engine| {
                    let family = engine.slices.lock().map(|c| c.family()).unwrap_or(IpFamily::V4);
                    let backend: Box<dyn PodBackend> = if args.is_dry_run() {
                        Box::new(DryRunPods {
                            dir: args.dry_run_dir.clone(),
                        })
                    } else {
                        Box::new(Commands {
                            no_conntrack: args.no_conntrack,
                        })
                    };
                    MultusProxier::new(engine, family, pods.clone(), networks.clone(), resolver(&args), backend)
                })
                .collect(),
        )
    } else {
        Proxiers::Node(node_proxiers(&args, engines, &families, node_zone))
    };
    if let Some(dir) = &args.dry_run_dir {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("--dry-run-dir {}: {e}", dir.display()))?;
    }

    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });

    // Never sync before every kind is listed: a half-known cluster would
    // look like deleted services.
    tracing::info!("waiting for the initial lists");
    let mut stop = stop_rx.clone();
    let ready = loop {
        let slices_done = slices_synced.iter().all(|s| s.load(Ordering::Acquire));
        let pods_done = pods_synced.as_ref().is_none_or(|p| p.load(Ordering::Acquire));
        if slices_done && pods_done && services_synced.load(Ordering::Acquire) {
            break true;
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break false,
            () = sync_needed.notified() => {}
        }
    };

    if ready {
        let timing = SyncTiming {
            min_interval: args.min_sync_period,
            max_interval: args.sync_period,
            ..SyncTiming::default()
        };
        let runner = SyncRunner::new(timing, sync_needed.clone());
        let counters = WatchCounters {
            slice_watch,
            service_watch,
            pod_watch,
            slices_rejected,
            services_rejected,
        };
        runner
            .run(
                |reason| {
                    let result = match &mut proxiers {
                        Proxiers::Node(p) => sync_all(reason, p, &health, &metrics, &hc_tx).map_err(|e| e.to_string()),
                        Proxiers::Multus(p) => sync_multus(reason, p, &health, &metrics),
                    };
                    counters.publish(&metrics);
                    std::future::ready(result)
                },
                stopped(stop_rx.clone()),
            )
            .await;
    }
    for t in tasks {
        let _ = t.await;
    }
    for s in servers {
        s.abort();
    }
    signals.abort();
    if args.is_dry_run() {
        tracing::info!("stopped (a dry run: nothing was applied)");
    } else {
        tracing::info!("stopped; the rules stay in place");
    }
    Ok(())
}

/// How multus mode finds pods' namespaces: a directory, or the runtime.
fn resolver(args: &RunArgs) -> Box<dyn PodNetnsResolver> {
    if let Some(dir) = &args.pods.pod_netns_dir {
        return Box::new(NetnsDir { dir: dir.clone() });
    }
    match args.pods.runtime() {
        Ok(r) => {
            tracing::info!(endpoint = %r.endpoint(), "pod namespaces from the container runtime");
            Box::new(r)
        }
        // `validate` checked a given endpoint; the defaults are well formed.
        Err(why) => unreachable!("{why}"),
    }
}

/// The proxiers of a run: the node's tables, or (multus) pods' tables.
enum Proxiers {
    Node(Vec<Proxier>),
    Multus(Vec<MultusProxier>),
}

/// One proxier per family, programming this node's namespace (or --netns).
fn node_proxiers(
    args: &RunArgs,
    engines: Vec<Engine>,
    families: &[IpFamily],
    node_zone: Option<String>,
) -> Vec<Proxier> {
    engines
        .into_iter()
        .map(|engine| {
            let family = engine.slices.lock().map(|c| c.family()).unwrap_or(IpFamily::V4);
            let config = DataplaneConfig {
                family,
                ..dataplane_config(&args.proxy, node_zone.clone())
            };
            let dataplane: Box<dyn Dataplane + Send> = if args.is_dry_run() {
                Box::new(DryRun {
                    dir: args.dry_run_dir.clone(),
                    count: 0,
                    prefix: if families.len() > 1 {
                        format!("{family}-")
                    } else {
                        String::new()
                    },
                })
            } else {
                Box::new(NftCommand {
                    netns: Netns::from_flag(args.netns.clone()),
                })
            };
            let conntrack: Box<dyn Conntrack + Send> = if args.is_dry_run() || args.no_conntrack {
                Box::new(NoConntrack)
            } else {
                Box::new(ConntrackTool {
                    netns: Netns::from_flag(args.netns.clone()),
                })
            };
            Proxier::new(engine, config, dataplane, conntrack)
        })
        .collect()
}

/// Counters kept by the watches and handlers, published as metrics.
struct WatchCounters {
    slice_watch: Arc<WatchMetrics>,
    service_watch: Arc<WatchMetrics>,
    pod_watch: Arc<WatchMetrics>,
    slices_rejected: Arc<Rejections>,
    services_rejected: Arc<Rejections>,
}

impl WatchCounters {
    fn publish(&self, metrics: &Metrics) {
        for (resource, w) in [
            ("endpointslices", &self.slice_watch),
            ("services", &self.service_watch),
            ("pods", &self.pod_watch),
        ] {
            let label = format!("resource=\"{resource}\"");
            metrics.set_counter(
                "proxyd_watch_restarts_total",
                label.clone(),
                w.errors.load(Ordering::Relaxed),
            );
            metrics.set_counter(
                "proxyd_relists_total",
                label,
                w.lists.load(Ordering::Relaxed).saturating_sub(1),
            );
        }
        for (kind, reasons) in [
            ("EndpointSlice", &self.slices_rejected),
            ("Service", &self.services_rejected),
        ] {
            for (reason, n) in reasons.by_reason() {
                metrics.set_counter(
                    "proxyd_rejected_objects_total",
                    format!("kind=\"{kind}\",reason=\"{reason}\""),
                    n,
                );
            }
        }
    }
}

/// The periodic sync also re-asserts the fixed skeleton.
fn sync_kind(reason: SyncReason) -> SyncKind {
    if reason == SyncReason::Periodic {
        SyncKind::Periodic
    } else {
        SyncKind::Changes
    }
}

/// One sync of every family.
fn sync_all(
    reason: SyncReason,
    proxiers: &mut [Proxier],
    health: &ProxierHealth,
    metrics: &Metrics,
    health_checks: &watch::Sender<HealthChecks>,
) -> Result<(), DataplaneError> {
    let kind = sync_kind(reason);
    let mut failure = None;
    for p in proxiers.iter_mut() {
        let started = Instant::now();
        match p.sync(kind) {
            Ok(out) => {
                let now = SystemTime::now();
                health.updated(p.family, now);
                metrics.observe_sync(p.family, &out.observation, now);
                for e in &out.conntrack_errors {
                    tracing::warn!(family = %p.family, "conntrack cleanup: {e}");
                }
                tracing::info!(
                    family = %p.family,
                    first = reason == SyncReason::Initial,
                    reason = ?reason,
                    service_ports = p.engine.services.len(),
                    service_ports_with_endpoints = p.engine.endpoints.len(),
                    changed_services = out.changed,
                    full = out.report.full,
                    services_written = out.report.services_written,
                    nft_bytes = out.report.script_bytes,
                    conntrack_flows = out.conntrack_flows,
                    conntrack_deleted = out.observation.conntrack_deleted,
                    render_us = out.report.render.as_micros() as u64,
                    apply_us = out.report.apply.as_micros() as u64,
                    took_us = started.elapsed().as_micros() as u64,
                    "synced"
                );
            }
            Err(e) => {
                metrics.observe_sync(
                    p.family,
                    &SyncObservation {
                        failed: true,
                        ..SyncObservation::default()
                    },
                    SystemTime::now(),
                );
                tracing::warn!(family = %p.family, reason = ?reason, "sync failed, the next one rewrites the whole table: {e}");
                failure = Some(e);
            }
        }
        let (eps, svcs) = p.pending();
        metrics.set_pending(p.family, eps, svcs);
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
    failure.map_or(Ok(()), Err)
}

/// One multus sync of every family. A pod that fails is logged and
/// counted; it never fails the sync of the others (nor health).
fn sync_multus(
    reason: SyncReason,
    proxiers: &mut [MultusProxier],
    health: &ProxierHealth,
    metrics: &Metrics,
) -> Result<(), String> {
    let kind = sync_kind(reason);
    let mut runtime_down = None;
    for p in proxiers.iter_mut() {
        let started = Instant::now();
        let out = p.sync(kind);
        let now = SystemTime::now();
        health.updated(p.family, now);
        metrics.observe_multus(p.family, out.programmed_pods, out.failures.len(), out.runtime_errors);
        tracing::info!(
            family = %p.family,
            reason = ?reason,
            changed_services = out.changed_services,
            programmed_pods = out.programmed_pods,
            pods_written = out.transactions,
            route_changes = out.route_changes,
            conntrack_deleted = out.conntrack_deleted,
            failed_pods = out.failures.len(),
            took_us = started.elapsed().as_micros() as u64,
            "synced"
        );
        if out.runtime_errors > 0 {
            runtime_down = Some(out.runtime_errors);
        }
    }
    // Pods the runtime could not be asked about are retried with the
    // runner's backoff, not only at the next periodic sync.
    match runtime_down {
        Some(n) => Err(format!(
            "the container runtime could not be asked about {n} pod(s); retrying"
        )),
        None => Ok(()),
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
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
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `proxyd cleanup`: removes proxyd's tables (both families). Conntrack
/// entries are left to time out: deleting them would cut live connections.
pub fn cleanup(args: crate::cli::CleanupArgs) -> ExitCode {
    let problems = args.pods.problems(args.multus);
    if !problems.is_empty() {
        for p in &problems {
            tracing::error!("{p}");
        }
        return ExitCode::FAILURE;
    }
    if args.multus {
        return cleanup_multus(&args);
    }
    let nft = NftCommand {
        netns: Netns::from_flag(args.netns),
    };
    // Both families in one nft run: one transaction.
    let script: String = nft_dataplane::syncer::cleanup_transactions(nft_dataplane::names::TABLE)
        .iter()
        .map(|t| t.text())
        .collect();
    match nft.apply_text(&script) {
        Ok(_) => {
            tracing::info!("removed tables ip proxyd and ip6 proxyd");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("cleanup failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `proxyd cleanup --multus`: multus mode's table and routes out of every
/// pod namespace found; says what it removed and where nothing was.
fn cleanup_multus(args: &crate::cli::CleanupArgs) -> ExitCode {
    let mut backend = Commands { no_conntrack: true };
    let namespaces = match multus_namespaces(args) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!("cleanup --multus: cannot list pod namespaces: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for path in namespaces {
        let netns = Netns::Path(path.clone());
        let tables = netns
            .command("nft")
            .args(["list", "tables"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut removed = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            let words = nft_dataplane::names::FamilyWords::of(family);
            let name = format!("table {} {}", words.table, nft_dataplane::names::POD_TABLE);
            if tables.lines().any(|l| l.trim() == name) {
                match backend.remove_table(&path.display().to_string(), &netns, family) {
                    Ok(()) => removed.push(name),
                    Err(e) => {
                        tracing::error!(netns = %path.display(), "{name} not removed: {e}");
                        failed = true;
                    }
                }
            }
            match backend.routes(&path.display().to_string(), &netns, family, &Default::default()) {
                Ok(change) if change.removed > 0 => removed.push(format!("{} {family} route(s)", change.removed)),
                Ok(_) => {}
                Err(e) => tracing::debug!(netns = %path.display(), "routes: {e}"),
            }
        }
        if removed.is_empty() {
            tracing::info!(netns = %path.display(), "nothing of proxyd's there");
        } else {
            tracing::info!(netns = %path.display(), "removed {}", removed.join(", "));
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// The pod namespaces `cleanup --multus` visits.
fn multus_namespaces(args: &crate::cli::CleanupArgs) -> anyhow::Result<Vec<std::path::PathBuf>> {
    if let Some(dir) = &args.pods.pod_netns_dir {
        let mut all: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        all.sort();
        return Ok(all);
    }
    let mut cri = args.pods.runtime().map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(cri.all_namespaces()).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

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
            "--healthz-bind-address",
            "localhost",
            "--cluster-cidr",
            "fd00::/48",
            "--manifests",
            "/nonexistent",
        ]))
        .unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("--min-sync-period (60s) is longer than --sync-period (30s)"));
        assert!(problems[1].contains("--healthz-bind-address \"localhost\" is not an address:port"));
        assert!(problems[2].contains("--cluster-cidr fd00::/48 is ipv6"));
        assert!(problems[3].contains("--manifests /nonexistent: no such file"));
        let dual = run_args(&["--ip-families", "ipv4,ipv6,ipv4", "--cluster-cidr", "fd00::/48"]);
        assert_eq!(dual.families(), [IpFamily::V4, IpFamily::V6]);
        assert!(validate(&dual).is_ok());
    }
}
