//! Driving an [`EventHandler`] from a kube-runtime watcher.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::fold::{EventFold, EventHandler, Keep};

/// Counters of one watch, shared with whoever reports them (metrics).
#[derive(Debug, Default)]
pub struct WatchMetrics {
    /// Watch events received (all kinds).
    pub events: AtomicU64,
    /// Errors from the watch (list, watch start, watch stream, ERROR
    /// events); each is followed by a retry with backoff.
    pub errors: AtomicU64,
    /// Complete lists (the first one and every relist).
    pub lists: AtomicU64,
    /// Lists restarted before they completed.
    pub aborted_lists: AtomicU64,
    /// Deletes that only a relist revealed.
    pub deletes_found_by_relist: AtomicU64,
}

/// How to watch one kind.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Label selector for list and watch requests.
    pub label_selector: String,
    /// Field selector (`spec.nodeName=NODE` for this node's pods), if any.
    pub field_selector: Option<String>,
    /// Objects per list page.
    pub page_size: u32,
    /// Relist everything this often even when the watch is healthy
    /// (kube-proxy's `--config-sync-period`); `None`: only when needed.
    pub relist_every: Option<std::time::Duration>,
}

/// Watches `api` until `shutdown` completes, folding events into `handler`
/// (see [`EventFold`]). Errors are logged with context and counted; the
/// watch retries with kube-runtime's default backoff and never gives up.
/// Returns the handler.
///
/// Uses list-then-watch (not streaming lists), so every restart begins with
/// a complete list that the fold can check deletes against.
pub async fn run_watch<K, P, H>(
    api: Api<K>,
    settings: WatchSettings,
    mut fold: EventFold<K, P>,
    mut handler: H,
    metrics: Arc<WatchMetrics>,
    shutdown: impl Future<Output = ()>,
) -> H
where
    K: Resource + ResourceExt + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    P: Keep<K>,
    H: EventHandler<K>,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let span = tracing::info_span!("watch", kind = %kind, selector = %settings.label_selector);
    async move {
        let mut config = watcher::Config::default()
            .labels(&settings.label_selector)
            .page_size(settings.page_size);
        if let Some(fields) = &settings.field_selector {
            config = config.fields(fields);
        }
        let start = || Box::pin(watcher(api.clone(), config.clone()).default_backoff());
        let mut stream = start();
        futures::pin_mut!(shutdown);
        tracing::info!("starting");
        // A new watcher begins with a complete list: the fold turns it into
        // updates and deletes like any relist.
        let every = settings.relist_every.filter(|d| !d.is_zero());
        let relist = tokio::time::sleep(every.unwrap_or(std::time::Duration::from_secs(3600)));
        futures::pin_mut!(relist);
        loop {
            let item = tokio::select! {
                () = &mut shutdown => break,
                () = &mut relist, if every.is_some() => {
                    tracing::debug!("periodic relist");
                    stream = start();
                    if let Some(every) = every {
                        relist.as_mut().reset(tokio::time::Instant::now() + every);
                    }
                    continue;
                }
                item = stream.next() => item,
            };
            match item {
                Some(Ok(event)) => {
                    metrics.events.fetch_add(1, Ordering::Relaxed);
                    let was_synced = fold.is_synced();
                    fold.apply(event, &mut handler);
                    let s = fold.stats();
                    metrics.lists.store(s.lists, Ordering::Relaxed);
                    metrics.aborted_lists.store(s.aborted_lists, Ordering::Relaxed);
                    metrics
                        .deletes_found_by_relist
                        .store(s.deletes_found_by_relist, Ordering::Relaxed);
                    if !was_synced && fold.is_synced() {
                        tracing::info!(objects = fold.len(), "synced");
                    }
                }
                Some(Err(e)) => {
                    metrics.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "watch failed; retrying with backoff");
                }
                None => {
                    tracing::error!("watch stream ended unexpectedly");
                    break;
                }
            }
        }
        tracing::info!("stopped");
        handler
    }
    .instrument(span)
    .await
}
