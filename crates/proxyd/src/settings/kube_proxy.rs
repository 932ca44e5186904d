//! kube-proxy's configuration file (`daemon_sources::kube_proxy_file`)
//! turned into proxyd's settings: `--config` takes it as well as proxyd's
//! own format, so that kube-proxy's DaemonSet arguments
//! (`--config=/var/lib/kube-proxy/config.conf --hostname-override=…`) work.
//!
//! The file is decoded strictly (an unknown field is an error naming it, as
//! kube-proxy's decoder does). Most fields map one to one onto a flag
//! ([`FIELDS`], a table: the field, the flag, and how kube-proxy reads a
//! zero); the few whose meaning differs are read by a function each. Every
//! value is then checked by its flag's own parser, the problem naming
//! kube-proxy's field. Sections of other modes (`iptables`, `ipvs`,
//! `winkernel`) are accepted and left out with one INFO line; a `mode`
//! other than `nftables` (or empty) is an error.

use daemon_sources::kube_proxy_file::{API_VERSION, DetectLocal, KIND, KubeProxyConfiguration};
use serde_json::Value as Json;

use super::file::{Settings, Value, refusal};

/// How kube-proxy reads a field's zero.
#[derive(Clone, Copy)]
enum Zero {
    /// `""`, `0s`, `0` and `null` mean kube-proxy's default: not a setting.
    IsDefault,
    /// Only `null` is the default; an explicit zero is a value (a TCP
    /// timeout's `0s` leaves the kernel's, `maxPerCore: 0` the table).
    IsValue,
}

/// The fields that are one flag each: the field's path, the flag, and how
/// its zero reads. Lists and switches take their shape from the value.
const FIELDS: &[(&str, &str, Zero)] = &[
    ("hostnameOverride", "hostname-override", Zero::IsDefault),
    ("clusterCIDR", "cluster-cidr", Zero::IsDefault),
    ("nodePortAddresses", "nodeport-addresses", Zero::IsDefault),
    ("bindAddressHardFail", "bind-address-hard-fail", Zero::IsDefault),
    ("oomScoreAdj", "oom-score-adj", Zero::IsValue),
    ("configSyncPeriod", "config-sync-period", Zero::IsDefault),
    ("nftables.masqueradeAll", "masquerade-all", Zero::IsDefault),
    ("nftables.syncPeriod", "sync-period", Zero::IsDefault),
    ("nftables.minSyncPeriod", "min-sync-period", Zero::IsDefault),
    ("conntrack.maxPerCore", "conntrack-max-per-core", Zero::IsValue),
    ("conntrack.min", "conntrack-min", Zero::IsValue),
    (
        "conntrack.tcpEstablishedTimeout",
        "conntrack-tcp-timeout-established",
        Zero::IsValue,
    ),
    (
        "conntrack.tcpCloseWaitTimeout",
        "conntrack-tcp-timeout-close-wait",
        Zero::IsValue,
    ),
    ("conntrack.tcpBeLiberal", "conntrack-tcp-be-liberal", Zero::IsDefault),
    ("conntrack.udpTimeout", "conntrack-udp-timeout", Zero::IsDefault),
    (
        "conntrack.udpStreamTimeout",
        "conntrack-udp-timeout-stream",
        Zero::IsDefault,
    ),
    ("clientConnection.kubeconfig", "kubeconfig", Zero::IsDefault),
    ("clientConnection.qps", "kube-api-qps", Zero::IsDefault),
    ("clientConnection.burst", "kube-api-burst", Zero::IsDefault),
    ("clientConnection.contentType", "kube-api-content-type", Zero::IsDefault),
];

/// A field's value as its flag takes it (`None`: unset, or a zero that
/// means the default).
fn read(value: &Json, zero: Zero) -> Option<Value> {
    match value {
        Json::Bool(on) => on.then_some(Value::Switch(true)),
        Json::Number(n) => {
            let zero = n.as_f64() == Some(0.0) && matches!(zero, Zero::IsDefault);
            (!zero).then(|| Value::One(n.to_string()))
        }
        // A list in one string, as kube-proxy's clusterCIDR is.
        Json::String(text) if text.contains(',') => read(&Json::Array(text.split(',').map(Json::from).collect()), zero),
        Json::String(text) => {
            let text = text.trim();
            let unset = text.is_empty() || (matches!(zero, Zero::IsDefault) && is_zero(text));
            (!unset).then(|| Value::One(text.to_owned()))
        }
        Json::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .filter_map(Json::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            (!items.is_empty()).then_some(Value::Many(items))
        }
        Json::Null | Json::Object(_) => None,
    }
}

/// Whether a text is a zero kube-proxy reads as "use the default".
fn is_zero(text: &str) -> bool {
    matches!(text.trim(), "" | "0" | "0s")
}

/// A set, non-zero text (`""`, `0s`, `0` and `null` are kube-proxy's "use
/// the default").
fn set(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !is_zero(s))
}

/// What reading kube-proxy's file comes to: proxyd's settings with the
/// field each came from, the problems (each naming kube-proxy's field) and
/// the notes of what was left out.
#[derive(Default)]
struct Reading {
    out: Settings,
    fields: Vec<(&'static str, String)>,
    problems: Vec<String>,
    notes: Vec<String>,
}

impl Reading {
    /// Sets `flag` from kube-proxy's `field`.
    fn set(&mut self, field: impl ToString, flag: &'static str, value: Value) {
        self.fields.retain(|(f, _)| *f != flag);
        self.fields.push((flag, field.to_string()));
        self.out.set(flag, value);
    }
}

/// Decodes a document strictly and turns it into the settings of `root`'s
/// flags, with notes on what was left out (to log once logging is set
/// up); the problems name the field.
pub fn settings(text: &str, root: &clap::Command) -> Result<(Settings, Vec<String>), String> {
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
    let doc = serde_json::to_value(&c).map_err(|e| e.to_string())?;
    let mut r = Reading::default();
    for (field, flag, zero) in FIELDS {
        let at = format!("/{}", field.replace('.', "/"));
        if let Some(value) = doc.pointer(&at).and_then(|v| read(v, *zero)) {
            r.set(field, flag, value);
        }
    }
    for part in [mode, addresses, detect_local, differences] {
        part(&c, &mut r);
    }
    for (flag, field) in &r.fields {
        if let Some(why) = r.out.get(flag).and_then(|value| refusal(root, flag, value)) {
            r.problems.push(format!("{field}: {why}"));
        }
    }
    if r.problems.is_empty() {
        Ok((r.out, r.notes))
    } else {
        Err(r.problems.join("; "))
    }
}

/// The mode, and the sections of other modes.
fn mode(c: &KubeProxyConfiguration, r: &mut Reading) {
    if let Some(other) = set(&c.mode).filter(|m| *m != "nftables") {
        r.problems.push(format!(
            "mode {other:?}: proxyd is kube-proxy's nftables mode (set mode to nftables or leave it empty)"
        ));
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
        r.notes.push(format!(
            "kube-proxy configuration: the {} section(s) are for other modes; left out",
            ignored.join(", ")
        ));
    }
}

/// The addresses whose zero or shape kube-proxy reads its own way.
fn addresses(c: &KubeProxyConfiguration, r: &mut Reading) {
    // 0.0.0.0 and :: (kubeadm writes the first) mean what the default
    // does: the Node's addresses decide.
    if let Some(a) = set(&c.bind_address) {
        match a.parse::<std::net::IpAddr>() {
            Ok(ip) if ip.is_unspecified() => {}
            Ok(_) => r.set("bindAddress", "bind-address", Value::One(a.into())),
            Err(_) => r.problems.push(format!("bindAddress {a:?}: not an IP address")),
        }
    }
    for (field, value, flag) in [
        ("healthzBindAddress", &c.healthz_bind_address, "healthz-bind-address"),
        ("metricsBindAddress", &c.metrics_bind_address, "metrics-bind-address"),
    ] {
        let Some(addr) = set(value) else { continue };
        // kube-proxy takes an address without a port as that address on
        // its default port; proxyd wants it said.
        if addr.parse::<std::net::IpAddr>().is_ok() {
            r.problems.push(format!(
                "{field} {addr:?}: give ADDRESS:PORT (kube-proxy's default port is not assumed)"
            ));
        } else {
            r.set(field, flag, Value::One(addr.into()));
        }
    }
}

/// How traffic from this node's pods is told apart.
fn detect_local(c: &KubeProxyConfiguration, r: &mut Reading) {
    let unset = DetectLocal::default();
    let detect = c.detect_local.as_ref().unwrap_or(&unset);
    // clusterCIDR, when set, wins over detectLocal.clusterCIDRs.
    if r.out.get("cluster-cidr").is_none()
        && let Some(list) = detect.cluster_cidrs.as_ref()
        && let Some(value) = read(&Json::from(list.clone()), Zero::IsDefault)
    {
        r.set("detectLocal.clusterCIDRs", "cluster-cidr", value);
    }
    let Some(mode) = set(&c.detect_local_mode).filter(|m| *m != "ClusterCIDR") else {
        return;
    };
    let interface = match mode {
        "NodeCIDR" => None,
        "BridgeInterface" => Some(("bridgeInterface", &detect.bridge_interface, "pod-bridge-interface")),
        "InterfaceNamePrefix" => Some((
            "interfaceNamePrefix",
            &detect.interface_name_prefix,
            "pod-interface-name-prefix",
        )),
        other => {
            return r.problems.push(format!(
                "detectLocalMode {other:?}: not one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix"
            ));
        }
    };
    r.set("detectLocalMode", "detect-local-mode", Value::One(mode.into()));
    if let Some((what, value, flag)) = interface {
        match set(value) {
            Some(name) => r.set(format!("detectLocal.{what}"), flag, Value::One(name.into())),
            None => r.problems.push(format!("detectLocalMode needs detectLocal.{what}")),
        }
    }
}

/// Fields whose meaning differs from the flag's: said, refused or worded.
fn differences(c: &KubeProxyConfiguration, r: &mut Reading) {
    if let Some(bit) = c.nftables.as_ref().and_then(|n| n.masquerade_bit).filter(|b| *b != 14) {
        r.problems.push(format!(
            "nftables.masqueradeBit {bit}: proxyd marks with bit 14 (kube-proxy's default)"
        ));
    }
    if let Some(logging) = &c.logging {
        // klog's levels: kube-proxy logs its details at 4 and its
        // per-object chatter at 5 and up; 0-3 is proxyd's default.
        match logging.verbosity.unwrap_or(0) {
            0..=3 => {}
            4..=5 => r.set("logging.verbosity", "verbose", Value::Count(1)),
            _ => r.set("logging.verbosity", "verbose", Value::Count(2)),
        }
        match set(&logging.format) {
            None | Some("text") => {}
            Some("json") => r.set("logging.format", "log-format", Value::One("json".into())),
            Some(other) => r.problems.push(format!("logging.format {other:?}: text or json")),
        }
    }
    // As the flag takes them; the ones proxyd does not have are said at
    // start, like the flag's.
    if let Some(gates) = c.feature_gates.as_ref().filter(|g| !g.is_empty()) {
        let list = gates.iter().map(|(name, on)| format!("{name}={on}")).collect();
        r.set("featureGates", "feature-gates", Value::Many(list));
    }
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

    /// What kubeadm 1.38 writes into the `kube-proxy` ConfigMap as
    /// `config.conf` (its defaults; `clusterCIDR` from the pod subnet).
    const KUBEADM: &str = include_str!("../../tests/fixtures/kubeadm-kube-proxy-config.conf");
    /// What kubeadm 1.36 wrote (1.38 adds `iptables.snatNodeInternalIP`).
    const KUBEADM_1_36: &str = include_str!("../../tests/fixtures/kubeadm-1.36-kube-proxy-config.conf");

    fn decode(text: &str) -> Result<(Settings, Vec<String>), String> {
        settings(text, &crate::settings::command())
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
        for (version, file) in [("1.38", KUBEADM), ("1.36", KUBEADM_1_36)] {
            let (s, notes) = decode(file).unwrap_or_else(|e| panic!("kubeadm {version}: {e}"));
            assert_eq!(
                notes,
                ["kube-proxy configuration: the iptables, ipvs, winkernel section(s) are for other modes; left out"]
            );
            let mut want = Settings::default();
            want.set("cluster-cidr", Value::One("10.244.0.0/16".into()));
            want.set("kubeconfig", Value::One("/var/lib/kube-proxy/kubeconfig.conf".into()));
            assert_eq!(
                s, want,
                "kubeadm {version}: every zero value is the default; the rest maps"
            );
            let mut want = defaults();
            want.proxy.cluster_cidr = vec![cidr("10.244.0.0/16")];
            want.source.kubeconfig = Some("/var/lib/kube-proxy/kubeconfig.conf".into());
            assert_eq!(
                format!("{:?}", run_with(file, &[])),
                format!("{want:?}"),
                "kubeadm {version}"
            );
        }
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
        let e = err("conntrack: {min: -1}\n");
        assert!(e.starts_with("conntrack.min: \"-1\""), "{e}");
        let e = err("nftables: {syncPeriod: soon}\n");
        assert!(e.starts_with("nftables.syncPeriod: \"soon\" is not a duration"), "{e}");
        assert!(err("clusterCIDR: 10.0.0.1\n").starts_with("clusterCIDR: \"10.0.0.1\" is an address"));
        assert!(err("oomScoreAdj: 2000\n").starts_with("oomScoreAdj: "));
        assert!(err("logging: {format: xml}\n").contains("logging.format \"xml\""));
        let e = decode("apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n").unwrap_err();
        assert!(e.contains("apiVersion"), "{e}");
    }
}
