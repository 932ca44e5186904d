//! [`Rejections`]: objects (and parts of objects) a handler could not use,
//! logged and counted by reason.

use std::fmt::Display;

use crate::counters::CounterFamily;

/// The labels of the rejection families.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
#[cfg_attr(feature = "prometheus", derive(prometheus_client::encoding::EncodeLabelSet))]
pub struct RejectionLabels {
    /// The object's kind: `Service`, `EndpointSlice`.
    pub kind: &'static str,
    /// Why, e.g. `missing_service_name` or `invalid_address`.
    pub reason: &'static str,
}

/// Rejected objects and skipped parts of one kind, by reason
/// (`SliceError::reason`, `ServiceError::reason`, `WarningKind::reason`).
/// A default value counts into families nobody registered (tests, one-shot
/// commands, library users); with the `prometheus` feature,
/// `source_metrics::SourceMetrics::rejections` gives one that is exported.
#[derive(Debug, Default)]
pub struct Rejections {
    kind: &'static str,
    rejected: CounterFamily<RejectionLabels>,
    skipped: CounterFamily<RejectionLabels>,
}

impl Rejections {
    /// Counts `kind`'s rejections into these families.
    pub fn new(
        kind: &'static str,
        rejected: CounterFamily<RejectionLabels>,
        skipped: CounterFamily<RejectionLabels>,
    ) -> Self {
        Self {
            kind,
            rejected,
            skipped,
        }
    }

    fn labels(&self, reason: &'static str) -> RejectionLabels {
        RejectionLabels {
            kind: self.kind,
            reason,
        }
    }

    /// Counts one rejected object and logs why, naming the object.
    pub fn record(&self, reason: &'static str, why: &dyn Display) {
        self.rejected.get_or_create(&self.labels(reason)).inc();
        tracing::warn!("{why}");
    }

    /// Counts one skipped part of an accepted object and logs why, naming
    /// the object and the field.
    pub fn skipped(&self, reason: &'static str, why: &dyn Display) {
        self.skipped.get_or_create(&self.labels(reason)).inc();
        tracing::warn!("{why}");
    }

    /// Rejected objects for `reason` so far.
    pub fn rejected_for(&self, reason: &'static str) -> u64 {
        self.rejected.get_or_create(&self.labels(reason)).get()
    }

    /// Skipped parts for `reason` so far.
    pub fn skipped_for(&self, reason: &'static str) -> u64 {
        self.skipped.get_or_create(&self.labels(reason)).get()
    }
}
