//! [`SyncRunner`]: when to sync, as kube-proxy's BoundedFrequencyRunner
//! decides it.
//!
//! * A change requests a sync; requests that arrive while one is pending
//!   coalesce.
//! * Syncs are paced ([`Pacing`]): by default the next sync may start
//!   once the time since the last one started is a multiple of what that
//!   one took (never under a small floor), so latency follows the sync's
//!   own cost, and under sustained churn a token bucket spaces them; an
//!   operator's `--min-sync-period` instead sets a fixed shortest time
//!   between two syncs, as kube-proxy's runner does (0: sync on every
//!   request).
//! * At least one sync per `max_interval`, requested or not (re-asserting
//!   the rules).
//! * A failed sync is retried after a backoff that doubles from
//!   `retry_initial` up to `retry_max` (never sooner than the pacing allows);
//!   a success resets it. A sync that left work undone without failing
//!   ([`Outcome::Incomplete`]: multus pods waiting for a namespace) is
//!   retried the same way, without a warning.
//! * A request during a backoff is not held back by it: it syncs after
//!   the pacing's gap, as with no backoff (BoundedFrequencyRunner's `Run`
//!   during a `RetryAfter`).
//! * Nothing runs before [`SyncRunner::run`] is called: callers start it only
//!   once their sources have synced.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

/// Why a sync ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncReason {
    /// The first sync.
    Initial,
    /// A change requested it.
    Requested,
    /// `max_interval` passed without one.
    Periodic,
    /// The previous sync failed.
    Retry,
}

impl std::fmt::Display for SyncReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Initial => "initial",
            Self::Requested => "requested",
            Self::Periodic => "periodic",
            Self::Retry => "retry",
        })
    }
}

/// What a sync that did not fail left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything is in place.
    Done,
    /// Something is left to do: retried with the failure backoff.
    Incomplete,
}

/// How soon after a sync the next may start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// kube-proxy's `--min-sync-period`: the next sync starts no sooner
    /// than this after the last one started (0: on every request).
    Fixed(Duration),
    /// The next sync starts no sooner than `factor` times what the last one
    /// took after it started, and never sooner than `floor`: syncing
    /// takes at most a `1/factor` share of the time, whatever a sync costs,
    /// while a cheap sync is followed quickly. And under sustained churn
    /// no more than one sync per `sustained` on average, with `burst`
    /// syncs at once (a token bucket, as kube-proxy's runner has): every
    /// sync has a fixed cost (a kernel commit, a few wake-ups), which a
    /// change now and then pays at once but a stream of changes shares.
    CostBound {
        /// The shortest gap, however cheap the last sync was.
        floor: Duration,
        /// The gap as a multiple of the last sync's duration.
        factor: u32,
        /// Syncs that may follow one another at the floor.
        burst: u32,
        /// The average gap once those are spent.
        sustained: Duration,
    },
}

impl Pacing {
    /// The default: gaps of 4 syncs' cost, at least 10 ms, and under
    /// sustained churn one sync per 100 ms after a burst of four. A sync of
    /// a few changes costs about a millisecond, so a lone change waits at
    /// most the floor, and a stream of them at most 100 ms; syncs that
    /// cost seconds (a huge first load) take at most a quarter of the time,
    /// as kube-proxy's 1 s gap did for syncs of 250 ms.
    pub const DEFAULT: Self = Self::CostBound {
        floor: Duration::from_millis(10),
        factor: 4,
        burst: 4,
        sustained: Duration::from_millis(100),
    };

    /// The pacing an operator's `--min-sync-period` asks for: `None` (not
    /// set) is [`Pacing::DEFAULT`].
    pub fn from_min_sync_period(min: Option<Duration>) -> Self {
        min.map_or(Self::DEFAULT, Self::Fixed)
    }

    /// The shortest time from the start of a sync that took `took` to the
    /// start of the next.
    pub fn gap(self, took: Duration) -> Duration {
        match self {
            Self::Fixed(d) => d,
            Self::CostBound { floor, factor, .. } => took.saturating_mul(factor).max(floor),
        }
    }

    /// The token bucket of [`Pacing::CostBound`], full; `None` for a fixed
    /// gap.
    fn budget(self, now: Instant) -> Option<Budget> {
        match self {
            Self::Fixed(_) => None,
            Self::CostBound { burst, sustained, .. } => Some(Budget {
                every: sustained,
                slack: sustained.saturating_mul(burst.saturating_sub(1)),
                due: now,
            }),
        }
    }
}

/// A token bucket kept as one instant (the generic cell rate algorithm):
/// `due` is when the syncs so far would have ended had they run one per
/// `every`; the next may start once that is no more than `slack` (the
/// burst less one, in `every`s) ahead.
#[derive(Clone, Copy, Debug)]
struct Budget {
    every: Duration,
    slack: Duration,
    due: Instant,
}

impl Budget {
    /// One sync starting `now`.
    fn take(&mut self, now: Instant) {
        self.due = self.due.max(now) + self.every;
    }

    /// When the next sync may start, as far as the bucket goes (`now` when
    /// that is before the clock's first instant).
    fn ready_at(&self, now: Instant) -> Instant {
        self.due.checked_sub(self.slack).unwrap_or(now)
    }
}

/// Timing of a [`SyncRunner`].
#[derive(Clone, Copy, Debug)]
pub struct SyncTiming {
    /// How soon after a sync the next may start.
    pub pacing: Pacing,
    /// The longest time without a sync.
    pub max_interval: Duration,
    /// First retry delay after a failure.
    pub retry_initial: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
}

impl Default for SyncTiming {
    /// [`Pacing::DEFAULT`] and kube-proxy's `--sync-period 30s`.
    fn default() -> Self {
        Self {
            pacing: Pacing::DEFAULT,
            max_interval: Duration::from_secs(30),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
        }
    }
}

/// Runs syncs; see the module docs.
pub struct SyncRunner {
    timing: SyncTiming,
    requests: Arc<Notify>,
}

impl SyncRunner {
    /// A runner woken by `requests` (one `notify_one` per change is enough;
    /// notifications coalesce).
    pub fn new(timing: SyncTiming, requests: Arc<Notify>) -> Self {
        Self { timing, requests }
    }

    /// Runs `sync` as the timing allows until `shutdown` completes. A sync
    /// in flight is finished before returning.
    pub async fn run<F, Fut, E>(self, mut sync: F, shutdown: impl Future<Output = ()>)
    where
        F: FnMut(SyncReason) -> Fut,
        Fut: Future<Output = Result<Outcome, E>>,
        E: std::fmt::Display,
    {
        let t = self.timing;
        futures::pin_mut!(shutdown);
        let mut reason = SyncReason::Initial;
        let mut backoff = t.retry_initial;
        let mut budget = t.pacing.budget(Instant::now());
        loop {
            // The sync about to run covers every request made so far: absorb
            // the permit they left, or it would cause a second, empty sync.
            let _ = futures::FutureExt::now_or_never(self.requests.notified());
            let started = Instant::now();
            if let Some(b) = budget.as_mut() {
                b.take(started);
            }
            let result = sync(reason).await;
            let gap = t.pacing.gap(started.elapsed());
            let next = match result {
                Ok(Outcome::Done) => {
                    backoff = t.retry_initial;
                    None
                }
                Ok(Outcome::Incomplete) => {
                    let wait = backoff.max(gap);
                    backoff = (backoff * 2).min(t.retry_max);
                    Some(started + wait)
                }
                Err(e) => {
                    let wait = backoff.max(gap);
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "sync failed");
                    backoff = (backoff * 2).min(t.retry_max);
                    Some(started + wait)
                }
            };
            let earliest = match budget.as_mut() {
                Some(b) => (started + gap).max(b.ready_at(Instant::now())),
                None => started + gap,
            };
            let periodic = started + t.max_interval;
            reason = match next {
                Some(retry_at) => {
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = sleep_until(retry_at) => SyncReason::Retry,
                        () = self.requests.notified() => {
                            tokio::select! {
                                () = &mut shutdown => return,
                                () = sleep_until(earliest.min(retry_at)) => SyncReason::Requested,
                            }
                        }
                    }
                }
                None => {
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = self.requests.notified() => {
                            tokio::select! {
                                () = &mut shutdown => return,
                                () = sleep_until(earliest) => SyncReason::Requested,
                            }
                        }
                        () = sleep_until(periodic) => SyncReason::Periodic,
                    }
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    type Log = Arc<Mutex<Vec<(u64, SyncReason)>>>;

    /// Starts a runner whose syncs record (milliseconds since start, reason)
    /// and fail while `fail` says so.
    fn start(timing: SyncTiming, fail: Arc<Mutex<u32>>) -> (Arc<Notify>, Log, tokio::sync::oneshot::Sender<()>) {
        let requests = Arc::new(Notify::new());
        let log: Log = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let t0 = Instant::now();
        let l = log.clone();
        let runner = SyncRunner::new(timing, requests.clone());
        tokio::spawn(runner.run(
            move |reason| {
                let l = l.clone();
                let fail = fail.clone();
                async move {
                    l.lock().unwrap().push((t0.elapsed().as_millis() as u64, reason));
                    let mut f = fail.lock().unwrap();
                    if *f > 0 {
                        *f -= 1;
                        return Err("injected");
                    }
                    Ok(Outcome::Done)
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        (requests, log, stop)
    }

    fn timing(min: u64, max: u64) -> SyncTiming {
        SyncTiming {
            pacing: Pacing::Fixed(Duration::from_millis(min)),
            max_interval: Duration::from_millis(max),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_millis(400),
        }
    }

    async fn at(ms: u64, t0: Instant) {
        tokio::time::sleep_until(t0 + Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn requests_are_rate_limited_and_coalesced() {
        let t0 = Instant::now();
        let (req, log, _stop) = start(timing(1000, 30_000), Arc::default());
        at(10, t0).await;
        // Three requests shortly after the initial sync: one sync, at 1 s.
        for ms in [100, 200, 300] {
            at(ms, t0).await;
            req.notify_one();
        }
        at(2500, t0).await;
        req.notify_one();
        at(5000, t0).await;
        let got = log.lock().unwrap().clone();
        assert_eq!(
            got,
            [
                (0, SyncReason::Initial),
                (1000, SyncReason::Requested),
                (2500, SyncReason::Requested)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zero_min_interval_syncs_on_every_request() {
        let t0 = Instant::now();
        let (req, log, _stop) = start(timing(0, 30_000), Arc::default());
        for ms in [10, 20, 30] {
            at(ms, t0).await;
            req.notify_one();
        }
        at(100, t0).await;
        assert_eq!(log.lock().unwrap().len(), 4);
    }

    /// A runner whose syncs take `cost(n)` for the n-th sync, recording
    /// when each started; requested every `every` ms until `until` ms.
    async fn paced(pacing: Pacing, cost: fn(usize) -> u64, every: u64, until: u64) -> Vec<u64> {
        let requests = Arc::new(Notify::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let l = log.clone();
        let timing = SyncTiming {
            pacing,
            ..timing(0, 30_000)
        };
        tokio::spawn(SyncRunner::new(timing, requests.clone()).run(
            move |_| {
                let n = {
                    let mut l = l.lock().unwrap();
                    l.push(t0.elapsed().as_millis() as u64);
                    l.len() - 1
                };
                async move {
                    tokio::time::sleep(Duration::from_millis(cost(n))).await;
                    Ok::<_, &str>(Outcome::Done)
                }
            },
            std::future::pending(),
        ));
        let mut t = every;
        while t < until {
            at(t, t0).await;
            requests.notify_one();
            t += every;
        }
        at(until, t0).await;
        log.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn cost_bound_pacing_follows_what_syncs_cost() {
        // A bucket too large to matter here.
        let pacing = Pacing::CostBound {
            floor: Duration::from_millis(10),
            factor: 4,
            burst: 10_000,
            sustained: Duration::from_millis(1),
        };
        // Cheap syncs (1 ms) requested every 3 ms: one per floor.
        let cheap = paced(pacing, |_| 1, 3, 95).await;
        let gaps: Vec<u64> = cheap.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g == 10), "{cheap:?}");
        // A first sync of 500 ms, then cheap ones: the next waits 2 s, the
        // ones after it only the floor.
        let after_heavy = paced(pacing, |n| if n == 0 { 500 } else { 1 }, 3, 2100).await;
        assert_eq!(after_heavy[..4], [0, 2000, 2010, 2020], "{after_heavy:?}");
        // Syncs of 50 ms: one start every 200 ms, a quarter of the time.
        let steady = paced(pacing, |_| 50, 3, 990).await;
        assert_eq!(steady, [0, 200, 400, 600, 800]);
    }

    #[tokio::test(start_paused = true)]
    async fn sustained_churn_is_synced_at_the_sustained_rate_after_a_burst() {
        // Cheap syncs requested every 3 ms for a second: four at the floor,
        // then one per 100 ms.
        let started = paced(Pacing::DEFAULT, |_| 1, 3, 1050).await;
        assert_eq!(started[..4], [0, 10, 20, 30], "{started:?}");
        let gaps: Vec<u64> = started[4..].windows(2).map(|w| w[1] - w[0]).collect();
        assert!(started[4].abs_diff(100) <= 1, "{started:?}");
        assert!(gaps.iter().all(|g| g.abs_diff(100) <= 1), "{started:?}");
        assert_eq!(started.len(), 4 + 10, "{started:?}");
        // After a quiet second the burst is back.
        let t0 = Instant::now();
        let timing = SyncTiming {
            pacing: Pacing::DEFAULT,
            ..timing(0, 30_000)
        };
        let (req, log, _stop) = start(timing, Arc::default());
        for ms in [1000, 1001, 1002] {
            at(ms, t0).await;
            req.notify_one();
        }
        at(1100, t0).await;
        let got: Vec<u64> = log.lock().unwrap().iter().map(|(ms, _)| *ms).collect();
        assert_eq!(got, [0, 1000, 1010], "a burst after a quiet time");
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_request_after_a_quiet_time_syncs_at_once() {
        let t0 = Instant::now();
        let timing = SyncTiming {
            pacing: Pacing::DEFAULT,
            ..timing(0, 30_000)
        };
        let (req, log, _stop) = start(timing, Arc::default());
        at(500, t0).await;
        req.notify_one();
        at(600, t0).await;
        assert_eq!(
            log.lock().unwrap().clone(),
            [(0, SyncReason::Initial), (500, SyncReason::Requested)]
        );
    }

    #[test]
    fn an_operators_min_sync_period_is_fixed_and_unset_is_the_default() {
        assert_eq!(Pacing::from_min_sync_period(None), Pacing::DEFAULT);
        let one = Duration::from_secs(1);
        assert_eq!(Pacing::from_min_sync_period(Some(one)), Pacing::Fixed(one));
        assert_eq!(
            Pacing::Fixed(one).gap(Duration::from_secs(3)),
            one,
            "kube-proxy's gap ignores the cost"
        );
        assert_eq!(
            Pacing::from_min_sync_period(Some(Duration::ZERO)).gap(Duration::from_millis(5)),
            Duration::ZERO
        );
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_syncs_without_requests() {
        let t0 = Instant::now();
        let (_req, log, _stop) = start(timing(1000, 30_000), Arc::default());
        at(95_000, t0).await;
        let got = log.lock().unwrap().clone();
        assert_eq!(
            got,
            [
                (0, SyncReason::Initial),
                (30_000, SyncReason::Periodic),
                (60_000, SyncReason::Periodic),
                (90_000, SyncReason::Periodic)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_retry_with_doubling_backoff_then_reset() {
        let t0 = Instant::now();
        let (req, log, _stop) = start(timing(0, 30_000), Arc::new(Mutex::new(4)));
        at(2000, t0).await;
        let got: Vec<(u64, SyncReason)> = log.lock().unwrap().clone();
        // 0 fails, +100, +200, +400, +400 (capped) succeeds.
        assert_eq!(
            got,
            [
                (0, SyncReason::Initial),
                (100, SyncReason::Retry),
                (300, SyncReason::Retry),
                (700, SyncReason::Retry),
                (1100, SyncReason::Retry)
            ]
        );
        req.notify_one();
        at(2001, t0).await;
        assert_eq!(log.lock().unwrap().last(), Some(&(2000, SyncReason::Requested)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_during_a_backoff_syncs_without_waiting_for_it() {
        let t0 = Instant::now();
        let (req, log, _stop) = start(timing(0, 30_000), Arc::new(Mutex::new(3)));
        // Fails at 0, 100 and 300; the next retry would be at 700.
        at(350, t0).await;
        req.notify_one();
        at(360, t0).await;
        assert_eq!(
            log.lock().unwrap().clone(),
            [
                (0, SyncReason::Initial),
                (100, SyncReason::Retry),
                (300, SyncReason::Retry),
                (350, SyncReason::Requested)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn incomplete_syncs_are_retried_with_backoff_until_done() {
        let requests = Arc::new(Notify::new());
        let log: Log = Arc::default();
        let t0 = Instant::now();
        let l = log.clone();
        let mut left = 3;
        tokio::spawn(SyncRunner::new(timing(0, 30_000), requests).run(
            move |reason| {
                l.lock().unwrap().push((t0.elapsed().as_millis() as u64, reason));
                let outcome = if left > 0 {
                    left -= 1;
                    Outcome::Incomplete
                } else {
                    Outcome::Done
                };
                std::future::ready(Ok::<_, &str>(outcome))
            },
            std::future::pending(),
        ));
        at(5000, t0).await;
        assert_eq!(
            log.lock().unwrap().clone(),
            [
                (0, SyncReason::Initial),
                (100, SyncReason::Retry),
                (300, SyncReason::Retry),
                (700, SyncReason::Retry)
            ],
            "then done: no more retries before the periodic sync"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_respect_the_min_interval() {
        let t0 = Instant::now();
        let (_req, log, _stop) = start(timing(1000, 30_000), Arc::new(Mutex::new(1)));
        at(1500, t0).await;
        assert_eq!(
            log.lock().unwrap().clone(),
            [(0, SyncReason::Initial), (1000, SyncReason::Retry)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_it() {
        let t0 = Instant::now();
        let (req, log, stop) = start(timing(0, 30_000), Arc::default());
        at(10, t0).await;
        stop.send(()).unwrap();
        at(20, t0).await;
        req.notify_one();
        at(100_000, t0).await;
        assert_eq!(log.lock().unwrap().len(), 1);
    }
}
