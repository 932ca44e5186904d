//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use slice_model::IpFamily;

/// A node service proxy that tracks Kubernetes EndpointSlices and Services
/// the way kube-proxy does.
#[derive(Parser, Debug)]
#[command(name = "proxyd", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Feed a JSON-lines trace of watch events through the endpoint cache and
    /// print what the proxy would see after each sync (see
    /// replay-format.md).
    Replay(ReplayArgs),
}

/// `proxyd replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The trace; `-` or nothing reads standard input.
    pub input: Option<PathBuf>,

    /// The node the proxy runs on (decides isLocal); empty: nothing is local.
    #[arg(long, default_value = "")]
    pub node_name: String,

    /// The IP family this proxier serves: ipv4 or ipv6. Endpoints of the
    /// other family are ignored.
    #[arg(long, default_value = "ipv4", value_parser = parse_family)]
    pub ip_family: IpFamily,

    /// Print only the last sync's line.
    #[arg(long)]
    pub final_only: bool,

    /// Print one JSON line of timings to stderr at the end.
    #[arg(long)]
    pub timing: bool,

    /// Do not print warnings about skipped objects and fields.
    #[arg(long)]
    pub quiet: bool,
}

fn parse_family(s: &str) -> Result<IpFamily, String> {
    match s {
        "ipv4" => Ok(IpFamily::V4),
        "ipv6" => Ok(IpFamily::V6),
        other => Err(format!("expected ipv4 or ipv6, got {other:?}")),
    }
}
