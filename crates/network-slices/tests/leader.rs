//! Leader election against the fake API server: one leader of two; a
//! leader that stops hands over within a retry period; one that dies (its
//! task aborted, the Lease not released) within a lease duration; a leader
//! whose renewals fail stops leading.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use network_slices::leader::{Candidate, LeaderError, LeaseConfig};

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: "kube-system".into(),
        name: "proxyd-slices".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(100),
    }
}

/// A candidate that raises its flag while it leads; stopped through the
/// returned sender.
fn candidate(
    server: &FakeApiServer,
    identity: &str,
) -> (
    Arc<AtomicBool>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), LeaderError>>,
) {
    let leading = Arc::new(AtomicBool::new(false));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let flag = leading.clone();
    let c = Candidate::new(server.client(), config(identity));
    let task = tokio::spawn(async move {
        let flag2 = flag.clone();
        let r = c
            .lead(
                move || flag2.store(true, Ordering::SeqCst),
                std::future::pending(),
                async move {
                    let _ = stopped.await;
                },
            )
            .await;
        flag.store(false, Ordering::SeqCst);
        r
    });
    (leading, stop, task)
}

async fn until(what: &str, limit: Duration, check: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_a_handover_on_stop_and_on_death() {
    let server = FakeApiServer::start().await.unwrap();
    let (a, stop_a, task_a) = candidate(&server, "a");
    until("a leads", Duration::from_secs(5), || a.load(Ordering::SeqCst)).await;
    let (b, stop_b, task_b) = candidate(&server, "b");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b.load(Ordering::SeqCst), "one leader at a time");

    // a stops: it releases the Lease, and b takes it within a retry or so.
    drop(stop_a);
    assert!(task_a.await.unwrap().is_ok());
    let handover = until("b leads", Duration::from_secs(5), || b.load(Ordering::SeqCst)).await;
    assert!(
        handover < Duration::from_millis(500),
        "a released handover took {handover:?}"
    );

    // c waits; b dies without releasing: c takes over once the lease
    // duration has passed since b's last renewal.
    let (c, _stop_c, _task_c) = candidate(&server, "c");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!c.load(Ordering::SeqCst));
    task_b.abort();
    drop(stop_b);
    let took = until("c leads", Duration::from_secs(10), || c.load(Ordering::SeqCst)).await;
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(4),
        "a dead leader's lease is taken after about its duration: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_leading() {
    let mut server = FakeApiServer::start().await.unwrap();
    let (a, _stop, task) = candidate(&server, "a");
    until("a leads", Duration::from_secs(5), || a.load(Ordering::SeqCst)).await;
    server.stop();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(result, Err(LeaderError::Lost { .. })), "{result:?}");
}
