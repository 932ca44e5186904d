//! The actor against a proxier that records what it is asked to do.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::sync::Mutex;
use std::sync::mpsc::RecvTimeoutError;

use endpoints_map::Engine;
use prometheus_client::registry::Registry;

use super::*;

/// What the proxier was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    ReadAhead,
    Absorb,
    Repair,
    Sync(SyncKind),
    /// A sync of a proxier that owed nothing.
    NothingOwed,
}

/// A proxier that tells the test each call, and fails its syncs while
/// `failing` says so.
struct Told {
    engine: Engine,
    told: Sender<Asked>,
    failing: Arc<Mutex<u32>>,
    /// Owes nothing: its syncs of changes say so.
    current: Arc<Mutex<bool>>,
}

impl FamilyProxier for Told {
    fn engine(&self) -> &Engine {
        &self.engine
    }

    fn sync(&mut self, kind: SyncKind) -> Result<Option<FamilySync>, DataplaneError> {
        if kind == SyncKind::Changes && *self.current.lock().unwrap() {
            self.told.send(Asked::NothingOwed).unwrap();
            return Ok(None);
        }
        self.told.send(Asked::Sync(kind)).unwrap();
        let mut failing = self.failing.lock().unwrap();
        if *failing > 0 {
            *failing -= 1;
            return Err(DataplaneError::Rejected {
                status: "exit status: 1".into(),
                stderr: "injected".into(),
            });
        }
        Ok(Some(FamilySync::default()))
    }

    fn read_ahead(&mut self) {
        self.told.send(Asked::ReadAhead).unwrap();
    }

    fn absorb(&mut self) {
        self.told.send(Asked::Absorb).unwrap();
    }

    fn repair(&mut self) {
        self.told.send(Asked::Repair).unwrap();
    }
}

struct Running {
    commands: Commands,
    actor: super::Running,
    asked: Receiver<Asked>,
    health: Arc<ProxierHealth>,
    failing: Arc<Mutex<u32>>,
    current: Arc<Mutex<bool>>,
    /// Where the actor's sync metrics are registered.
    registry: Registry,
}

fn start() -> Running {
    let (told, asked) = std::sync::mpsc::channel();
    let failing = Arc::new(Mutex::new(0));
    let current = Arc::new(Mutex::new(false));
    let health = Arc::new(ProxierHealth::new(&[IpFamily::V4], Duration::from_secs(60)));
    let proxier = Told {
        engine: Engine::new("node-1", IpFamily::V4),
        told,
        failing: failing.clone(),
        current: current.clone(),
    };
    let inbox = Inbox::new();
    let commands = inbox.commands();
    let mut registry = Registry::default();
    let actor = SyncActor {
        proxiers: vec![Box::new(proxier)],
        health: health.clone(),
        metrics: SyncMetrics::register(&mut registry, &[IpFamily::V4]),
        multus_metrics: None,
        health_checks: watch::channel(HealthChecks::new()).0,
        node: None,
        timing: SyncTiming {
            retry_initial: Duration::from_millis(20),
            ..SyncTiming::default()
        },
        hearing: None,
    }
    .spawn(inbox, || {})
    .unwrap();
    Running {
        commands,
        actor,
        asked,
        health,
        failing,
        current,
        registry,
    }
}

impl Running {
    fn next(&self) -> Asked {
        self.asked.recv_timeout(Duration::from_secs(5)).unwrap()
    }

    /// Nothing more is asked within `wait`.
    fn quiet(&self, wait: Duration) -> bool {
        matches!(self.asked.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
    }

    /// `/healthz` says programmed within `wait` (the sync reports after
    /// it has asked the proxier).
    fn programmed_within(&self, wait: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < wait {
            if self.health.programmed() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    fn send(&self, command: Command) {
        self.commands.send(command).unwrap();
    }

    /// The syncs reported in the metrics.
    fn syncs_reported(&self) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        let count = "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} ";
        let line = text.lines().find_map(|l| l.strip_prefix(count)).unwrap();
        line.parse().unwrap()
    }

    /// The sources' first lists are in: the proxier reads ahead, then the
    /// first sync runs.
    fn listed(&self) {
        self.send(Command::Listed);
        assert_eq!(self.next(), Asked::ReadAhead);
        assert_eq!(self.next(), Asked::Sync(SyncKind::Changes), "the first sync");
    }
}

#[test]
fn changes_before_the_lists_are_absorbed_and_the_first_sync_waits_for_them() {
    let a = start();
    assert_eq!(a.next(), Asked::ReadAhead);
    a.send(Command::Changed(SystemTime::now()));
    assert_eq!(a.next(), Asked::Absorb, "taken in while the lists arrive");
    assert!(a.quiet(Duration::from_millis(300)), "no sync before the lists");
    assert!(!a.health.programmed());
    a.send(Command::Listed);
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes));
    assert!(a.programmed_within(Duration::from_secs(1)));
    a.actor.stop();
}

#[test]
fn a_change_syncs_and_a_repair_rewrites_after_settling() {
    let a = start();
    a.listed();
    a.send(Command::Changed(SystemTime::now()));
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes));
    let heard = Instant::now();
    a.send(Command::Repair(NftChange::Foreign {
        pid: 1,
        process: "nft".into(),
    }));
    assert_eq!(a.next(), Asked::Repair);
    assert!(heard.elapsed() >= crate::schedule::SETTLE, "settled first");
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes));
    assert!(a.quiet(Duration::from_millis(200)), "one repair");
    a.actor.stop();
}

#[test]
fn a_failed_sync_is_retried_and_keeps_the_health_unprogrammed() {
    let a = start();
    *a.failing.lock().unwrap() = 2;
    a.send(Command::Listed);
    assert_eq!(a.next(), Asked::ReadAhead);
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes));
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes), "retried");
    // The first failure is named by /healthz while no sync has succeeded
    // (held here: the proxier cannot end a sync meanwhile).
    let held = a.failing.lock().unwrap();
    let body = a.health.reply(SystemTime::now(), true).body;
    drop(held);
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
    let why = reply["failedSyncs"]["ipv4"].as_str();
    assert!(why.unwrap_or_default().contains("injected"), "{body}");
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes));
    assert!(a.quiet(Duration::from_millis(200)), "done after the third");
    assert!(a.health.programmed());
    assert!(a.health.failures().is_empty(), "a success clears it");
    a.actor.stop();
}

#[test]
fn stopping_is_one_message_and_one_join_and_ends_the_proxiers() {
    let a = start();
    a.listed();
    let stopping = Instant::now();
    a.actor.stop();
    assert!(stopping.elapsed() < Duration::from_secs(1), "{:?}", stopping.elapsed());
    // The proxiers went with the thread: their sender is closed.
    assert!(matches!(
        a.asked.recv_timeout(Duration::from_secs(1)),
        Err(RecvTimeoutError::Disconnected)
    ));
    assert!(a.commands.send(Command::Listed).is_err(), "nothing reads the inbox");
}

/// A change that leaves a proxier with nothing to write (the other
/// family's) is no sync to report: nothing counted in the metrics, and its
/// health is current all the same.
#[test]
fn a_proxier_with_nothing_owed_reports_no_sync_and_is_current() {
    let a = start();
    a.listed();
    assert!(a.programmed_within(Duration::from_secs(1)));
    let reported = a.syncs_reported();
    assert_eq!(reported, 1, "the first sync");
    *a.current.lock().unwrap() = true;
    let before = a.health.is_healthy(SystemTime::now()).1;
    std::thread::sleep(Duration::from_millis(20));
    a.send(Command::Changed(SystemTime::now()));
    assert_eq!(a.next(), Asked::NothingOwed);
    assert!(a.quiet(Duration::from_millis(200)), "nothing more asked");
    let after = a.health.is_healthy(SystemTime::now()).1;
    assert!(after > before, "current all the same: {before:?} -> {after:?}");
    assert_eq!(a.syncs_reported(), reported, "nothing to write: no sync reported");
    *a.current.lock().unwrap() = false;
    a.send(Command::Changed(SystemTime::now()));
    assert_eq!(a.next(), Asked::Sync(SyncKind::Changes));
    a.actor.stop();
}
