//! Logging through `tracing` to stderr, as text or JSON lines.

use clap::{Args, ValueEnum};

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `2026-11-30T07:33:03Z  INFO proxyd::run: synced family=ipv4 …`
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Flags every subcommand takes.
#[derive(Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// More detail: -v for debug, -vv for trace (RUST_LOG, when set, wins).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Log as text or JSON lines.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
}

/// The level: `RUST_LOG` (`error`, `warn`, `info`, `debug`, `trace`) if set
/// and valid, else from `-v`.
pub fn level(args: &LogArgs, rust_log: Option<&str>) -> tracing::Level {
    if let Some(l) = rust_log.and_then(|l| l.trim().parse::<tracing::Level>().ok()) {
        return l;
    }
    match args.verbose {
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}

/// Writes a line to stderr; a closed stderr loses the line, not the
/// process.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Installs the subscriber (once; later calls do nothing).
pub fn init(args: &LogArgs) {
    let level = level(args, std::env::var("RUST_LOG").ok().as_deref());
    // A log line that cannot be written (stderr closed) is dropped: the
    // subscriber's own report of it would panic on the same closed stderr.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .log_internal_errors(false);
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_over_verbosity() {
        let v = LogArgs {
            verbose: 2,
            ..LogArgs::default()
        };
        assert_eq!(level(&v, None), tracing::Level::TRACE);
        assert_eq!(level(&v, Some("warn")), tracing::Level::WARN);
        assert_eq!(level(&v, Some("nonsense")), tracing::Level::TRACE);
        assert_eq!(level(&LogArgs::default(), None), tracing::Level::INFO);
    }
}
