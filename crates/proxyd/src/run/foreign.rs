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
/// made its transactions several times slower), and afterwards tells the
/// follower of the commits other programs made meanwhile, which no one
/// heard: the ruleset's generation advanced by more than proxyd's own
/// commits.
pub struct WhileWriting {
    listening: Listening,
    /// Reads the ruleset's generation around each write: opened once, not
    /// per sync.
    nft: NftNetlink,
}

/// Where the ruleset's commits stood at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Commits {
    /// The ruleset's generation: one more for each commit by anyone.
    generation: u32,
    /// proxyd's own commits so far ([`linux_dataplane::own_commits`]).
    own: u64,
}

impl Commits {
    /// How many commits between `before` and `self` were other programs'.
    fn others_since(self, before: Self) -> u32 {
        let all = self.generation.wrapping_sub(before.generation);
        let own = u32::try_from(self.own.saturating_sub(before.own)).unwrap_or(u32::MAX);
        all.saturating_sub(own)
    }
}

impl WhileWriting {
    /// Runs `write` with the listening stopped; commits other programs
    /// made meanwhile are handed to the follower, which repairs as for one
    /// it heard (paced the same way).
    pub fn quietly<T>(&mut self, write: impl FnOnce() -> T) -> T {
        // Read before the listening stops and after it resumes: every
        // commit is heard, counted, or both (then repaired once or twice,
        // never missed).
        let before = self.commits();
        if let Err(e) = self.listening.pause() {
            tracing::debug!("cannot stop following nftables changes while writing: {e}");
        }
        let written = write();
        if let Err(e) = self.listening.resume() {
            tracing::warn!("cannot follow nftables changes again ({e}): the periodic sync still repairs");
        }
        let unheard = match (before, self.commits()) {
            (Some(before), Some(after)) => after.others_since(before),
            // The generation cannot be read: nothing to act on.
            _ => 0,
        };
        if unheard > 0
            && let Err(e) = self.listening.missed(unheard)
        {
            tracing::debug!("cannot hand {unheard} unheard commits to the follower: {e}");
        }
        written
    }

    fn commits(&mut self) -> Option<Commits> {
        let generation = self.nft.generation().ok()?;
        Some(Commits {
            generation,
            own: linux_dataplane::own_commits(),
        })
    }
}

/// Follows the ruleset of `netns` on a thread of its own until `shutdown`;
/// a foreign change sets `repair` and wakes the sync runner. Returns the
/// sync thread's side, `None` when nftables cannot be followed.
pub fn follow(
    netns: Netns,
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
    let writing = WhileWriting { listening, nft };
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
                    // Announcements overflowed the socket: proxyd's own are
                    // not among them (it does not listen while it writes),
                    // so another program committed a lot, and what it
                    // touched is lost.
                    NftChange::Unknown => "a process whose announcements were lost".to_owned(),
                    NftChange::Unheard { commits } => {
                        format!("another process ({commits} commits while proxyd wrote and did not listen)")
                    }
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
    fn commits_beyond_proxyds_own_are_another_programs() {
        let at = |generation, own| Commits { generation, own };
        assert_eq!(at(12, 7).others_since(at(10, 5)), 0, "two commits, both proxyd's");
        assert_eq!(at(13, 7).others_since(at(10, 5)), 1);
        assert_eq!(at(3, 5).others_since(at(u32::MAX - 1, 5)), 5, "the generation wraps");
        // A commit proxyd counted but the kernel did not (an nft that
        // failed after counting cannot make the count negative).
        assert_eq!(at(10, 6).others_since(at(10, 5)), 0);
    }

    /// Runs `nft ARGS` inside `ns`, as another program would.
    fn foreign_nft(ns: &linux_dataplane::ScratchNetns, args: &str) {
        let ran = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft"])
            .args(args.split(' '))
            .status();
        assert!(ran.is_ok_and(|s| s.success()), "nft {args}");
    }

    /// Another program's commit while proxyd writes (its listening
    /// stopped) is not announced: the generations counted around the write
    /// find it, and the follower repairs; proxyd's own commits alone
    /// repair nothing.
    #[test]
    #[ignore = "needs root: a network namespace and nftables"]
    #[allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]
    fn a_commit_by_another_program_while_proxyd_writes_is_repaired() {
        let ns = linux_dataplane::ScratchNetns::new("proxyd-unheard");
        foreign_nft(&ns, "add table ip proxyd");
        foreign_nft(&ns, "add chain ip proxyd c");
        let netns = ns.netns();
        let (repair, wake, shutdown) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(Notify::new()),
            CancellationToken::new(),
        );
        let _stop = shutdown.clone().drop_guard();
        let mut writing = follow(netns.clone(), repair.clone(), wake, shutdown).unwrap();
        let own = linux_dataplane::NftCommand { netns };
        let repaired_within = |limit: Duration| {
            let start = Instant::now();
            while start.elapsed() < limit {
                if repair.swap(false, Ordering::AcqRel) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        };

        for _ in 0..3 {
            writing.quietly(|| own.apply_text("add rule ip proxyd c counter").unwrap());
        }
        assert!(!repaired_within(SETTLE * 6), "proxyd's own commits");

        writing.quietly(|| {
            own.apply_text("add rule ip proxyd c counter").unwrap();
            foreign_nft(&ns, "flush chain ip proxyd c");
            own.apply_text("add rule ip proxyd c counter").unwrap();
        });
        assert!(repaired_within(Duration::from_secs(2)), "a flush while proxyd wrote");

        // Heard as usual once the writing is over.
        foreign_nft(&ns, "flush chain ip proxyd c");
        assert!(repaired_within(Duration::from_secs(2)), "a flush afterwards");
    }

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
