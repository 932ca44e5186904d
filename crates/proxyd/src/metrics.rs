//! Prometheus metrics in the text exposition format, with kube-proxy's
//! names, labels and buckets (so existing dashboards and alerts work), plus
//! proxyd's own (`proxyd_…`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use slice_model::IpFamily;

/// A histogram with fixed upper bounds.
#[derive(Clone, Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// kube-proxy's sync duration buckets: 1 ms doubling 15 times.
const SYNC_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384,
];

/// kube-proxy's network programming buckets: 0.25 s, 0.5 s, 1-59 s, 60-115 s
/// by 5, 120-300 s by 30.
const PROGRAMMING_BUCKETS: &[f64] = &[
    0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0,
    20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0, 38.0,
    39.0, 40.0, 41.0, 42.0, 43.0, 44.0, 45.0, 46.0, 47.0, 48.0, 49.0, 50.0, 51.0, 52.0, 53.0, 54.0, 55.0, 56.0, 57.0,
    58.0, 59.0, 60.0, 65.0, 70.0, 75.0, 80.0, 85.0, 90.0, 95.0, 100.0, 105.0, 110.0, 115.0, 120.0, 150.0, 180.0, 210.0,
    240.0, 270.0, 300.0,
];

/// The label value kube-proxy uses for a family.
fn family_label(f: IpFamily) -> &'static str {
    match f {
        IpFamily::V4 => "IPv4",
        IpFamily::V6 => "IPv6",
    }
}

#[derive(Debug, Default)]
struct Inner {
    histograms: BTreeMap<(&'static str, String), Histogram>,
    counters: BTreeMap<(&'static str, String), f64>,
    gauges: BTreeMap<(&'static str, String), f64>,
}

/// What one sync of one family did, for the metrics.
#[derive(Clone, Debug, Default)]
pub struct SyncObservation {
    /// The whole sync took this long.
    pub duration: Duration,
    /// It was a full sync.
    pub full: bool,
    /// It failed (nft rejected the transaction).
    pub failed: bool,
    /// Endpoint and service changes it applied.
    pub endpoint_changes: u64,
    /// Service changes it applied.
    pub service_changes: u64,
    /// `last-change-trigger-time`s of the slice changes it applied.
    pub trigger_times: Vec<SystemTime>,
    /// Service ports with internal/external Local policy and no local
    /// endpoint.
    pub no_local_internal: u64,
    /// See `no_local_internal`.
    pub no_local_external: u64,
    /// Conntrack entries deleted after it.
    pub conntrack_deleted: u64,
    /// How long the conntrack cleanup took.
    pub conntrack_duration: Duration,
}

/// The registry; cheap to update from the sync loop and to render for a
/// scrape.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records one sync of `family`.
    pub fn observe_sync(&self, family: IpFamily, o: &SyncObservation, now: SystemTime) {
        let fam = format!("ip_family=\"{}\"", family_label(family));
        self.with(|m| {
            let mut hist = |name: &'static str, bounds: &'static [f64], v: f64| {
                m.histograms
                    .entry((name, fam.clone()))
                    .or_insert_with(|| Histogram::new(bounds))
                    .observe(v);
            };
            let secs = o.duration.as_secs_f64();
            if o.failed {
                *m.counters
                    .entry(("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", fam.clone()))
                    .or_default() += 1.0;
                return;
            }
            hist("kubeproxy_sync_proxy_rules_duration_seconds", SYNC_BUCKETS, secs);
            let kind = if o.full {
                "kubeproxy_sync_full_proxy_rules_duration_seconds"
            } else {
                "kubeproxy_sync_partial_proxy_rules_duration_seconds"
            };
            hist(kind, SYNC_BUCKETS, secs);
            for t in &o.trigger_times {
                // Clock skew between the controller and this node can make
                // the difference negative; such samples are meaningless.
                if let Ok(d) = now.duration_since(*t) {
                    hist(
                        "kubeproxy_network_programming_duration_seconds",
                        PROGRAMMING_BUCKETS,
                        d.as_secs_f64(),
                    );
                }
            }
            if o.conntrack_deleted > 0 || o.conntrack_duration > Duration::ZERO {
                hist(
                    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
                    SYNC_BUCKETS,
                    o.conntrack_duration.as_secs_f64(),
                );
            }
            let unix = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            m.gauges
                .insert(("kubeproxy_sync_proxy_rules_last_timestamp_seconds", fam.clone()), unix);
            for (name, v) in [
                ("kubeproxy_sync_proxy_rules_endpoint_changes_total", o.endpoint_changes),
                ("kubeproxy_sync_proxy_rules_service_changes_total", o.service_changes),
                (
                    "kubeproxy_conntrack_reconciler_deleted_entries_total",
                    o.conntrack_deleted,
                ),
            ] {
                *m.counters.entry((name, fam.clone())).or_default() += v as f64;
            }
            for (policy, v) in [("internal", o.no_local_internal), ("external", o.no_local_external)] {
                m.gauges.insert(
                    (
                        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
                        format!("{fam},traffic_policy=\"{policy}\""),
                    ),
                    v as f64,
                );
            }
        });
    }

    /// Sets the pending-change gauges of `family`.
    pub fn set_pending(&self, family: IpFamily, endpoints: usize, services: usize) {
        let fam = format!("ip_family=\"{}\"", family_label(family));
        self.with(|m| {
            m.gauges.insert(
                ("kubeproxy_sync_proxy_rules_endpoint_changes_pending", fam.clone()),
                endpoints as f64,
            );
            m.gauges.insert(
                ("kubeproxy_sync_proxy_rules_service_changes_pending", fam),
                services as f64,
            );
        });
    }

    /// Records that a change was queued (the first one since the last sync).
    pub fn queued(&self, now: SystemTime) {
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.with(|m| {
            m.gauges.insert(
                (
                    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                    String::new(),
                ),
                unix,
            );
        });
    }

    /// Records one multus sync of `family`: pods programmed (gauge), pods
    /// that failed and runtime errors (counters, kept here).
    pub fn observe_multus(&self, family: IpFamily, programmed: usize, failures: usize, runtime_errors: usize) {
        let fam = format!("ip_family=\"{}\"", family_label(family));
        self.with(|m| {
            m.gauges
                .insert(("proxyd_multus_programmed_pods", fam.clone()), programmed as f64);
            *m.counters
                .entry(("proxyd_multus_pod_sync_failures_total", fam.clone()))
                .or_default() += failures as f64;
            *m.counters
                .entry(("proxyd_multus_runtime_errors_total", fam))
                .or_default() += runtime_errors as f64;
        });
    }

    /// Sets a counter that another component keeps (watch restarts,
    /// relists, rejected objects), with its labels (`resource="…"`).
    pub fn set_counter(&self, name: &'static str, labels: String, value: u64) {
        self.with(|m| {
            m.counters.insert((name, labels), value as f64);
        });
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        self.with(|m| {
            let mut out = String::new();
            let mut last = "";
            let mut header = |out: &mut String, name: &'static str, kind: &str| {
                if name != last {
                    let _ = writeln!(out, "# HELP {name} {}", help(name));
                    let _ = writeln!(out, "# TYPE {name} {kind}");
                    last = name;
                }
            };
            for ((name, labels), v) in &m.counters {
                header(&mut out, name, "counter");
                let _ = writeln!(out, "{name}{} {v}", braces(labels));
            }
            for ((name, labels), v) in &m.gauges {
                header(&mut out, name, "gauge");
                let _ = writeln!(out, "{name}{} {v}", braces(labels));
            }
            for ((name, labels), h) in &m.histograms {
                header(&mut out, name, "histogram");
                let sep = if labels.is_empty() { "" } else { "," };
                for (b, c) in h.bounds.iter().zip(&h.counts) {
                    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
                }
                let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{name}_sum{} {}", braces(labels), h.sum);
                let _ = writeln!(out, "{name}_count{} {}", braces(labels), h.count);
            }
            out
        })
    }
}

fn braces(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

fn help(name: &str) -> &'static str {
    match name {
        "kubeproxy_sync_proxy_rules_duration_seconds" => "SyncProxyRules latency in seconds",
        "kubeproxy_sync_full_proxy_rules_duration_seconds" => "SyncProxyRules latency in seconds for full resyncs",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds" => {
            "SyncProxyRules latency in seconds for partial resyncs"
        }
        "kubeproxy_network_programming_duration_seconds" => "In Cluster Network Programming Latency in seconds",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds" => "The last time proxy rules were successfully synced",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds" => "The last time a sync of proxy rules was queued",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending" => "Pending proxy rules Endpoint changes",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total" => "Cumulative proxy rules Endpoint changes",
        "kubeproxy_sync_proxy_rules_service_changes_pending" => "Pending proxy rules Service changes",
        "kubeproxy_sync_proxy_rules_service_changes_total" => "Cumulative proxy rules Service changes",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total" => {
            "Number of services with a Local traffic policy and no endpoints"
        }
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total" => "Cumulative proxy nftables sync failures",
        "kubeproxy_conntrack_reconciler_deleted_entries_total" => {
            "Cumulative conntrack flows deleted by conntrack reconciler"
        }
        "kubeproxy_conntrack_reconciler_sync_duration_seconds" => "ReconcileConntrackFlowsLatency latency in seconds",
        "proxyd_watch_restarts_total" => "Watch errors, each followed by a restart with backoff",
        "proxyd_relists_total" => "Complete lists after the first one (after 410 Gone or a broken watch)",
        "proxyd_rejected_objects_total" => "Objects skipped as unusable (see the warnings in the log)",
        "proxyd_multus_programmed_pods" => "Pods on this node whose namespace holds proxyd's table (multus mode)",
        "proxyd_multus_pod_sync_failures_total" => "Pod namespaces that could not be brought up to date (multus mode)",
        "proxyd_multus_runtime_errors_total" => {
            "Failed lookups of a pod's namespace in the container runtime (multus mode)"
        }
        _ => "proxyd metric",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_proxy_names_buckets_and_labels() {
        let m = Metrics::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        m.observe_sync(
            IpFamily::V4,
            &SyncObservation {
                duration: Duration::from_millis(3),
                full: true,
                endpoint_changes: 2,
                trigger_times: vec![now - Duration::from_millis(700), now + Duration::from_secs(5)],
                no_local_external: 1,
                conntrack_deleted: 4,
                conntrack_duration: Duration::from_millis(1),
                ..SyncObservation::default()
            },
            now,
        );
        m.observe_sync(
            IpFamily::V4,
            &SyncObservation {
                failed: true,
                ..SyncObservation::default()
            },
            now,
        );
        let text = m.render();
        for line in [
            "# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.002\"} 0",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.004\"} 1",
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.5\"} 0",
            "kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"1\"} 1",
            "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_endpoint_changes_total{ip_family=\"IPv4\"} 2",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 1",
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"} 1",
            "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} 4",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1000",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert_eq!(PROGRAMMING_BUCKETS.len(), 2 + 59 + 12 + 7);
        assert!(PROGRAMMING_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}
