//! kube-proxy's configuration file (`daemon_sources::kube_proxy_file`)
//! turned into proxyd's settings: `--config` takes it as well as proxyd's
//! own format, so that kube-proxy's DaemonSet arguments
//! (`--config=/var/lib/kube-proxy/config.conf --hostname-override=…`) work.
//!
//! The file is decoded strictly (an unknown field is an error naming it, as
//! kube-proxy's decoder does), zero values (`0s`, `null`, `""`) mean
//! kube-proxy's default, and every field the nftables mode reads becomes
//! the proxyd setting of the same meaning. Sections of other modes
//! (`iptables`, `ipvs`, `winkernel`) are accepted and left out with one
//! INFO line; a `mode` other than `nftables` (or empty) is an error.

use std::time::Duration;

use daemon_sources::kube_proxy_file::{API_VERSION, KIND, KubeProxyConfiguration};

use super::file::Settings;
use crate::logging::LogFormat;
use crate::settings::flags::{
    DetectLocalMode, parse_bind_address, parse_cidr, parse_duration, parse_interface, parse_nodeport_address,
    parse_oom_score_adj,
};

/// A set, non-zero value (`""`, `0s`, `0` and `null` are kube-proxy's
/// "use the default").
fn set(v: &Option<String>) -> Option<&str> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "0s" && *s != "0")
}

/// A set, non-zero duration (`""`, `0s` and `null` are kube-proxy's "use
/// the default"), parsed; the problem names the field.
fn duration(field: &str, value: &Option<String>) -> Result<Option<Duration>, String> {
    set(value)
        .map(|v| parse_duration(v).map_err(|e| format!("{field}: {e}")))
        .transpose()
}

/// A list of CIDRs, the problem naming the field.
fn cidrs<'a>(field: &str, items: impl IntoIterator<Item = &'a str>) -> Result<Vec<ipnet::IpNet>, String> {
    items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| parse_cidr(s).map_err(|e| format!("{field}: {e}")))
        .collect()
}

/// Decodes a document strictly and turns it into proxyd's settings, with
/// notes on what was left out (to log once logging is set up); the
/// problems name the field.
pub fn settings(text: &str) -> Result<(Settings, Vec<String>), String> {
    let c: KubeProxyConfiguration = super::file::decode(text)?;
    if c.api_version.as_deref().is_some_and(|v| v != API_VERSION) {
        return Err(format!(
            "apiVersion {:?}: proxyd reads {API_VERSION}",
            c.api_version.unwrap_or_default()
        ));
    }
    if c.kind.as_deref() != Some(KIND) {
        return Err(format!("kind: expected {KIND}"));
    }
    let mut out = Settings::default();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut check = |r: Result<(), String>| {
        if let Err(e) = r {
            problems.push(e);
        }
    };
    check(match set(&c.mode) {
        None | Some("nftables") => Ok(()),
        Some(other) => Err(format!(
            "mode {other:?}: proxyd is kube-proxy's nftables mode (set mode to nftables or leave it empty)"
        )),
    });
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
    out.hostname_override = set(&c.hostname_override).map(str::to_owned);
    for (field, value, into) in [
        (
            "healthzBindAddress",
            &c.healthz_bind_address,
            &mut out.healthz_bind_address,
        ),
        (
            "metricsBindAddress",
            &c.metrics_bind_address,
            &mut out.metrics_bind_address,
        ),
    ] {
        let Some(addr) = set(value) else { continue };
        // kube-proxy takes an address without a port as that address on
        // its default port; proxyd wants it said.
        check(if addr.parse::<std::net::IpAddr>().is_ok() {
            Err(format!(
                "{field} {addr:?}: give ADDRESS:PORT (kube-proxy's default port is not assumed)"
            ))
        } else {
            parse_bind_address(addr)
                .map(|a| *into = Some(a))
                .map_err(|e| format!("{field}: {e}"))
        });
    }
    if let Some(list) = set(&c.cluster_cidr) {
        check(cidrs("clusterCIDR", list.split(',')).map(|l| out.cluster_cidr = Some(l)));
    }
    let detect = c.detect_local.unwrap_or_default();
    let needs = |value: &Option<String>, what: &str| {
        set(value)
            .map(|v| parse_interface(v).map_err(|e| format!("detectLocal.{what}: {e}")))
            .unwrap_or_else(|| Err(format!("detectLocalMode needs detectLocal.{what}")))
    };
    check(match set(&c.detect_local_mode) {
        None | Some("ClusterCIDR") => Ok(()),
        Some("NodeCIDR") => {
            out.detect_local_mode = Some(DetectLocalMode::NodeCidr);
            Ok(())
        }
        Some("BridgeInterface") => needs(&detect.bridge_interface, "bridgeInterface").map(|b| {
            out.detect_local_mode = Some(DetectLocalMode::BridgeInterface);
            out.pod_bridge_interface = Some(b);
        }),
        Some("InterfaceNamePrefix") => needs(&detect.interface_name_prefix, "interfaceNamePrefix").map(|p| {
            out.detect_local_mode = Some(DetectLocalMode::InterfaceNamePrefix);
            out.pod_interface_name_prefix = Some(p);
        }),
        Some(other) => Err(format!(
            "detectLocalMode {other:?}: not one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix"
        )),
    });
    if out.cluster_cidr.is_none()
        && let Some(list) = detect.cluster_cidrs.as_ref().filter(|l| !l.is_empty())
    {
        check(cidrs("detectLocal.clusterCIDRs", list.iter().map(String::as_str)).map(|l| out.cluster_cidr = Some(l)));
    }
    // `primary` or CIDRs, as the flag takes them (null: the default, primary).
    if let Some(list) = c.node_port_addresses.as_ref().filter(|l| !l.is_empty()) {
        check(
            list.iter()
                .map(|a| parse_nodeport_address(a).map_err(|e| format!("nodePortAddresses: {e}")))
                .collect::<Result<_, _>>()
                .map(|l| out.nodeport_addresses = Some(l)),
        );
    }
    if let Some(n) = &c.nftables {
        out.masquerade_all = n.masquerade_all.filter(|m| *m);
        if let Some(bit) = n.masquerade_bit.filter(|b| *b != 14) {
            check(Err(format!(
                "nftables.masqueradeBit {bit}: proxyd marks with bit 14 (kube-proxy's default)"
            )));
        }
        check(duration("nftables.syncPeriod", &n.sync_period).map(|d| out.sync_period = d));
        check(duration("nftables.minSyncPeriod", &n.min_sync_period).map(|d| out.min_sync_period = d));
    }
    check(duration("configSyncPeriod", &c.config_sync_period).map(|d| out.config_sync_period = d));
    if let Some(ct) = &c.conntrack {
        for (field, value, into) in [
            ("conntrack.maxPerCore", ct.max_per_core, &mut out.conntrack_max_per_core),
            ("conntrack.min", ct.min, &mut out.conntrack_min),
        ] {
            check(match value.map(u64::try_from) {
                Some(Ok(v)) => {
                    *into = Some(v);
                    Ok(())
                }
                Some(Err(_)) => Err(format!("{field} {}: negative", value.unwrap_or_default())),
                None => Ok(()),
            });
        }
        // The TCP timeouts: null is the default (24h, 1h), an explicit 0s
        // leaves the kernel's value.
        for (field, value, into) in [
            (
                "conntrack.tcpEstablishedTimeout",
                &ct.tcp_established_timeout,
                &mut out.conntrack_tcp_timeout_established,
            ),
            (
                "conntrack.tcpCloseWaitTimeout",
                &ct.tcp_close_wait_timeout,
                &mut out.conntrack_tcp_timeout_close_wait,
            ),
        ] {
            if let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
                check(
                    parse_duration(v)
                        .map(|d| *into = Some(d))
                        .map_err(|e| format!("{field}: {e}")),
                );
            }
        }
        // The UDP timeouts: 0s (the default) leaves the kernel's value.
        check(duration("conntrack.udpTimeout", &ct.udp_timeout).map(|d| out.conntrack_udp_timeout = d));
        check(
            duration("conntrack.udpStreamTimeout", &ct.udp_stream_timeout)
                .map(|d| out.conntrack_udp_timeout_stream = d),
        );
        out.conntrack_tcp_be_liberal = ct.tcp_be_liberal.filter(|b| *b);
    }
    if let Some(cc) = &c.client_connection {
        out.kubeconfig = set(&cc.kubeconfig).map(Into::into);
        out.kube_api_qps = cc.qps.filter(|q| *q != 0.0).map(|q| q as f32);
        out.kube_api_burst = match cc.burst.filter(|b| *b != 0).map(u32::try_from) {
            Some(Ok(b)) => Some(b),
            Some(Err(_)) => {
                check(Err(format!(
                    "clientConnection.burst {}: out of range",
                    cc.burst.unwrap_or_default()
                )));
                None
            }
            None => None,
        };
        out.kube_api_content_type = set(&cc.content_type).map(str::to_owned);
    }
    if let Some(adj) = c.oom_score_adj {
        check(
            parse_oom_score_adj(&adj.to_string())
                .map(|a| out.oom_score_adj = Some(a))
                .map_err(|e| format!("oomScoreAdj: {e}")),
        );
    }
    out.bind_address_hard_fail = c.bind_address_hard_fail.filter(|b| *b);
    if let Some(logging) = &c.logging {
        // klog's levels: kube-proxy logs its details at 4 and its
        // per-object chatter at 5 and up; 0-3 is proxyd's default.
        out.verbose = match logging.verbosity.unwrap_or(0) {
            0..=3 => None,
            4..=5 => Some(1),
            _ => Some(2),
        };
        if let Some(format) = set(&logging.format) {
            check(match format {
                "text" => Ok(()),
                "json" => {
                    out.log_format = Some(LogFormat::Json);
                    Ok(())
                }
                other => Err(format!("logging.format {other:?}: text or json")),
            });
        }
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
    const KUBEADM: &str = include_str!("../../tests/fixtures/kubeadm-kube-proxy-config.conf");

    fn decode(text: &str) -> Result<(Settings, Vec<String>), String> {
        settings(text)
    }

    fn cidr(s: &str) -> ipnet::IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn kubeadms_file_means_kube_proxys_defaults() {
        let (s, notes) = decode(KUBEADM).unwrap();
        assert_eq!(
            notes,
            ["kube-proxy configuration: the iptables, ipvs, winkernel section(s) are for other modes; left out"]
        );
        assert_eq!(
            s,
            Settings {
                cluster_cidr: Some(vec![cidr("10.244.0.0/16")]),
                kubeconfig: Some("/var/lib/kube-proxy/kubeconfig.conf".into()),
                ..Settings::default()
            },
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
                    oomScoreAdj: -998\nbindAddressHardFail: true\nclientConnection: {qps: 50, burst: 100}\n\
                    logging: {verbosity: 4, format: json}\n";
        let (s, _) = decode(text).unwrap();
        let bind = |a: &str| Some(crate::settings::flags::parse_bind_address(a).unwrap());
        let secs = |n| Some(Duration::from_secs(n));
        assert_eq!(
            s,
            Settings {
                cluster_cidr: Some(vec![cidr("10.244.0.0/16"), cidr("fd00:10:244::/56")]),
                hostname_override: Some("node-7".into()),
                healthz_bind_address: bind("0.0.0.0:10256"),
                metrics_bind_address: bind("0.0.0.0:10249"),
                nodeport_addresses: Some(vec![crate::settings::flags::NodePortAddress::Cidr(cidr(
                    "192.168.0.0/24"
                ))]),
                masquerade_all: Some(true),
                sync_period: secs(60),
                min_sync_period: secs(2),
                conntrack_max_per_core: Some(0),
                conntrack_min: Some(1000),
                conntrack_tcp_timeout_established: secs(12 * 3600),
                conntrack_tcp_be_liberal: Some(true),
                config_sync_period: secs(600),
                detect_local_mode: Some(DetectLocalMode::InterfaceNamePrefix),
                pod_interface_name_prefix: Some("cali".into()),
                oom_score_adj: Some(-998),
                bind_address_hard_fail: Some(true),
                kube_api_qps: Some(50.0),
                kube_api_burst: Some(100),
                verbose: Some(1),
                log_format: Some(LogFormat::Json),
                ..Settings::default()
            }
        );
    }

    #[test]
    fn bad_files_say_which_field() {
        let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
        let err = |body: &str| decode(&format!("{head}{body}")).unwrap_err();
        let e = err("clusterCidr: 10.0.0.0/8\n");
        assert!(e.contains("unknown field `clusterCidr`"), "{e}");
        let e = err("nftables: {syncPeriod: 30s, sync: 1}\n");
        assert!(e.starts_with("nftables.sync: unknown field `sync`"), "{e}");
        assert!(err("mode: ipvs\n").contains("mode \"ipvs\""));
        assert!(err("detectLocalMode: Magic\n").contains("detectLocalMode \"Magic\""));
        assert!(err("detectLocalMode: BridgeInterface\n").contains("detectLocal.bridgeInterface"));
        assert!(err("healthzBindAddress: 0.0.0.0\n").contains("healthzBindAddress"));
        assert!(err("nftables: {masqueradeBit: 15}\n").contains("masqueradeBit 15"));
        let e = err("conntrack: {maxPerCore: many}\n");
        assert!(e.starts_with("conntrack.maxPerCore: "), "{e}");
        assert!(err("conntrack: {min: -1}\n").contains("conntrack.min -1: negative"));
        let e = err("nftables: {syncPeriod: soon}\n");
        assert!(e.starts_with("nftables.syncPeriod: \"soon\" is not a duration"), "{e}");
        assert!(err("clusterCIDR: 10.0.0.1\n").starts_with("clusterCIDR: \"10.0.0.1\" is an address"));
        assert!(err("oomScoreAdj: 2000\n").starts_with("oomScoreAdj: "));
        assert!(err("logging: {format: xml}\n").contains("logging.format \"xml\""));
        let e = decode("apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n").unwrap_err();
        assert!(e.contains("apiVersion"), "{e}");
    }
}
