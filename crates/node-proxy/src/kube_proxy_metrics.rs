//! kube-proxy's own metrics, through `prometheus-client`, with its names,
//! labels and buckets (so existing dashboards and alerts work): the sync
//! loop's ([`SyncMetrics`]) and the health endpoints' ([`HealthMetrics`]);
//! and multus mode's own pod families ([`MultusMetrics`]).
//! Every series exists from registration, at zero, for each IP family
//! served.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use informer_glue::source_metrics::registered;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use slice_model::IpFamily;

use crate::family::FamilySync;

/// kube-proxy's sync duration buckets: 1 ms doubling 15 times.
const SYNC_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384,
];

/// kube-proxy's network programming buckets (0.25 s, 0.5 s, 1-59 s, 60-115
/// s by 5, 120-300 s by 30), with five more below 0.25 s: proxyd programs
/// most changes in well under 0.25 s, where kube-proxy's buckets cannot
/// tell 5 ms from 240 ms. Every kube-proxy bucket is kept, so queries
/// written for kube-proxy (`le="1"`, `histogram_quantile`) read the same.
fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];
    b.extend((1..60).map(f64::from));
    b.extend((60..120).step_by(5).map(f64::from));
    b.extend((120..=300).step_by(30).map(f64::from));
    b
}

/// The `ip_family` label, written as kube-proxy writes it (`IPv4`, `IPv6`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct FamilyLabel(pub IpFamily);

impl EncodeLabelValue for FamilyLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self.0 {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

/// Labels of the per-family series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabels {
    /// The IP family.
    pub ip_family: FamilyLabel,
}

impl FamilyLabels {
    /// The labels of `family`'s series.
    pub fn of(family: IpFamily) -> Self {
        Self {
            ip_family: FamilyLabel(family),
        }
    }
}

/// Labels of `kubeproxy_sync_proxy_rules_no_local_endpoints_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The IP family.
    pub ip_family: FamilyLabel,
    /// `internal` or `external`.
    pub traffic_policy: &'static str,
}

/// Labels of the health endpoints' reply counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// The HTTP status code, `200` or `503`.
    pub code: u16,
}

/// `kubeproxy_proxy_healthz_total{code}` and
/// `kubeproxy_proxy_livez_total{code}`: the replies of `/healthz` and
/// `/livez`, as kube-proxy counts them.
#[derive(Clone, Debug)]
pub struct HealthMetrics {
    healthz: Family<CodeLabels, Counter>,
    livez: Family<CodeLabels, Counter>,
}

impl HealthMetrics {
    /// Registers both families, with zero series for 200 and 503.
    pub fn register(r: &mut Registry) -> Self {
        let m = Self {
            healthz: registered(
                r,
                "kubeproxy_proxy_healthz",
                "Cumulative proxy healthz HTTP status",
                Family::default(),
            ),
            livez: registered(
                r,
                "kubeproxy_proxy_livez",
                "Cumulative proxy livez HTTP status",
                Family::default(),
            ),
        };
        for code in [200, 503] {
            let _ = m.healthz.get_or_create(&CodeLabels { code });
            let _ = m.livez.get_or_create(&CodeLabels { code });
        }
        m
    }

    /// Counts one reply of `/healthz` (else `/livez`).
    pub fn count(&self, healthz: bool, code: u16) {
        let family = if healthz { &self.healthz } else { &self.livez };
        family.get_or_create(&CodeLabels { code }).inc();
    }
}

type Histograms = Family<FamilyLabels, Histogram, fn() -> Histogram>;
type FloatGauges = Family<FamilyLabels, Gauge<f64, AtomicU64>>;

fn sync_histogram() -> Histogram {
    Histogram::new(SYNC_BUCKETS)
}

fn programming_histogram() -> Histogram {
    Histogram::new(programming_buckets())
}

/// Registers families on one registry.
struct Registrar<'r>(&'r mut Registry);

impl Registrar<'_> {
    /// A family of metrics made with their default.
    fn family<M: prometheus_client::registry::Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        registered(self.0, name, help, M::default())
    }

    /// A family of histograms of `buckets`.
    fn histograms(&mut self, name: &str, help: &str, buckets: fn() -> Histogram) -> Histograms {
        registered(self.0, name, help, Histograms::new_with_constructor(buckets))
    }
}

/// kube-proxy's sync families.
#[derive(Clone, Debug)]
pub struct SyncMetrics {
    duration: Histograms,
    full_duration: Histograms,
    partial_duration: Histograms,
    programming: Histograms,
    last_synced: FloatGauges,
    last_queued: FloatGauges,
    endpoint_changes_pending: Family<FamilyLabels, Gauge>,
    endpoint_changes: Family<FamilyLabels, Counter>,
    service_changes_pending: Family<FamilyLabels, Gauge>,
    service_changes: Family<FamilyLabels, Counter>,
    no_local_endpoints: Family<PolicyLabels, Gauge>,
    sync_failures: Family<FamilyLabels, Counter>,
    services_refused: Family<FamilyLabels, Gauge>,
    conntrack_deleted: Family<FamilyLabels, Counter>,
    conntrack_duration: Histograms,
    localhost_listeners: Family<FamilyLabels, Gauge>,
    localhost_listener_failures: Family<FamilyLabels, Counter>,
    families: Vec<IpFamily>,
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

impl SyncMetrics {
    /// Registers the families, with a zero series for each of `families`.
    pub fn register(r: &mut Registry, families: &[IpFamily]) -> Self {
        let mut reg = Registrar(r);
        let m = Self {
            duration: reg.histograms(
                "kubeproxy_sync_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds",
                sync_histogram,
            ),
            full_duration: reg.histograms(
                "kubeproxy_sync_full_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for full resyncs",
                sync_histogram,
            ),
            partial_duration: reg.histograms(
                "kubeproxy_sync_partial_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for partial resyncs",
                sync_histogram,
            ),
            programming: reg.histograms(
                "kubeproxy_network_programming_duration_seconds",
                "In Cluster Network Programming Latency in seconds",
                programming_histogram,
            ),
            last_synced: reg.family(
                "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                "The last time proxy rules were successfully synced",
            ),
            last_queued: reg.family(
                "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                "The last time a sync of proxy rules was queued",
            ),
            endpoint_changes_pending: reg.family(
                "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                "Pending proxy rules Endpoint changes",
            ),
            endpoint_changes: reg.family(
                "kubeproxy_sync_proxy_rules_endpoint_changes",
                "Cumulative proxy rules Endpoint changes",
            ),
            service_changes_pending: reg.family(
                "kubeproxy_sync_proxy_rules_service_changes_pending",
                "Pending proxy rules Service changes",
            ),
            service_changes: reg.family(
                "kubeproxy_sync_proxy_rules_service_changes",
                "Cumulative proxy rules Service changes",
            ),
            no_local_endpoints: reg.family(
                "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
                "Number of services with a Local traffic policy and no endpoints",
            ),
            sync_failures: reg.family(
                "kubeproxy_sync_proxy_rules_nftables_sync_failures",
                "Cumulative proxy nftables sync failures",
            ),
            services_refused: reg.family(
                "proxyd_services_refused",
                "Services whose rules the kernel refuses: left out of the table (every other service is \
                 programmed) and checked again with backoff; in multus mode, counted once per pod table",
            ),
            conntrack_deleted: reg.family(
                "kubeproxy_conntrack_reconciler_deleted_entries",
                "Cumulative conntrack flows deleted by conntrack reconciler",
            ),
            conntrack_duration: reg.histograms(
                "kubeproxy_conntrack_reconciler_sync_duration_seconds",
                "ReconcileConntrackFlowsLatency latency in seconds",
                sync_histogram,
            ),
            localhost_listeners: reg.family(
                "kubeproxy_nftables_localhost_nodeport_listeners",
                "Number of active localhost NodePort listeners",
            ),
            localhost_listener_failures: reg.family(
                "kubeproxy_nftables_localhost_nodeport_listener_creation_failures",
                "Cumulative localhost NodePort listener creation failures",
            ),
            families: families.to_vec(),
        };
        for &f in families {
            m.touch(f);
        }
        m
    }

    /// Creates every series of `family` (at zero).
    fn touch(&self, family: IpFamily) {
        let l = FamilyLabels::of(family);
        let _ = self.duration.get_or_create(&l);
        let _ = self.full_duration.get_or_create(&l);
        let _ = self.partial_duration.get_or_create(&l);
        let _ = self.programming.get_or_create(&l);
        let _ = self.last_synced.get_or_create(&l);
        let _ = self.last_queued.get_or_create(&l);
        let _ = self.endpoint_changes_pending.get_or_create(&l);
        let _ = self.endpoint_changes.get_or_create(&l);
        let _ = self.service_changes_pending.get_or_create(&l);
        let _ = self.service_changes.get_or_create(&l);
        for traffic_policy in ["internal", "external"] {
            let _ = self.no_local_endpoints.get_or_create(&PolicyLabels {
                ip_family: FamilyLabel(family),
                traffic_policy,
            });
        }
        let _ = self.sync_failures.get_or_create(&l);
        let _ = self.services_refused.get_or_create(&l);
        let _ = self.conntrack_deleted.get_or_create(&l);
        let _ = self.conntrack_duration.get_or_create(&l);
        let _ = self.localhost_listeners.get_or_create(&l);
        let _ = self.localhost_listener_failures.get_or_create(&l);
    }

    /// The localhost node port relay's series of `family`.
    pub fn relay_metrics(&self, family: IpFamily) -> crate::localhost_relay::RelayMetrics {
        let l = FamilyLabels::of(family);
        crate::localhost_relay::RelayMetrics {
            listeners: self.localhost_listeners.get_or_create(&l).clone(),
            creation_failures: self.localhost_listener_failures.get_or_create(&l).clone(),
        }
    }

    /// Records the network programming latency of changes with these
    /// trigger times, programmed `now`.
    pub fn observe_programming(&self, family: IpFamily, trigger_times: &[SystemTime], now: SystemTime) {
        let l = FamilyLabels::of(family);
        for t in trigger_times {
            // Clock skew between the controller and this node can make the
            // difference negative; such samples are meaningless.
            if let Ok(d) = now.duration_since(*t) {
                self.programming.get_or_create(&l).observe(d.as_secs_f64());
            }
        }
    }

    /// Records one sync of `family`.
    pub fn observe_sync(&self, family: IpFamily, o: &FamilySync, now: SystemTime) {
        let l = FamilyLabels::of(family);
        let secs = o.duration.as_secs_f64();
        self.duration.get_or_create(&l).observe(secs);
        let kind = if o.written.full {
            &self.full_duration
        } else {
            &self.partial_duration
        };
        kind.get_or_create(&l).observe(secs);
        self.observe_programming(family, &o.trigger_times, now);
        if o.conntrack_deleted > 0 || o.conntrack_duration > Duration::ZERO {
            self.conntrack_duration
                .get_or_create(&l)
                .observe(o.conntrack_duration.as_secs_f64());
        }
        self.last_synced.get_or_create(&l).set(unix_seconds(now));
        self.endpoint_changes.get_or_create(&l).inc_by(o.endpoint_changes);
        self.service_changes.get_or_create(&l).inc_by(o.service_changes);
        self.conntrack_deleted.get_or_create(&l).inc_by(o.conntrack_deleted);
        // Each refused transaction is a failed nft sync to kube-proxy's
        // counter, though the sync then wrote everything else.
        let refused = u64::try_from(o.written.refused_transactions).unwrap_or(u64::MAX);
        self.sync_failures.get_or_create(&l).inc_by(refused);
        self.services_refused
            .get_or_create(&l)
            .set(i64::try_from(o.written.refused_services).unwrap_or(i64::MAX));
        for (traffic_policy, v) in [("internal", o.no_local_internal), ("external", o.no_local_external)] {
            self.no_local_endpoints
                .get_or_create(&PolicyLabels {
                    ip_family: FamilyLabel(family),
                    traffic_policy,
                })
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
    }

    /// Records a sync of `family` that failed.
    pub fn observe_failed(&self, family: IpFamily) {
        self.sync_failures.get_or_create(&FamilyLabels::of(family)).inc();
    }

    /// Sets the pending-change gauges of `family`.
    pub fn set_pending(&self, family: IpFamily, endpoints: usize, services: usize) {
        let l = FamilyLabels::of(family);
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.endpoint_changes_pending.get_or_create(&l).set(n(endpoints));
        self.service_changes_pending.get_or_create(&l).set(n(services));
    }

    /// Records that a change was queued (the first one since the last
    /// sync): a change can concern any family served.
    pub fn queued(&self, now: SystemTime) {
        for &f in &self.families {
            self.last_queued
                .get_or_create(&FamilyLabels::of(f))
                .set(unix_seconds(now));
        }
    }
}

/// Multus mode's families.
#[derive(Clone, Debug)]
pub struct MultusMetrics {
    programmed_pods: Family<FamilyLabels, Gauge>,
    pending_pods: Family<FamilyLabels, Gauge>,
    pod_sync_failures: Family<FamilyLabels, Counter>,
    runtime_errors: Family<FamilyLabels, Counter>,
}

impl MultusMetrics {
    /// Registers the families, with a zero series for each of `families`.
    pub fn register(r: &mut Registry, families: &[IpFamily]) -> Self {
        let m = Self {
            programmed_pods: registered(
                r,
                "proxyd_multus_programmed_pods",
                "Pods on this node whose namespace holds proxyd's table (multus mode)",
                Family::default(),
            ),
            pending_pods: registered(
                r,
                "proxyd_multus_pending_pods",
                "Pods on this node that should hold proxyd's table but are not programmed up to date \
                 (no namespace yet, the runtime down, a failed write): retried until they are (multus mode)",
                Family::default(),
            ),
            pod_sync_failures: registered(
                r,
                "proxyd_multus_pod_sync_failures",
                "Pod namespaces that could not be brought up to date (multus mode)",
                Family::default(),
            ),
            runtime_errors: registered(
                r,
                "proxyd_multus_runtime_errors",
                "Failed lookups of a pod's namespace in the container runtime (multus mode)",
                Family::default(),
            ),
        };
        for &f in families {
            let l = FamilyLabels::of(f);
            let _ = m.programmed_pods.get_or_create(&l);
            let _ = m.pending_pods.get_or_create(&l);
            let _ = m.pod_sync_failures.get_or_create(&l);
            let _ = m.runtime_errors.get_or_create(&l);
        }
        m
    }

    /// Records one multus sync of `family`.
    pub fn observe(&self, family: IpFamily, sync: &crate::family::PodsSync) {
        let l = FamilyLabels::of(family);
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        let g = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.programmed_pods.get_or_create(&l).set(g(sync.programmed));
        self.pending_pods.get_or_create(&l).set(g(sync.pending.len()));
        let (failures, runtime_errors) = (sync.failures.len(), sync.runtime_errors);
        self.pod_sync_failures.get_or_create(&l).inc_by(n(failures));
        self.runtime_errors.get_or_create(&l).inc_by(n(runtime_errors));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(text: &str, line: &str) {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }

    fn render(r: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, r).expect("encodes");
        out
    }

    #[test]
    fn every_family_is_there_from_the_first_scrape() {
        let mut r = Registry::default();
        let _ = SyncMetrics::register(&mut r, &[IpFamily::V4, IpFamily::V6]);
        let _ = HealthMetrics::register(&mut r);
        let text = render(&r);
        for fam in ["IPv4", "IPv6"] {
            for line in [
                format!("kubeproxy_sync_proxy_rules_nftables_sync_failures_total{{ip_family=\"{fam}\"}} 0"),
                format!("kubeproxy_sync_partial_proxy_rules_duration_seconds_count{{ip_family=\"{fam}\"}} 0"),
                format!("kubeproxy_network_programming_duration_seconds_count{{ip_family=\"{fam}\"}} 0"),
                format!("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{{ip_family=\"{fam}\"}} 0.0"),
                format!(
                    "kubeproxy_sync_proxy_rules_no_local_endpoints_total{{ip_family=\"{fam}\",traffic_policy=\"internal\"}} 0"
                ),
                format!("kubeproxy_conntrack_reconciler_deleted_entries_total{{ip_family=\"{fam}\"}} 0"),
                format!("proxyd_services_refused{{ip_family=\"{fam}\"}} 0"),
            ] {
                has(&text, &line);
            }
        }
        for endpoint in ["healthz", "livez"] {
            for code in [200, 503] {
                has(&text, &format!("kubeproxy_proxy_{endpoint}_total{{code=\"{code}\"}} 0"));
            }
        }
    }

    #[test]
    fn kube_proxy_names_buckets_and_labels() {
        let mut r = Registry::default();
        let sync = SyncMetrics::register(&mut r, &[IpFamily::V4]);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        sync.observe_sync(
            IpFamily::V4,
            &FamilySync {
                duration: Duration::from_millis(3),
                written: nft_dataplane::SyncReport {
                    full: true,
                    refused_transactions: 2,
                    refused_services: 1,
                    ..Default::default()
                },
                endpoint_changes: 2,
                trigger_times: vec![now - Duration::from_millis(700), now + Duration::from_secs(5)],
                no_local_external: 1,
                conntrack_deleted: 4,
                conntrack_duration: Duration::from_millis(1),
                ..FamilySync::default()
            },
            now,
        );
        sync.observe_failed(IpFamily::V4);
        sync.queued(now);
        let text = render(&r);
        for line in [
            "# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.002\",ip_family=\"IPv4\"} 0",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.004\",ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"0.5\",ip_family=\"IPv4\"} 0",
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"1.0\",ip_family=\"IPv4\"} 1",
            "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_endpoint_changes_total{ip_family=\"IPv4\"} 2",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 1",
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"} 3",
            "proxyd_services_refused{ip_family=\"IPv4\"} 1",
            "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} 4",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1000.0",
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 1000.0",
        ] {
            has(&text, line);
        }
        let buckets = programming_buckets();
        assert_eq!(buckets.len(), 5 + 2 + 59 + 12 + 7);
        assert!(buckets.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(buckets.last(), Some(&300.0));
    }
}
