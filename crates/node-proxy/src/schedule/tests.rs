//! The schedule's rules, each as a timeline: events at given milliseconds,
//! syncs that cost given milliseconds, and the syncs that ran.

use super::*;

/// Something that happens to the schedule from outside.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// A change asks for a sync.
    Request,
    /// Another program changed the tables.
    Repair,
}

/// A sync that ran: when it started (ms), why, and whether it repaired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ran {
    at: u64,
    reason: SyncReason,
    repair: bool,
}

/// Runs a schedule on a simulated clock until `until` ms: `events` at
/// their times, the n-th sync costing `cost(n)` ms and ending as
/// `outcome(n)`.
fn simulate(
    timing: SyncTiming,
    events: &[(u64, Event)],
    cost: impl Fn(usize) -> u64,
    mut outcome: impl FnMut(usize) -> Outcome,
    until: u64,
) -> Vec<Ran> {
    let t0 = Instant::now();
    let ms = |t: Instant| u64::try_from(t.saturating_duration_since(t0).as_millis()).unwrap();
    let at_ms = |m: u64| t0 + Duration::from_millis(m);
    let mut schedule = Schedule::new(timing, t0);
    schedule.listed();
    let mut now = t0;
    let mut events = events.iter().copied().peekable();
    let mut ran = Vec::new();
    loop {
        let next = schedule.next().unwrap();
        let start = next.at.max(now);
        if let Some((t, event)) = events.next_if(|(t, _)| at_ms(*t) <= start) {
            now = now.max(at_ms(t));
            match event {
                Event::Request => schedule.request(),
                Event::Repair => schedule.repair(now),
            }
            continue;
        }
        if ms(start) > until {
            return ran;
        }
        now = start;
        let repair = schedule.started(now);
        ran.push(Ran {
            at: ms(now),
            reason: next.reason,
            repair,
        });
        let n = ran.len() - 1;
        let started = now;
        now += Duration::from_millis(cost(n));
        schedule.finished(started, now, outcome(n));
    }
}

fn requests(at: impl IntoIterator<Item = u64>) -> Vec<(u64, Event)> {
    at.into_iter().map(|t| (t, Event::Request)).collect()
}

fn every(ms: u64, until: u64) -> Vec<(u64, Event)> {
    requests((1..).map(|i| i * ms).take_while(|t| *t < until))
}

fn timing(min: u64, max: u64) -> SyncTiming {
    SyncTiming {
        pacing: Pacing::Fixed(Duration::from_millis(min)),
        max_interval: Duration::from_millis(max),
        retry_initial: Duration::from_millis(100),
        retry_max: Duration::from_millis(400),
    }
}

fn done(_: usize) -> Outcome {
    Outcome::Done
}

/// (start, reason) of each sync.
fn reasons(ran: &[Ran]) -> Vec<(u64, SyncReason)> {
    ran.iter().map(|r| (r.at, r.reason)).collect()
}

fn starts(ran: &[Ran]) -> Vec<u64> {
    ran.iter().map(|r| r.at).collect()
}

/// The first `n` syncs fail.
fn failing(n: usize) -> impl FnMut(usize) -> Outcome {
    move |i| if i < n { Outcome::Failed } else { Outcome::Done }
}

#[test]
fn nothing_runs_before_the_sources_are_listed() {
    let t0 = Instant::now();
    let mut schedule = Schedule::new(SyncTiming::default(), t0);
    schedule.request();
    assert_eq!(schedule.next(), None);
    schedule.listed();
    assert_eq!(
        schedule.next(),
        Some(Next {
            at: t0,
            reason: SyncReason::Initial
        })
    );
}

#[test]
fn requests_are_rate_limited_and_coalesced() {
    let ran = simulate(
        timing(1000, 30_000),
        &requests([100, 200, 300, 2500]),
        |_| 0,
        done,
        5000,
    );
    assert_eq!(
        reasons(&ran),
        [
            (0, SyncReason::Initial),
            (1000, SyncReason::Requested),
            (2500, SyncReason::Requested)
        ]
    );
}

#[test]
fn zero_min_interval_syncs_on_every_request() {
    let ran = simulate(timing(0, 30_000), &requests([10, 20, 30]), |_| 0, done, 100);
    assert_eq!(starts(&ran), [0, 10, 20, 30]);
}

fn paced(pacing: Pacing, cost: impl Fn(usize) -> u64, request_every: u64, until: u64) -> Vec<u64> {
    let timing = SyncTiming {
        pacing,
        ..timing(0, 30_000)
    };
    starts(&simulate(timing, &every(request_every, until), cost, done, until))
}

#[test]
fn cost_bound_pacing_follows_what_syncs_cost() {
    // A bucket too large to matter here.
    let pacing = Pacing::CostBound {
        floor: Duration::from_millis(10),
        factor: 4,
        burst: 10_000,
        sustained: Duration::from_millis(1),
    };
    // Cheap syncs (1 ms) requested every 3 ms: one per floor.
    let cheap = paced(pacing, |_| 1, 3, 95);
    assert!(cheap.windows(2).all(|w| w[1] - w[0] == 10), "{cheap:?}");
    // A first sync of 500 ms, then cheap ones: the next waits 2 s, the
    // ones after it only the floor.
    let after_heavy = paced(pacing, |n| if n == 0 { 500 } else { 1 }, 3, 2100);
    assert_eq!(after_heavy[..4], [0, 2000, 2010, 2020], "{after_heavy:?}");
    // Syncs of 50 ms: one start every 200 ms, a quarter of the time.
    assert_eq!(paced(pacing, |_| 50, 3, 990), [0, 200, 400, 600, 800]);
}

/// The default's bucket, in milliseconds.
const SUSTAINED_MS: u64 = 30;

#[test]
fn sustained_churn_is_synced_at_the_sustained_rate_after_a_burst() {
    assert_eq!(
        Pacing::DEFAULT,
        Pacing::CostBound {
            floor: Duration::from_millis(10),
            factor: 4,
            burst: 4,
            sustained: Duration::from_millis(SUSTAINED_MS),
        }
    );
    // Cheap syncs requested every 3 ms for a second: four at the floor,
    // then one per 30 ms.
    let started = paced(Pacing::DEFAULT, |_| 1, 3, 1000);
    assert_eq!(started[..4], [0, 10, 20, 30], "{started:?}");
    // The burst spent (the floor and the bucket's slack overlap for a
    // sync or two), one per 30 ms.
    assert!(
        started[6..].windows(2).all(|w| w[1] - w[0] == SUSTAINED_MS),
        "{started:?}"
    );
    let steady = usize::try_from(1000 / SUSTAINED_MS).unwrap();
    assert!((steady..=steady + 4).contains(&started.len()), "{started:?}");
    // After a quiet second the burst is back.
    let timing = SyncTiming {
        pacing: Pacing::DEFAULT,
        ..timing(0, 30_000)
    };
    let ran = simulate(timing, &requests([1000, 1001, 1002]), |_| 0, done, 1100);
    assert_eq!(starts(&ran), [0, 1000, 1010], "a burst after a quiet time");
}

#[test]
fn a_single_request_after_a_quiet_time_syncs_at_once() {
    let timing = SyncTiming {
        pacing: Pacing::DEFAULT,
        ..timing(0, 30_000)
    };
    let ran = simulate(timing, &requests([500]), |_| 1, done, 600);
    assert_eq!(reasons(&ran), [(0, SyncReason::Initial), (500, SyncReason::Requested)]);
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

#[test]
fn periodic_syncs_without_requests() {
    let ran = simulate(timing(1000, 30_000), &[], |_| 0, done, 95_000);
    assert_eq!(
        reasons(&ran),
        [
            (0, SyncReason::Initial),
            (30_000, SyncReason::Periodic),
            (60_000, SyncReason::Periodic),
            (90_000, SyncReason::Periodic)
        ]
    );
}

#[test]
fn failures_retry_with_doubling_backoff_then_reset() {
    let ran = simulate(timing(0, 30_000), &requests([2000]), |_| 0, failing(4), 2001);
    // 0 fails, +100, +200, +400, +400 (capped) succeeds.
    assert_eq!(
        reasons(&ran),
        [
            (0, SyncReason::Initial),
            (100, SyncReason::Retry),
            (300, SyncReason::Retry),
            (700, SyncReason::Retry),
            (1100, SyncReason::Retry),
            (2000, SyncReason::Requested)
        ]
    );
}

#[test]
fn a_request_during_a_backoff_syncs_without_waiting_for_it() {
    // Fails at 0, 100 and 300; the next retry would be at 700.
    let ran = simulate(timing(0, 30_000), &requests([350]), |_| 0, failing(3), 360);
    assert_eq!(
        reasons(&ran),
        [
            (0, SyncReason::Initial),
            (100, SyncReason::Retry),
            (300, SyncReason::Retry),
            (350, SyncReason::Requested)
        ]
    );
}

#[test]
fn incomplete_syncs_are_retried_with_backoff_until_done() {
    let incomplete = |n| if n < 3 { Outcome::Incomplete } else { Outcome::Done };
    let ran = simulate(timing(0, 30_000), &[], |_| 0, incomplete, 5000);
    assert_eq!(
        reasons(&ran),
        [
            (0, SyncReason::Initial),
            (100, SyncReason::Retry),
            (300, SyncReason::Retry),
            (700, SyncReason::Retry)
        ],
        "then done: no more retries before the periodic sync"
    );
}

#[test]
fn retries_respect_the_min_interval() {
    let ran = simulate(timing(1000, 30_000), &[], |_| 0, failing(1), 1500);
    assert_eq!(reasons(&ran), [(0, SyncReason::Initial), (1000, SyncReason::Retry)]);
}

#[test]
fn a_repair_runs_after_the_settling_time_and_takes_in_what_came_meanwhile() {
    let events = [(500, Event::Repair), (520, Event::Repair), (540, Event::Request)];
    let ran = simulate(SyncTiming::default(), &events, |_| 1, done, 1000);
    let settled = 500 + u64::try_from(SETTLE.as_millis()).unwrap();
    assert_eq!(
        ran,
        [
            Ran {
                at: 0,
                reason: SyncReason::Initial,
                repair: false
            },
            // The request syncs at once; the repair waits to settle.
            Ran {
                at: 540,
                reason: SyncReason::Requested,
                repair: false
            },
            Ran {
                at: settled,
                reason: SyncReason::Repair,
                repair: true
            },
        ]
    );
}

#[test]
fn a_repair_waits_for_the_pacing_like_any_sync() {
    // A fixed gap of a second: a repair heard right after a sync waits.
    let ran = simulate(timing(1000, 30_000), &[(10, Event::Repair)], |_| 0, done, 2000);
    assert_eq!(
        ran[1],
        Ran {
            at: 1000,
            reason: SyncReason::Repair,
            repair: true
        }
    );
}

#[test]
fn a_few_repairs_run_at_once_and_a_storm_ever_more_slowly() {
    let mut storm = Storm::default();
    let t0 = Instant::now();
    let mut at = t0;
    let mut waits = Vec::new();
    for _ in 0..12 {
        // Each change comes right after the last repair.
        let repair = storm.repair_at(at);
        waits.push(repair - at - SETTLE);
        at = repair + Duration::from_millis(10);
    }
    assert_eq!(waits[..REPAIR_BURST], [Duration::ZERO; REPAIR_BURST], "at once");
    assert_eq!(
        waits[REPAIR_BURST..REPAIR_BURST + 4],
        [REPAIR_PACE, 2 * REPAIR_PACE, 4 * REPAIR_PACE, 8 * REPAIR_PACE]
    );
    assert_eq!(waits.last().copied(), Some(SLOWEST_REPAIR), "capped");
    let calm = at + CALM + SLOWEST_REPAIR;
    assert_eq!(
        storm.repair_at(calm),
        calm + SETTLE,
        "after a calm spell, at once again"
    );
}
