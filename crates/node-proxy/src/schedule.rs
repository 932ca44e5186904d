//! [`Schedule`]: when the next sync runs, as kube-proxy's
//! BoundedFrequencyRunner decides it, and when a repair after another
//! program's change does. Pure: it is told what happened and when, and
//! answers with an instant and a reason; the sync actor waits for it.
//!
//! * A change requests a sync; requests that arrive before it starts
//!   coalesce into it.
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
//!   `retry_initial` up to `retry_max` (never sooner than the pacing
//!   allows); a success resets it. A sync that left work undone without
//!   failing ([`Outcome::Incomplete`]: multus pods waiting for a
//!   namespace) is retried the same way.
//! * A request during a backoff is not held back by it: it syncs after
//!   the pacing's gap, as with no backoff (BoundedFrequencyRunner's `Run`
//!   during a `RetryAfter`).
//! * Another program's change to the tables is repaired by a sync that
//!   rewrites them whole ([`SyncReason::Repair`]), after [`SETTLE`] (a
//!   reload's several commits are one repair). A storm of them is paced,
//!   not fought: up to [`REPAIR_BURST`] repairs within [`CALM`] of each
//!   other run at once; each further one waits twice as long as the one
//!   before, from [`REPAIR_PACE`] up to [`SLOWEST_REPAIR`].
//! * Nothing runs before [`Schedule::listed`]: a half-known cluster would
//!   look like deleted services.

use std::time::{Duration, Instant};

/// Why a sync ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncReason {
    /// The first sync.
    Initial,
    /// A change requested it.
    Requested,
    /// `max_interval` passed without one.
    Periodic,
    /// The previous sync failed or left work undone.
    Retry,
    /// Another program changed the tables: they are rewritten whole.
    Repair,
}

impl std::fmt::Display for SyncReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Initial => "initial",
            Self::Requested => "requested",
            Self::Periodic => "periodic",
            Self::Retry => "retry",
            Self::Repair => "repair",
        })
    }
}

/// What a sync came to, as the schedule needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything is in place.
    Done,
    /// Something is left to do: retried with the failure backoff.
    Incomplete,
    /// It failed: retried with the backoff.
    Failed,
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
    /// sustained churn one sync per 30 ms after a burst of four. A sync of
    /// a few changes costs well under a millisecond, so a lone change
    /// waits at most the floor, a stream of up to 33 changes a second is
    /// synced change by change, and a faster one waits at most 30 ms, its
    /// changes sharing each sync's fixed cost (a kernel commit, a few
    /// wake-ups); syncs that cost seconds (a huge first load) take at most
    /// a quarter of the time, as kube-proxy's 1 s gap did for syncs of
    /// 250 ms.
    pub const DEFAULT: Self = Self::CostBound {
        floor: Duration::from_millis(10),
        factor: 4,
        burst: 4,
        sustained: Duration::from_millis(30),
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

/// Timing of a [`Schedule`].
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

/// How long a burst of foreign commits may go on before the repair.
pub const SETTLE: Duration = Duration::from_millis(50);
/// Repairs within [`CALM`] of each other that run at once.
pub const REPAIR_BURST: usize = 3;
/// The wait before a repair past the [`REPAIR_BURST`] starts here and
/// doubles.
pub const REPAIR_PACE: Duration = Duration::from_secs(1);
/// The longest wait between two repairs.
pub const SLOWEST_REPAIR: Duration = Duration::from_secs(60);
/// Repairs this far apart are not a storm.
pub const CALM: Duration = Duration::from_secs(10);

/// The repairs of the current spell, and the wait the last one had.
#[derive(Debug, Default)]
struct Storm {
    /// When each repair of the spell was due, the latest last.
    recent: Vec<Instant>,
    wait: Duration,
}

impl Storm {
    /// When the repair of a change heard `now` may run.
    fn repair_at(&mut self, now: Instant) -> Instant {
        if self
            .recent
            .last()
            .is_some_and(|t| now.saturating_duration_since(*t) >= CALM)
        {
            self.recent.clear();
        }
        self.wait = if self.recent.len() < REPAIR_BURST {
            Duration::ZERO
        } else {
            (self.wait * 2).clamp(REPAIR_PACE, SLOWEST_REPAIR)
        };
        let at = now + SETTLE + self.wait;
        self.recent.push(at);
        at
    }
}

/// The next sync: when, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Next {
    /// When it may start (it starts at once when this is past).
    pub at: Instant,
    /// Why it runs.
    pub reason: SyncReason,
}

/// Where the last sync left the schedule.
#[derive(Clone, Copy, Debug)]
struct AfterSync {
    /// The earliest start of a requested sync.
    earliest: Instant,
    /// The periodic sync, when nothing comes before it.
    periodic: Instant,
    /// The retry, after a failed or incomplete sync.
    retry: Option<Instant>,
}

/// When to sync; see the module docs.
#[derive(Debug)]
pub struct Schedule {
    timing: SyncTiming,
    /// When it was made: the first sync is due from then.
    created: Instant,
    budget: Option<Budget>,
    backoff: Duration,
    listed: bool,
    /// `None` until the first sync.
    after: Option<AfterSync>,
    requested: bool,
    /// A repair that is waiting, and when it is due.
    repair: Option<Instant>,
    storm: Storm,
}

impl Schedule {
    /// A schedule whose first sync runs once [`Self::listed`] says so.
    pub fn new(timing: SyncTiming, now: Instant) -> Self {
        Self {
            timing,
            created: now,
            budget: timing.pacing.budget(now),
            backoff: timing.retry_initial,
            listed: false,
            after: None,
            requested: false,
            repair: None,
            storm: Storm::default(),
        }
    }

    /// Every source has handed over its first list: syncing may start.
    pub fn listed(&mut self) {
        self.listed = true;
    }

    /// A change asks for a sync.
    pub fn request(&mut self) {
        self.requested = true;
    }

    /// Another program changed the tables at `now`. A repair already
    /// waiting takes it in.
    pub fn repair(&mut self, now: Instant) {
        if self.repair.is_none() {
            self.repair = Some(self.storm.repair_at(now));
        }
    }

    /// The next sync; `None` before the sources are listed.
    pub fn next(&self) -> Option<Next> {
        if !self.listed {
            return None;
        }
        let Some(after) = self.after else {
            return Some(Next {
                at: self.created,
                reason: SyncReason::Initial,
            });
        };
        let mut next = match (after.retry, self.requested) {
            (Some(retry), true) => Next {
                at: after.earliest.min(retry),
                reason: SyncReason::Requested,
            },
            (Some(retry), false) => Next {
                at: retry,
                reason: SyncReason::Retry,
            },
            (None, true) => Next {
                at: after.earliest,
                reason: SyncReason::Requested,
            },
            (None, false) => Next {
                at: after.periodic,
                reason: SyncReason::Periodic,
            },
        };
        if let Some(due) = self.repair.map(|r| r.max(after.earliest))
            && due < next.at
        {
            next = Next {
                at: due,
                reason: SyncReason::Repair,
            };
        }
        Some(next)
    }

    /// A sync starts at `now`: it covers every request so far. Returns
    /// whether it must rewrite the tables whole (a repair is due).
    pub fn started(&mut self, now: Instant) -> bool {
        self.requested = false;
        if let Some(b) = self.budget.as_mut() {
            b.take(now);
        }
        let repair = self.repair.is_some_and(|due| due <= now);
        if repair {
            self.repair = None;
        }
        repair
    }

    /// The sync that started at `started` ended at `now`, as `outcome`
    /// says. Returns the wait before its retry, if it has one.
    pub fn finished(&mut self, started: Instant, now: Instant, outcome: Outcome) -> Option<Duration> {
        let t = self.timing;
        let gap = t.pacing.gap(now.saturating_duration_since(started));
        let retry_in = match outcome {
            Outcome::Done => {
                self.backoff = t.retry_initial;
                None
            }
            Outcome::Incomplete | Outcome::Failed => {
                let wait = self.backoff.max(gap);
                self.backoff = (self.backoff * 2).min(t.retry_max);
                Some(wait)
            }
        };
        let earliest = match self.budget {
            Some(b) => (started + gap).max(b.ready_at(now)),
            None => started + gap,
        };
        self.after = Some(AfterSync {
            earliest,
            periodic: started + t.max_interval,
            retry: retry_in.map(|w| started + w),
        });
        retry_in
    }
}

#[cfg(test)]
mod tests;
