//! The controller's metrics, in the style of Kubernetes' EndpointSlice
//! controller (`endpoint_slice_controller_*`), through `prometheus-client`,
//! plus the pods left out by reason.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `operation`: `create`, `update` or `delete`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The write.
    pub operation: &'static str,
}

/// `result`: `success`, `error` or `stale` (the cache had not yet seen the
/// controller's own writes: tried again shortly).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// How the sync ended.
    pub result: &'static str,
}

/// `reason` a selected pod has no endpoint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `no_network_status`, `bad_network_status`, `not_on_network` or
    /// `node_not_found`.
    pub reason: &'static str,
}

/// The controller's families.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    /// Slices created, updated and deleted.
    pub changes: Family<OperationLabels, Counter>,
    /// Endpoints added per Service sync.
    pub endpoints_added_per_sync: Histogram,
    /// Endpoints removed per Service sync.
    pub endpoints_removed_per_sync: Histogram,
    /// Slices written per Service sync.
    pub slices_changed_per_sync: Histogram,
    /// Service syncs by result.
    pub syncs: Family<ResultLabels, Counter>,
    /// The slices the handled Services have.
    pub slices: Gauge,
    /// Selected pods without an endpoint, by reason (a pod counts once per
    /// Service that selects it).
    pub pods_left_out: Family<ReasonLabels, Gauge>,
}

fn per_sync() -> Histogram {
    Histogram::new(exponential_buckets(2.0, 2.0, 15))
}

impl ControllerMetrics {
    /// Registers the families on `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = Self {
            changes: Family::default(),
            endpoints_added_per_sync: per_sync(),
            endpoints_removed_per_sync: per_sync(),
            slices_changed_per_sync: per_sync(),
            syncs: Family::default(),
            slices: Gauge::default(),
            pods_left_out: Family::default(),
        };
        r.register(
            "endpoint_slice_controller_changes",
            "Number of EndpointSlice changes",
            m.changes.clone(),
        );
        r.register(
            "endpoint_slice_controller_endpoints_added_per_sync",
            "Number of endpoints added on each Service sync",
            m.endpoints_added_per_sync.clone(),
        );
        r.register(
            "endpoint_slice_controller_endpoints_removed_per_sync",
            "Number of endpoints removed on each Service sync",
            m.endpoints_removed_per_sync.clone(),
        );
        r.register(
            "endpoint_slice_controller_endpointslices_changed_per_sync",
            "Number of EndpointSlices changed on each Service sync",
            m.slices_changed_per_sync.clone(),
        );
        r.register(
            "endpoint_slice_controller_syncs",
            "Number of EndpointSlice syncs",
            m.syncs.clone(),
        );
        r.register(
            "endpoint_slice_controller_num_endpoint_slices",
            "Number of EndpointSlices of the Services on secondary networks",
            m.slices.clone(),
        );
        r.register(
            "network_slices_pods_left_out",
            "Pods a Service selects that have no endpoint on its network, by reason",
            m.pods_left_out.clone(),
        );
        for operation in ["create", "update", "delete"] {
            let _ = m.changes.get_or_create(&OperationLabels { operation });
        }
        for result in ["success", "error", "stale"] {
            let _ = m.syncs.get_or_create(&ResultLabels { result });
        }
        m
    }
}

impl Default for ControllerMetrics {
    /// Families on no registry (for a controller whose metrics are not
    /// served).
    fn default() -> Self {
        Self::register(&mut Registry::default())
    }
}
