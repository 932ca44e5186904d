//! Services whose rules the kernel refuses. When the kernel refuses a
//! transaction, its services are checked by halves in a scratch table
//! ([`CHECK_TABLE`], never committed) until the ones it refuses are found;
//! they are left out of the table and every other service is programmed
//! in the same sync. A refused service is checked again, alone and in the
//! scratch table, with backoff or as soon as it changes, and comes back
//! once the kernel accepts it.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use endpoints_map::{EndpointsMap, ServicesMap};
use slice_model::ServiceName;

use crate::desired::plan_service;
use crate::fragment;
use crate::names::CHECK_TABLE;
use crate::{Dataplane, DataplaneError};

use super::NftSyncer;
use super::full::full_transaction;
use super::programmed::Programmed;

/// How long after a refusal a service is first checked again; each
/// refusal after that doubles it, up to [`LAST_RECHECK`].
pub const FIRST_RECHECK: Duration = Duration::from_secs(1);

/// The longest wait between two checks of a refused service that does
/// not change.
pub const LAST_RECHECK: Duration = Duration::from_secs(60);

/// The most services one check holds.
pub const CHECK_GROUP: usize = 1_000;

/// A service whose rules the kernel refused: it is not in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What the kernel said, naming the message it refused (and so the
    /// chain or set, and the service's port).
    pub reason: String,
    /// When it was first refused.
    pub since: Instant,
    /// How many checks since have been refused too.
    pub refused_again: u32,
    /// When it is checked again (sooner if it changes).
    pub next_check: Instant,
}

impl Refusal {
    fn wait(refused_again: u32) -> Duration {
        FIRST_RECHECK
            .saturating_mul(1u32.checked_shl(refused_again).unwrap_or(u32::MAX))
            .min(LAST_RECHECK)
    }
}

/// What narrowing a refusal down found.
pub(super) enum Narrowed {
    /// These services are refused, each with the kernel's reason.
    Refused(Vec<(ServiceName, String)>),
    /// No service alone is to blame: the dataplane cannot check, or it
    /// refuses the fixed chains without any service, or only the
    /// services together.
    Unattributed,
}

impl<D: Dataplane> NftSyncer<D> {
    /// The services whose rules the kernel refuses, left out of the table.
    pub fn refused(&self) -> &BTreeMap<ServiceName, Refusal> {
        &self.refused
    }

    /// Whether a refused service is due for a check: the next sync checks
    /// it, whatever else it owes.
    pub fn recheck_due(&self) -> bool {
        let now = Instant::now();
        self.refused.values().any(|r| r.next_check <= now)
    }

    /// Whether the kernel accepts the fixed chains with the rules of
    /// `names`, asked in the scratch table without committing anything;
    /// `None` when the dataplane cannot ask.
    pub fn check_services(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        names: &[ServiceName],
    ) -> Option<Result<(), DataplaneError>> {
        let mut view = Programmed::default();
        for name in names {
            let targets = plan_service(name, services, endpoints, &self.config);
            view.replace(name, |claim, old| fragment::build(&targets, &self.config, claim, old));
        }
        let mut tx = full_transaction(&self.config, &view);
        tx.table = CHECK_TABLE;
        self.dataplane.check(&tx)
    }

    /// Of `suspects`, the services the kernel refuses: checked in groups
    /// of at most [`CHECK_GROUP`] (a check holds the nftables lock as long
    /// as a transaction of its size would), and a refused group by halves,
    /// down to single services.
    pub(super) fn narrow(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        suspects: Vec<ServiceName>,
    ) -> Narrowed {
        if suspects.is_empty() || !matches!(self.check_services(services, endpoints, &[]), Some(Ok(()))) {
            return Narrowed::Unattributed;
        }
        let started = Instant::now();
        let mut found = Vec::new();
        let mut groups: Vec<Vec<ServiceName>> = suspects.chunks(CHECK_GROUP).rev().map(<[_]>::to_vec).collect();
        let mut checks = 1usize;
        while let Some(mut group) = groups.pop() {
            checks += 1;
            match self.check_services(services, endpoints, &group) {
                None => return Narrowed::Unattributed,
                Some(Ok(())) => {}
                Some(Err(e)) if group.len() == 1 => found.extend(group.pop().map(|name| (name, e.to_string()))),
                Some(Err(_)) => {
                    let second = group.split_off(group.len() / 2);
                    groups.push(second);
                    groups.push(group);
                }
            }
        }
        tracing::debug!(
            checks,
            refused = found.len(),
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "refused transaction narrowed down"
        );
        if found.is_empty() {
            Narrowed::Unattributed
        } else {
            Narrowed::Refused(found)
        }
    }

    /// Records `found` as refused, saying so for each new refusal or new
    /// reason.
    pub(super) fn refuse(&mut self, found: Vec<(ServiceName, String)>) {
        let now = Instant::now();
        let family = self.config.family;
        let table = self.config.table();
        for (name, reason) in found {
            match self.refused.entry(name) {
                Entry::Vacant(v) => {
                    tracing::warn!(
                        service = %v.key(),
                        ip_family = %family,
                        table,
                        "the kernel refuses this service's rules ({reason}): it is left out of the table, \
                         every other service is programmed, and it is checked again in {:?} and whenever it changes",
                        FIRST_RECHECK
                    );
                    v.insert(Refusal {
                        reason,
                        since: now,
                        refused_again: 0,
                        next_check: now + FIRST_RECHECK,
                    });
                }
                Entry::Occupied(mut o) => {
                    let r = o.get_mut();
                    r.refused_again = r.refused_again.saturating_add(1);
                    let wait = Refusal::wait(r.refused_again);
                    r.next_check = now + wait;
                    if r.reason != reason {
                        tracing::warn!(service = %o.key(), ip_family = %family, table, "the kernel still refuses this service's rules, now for another reason ({reason}); checked again in {wait:?}");
                        o.get_mut().reason = reason;
                    } else {
                        tracing::debug!(service = %o.key(), ip_family = %family, "still refused; checked again in {wait:?}");
                    }
                }
            }
        }
    }

    /// Checks the refused services that are due (their wait is over, or
    /// they `changed`) and returns those the kernel accepts now: they are
    /// no longer refused, and the sync writes them. Services that are gone
    /// are forgotten.
    pub(super) fn recheck_refused(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
    ) -> Vec<ServiceName> {
        self.refused.retain(|name, _| services.service(name).is_some());
        let now = Instant::now();
        let due: Vec<ServiceName> = self
            .refused
            .iter()
            .filter(|(name, r)| r.next_check <= now || changed.contains(*name))
            .map(|(name, _)| name.clone())
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        let still = match self.narrow(services, endpoints, due.clone()) {
            Narrowed::Refused(still) => still,
            Narrowed::Unattributed => Vec::new(),
        };
        let refused_again: BTreeSet<&ServiceName> = still.iter().map(|(n, _)| n).collect();
        let accepted: Vec<ServiceName> = due.into_iter().filter(|n| !refused_again.contains(n)).collect();
        for name in &accepted {
            if let Some(r) = self.refused.remove(name) {
                tracing::info!(
                    service = %name,
                    ip_family = %self.config.family,
                    "the kernel accepts this service's rules now (refused for {:?}): it is programmed",
                    r.since.elapsed()
                );
            }
        }
        self.refuse(still);
        accepted
    }

    /// Makes every refused service due for a check at the next sync (the
    /// configuration changed: what was refused may be written differently
    /// now).
    pub(super) fn recheck_refused_soon(&mut self) {
        let now = Instant::now();
        for r in self.refused.values_mut() {
            r.next_check = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_the_last() {
        assert_eq!(Refusal::wait(0), FIRST_RECHECK);
        assert_eq!(Refusal::wait(1), 2 * FIRST_RECHECK);
        assert_eq!(Refusal::wait(5), 32 * FIRST_RECHECK);
        assert_eq!(Refusal::wait(6), LAST_RECHECK);
        assert_eq!(Refusal::wait(u32::MAX), LAST_RECHECK);
    }
}
