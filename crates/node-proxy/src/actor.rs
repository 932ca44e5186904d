//! The sync actor: one thread that owns the proxiers (node mode's
//! families, or multus mode's pods) and is the only one that touches them.
//! Everything else talks to it through one channel of [`Command`]s: the
//! sources say that something changed and when their first lists are in,
//! the kernel's [`Hearing`] says another program changed the tables, and
//! the daemon says stop. The actor alone decides when to sync
//! ([`Schedule`]), syncs every family, and turns each family's one report
//! into the metrics, `/healthz` and the log line.
//!
//! ```text
//!  sources ─ Changed, Listed ─┐
//!  Hearing ─ Repair ──────────┼─► inbox ─► actor thread: Schedule ─► sync
//!  daemon ── Stop ────────────┘            (absorbs while the first
//!                                           lists arrive)
//! ```

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use linux_dataplane::{Hearing, NftChange};
use nft_dataplane::{DataplaneError, SyncKind};
use slice_model::IpFamily;
use tokio::sync::watch;

use crate::family::{FamilyProxier, FamilySync, HealthChecks};
use crate::health::ProxierHealth;
use crate::kube_proxy_metrics::{MultusMetrics, SyncMetrics};
use crate::schedule::{Outcome, Schedule, SyncReason, SyncTiming};

/// What the actor is told.
#[derive(Debug)]
pub enum Command {
    /// The sources changed something (at this time): a sync is due.
    Changed(SystemTime),
    /// Every source has handed over its first list: syncing may start.
    Listed,
    /// Another program changed the ruleset: the tables are rewritten
    /// whole (paced).
    Repair(NftChange),
    /// Stop, after the sync under way.
    Stop,
}

/// Where commands go: the sending half of the actor's inbox.
pub type Commands = Sender<Command>;

/// The actor's inbox, made before the actor: what talks to it (the
/// hearing, the forwarder) is made with [`Inbox::commands`] first.
#[derive(Debug)]
pub struct Inbox {
    commands: Commands,
    receiver: Receiver<Command>,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        let (commands, receiver) = std::sync::mpsc::channel();
        Self { commands, receiver }
    }

    /// A sender of commands to it.
    pub fn commands(&self) -> Commands {
        self.commands.clone()
    }
}

impl Default for Inbox {
    fn default() -> Self {
        Self::new()
    }
}

/// The actor, running on its thread.
#[derive(Debug)]
pub struct Running {
    commands: Commands,
    thread: JoinHandle<()>,
}

impl Running {
    /// Stops the actor: one message, one join (the sync under way
    /// finishes first; the hearing's thread stops with it). A panic of
    /// the actor's thread goes on here.
    pub fn stop(self) {
        // A send fails only when the actor has already ended.
        let _ = self.commands.send(Command::Stop);
        if let Err(panic) = self.thread.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

/// What the node's own objects (its Node, the ServiceCIDRs) say, handed to
/// the proxiers before each sync.
pub trait FollowNode: Send {
    /// Gives the proxiers the node's settings when they changed since the
    /// last call (always on the `first`).
    fn follow(&mut self, proxiers: &mut [Box<dyn FamilyProxier>], first: bool);
}

/// How often what the initial lists brought so far is taken in: each time
/// costs about what arrived since, so this only bounds what is left for
/// the first sync (about this much of the lists' arrivals).
const ABSORB_EVERY: Duration = Duration::from_millis(100);

/// The actor, before it runs: the proxiers and what a sync reports to.
pub struct SyncActor {
    /// The proxiers, one per family, of either mode.
    pub proxiers: Vec<Box<dyn FamilyProxier>>,
    /// `/healthz`'s state.
    pub health: Arc<ProxierHealth>,
    /// kube-proxy's sync metrics.
    pub metrics: SyncMetrics,
    /// Multus mode's pod metrics.
    pub multus_metrics: Option<MultusMetrics>,
    /// Where the health-check listeners learn what to serve.
    pub health_checks: watch::Sender<HealthChecks>,
    /// The node's settings, followed (node mode).
    pub node: Option<Box<dyn FollowNode>>,
    /// When to sync.
    pub timing: SyncTiming,
    /// The kernel heard for other programs' changes (node mode, when
    /// nftables can be followed): stopped with the actor.
    pub hearing: Option<Hearing>,
}

/// A sync that failed for some families (the rest were written).
#[derive(Debug, thiserror::Error)]
#[error("{}; the next sync rewrites the whole table", failed_text(.0))]
pub struct SyncFailed(pub Vec<FamilyFailed>);

/// One family's failed sync.
#[derive(Debug, thiserror::Error)]
#[error("{family}: {source}")]
pub struct FamilyFailed {
    /// The family.
    pub family: IpFamily,
    /// What the dataplane said.
    #[source]
    pub source: DataplaneError,
}

fn failed_text(failed: &[FamilyFailed]) -> String {
    let each: Vec<String> = failed.iter().map(ToString::to_string).collect();
    each.join("; ")
}

/// The periodic sync also re-asserts the fixed skeleton.
fn sync_kind(reason: SyncReason) -> SyncKind {
    if reason == SyncReason::Periodic {
        SyncKind::Periodic
    } else {
        SyncKind::Changes
    }
}

impl SyncActor {
    /// Runs the actor on a thread of its own, reading `inbox` until
    /// [`Command::Stop`] (or until every sender is gone); `ended` is called
    /// when it ends, however it ends (a panic included), so that the
    /// daemon stops with it.
    pub fn spawn(self, inbox: Inbox, ended: impl FnOnce() + Send + 'static) -> std::io::Result<Running> {
        let Inbox { commands, receiver } = inbox;
        let thread = std::thread::Builder::new().name("proxyd-sync".into()).spawn(move || {
            let _ended = OnDrop(Some(ended));
            self.run(&receiver);
        })?;
        Ok(Running { commands, thread })
    }

    fn run(mut self, inbox: &Receiver<Command>) {
        // A restart's table is read back while the lists arrive.
        for p in &mut self.proxiers {
            p.read_ahead();
        }
        let mut schedule = Schedule::new(self.timing, Instant::now());
        // Who made the first change of the repair that is waiting, named
        // when it runs (the rest of a storm go into it).
        let mut repair_by: Option<NftChange> = None;
        let mut absorbed_at = Instant::now();
        let mut unabsorbed = false;
        loop {
            let wait = match schedule.next() {
                Some(next) => next.at.saturating_duration_since(Instant::now()),
                None if unabsorbed => ABSORB_EVERY.saturating_sub(absorbed_at.elapsed()),
                None => Duration::from_secs(3600),
            };
            let command = if wait.is_zero() {
                Err(RecvTimeoutError::Timeout)
            } else {
                inbox.recv_timeout(wait)
            };
            match command {
                Ok(command) => {
                    unabsorbed |= matches!(command, Command::Changed(_));
                    if !self.take(command, &mut schedule, &mut repair_by) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => match schedule.next() {
                    None => {
                        for p in &mut self.proxiers {
                            p.absorb();
                        }
                        (absorbed_at, unabsorbed) = (Instant::now(), false);
                    }
                    Some(next) => {
                        // The sync covers every change told so far.
                        while let Ok(command) = inbox.try_recv() {
                            if !self.take(command, &mut schedule, &mut repair_by) {
                                return;
                            }
                        }
                        self.sync_when(next.reason, &mut schedule, &mut repair_by);
                    }
                },
            }
        }
    }

    /// Takes one command in; false to stop.
    fn take(&mut self, command: Command, schedule: &mut Schedule, repair_by: &mut Option<NftChange>) -> bool {
        match command {
            Command::Changed(at) => {
                self.health.queued(at);
                self.metrics.queued(at);
                schedule.request();
            }
            Command::Listed => schedule.listed(),
            Command::Repair(change) => {
                tracing::debug!("{change} changed the nftables ruleset");
                repair_by.get_or_insert(change);
                schedule.repair(Instant::now());
            }
            Command::Stop => return false,
        }
        true
    }

    /// One sync for `reason`, told to the schedule.
    fn sync_when(&mut self, reason: SyncReason, schedule: &mut Schedule, repair_by: &mut Option<NftChange>) {
        let started = Instant::now();
        let repair = schedule.started(started);
        if repair && let Some(who) = repair_by.take() {
            tracing::warn!("{who} changed the nftables ruleset: rewriting proxyd's tables");
        }
        let result = self.sync(reason, repair);
        let outcome = match &result {
            Ok(outcome) => *outcome,
            Err(_) => Outcome::Failed,
        };
        let retry_in = schedule.finished(started, Instant::now(), outcome);
        if let (Err(e), Some(retry_in)) = (result, retry_in) {
            tracing::warn!(
                error = %e,
                retry_in_ms = u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
                "sync failed"
            );
        }
    }

    /// One sync of every family.
    fn sync(&mut self, reason: SyncReason, repair: bool) -> Result<Outcome, SyncFailed> {
        if let Some(node) = &mut self.node {
            node.follow(&mut self.proxiers, reason == SyncReason::Initial);
        }
        let reason = if repair { SyncReason::Repair } else { reason };
        let mut outcome = Outcome::Done;
        let mut failed = Vec::new();
        let mut full = false;
        for p in &mut self.proxiers {
            if repair {
                p.repair();
            }
            match sync_family(p.as_mut(), reason, &self.metrics, self.multus_metrics.as_ref()) {
                // Nothing owed (the other family's change alone): current.
                Ok(None) => self.health.updated(p.family(), SystemTime::now()),
                Ok(Some(done)) => {
                    self.health.updated(p.family(), SystemTime::now());
                    if done.incomplete() {
                        outcome = Outcome::Incomplete;
                    }
                    full |= done.written.full;
                }
                Err(source) => {
                    self.health.failed(p.family(), &source);
                    failed.push(FamilyFailed {
                        family: p.family(),
                        source,
                    });
                }
            }
        }
        if full {
            release_free_memory();
        }
        self.publish_health_checks();
        if failed.is_empty() {
            Ok(outcome)
        } else {
            Err(SyncFailed(failed))
        }
    }

    /// One listener per service; with two families, the larger local count.
    fn publish_health_checks(&self) {
        let mut merged = HealthChecks::new();
        for checks in self.proxiers.iter().filter_map(|p| p.health_checks()) {
            for (name, (port, count)) in checks {
                let e = merged.entry(name.clone()).or_insert((*port, 0));
                e.1 = e.1.max(*count);
            }
        }
        self.health_checks.send_if_modified(|current| {
            let changed = *current != merged;
            *current = merged;
            changed
        });
    }
}

/// One sync of `proxier`, its metrics and its log line (none when it
/// owed nothing).
fn sync_family(
    proxier: &mut dyn FamilyProxier,
    reason: SyncReason,
    metrics: &SyncMetrics,
    multus: Option<&MultusMetrics>,
) -> Result<Option<FamilySync>, DataplaneError> {
    let family = proxier.family();
    let result = proxier.sync(sync_kind(reason));
    let (eps, svcs) = proxier.engine().pending();
    metrics.set_pending(family, eps, svcs);
    let Some(out) = result.inspect_err(|_| metrics.observe_failed(family))? else {
        return Ok(None);
    };
    let now = SystemTime::now();
    metrics.observe_sync(family, &out, now);
    if let (Some(m), Some(pods)) = (multus, &out.pods) {
        m.observe(family, pods);
    }
    for e in &out.conntrack_errors {
        tracing::warn!(family = %family, "conntrack cleanup: {e}");
    }
    out.log(proxier.engine(), reason, now);
    Ok(Some(out))
}

/// Gives the allocator's free pages back to the kernel. A full sync follows
/// the bursts that free the most memory (the initial lists, a relist, a
/// restart), so the actor calls it after a sync in which any family wrote
/// its whole table: once, however many families did.
fn release_free_memory() {
    let started = Instant::now();
    let released = linux_dataplane::process::release_free_memory();
    tracing::debug!(
        released,
        took_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "returned free memory to the kernel"
    );
}

/// Calls its function when dropped: at the end of the actor's thread,
/// even one that panicked.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

pub mod feed;
#[cfg(test)]
mod tests;
