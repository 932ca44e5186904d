//! Repairs proxyd's tables as soon as another process changes them
//! (`nft flush ruleset` when a distribution's nftables service restarts, a
//! firewall reload, an operator), instead of at the next periodic sync:
//! the kernel announces every commit and what it touched ([`linux_dataplane::NftMonitor`]), and
//! one by another process makes the next sync rewrite every family's table
//! whole, trusting nothing in it.
//!
//! A storm of foreign changes is paced, not fought: up to [`BURST`] repairs
//! within [`CALM`] run at once (after [`SETTLE`], so that a reload's several
//! transactions are one repair); each further one waits twice as long as
//! the one before, from [`PACE`] up to [`SLOWEST`], until a calm spell.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use linux_dataplane::{Listening, Netns, NftChange, NftMonitor, NftNetlink};
use slice_model::IpFamily;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a burst of foreign commits may go on before the repair.
pub const SETTLE: Duration = Duration::from_millis(50);
/// Repairs within [`CALM`] of each other that run at once.
pub const BURST: usize = 3;
/// The wait before a repair past the [`BURST`] starts here and doubles.
pub const PACE: Duration = Duration::from_secs(1);
/// The longest wait between two repairs.
pub const SLOWEST: Duration = Duration::from_secs(60);
/// Repairs this far apart are not a storm.
pub const CALM: Duration = Duration::from_secs(10);

/// When to repair after each foreign change.
#[derive(Debug, Default)]
pub struct Pacing {
    /// The repairs of the current spell, the latest last.
    recent: Vec<Instant>,
    wait: Duration,
}

impl Pacing {
    /// When the repair of a change seen `now` may run.
    pub fn repair_at(&mut self, now: Instant) -> Instant {
        if self
            .recent
            .last()
            .is_some_and(|t| now.saturating_duration_since(*t) >= CALM)
        {
            self.recent.clear();
        }
        self.wait = if self.recent.len() < BURST {
            Duration::ZERO
        } else {
            (self.wait * 2).clamp(PACE, SLOWEST)
        };
        let at = now + SETTLE + self.wait;
        self.recent.push(at);
        at
    }
}

/// The sync thread's side of following: it stops the listening while it
/// writes (the kernel would announce every object proxyd writes, which
/// made its transactions several times slower), and afterwards checks
/// that its tables are there (a change meanwhile was not announced).
pub struct WhileWriting {
    listening: Listening,
    /// Asks, after each write, whether the tables are there: opened once,
    /// not per sync.
    nft: NftNetlink,
    families: Vec<IpFamily>,
}

impl WhileWriting {
    /// Runs `write` with the listening stopped; with whether every table
    /// is there afterwards (`true` when that cannot be asked: nothing to
    /// act on).
    pub fn quietly<T>(&mut self, write: impl FnOnce() -> T) -> (T, bool) {
        if let Err(e) = self.listening.pause() {
            tracing::debug!("cannot stop following nftables changes while writing: {e}");
        }
        let written = write();
        if let Err(e) = self.listening.resume() {
            tracing::warn!("cannot follow nftables changes again ({e}): the periodic sync still repairs");
        }
        let present = tables(&mut self.nft, &self.families).map_or(true, |t| t.iter().all(|there| *there));
        (written, present)
    }
}

/// Follows the ruleset of `netns` on a thread of its own until `shutdown`;
/// a foreign change sets `repair` and wakes the sync runner. Returns the
/// sync thread's side, `None` when nftables cannot be followed.
pub fn follow(
    netns: Netns,
    families: Vec<IpFamily>,
    repair: Arc<AtomicBool>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) -> Option<WhileWriting> {
    let cannot = |e: std::io::Error| {
        tracing::warn!(
            "cannot follow nftables changes ({e}): a table changed by another program is repaired at the next \
             periodic sync"
        );
    };
    let opened = NftMonitor::open(&netns, nft_dataplane::names::TABLE)
        .and_then(|m| Ok((m.listening()?, NftNetlink::open(&netns)?, m)));
    let (listening, nft, mut monitor) = match opened {
        Ok(all) => all,
        Err(e) => {
            cannot(e);
            return None;
        }
    };
    let writing = WhileWriting {
        listening,
        nft,
        families: families.clone(),
    };
    let spawned = std::thread::Builder::new()
        .name("proxyd-foreign".into())
        .spawn(move || {
            let mut pacing = Pacing::default();
            while !shutdown.is_cancelled() {
                let change = match monitor.next_change() {
                    Ok(Some(c)) => c,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!("following nftables changes: {e}; stopped (the periodic sync still repairs)");
                        return;
                    }
                };
                let who = match &change {
                    NftChange::Foreign { pid, process } => format!("{process} (pid {pid})"),
                    // Lost announcements, most likely proxyd's own during a
                    // large sync: repair only if a table is gone.
                    NftChange::Unknown
                        if NftNetlink::open(&netns)
                            .and_then(|mut nft| tables(&mut nft, &families))
                            .map_or(true, |t| t.iter().all(|there| *there)) =>
                    {
                        continue;
                    }
                    NftChange::Unknown => "a process whose announcement was lost".to_owned(),
                };
                let at = pacing.repair_at(Instant::now());
                // Everything meanwhile is part of this repair.
                while Instant::now() < at && !shutdown.is_cancelled() {
                    let _ = monitor.next_within(at.saturating_duration_since(Instant::now()));
                }
                tracing::warn!("{who} changed the nftables ruleset: rewriting proxyd's tables");
                repair.store(true, Ordering::Release);
                wake.notify_one();
            }
        });
    match spawned {
        Ok(_) => Some(writing),
        Err(e) => {
            cannot(e);
            None
        }
    }
}

/// Whether each of `families` has proxyd's table, in the namespace `nft`
/// asks.
pub fn tables(nft: &mut NftNetlink, families: &[IpFamily]) -> std::io::Result<Vec<bool>> {
    families
        .iter()
        .map(|f| nft.table_exists(*f, nft_dataplane::names::TABLE))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_changes_are_repaired_at_once_and_a_storm_ever_more_slowly() {
        let mut p = Pacing::default();
        let t0 = Instant::now();
        let mut at = t0;
        let mut waits = Vec::new();
        for _ in 0..12 {
            // Each change comes right after the last repair.
            let repair = p.repair_at(at);
            waits.push(repair - at - SETTLE);
            at = repair + Duration::from_millis(10);
        }
        assert_eq!(waits[..BURST], [Duration::ZERO; BURST], "at once");
        assert_eq!(waits[BURST..BURST + 4], [PACE, 2 * PACE, 4 * PACE, 8 * PACE]);
        assert_eq!(waits.last().copied(), Some(SLOWEST), "capped");
        let calm = at + CALM + SLOWEST;
        assert_eq!(p.repair_at(calm), calm + SETTLE, "after a calm spell, at once again");
    }
}
