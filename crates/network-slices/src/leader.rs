//! Leader election over a `coordination.k8s.io/v1` Lease, as client-go's
//! leader election does it: read the Lease, and take it (or renew it) with
//! an update that names the resourceVersion read, so that of two
//! candidates at most one wins; another holder's Lease counts as expired
//! once `lease_duration` has passed, on this process's clock, since its
//! record last changed (no clock is compared with another's). A leader
//! that cannot renew within `renew_deadline` stops leading; one that stops
//! releases the Lease, so that a standby takes over within a retry period
//! rather than a lease duration.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

/// How the election runs (kube-controller-manager's `--leader-elect-*`
/// defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's identity (unique: the pod's name).
    pub identity: String,
    /// How long a holder's Lease lasts without a renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it stops leading.
    pub renew_deadline: Duration,
    /// How often candidates try, and leaders renew.
    pub retry_period: Duration,
}

/// Why leading ended other than by a shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be renewed within the renew deadline (the API
    /// server unreachable, or another candidate took it): the work was
    /// stopped, so that two leaders never write at once.
    #[error("lost the lease {namespace}/{name}: not renewed within {deadline:?}")]
    Lost {
        /// The Lease's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The renew deadline.
        deadline: Duration,
    },
}

/// The Lease record as last seen, and when (on this clock) it changed.
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

/// A candidate.
pub struct Candidate {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

impl Candidate {
    /// A candidate for `config`'s Lease.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// Waits until this candidate leads, then runs `work` while it renews
    /// the Lease. Returns `Ok` when `shutdown` completes (the Lease then
    /// released), `Err` when leadership is lost (the work stopped).
    /// `leading` is called once, when the Lease is taken.
    pub async fn lead<W: Future<Output = ()>>(
        mut self,
        leading: impl FnOnce(),
        work: W,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), LeaderError> {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            if self.try_acquire_or_renew().await {
                break;
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        tracing::info!(
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            identity = %self.config.identity,
            "leading"
        );
        leading();
        let mut work = std::pin::pin!(work);
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                () = &mut shutdown => {
                    self.release().await;
                    return Ok(());
                }
                () = &mut work => {
                    self.release().await;
                    return Ok(());
                }
                () = tokio::time::sleep(self.config.retry_period) => {
                    if self.try_acquire_or_renew().await {
                        renewed = Instant::now();
                    } else if renewed.elapsed() > self.config.renew_deadline {
                        return Err(LeaderError::Lost {
                            namespace: self.config.namespace.clone(),
                            name: self.config.name.clone(),
                            deadline: self.config.renew_deadline,
                        });
                    }
                }
            }
        }
    }

    /// One attempt: whether this candidate holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let me = self.config.identity.clone();
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!("reading the lease failed: {e}");
                return false;
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.record(None, 0)),
            };
            return self.api.create(&PostParams::default(), &lease).await.is_ok();
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.holder != holder || o.renew != spec.renew_time);
        if changed {
            self.observed = Some(Observed {
                holder: holder.clone(),
                renew: spec.renew_time.clone(),
                at: Instant::now(),
            });
        }
        let held_by_other = holder.as_ref().is_some_and(|h| *h != me);
        let duration = spec.lease_duration_seconds.map_or(self.config.lease_duration, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or(0))
        });
        let expired = self.observed.as_ref().is_none_or(|o| o.at.elapsed() > duration);
        if held_by_other && !expired {
            return false;
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder.as_ref() != Some(&me));
        let acquired = (holder.as_ref() == Some(&me))
            .then(|| spec.acquire_time.clone())
            .flatten();
        lease.spec = Some(self.record(acquired, transitions));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!("taking or renewing the lease failed: {e}");
                false
            }
        }
    }

    /// The Lease's spec with this candidate holding it now.
    fn record(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds(self.config.lease_duration)),
            acquire_time: Some(acquired.unwrap_or_else(now)),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Gives the Lease up, as client-go's `ReleaseOnCancel`: no holder, a
    /// one-second duration.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("released the lease"),
            Err(e) => tracing::warn!("releasing the lease failed (it expires by itself): {e}"),
        }
    }
}
