//! Hearing the kernel: the one place that tells proxyd another program
//! changed its tables (`nft flush ruleset` when a distribution's nftables
//! service restarts, a firewall reload, an operator).
//!
//! ```text
//!  Hearing ── a thread that reads the namespace's nftables announcements
//!     │       (NftMonitor) and hands each foreign change to `on_change`
//!     └─ Ear ── what each writer (WatchedNft) holds: around every commit
//!               it stops the listening (the kernel would otherwise
//!               announce each object proxyd writes, which made its
//!               transactions several times slower), and afterwards
//!               compares the ruleset's generation with its own commits:
//!               the rest were other programs', unheard, and are handed
//!               to `on_change` too
//! ```
//!
//! Every commit by another program is announced, counted, or both (the
//! generation is read before the listening stops and after it resumes), so
//! none is missed; one may be reported twice, and the receiver (the sync
//! actor, which paces repairs) takes the two as one. Nothing here is
//! process-global: each writer counts its own commits, one per transaction
//! the kernel took.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::netlink::{Listening, NftChange, NftMonitor};
use crate::netns::Netns;

/// Where the changes heard go: called from the hearing's thread and from
/// the writers'.
pub type OnChange = Arc<dyn Fn(NftChange) + Send + Sync>;

/// Follows one namespace's nftables for changes to one table, on a thread
/// of its own, until dropped (which stops and joins the thread).
pub struct Hearing {
    ear: Ear,
    /// Readable once the hearing is dropped: wakes the thread to stop.
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Hearing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hearing").finish_non_exhaustive()
    }
}

/// A writer's part of a [`Hearing`]: see the module docs.
#[derive(Clone)]
pub struct Ear {
    listening: Arc<Listening>,
    on_change: OnChange,
}

impl std::fmt::Debug for Ear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ear").finish_non_exhaustive()
    }
}

impl Hearing {
    /// Starts following the changes to `table` (of either IP family) in
    /// `netns`, handing each to `on_change`.
    pub fn start(netns: &Netns, table: &str, on_change: OnChange) -> io::Result<Self> {
        let mut monitor = NftMonitor::open(netns, table)?;
        let listening = Arc::new(monitor.listening()?);
        let stop = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
        let stopped = stop.try_clone()?;
        let told = on_change.clone();
        let thread = std::thread::Builder::new()
            .name("proxyd-hearing".into())
            .spawn(move || {
                loop {
                    match monitor.next_or_stop(stopped.as_fd()) {
                        Ok(Some(change)) => told(change),
                        Ok(None) => return,
                        Err(e) => {
                            tracing::warn!(
                                "following nftables changes: {e}; stopped (the periodic sync still repairs)"
                            );
                            return;
                        }
                    }
                }
            })?;
        Ok(Self {
            ear: Ear { listening, on_change },
            stop,
            thread: Some(thread),
        })
    }

    /// The part a writer holds (one per writer; they share the listening).
    pub fn ear(&self) -> Ear {
        self.ear.clone()
    }
}

impl Drop for Hearing {
    fn drop(&mut self) {
        if let Err(e) = rustix::io::write(&self.stop, &1u64.to_ne_bytes()) {
            tracing::warn!("cannot stop following nftables changes ({e}): the thread is left to the exit");
            return;
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the thread that followed nftables changes panicked");
        }
    }
}

/// The ruleset's generation before and after one write, and how many
/// commits of it were the writer's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commits {
    /// The generation before the write.
    pub before: u32,
    /// The generation after it.
    pub after: u32,
    /// The writer's own commits in between (one per transaction the kernel
    /// took; a check or a refused transaction commits nothing).
    pub own: u32,
}

impl Commits {
    /// How many commits in between were other programs'.
    pub fn others(self) -> u32 {
        self.after.wrapping_sub(self.before).saturating_sub(self.own)
    }
}

impl Ear {
    /// Runs `write` with the listening stopped.
    pub fn quietly<T>(&self, write: impl FnOnce() -> T) -> T {
        if let Err(e) = self.listening.pause() {
            tracing::debug!("cannot stop following nftables changes while writing: {e}");
        }
        let written = write();
        if let Err(e) = self.listening.resume() {
            tracing::warn!("cannot follow nftables changes again ({e}): the periodic sync still repairs");
        }
        written
    }

    /// Hands the commits of other programs among `commits` (made while
    /// the listening was stopped, so never announced) to the receiver.
    pub fn count(&self, commits: Commits) {
        let others = commits.others();
        if others > 0 {
            (self.on_change)(NftChange::Unheard { commits: others });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_beyond_the_writers_own_are_another_programs() {
        let at = |before, after, own| Commits { before, after, own };
        assert_eq!(at(10, 11, 1).others(), 0, "one commit, the writer's");
        assert_eq!(at(10, 12, 1).others(), 1);
        assert_eq!(at(u32::MAX - 1, 3, 0).others(), 5, "the generation wraps");
        // A commit the writer counted but the kernel did not show cannot
        // make the count negative.
        assert_eq!(at(10, 10, 1).others(), 0);
    }
}
