//! One family's sync, in either mode, as the sync loop runs it: the
//! proxier ([`FamilyProxier`]: node mode's or multus mode's) syncs, and its
//! one report ([`FamilySync`]) becomes the metrics and the log line here.

use std::collections::BTreeSet;
use std::time::SystemTime;

use nft_dataplane::SyncKind;
use node_proxy::family::{FamilyProxier, FamilySync, PodProblem};
use node_proxy::sync_runner::{Outcome, SyncReason};
use slice_model::{PodName, ServiceName};

use crate::metrics_registry::Metrics;

/// The periodic sync also re-asserts the fixed skeleton.
fn sync_kind(reason: SyncReason) -> SyncKind {
    if reason == SyncReason::Periodic {
        SyncKind::Periodic
    } else {
        SyncKind::Changes
    }
}

/// What one family's sync did, as the sync loop needs it.
pub struct Synced {
    /// Done, or incomplete when something is left to retry (a pod not
    /// programmed yet).
    pub outcome: Outcome,
    /// It wrote the whole table.
    pub full: bool,
}

/// One sync of `proxier`, its metrics and its log line; the error fails
/// this family's sync (the next one rewrites its table whole).
pub fn sync(proxier: &mut dyn FamilyProxier, reason: SyncReason, metrics: &Metrics) -> Result<Synced, String> {
    let family = proxier.family();
    let result = proxier.sync(sync_kind(reason));
    let (eps, svcs) = proxier.engine().pending();
    metrics.sync.set_pending(family, eps, svcs);
    let out = result.map_err(|e| {
        metrics.sync.observe_failed(family);
        e.to_string()
    })?;
    let now = SystemTime::now();
    metrics.sync.observe_sync(family, &out, now);
    if let (Some(m), Some(pods)) = (&metrics.multus, &out.pods) {
        m.observe(family, pods);
    }
    for e in &out.conntrack_errors {
        tracing::warn!(family = %family, "conntrack cleanup: {e}");
    }
    log(proxier, reason, &out, now);
    Ok(Synced {
        outcome: if out.incomplete() {
            Outcome::Incomplete
        } else {
            Outcome::Done
        },
        full: out.written.full,
    })
}

/// The sync's line: what changed and what was written, and in multus mode
/// the pods.
fn log(proxier: &dyn FamilyProxier, reason: SyncReason, out: &FamilySync, now: SystemTime) {
    let engine = proxier.engine();
    let w = &out.written;
    tracing::info!(
        family = %proxier.family(),
        first = reason == SyncReason::Initial,
        reason = %reason,
        service_ports = engine.services.len(),
        service_ports_with_endpoints = engine.endpoints.len(),
        changed_services = out.changed.len(),
        services = %named(&out.changed),
        full = w.full,
        services_written = w.services_written,
        nft_bytes = w.script_bytes,
        conntrack_flows = out.conntrack_flows,
        conntrack_deleted = out.conntrack_deleted,
        render_us = w.render.as_micros() as u64,
        apply_us = w.apply.as_micros() as u64,
        transactions = w.transactions,
        longest_tx_us = w.longest_apply.as_micros() as u64,
        refused_transactions = w.refused_transactions,
        refused_services = w.refused_services,
        checking_us = w.checking.as_micros() as u64,
        took_us = out.duration.as_micros() as u64,
        programming_max_us = longest_programming(&out.trigger_times, now),
        pods = %pods_text(out),
        "synced"
    );
}

/// Multus mode's pods, in a few words (nothing in node mode).
fn pods_text(out: &FamilySync) -> String {
    let Some(p) = &out.pods else {
        return String::new();
    };
    let mut text = format!(
        "{} programmed, {} written, {} route changes",
        p.programmed, p.written, p.route_changes
    );
    if !p.failures.is_empty() {
        text += &format!(", {} failed", p.failures.len());
    }
    if !p.pending.is_empty() {
        text += &format!(", {} pending: {}", p.pending.len(), pending_text(&p.pending));
    }
    text
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
fn pending_text(pending: &[(PodName, PodProblem)]) -> String {
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
