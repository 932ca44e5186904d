//! Ready means programmed: `proxyd run` (the real binary) against API
//! servers that do not answer as a healthy one does. Its health server
//! listens before anything else starts; `/healthz` is 503 until the first
//! sync is written, whatever the API server does meanwhile (hangs, refuses,
//! answers slowly), and again while a watch fails: a retry that hangs is
//! still a failure, not quiet. `/livez` stays kube-proxy's.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

mod common;

use std::time::{Duration, Instant};

use common::daemon::{Proxyd, await_status, expect_line, http_status};
use fake_apiserver::FakeApiServer;
use serde_json::json;

/// proxyd's `--sync-period` here: a watch failing for twice this turns
/// `/healthz` to 503.
const SYNC_PERIOD: Duration = Duration::from_secs(2);

/// Starts `proxyd run --dry-run` against `server`, which holds one
/// Service.
fn start(server: &FakeApiServer, tag: &str) -> Proxyd {
    server
        .apply(json!({"kind": "Service", "metadata": {"name": "a", "namespace": "ns"},
                      "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "p", "protocol": "TCP", "port": 80}]}}))
        .unwrap();
    Proxyd::dry_run(server, &format!("ready-{tag}"), SYNC_PERIOD)
}

/// What these tests ask of it.
trait Readiness {
    async fn healthz_for(&self, span: Duration) -> Vec<u16>;
    async fn listening(&self) -> Duration;
    async fn ready_after_first_sync(&mut self);
}

impl Readiness for Proxyd {
    /// `/healthz`'s answers over `span`, every 100 ms (0: no answer).
    async fn healthz_for(&self, span: Duration) -> Vec<u16> {
        let until = Instant::now() + span;
        let mut seen = Vec::new();
        while Instant::now() < until {
            seen.push(http_status(self.port, "/healthz"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    }

    /// Waits until `/healthz` answers at all; how long after the start.
    async fn listening(&self) -> Duration {
        while http_status(self.port, "/healthz") == 0 {
            assert!(
                self.started.elapsed() < Duration::from_secs(10),
                "the health server never listened"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.started.elapsed()
    }

    /// Waits for the first sync's log line, then for `/healthz` 200; the
    /// first 200 must come after the sync was written.
    async fn ready_after_first_sync(&mut self) {
        expect_line(&self.lines, &mut self.log, &["synced", "first=true"]).await;
        await_status(
            self.port,
            "/healthz",
            200,
            Duration::from_secs(5),
            "after the first sync",
        )
        .await;
    }
}

/// A server that accepts connections and never answers, one that refuses
/// them, one that answers slowly: the health server listens at once, and
/// `/healthz` is 503 (never 200) until the first sync is written; `/livez`
/// is 200 throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_503_until_the_first_sync_whatever_the_api_server_does() {
    // Hangs, then answers.
    let server = FakeApiServer::start().await.unwrap();
    server.set_hanging(true);
    let mut proxyd = start(&server, "hang");
    let listening = proxyd.listening().await;
    assert!(
        listening < Duration::from_secs(5),
        "listening {listening:?} after the start"
    );
    let answers = proxyd.healthz_for(3 * SYNC_PERIOD).await;
    assert!(
        answers.iter().all(|s| *s == 503),
        "a server that answers nothing: {answers:?}"
    );
    assert_eq!(http_status(proxyd.port, "/livez"), 200);
    server.set_hanging(false);
    proxyd.ready_after_first_sync().await;

    // Refuses, then comes up.
    let mut server = FakeApiServer::start().await.unwrap();
    server.stop();
    let mut proxyd = start(&server, "refuse");
    proxyd.listening().await;
    let answers = proxyd.healthz_for(3 * SYNC_PERIOD).await;
    assert!(answers.iter().all(|s| *s == 503), "a server that refuses: {answers:?}");
    assert_eq!(http_status(proxyd.port, "/livez"), 200);
    server.restart().await.unwrap();
    proxyd.ready_after_first_sync().await;

    // Answers each request 1.5 s late: 503 while the lists come.
    let server = FakeApiServer::start().await.unwrap();
    server.set_delay(Duration::from_millis(1500));
    let mut proxyd = start(&server, "slow");
    proxyd.listening().await;
    let answers = proxyd.healthz_for(Duration::from_secs(1)).await;
    assert!(
        answers.iter().all(|s| *s == 503),
        "a slow server, before the lists: {answers:?}"
    );
    proxyd.ready_after_first_sync().await;
}

/// Once ready: the API server goes down and comes back answering nothing
/// (the watches' retries hang). `/healthz` turns 503 after 2 x
/// --sync-period and stays 503 while the retries hang, however long;
/// it is 200 again only after the server answers and the watches list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_retry_hangs_keeps_healthz_503_until_it_lists() {
    let mut server = FakeApiServer::start().await.unwrap();
    let mut proxyd = start(&server, "outage");
    proxyd.ready_after_first_sync().await;
    server.stop();
    let down = Instant::now();
    while http_status(proxyd.port, "/healthz") != 503 {
        assert!(
            down.elapsed() < 5 * SYNC_PERIOD,
            "/healthz still 200 with the API server down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.set_hanging(true);
    server.restart().await.unwrap();
    let answers = proxyd.healthz_for(8 * SYNC_PERIOD).await;
    assert!(
        answers.iter().all(|s| *s == 503),
        "a retry that hangs is no recovery: {answers:?}\n{}",
        proxyd.log.join("\n")
    );
    server.set_hanging(false);
    let back = Instant::now();
    while http_status(proxyd.port, "/healthz") != 200 {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "/healthz not 200 after the server answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while let Ok(l) = proxyd.lines.try_recv() {
        proxyd.log.push(l);
    }
    assert!(
        proxyd.log.iter().any(|l| l.contains("watch recovered")),
        "{}",
        proxyd.log.join("\n")
    );
}
