//! What feeds the sync actor's inbox besides the daemon's `Stop`: the
//! sources' changes and the end of their first lists ([`Forward`]), and
//! other programs' changes to the tables ([`hear`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use linux_dataplane::{Hearing, Netns};
use tokio::sync::{Notify, watch};

use super::{Command, Commands};

/// Tells the actor of the sources' changes.
pub struct Forward {
    /// Woken by the sources (it coalesces wake-ups).
    pub changes: Arc<Notify>,
    /// Set once each kind's first list is in.
    pub lists: Vec<Arc<AtomicBool>>,
    /// Said once every kind's is, for the rest of the run (the daemon's
    /// hints wait on it).
    pub listed: watch::Sender<bool>,
    /// The actor's inbox.
    pub commands: Commands,
}

impl Forward {
    /// Tells the actor of each change, and once, when every kind's first
    /// list is in, until `shutdown` or the actor's end.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tracing::info!("waiting for the initial lists");
        let waiting = std::time::Instant::now();
        let all_listed = || self.lists.iter().all(|l| l.load(Ordering::Acquire));
        tokio::pin!(shutdown);
        loop {
            if !*self.listed.borrow() && all_listed() {
                tracing::info!(took_ms = waiting.elapsed().as_millis(), "initial lists complete");
                self.listed.send_replace(true);
                if self.commands.send(Command::Listed).is_err() {
                    return;
                }
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = self.changes.notified() => {}
            }
            if self.commands.send(Command::Changed(SystemTime::now())).is_err() {
                return;
            }
        }
    }
}

/// Hears `netns`'s nftables for other programs' changes to proxyd's
/// tables, each handed to the actor as a repair; `None` (said) when they
/// cannot be followed.
pub fn hear(netns: &Netns, commands: &Commands) -> Option<Hearing> {
    let commands = commands.clone();
    let on_change: linux_dataplane::hearing::OnChange = Arc::new(move |change| {
        // Fails only once the actor has stopped: nothing left to repair.
        let _ = commands.send(Command::Repair(change));
    });
    Hearing::start(netns, nft_dataplane::names::TABLE, on_change)
        .inspect_err(|e| {
            tracing::warn!(
                "cannot follow nftables changes ({e}): a table changed by another program is repaired at the next \
                 periodic sync"
            );
        })
        .ok()
}
