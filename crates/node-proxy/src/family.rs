//! One IP family's proxier, in either mode, and the one report of what a
//! sync of it did.
//!
//! Node mode's proxier ([`crate::proxier::Proxier`]: this node's table)
//! and multus mode's (each selected pod's table, in `multus-dataplane`)
//! implement [`FamilyProxier`] and return [`FamilySync`], so that the
//! daemon has one sync loop, one set of sync metrics and one log line for
//! both.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use endpoints_map::Engine;
use linux_dataplane::{ConntrackError, Netns};
use nft_dataplane::{DataplaneConfig, DataplaneError, SyncKind, SyncReport};
use slice_model::{IpFamily, PodName, ServiceName};

use crate::schedule::SyncReason;

/// Per service: its health-check node port and local ready endpoints.
pub type HealthChecks = std::collections::BTreeMap<ServiceName, (u16, usize)>;

/// One IP family's proxier.
pub trait FamilyProxier: Send {
    /// Its engine (the family's services and endpoints).
    fn engine(&self) -> &Engine;

    /// The family.
    fn family(&self) -> IpFamily {
        self.engine().family()
    }

    /// One sync. The error fails the whole sync (the next one rewrites the
    /// table whole); a target pod that fails does not fail it (see
    /// [`PodsSync::pending`]).
    ///
    /// `None`: a sync of changes that found nothing owed once it took in
    /// what is pending (the other family's change, say, as kube-proxy's
    /// per-family proxiers see it): nothing was written or is reported.
    fn sync(&mut self, kind: SyncKind) -> Result<Option<FamilySync>, DataplaneError>;

    /// Reads what it will rewrite before its first sync, while the
    /// initial lists arrive (node mode: the table in place).
    fn read_ahead(&mut self) {}

    /// Takes in what the engine has received so far, without writing, so
    /// that the first sync after the initial lists only takes in the rest
    /// (node mode; a sync takes in everything pending either way).
    fn absorb(&mut self) {}

    /// Takes the node's settings; returns the settings it had. Pods'
    /// tables do not follow the node's.
    fn follow_node(&mut self, _wanted: &DataplaneConfig) -> Option<DataplaneConfig> {
        None
    }

    /// The health-check ports of its services and their local endpoint
    /// counts (node mode).
    fn health_checks(&self) -> Option<&HealthChecks> {
        None
    }

    /// Another process changed the ruleset: the next sync rewrites the
    /// whole table, trusting nothing in it (node mode).
    fn repair(&mut self) {}
}

/// What one successful sync of one family did, in either mode: node mode
/// writes one table (the node's), multus mode one per target pod.
#[derive(Debug, Default)]
pub struct FamilySync {
    /// The whole sync took this long.
    pub duration: Duration,
    /// Services that changed (written, unless a full sync wrote all).
    pub changed: BTreeSet<ServiceName>,
    /// Endpoint changes applied, counted in services (with those a failed
    /// sync left).
    pub endpoint_changes: u64,
    /// Service changes applied, counted in services.
    pub service_changes: u64,
    /// What was written: the node's table's report, or the pods' summed
    /// (full when any pod's table was replaced whole; the longest
    /// transaction of any).
    pub written: SyncReport,
    /// `last-change-trigger-time`s of the changes now programmed, each
    /// once (however many pods it reached).
    pub trigger_times: Vec<SystemTime>,
    /// Service ports with an internal Local policy and no local endpoint
    /// (node mode).
    pub no_local_internal: u64,
    /// The same for the external policy.
    pub no_local_external: u64,
    /// Stale UDP conntrack flows cleaned up.
    pub conntrack_flows: usize,
    /// Conntrack entries deleted.
    pub conntrack_deleted: u64,
    /// How long the conntrack cleanup took.
    pub conntrack_duration: Duration,
    /// Conntrack deletions that failed in the node's namespace (never
    /// retried: the entries they aimed at expire on their own); multus
    /// mode says each where it happens, with its pod.
    pub conntrack_errors: Vec<ConntrackError>,
    /// Multus mode: the target pods (`None` in node mode).
    pub pods: Option<PodsSync>,
}

impl FamilySync {
    /// Multus mode's part (empty in node mode).
    pub fn pods(&self) -> &PodsSync {
        static NONE: PodsSync = PodsSync {
            programmed: 0,
            written: 0,
            route_changes: 0,
            runtime_errors: 0,
            failures: Vec::new(),
            pending: Vec::new(),
        };
        self.pods.as_ref().unwrap_or(&NONE)
    }

    /// Whether something is left to retry (a pod not programmed yet).
    pub fn incomplete(&self) -> bool {
        self.pods.as_ref().is_some_and(|p| !p.pending.is_empty())
    }

    /// The sync's log line: what changed and what was written, and in
    /// multus mode the pods.
    pub fn log(&self, engine: &Engine, reason: SyncReason, now: SystemTime) {
        let w = &self.written;
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        tracing::info!(
            family = %engine.family(),
            first = reason == SyncReason::Initial,
            reason = %reason,
            service_ports = engine.services.len(),
            service_ports_with_endpoints = engine.endpoints.len(),
            changed_services = self.changed.len(),
            services = %named(&self.changed),
            full = w.full,
            services_written = w.services_written,
            nft_bytes = w.script_bytes,
            conntrack_flows = self.conntrack_flows,
            conntrack_deleted = self.conntrack_deleted,
            render_us = us(w.render),
            apply_us = us(w.apply),
            transactions = w.transactions,
            longest_tx_us = us(w.longest_apply),
            refused_transactions = w.refused_transactions,
            refused_services = w.refused_services,
            checking_us = us(w.checking),
            took_us = us(self.duration),
            programming_max_us = us(longest_programming(&self.trigger_times, now)),
            pods = %self.pods.as_ref().map(PodsSync::text).unwrap_or_default(),
            "synced"
        );
    }
}

/// At most this many changed services are named in a sync's log line.
const NAMED_SERVICES: usize = 5;

/// The changed services, named when there are few.
fn named(changed: &BTreeSet<ServiceName>) -> String {
    if changed.len() > NAMED_SERVICES {
        return format!("{} services", changed.len());
    }
    let names: Vec<String> = changed.iter().map(ToString::to_string).collect();
    names.join(" ")
}

fn longest_programming(trigger_times: &[SystemTime], now: SystemTime) -> Duration {
    trigger_times
        .iter()
        .filter_map(|t| now.duration_since(*t).ok())
        .max()
        .unwrap_or_default()
}

/// How many pending pods a sync's log line names.
const NAMED_PODS: usize = 5;

/// The pending pods, named (with why) when there are few.
fn pending_text(pending: &[(PodName, PodProblem)]) -> String {
    if pending.len() > NAMED_PODS {
        return format!("{} pods", pending.len());
    }
    let named: Vec<String> = pending.iter().map(|(pod, why)| format!("{pod} ({why})")).collect();
    named.join("; ")
}

/// Multus mode's part of a sync: the target pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodsSync {
    /// Pods with a table after the sync.
    pub programmed: usize,
    /// Pods whose table was written.
    pub written: usize,
    /// Pods whose routes changed.
    pub route_changes: usize,
    /// Pods whose namespace the runtime could not be asked about.
    pub runtime_errors: usize,
    /// `(pod, why)` for each pod that could not be brought up to date on
    /// this sync.
    pub failures: Vec<(PodName, PodProblem)>,
    /// `(pod, why)` for each served pod that is not programmed up to date
    /// after this sync: retried until it is, or is gone.
    pub pending: Vec<(PodName, PodProblem)>,
}

impl PodsSync {
    /// The pods, in a few words, for the sync's log line.
    fn text(&self) -> String {
        let mut text = format!(
            "{} programmed, {} written, {} route changes",
            self.programmed, self.written, self.route_changes
        );
        if !self.failures.is_empty() {
            text += &format!(", {} failed", self.failures.len());
        }
        if !self.pending.is_empty() {
            text += &format!(", {} pending: {}", self.pending.len(), pending_text(&self.pending));
        }
        text
    }
}

/// Why a served pod is not programmed up to date.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PodProblem {
    /// Its namespace could not be found: the resolver's reason.
    #[error("{0}")]
    NoNamespace(String),
    /// The namespace the resolver named is gone.
    #[error("the pod's network namespace is gone ({0})")]
    NamespaceGone(Netns),
    /// The namespace went away while its table was written (so not nft's
    /// failure: there was nothing to run it in).
    #[error("the pod's network namespace is gone")]
    NamespaceGoneDuringWrite,
    /// The table could not be written: the dataplane's error.
    #[error("table not written: {0}")]
    TableNotWritten(String),
    /// The routes could not be set: the host's error.
    #[error("routes not set: {0}")]
    RoutesNotSet(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_changed_services_are_named() {
        let few: BTreeSet<ServiceName> = [ServiceName::new("ns", "a"), ServiceName::new("ns", "b")].into();
        assert_eq!(named(&few), "ns/a ns/b");
        let many: BTreeSet<ServiceName> = (0..9)
            .map(|i| ServiceName::new("ns", format!("s{i}").as_str()))
            .collect();
        assert_eq!(named(&many), "9 services");
    }

    #[test]
    fn few_pending_pods_are_named_with_why() {
        let few = [(
            PodName::new("apps", "a"),
            PodProblem::NoNamespace("no ready sandbox".into()),
        )];
        assert_eq!(pending_text(&few), "apps/a (no ready sandbox)");
        let many: Vec<(PodName, PodProblem)> = (0..6)
            .map(|i| {
                (
                    PodName::new("apps", format!("p{i}")),
                    PodProblem::NamespaceGoneDuringWrite,
                )
            })
            .collect();
        assert_eq!(pending_text(&many), "6 pods");
    }
}
