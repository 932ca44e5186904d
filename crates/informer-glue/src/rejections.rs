//! [`Rejections`]: objects a handler could not use, counted by reason and
//! logged, shared with whoever reports them (metrics).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::Mutex;

/// Rejected objects, by reason (`SliceError::reason`, `ServiceError::reason`).
#[derive(Debug, Default)]
pub struct Rejections {
    by_reason: Mutex<BTreeMap<&'static str, u64>>,
}

impl Rejections {
    /// Counts one rejection and logs why, naming the object.
    pub fn record(&self, reason: &'static str, why: &dyn Display) {
        *self
            .by_reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
        tracing::warn!("{why}");
    }

    /// Counts by reason.
    pub fn by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.by_reason.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// All rejections.
    pub fn total(&self) -> u64 {
        self.by_reason().values().sum()
    }
}
