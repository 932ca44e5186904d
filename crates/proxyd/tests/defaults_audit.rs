//! The defaults audit of `docs/flags.md` ("Defaults audit"), checked: every
//! field of kubeadm's kube-proxy file has a row; proxyd's column is what
//! `run` parses from no flags at all and from kubeadm's file; a row that
//! says *same* holds one value in both columns.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::time::Duration;

use clap::ValueEnum;
use proxyd::{Command, RunArgs};

const TABLE: &str = include_str!("../../../docs/flags.md");
const KUBEADM: &str = include_str!("fixtures/kubeadm-kube-proxy-config.conf");

/// A row of the audit table: kube-proxy's default, proxyd's, and the verdict.
struct Row {
    kube_proxy: String,
    proxyd: String,
    same: bool,
}

/// The first `…` span of a cell (`""` stands for the empty value).
fn value(cell: &str) -> String {
    let inner = cell.split('`').nth(1).unwrap_or_default();
    if inner == "\"\"" {
        String::new()
    } else {
        inner.to_owned()
    }
}

fn table() -> BTreeMap<String, Row> {
    let section = TABLE.split("## Defaults audit").nth(1).expect("the audit section");
    section
        .lines()
        .filter(|l| l.starts_with("| `") || l.starts_with("| families"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            assert!(cells.len() >= 4, "a row of four cells: {l}");
            let field = if cells[0].starts_with("| families") {
                "families".to_owned()
            } else {
                value(cells[0])
            };
            let row = Row {
                kube_proxy: value(cells[1]),
                proxyd: value(cells[2]),
                same: cells[3].starts_with("same"),
            };
            (field, row)
        })
        .collect()
}

/// Go's spelling of a whole duration, as the table writes it.
fn go(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".into(),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn address(a: Option<std::net::SocketAddr>) -> String {
    a.map(|a| a.to_string()).unwrap_or_default()
}

/// What `run` does, per field of the table, read from its parsed flags
/// (and `-v`'s count).
fn effective(verbose: u8, run: &RunArgs) -> BTreeMap<&'static str, String> {
    let c = &run.conntrack;
    let p = &run.proxy;
    BTreeMap::from([
        ("bindAddress", run.bind_address.to_string()),
        ("bindAddressHardFail", run.kube_proxy.bind_address_hard_fail.to_string()),
        ("clientConnection.burst", run.kube_proxy.kube_api_burst.to_string()),
        (
            "clientConnection.contentType",
            run.kube_proxy.kube_api_content_type.clone(),
        ),
        ("clientConnection.qps", run.kube_proxy.kube_api_qps.to_string()),
        (
            "clientConnection.kubeconfig",
            run.source
                .kubeconfig
                .as_ref()
                .map_or("in-cluster".into(), |k| k.display().to_string()),
        ),
        (
            "clusterCIDR",
            p.cluster_cidr
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("configSyncPeriod", go(run.config_sync_period)),
        ("conntrack.maxPerCore", c.conntrack_max_per_core.to_string()),
        ("conntrack.min", c.conntrack_min.to_string()),
        ("conntrack.tcpBeLiberal", c.conntrack_tcp_be_liberal.to_string()),
        ("conntrack.tcpCloseWaitTimeout", go(c.conntrack_tcp_timeout_close_wait)),
        (
            "conntrack.tcpEstablishedTimeout",
            go(c.conntrack_tcp_timeout_established),
        ),
        ("conntrack.udpStreamTimeout", go(c.conntrack_udp_timeout_stream)),
        ("conntrack.udpTimeout", go(c.conntrack_udp_timeout)),
        (
            "detectLocal.bridgeInterface",
            p.pod_bridge_interface.clone().unwrap_or_default(),
        ),
        (
            "detectLocal.interfaceNamePrefix",
            p.pod_interface_name_prefix.clone().unwrap_or_default(),
        ),
        (
            "detectLocalMode",
            p.detect_local_mode
                .to_possible_value()
                .map(|v| v.get_name().to_owned())
                .unwrap_or_default(),
        ),
        ("healthzBindAddress", address(run.healthz_bind_address.0)),
        ("hostnameOverride", p.hostname_override.clone().unwrap_or_default()),
        ("metricsBindAddress", address(run.metrics_bind_address.0)),
        ("mode", run.kube_proxy.proxy_mode.clone()),
        ("nftables.masqueradeAll", p.masquerade_all.to_string()),
        (
            "nftables.masqueradeBit",
            nft_dataplane::names::MASQUERADE_MARK.trailing_zeros().to_string(),
        ),
        (
            "nftables.minSyncPeriod",
            run.min_sync_period.map_or("paced by cost".into(), go),
        ),
        ("nftables.syncPeriod", go(run.sync_period)),
        (
            "nodePortAddresses",
            if p.nodeport_primary() {
                "primary".into()
            } else {
                p.nodeport_addresses
                    .iter()
                    .flat_map(|a| a.networks())
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            },
        ),
        ("oomScoreAdj", run.kube_proxy.oom_score_adj.to_string()),
        ("logging.verbosity", verbose.to_string()),
    ])
}

fn run_of(args: Vec<std::ffi::OsString>) -> (u8, RunArgs) {
    let cli = proxyd::parse_command_line(args).unwrap_or_else(|e| panic!("{e}")).cli;
    match cli.command {
        Command::Run(run) => (cli.log.verbose, *run),
        other => panic!("not run: {other:?}"),
    }
}

/// Every leaf of kubeadm's file, as `section.field`.
fn kubeadm_fields() -> Vec<String> {
    let value: serde_json::Value = serde_saphyr::from_str(KUBEADM).expect("kubeadm's file");
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&path, v, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }
    let mut out = Vec::new();
    walk("", &value, &mut out);
    out.retain(|f| f != "apiVersion" && f != "kind");
    out
}

#[test]
fn every_field_has_its_row_and_proxyd_does_what_the_table_says() {
    let table = table();
    for field in kubeadm_fields() {
        let whole = field
            .split('.')
            .scan(String::new(), |prefix, part| {
                if !prefix.is_empty() {
                    prefix.push('.');
                }
                prefix.push_str(part);
                Some(format!("{prefix}.*"))
            })
            .any(|section| table.contains_key(&section));
        assert!(table.contains_key(&field) || whole, "no row for {field}");
    }
    for (field, row) in &table {
        if row.same {
            assert_eq!(row.kube_proxy, row.proxyd, "{field}: the row says same");
        }
    }
    let kubeadm_path = std::env::temp_dir().join(format!("proxyd-audit-{}.conf", std::process::id()));
    std::fs::write(&kubeadm_path, KUBEADM).expect("a scratch file");
    let cases = [
        ("no flags", run_of(vec!["proxyd".into(), "run".into()])),
        (
            "kubeadm's file",
            run_of(vec![
                "proxyd".into(),
                "run".into(),
                "--config".into(),
                kubeadm_path.clone().into(),
            ]),
        ),
    ];
    let _ = std::fs::remove_file(&kubeadm_path);
    for (case, (verbose, run)) in cases {
        for (field, got) in effective(verbose, &run) {
            let row = table.get(field).unwrap_or_else(|| panic!("no row for {field}"));
            // kubeadm's file names a cluster network and its kubeconfig:
            // the defaults' column does not hold them.
            if case == "kubeadm's file" && matches!(field, "clusterCIDR" | "clientConnection.kubeconfig") {
                continue;
            }
            assert_eq!(got, row.proxyd, "{case}: {field}");
        }
    }
    // The families depend on the node: `run::families` checks the rule,
    // and a root test each kind of node.
    assert_eq!(table["families"].proxyd, "both where IPv6 is enabled");
}
