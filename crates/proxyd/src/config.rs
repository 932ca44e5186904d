//! `--config FILE`: every flag of a subcommand, settable from a YAML (or
//! JSON) mapping of flag names to values; flags on the command line win.
//!
//! ```yaml
//! hostname-override: node-1
//! cluster-cidr: [10.244.0.0/16, fd00:10:244::/56]
//! masquerade-all: false
//! min-sync-period: 1s
//! ```
//!
//! kube-proxy's `KubeProxyConfiguration` is read too
//! ([`crate::kube_proxy_config`]), so that kubeadm's ConfigMap and
//! kube-proxy's DaemonSet arguments work unchanged.
//!
//! The file is turned into flags placed before the command line's own; a
//! flag given on the command line replaces the file's setting whole.

use std::ffi::OsString;

use clap::{ArgMatches, CommandFactory, FromArgMatches};
use serde_json::Value;

use crate::cli::Cli;

/// The clap command, with later flags overriding earlier ones.
fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |s| s.args_override_self(true));
    }
    cmd
}

/// A parsed command line, and what reading its `--config` file has to say
/// once logging is set up (settings it left out).
#[derive(Debug)]
pub struct Parsed {
    /// The command line.
    pub cli: Cli,
    /// Notes to log.
    pub notes: Vec<String>,
}

/// Parses the command line (with `--config` expanded); clap's error on a
/// bad flag, a clear message on a bad config file.
pub fn parse(args: Vec<OsString>) -> Result<Parsed, clap::Error> {
    let (expanded, notes) = expand(args).map_err(|m| command().error(clap::error::ErrorKind::InvalidValue, m))?;
    let matches: ArgMatches = command().try_get_matches_from(expanded)?;
    Ok(Parsed {
        cli: Cli::from_arg_matches(&matches)?,
        notes,
    })
}

/// Where the subcommand is: the first argument that is neither a global
/// flag nor the value of one (`proxyd --log-format json run …`).
fn subcommand_at(cmd: &clap::Command, args: &[OsString]) -> Option<usize> {
    let takes_value = |flag: &str| {
        cmd.get_arguments().any(|a| {
            let named = a.get_long().is_some_and(|l| flag == format!("--{l}"))
                || a.get_short().is_some_and(|c| flag == format!("-{c}"));
            named && a.get_action().takes_values()
        })
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if !a.starts_with('-') {
            return Some(i);
        }
        if !a.contains('=') && takes_value(&a) {
            i += 1; // its value
        }
        i += 1;
    }
    None
}

/// Replaces `--config FILE` by the flags the file sets; with notes to log.
pub fn expand(mut args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>), String> {
    let is_config = |a: &OsString| a == "--config" || a.to_string_lossy().starts_with("--config=");
    let Some(at) = args.iter().position(is_config) else {
        return Ok((args, Vec::new()));
    };
    if args.iter().filter(|a| is_config(a)).count() > 1 {
        return Err("--config is given more than once: give one file".into());
    }
    let flag = args.remove(at).to_string_lossy().into_owned();
    let path = match flag.strip_prefix("--config=") {
        Some(p) => p.to_owned(),
        None if at < args.len() => args.remove(at).to_string_lossy().into_owned(),
        None => return Err("--config needs a file".into()),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("--config {path}: {e}"))?;
    let value: Value = serde_saphyr::from_str(&text).map_err(|e| format!("--config {path}: not valid YAML: {e}"))?;
    let mut notes = Vec::new();
    let map = match value {
        // kube-proxy's own file (kubeadm's ConfigMap), decoded strictly.
        v if crate::kube_proxy_config::is_kube_proxy_config(&v) => {
            let (map, said) = crate::kube_proxy_config::settings(&text)
                .map_err(|e| format!("--config {path} (KubeProxyConfiguration): {e}"))?;
            notes = said;
            map
        }
        Value::Object(m) => m,
        Value::Null => Default::default(),
        _ => return Err(format!("--config {path}: expected a mapping of flag names to values")),
    };
    let cmd = command();
    let Some(sub_at) = subcommand_at(&cmd, &args) else {
        return Err("--config: no subcommand given".into());
    };
    let sub = args[sub_at].to_string_lossy().into_owned();
    let Some(sub_cmd) = cmd.find_subcommand(&sub) else {
        return Ok((args, notes)); // clap reports the unknown subcommand
    };
    let known: Vec<&str> = sub_cmd.get_arguments().filter_map(|a| a.get_long()).collect();
    // One file serves every subcommand (the DaemonSet's, for `render` and
    // `explain` too): settings that only `run` takes are skipped by the
    // others; settings no subcommand takes are errors.
    let run_only: Vec<&str> = cmd
        .find_subcommand("run")
        .map(|r| r.get_arguments().filter_map(|a| a.get_long()).collect())
        .unwrap_or_default();
    let mut flags: Vec<OsString> = Vec::new();
    let mut problems = Vec::new();
    let on_command_line = |key: &str| {
        let (flag, with_value) = (format!("--{key}"), format!("--{key}="));
        args.iter().any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.starts_with(&with_value)
        })
    };
    for (key, value) in map {
        if key != "config" && !known.contains(&key.as_str()) && run_only.contains(&key.as_str()) {
            tracing::debug!("--config {path}: {key:?} is for `proxyd run`; `proxyd {sub}` ignores it");
            continue;
        }
        if key == "config" || !known.contains(&key.as_str()) {
            problems.push(format!("unknown setting {key:?} for `proxyd {sub}`"));
            continue;
        }
        if on_command_line(&key) {
            continue; // the command line wins, whole (lists are not merged)
        }
        let text = match value {
            Value::Null | Value::Bool(false) => continue,
            Value::Bool(true) => {
                flags.push(format!("--{key}").into());
                continue;
            }
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Array(items) => {
                let parts: Result<Vec<String>, String> = items
                    .into_iter()
                    .map(|i| match i {
                        Value::String(s) => Ok(s),
                        Value::Number(n) => Ok(n.to_string()),
                        other => Err(format!("{key}: list items must be strings, not {other}")),
                    })
                    .collect();
                match parts {
                    Ok(p) => p.join(","),
                    Err(e) => {
                        problems.push(e);
                        continue;
                    }
                }
            }
            Value::Object(_) => {
                problems.push(format!("{key}: expected a value, not a mapping"));
                continue;
            }
        };
        flags.push(format!("--{key}={text}").into());
    }
    if !problems.is_empty() {
        return Err(format!(
            "--config {path}: {}; settings are the long flags of `proxyd {sub} --help`",
            problems.join("; ")
        ));
    }
    args.splice(sub_at + 1..sub_at + 1, flags);
    Ok((args, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;

    fn write(text: &str) -> String {
        let path = std::env::temp_dir().join(format!("proxyd-config-{}-{}.yaml", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn config_sets_flags_and_the_command_line_wins() {
        let path = write(
            "hostname-override: node-9\ncluster-cidr: [10.0.0.0/8, 10.1.0.0/16]\nmasquerade-all: true\nmin-sync-period: 2s\nlist-page-size: 50\n",
        );
        let cli = parse(os(&["proxyd", "run", "--config", &path, "--min-sync-period", "5s"]))
            .unwrap()
            .cli;
        let Command::Run(args) = cli.command else { panic!() };
        assert_eq!(args.proxy.hostname_override.as_deref(), Some("node-9"));
        assert_eq!(args.proxy.cluster_cidr.len(), 2);
        assert!(args.proxy.masquerade_all);
        assert_eq!(args.min_sync_period, std::time::Duration::from_secs(5), "the flag wins");
        assert_eq!(args.list_page_size, 50);
        let cli = parse(os(&[
            "proxyd",
            "run",
            "--cluster-cidr",
            "192.168.0.0/16",
            &format!("--config={path}"),
        ]))
        .unwrap()
        .cli;
        let Command::Run(args) = cli.command else { panic!() };
        assert_eq!(
            args.proxy.cluster_cidr,
            ["192.168.0.0/16".parse::<ipnet::IpNet>().unwrap()],
            "the flag wins"
        );
    }

    #[test]
    fn bad_config_files_are_named_clearly() {
        let path = write("hostname-overide: x\nsync-period: {a: 1}\n");
        let err = expand(os(&["proxyd", "run", "--config", &path])).unwrap_err();
        assert!(
            err.contains("unknown setting \"hostname-overide\" for `proxyd run`"),
            "{err}"
        );
        assert!(err.contains("sync-period: expected a value, not a mapping"), "{err}");
        let err = expand(os(&["proxyd", "run", "--config", "/nonexistent.yaml"])).unwrap_err();
        assert!(err.starts_with("--config /nonexistent.yaml: "), "{err}");
        let path = write("- a\n- b\n");
        let err = expand(os(&["proxyd", "run", "--config", &path])).unwrap_err();
        assert!(err.contains("expected a mapping"), "{err}");
        let path = write("sync-period: soon\n");
        let err = parse(os(&["proxyd", "run", "--config", &path]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("soon"), "clap names the bad value: {err}");
    }

    #[test]
    fn global_flags_before_the_subcommand_do_not_hide_the_file() {
        let path = write("cluster-cidr: [10.9.0.0/16]\n# global flags first\n");
        let args: Vec<OsString> = [
            "proxyd",
            "--log-format",
            "json",
            "--config",
            &path,
            "run",
            "--manifests",
            "x",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let cli = parse(args).unwrap().cli;
        let Command::Run(run) = cli.command else { panic!() };
        assert_eq!(run.proxy.cluster_cidr.len(), 1, "the file was read");
    }

    #[test]
    fn a_second_config_file_is_an_error_not_dropped() {
        let a = write("masquerade-all: true\n# a\n");
        let b = write("cluster-cidr: [10.9.0.0/16]\n# the second file\n");
        let args: Vec<OsString> = ["proxyd", "run", "--config", &a, "--config", &b]
            .iter()
            .map(OsString::from)
            .collect();
        let err = parse(args).unwrap_err().to_string();
        assert!(err.contains("--config is given more than once"), "{err}");
    }

    #[test]
    fn render_and_explain_skip_the_settings_only_run_takes() {
        let path = write("healthz-bind-address: 0.0.0.0:10256\nsync-period: 30s\ncluster-cidr: [10.9.0.0/16]\n");
        for sub in ["render", "explain"] {
            let mut args: Vec<OsString> = vec!["proxyd".into(), sub.into()];
            if sub == "explain" {
                args.push("ns/svc".into());
            }
            args.extend(["--config".into(), OsString::from(&path)]);
            let cli = parse(args).unwrap_or_else(|e| panic!("{sub}: {e}")).cli;
            let proxy = match cli.command {
                Command::Render(r) => r.proxy,
                Command::Explain(e) => e.proxy,
                _ => panic!(),
            };
            assert_eq!(proxy.cluster_cidr.len(), 1, "{sub} still takes what it knows");
        }
        let bad = write("no-such-setting: 1\n");
        let err = parse(
            ["proxyd", "render", "--config", &bad]
                .iter()
                .map(OsString::from)
                .collect(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown setting \"no-such-setting\""), "{err}");
    }
}
