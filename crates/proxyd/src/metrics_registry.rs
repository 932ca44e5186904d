//! The run's metrics registry: kube-proxy's families
//! ([`node_proxy::kube_proxy_metrics`], multus mode's among them), the
//! sources' ([`SourceMetrics`]) and the process metrics (`process_…`), on one
//! registry, every series at zero from the first scrape.

use informer_glue::source_metrics::SourceMetrics;
use node_proxy::kube_proxy_metrics::{HealthMetrics, MultusMetrics, SyncMetrics};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use slice_model::IpFamily;

/// Every family of a run, on one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// kube-proxy's sync families.
    pub sync: SyncMetrics,
    /// The watches' and handlers' families.
    pub sources: SourceMetrics,
    /// Multus mode's families (registered in multus mode only).
    pub multus: Option<MultusMetrics>,
    /// The health endpoints' replies.
    pub health: HealthMetrics,
    /// Conntrack settings asked for that this node lacks (they could not
    /// be written at the start).
    pub conntrack_unset: Gauge,
}

impl Metrics {
    /// Registers every family of a run serving `families` (multus mode's
    /// too when `multus`), and the process metrics.
    pub fn new(families: &[IpFamily], multus: bool) -> Self {
        let mut registry = Registry::default();
        let sync = SyncMetrics::register(&mut registry, families);
        let sources = SourceMetrics::register(&mut registry);
        let multus = multus.then(|| MultusMetrics::register(&mut registry, families));
        let health = HealthMetrics::register(&mut registry);
        let conntrack_unset = Gauge::default();
        registry.register(
            "proxyd_conntrack_settings_unset",
            "Conntrack settings asked for (--conntrack-*) that this node lacks: they could not be written at the start",
            conntrack_unset.clone(),
        );
        if let Err(e) = kubert_prometheus_process::register(registry.sub_registry_with_prefix("process")) {
            tracing::warn!("process metrics are not available: {e}");
        }
        Self {
            registry,
            sync,
            sources,
            multus,
            health,
            conntrack_unset,
        }
    }

    /// Reads, at each scrape, the packets the tables rejected on
    /// localhost node ports (kube-proxy's
    /// `kubeproxy_nftables_localhost_nodeport_rejected_packets_total`).
    pub fn counting_localhost_rejects(mut self, rejects: node_proxy::localhost_rejects::LocalhostRejects) -> Self {
        self.registry.register_collector(Box::new(rejects));
        self
    }

    /// The exposition text (OpenMetrics).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("cannot encode the metrics: {e}");
        }
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_and_the_process_metrics_are_there_from_the_first_scrape() {
        let m = Metrics::new(&[IpFamily::V4, IpFamily::V6], false);
        let _ = m.sources.watch("services", "Service");
        let text = m.render();
        for fam in ["IPv4", "IPv6"] {
            let line = format!("kubeproxy_sync_proxy_rules_nftables_sync_failures_total{{ip_family=\"{fam}\"}} 0");
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(
            text.lines()
                .any(|l| l == "kubeproxy_proxy_healthz_total{code=\"503\"} 0")
        );
        assert!(
            text.lines()
                .any(|l| l == "proxyd_watch_restarts_total{resource=\"services\"} 0")
        );
        // The process metrics every Go component exports, with live values.
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        };
        assert!(
            value("process_resident_memory_bytes") > 1e6,
            "a running process has resident memory"
        );
        assert!(value("process_open_fds") >= 3.0, "stdin, stdout, stderr at least");
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(started <= now && started > now - 3600.0, "started {started}, now {now}");
        assert!(!text.contains("proxyd_multus"), "multus families only in multus mode");
        let multus = Metrics::new(&[IpFamily::V4], true).render();
        assert!(
            multus
                .lines()
                .any(|l| l == "proxyd_multus_pending_pods{ip_family=\"IPv4\"} 0")
        );
    }
}
