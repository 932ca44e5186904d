//! One IP family's proxier, in either mode, as the sync loop drives it:
//! node mode's ([`Proxier`]: this node's table) and multus mode's
//! ([`MultusProxier`]: each selected pod's table) implement
//! [`FamilyProxier`], so that one loop ([`super::sync::SyncLoop`]) syncs
//! both, marks `/healthz`, joins the failures and publishes the
//! health-check ports.

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime};

use multus_dataplane::MultusProxier;
use nft_dataplane::{DataplaneConfig, SyncKind};
use node_proxy::kube_proxy_metrics::SyncObservation;
use node_proxy::proxier::{HealthChecks, Proxier};
use node_proxy::sync_runner::{Outcome, SyncReason};
use slice_model::{IpFamily, ServiceName};

use crate::metrics_registry::Metrics;

/// One IP family's proxier.
pub trait FamilyProxier: Send {
    /// The family.
    fn family(&self) -> IpFamily;

    /// One sync, its log line and its metrics: done, or incomplete when
    /// something is left to retry (a pod not programmed yet); the error
    /// fails this family's sync (the next one rewrites its table whole).
    fn sync(&mut self, reason: SyncReason, metrics: &Metrics) -> Result<Outcome, String>;

    /// Takes the node's settings (see `effective`); returns the settings
    /// it had. Pods' tables do not follow the node's.
    fn follow_node(&mut self, _wanted: &DataplaneConfig) -> Option<DataplaneConfig> {
        None
    }

    /// The health-check ports of its services and their local endpoint
    /// counts (node mode).
    fn health_checks(&self) -> Option<&HealthChecks> {
        None
    }
}

/// The periodic sync also re-asserts the fixed skeleton.
fn sync_kind(reason: SyncReason) -> SyncKind {
    if reason == SyncReason::Periodic {
        SyncKind::Periodic
    } else {
        SyncKind::Changes
    }
}

impl FamilyProxier for Proxier {
    fn family(&self) -> IpFamily {
        self.family
    }

    fn sync(&mut self, reason: SyncReason, metrics: &Metrics) -> Result<Outcome, String> {
        let started = Instant::now();
        let result = Proxier::sync(self, sync_kind(reason));
        let (eps, svcs) = self.pending();
        metrics.sync.set_pending(self.family, eps, svcs);
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let failed = SyncObservation {
                    failed: true,
                    ..SyncObservation::default()
                };
                metrics.sync.observe_sync(self.family, &failed, SystemTime::now());
                return Err(e.to_string());
            }
        };
        let now = SystemTime::now();
        metrics.sync.observe_sync(self.family, &out.observation, now);
        for e in &out.conntrack_errors {
            tracing::warn!(family = %self.family, "conntrack cleanup: {e}");
        }
        tracing::info!(
            family = %self.family,
            first = reason == SyncReason::Initial,
            reason = %reason,
            service_ports = self.engine.services.len(),
            service_ports_with_endpoints = self.engine.endpoints.len(),
            changed_services = out.changed.len(),
            services = %named(&out.changed),
            full = out.report.full,
            services_written = out.report.services_written,
            nft_bytes = out.report.script_bytes,
            conntrack_flows = out.conntrack_flows,
            conntrack_deleted = out.observation.conntrack_deleted,
            render_us = out.report.render.as_micros() as u64,
            apply_us = out.report.apply.as_micros() as u64,
            transactions = out.report.transactions,
            longest_tx_us = out.report.longest_apply.as_micros() as u64,
            took_us = started.elapsed().as_micros() as u64,
            programming_max_us = longest_programming(&out.observation.trigger_times, now),
            "synced"
        );
        Ok(Outcome::Done)
    }

    fn follow_node(&mut self, wanted: &DataplaneConfig) -> Option<DataplaneConfig> {
        let mut before = None;
        self.reconfigure(|c| {
            let family = c.family;
            before = Some(std::mem::replace(
                c,
                DataplaneConfig {
                    family,
                    ..wanted.clone()
                },
            ));
        });
        before
    }

    fn health_checks(&self) -> Option<&HealthChecks> {
        Some(Proxier::health_checks(self))
    }
}

/// A pod that fails is logged and counted; it never fails the sync of the
/// others (nor health). Pods left pending make the sync incomplete.
impl FamilyProxier for MultusProxier {
    fn family(&self) -> IpFamily {
        self.family
    }

    fn sync(&mut self, reason: SyncReason, metrics: &Metrics) -> Result<Outcome, String> {
        let started = Instant::now();
        let out = MultusProxier::sync(self, sync_kind(reason));
        let now = SystemTime::now();
        if let Some(m) = &metrics.multus {
            m.observe(self.family, &out);
        }
        // A change programmed in several pods is one change.
        let mut programmed = out.trigger_times.clone();
        programmed.sort_unstable();
        programmed.dedup();
        metrics.sync.observe_programming(self.family, &programmed, now);
        tracing::info!(
            family = %self.family,
            reason = %reason,
            changed_services = out.changed_services,
            programmed_pods = out.programmed_pods,
            pods_written = out.transactions,
            route_changes = out.route_changes,
            conntrack_deleted = out.conntrack_deleted,
            failed_pods = out.failures.len(),
            pending_pods = out.pending.len(),
            pending = %pending_text(&out.pending),
            took_us = started.elapsed().as_micros() as u64,
            programming_max_us = longest_programming(&programmed, now),
            "synced"
        );
        Ok(if out.pending.is_empty() {
            Outcome::Done
        } else {
            Outcome::Incomplete
        })
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

fn longest_programming(trigger_times: &[SystemTime], now: SystemTime) -> u64 {
    trigger_times
        .iter()
        .filter_map(|t| now.duration_since(*t).ok())
        .max()
        .map_or(0, |d| d.as_micros() as u64)
}

/// How many pending pods a sync's log line names.
const NAMED_PODS: usize = 5;

/// The pending pods, named (with why) when there are few.
fn pending_text(pending: &[(slice_model::PodName, multus_dataplane::PodProblem)]) -> String {
    if pending.len() > NAMED_PODS {
        return format!("{} pods", pending.len());
    }
    let named: Vec<String> = pending.iter().map(|(pod, why)| format!("{pod} ({why})")).collect();
    named.join("; ")
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
        use multus_dataplane::PodProblem;
        use slice_model::PodName;
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
