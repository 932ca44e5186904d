//! The metric families of the sources (watches and handlers), registered
//! by this crate on the caller's registry: `proxyd_watch_restarts_total`,
//! `proxyd_relists_total` (by `resource`), `proxyd_rejected_objects_total`
//! and `proxyd_skipped_fields_total` (by `kind` and `reason`).
//!
//! Every series a caller asks for exists from the start, at zero, so an
//! alert on a failure rate sees data before the first failure.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Metric, Registry};

use crate::counters::{Counter, CounterFamily, Gauge};
use crate::rejections::{RejectionLabels, Rejections};
use crate::watch_runner::WatchMetrics;

/// The rejection reason of an object a watch could not decode (see
/// [`crate::lenient`]).
pub const UNDECODABLE: &str = "undecodable";

/// The `resource` label of the watch families.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// `endpointslices`, `services`, `pods` or `nodes`.
    pub resource: &'static str,
}

/// Registers `metric` on `registry` and hands it back (a family is a
/// handle: the clone registered and the one kept are the same series).
pub fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The families, registered once; cheap to clone (handles to the same
/// series).
#[derive(Clone, Debug)]
pub struct SourceMetrics {
    watch_restarts: Family<ResourceLabels, Counter>,
    watch_failing: Family<ResourceLabels, Gauge>,
    relists: Family<ResourceLabels, Counter>,
    rejected: CounterFamily<RejectionLabels>,
    skipped: CounterFamily<RejectionLabels>,
}

impl SourceMetrics {
    /// Registers the families on `registry`.
    pub fn register(r: &mut Registry) -> Self {
        Self {
            watch_restarts: registered(
                r,
                "proxyd_watch_restarts",
                "Watch errors, each followed by a restart with backoff",
                Family::default(),
            ),
            watch_failing: registered(
                r,
                "proxyd_watch_failing",
                "1 while the watch is failing (retried with backoff; /healthz is 503 after 2 x --sync-period), else 0",
                Family::default(),
            ),
            relists: registered(
                r,
                "proxyd_relists",
                "Complete lists after the first one (after 410 Gone, a broken watch or the periodic relist)",
                Family::default(),
            ),
            rejected: registered(
                r,
                "proxyd_rejected_objects",
                "Objects skipped whole as unusable, by kind and reason (see the warnings in the log)",
                CounterFamily::default(),
            ),
            skipped: registered(
                r,
                "proxyd_skipped_fields",
                "Parts of accepted objects skipped as unusable (an endpoint with an invalid address, a port without a number, ...), by kind and reason",
                CounterFamily::default(),
            ),
        }
    }

    /// The counters of the watch of `resource` (objects of `kind`; its
    /// series start at zero).
    pub fn watch(&self, resource: &'static str, kind: &'static str) -> Arc<WatchMetrics> {
        let labels = ResourceLabels { resource };
        let undecodable = RejectionLabels {
            kind,
            reason: UNDECODABLE,
        };
        Arc::new(WatchMetrics {
            resource,
            errors: self.watch_restarts.get_or_create(&labels).clone(),
            failing: self.watch_failing.get_or_create(&labels).clone(),
            relists: self.relists.get_or_create(&labels).clone(),
            undecodable: self.rejected.get_or_create(&undecodable),
            ..WatchMetrics::default()
        })
    }

    /// The rejection counters of `kind`, with a zero series for each of
    /// `reasons` (whole objects) and `skipped` (parts of objects).
    pub fn rejections(
        &self,
        kind: &'static str,
        reasons: &[&'static str],
        skipped: &[&'static str],
    ) -> Arc<Rejections> {
        for &reason in reasons {
            let _zero = self.rejected.get_or_create(&RejectionLabels { kind, reason });
        }
        for &reason in skipped {
            let _zero = self.skipped.get_or_create(&RejectionLabels { kind, reason });
        }
        Arc::new(Rejections::new(kind, self.rejected.clone(), self.skipped.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejections::Rejections;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn every_series_asked_for_is_exported_from_the_start() {
        let mut registry = Registry::default();
        let m = SourceMetrics::register(&mut registry);
        let slices = m.watch("endpointslices", "EndpointSlice");
        let rejected: Arc<Rejections> = m.rejections("EndpointSlice", &["fqdn"], &["invalid_address"]);
        let t = text(&registry);
        for line in [
            "proxyd_watch_restarts_total{resource=\"endpointslices\"} 0",
            "proxyd_watch_failing{resource=\"endpointslices\"} 0",
            "proxyd_relists_total{resource=\"endpointslices\"} 0",
            "proxyd_rejected_objects_total{kind=\"EndpointSlice\",reason=\"fqdn\"} 0",
            "proxyd_skipped_fields_total{kind=\"EndpointSlice\",reason=\"invalid_address\"} 0",
        ] {
            assert!(t.lines().any(|l| l == line), "{line} missing from\n{t}");
        }
        slices.errors.inc();
        rejected.skipped("invalid_address", &"endpoint slice ns/a: endpoints[0].addresses[0]");
        let t = text(&registry);
        assert!(
            t.contains("proxyd_watch_restarts_total{resource=\"endpointslices\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("proxyd_skipped_fields_total{kind=\"EndpointSlice\",reason=\"invalid_address\"} 1"),
            "{t}"
        );
    }
}
