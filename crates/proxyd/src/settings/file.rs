//! `--config FILE` in proxyd's own format (a mapping of long flag names to
//! values), decoded into [`Settings`]: flag names and their values as
//! text, which [`Settings::args`] turns into command-line arguments for
//! the flags' own parsers to read.
//!
//! Nothing here lists the flags: a setting is any flag of the command
//! (`flags.rs`), found by its long name, and its shape (a switch, a count,
//! one value or a list) is the flag's. Adding a flag adds its setting.

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};

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

/// One setting's value, in the shape of its flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A flag without a value (`--masquerade-all`): given when true.
    Switch(bool),
    /// A flag counted by repeating it (`-vv`).
    Count(u8),
    /// One value, as the command line would give it.
    One(String),
    /// A list, each item as the command line would give it.
    Many(Vec<String>),
}

/// The settings of a file, either format: long flag names (e.g.
/// `hostname-override`) and their values, in the file's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    entries: Vec<(String, Value)>,
}

/// Flags that are never settings: they say where settings come from, or
/// ask for help.
const NOT_SETTINGS: &[&str] = &["config", "help", "version"];

/// A subcommand's flags that say what to do rather than how, and so are
/// taken from its command line only: `cleanup --kube-proxy` and `cleanup
/// --multus` choose what is removed (a file's `multus: true` is for `run`).
const ACTIONS: &[(&str, &str)] = &[("cleanup", "kube-proxy"), ("cleanup", "multus")];

/// Subcommands that take no settings from a file: a replay's output is a
/// stable contract, so its few flags come from its command line.
const NO_FILE: &[&str] = &["replay"];

/// The flag of `cmd` (the subcommand `sub`, or the top level) that setting
/// `key` sets, if it has one.
fn flag<'c>(cmd: &'c Command, sub: Option<&str>, key: &str) -> Option<&'c Arg> {
    if NOT_SETTINGS.contains(&key) || sub.is_some_and(|s| ACTIONS.contains(&(s, key))) {
        return None;
    }
    cmd.get_arguments().find(|a| a.get_long() == Some(key))
}

/// The flag setting `key` names in any subcommand that reads a file, or
/// among the global flags.
fn any_flag<'c>(root: &'c Command, key: &str) -> Option<&'c Arg> {
    flag(root, None, key).or_else(|| {
        root.get_subcommands()
            .filter(|s| !NO_FILE.contains(&s.get_name()))
            .find_map(|s| flag(s, Some(s.get_name()), key))
    })
}

/// Whether the command line gave this argument (or its environment
/// variable did), rather than clap's default.
fn given(matches: &ArgMatches, arg: &Arg) -> bool {
    matches!(
        matches.value_source(arg.get_id().as_str()),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Whether clap refuses `a` and `b` together (either may declare it).
fn exclusive(cmd: &Command, a: &Arg, b: &Arg) -> bool {
    let names = |x: &Arg, y: &Arg| cmd.get_arg_conflicts_with(x).iter().any(|c| c.get_id() == y.get_id());
    names(a, b) || names(b, a)
}

impl Settings {
    /// Sets `flag` (its long name), replacing an earlier value.
    pub fn set(&mut self, flag: &str, value: Value) {
        self.entries.retain(|(k, _)| k != flag);
        self.entries.push((flag.to_owned(), value));
    }

    /// The value set for `flag`, if any.
    pub fn get(&self, flag: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == flag).map(|(_, v)| v)
    }

    /// Decodes proxyd's format: a mapping of long flag names (of `root`'s
    /// subcommands, or its global flags) to values; a value is read in the
    /// shape its flag takes, and a problem names the setting.
    pub fn decode(text: &str, root: &Command) -> Result<Self, String> {
        serde_saphyr::with_deserializer_from_str(text, |de| de.deserialize_map(FileVisitor { root }))
            .map_err(|e| e.to_string())
    }

    /// The command-line arguments (`--name=value`) that bring this file's
    /// settings to the subcommand `matches` chose: those it (or the top
    /// level) has a flag for, and the command line did not give. A flag
    /// the command line gave wins, and so does one that excludes the
    /// setting (its `--manifests` drops the file's `kubeconfig`).
    pub fn args(&self, root: &Command, matches: &ArgMatches) -> Result<Vec<OsString>, String> {
        let sub = matches
            .subcommand()
            .filter(|(name, _)| !NO_FILE.contains(name))
            .and_then(|(name, m)| Some((root.find_subcommand(name)?, m)));
        let mut taken = Vec::new();
        for (key, value) in &self.entries {
            let own = sub.and_then(|(cmd, m)| Some((flag(cmd, Some(cmd.get_name()), key)?, cmd, m)));
            let Some(any) = any_flag(root, key) else {
                return Err(format!("unknown field `{key}`"));
            };
            // Every value is checked, the settings of other subcommands
            // too: one file serves them all.
            if let Some(why) = refused(key, any, value) {
                return Err(format!("{key}: {why}"));
            }
            if let Some((arg, cmd, m)) = own.or_else(|| Some((flag(root, None, key)?, root, matches))) {
                taken.push((key, arg, cmd, m, value));
            }
        }
        for (i, (a_key, a, cmd, ..)) in taken.iter().enumerate() {
            for (b_key, b, ..) in &taken[i + 1..] {
                if exclusive(cmd, a, b) {
                    return Err(format!(
                        "{a_key} and {b_key} both set, and they exclude each other: set one"
                    ));
                }
            }
        }
        let mut args = Vec::new();
        for (key, arg, cmd, m, value) in taken {
            let overruled = given(m, arg)
                || cmd
                    .get_arguments()
                    .any(|other| exclusive(cmd, arg, other) && given(m, other));
            if overruled {
                continue;
            }
            let long = format!("--{key}");
            match value {
                Value::Switch(on) => args.extend(on.then(|| long.clone().into())),
                Value::Count(n) => args.extend((0..*n).map(|_| long.clone().into())),
                Value::One(text) => args.push(format!("{long}={text}").into()),
                Value::Many(items) => args.extend(items.iter().map(|i| format!("{long}={i}").into())),
            }
        }
        Ok(args)
    }
}

/// What the flag `key` of `root` finds wrong with `value`, in its parser's
/// words (the caller names the setting); `None` when it takes it.
pub fn refusal(root: &Command, key: &str, value: &Value) -> Option<String> {
    refused(key, any_flag(root, key)?, value)
}

/// What the flag `arg` (long name `key`) finds wrong with `value`, read by
/// its own parser; `None` when it takes it.
fn refused(key: &str, arg: &Arg, value: &Value) -> Option<String> {
    let texts: &[String] = match value {
        Value::Switch(_) | Value::Count(_) => return None,
        Value::One(text) => std::slice::from_ref(text),
        Value::Many(items) => items,
    };
    // The flag alone, without what ties it to the others.
    let alone = arg
        .clone()
        .global(false)
        .required(false)
        .conflicts_with(clap::builder::Resettable::<clap::Id>::Reset);
    let cmd = Command::new("setting").no_binary_name(true).arg(alone);
    texts.iter().find_map(|text| {
        let refused = cmd.clone().try_get_matches_from([format!("--{key}={text}")]).err()?;
        Some(value_problem(&refused))
    })
}

/// What clap found wrong with a setting's value: the flag parser's own
/// words, or the values it takes.
fn value_problem(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let value = match e.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => Some(value.as_str()),
        _ => None,
    };
    let why = std::error::Error::source(e).map(ToString::to_string);
    // The parser's words, with the value when they leave it out.
    let why = why.map(|why| match value {
        Some(value) if !why.contains(value) => format!("{value:?}: {why}"),
        _ => why,
    });
    let why = why.or_else(|| match (value, e.get(ContextKind::ValidValue)) {
        (Some(value), Some(ContextValue::Strings(valid))) => {
            Some(format!("{value:?} is not one of {}", valid.join(", ")))
        }
        _ => None,
    });
    why.unwrap_or_else(|| {
        let rendered = e.render().to_string();
        let first = rendered.lines().next().unwrap_or_default();
        first.trim_start_matches("error: ").to_owned()
    })
}

/// What a flag takes, so a setting is read the same way.
#[derive(Clone, Copy)]
enum Shape {
    Switch,
    Count,
    One,
    Many,
}

impl Shape {
    fn of(arg: &Arg) -> Self {
        match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => Shape::Switch,
            ArgAction::Count => Shape::Count,
            ArgAction::Append => Shape::Many,
            _ => Shape::One,
        }
    }
}

/// A list, or one string of comma-separated items (as the flag takes
/// them).
#[derive(Deserialize)]
#[serde(untagged, expecting = "a list, or a string of comma-separated items")]
enum Items {
    Many(Vec<String>),
    One(String),
}

/// Reads a setting's value in its flag's shape; `None` is `null` (unset).
struct ValueSeed(Shape);

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Ok(match self.0 {
            Shape::Switch => Option::<bool>::deserialize(d)?.map(Value::Switch),
            Shape::Count => Option::<u8>::deserialize(d)?.map(Value::Count),
            // Read as text, so a value is the flag's own: `node-zone: no`
            // is "no", `min-sync-period: 0` is "0".
            Shape::One => Option::<String>::deserialize(d)?.map(Value::One),
            Shape::Many => Option::<Items>::deserialize(d)?.map(|items| {
                let items = match items {
                    Items::Many(items) => items,
                    Items::One(text) => text.split(',').map(str::to_owned).collect(),
                };
                Value::Many(
                    items
                        .iter()
                        .map(|s| s.trim())
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                )
            }),
        })
    }
}

/// Reads proxyd's format: each key must be a flag's long name.
struct FileVisitor<'c> {
    root: &'c Command,
}

impl<'de> Visitor<'de> for FileVisitor<'_> {
    type Value = Settings;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a mapping of long flag names to values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Settings, A::Error> {
        let mut settings = Settings::default();
        while let Some(key) = map.next_key::<String>()? {
            let Some(arg) = any_flag(self.root, &key) else {
                return Err(A::Error::custom(format_args!("unknown field `{key}`")));
            };
            let value = map
                .next_value_seed(ValueSeed(Shape::of(arg)))
                .map_err(|e| A::Error::custom(format_args!("{key}: {e}")))?;
            if let Some(value) = value {
                settings.set(&key, value);
            }
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;
    use std::time::Duration;

    use clap::CommandFactory;
    use slice_model::IpFamily;

    use super::*;
    use crate::logging::LogFormat;
    use crate::settings::flags::{BindAddress, Cli, Command, DetectLocalMode, NodePortAddress};
    use crate::settings::parse;

    /// A config file of the test's, removed when dropped.
    struct TempConfig(String);

    impl std::ops::Deref for TempConfig {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    impl Drop for TempConfig {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn write(text: &str) -> TempConfig {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("proxyd-config-{}-{n}.yaml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        TempConfig(path.display().to_string())
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
        let config = format!("--config={}", &*path);
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
        use node_proxy::schedule::Pacing;
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
                let decoded = Settings::decode(&format!("{long}: null\n"), &cmd);
                assert!(decoded.is_ok(), "{sub} --{long}: {decoded:?}");
            }
        }
        for global in ["verbose", "log-format"] {
            assert!(Settings::decode(&format!("{global}: null\n"), &cmd).is_ok());
        }
        for not_a_setting in ["config", "final-only", "node-name"] {
            let e = Settings::decode(&format!("{not_a_setting}: null\n"), &cmd).unwrap_err();
            assert!(e.contains("unknown field"), "{not_a_setting}: {e}");
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
        let (matches, _) = crate::settings::matches(os(&["proxyd", "run", "--config", &path])).unwrap();
        // Each setting of the file reached its flag (a switch set to false
        // is its default, and not given).
        let cmd = Cli::command();
        let (settings, _) = crate::settings::read(Path::new(&*path), &cmd).unwrap();
        let (_, sub) = matches.subcommand().unwrap();
        let run_cmd = cmd.find_subcommand("run").unwrap();
        for (key, value) in &settings.entries {
            let (arg, m) = match flag(run_cmd, Some("run"), key) {
                Some(arg) => (arg, sub),
                None => (flag(&cmd, None, key).unwrap(), &matches),
            };
            assert_eq!(given(m, arg), *value != Value::Switch(false), "{key}");
        }
        assert_eq!(settings.entries.len(), 42, "every line of the file above is a setting");
        let parsed = parse(os(&["proxyd", "run", "--config", &path])).unwrap();
        let cli = parsed.cli;
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
    fn a_flag_is_its_own_setting() {
        // `--init-only` is declared once, as a field of `run`'s flags, and
        // the file takes it with nothing else said.
        let path = write("init-only: true\n# a flag's setting\n");
        assert!(run(&["proxyd", "run", "--config", &path]).init_only);
        assert!(!run(&["proxyd", "run"]).init_only);
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
