//! Settings: a flag is declared once, in `flags` (clap's derive: its name,
//! parser, default and help), and that declaration is also its setting in
//! a `--config` file.
//!
//! ```text
//!  flags       the command line: every flag and its value types
//!  file        `--config FILE` in proxyd's format -> `Settings` (flag
//!              names and values as text) -> command-line arguments
//!  kube_proxy  kube-proxy's KubeProxyConfiguration -> `Settings`
//! ```
//!
//! Two file formats are read:
//! - proxyd's own: a YAML (or JSON) mapping of long flag names to values,
//!   ```yaml
//!   hostname-override: node-1
//!   cluster-cidr: [10.244.0.0/16, fd00:10:244::/56]
//!   masquerade-all: false
//!   min-sync-period: 1s
//!   ```
//! - kube-proxy's `KubeProxyConfiguration` ([`kube_proxy`]),
//!   so that kubeadm's ConfigMap and kube-proxy's DaemonSet arguments work
//!   unchanged.
//!
//! Both meet the command line in one typed value, the parsed [`Cli`]: a
//! file's settings become the arguments the command line did not give, and
//! clap parses them all together. So a file and a command line accept and
//! refuse the same text, and a flag given on the command line wins (a list
//! given there replaces the file's whole). `null` and an empty list leave
//! a setting at its default.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgMatches, CommandFactory, FromArgMatches};
use serde_json::Value;

use file::Settings;
use flags::Cli;

pub mod file;
pub mod flags;
mod kube_proxy;

/// A parsed command line, and what reading its `--config` file has to say
/// once logging is set up (settings it left out).
#[derive(Debug)]
pub struct Parsed {
    /// The command line.
    pub cli: Cli,
    /// Notes to log.
    pub notes: Vec<String>,
}

/// Parses the command line and merges its `--config` file in: clap's error
/// on a bad flag, a message naming the file and the setting on a bad file.
pub fn parse(args: Vec<OsString>) -> Result<Parsed, clap::Error> {
    let (matches, notes) = matches(args)?;
    Ok(Parsed {
        cli: Cli::from_arg_matches(&matches)?,
        notes,
    })
}

/// The command line's matches with its `--config` file merged in: the
/// file's settings become arguments the command line did not give, read by
/// the flags' own parsers, so a file and a command line accept and refuse
/// the same text.
fn matches(args: Vec<OsString>) -> Result<(ArgMatches, Vec<String>), clap::Error> {
    let mut cmd = command();
    // A later flag replaces an earlier one (as kube-proxy's flags do), but a
    // second file would hide the first's settings: that is an error.
    let is_config = |a: &&OsString| a.to_string_lossy().split('=').next() == Some("--config");
    if args.iter().filter(is_config).count() > 1 {
        return Err(cmd.error(
            clap::error::ErrorKind::ArgumentConflict,
            "--config is given more than once: give one file",
        ));
    }
    let matches = cmd.try_get_matches_from_mut(args.clone())?;
    let Some(path) = matches.get_one::<PathBuf>("config").cloned() else {
        return Ok((matches, Vec::new()));
    };
    let bad = |m: String| cmd.clone().error(clap::error::ErrorKind::InvalidValue, m);
    let shown = path.display();
    let (settings, notes) = read(&path, &cmd).map_err(bad)?;
    let extra = settings
        .args(&cmd, &matches)
        .map_err(|m| bad(format!("--config {shown}: {m}")))?;
    if extra.is_empty() {
        return Ok((matches, notes));
    }
    let mut all = args;
    let end = all.iter().position(|a| a == "--").unwrap_or(all.len());
    all.splice(end..end, extra);
    // Every value was checked against its flag; what is left to refuse is
    // the file and the command line together.
    let merged = cmd.clone().try_get_matches_from(all);
    let merged = merged.map_err(|e| bad(format!("--config {shown}: with the command line: {e}")))?;
    Ok((merged, notes))
}

/// The clap command, with a later flag replacing an earlier one.
fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |s| s.args_override_self(true));
    }
    cmd
}

/// Reads and decodes a `--config` file (either format) for `root`'s
/// flags, with notes on what it left out.
pub fn read(path: &Path, root: &clap::Command) -> Result<(Settings, Vec<String>), String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {shown}: {e}"))?;
    let doc: Value = serde_saphyr::from_str(&text).map_err(|e| format!("--config {shown}: not valid YAML: {e}"))?;
    if daemon_sources::kube_proxy_file::is_kube_proxy_config(&doc) {
        return kube_proxy::settings(&text, root)
            .map_err(|e| format!("--config {shown} (KubeProxyConfiguration): {e}"));
    }
    match doc {
        Value::Null => return Ok((Settings::default(), Vec::new())),
        Value::Object(_) => {}
        _ => return Err(format!("--config {shown}: expected a mapping of flag names to values")),
    }
    let settings = Settings::decode(&text, root)
        .map_err(|e| format!("--config {shown}: {e}; settings are the long flags of `proxyd run --help`"))?;
    Ok((settings, Vec::new()))
}
