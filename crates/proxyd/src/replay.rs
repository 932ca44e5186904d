//! `proxyd replay`: a recorded JSON-lines watch trace through the cache and
//! the endpoints map ([`daemon_sources::replay`]), one JSON line per sync
//! on stdout. The format is a stable contract: see `docs/replay-format.md`.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use daemon_sources::replay::{self, Options, Replayer};

use crate::settings::flags::ReplayArgs;

/// `proxyd replay` from the command line: exit status 0 on success, 1 when
/// a line is bad or I/O fails (after printing what was synced before it).
pub fn main(args: ReplayArgs) -> ExitCode {
    let input: Box<dyn Read> = match args.input.as_deref() {
        None => Box::new(io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(io::stdin().lock()),
        Some(p) => match File::open(p) {
            Ok(f) => Box::new(f),
            Err(e) => {
                crate::logging::say(&format!("proxyd replay: cannot open {}: {e}", p.display()));
                return ExitCode::FAILURE;
            }
        },
    };
    let opts = Options {
        node_name: args.node_name,
        family: args.ip_family,
        final_only: args.final_only,
        quiet: args.quiet,
    };
    let out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let mut stderr = io::stderr();
    let warn = Box::new(move |msg: &str| {
        let _ = writeln!(stderr, "proxyd replay: warning: {msg}");
    });
    let mut r = Replayer::new(opts, out, warn);
    let result = r.run(input);
    let code = match &result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = r.flush();
            crate::logging::say(&format!("proxyd replay: {e}"));
            ExitCode::FAILURE
        }
    };
    if args.timing {
        r.timing.peak_rss_kib = replay::timing::peak_rss_kib();
        match serde_json::to_string(&r.timing) {
            Ok(line) => crate::logging::say(&line),
            Err(e) => crate::logging::say(&format!("proxyd replay: cannot write timing: {e}")),
        }
    }
    code
}
