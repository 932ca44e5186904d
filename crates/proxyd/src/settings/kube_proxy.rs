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

use daemon_sources::kube_proxy_file::{API_VERSION, DetectLocal, KIND, KubeProxyConfiguration};

use super::file::{Settings, Value};
use crate::settings::flags::{
    parse_bind_address, parse_cidr, parse_duration, parse_interface, parse_nodeport_address, parse_oom_score_adj,
};

/// A set, non-zero value (`""`, `0s`, `0` and `null` are kube-proxy's
/// "use the default").
fn set(v: &Option<String>) -> Option<&str> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "0s" && *s != "0")
}

/// A set, non-zero duration (`""`, `0s` and `null` are kube-proxy's "use
/// the default"), checked; the problem names the field.
fn duration(field: &str, value: &Option<String>) -> Result<Option<Value>, String> {
    set(value)
        .map(|v| parse_duration(v).map(|_| one(v)).map_err(|e| format!("{field}: {e}")))
        .transpose()
}

/// A list of CIDRs, checked; the problem names the field.
fn cidrs<'a>(field: &str, items: impl IntoIterator<Item = &'a str>) -> Result<Value, String> {
    let items: Vec<&str> = items.into_iter().map(str::trim).filter(|s| !s.is_empty()).collect();
    for item in &items {
        parse_cidr(item).map_err(|e| format!("{field}: {e}"))?;
    }
    Ok(Value::Many(items.into_iter().map(str::to_owned).collect()))
}

/// A switch kube-proxy's file turns on (false is the default: not a
/// setting).
fn switch(on: Option<bool>) -> Option<Value> {
    on.filter(|on| *on).map(Value::Switch)
}

/// One value, as the flag takes it.
fn one(text: impl ToString) -> Value {
    Value::One(text.to_string())
}

/// What reading kube-proxy's file comes to: proxyd's settings, the
/// problems (each naming kube-proxy's field) and the notes of what was
/// left out.
#[derive(Default)]
struct Reading {
    out: Settings,
    problems: Vec<String>,
    notes: Vec<String>,
}

impl Reading {
    /// Each setting is checked here, so that a problem names kube-proxy's
    /// field; the flags' parsers read the values again.
    fn check(&mut self, flag: &str, r: Result<Option<Value>, String>) {
        match r {
            Ok(Some(value)) => self.out.set(flag, value),
            Ok(None) => {}
            Err(e) => self.problems.push(e),
        }
    }
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
    let mut r = Reading::default();
    for part in [
        mode,
        addresses,
        detect_local,
        node_ports,
        nftables_and_conntrack,
        durations,
        client_and_process,
        left_out,
    ] {
        part(&c, &mut r);
    }
    if r.problems.is_empty() {
        Ok((r.out, r.notes))
    } else {
        Err(r.problems.join("; "))
    }
}

/// The mode, and the sections of other modes.
fn mode(c: &KubeProxyConfiguration, r: &mut Reading) {
    r.check(
        "proxy-mode",
        match set(&c.mode) {
            None | Some("nftables") => Ok(None),
            Some(other) => Err(format!(
                "mode {other:?}: proxyd is kube-proxy's nftables mode (set mode to nftables or leave it empty)"
            )),
        },
    );
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
        r.notes.push(format!(
            "kube-proxy configuration: the {} section(s) are for other modes; left out",
            ignored.join(", ")
        ));
    }
}

/// This node's name and the addresses proxyd listens on or serves.
fn addresses(c: &KubeProxyConfiguration, r: &mut Reading) {
    r.check("hostname-override", Ok(set(&c.hostname_override).map(one)));
    // 0.0.0.0 and :: (kubeadm writes the first) mean what the default
    // does: the Node's addresses decide.
    r.check(
        "bind-address",
        set(&c.bind_address)
            .map(|a| match a.parse::<std::net::IpAddr>() {
                Ok(ip) if ip.is_unspecified() => Ok(None),
                Ok(_) => Ok(Some(one(a))),
                Err(_) => Err(format!("bindAddress {a:?}: not an IP address")),
            })
            .transpose()
            .map(Option::flatten),
    );
    for (field, value, flag) in [
        ("healthzBindAddress", &c.healthz_bind_address, "healthz-bind-address"),
        ("metricsBindAddress", &c.metrics_bind_address, "metrics-bind-address"),
    ] {
        let Some(addr) = set(value) else { continue };
        // kube-proxy takes an address without a port as that address on
        // its default port; proxyd wants it said.
        let checked = if addr.parse::<std::net::IpAddr>().is_ok() {
            Err(format!(
                "{field} {addr:?}: give ADDRESS:PORT (kube-proxy's default port is not assumed)"
            ))
        } else {
            parse_bind_address(addr)
                .map(|_| Some(one(addr)))
                .map_err(|e| format!("{field}: {e}"))
        };
        r.check(flag, checked);
    }
    if let Some(list) = set(&c.cluster_cidr) {
        r.check("cluster-cidr", cidrs("clusterCIDR", list.split(',')).map(Some));
    }
}

/// How traffic from this node's pods is told apart.
fn detect_local(c: &KubeProxyConfiguration, r: &mut Reading) {
    let unset = DetectLocal::default();
    let detect = c.detect_local.as_ref().unwrap_or(&unset);
    let needs = |value: &Option<String>, what: &str| {
        set(value)
            .map(|v| parse_interface(v).map_err(|e| format!("detectLocal.{what}: {e}")))
            .unwrap_or_else(|| Err(format!("detectLocalMode needs detectLocal.{what}")))
    };
    let mode = match set(&c.detect_local_mode) {
        None | Some("ClusterCIDR") => Ok(None),
        Some("NodeCIDR") => Ok(Some(("NodeCIDR", None))),
        Some("BridgeInterface") => needs(&detect.bridge_interface, "bridgeInterface")
            .map(|b| Some(("BridgeInterface", Some(("pod-bridge-interface", b))))),
        Some("InterfaceNamePrefix") => needs(&detect.interface_name_prefix, "interfaceNamePrefix")
            .map(|p| Some(("InterfaceNamePrefix", Some(("pod-interface-name-prefix", p))))),
        Some(other) => Err(format!(
            "detectLocalMode {other:?}: not one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix"
        )),
    };
    match mode {
        Ok(Some((mode, interface))) => {
            r.out.set("detect-local-mode", one(mode));
            if let Some((flag, name)) = interface {
                r.out.set(flag, one(name));
            }
        }
        Ok(None) => {}
        Err(e) => r.check("detect-local-mode", Err(e)),
    }
    if r.out.get("cluster-cidr").is_none()
        && let Some(list) = detect.cluster_cidrs.as_ref().filter(|l| !l.is_empty())
    {
        let checked = cidrs("detectLocal.clusterCIDRs", list.iter().map(String::as_str));
        r.check("cluster-cidr", checked.map(Some));
    }
}

/// Where node ports answer.
fn node_ports(c: &KubeProxyConfiguration, r: &mut Reading) {
    // `primary` or CIDRs, as the flag takes them (null: the default, primary).
    if let Some(list) = c.node_port_addresses.as_ref().filter(|l| !l.is_empty()) {
        let checked = list
            .iter()
            .map(|a| {
                parse_nodeport_address(a)
                    .map(|_| a.trim().to_owned())
                    .map_err(|e| format!("nodePortAddresses: {e}"))
            })
            .collect::<Result<_, _>>();
        r.check("nodeport-addresses", checked.map(|l| Some(Value::Many(l))));
    }
}

/// The nftables and conntrack sections.
fn nftables_and_conntrack(c: &KubeProxyConfiguration, r: &mut Reading) {
    if let Some(n) = &c.nftables {
        r.check("masquerade-all", Ok(switch(n.masquerade_all)));
        if let Some(bit) = n.masquerade_bit.filter(|b| *b != 14) {
            r.check(
                "masquerade-bit",
                Err(format!(
                    "nftables.masqueradeBit {bit}: proxyd marks with bit 14 (kube-proxy's default)"
                )),
            );
        }
    }
    if let Some(ct) = &c.conntrack {
        for (field, value, flag) in [
            ("conntrack.maxPerCore", ct.max_per_core, "conntrack-max-per-core"),
            ("conntrack.min", ct.min, "conntrack-min"),
        ] {
            let checked = match value.map(u64::try_from) {
                Some(Ok(v)) => Ok(Some(one(v))),
                Some(Err(_)) => Err(format!("{field} {}: negative", value.unwrap_or_default())),
                None => Ok(None),
            };
            r.check(flag, checked);
        }
        // The TCP timeouts: null is the default (24h, 1h), an explicit 0s
        // leaves the kernel's value.
        for (field, value, flag) in [
            (
                "conntrack.tcpEstablishedTimeout",
                &ct.tcp_established_timeout,
                "conntrack-tcp-timeout-established",
            ),
            (
                "conntrack.tcpCloseWaitTimeout",
                &ct.tcp_close_wait_timeout,
                "conntrack-tcp-timeout-close-wait",
            ),
        ] {
            if let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
                let checked = parse_duration(v)
                    .map(|_| Some(one(v)))
                    .map_err(|e| format!("{field}: {e}"));
                r.check(flag, checked);
            }
        }
        r.check("conntrack-tcp-be-liberal", Ok(switch(ct.tcp_be_liberal)));
    }
}

/// The periods and timeouts.
fn durations(c: &KubeProxyConfiguration, r: &mut Reading) {
    // Durations whose zero is kube-proxy's default (the UDP timeouts' 0s,
    // the default, leaves the kernel's value).
    let (nft, ct) = (c.nftables.as_ref(), c.conntrack.as_ref());
    let durations = [
        ("sync-period", "nftables.syncPeriod", nft.map(|n| &n.sync_period)),
        (
            "min-sync-period",
            "nftables.minSyncPeriod",
            nft.map(|n| &n.min_sync_period),
        ),
        ("config-sync-period", "configSyncPeriod", Some(&c.config_sync_period)),
        (
            "conntrack-udp-timeout",
            "conntrack.udpTimeout",
            ct.map(|ct| &ct.udp_timeout),
        ),
        (
            "conntrack-udp-timeout-stream",
            "conntrack.udpStreamTimeout",
            ct.map(|ct| &ct.udp_stream_timeout),
        ),
    ];
    for (flag, field, value) in durations {
        if let Some(value) = value {
            r.check(flag, duration(field, value));
        }
    }
}

/// The API client, the process and its logging, the feature gates.
fn client_and_process(c: &KubeProxyConfiguration, r: &mut Reading) {
    if let Some(cc) = &c.client_connection {
        r.check("kubeconfig", Ok(set(&cc.kubeconfig).map(one)));
        r.check("kube-api-qps", Ok(cc.qps.filter(|q| *q != 0.0).map(one)));
        let burst = match cc.burst.filter(|b| *b != 0).map(u32::try_from) {
            Some(Ok(b)) => Ok(Some(one(b))),
            Some(Err(_)) => Err(format!(
                "clientConnection.burst {}: out of range",
                cc.burst.unwrap_or_default()
            )),
            None => Ok(None),
        };
        r.check("kube-api-burst", burst);
        r.check("kube-api-content-type", Ok(set(&cc.content_type).map(one)));
    }
    if let Some(adj) = c.oom_score_adj {
        let checked = parse_oom_score_adj(&adj.to_string())
            .map(|a| Some(one(a)))
            .map_err(|e| format!("oomScoreAdj: {e}"));
        r.check("oom-score-adj", checked);
    }
    r.check("bind-address-hard-fail", Ok(switch(c.bind_address_hard_fail)));
    if let Some(logging) = &c.logging {
        // klog's levels: kube-proxy logs its details at 4 and its
        // per-object chatter at 5 and up; 0-3 is proxyd's default.
        let verbose = match logging.verbosity.unwrap_or(0) {
            0..=3 => None,
            4..=5 => Some(Value::Count(1)),
            _ => Some(Value::Count(2)),
        };
        r.check("verbose", Ok(verbose));
        let format = match set(&logging.format) {
            None | Some("text") => Ok(None),
            Some("json") => Ok(Some(one("json"))),
            Some(other) => Err(format!("logging.format {other:?}: text or json")),
        };
        r.check("log-format", format);
    }
    // As the flag takes them; the ones proxyd does not have are said at
    // start, like the flag's.
    if let Some(gates) = c.feature_gates.as_ref().filter(|g| !g.is_empty()) {
        let list = gates.iter().map(|(name, on)| format!("{name}={on}")).collect();
        r.check("feature-gates", Ok(Some(Value::Many(list))));
    }
}

/// Settings with nothing to do here: said, not silently dropped.
fn left_out(c: &KubeProxyConfiguration, r: &mut Reading) {
    // Settings with nothing to do here: said, not silently dropped.
    if c.enable_profiling == Some(true) {
        r.notes
            .push("kube-proxy configuration: enableProfiling is left out (proxyd serves no profiling endpoint)".into());
    }
    for (field, value) in [
        ("showHiddenMetricsForVersion", &c.show_hidden_metrics_for_version),
        ("portRange", &c.port_range),
    ] {
        if let Some(v) = set(value) {
            r.notes.push(format!(
                "kube-proxy configuration: {field} {v:?} is left out (proxyd has no hidden metrics and no port range)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::settings::flags::{Command, DetectLocalMode, NodePortAddress, RunArgs};

    /// What kubeadm 1.36 writes into the `kube-proxy` ConfigMap as
    /// `config.conf` (its defaults; `clusterCIDR` from the pod subnet).
    const KUBEADM: &str = include_str!("../../tests/fixtures/kubeadm-kube-proxy-config.conf");

    fn decode(text: &str) -> Result<(Settings, Vec<String>), String> {
        settings(text)
    }

    fn cidr(s: &str) -> ipnet::IpNet {
        s.parse().unwrap()
    }

    /// What `proxyd run` parses with this text as its `--config` file (and
    /// `extra` arguments).
    fn run_with(text: &str, extra: &[&str]) -> RunArgs {
        static FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("proxyd-kube-proxy-config-{}-{n}.yaml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let mut args = vec!["proxyd".to_owned(), "run".to_owned(), "--config".to_owned()];
        args.push(path.display().to_string());
        args.extend(extra.iter().map(|a| a.to_string()));
        let parsed = crate::settings::parse(args.into_iter().map(Into::into).collect());
        std::fs::remove_file(&path).ok();
        match parsed.unwrap_or_else(|e| panic!("{e}")).cli.command {
            Command::Run(run) => *run,
            other => panic!("not run: {other:?}"),
        }
    }

    fn defaults() -> RunArgs {
        match crate::settings::parse(vec!["proxyd".into(), "run".into()])
            .unwrap()
            .cli
            .command
        {
            Command::Run(run) => *run,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn kubeadms_file_means_kube_proxys_defaults() {
        let (s, notes) = decode(KUBEADM).unwrap();
        assert_eq!(
            notes,
            ["kube-proxy configuration: the iptables, ipvs, winkernel section(s) are for other modes; left out"]
        );
        let mut want = Settings::default();
        want.set("cluster-cidr", Value::Many(vec!["10.244.0.0/16".into()]));
        want.set("kubeconfig", Value::One("/var/lib/kube-proxy/kubeconfig.conf".into()));
        assert_eq!(s, want, "every zero value is the default; the rest maps");
        let mut want = defaults();
        want.proxy.cluster_cidr = vec![cidr("10.244.0.0/16")];
        want.source.kubeconfig = Some("/var/lib/kube-proxy/kubeconfig.conf".into());
        assert_eq!(format!("{:?}", run_with(KUBEADM, &[])), format!("{want:?}"));
    }

    #[test]
    fn set_fields_become_proxyd_settings() {
        let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n\
                    clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\nhostnameOverride: node-7\n\
                    healthzBindAddress: 0.0.0.0:10256\nmetricsBindAddress: 0.0.0.0:10249\n\
                    nodePortAddresses: [192.168.0.0/24, localhost]\n\
                    featureGates: {KubeProxyNFTablesLocalhostNodePorts: false, NFTablesNetlink: true}\n\
                    nftables: {masqueradeAll: true, masqueradeBit: 14, syncPeriod: 1m, minSyncPeriod: 2s}\n\
                    conntrack: {maxPerCore: 0, min: 1000, tcpEstablishedTimeout: 12h, tcpBeLiberal: true}\n\
                    configSyncPeriod: 10m\niptables: {masqueradeAll: false}\n\
                    detectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: cali}\n\
                    oomScoreAdj: -998\nbindAddressHardFail: true\nclientConnection: {qps: 50, burst: 100}\n\
                    logging: {verbosity: 4, format: json}\n";
        let run = run_with(text, &[]);
        let bind = |a: &str| crate::settings::flags::parse_bind_address(a).unwrap();
        let secs = Duration::from_secs;
        let mut want = defaults();
        want.proxy.cluster_cidr = vec![cidr("10.244.0.0/16"), cidr("fd00:10:244::/56")];
        want.proxy.hostname_override = Some("node-7".into());
        want.healthz_bind_address = bind("0.0.0.0:10256");
        want.metrics_bind_address = bind("0.0.0.0:10249");
        want.proxy.nodeport_addresses = vec![
            NodePortAddress::Cidr(cidr("192.168.0.0/24")),
            NodePortAddress::Localhost,
        ];
        want.feature_gates = ["KubeProxyNFTablesLocalhostNodePorts=false", "NFTablesNetlink=true"]
            .iter()
            .map(|g| crate::settings::flags::parse_feature_gate(g).unwrap())
            .collect();
        want.proxy.masquerade_all = true;
        want.sync_period = secs(60);
        want.min_sync_period = Some(secs(2));
        want.conntrack.conntrack_max_per_core = 0;
        want.conntrack.conntrack_min = 1000;
        want.conntrack.conntrack_tcp_timeout_established = secs(12 * 3600);
        want.conntrack.conntrack_tcp_be_liberal = true;
        want.config_sync_period = secs(600);
        want.proxy.detect_local_mode = DetectLocalMode::InterfaceNamePrefix;
        want.proxy.pod_interface_name_prefix = Some("cali".into());
        want.kube_proxy.oom_score_adj = -998;
        want.kube_proxy.bind_address_hard_fail = true;
        want.kube_proxy.kube_api_qps = 50.0;
        want.kube_proxy.kube_api_burst = 100;
        assert_eq!(format!("{run:?}"), format!("{want:?}"));
        let (s, _) = decode(text).unwrap();
        assert_eq!(s.get("verbose"), Some(&Value::Count(1)));
        assert_eq!(s.get("log-format"), Some(&Value::One("json".into())));

        // The rest of the fields proxyd reads, and the command line still
        // winning over the file.
        let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                    detectLocalMode: BridgeInterface\ndetectLocal: {bridgeInterface: cbr0, clusterCIDRs: [10.9.0.0/16]}\n\
                    conntrack: {tcpCloseWaitTimeout: 0s, udpTimeout: 30s, udpStreamTimeout: 2m}\n\
                    clientConnection: {contentType: application/json, kubeconfig: /k}\n";
        let run = run_with(text, &["--conntrack-udp-timeout", "5s"]);
        let mut want = defaults();
        want.proxy.detect_local_mode = DetectLocalMode::BridgeInterface;
        want.proxy.pod_bridge_interface = Some("cbr0".into());
        want.proxy.cluster_cidr = vec![cidr("10.9.0.0/16")];
        want.conntrack.conntrack_tcp_timeout_close_wait = Duration::ZERO;
        want.conntrack.conntrack_udp_timeout = secs(5);
        want.conntrack.conntrack_udp_timeout_stream = secs(120);
        want.kube_proxy.kube_api_content_type = "application/json".into();
        want.source.kubeconfig = Some("/k".into());
        assert_eq!(format!("{run:?}"), format!("{want:?}"));
        let run = run_with(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\ndetectLocalMode: NodeCIDR\n",
            &[],
        );
        assert_eq!(run.proxy.detect_local_mode, DetectLocalMode::NodeCidr);
    }

    #[test]
    fn bind_address_sets_the_primary_family_and_zero_means_the_default() {
        let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
        let run = run_with(&format!("{head}bindAddress: fd00::5\n"), &[]);
        assert_eq!(run.bind_address, "fd00::5".parse::<std::net::IpAddr>().unwrap());
        let run = run_with(&format!("{head}bindAddress: \"::\"\n"), &[]);
        assert_eq!(run.bind_address, defaults().bind_address);
        assert!(
            decode(&format!("{head}bindAddress: node-1\n"))
                .unwrap_err()
                .contains("bindAddress \"node-1\"")
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
