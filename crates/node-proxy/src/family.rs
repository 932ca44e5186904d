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
    fn sync(&mut self, kind: SyncKind) -> Result<FamilySync, DataplaneError>;

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
    /// Adds one written table's report (a pod's) to the sum.
    pub fn add_written(&mut self, r: &SyncReport) {
        let w = &mut self.written;
        w.full |= r.full;
        w.services_written += r.services_written;
        w.script_bytes += r.script_bytes;
        w.elements += r.elements;
        w.render += r.render;
        w.apply += r.apply;
        w.transactions += r.transactions;
        w.longest_apply = w.longest_apply.max(r.longest_apply);
        w.refused_transactions += r.refused_transactions;
        w.refused_services += r.refused_services;
        w.checking += r.checking;
    }

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
