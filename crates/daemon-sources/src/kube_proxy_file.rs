//! kube-proxy's configuration file, `KubeProxyConfiguration`
//! (`kubeproxy.config.k8s.io/v1alpha1`), as kubeadm writes it into the
//! `kube-proxy` ConfigMap: its fields, for a decoder that is strict about
//! names (serde). The sections of modes other than nftables are kept as
//! untyped values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `apiVersion` of the format.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// `kind` of the format.
pub const KIND: &str = "KubeProxyConfiguration";

/// The file. Fields are optional: a missing one is its zero value (which
/// kube-proxy reads as its default). Decoding is strict, as kube-proxy's:
/// an unknown field is an error naming it.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeProxyConfiguration {
    /// `apiVersion`.
    pub api_version: Option<String>,
    /// `kind`.
    pub kind: Option<String>,
    /// `featureGates`.
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// `clientConnection`.
    pub client_connection: Option<ClientConnection>,
    /// `logging`.
    pub logging: Option<Logging>,
    /// `hostnameOverride`.
    pub hostname_override: Option<String>,
    /// `bindAddress`.
    pub bind_address: Option<String>,
    /// `healthzBindAddress`.
    pub healthz_bind_address: Option<String>,
    /// `metricsBindAddress`.
    pub metrics_bind_address: Option<String>,
    /// `bindAddressHardFail`.
    pub bind_address_hard_fail: Option<bool>,
    /// `enableProfiling`.
    pub enable_profiling: Option<bool>,
    /// `showHiddenMetricsForVersion`.
    pub show_hidden_metrics_for_version: Option<String>,
    /// `mode`.
    pub mode: Option<String>,
    /// `iptables`.
    pub iptables: Option<Value>,
    /// `ipvs`.
    pub ipvs: Option<Value>,
    /// `winkernel`.
    pub winkernel: Option<Value>,
    /// `nftables`.
    pub nftables: Option<Nftables>,
    /// `detectLocalMode`.
    pub detect_local_mode: Option<String>,
    /// `detectLocal`.
    pub detect_local: Option<DetectLocal>,
    /// `clusterCIDR`.
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Option<String>,
    /// `nodePortAddresses`.
    pub node_port_addresses: Option<Vec<String>>,
    /// `oomScoreAdj`.
    pub oom_score_adj: Option<i32>,
    /// `conntrack`.
    pub conntrack: Option<Conntrack>,
    /// `configSyncPeriod`.
    pub config_sync_period: Option<String>,
    /// `portRange`.
    pub port_range: Option<String>,
    /// `windowsRunAsService`.
    pub windows_run_as_service: Option<bool>,
}

/// `clientConnection`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnection {
    /// `kubeconfig`.
    pub kubeconfig: Option<String>,
    /// `acceptContentTypes`.
    pub accept_content_types: Option<String>,
    /// `contentType`.
    pub content_type: Option<String>,
    /// `qps`.
    pub qps: Option<f64>,
    /// `burst`.
    pub burst: Option<i64>,
}

/// `logging` (component-base's LoggingConfiguration).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Logging {
    /// `format`.
    pub format: Option<String>,
    /// `flushFrequency`.
    pub flush_frequency: Option<Value>,
    /// `verbosity`.
    pub verbosity: Option<u32>,
    /// `vmodule`.
    pub vmodule: Option<Value>,
    /// `options`.
    pub options: Option<Value>,
}

/// `nftables`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Nftables {
    /// `masqueradeAll`.
    pub masquerade_all: Option<bool>,
    /// `masqueradeBit`.
    pub masquerade_bit: Option<i32>,
    /// `syncPeriod`.
    pub sync_period: Option<String>,
    /// `minSyncPeriod`.
    pub min_sync_period: Option<String>,
}

/// `detectLocal`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DetectLocal {
    /// `bridgeInterface`.
    pub bridge_interface: Option<String>,
    /// `clusterCIDRs`.
    #[serde(rename = "clusterCIDRs")]
    pub cluster_cidrs: Option<Vec<String>>,
    /// `interfaceNamePrefix`.
    pub interface_name_prefix: Option<String>,
}

/// `conntrack`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Conntrack {
    /// `maxPerCore`.
    pub max_per_core: Option<i64>,
    /// `min`.
    pub min: Option<i64>,
    /// `tcpEstablishedTimeout`.
    pub tcp_established_timeout: Option<String>,
    /// `tcpCloseWaitTimeout`.
    pub tcp_close_wait_timeout: Option<String>,
    /// `tcpBeLiberal`.
    pub tcp_be_liberal: Option<bool>,
    /// `udpTimeout`.
    pub udp_timeout: Option<String>,
    /// `udpStreamTimeout`.
    pub udp_stream_timeout: Option<String>,
}

/// Whether a YAML/JSON document is kube-proxy's format.
pub fn is_kube_proxy_config(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some(KIND)
}
