//! kube-proxy's configuration file, `KubeProxyConfiguration`
//! (`kubeproxy.config.k8s.io/v1alpha1`), as kubeadm writes it into the
//! `kube-proxy` ConfigMap: `--config` takes it as well as proxyd's own
//! format, so that kube-proxy's DaemonSet arguments
//! (`--config=/var/lib/kube-proxy/config.conf --hostname-override=…`) work.
//!
//! The file is decoded strictly (an unknown field is an error naming it, as
//! kube-proxy's decoder does), zero values (`0s`, `null`, `""`) mean
//! kube-proxy's default, and every field the nftables mode reads becomes
//! the proxyd setting of the same meaning. Sections of other modes
//! (`iptables`, `ipvs`, `winkernel`) are accepted and left out with one
//! INFO line; a `mode` other than `nftables` (or empty) is an error.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `apiVersion` of the format.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// `kind` of the format.
pub const KIND: &str = "KubeProxyConfiguration";

/// The file. Fields are optional: a missing one is its zero value.
/// Fields of other modes and of kube-proxy's process (logging, profiling)
/// are decoded, so that a misspelt one is still an error, but not used.
#[allow(
    dead_code,
    reason = "fields kube-proxy has and proxyd does not use are decoded strictly, not read"
)]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeProxyConfiguration {
    api_version: Option<String>,
    kind: Option<String>,
    feature_gates: Option<BTreeMap<String, bool>>,
    client_connection: Option<ClientConnection>,
    logging: Option<Logging>,
    hostname_override: Option<String>,
    bind_address: Option<String>,
    healthz_bind_address: Option<String>,
    metrics_bind_address: Option<String>,
    bind_address_hard_fail: Option<bool>,
    enable_profiling: Option<bool>,
    show_hidden_metrics_for_version: Option<String>,
    mode: Option<String>,
    iptables: Option<Value>,
    ipvs: Option<Value>,
    winkernel: Option<Value>,
    nftables: Option<Nftables>,
    detect_local_mode: Option<String>,
    detect_local: Option<DetectLocal>,
    #[serde(rename = "clusterCIDR")]
    cluster_cidr: Option<String>,
    node_port_addresses: Option<Vec<String>>,
    oom_score_adj: Option<i32>,
    conntrack: Option<Conntrack>,
    config_sync_period: Option<String>,
    port_range: Option<String>,
    windows_run_as_service: Option<bool>,
}

/// `clientConnection` (`acceptContentTypes` is decoded, not used).
#[allow(dead_code, reason = "acceptContentTypes is decoded strictly, not read")]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientConnection {
    kubeconfig: Option<String>,
    accept_content_types: Option<String>,
    content_type: Option<String>,
    qps: Option<f64>,
    burst: Option<i64>,
}

/// `logging` (component-base's LoggingConfiguration): decoded strictly,
/// not used (proxyd's `-v` and `RUST_LOG` say how much it logs).
#[allow(dead_code, reason = "decoded strictly, not read")]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Logging {
    format: Option<String>,
    flush_frequency: Option<Value>,
    verbosity: Option<u32>,
    vmodule: Option<Value>,
    options: Option<Value>,
}

/// `nftables`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Nftables {
    masquerade_all: Option<bool>,
    masquerade_bit: Option<i32>,
    sync_period: Option<String>,
    min_sync_period: Option<String>,
}

/// `detectLocal`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DetectLocal {
    bridge_interface: Option<String>,
    #[serde(rename = "clusterCIDRs")]
    cluster_cidrs: Option<Vec<String>>,
    interface_name_prefix: Option<String>,
}

/// `conntrack`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Conntrack {
    max_per_core: Option<i64>,
    min: Option<i64>,
    tcp_established_timeout: Option<String>,
    tcp_close_wait_timeout: Option<String>,
    tcp_be_liberal: Option<bool>,
    udp_timeout: Option<String>,
    udp_stream_timeout: Option<String>,
}

/// Whether a YAML/JSON document is kube-proxy's format.
pub fn is_kube_proxy_config(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some(KIND)
}

/// A set, non-zero value (`""`, `0s`, `0` and `null` are kube-proxy's
/// "use the default").
fn set(v: &Option<String>) -> Option<&str> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "0s" && *s != "0")
}

/// Decodes `text` strictly and turns it into proxyd's settings (flag name
/// -> value, as proxyd's own `--config` format writes them), with notes on
/// what was left out (to log once logging is set up); the problems name
/// the field.
pub fn settings(text: &str) -> Result<(Map<String, Value>, Vec<String>), String> {
    let c: KubeProxyConfiguration = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    if c.api_version.as_deref().is_some_and(|v| v != API_VERSION) {
        return Err(format!(
            "apiVersion {:?}: proxyd reads {API_VERSION}",
            c.api_version.unwrap_or_default()
        ));
    }
    if c.kind.as_deref() != Some(KIND) {
        return Err(format!("kind: expected {KIND}"));
    }
    let mut out = Map::new();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    match set(&c.mode) {
        None | Some("nftables") => {}
        Some(other) => problems.push(format!(
            "mode {other:?}: proxyd is kube-proxy's nftables mode (set mode to nftables or leave it empty)"
        )),
    }
    let ignored: Vec<&str> = [
        ("iptables", &c.iptables),
        ("ipvs", &c.ipvs),
        ("winkernel", &c.winkernel),
    ]
    .into_iter()
    .filter(|(_, v)| v.is_some())
    .map(|(name, _)| name)
    .collect();
    if !ignored.is_empty() {
        notes.push(format!(
            "kube-proxy configuration: the {} section(s) are for other modes; left out",
            ignored.join(", ")
        ));
    }
    if let Some(h) = set(&c.hostname_override) {
        out.insert("hostname-override".into(), json!(h));
    }
    for (field, flag, value) in [
        ("healthzBindAddress", "healthz-bind-address", &c.healthz_bind_address),
        ("metricsBindAddress", "metrics-bind-address", &c.metrics_bind_address),
    ] {
        if let Some(addr) = set(value) {
            // kube-proxy takes an address without a port as that address
            // on its default port.
            if addr.parse::<std::net::IpAddr>().is_ok() {
                problems.push(format!(
                    "{field} {addr:?}: give ADDRESS:PORT (kube-proxy's default port is not assumed)"
                ));
            } else {
                out.insert(flag.into(), json!(addr));
            }
        }
    }
    if let Some(cidrs) = set(&c.cluster_cidr) {
        let list: Vec<&str> = cidrs.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        out.insert("cluster-cidr".into(), json!(list));
    }
    let detect = c.detect_local.unwrap_or_default();
    match set(&c.detect_local_mode) {
        None | Some("ClusterCIDR") => {}
        Some(mode @ "NodeCIDR") => {
            out.insert("detect-local-mode".into(), json!(mode));
        }
        Some(mode @ "BridgeInterface") => {
            out.insert("detect-local-mode".into(), json!(mode));
            match set(&detect.bridge_interface) {
                Some(b) => {
                    out.insert("pod-bridge-interface".into(), json!(b));
                }
                None => problems.push("detectLocalMode BridgeInterface needs detectLocal.bridgeInterface".into()),
            }
        }
        Some(mode @ "InterfaceNamePrefix") => {
            out.insert("detect-local-mode".into(), json!(mode));
            match set(&detect.interface_name_prefix) {
                Some(p) => {
                    out.insert("pod-interface-name-prefix".into(), json!(p));
                }
                None => {
                    problems.push("detectLocalMode InterfaceNamePrefix needs detectLocal.interfaceNamePrefix".into())
                }
            }
        }
        Some(other) => problems.push(format!(
            "detectLocalMode {other:?}: not one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix"
        )),
    }
    if detect.cluster_cidrs.as_ref().is_some_and(|v| !v.is_empty())
        && c.cluster_cidr.as_deref().is_none_or(|s| s.trim().is_empty())
    {
        out.insert("cluster-cidr".into(), json!(detect.cluster_cidrs));
    }
    // `primary` or CIDRs, as the flag takes them (null: the default, primary).
    if let Some(list) = c.node_port_addresses.as_ref().filter(|l| !l.is_empty()) {
        out.insert("nodeport-addresses".into(), json!(list));
    }
    if let Some(n) = &c.nftables {
        if n.masquerade_all == Some(true) {
            out.insert("masquerade-all".into(), json!(true));
        }
        if let Some(bit) = n.masquerade_bit.filter(|b| *b != 14) {
            problems.push(format!(
                "nftables.masqueradeBit {bit}: proxyd marks with bit 14 (kube-proxy's default)"
            ));
        }
        if let Some(p) = set(&n.sync_period) {
            out.insert("sync-period".into(), json!(p));
        }
        if let Some(p) = set(&n.min_sync_period) {
            out.insert("min-sync-period".into(), json!(p));
        }
    }
    if let Some(p) = set(&c.config_sync_period) {
        out.insert("config-sync-period".into(), json!(p));
    }
    if let Some(ct) = &c.conntrack {
        for (flag, value) in [("conntrack-max-per-core", ct.max_per_core), ("conntrack-min", ct.min)] {
            match value {
                Some(v) if v < 0 => problems.push(format!("conntrack: {flag} {v} is negative")),
                Some(v) => {
                    out.insert(flag.into(), json!(v));
                }
                None => {}
            }
        }
        // The TCP timeouts: null is the default (24h, 1h), an explicit 0s
        // leaves the kernel's value.
        for (flag, value) in [
            ("conntrack-tcp-timeout-established", &ct.tcp_established_timeout),
            ("conntrack-tcp-timeout-close-wait", &ct.tcp_close_wait_timeout),
        ] {
            if let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
                out.insert(flag.into(), json!(v));
            }
        }
        // The UDP timeouts: 0s (the default) leaves the kernel's value.
        for (flag, value) in [
            ("conntrack-udp-timeout", &ct.udp_timeout),
            ("conntrack-udp-timeout-stream", &ct.udp_stream_timeout),
        ] {
            if let Some(v) = set(value) {
                out.insert(flag.into(), json!(v));
            }
        }
        if ct.tcp_be_liberal == Some(true) {
            out.insert("conntrack-tcp-be-liberal".into(), json!(true));
        }
    }
    if let Some(cc) = &c.client_connection {
        if let Some(k) = set(&cc.kubeconfig) {
            out.insert("kubeconfig".into(), json!(k));
        }
        if let Some(q) = cc.qps.filter(|q| *q != 0.0) {
            out.insert("kube-api-qps".into(), json!(q));
        }
        if let Some(b) = cc.burst.filter(|b| *b != 0) {
            out.insert("kube-api-burst".into(), json!(b));
        }
        if let Some(t) = set(&cc.content_type) {
            out.insert("kube-api-content-type".into(), json!(t));
        }
    }
    if let Some(adj) = c.oom_score_adj {
        out.insert("oom-score-adj".into(), json!(adj));
    }
    if c.bind_address_hard_fail == Some(true) {
        out.insert("bind-address-hard-fail".into(), json!(true));
    }
    if let Some(gates) = &c.feature_gates
        && !gates.is_empty()
    {
        let names: Vec<&String> = gates.keys().collect();
        notes.push(format!(
            "kube-proxy configuration: feature gates {names:?} are left out (proxyd has none)"
        ));
    }
    if problems.is_empty() {
        Ok((out, notes))
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubeadm 1.36 writes into the `kube-proxy` ConfigMap as
    /// `config.conf` (its defaults; `clusterCIDR` from the pod subnet).
    const KUBEADM: &str = include_str!("../tests/fixtures/kubeadm-kube-proxy-config.conf");

    #[test]
    fn kubeadms_file_means_kube_proxys_defaults() {
        let (s, notes) = settings(KUBEADM).unwrap();
        assert_eq!(
            notes,
            ["kube-proxy configuration: the iptables, ipvs, winkernel section(s) are for other modes; left out"]
        );
        assert_eq!(
            Value::Object(s),
            json!({
                "cluster-cidr": ["10.244.0.0/16"],
                "kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf",
            }),
            "every zero value is the default; the rest maps"
        );
    }

    #[test]
    fn set_fields_become_proxyd_settings() {
        let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n\
                    clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\nhostnameOverride: node-7\n\
                    healthzBindAddress: 0.0.0.0:10256\nmetricsBindAddress: 0.0.0.0:10249\n\
                    nodePortAddresses: [192.168.0.0/24]\n\
                    nftables: {masqueradeAll: true, masqueradeBit: 14, syncPeriod: 1m, minSyncPeriod: 2s}\n\
                    conntrack: {maxPerCore: 0, min: 1000, tcpEstablishedTimeout: 12h, tcpBeLiberal: true}\n\
                    configSyncPeriod: 10m\niptables: {masqueradeAll: false}\n\
                    detectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: cali}\n\
                    oomScoreAdj: -998\nbindAddressHardFail: true\nclientConnection: {qps: 50, burst: 100}\n";
        let (s, _) = settings(text).unwrap();
        assert_eq!(
            Value::Object(s),
            json!({
                "cluster-cidr": ["10.244.0.0/16", "fd00:10:244::/56"],
                "hostname-override": "node-7",
                "healthz-bind-address": "0.0.0.0:10256",
                "metrics-bind-address": "0.0.0.0:10249",
                "nodeport-addresses": ["192.168.0.0/24"],
                "masquerade-all": true,
                "sync-period": "1m",
                "min-sync-period": "2s",
                "conntrack-max-per-core": 0,
                "conntrack-min": 1000,
                "conntrack-tcp-timeout-established": "12h",
                "conntrack-tcp-be-liberal": true,
                "config-sync-period": "10m",
                "detect-local-mode": "InterfaceNamePrefix",
                "pod-interface-name-prefix": "cali",
                "oom-score-adj": -998,
                "bind-address-hard-fail": true,
                "kube-api-qps": 50.0,
                "kube-api-burst": 100,
            })
        );
    }

    #[test]
    fn bad_files_say_which_field() {
        let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
        let err = |body: &str| settings(&format!("{head}{body}")).unwrap_err();
        let e = err("clusterCidr: 10.0.0.0/8\n");
        assert!(e.contains("unknown field") && e.contains("clusterCidr"), "{e}");
        let e = err("nftables: {syncPeriod: 30s, sync: 1}\n");
        assert!(e.contains("unknown field") && e.contains("sync"), "{e}");
        assert!(err("mode: ipvs\n").contains("mode \"ipvs\""));
        assert!(err("detectLocalMode: Magic\n").contains("detectLocalMode \"Magic\""));
        assert!(err("detectLocalMode: BridgeInterface\n").contains("detectLocal.bridgeInterface"));
        assert!(err("healthzBindAddress: 0.0.0.0\n").contains("healthzBindAddress"));
        assert!(err("nftables: {masqueradeBit: 15}\n").contains("masqueradeBit 15"));
        let e = err("conntrack: {maxPerCore: many}\n");
        assert!(e.contains("maxPerCore") || e.contains("invalid"), "{e}");
        let e = settings("apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n").unwrap_err();
        assert!(e.contains("apiVersion"), "{e}");
    }
}
