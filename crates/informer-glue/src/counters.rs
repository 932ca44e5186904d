//! The counters a watch and a handler keep: plain atomics behind shared
//! handles, so a library user reads them without any metrics library.
//! With the `prometheus` feature they are also `prometheus-client`
//! metrics, which `source_metrics` registers.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A monotonic count; clones are handles to the same count.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Adds one and returns the count before.
    pub fn inc(&self) -> u64 {
        self.inc_by(1)
    }

    /// Adds `n` and returns the count before.
    pub fn inc_by(&self, n: u64) -> u64 {
        self.0.fetch_add(n, Ordering::Relaxed)
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down; clones are handles to the same value.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicI64>);

impl Gauge {
    /// Sets the value and returns the one before.
    pub fn set(&self, value: i64) -> i64 {
        self.0.swap(value, Ordering::Relaxed)
    }

    /// The value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters by label set, created at first use; clones are handles to the
/// same counters.
#[derive(Debug)]
pub struct CounterFamily<L>(Arc<RwLock<HashMap<L, Counter>>>);

impl<L> Clone for CounterFamily<L> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<L> Default for CounterFamily<L> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<L: Clone + Hash + Eq> CounterFamily<L> {
    /// The counter of `labels`, created at zero if new.
    pub fn get_or_create(&self, labels: &L) -> Counter {
        if let Some(counter) = read(&self.0).get(labels) {
            return counter.clone();
        }
        let mut all = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.entry(labels.clone()).or_default().clone()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(feature = "prometheus")]
mod exported {
    use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
    use prometheus_client::metrics::{MetricType, TypedMetric};

    use super::{Counter, CounterFamily, Gauge, read};

    impl TypedMetric for Counter {
        const TYPE: MetricType = MetricType::Counter;
    }

    impl EncodeMetric for Counter {
        fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
            encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
        }

        fn metric_type(&self) -> MetricType {
            Self::TYPE
        }
    }

    impl TypedMetric for Gauge {
        const TYPE: MetricType = MetricType::Gauge;
    }

    impl EncodeMetric for Gauge {
        fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
            encoder.encode_gauge(&self.get())
        }

        fn metric_type(&self) -> MetricType {
            Self::TYPE
        }
    }

    impl<L> TypedMetric for CounterFamily<L> {
        const TYPE: MetricType = MetricType::Counter;
    }

    impl<L: EncodeLabelSet + std::fmt::Debug + Send + Sync> EncodeMetric for CounterFamily<L> {
        fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
            for (labels, counter) in read(&self.0).iter() {
                counter.encode(encoder.encode_family(labels)?)?;
            }
            Ok(())
        }

        fn metric_type(&self) -> MetricType {
            Self::TYPE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_their_count() {
        let c = Counter::default();
        let handle = c.clone();
        assert_eq!(c.inc(), 0);
        assert_eq!(handle.get(), 1);
        let g = Gauge::default();
        g.clone().set(7);
        assert_eq!(g.get(), 7);
        let family = CounterFamily::<&str>::default();
        family.clone().get_or_create(&"a").inc();
        assert_eq!(family.get_or_create(&"a").get(), 1);
        assert_eq!(family.get_or_create(&"b").get(), 0);
    }
}
