//! Noticing an API server that stops answering without closing its
//! connections (a frozen or partitioned control-plane node, a
//! kube-apiserver shutting down): its watches stay open and silent, so no
//! error ever reaches the watcher.
//!
//! client-go notices with HTTP/2 pings: a connection idle for 30 s gets a
//! ping, and one not answered in 15 s is closed. kube's client speaks
//! HTTP/1.1, one connection per watch, so the same rule is kept with a
//! request instead of a ping: when none of a client's watches has heard
//! from the server for [`Probe::after_quiet`], one of them asks the
//! server's `/version` (a path every client may read, served without
//! etcd), and a server that gives no answer in [`Probe::timeout`] is
//! silent: every watch of the client restarts on a new connection, and
//! counts as failing until objects arrive again. Any answer, an error
//! status included, is an answer. One probe serves all the watches of a
//! client, so a quiet cluster costs one small request per
//! [`Probe::after_quiet`] per client.
//!
//! The probe goes over a new connection or an idle one, never over a
//! watch's own. Behind a load balancer it can reach an API server that
//! answers while a watch hangs on one that does not; so each watch also
//! asks the server to end it every [`Probe::watch_timeout_secs`] (40 s by
//! default) and is resumed from its resourceVersion (no list: the API
//! server serves it from its watch cache), and a watch connection silent
//! for [`Probe::bound`] is replaced.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::watch_error::WatchError;

/// When to ask a quiet API server whether it still answers, and how long
/// to wait for the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Ask once no watch of the client has heard anything for this long.
    pub after_quiet: Duration,
    /// A server that has not answered after this long is silent.
    pub timeout: Duration,
}

impl Default for Probe {
    /// client-go's figures: 30 s quiet, 15 s to answer; a frozen server is
    /// noticed at most 45 s after it last said anything.
    fn default() -> Self {
        Self {
            after_quiet: Duration::from_secs(30),
            timeout: Duration::from_secs(15),
        }
    }
}

/// kube-runtime's idle timeout of a watch stream is its `timeoutSeconds`
/// plus this.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

impl Probe {
    /// The longest a silent server goes unnoticed.
    pub fn bound(&self) -> Duration {
        self.after_quiet + self.timeout
    }

    /// The `timeoutSeconds` each watch asks for (at least 1): the server
    /// ends the watch that often and it is resumed from its
    /// resourceVersion (no list), so that one watch connection silent for
    /// [`Self::bound`] is replaced by kube-runtime's idle timeout (the
    /// timeout plus 5 s) even while the server answers on other
    /// connections (behind a load balancer, the probe's new connection can
    /// reach a server that works while an old watch hangs on one that does
    /// not).
    pub fn watch_timeout_secs(&self) -> u32 {
        let secs = self.bound().saturating_sub(IDLE_MARGIN).as_secs();
        u32::try_from(secs).unwrap_or(u32::MAX).max(1)
    }
}

/// Sets `config` so that no request of its client waits on a silent
/// connection longer than `probe`'s bound: a read that waits that long
/// fails (`read_timeout`, counted from each request, not from when a
/// pooled connection went idle). Each watch is ended by the server every
/// [`Probe::watch_timeout_secs`], so a healthy connection never waits that
/// long; one to an API server that stopped answering (a pooled connection
/// behind a load balancer, a list, a watch started again) is dropped, and
/// the request made again on a connection that can reach one that answers.
pub fn guard_connections(config: &mut kube::Config, probe: Probe) {
    config.read_timeout = Some(probe.bound());
    config.reset_reader_on_write = true;
}

/// What the watches of one client know of their API server: when it last
/// said anything, and the probe in flight. Shared (in an `Arc`) by the
/// watches of one client.
pub struct Liveness {
    /// Asks the server once: whether it answered.
    ask: Ask,
    probe: Probe,
    heard: Mutex<Instant>,
    /// When the last probe gave up, so that the watches that waited for it
    /// take its verdict rather than ask again.
    gave_up: Mutex<Option<Instant>>,
    /// Held while a probe is in flight, so that the watches that find the
    /// server quiet at the same time wait for one answer.
    asking: tokio::sync::Mutex<()>,
}

type Ask = Box<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("probe", &self.probe)
            .field("quiet_for", &self.quiet_for())
            .finish_non_exhaustive()
    }
}

impl Liveness {
    /// The liveness of `client`'s API server, asked as `probe` says.
    pub fn new(client: kube::Client, probe: Probe) -> Self {
        Self::asking(
            probe,
            Box::new(move || {
                let client = client.clone();
                async move {
                    // An error status is an answer: the server is there.
                    matches!(client.apiserver_version().await, Ok(_) | Err(kube::Error::Api(_)))
                }
                .boxed()
            }),
        )
    }

    /// A liveness that asks with `ask` (tests stand a script in for the
    /// server).
    pub(crate) fn asking(probe: Probe, ask: Ask) -> Self {
        Self {
            ask,
            probe,
            heard: Mutex::new(Instant::now()),
            gave_up: Mutex::new(None),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// How it is asked.
    pub fn probe(&self) -> Probe {
        self.probe
    }

    /// The server said something (an event, a page of a list).
    pub fn heard(&self) {
        *slice_model::internal::lock(&self.heard) = Instant::now();
    }

    /// When the server last said anything.
    pub fn last_heard(&self) -> Instant {
        *slice_model::internal::lock(&self.heard)
    }

    fn quiet_for(&self) -> Duration {
        self.last_heard().elapsed()
    }

    /// Whether the server still answers: at once when it was heard from
    /// within [`Probe::after_quiet`], else after asking it (one question
    /// for all the watches asking at once). A silent server is
    /// [`WatchError::Silent`].
    pub async fn check(&self) -> Result<(), WatchError> {
        if self.quiet_for() < self.probe.after_quiet {
            return Ok(());
        }
        let asked = Instant::now();
        let _asking = self.asking.lock().await;
        // Another watch may have had its answer while this one waited.
        if self.quiet_for() < self.probe.after_quiet {
            return Ok(());
        }
        let silent = || WatchError::Silent {
            quiet: self.quiet_for(),
        };
        if slice_model::internal::lock(&self.gave_up).is_some_and(|at| at >= asked) {
            return Err(silent());
        }
        match tokio::time::timeout(self.probe.timeout, (self.ask)()).await {
            Ok(true) => {
                self.heard();
                Ok(())
            }
            Ok(false) | Err(_) => {
                *slice_model::internal::lock(&self.gave_up) = Some(Instant::now());
                Err(silent())
            }
        }
    }
}
