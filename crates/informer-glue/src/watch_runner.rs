//! Driving an [`EventHandler`] from a kube-runtime watcher.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tracing::Instrument;

use crate::watch_error::WatchError;

use crate::counters::{Counter, Gauge};
use crate::fold::{EventFold, EventHandler, Keep};
use crate::lenient::{Lean, Watched};
use crate::liveness::{Liveness, Probe};

/// Counters of one watch, shared with whoever reports them (health, and,
/// with the `prometheus` feature, the exported series
/// `source_metrics::SourceMetrics::watch` hands out; a default value counts
/// into series nobody exports).
#[derive(Debug, Default)]
pub struct WatchMetrics {
    /// The resource watched (`endpointslices`, ...; empty when unnamed).
    pub resource: &'static str,
    /// Watch events received (all kinds).
    pub events: AtomicU64,
    /// Errors from the watch (list, watch start, watch stream, ERROR
    /// events); each is followed by a retry with backoff.
    pub errors: Counter,
    /// Complete lists after the first one.
    pub relists: Counter,
    /// Complete lists (the first one and every relist).
    pub lists: AtomicU64,
    /// Lists restarted before they completed.
    pub aborted_lists: AtomicU64,
    /// Deletes that only a relist revealed.
    pub deletes_found_by_relist: AtomicU64,
    /// When the watch started failing (milliseconds since the Unix epoch),
    /// or 0 while it works.
    pub failing_since_ms: AtomicU64,
    /// 1 while the watch is failing, else 0 (`proxyd_watch_failing`).
    pub failing: Gauge,
    /// The last error while the watch is failing (`None` while it works).
    pub last_error: std::sync::Mutex<Option<WatchError>>,
    /// Objects skipped because they could not be decoded, once per
    /// object and resourceVersion (`proxyd_rejected_objects_total` with
    /// reason `undecodable`).
    pub undecodable: Counter,
}

impl WatchMetrics {
    /// The last error, while the watch is failing.
    pub fn last_error(&self) -> Option<WatchError> {
        slice_model::internal::lock(&self.last_error).clone()
    }

    /// How long the watch has been failing at `now`, if it is.
    pub fn down_for(&self, now: SystemTime) -> Option<Duration> {
        match self.failing_since_ms.load(Ordering::Acquire) {
            0 => None,
            ms => Some(
                now.duration_since(UNIX_EPOCH + Duration::from_millis(ms))
                    .unwrap_or_default(),
            ),
        }
    }
}

/// The first retry after a failure waits this long, doubling to
/// [`RETRY_MAX`], each delay plus a random part of itself: a long outage is
/// retried every 2-4 s, never in a tight loop, and a server that comes back
/// is found within a few seconds.
pub const RETRY_MIN: Duration = Duration::from_millis(250);

/// The longest retry delay before jitter.
pub const RETRY_MAX: Duration = Duration::from_secs(2);

/// While a watch keeps failing, a reminder at most this often.
const REMINDER: Duration = Duration::from_secs(60);

/// When to retry a failing watch, and what to say about it.
struct Retry {
    delays: backon::ExponentialBackoff,
    failing_since: Option<Instant>,
    last_said: Option<Instant>,
    failures: u64,
}

fn delays() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(RETRY_MIN)
        .with_max_delay(RETRY_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

impl Retry {
    fn new() -> Self {
        Self {
            delays: delays(),
            failing_since: None,
            last_said: None,
            failures: 0,
        }
    }

    /// A failure: how long to wait. Says so once when failing starts, then
    /// at most once per [`REMINDER`].
    fn failed(&mut self, error: WatchError, metrics: &WatchMetrics) -> Duration {
        self.failed_since(error, Instant::now(), metrics)
    }

    /// A failure that began at `began` (a silent server: when it was last
    /// heard from), which is when the watch counts as failing since.
    fn failed_since(&mut self, error: WatchError, began: Instant, metrics: &WatchMetrics) -> Duration {
        let now = Instant::now();
        self.failures += 1;
        *slice_model::internal::lock(&metrics.last_error) = Some(error.clone());
        let since = *self.failing_since.get_or_insert_with(|| {
            let ms = SystemTime::now()
                .checked_sub(now.duration_since(began))
                .unwrap_or_else(SystemTime::now)
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            metrics
                .failing_since_ms
                .store(u64::try_from(ms).unwrap_or(u64::MAX).max(1), Ordering::Release);
            metrics.failing.set(1);
            began
        });
        let say = match self.last_said {
            None => {
                tracing::warn!(error = %error, "watch failing; retrying every few seconds");
                true
            }
            Some(t) if now.duration_since(t) >= REMINDER => {
                tracing::warn!(
                    error = %error,
                    down_s = since.elapsed().as_secs(),
                    attempts = self.failures,
                    "watch still failing"
                );
                true
            }
            Some(_) => {
                tracing::debug!(error = %error, "watch failed again");
                false
            }
        };
        if say {
            self.last_said = Some(now);
        }
        self.delays.next().unwrap_or(RETRY_MAX)
    }

    /// Progress (a list's objects arrived, an object changed): the watch
    /// works. Nothing else says so: a request that hangs is no progress,
    /// however long it stays quiet.
    fn progressed(&mut self, metrics: &WatchMetrics) {
        if let Some(since) = self.failing_since.take() {
            tracing::info!(
                down_ms = since.elapsed().as_millis() as u64,
                attempts = self.failures,
                "watch recovered"
            );
            metrics.failing_since_ms.store(0, Ordering::Release);
            metrics.failing.set(0);
            *slice_model::internal::lock(&metrics.last_error) = None;
        }
        self.failures = 0;
        self.last_said = None;
        self.delays = delays();
    }
}

/// How to watch one kind.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Label selector for list and watch requests.
    pub label_selector: kube::core::Selector,
    /// Field selector (`spec.nodeName=NODE` for this node's pods), if any.
    pub field_selector: Option<String>,
    /// Objects per list page.
    pub page_size: u32,
    /// Relist everything this often even when the watch is healthy
    /// (kube-proxy's `--config-sync-period`); `None`: only when needed.
    pub relist_every: Option<std::time::Duration>,
    /// The API server's liveness, shared by the watches of one client
    /// ([`crate::liveness`]); `None`: the watch asks on its own, with
    /// [`Probe::default`].
    pub liveness: Option<Arc<Liveness>>,
}

/// Objects a watch could not decode: each is warned about (and counted)
/// once per resourceVersion, and skipped.
#[derive(Default)]
struct Undecoded {
    /// `namespace/name` -> the resourceVersion last warned about.
    warned: std::collections::HashMap<String, String>,
}

impl Undecoded {
    /// The event for the fold, or `None` for an object that could not be
    /// decoded: a listed one stays as the fold knows it (not deleted when
    /// the list completes), an applied one is skipped. A delete needs only
    /// the name, so it goes through either way.
    fn event<K, P>(
        &mut self,
        event: watcher::Event<Watched<K>>,
        fold: &mut EventFold<K, P>,
        metrics: &WatchMetrics,
    ) -> Option<watcher::Event<K>>
    where
        K: Resource + ResourceExt + Clone,
        K::DynamicType: Default,
        P: Keep<K>,
    {
        use watcher::Event;
        let (watched, listed) = match event {
            Event::Init => return Some(Event::Init),
            Event::InitDone => return Some(Event::InitDone),
            Event::Delete(watched) => {
                let (Ok(obj) | Err((obj, _))) = watched.into_result();
                self.forget(&obj);
                return Some(Event::Delete(obj));
            }
            Event::Apply(watched) => (watched, false),
            Event::InitApply(watched) => (watched, true),
        };
        match watched.into_result() {
            Ok(obj) => {
                self.forget(&obj);
                Some(if listed {
                    Event::InitApply(obj)
                } else {
                    Event::Apply(obj)
                })
            }
            Err((_, problem)) => {
                let key = format!("{}/{}", problem.namespace, problem.name);
                if self.warned.get(&key) != Some(&problem.resource_version) {
                    tracing::warn!("{problem}");
                    metrics.undecodable.inc();
                    self.warned.insert(key, problem.resource_version.clone());
                }
                if listed {
                    fold.still_listed(&problem.namespace, &problem.name);
                }
                None
            }
        }
    }

    fn forget<K: ResourceExt>(&mut self, obj: &K) {
        if !self.warned.is_empty() {
            let meta = obj.meta();
            let key = format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            );
            self.warned.remove(&key);
        }
    }
}

/// Watches `api` until `shutdown` completes, folding events into `handler`
/// (see [`EventFold`]). Objects are decoded leniently ([`Watched`]): one
/// that cannot be decoded is warned about and skipped, and the watch goes
/// on. Errors are counted; a failing watch is retried
/// after [`RETRY_MIN`] doubling to [`RETRY_MAX`] (jittered) and never gives
/// up; it says so once when it starts failing, at most once a minute while
/// it fails, and once when it recovers.
/// Returns the handler.
///
/// Uses list-then-watch (not streaming lists), so every restart begins with
/// a complete list that the fold can check deletes against.
pub async fn run_watch<K, P, H>(
    api: Api<Watched<K>>,
    settings: WatchSettings,
    fold: EventFold<K, P>,
    handler: H,
    metrics: Arc<WatchMetrics>,
    shutdown: impl Future<Output = ()>,
) -> H
where
    K: Lean + Resource<DynamicType = ()> + Default + Clone + Debug + Send + 'static,
    P: Keep<K>,
    H: EventHandler<K>,
{
    let mut config = watcher::Config::default()
        .labels_from(&settings.label_selector)
        .page_size(settings.page_size);
    if let Some(fields) = &settings.field_selector {
        config = config.fields(fields);
    }
    let span = tracing::info_span!("watch", kind = %K::kind(&()), selector = %settings.label_selector);
    let liveness = settings
        .liveness
        .unwrap_or_else(|| Arc::new(Liveness::new(api.clone().into_client(), Probe::default())));
    // The server ends the watch this often and kube-runtime resumes it from
    // its resourceVersion; a connection silent for a few seconds longer is
    // replaced (kube-runtime's idle timeout), whatever the other
    // connections say.
    let config = config.timeout(liveness.probe().watch_timeout_secs());
    let start = move || watcher(api.clone(), config.clone()).boxed();
    let paced = Pace {
        relist_every: settings.relist_every,
        liveness,
    };
    drive(start, paced, fold, handler, metrics, shutdown)
        .instrument(span)
        .await
}

/// What paces a watch besides its events: the periodic relist, and the
/// probe of a quiet API server.
struct Pace {
    relist_every: Option<Duration>,
    liveness: Arc<Liveness>,
}

/// The watch loop of [`run_watch`], over the streams `start` makes: each
/// new stream begins with a complete list. A stream that fails, or ends
/// (kube-runtime's never should), is counted as a failure and started
/// again after the backoff, so the watch never stops; and since the new
/// stream lists first, the watch counts as working again only once
/// objects actually arrive (a watch resumed in place would show nothing
/// until something changed, and could not be told from one that hangs).
/// A server quiet for longer than the probe allows is asked whether it
/// still answers ([`crate::liveness`]); one that does not is a failure
/// since it was last heard from, and the stream starts again.
async fn drive<K, P, H, S>(
    start: impl Fn() -> S,
    pace: Pace,
    mut fold: EventFold<K, P>,
    mut handler: H,
    metrics: Arc<WatchMetrics>,
    shutdown: impl Future<Output = ()>,
) -> H
where
    K: Resource + ResourceExt + Clone,
    K::DynamicType: Default,
    P: Keep<K>,
    H: EventHandler<K>,
    S: futures::Stream<Item = Result<watcher::Event<Watched<K>>, watcher::Error>> + Unpin,
{
    // The backoff is ours: kube-runtime's stream backoff resets on every
    // `Init`, which the watcher emits before each list attempt, so a
    // server that refuses connections would be retried about once a
    // second forever.
    let mut retry = Retry::new();
    let mut undecoded = Undecoded::default();
    let mut stream = start();
    futures::pin_mut!(shutdown);
    tracing::info!("starting");
    let every = pace.relist_every.filter(|d| !d.is_zero());
    let relist = tokio::time::sleep(every.unwrap_or(Duration::from_secs(3600)));
    futures::pin_mut!(relist);
    let liveness = pace.liveness;
    let quiet_after = liveness.probe().after_quiet;
    let quiet = tokio::time::sleep(quiet_after);
    futures::pin_mut!(quiet);
    let mut probing: Option<futures::future::BoxFuture<'static, Result<(), WatchError>>> = None;
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
            () = &mut quiet, if probing.is_none() => {
                // Events do not move the timer (a list can bring thousands):
                // it moves here, to quiet_after past the last thing heard.
                let quiet_until = liveness.last_heard() + quiet_after;
                if quiet_until > tokio::time::Instant::now() {
                    quiet.as_mut().reset(quiet_until);
                    continue;
                }
                let liveness = liveness.clone();
                probing = Some(Box::pin(async move { liveness.check().await }));
                continue;
            }
            answered = async { probing.as_mut().expect("guarded").await }, if probing.is_some() => {
                probing = None;
                match answered {
                    Ok(()) => {
                        quiet.as_mut().reset(liveness.last_heard() + quiet_after);
                        continue;
                    }
                    Err(silent) => Some(Err(silent)),
                }
            }
            item = stream.next() => item.map(|r| r.map_err(WatchError::from)),
        };
        let wait = match item {
            Some(Ok(event)) => {
                metrics.events.fetch_add(1, Ordering::Relaxed);
                if !matches!(event, watcher::Event::Init) {
                    retry.progressed(&metrics);
                    liveness.heard();
                    probing = None;
                }
                let was_synced = fold.is_synced();
                if let Some(event) = undecoded.event(event, &mut fold, &metrics) {
                    fold.apply(event, &mut handler);
                }
                let s = fold.stats();
                let before = metrics.lists.swap(s.lists, Ordering::Relaxed);
                if s.lists > before {
                    metrics
                        .relists
                        .inc_by(s.lists.saturating_sub(1) - before.saturating_sub(1));
                }
                metrics.aborted_lists.store(s.aborted_lists, Ordering::Relaxed);
                metrics
                    .deletes_found_by_relist
                    .store(s.deletes_found_by_relist, Ordering::Relaxed);
                if !was_synced && fold.is_synced() {
                    tracing::info!(objects = fold.len(), "synced");
                }
                continue;
            }
            Some(Err(e @ WatchError::Silent { .. })) => {
                metrics.errors.inc();
                retry.failed_since(e, liveness.last_heard().into_std(), &metrics)
            }
            Some(Err(e)) => {
                metrics.errors.inc();
                retry.failed(e, &metrics)
            }
            None => {
                metrics.errors.inc();
                retry.failed(WatchError::Ended, &metrics)
            }
        };
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(wait) => {}
        }
        // A new stream lists again; the fold checks deletes against it.
        stream = start();
        quiet.as_mut().reset(tokio::time::Instant::now() + quiet_after);
    }
    tracing::info!("stopped");
    handler
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use k8s_openapi::api::core::v1::Service;
    use kube::runtime::watcher::Event;

    use super::*;

    /// Counts what a handler is told.
    #[derive(Default)]
    struct Counting {
        adds: u32,
        updates: u32,
        deletes: u32,
        synced: u32,
    }

    impl EventHandler<Service> for Counting {
        fn on_add(&mut self, _: &Service) {
            self.adds += 1;
        }
        fn on_update(&mut self, _: &Service, _: &Service) {
            self.updates += 1;
        }
        fn on_delete(&mut self, _: &Service) {
            self.deletes += 1;
        }
        fn on_synced(&mut self) {
            self.synced += 1;
        }
    }

    /// A watch stream that ends (after a complete list) is started again
    /// after the backoff, every time, and each end counts as a failure
    /// (so `/healthz` and `proxyd_watch_restarts_total` see it); the
    /// lists that follow change nothing that did not change.
    #[tokio::test]
    async fn a_stream_that_ends_is_started_again_and_counted() {
        let starts = Arc::new(AtomicUsize::new(0));
        let object =
            Watched::<Service>::from_json(r#"{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}"#);
        let start = {
            let starts = starts.clone();
            move || {
                starts.fetch_add(1, Ordering::SeqCst);
                futures::stream::iter(vec![
                    Ok(Event::Init),
                    Ok(Event::InitApply(object.clone())),
                    Ok(Event::InitDone),
                ])
            }
        };
        let metrics = Arc::new(WatchMetrics::default());
        let began = Instant::now();
        let shutdown = {
            let starts = starts.clone();
            async move {
                while starts.load(Ordering::SeqCst) < 3 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let seen = tokio::time::timeout(
            Duration::from_secs(20),
            drive(
                start,
                answering(),
                EventFold::new(),
                Counting::default(),
                metrics.clone(),
                shutdown,
            ),
        )
        .await
        .expect("the watch keeps going until shut down");
        assert!(starts.load(Ordering::SeqCst) >= 3, "started again after each end");
        assert!(
            metrics.errors.get() >= 2,
            "each end is a failure: {}",
            metrics.errors.get()
        );
        assert!(began.elapsed() >= RETRY_MIN, "not a tight loop: {:?}", began.elapsed());
        assert_eq!((seen.adds, seen.updates, seen.deletes, seen.synced), (1, 0, 0, 1));
    }

    /// Runs `drive` over streams whose items `script(attempt)` gives, each
    /// followed by silence (a request that never completes), for `for_`;
    /// returns the counters and what the handler was told.
    async fn drive_script(
        script: impl Fn(usize) -> Vec<Result<Event<Watched<Service>>, watcher::Error>>,
        for_: Duration,
    ) -> (Arc<WatchMetrics>, Counting, usize) {
        drive_paced(script, answering(), for_).await
    }

    async fn drive_paced(
        script: impl Fn(usize) -> Vec<Result<Event<Watched<Service>>, watcher::Error>>,
        pace: Pace,
        for_: Duration,
    ) -> (Arc<WatchMetrics>, Counting, usize) {
        let starts = Arc::new(AtomicUsize::new(0));
        let start = {
            let starts = starts.clone();
            move || {
                let items = script(starts.fetch_add(1, Ordering::SeqCst));
                futures::stream::iter(items).chain(futures::stream::pending()).boxed()
            }
        };
        let metrics = Arc::new(WatchMetrics::default());
        let seen = drive(
            start,
            pace,
            EventFold::new(),
            Counting::default(),
            metrics.clone(),
            tokio::time::sleep(for_),
        )
        .await;
        (metrics, seen, starts.load(Ordering::SeqCst))
    }

    /// Pacing with no periodic relist, and a server that answers every
    /// probe at once.
    fn answering() -> Pace {
        Pace {
            relist_every: None,
            liveness: Arc::new(Liveness::asking(
                Probe::default(),
                Box::new(|| Box::pin(async { true })),
            )),
        }
    }

    fn listed() -> Vec<Result<Event<Watched<Service>>, watcher::Error>> {
        let object =
            Watched::<Service>::from_json(r#"{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}"#);
        vec![Ok(Event::Init), Ok(Event::InitApply(object)), Ok(Event::InitDone)]
    }

    /// A watch that failed and whose next attempt hangs (an API server
    /// that accepts connections and answers nothing) stays failing however
    /// long the quiet lasts; only a list that arrives recovers it.
    #[tokio::test(start_paused = true)]
    async fn a_retry_that_hangs_is_still_failing_and_only_a_list_recovers_it() {
        let failed_then_hangs = |attempt| match attempt {
            0 => vec![Err(watcher::Error::NoResourceVersion)],
            _ => vec![Ok(Event::Init)],
        };
        let (metrics, seen, starts) = drive_script(failed_then_hangs, Duration::from_secs(600)).await;
        assert_eq!(starts, 2, "one failure, one retry that hangs");
        assert_eq!(
            metrics.failing.get(),
            1,
            "ten minutes of a hanging retry are no recovery"
        );
        assert_ne!(metrics.failing_since_ms.load(Ordering::Acquire), 0);
        assert_eq!(seen.adds, 0);

        let failed_then_lists = |attempt| match attempt {
            0 => vec![Err(watcher::Error::NoResourceVersion)],
            _ => listed(),
        };
        let (metrics, seen, starts) = drive_script(failed_then_lists, Duration::from_secs(10)).await;
        assert_eq!(starts, 2);
        assert_eq!(metrics.failing.get(), 0, "the list after the failure is the recovery");
        assert_eq!(metrics.failing_since_ms.load(Ordering::Acquire), 0);
        assert_eq!((seen.adds, seen.synced), (1, 1));
    }

    /// A server that goes silent after the list (open connections, no
    /// answer to the probe): the watch fails exactly when the quiet and
    /// the probe's timeout have passed, as failing since the last event,
    /// and starts again; a server that answers the probe keeps it working.
    #[tokio::test(start_paused = true)]
    async fn a_silent_server_fails_the_watch_after_the_quiet_and_the_probe() {
        let silent = || Pace {
            relist_every: None,
            liveness: Arc::new(Liveness::asking(
                Probe::default(),
                Box::new(|| Box::pin(futures::future::pending())),
            )),
        };
        let bound = Probe::default().bound();
        let just_before = bound - Duration::from_millis(10);
        let (metrics, _, starts) = drive_paced(|_| listed(), silent(), just_before).await;
        assert_eq!((metrics.failing.get(), starts), (0, 1), "not before the bound");

        // The new connection's list hangs too.
        let listed_then_hangs = |attempt| match attempt {
            0 => listed(),
            _ => vec![Ok(Event::Init)],
        };
        let (metrics, seen, starts) = drive_paced(listed_then_hangs, silent(), bound + RETRY_MAX * 2).await;
        assert_eq!(metrics.failing.get(), 1);
        assert!(
            matches!(metrics.last_error(), Some(WatchError::Silent { quiet }) if quiet >= bound),
            "{:?}",
            metrics.last_error()
        );
        assert_eq!(starts, 2, "started again on a new connection");
        assert_eq!(seen.synced, 1);

        let (metrics, _, starts) = drive_paced(|_| listed(), answering(), bound * 10).await;
        assert_eq!((metrics.failing.get(), metrics.errors.get(), starts), (0, 0, 1));
    }
}
