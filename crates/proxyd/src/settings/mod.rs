//! Settings: where a flag is declared and how its value arrives.
//!
//! ```text
//!  flags       the command line (clap): every flag, its default, help and
//!              value parser; the value types
//!  file        `--config FILE` in proxyd's format (long flag names), and
//!              the typed `Settings` both file formats decode into
//!  kube_proxy  kube-proxy's KubeProxyConfiguration -> `Settings`
//! ```
//!
//! `--config FILE`: settings from a file, decoded into one typed
//! [`Settings`] and merged with the command line, where a flag given on the
//! command line wins.
//!
//! Two formats are read:
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
//! Values are parsed by the same functions as the flags, so a file and a
//! command line accept and refuse the same text. Which of the two wins is
//! decided by clap's value sources: a setting of the file replaces what the
//! command line left at its default, never what it gave (a list given on
//! the command line replaces the file's whole).

use std::path::Path;

use clap::{CommandFactory, FromArgMatches};
use serde_json::Value;

use file::{Settings, decode};
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
pub fn parse(args: Vec<std::ffi::OsString>) -> Result<Parsed, clap::Error> {
    let mut cmd = command();
    // A later flag replaces an earlier one (as kube-proxy's flags do), but a
    // second file would hide the first's settings: that is an error.
    let is_config = |a: &&std::ffi::OsString| a.to_string_lossy().split('=').next() == Some("--config");
    if args.iter().filter(is_config).count() > 1 {
        return Err(cmd.error(
            clap::error::ErrorKind::ArgumentConflict,
            "--config is given more than once: give one file",
        ));
    }
    let matches = cmd.try_get_matches_from_mut(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let Some(path) = cli.config.clone() else {
        return Ok(Parsed { cli, notes: Vec::new() });
    };
    let bad = |m: String| cmd.clone().error(clap::error::ErrorKind::InvalidValue, m);
    let (mut settings, notes) = read(&path).map_err(bad)?;
    settings
        .apply(&matches, &mut cli)
        .map_err(|m| bad(format!("--config {}: {m}", path.display())))?;
    Ok(Parsed { cli, notes })
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

/// Reads and decodes a `--config` file (either format), with notes on what
/// it left out.
pub fn read(path: &Path) -> Result<(Settings, Vec<String>), String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {shown}: {e}"))?;
    let doc: Value = serde_saphyr::from_str(&text).map_err(|e| format!("--config {shown}: not valid YAML: {e}"))?;
    if daemon_sources::kube_proxy_file::is_kube_proxy_config(&doc) {
        return kube_proxy::settings(&text).map_err(|e| format!("--config {shown} (KubeProxyConfiguration): {e}"));
    }
    match doc {
        Value::Null => return Ok((Settings::default(), Vec::new())),
        Value::Object(_) => {}
        _ => return Err(format!("--config {shown}: expected a mapping of flag names to values")),
    }
    let settings = decode(&text)
        .map_err(|e| format!("--config {shown}: {e}; settings are the long flags of `proxyd run --help`"))?;
    Ok((settings, Vec::new()))
}
