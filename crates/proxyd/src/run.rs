//! `proxyd run`: watch the cluster and keep the nftables table in step.
//!
//! ```text
//!  API watches or --manifests ── ServiceStore ─────► ServiceChangeTracker ┐
//!                             └─ SliceCacheHandler ─► EndpointSliceCache ─┤ sync_needed
//!                                                                         ▼
//!  SyncRunner: starts once both kinds are listed; at most one sync per
//!  --min-sync-period, at least one per --sync-period, retries with backoff
//!  after a failure. Each sync applies the pending changes to the maps and
//!  hands the changed services to the NftSyncer (full on the first sync and
//!  after a failure, partial otherwise). SIGTERM/SIGINT stop everything;
//!  the rules stay in place.
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_glue::fold::EventFold;
use informer_glue::manifests;
use informer_glue::runner::{WatchMetrics, WatchSettings, run_watch};
use informer_glue::selection::Selection;
use informer_glue::{ServiceStore, SliceCacheHandler};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio::sync::{Notify, watch};

use crate::cli::RunArgs;
use crate::dataplane::{Dataplane, DataplaneError, DryRun, NftCommand, NftSyncer, SyncKind};
use crate::engine::Engine;
use crate::snapshot::{api_node_zone, client, dataplane_config, node_name, selection};
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
pub fn init_logging() {
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

/// How often `--manifests` files are checked for changes.
const MANIFEST_POLL: Duration = Duration::from_secs(1);

type Stop = watch::Receiver<bool>;

async fn stopped(mut rx: Stop) {
    let _ = rx.wait_for(|s| *s).await;
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let node = node_name(&args.proxy)?;
    let selection = selection(&args.proxy);
    tracing::info!(node = %node, family = %args.proxy.ip_family, selector = %selection.label_selector(), "starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut engine = Engine::new(&node, args.proxy.ip_family);
    // One wake-up for both kinds: the runner coalesces them.
    let sync_needed = Arc::new(Notify::new());
    let mut slices = SliceCacheHandler::new(engine.slices.clone());
    slices.sync_needed = sync_needed.clone();
    let services: informer_glue::Services = Arc::new(Mutex::new(BTreeMap::new()));
    let mut store = ServiceStore::new(services.clone());
    store.changed = sync_needed.clone();
    store.tracker = Some(engine.service_changes.clone());
    let (slices_synced, services_synced) = (slices.synced.clone(), store.synced.clone());

    let (tasks, node_zone) = match &args.source.manifests {
        Some(path) => {
            let zone = manifests::load(path).ok().and_then(|m| m.node_zone(&node));
            let task = tokio::spawn(watch_manifests(
                path.clone(),
                selection.clone(),
                slices,
                store,
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
                page_size: args.list_page_size,
            };
            let sel = selection.clone();
            let slice_task = tokio::spawn(run_watch(
                Api::<EndpointSlice>::all(client.clone()),
                settings.clone(),
                EventFold::with_selection(move |s| sel.selects_slice(s)),
                slices,
                Arc::new(WatchMetrics::default()),
                stopped(stop_rx.clone()),
            ));
            let sel = selection.clone();
            let service_task = tokio::spawn(run_watch(
                Api::<Service>::all(client),
                settings,
                EventFold::with_selection(move |s| sel.selects_service(s)),
                store,
                Arc::new(WatchMetrics::default()),
                stopped(stop_rx.clone()),
            ));
            let both = tokio::spawn(async move {
                let _ = tokio::join!(slice_task, service_task);
            });
            (vec![both], zone)
        }
    };
    let config = dataplane_config(&args.proxy, node_zone);
    tracing::info!(zone = config.node_zone.as_deref().unwrap_or("(none)"), "topology");
    let dataplane: Box<dyn Dataplane + Send> = if args.dry_run {
        if let Some(dir) = &args.dry_run_dir {
            std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("--dry-run-dir {}: {e}", dir.display()))?;
        }
        Box::new(DryRun {
            dir: args.dry_run_dir.clone(),
            count: 0,
        })
    } else {
        Box::new(NftCommand {
            netns: args.netns.clone(),
        })
    };
    let mut syncer = NftSyncer::new(config, dataplane);

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
        // Services changed since the last successful sync: a failed sync
        // keeps them for the retry.
        let mut pending: BTreeSet<slice_model::ServiceName> = BTreeSet::new();
        let runner = SyncRunner::new(timing, sync_needed.clone());
        runner
            .run(
                |reason| {
                    let result = sync_once(reason, &mut engine, &mut syncer, &mut pending, &services);
                    std::future::ready(result)
                },
                stopped(stop_rx.clone()),
            )
            .await;
    }
    for t in tasks {
        let _ = t.await;
    }
    signals.abort();
    tracing::info!("stopped; the rules stay in place");
    Ok(())
}

/// Re-reads `--manifests` whenever its files change and hands each
/// complete read to the handlers as a relist. A read that fails (a file
/// half-written, a syntax error) is reported and changes nothing.
async fn watch_manifests(
    path: PathBuf,
    selection: Selection,
    mut slices: SliceCacheHandler,
    mut store: ServiceStore,
    mut stop: Stop,
) {
    let sel = selection.clone();
    let mut slice_fold = EventFold::with_selection(move |s| sel.selects_slice(s));
    let mut service_fold = EventFold::with_selection(move |s| selection.selects_service(s));
    let mut last = None;
    loop {
        let now = manifests::fingerprint(&path);
        if last.as_ref() != Some(&now) {
            match manifests::load(&path) {
                Ok(m) => {
                    for s in &m.skipped {
                        tracing::debug!("manifests: skipped {s}");
                    }
                    tracing::info!(
                        path = %path.display(),
                        services = m.services.len(),
                        endpoint_slices = m.slices.len(),
                        "manifests read"
                    );
                    manifests::relist(&mut service_fold, &m.services, &mut store);
                    manifests::relist(&mut slice_fold, &m.slices, &mut slices);
                }
                Err(e) => tracing::warn!("manifests: {e}; keeping what was read before"),
            }
            last = Some(now);
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(MANIFEST_POLL) => {}
        }
    }
}

/// One sync: apply pending changes to the maps, then write the changed
/// services to the dataplane.
fn sync_once(
    reason: SyncReason,
    engine: &mut Engine,
    syncer: &mut NftSyncer<Box<dyn Dataplane + Send>>,
    pending: &mut BTreeSet<slice_model::ServiceName>,
    services: &informer_glue::Services,
) -> Result<(), DataplaneError> {
    let started = Instant::now();
    let update = engine.update();
    pending.extend(update.changed.iter().cloned());
    let kind = if reason == SyncReason::Periodic {
        SyncKind::Periodic
    } else {
        SyncKind::Changes
    };
    let result = syncer.sync(&engine.services, &engine.endpoints, pending, kind);
    let services_known = services.lock().map(|s| s.len()).unwrap_or(0);
    match &result {
        Ok(report) => {
            tracing::info!(
                first = reason == SyncReason::Initial,
                reason = ?reason,
                services = services_known,
                service_ports_with_endpoints = engine.endpoints.len(),
                changed_services = update.changed.len(),
                stale_udp_endpoints = update.endpoints.stale_endpoints.len(),
                stale_udp_services = update.endpoints.stale_service_names.len(),
                full = report.full,
                services_written = report.services_written,
                nft_bytes = report.script_bytes,
                render_us = report.render.as_micros() as u64,
                apply_us = report.apply.as_micros() as u64,
                took_us = started.elapsed().as_micros() as u64,
                "synced"
            );
            for svc in pending.iter() {
                tracing::debug!(service = %svc, "endpoints changed");
            }
            pending.clear();
        }
        Err(e) => tracing::warn!(
            reason = ?reason,
            pending_services = pending.len(),
            "sync failed, the next one rewrites the whole table: {e}"
        ),
    }
    result.map(|_| ())
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
