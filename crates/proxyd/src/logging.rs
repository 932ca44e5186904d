//! Logging through `tracing` to stderr, as text or JSON lines.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

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
    /// More detail: -v for debug, -vv for trace (RUST_LOG, when set, wins:
    /// full filter directives such as `proxyd=debug,kube=info`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Log as text or JSON lines (`--logging-format`, kube-proxy's name,
    /// works too).
    #[arg(
        long,
        value_enum,
        default_value = "text",
        global = true,
        alias = "logging-format",
        ignore_case = true
    )]
    pub log_format: LogFormat,
}

/// The filter: `RUST_LOG` when set, with full directives
/// (`proxyd=debug,kube=info`, `warn`), else the level `-v` asks for. A
/// `RUST_LOG` that does not parse is not used; the second value says why.
///
/// By default kube-client's own lines are left out: it logs every failed
/// attempt of every watch (an ERROR per watch per retry while the API
/// server is down), where proxyd's watches say the first failure, a
/// reminder now and then, and the recovery, once each. `-v` shows them.
pub fn filter(args: &LogArgs, rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    let from_flags = || {
        EnvFilter::new(match args.verbose {
            0 => "info,kube_client=off",
            1 => "debug",
            _ => "trace",
        })
    };
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => (from_flags(), None),
        Some(spec) => match EnvFilter::try_new(spec) {
            Ok(f) => (f, None),
            Err(e) => (
                from_flags(),
                Some(format!(
                    "RUST_LOG={spec:?} is not a filter ({e}); using the level from -v"
                )),
            ),
        },
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
    let (filter, problem) = filter(args, std::env::var("RUST_LOG").ok().as_deref());
    // A log line that cannot be written (stderr closed) is dropped: the
    // subscriber's own report of it would panic on the same closed stderr.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .log_internal_errors(false);
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if let Some(p) = problem {
        tracing::warn!("{p}");
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;
    use tracing::level_filters::LevelFilter;

    use super::*;

    #[test]
    fn rust_log_takes_directives_and_wins_over_verbosity() {
        let v = LogArgs {
            verbose: 2,
            ..LogArgs::default()
        };
        assert_eq!(filter(&v, None).0.max_level_hint(), Some(LevelFilter::TRACE));
        assert_eq!(
            filter(&LogArgs::default(), None).0.max_level_hint(),
            Some(LevelFilter::INFO)
        );
        let (f, problem) = filter(&v, Some("warn"));
        assert_eq!((f.max_level_hint(), problem), (Some(LevelFilter::WARN), None));
        let (f, problem) = filter(&LogArgs::default(), Some("proxyd=debug,kube=info"));
        assert!(problem.is_none());
        assert_eq!(f.max_level_hint(), Some(LevelFilter::from_level(Level::DEBUG)));
        let (f, problem) = filter(&v, Some("proxyd=loud"));
        assert_eq!(f.max_level_hint(), Some(LevelFilter::TRACE), "falls back to -vv");
        assert!(problem.unwrap().contains("RUST_LOG=\"proxyd=loud\" is not a filter"));
    }

    /// The lines `filter` lets through when these events are logged.
    fn logged(args: &LogArgs, rust_log: Option<&str>) -> String {
        use std::sync::{Arc, Mutex};
        let out: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter(args, rust_log).0)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "kube_client::client::builder", "failed with error client error (Connect)");
            tracing::warn!(target: "kube_client::client", "eof in poll");
            tracing::warn!(target: "informer_glue::watch_runner", "watch failing; retrying every few seconds");
            tracing::debug!(target: "informer_glue::watch_runner", "watch failed again");
        });
        String::from_utf8_lossy(&out.lock().unwrap()).into_owned()
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn kube_clients_per_attempt_lines_only_when_asked_for() {
        let default = logged(&LogArgs::default(), None);
        assert!(!default.contains("kube_client"), "{default}");
        assert!(default.contains("watch failing"), "proxyd's own line stays: {default}");
        assert!(!default.contains("failed again"));
        let verbose = LogArgs {
            verbose: 1,
            ..LogArgs::default()
        };
        let all = logged(&verbose, None);
        assert!(
            all.contains("client error (Connect)") && all.contains("failed again"),
            "{all}"
        );
        let asked = logged(&LogArgs::default(), Some("info,kube_client=error"));
        assert!(
            asked.contains("client error (Connect)") && !asked.contains("eof in poll"),
            "{asked}"
        );
    }
}
