//! `proxyd run`: watch the cluster and keep the endpoints map in sync.
//!
//! ```text
//!  watch "services"  ── ServiceStore ──────────┐ changed
//!  watch "slices"    ── SliceCacheHandler ─────┤ sync_needed
//!                                              ▼
//!  SyncRunner: starts once both kinds are listed; at most one sync per
//!  --min-sync-period, at least one per --sync-period; each sync applies
//!  the cache to the endpoints map and logs what changed.
//!  SIGTERM/SIGINT stop everything.
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use endpoints_map::EndpointsMap;
use informer_glue::fold::EventFold;
use informer_glue::runner::{WatchMetrics, WatchSettings, run_watch};
use informer_glue::selection::Selection;
use informer_glue::{ServiceStore, SliceCacheHandler};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use slice_cache::EndpointSliceCache;
use tokio::sync::{Notify, watch};

use crate::cli::RunArgs;
use crate::sync_runner::{SyncReason, SyncRunner, SyncTiming};

/// `proxyd run` from the command line.
pub fn main(args: RunArgs) -> ExitCode {
    init_logging();
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

/// Logs to stderr; the level comes from `RUST_LOG` (`error`, `warn`,
/// `info`, `debug`, `trace`), `info` by default.
fn init_logging() {
    let level = std::env::var("RUST_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .try_init();
}

async fn client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster")?,
    };
    tracing::info!(server = %config.cluster_url, "connecting to the API server");
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

/// The node name: --hostname-override, else the kernel's host name.
fn node_name(args: &RunArgs) -> anyhow::Result<String> {
    if let Some(n) = args
        .hostname_override
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        return Ok(n.to_lowercase());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the host name; set --hostname-override")?;
    Ok(host.trim().to_lowercase())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let node = node_name(&args)?;
    let client = client(&args).await?;
    let selection = Selection {
        proxy_name: args.service_proxy_name.clone(),
    };
    tracing::info!(node = %node, family = %args.ip_family, selector = %selection.label_selector(), "starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let cache = Arc::new(Mutex::new(EndpointSliceCache::new(node.as_str(), args.ip_family)));
    let services: informer_glue::Services = Arc::new(Mutex::new(BTreeMap::new()));
    // One wake-up for both kinds: the runner coalesces them.
    let sync_needed = Arc::new(Notify::new());
    let mut slices = SliceCacheHandler::new(cache.clone());
    slices.sync_needed = sync_needed.clone();
    let mut store = ServiceStore::new(services.clone());
    store.changed = sync_needed.clone();
    let (slices_synced, services_synced) = (slices.synced.clone(), store.synced.clone());

    let settings = WatchSettings {
        label_selector: selection.label_selector(),
        page_size: args.list_page_size,
    };
    let slice_metrics = Arc::new(WatchMetrics::default());
    let service_metrics = Arc::new(WatchMetrics::default());
    let sel = selection.clone();
    let slice_task = tokio::spawn(run_watch(
        Api::<EndpointSlice>::all(client.clone()),
        settings.clone(),
        EventFold::with_selection(move |s| sel.selects_slice(s)),
        slices,
        slice_metrics.clone(),
        stopped(stop_rx.clone()),
    ));
    let sel = selection.clone();
    let service_task = tokio::spawn(run_watch(
        Api::<Service>::all(client),
        settings,
        EventFold::with_selection(move |s| sel.selects_service(s)),
        store,
        service_metrics.clone(),
        stopped(stop_rx.clone()),
    ));

    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });

    // Never sync before both kinds are listed: a half-known cluster would
    // look like deleted services.
    tracing::info!("waiting for the initial lists of services and endpoint slices");
    let mut stop = stop_rx.clone();
    let ready = loop {
        if slices_synced.load(Ordering::Acquire) && services_synced.load(Ordering::Acquire) {
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
        let mut map = EndpointsMap::new();
        let runner = SyncRunner::new(timing, sync_needed.clone());
        runner
            .run(
                |reason| {
                    sync_endpoints(reason, &cache, &mut map, &services);
                    std::future::ready(Ok::<(), std::convert::Infallible>(()))
                },
                stopped(stop_rx.clone()),
            )
            .await;
    }
    let _ = tokio::join!(slice_task, service_task);
    signals.abort();
    let errors = slice_metrics.errors.load(Ordering::Relaxed) + service_metrics.errors.load(Ordering::Relaxed);
    tracing::info!(watch_errors = errors, "stopped");
    Ok(())
}

/// One sync: apply the cache to the endpoints map and log what changed.
fn sync_endpoints(
    reason: SyncReason,
    cache: &Mutex<EndpointSliceCache>,
    map: &mut EndpointsMap,
    services: &informer_glue::Services,
) {
    let started = Instant::now();
    let result = {
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        map.update(&mut cache)
    };
    let services_known = services.lock().map(|s| s.len()).unwrap_or(0);
    tracing::info!(
        first = reason == SyncReason::Initial,
        reason = ?reason,
        services = services_known,
        service_ports_with_endpoints = map.len(),
        changed_services = result.changed_services.len(),
        stale_udp_endpoints = result.stale_endpoints.len(),
        stale_udp_services = result.stale_service_names.len(),
        took_us = started.elapsed().as_micros() as u64,
        "synced"
    );
    for svc in &result.changed_services {
        let ports: Vec<String> = map
            .service(svc)
            .map(|s| {
                s.ports()
                    .iter()
                    .map(|p| format!("{}/{}={}", p.name, p.protocol, p.endpoints.len()))
                    .collect()
            })
            .unwrap_or_default();
        tracing::debug!(service = %svc, ports = ?ports, "endpoints changed");
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
