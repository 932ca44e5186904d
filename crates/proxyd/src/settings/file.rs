//! `--config FILE` in proxyd's own format (a mapping of long flag names to
//! values), decoded into [`Settings`], the typed value both file formats
//! become; [`Settings::apply`] merges it under the command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, ValueEnum};
use serde::{Deserialize, Deserializer};
use slice_model::IpFamily;

use crate::logging::LogFormat;
use crate::settings::flags::{BindAddress, Cli, Command, DetectLocalMode, NodePortAddress, ProxyArgs, SourceArgs};

/// Decodes YAML text into `T` straight from the text, so that a value is
/// read as its field's type asks (`node-zone: no` is the string "no", not
/// YAML 1.1's false); a problem names the field's path.
pub fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    // The path is put into the message here: the YAML library's error
    // gives a place in the text, not the field.
    serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de)
            .map_err(|e| serde::de::Error::custom(format_args!("{}: {}", e.path(), e.inner())))
    })
    .map_err(|e| e.to_string())
}

/// Every setting a `--config` file can make, typed; `None` is "not set".
/// Names are the long flags' (`hostname-override`); each subcommand takes
/// the ones it has a flag for and leaves the rest (one file serves `run`,
/// `render` and `explain`).
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[allow(
    missing_docs,
    reason = "each field is the flag of the same name; `proxyd run --help` says what it does"
)]
pub struct Settings {
    pub verbose: Option<u8>,
    #[serde(deserialize_with = "de::log_format")]
    pub log_format: Option<LogFormat>,

    pub manifests: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,

    pub hostname_override: Option<String>,
    pub service_proxy_name: Option<String>,
    pub multus: Option<bool>,
    #[serde(deserialize_with = "de::family")]
    pub ip_family: Option<IpFamily>,
    #[serde(deserialize_with = "de::cidrs")]
    pub cluster_cidr: Option<Vec<ipnet::IpNet>>,
    #[serde(deserialize_with = "de::detect_local_mode")]
    pub detect_local_mode: Option<DetectLocalMode>,
    #[serde(deserialize_with = "de::interface")]
    pub pod_bridge_interface: Option<String>,
    #[serde(deserialize_with = "de::interface")]
    pub pod_interface_name_prefix: Option<String>,
    pub masquerade_all: Option<bool>,
    #[serde(deserialize_with = "de::nodeport_addresses")]
    pub nodeport_addresses: Option<Vec<NodePortAddress>>,
    #[serde(deserialize_with = "de::cidrs")]
    pub service_cidr: Option<Vec<ipnet::IpNet>>,
    pub node_zone: Option<String>,

    pub nft_only: Option<bool>,

    #[serde(deserialize_with = "de::duration")]
    pub min_sync_period: Option<Duration>,
    #[serde(deserialize_with = "de::duration")]
    pub sync_period: Option<Duration>,
    pub list_page_size: Option<u32>,
    #[serde(deserialize_with = "de::duration")]
    pub config_sync_period: Option<Duration>,
    pub dry_run: Option<bool>,
    pub dry_run_dir: Option<PathBuf>,
    pub netns: Option<String>,
    pub pod_netns_dir: Option<PathBuf>,
    pub container_runtime_endpoint: Option<String>,
    pub host_prefix: Option<PathBuf>,
    #[serde(deserialize_with = "de::families")]
    pub ip_families: Option<Vec<IpFamily>>,
    #[serde(deserialize_with = "de::bind_address")]
    pub healthz_bind_address: Option<BindAddress>,
    #[serde(deserialize_with = "de::bind_address")]
    pub metrics_bind_address: Option<BindAddress>,
    pub no_conntrack: Option<bool>,
    #[serde(deserialize_with = "de::nft_writer")]
    pub nft_writer: Option<linux_dataplane::NftWriter>,

    pub conntrack_max_per_core: Option<u64>,
    pub conntrack_min: Option<u64>,
    #[serde(deserialize_with = "de::duration")]
    pub conntrack_tcp_timeout_established: Option<Duration>,
    #[serde(deserialize_with = "de::duration")]
    pub conntrack_tcp_timeout_close_wait: Option<Duration>,
    pub conntrack_tcp_be_liberal: Option<bool>,
    #[serde(deserialize_with = "de::duration")]
    pub conntrack_udp_timeout: Option<Duration>,
    #[serde(deserialize_with = "de::duration")]
    pub conntrack_udp_timeout_stream: Option<Duration>,

    #[serde(deserialize_with = "de::proxy_mode")]
    pub proxy_mode: Option<String>,
    #[serde(deserialize_with = "de::oom_score_adj")]
    pub oom_score_adj: Option<i32>,
    pub bind_address_hard_fail: Option<bool>,
    pub kube_api_qps: Option<f32>,
    pub kube_api_burst: Option<u32>,
    pub kube_api_content_type: Option<String>,
}

/// Whether the command line gave this argument (or its environment
/// variable did), rather than clap's default.
fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Moves each named setting of the file into the parsed arguments, unless
/// the command line gave that flag. Setting and field share the flag's
/// name, which is also clap's id for it.
macro_rules! take {
    ($settings:ident, $matches:expr, $target:expr; $($field:ident),+ $(,)?) => {$(
        if let Some(value) = $settings.$field.take()
            && !given($matches, stringify!($field))
        {
            $target.$field = value.into();
        }
    )+};
}

impl Settings {
    /// Fills in what the command line left at its defaults, taking each
    /// setting the subcommand has a flag for out of `self`.
    pub fn apply(&mut self, matches: &ArgMatches, cli: &mut Cli) -> Result<(), String> {
        take!(self, matches, cli.log; verbose, log_format);
        let Some((_, sub)) = matches.subcommand() else {
            return Ok(());
        };
        match &mut cli.command {
            Command::Run(run) => {
                self.source(sub, &mut run.source)?;
                self.proxy(sub, &mut run.proxy);
                self.pods(sub, &mut run.pods);
                take!(self, sub, run; min_sync_period, sync_period, list_page_size, config_sync_period,
                      dry_run, dry_run_dir, netns, ip_families, healthz_bind_address,
                      metrics_bind_address, no_conntrack, nft_writer);
                take!(self, sub, run.conntrack; conntrack_max_per_core, conntrack_min,
                      conntrack_tcp_timeout_established, conntrack_tcp_timeout_close_wait,
                      conntrack_tcp_be_liberal, conntrack_udp_timeout, conntrack_udp_timeout_stream);
                take!(self, sub, run.kube_proxy; proxy_mode, oom_score_adj, bind_address_hard_fail,
                      kube_api_qps, kube_api_burst, kube_api_content_type);
            }
            Command::Render(render) => {
                self.source(sub, &mut render.source)?;
                self.proxy(sub, &mut render.proxy);
                take!(self, sub, render; nft_only);
            }
            Command::Explain(explain) => {
                self.source(sub, &mut explain.source)?;
                self.proxy(sub, &mut explain.proxy);
            }
            Command::Cleanup(cleanup) => {
                self.pods(sub, &mut cleanup.pods);
                take!(self, sub, cleanup; netns);
            }
            // A trace's replay takes its few settings from the command
            // line only (its output is a stable contract).
            Command::Replay(_) => {}
        }
        Ok(())
    }

    /// Where objects come from: the command line's choice wins whole (its
    /// `--manifests` drops the file's `kubeconfig`, and the other way).
    fn source(&mut self, matches: &ArgMatches, source: &mut SourceArgs) -> Result<(), String> {
        if self.manifests.is_some() && self.kubeconfig.is_some() {
            return Err("manifests and kubeconfig both say where objects come from: set one".into());
        }
        if given(matches, "manifests") || given(matches, "kubeconfig") {
            (self.manifests, self.kubeconfig) = (None, None);
        }
        take!(self, matches, source; manifests, kubeconfig);
        Ok(())
    }

    fn proxy(&mut self, matches: &ArgMatches, proxy: &mut ProxyArgs) {
        take!(self, matches, proxy; hostname_override, service_proxy_name, multus, ip_family,
              cluster_cidr, detect_local_mode, pod_bridge_interface, pod_interface_name_prefix,
              masquerade_all, nodeport_addresses, service_cidr, node_zone);
    }

    fn pods(&mut self, matches: &ArgMatches, pods: &mut crate::settings::flags::PodNetnsArgs) {
        take!(self, matches, pods; pod_netns_dir, container_runtime_endpoint, host_prefix);
    }
}

/// Decoding a setting with the parser of its flag.
mod de {
    use super::*;
    use serde::de::Error;

    fn one<'de, D: Deserializer<'de>, T>(d: D, parse: fn(&str) -> Result<T, String>) -> Result<Option<T>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.as_deref().map(parse).transpose().map_err(D::Error::custom)
    }

    /// A list, or one string of comma-separated items (as the flag takes
    /// them).
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a list, or a string of comma-separated items")]
    enum Items {
        Many(Vec<String>),
        One(String),
    }

    fn list<'de, D: Deserializer<'de>, T>(
        d: D,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<Option<Vec<T>>, D::Error> {
        let items = match Option::<Items>::deserialize(d)? {
            None => return Ok(None),
            Some(Items::Many(items)) => items,
            Some(Items::One(text)) => text.split(',').map(str::to_owned).collect(),
        };
        let parsed = items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).map(parse);
        parsed.collect::<Result<_, _>>().map(Some).map_err(D::Error::custom)
    }

    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        one(d, crate::settings::flags::parse_duration)
    }
    pub fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<ipnet::IpNet>>, D::Error> {
        list(d, crate::settings::flags::parse_cidr)
    }
    pub fn nodeport_addresses<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<NodePortAddress>>, D::Error> {
        list(d, crate::settings::flags::parse_nodeport_address)
    }
    pub fn bind_address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BindAddress>, D::Error> {
        one(d, crate::settings::flags::parse_bind_address)
    }
    pub fn interface<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        one(d, crate::settings::flags::parse_interface)
    }
    pub fn proxy_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        one(d, crate::settings::flags::parse_proxy_mode)
    }
    pub fn nft_writer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<linux_dataplane::NftWriter>, D::Error> {
        one(d, crate::settings::flags::parse_nft_writer)
    }
    pub fn oom_score_adj<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
        one(d, crate::settings::flags::parse_oom_score_adj)
    }
    fn parse_family(s: &str) -> Result<IpFamily, String> {
        s.parse().map_err(|e| format!("{e}"))
    }
    pub fn family<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpFamily>, D::Error> {
        one(d, parse_family)
    }
    pub fn families<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<IpFamily>>, D::Error> {
        list(d, parse_family)
    }
    pub fn detect_local_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DetectLocalMode>, D::Error> {
        one(d, |s| DetectLocalMode::from_str(s, false))
    }
    pub fn log_format<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LogFormat>, D::Error> {
        one(d, |s| LogFormat::from_str(s, true))
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use serde_json::Value;

    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    use crate::settings::{parse, read};

    fn write(text: &str) -> String {
        let path = std::env::temp_dir().join(format!("proxyd-config-{}-{}.yaml", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn run(args: &[&str]) -> crate::settings::flags::RunArgs {
        match parse(os(args)).unwrap_or_else(|e| panic!("{e}")).cli.command {
            Command::Run(run) => *run,
            other => panic!("not run: {other:?}"),
        }
    }

    fn error(args: &[&str]) -> String {
        parse(os(args)).unwrap_err().to_string()
    }

    #[test]
    fn config_sets_flags_and_the_command_line_wins() {
        let path = write(
            "hostname-override: node-9\ncluster-cidr: [10.0.0.0/8, 10.1.0.0/16]\nmasquerade-all: true\nmin-sync-period: 2s\nlist-page-size: 50\n",
        );
        let args = run(&["proxyd", "run", "--config", &path, "--min-sync-period", "5s"]);
        assert_eq!(args.proxy.hostname_override.as_deref(), Some("node-9"));
        assert_eq!(args.proxy.cluster_cidr.len(), 2);
        assert!(args.proxy.masquerade_all);
        assert_eq!(args.min_sync_period, Some(Duration::from_secs(5)), "the flag wins");
        assert_eq!(args.list_page_size, 50);
        let config = format!("--config={path}");
        let args = run(&["proxyd", "run", "--cluster-cidr", "192.168.0.0/16", &config]);
        assert_eq!(
            args.proxy.cluster_cidr,
            ["192.168.0.0/16".parse::<ipnet::IpNet>().unwrap()],
            "the flag wins whole"
        );
        // A value is read as its setting's type asks: YAML 1.1's `no` is
        // a zone's name here, not false.
        let zone = write("node-zone: no\nhostname-override: y\n");
        let args = run(&["proxyd", "run", "--config", &zone]);
        assert_eq!(args.proxy.node_zone.as_deref(), Some("no"));
        assert_eq!(args.proxy.hostname_override.as_deref(), Some("y"));
        // A flag given with its default value still wins over the file.
        let args = run(&["proxyd", "run", "--config", &path, "--list-page-size", "500"]);
        assert_eq!(args.list_page_size, 500);
    }

    #[test]
    fn min_sync_period_unset_or_kubeadms_zero_is_the_cost_bound_default() {
        use node_proxy::sync_runner::Pacing;
        let kubeadm = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/kubeadm-kube-proxy-config.conf"
        );
        for args in [vec!["proxyd", "run"], vec!["proxyd", "run", "--config", kubeadm]] {
            let run = run(&args);
            assert_eq!(
                Pacing::from_min_sync_period(run.min_sync_period),
                Pacing::DEFAULT,
                "{args:?}"
            );
        }
        let kube_proxy_file = write(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n\
             nftables: {minSyncPeriod: 1s}\n",
        );
        let own_file = write("min-sync-period: 250ms\n");
        for (args, want) in [
            (vec!["proxyd", "run", "--min-sync-period", "1s"], Duration::from_secs(1)),
            (vec!["proxyd", "run", "--min-sync-period", "0"], Duration::ZERO),
            (
                vec!["proxyd", "run", "--config", &kube_proxy_file],
                Duration::from_secs(1),
            ),
            (vec!["proxyd", "run", "--config", &own_file], Duration::from_millis(250)),
        ] {
            let run = run(&args);
            assert_eq!(
                Pacing::from_min_sync_period(run.min_sync_period),
                Pacing::Fixed(want),
                "{args:?}"
            );
        }
    }

    #[test]
    fn every_flag_of_run_render_and_explain_is_a_setting() {
        let cmd = Cli::command();
        for sub in ["run", "render", "explain", "cleanup"] {
            let sub_cmd = cmd.find_subcommand(sub).unwrap();
            for arg in sub_cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if ["help", "kube-proxy"].contains(&long) {
                    continue; // not settings: `cleanup --kube-proxy` is what to do
                }
                let doc: Value = serde_json::json!({ long: {"a": 1} });
                let e = serde_path_to_error::deserialize::<_, Settings>(doc).unwrap_err();
                assert!(!e.inner().to_string().contains("unknown field"), "{sub} --{long}: {e}");
            }
        }
    }

    #[test]
    fn every_setting_reaches_run() {
        let path = write(
            "verbose: 1\nlog-format: json\nkubeconfig: /k\nhostname-override: n\nservice-proxy-name: p\nmultus: true\n\
             ip-family: ipv6\ncluster-cidr: fd00::/56\ndetect-local-mode: InterfaceNamePrefix\n\
             pod-bridge-interface: cbr0\npod-interface-name-prefix: cali\nmasquerade-all: true\n\
             nodeport-addresses: [fd00:1::/64]\nservice-cidr: [fd00:2::/112]\nnode-zone: z\n\
             min-sync-period: 0\nsync-period: 1m\nlist-page-size: 7\nconfig-sync-period: 0\ndry-run: true\n\
             dry-run-dir: /d\nnetns: ns\npod-netns-dir: /p\nhost-prefix: /h\n\
             ip-families: ipv6,ipv4\nhealthz-bind-address: '[::]:1'\nmetrics-bind-address: ''\nno-conntrack: true\nnft-writer: nft\n\
             conntrack-max-per-core: 0\nconntrack-min: 1\nconntrack-tcp-timeout-established: 1h\n\
             conntrack-tcp-timeout-close-wait: 0\nconntrack-tcp-be-liberal: true\nconntrack-udp-timeout: 30s\n\
             conntrack-udp-timeout-stream: 2m\nproxy-mode: ''\noom-score-adj: -5\nbind-address-hard-fail: true\n\
             kube-api-qps: 1.5\nkube-api-burst: 3\nkube-api-content-type: application/json\n",
        );
        let (mut settings, _) = read(Path::new(&path)).unwrap();
        let matches = Cli::command().try_get_matches_from(["proxyd", "run"]).unwrap();
        let mut cli = Cli::from_arg_matches(&matches).unwrap();
        settings.apply(&matches, &mut cli).unwrap();
        assert_eq!(
            settings,
            Settings::default(),
            "every setting `run` has a flag for is taken"
        );
        assert_eq!(cli.log.verbose, 1);
        assert_eq!(cli.log.log_format, LogFormat::Json);
        let Command::Run(run) = cli.command else { unreachable!() };
        assert_eq!(run.source.kubeconfig.as_deref(), Some(Path::new("/k")));
        assert_eq!(run.proxy.detect_local_mode, DetectLocalMode::InterfaceNamePrefix);
        assert_eq!(run.proxy.pod_interface_name_prefix.as_deref(), Some("cali"));
        assert_eq!(run.nft_writer, linux_dataplane::NftWriter::Nft);
        assert_eq!(run.sync_period, Duration::from_secs(60));
        assert_eq!(run.kube_proxy.oom_score_adj, -5);
        assert_eq!(
            run.proxy.nodeport_addresses,
            [NodePortAddress::Cidr("fd00:1::/64".parse().unwrap())]
        );
        assert_eq!(run.ip_families, [IpFamily::V6, IpFamily::V4]);
        assert_eq!(run.metrics_bind_address, BindAddress(None));
        assert_eq!(run.conntrack.conntrack_udp_timeout_stream, Duration::from_secs(120));
    }

    #[test]
    fn bad_config_files_are_named_clearly() {
        let path = write("hostname-overide: x\n");
        let e = error(&["proxyd", "run", "--config", &path]);
        assert!(e.contains("unknown field `hostname-overide`"), "{e}");
        let path = write("sync-period: {a: 1}\n");
        let e = error(&["proxyd", "run", "--config", &path]);
        assert!(e.contains("sync-period: expected string scalar at line 1"), "{e}");
        let e = error(&["proxyd", "run", "--config", "/nonexistent.yaml"]);
        assert!(e.contains("--config /nonexistent.yaml: "), "{e}");
        let path = write("- a\n- b\n");
        assert!(error(&["proxyd", "run", "--config", &path]).contains("expected a mapping"));
        let path = write("sync-period: soon\n");
        let e = error(&["proxyd", "run", "--config", &path]);
        assert!(e.contains("sync-period: \"soon\" is not a duration"), "{e}");
        let path = write("cluster-cidr: [10.0.0.0/8, 10.1.0.1]\n");
        let e = error(&["proxyd", "run", "--config", &path]);
        assert!(
            e.contains("cluster-cidr: \"10.1.0.1\" is an address, not a CIDR"),
            "{e}"
        );
        let path = write("oom-score-adj: -1001\n");
        assert!(error(&["proxyd", "run", "--config", &path]).contains("oom-score-adj"));
        let path = write("manifests: /m\nkubeconfig: /k\n");
        let e = error(&["proxyd", "run", "--config", &path]);
        assert!(e.contains("manifests and kubeconfig both"), "{e}");
    }

    #[test]
    fn the_command_lines_source_wins_over_the_files() {
        let path = write("kubeconfig: /etc/kubeconfig\n# the source\n");
        let args = run(&["proxyd", "run", "--config", &path, "--manifests", "/m"]);
        assert_eq!(args.source.manifests.as_deref(), Some(Path::new("/m")));
        assert_eq!(args.source.kubeconfig, None, "not both");
        let args = run(&["proxyd", "run", "--config", &path]);
        assert_eq!(args.source.kubeconfig.as_deref(), Some(Path::new("/etc/kubeconfig")));
    }

    #[test]
    fn global_flags_before_the_subcommand_do_not_hide_the_file() {
        let path = write("cluster-cidr: [10.9.0.0/16]\nlog-format: json\n# global flags first\n");
        let parsed = parse(os(&["proxyd", "-v", "--config", &path, "run", "--manifests", "x"])).unwrap();
        assert_eq!(parsed.cli.log.verbose, 1);
        assert_eq!(parsed.cli.log.log_format, LogFormat::Json, "the file's");
        let Command::Run(run) = parsed.cli.command else {
            panic!()
        };
        assert_eq!(run.proxy.cluster_cidr.len(), 1, "the file was read");
        let parsed = parse(os(&["proxyd", "--log-format", "text", "run", "--config", &path])).unwrap();
        assert_eq!(parsed.cli.log.log_format, LogFormat::Text, "the command line's");
        let path = write("verbose: 2\n");
        let parsed = parse(os(&["proxyd", "run", "-v", "--config", &path])).unwrap();
        assert_eq!(parsed.cli.log.verbose, 1, "-v after the subcommand wins too");
    }

    #[test]
    fn a_second_config_file_is_an_error_not_dropped() {
        let a = write("masquerade-all: true\n# a\n");
        let b = write("cluster-cidr: [10.9.0.0/16]\n# the second file\n");
        let e = error(&["proxyd", "run", "--config", &a, "--config", &b]);
        assert!(e.contains("--config is given more than once"), "{e}");
        // Other flags: the last one wins, as kube-proxy's do.
        let args = run(&["proxyd", "run", "--sync-period", "5s", "--sync-period", "7s"]);
        assert_eq!(args.sync_period, Duration::from_secs(7));
    }

    #[test]
    fn render_and_explain_skip_the_settings_only_run_takes() {
        let path = write("healthz-bind-address: 0.0.0.0:10256\nsync-period: 30s\ncluster-cidr: [10.9.0.0/16]\n");
        for sub in ["render", "explain"] {
            let mut args = vec!["proxyd", sub];
            if sub == "explain" {
                args.push("ns/svc");
            }
            args.extend(["--config", &path]);
            let proxy = match parse(os(&args)).unwrap_or_else(|e| panic!("{sub}: {e}")).cli.command {
                Command::Render(r) => r.proxy,
                Command::Explain(e) => e.proxy,
                _ => panic!(),
            };
            assert_eq!(proxy.cluster_cidr.len(), 1, "{sub} still takes what it knows");
        }
        let bad = write("no-such-setting: 1\n");
        let e = error(&["proxyd", "render", "--config", &bad]);
        assert!(e.contains("unknown field `no-such-setting`"), "{e}");
    }
}
