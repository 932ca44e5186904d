//! `proxyd`: a node service proxy built on the endpoint-tracking crates.
//!
//! This binary is thin: it parses the command line and hands over to the
//! subcommand's module in the `proxyd` library.

use std::process::ExitCode;

use proxyd::cli::Command;

fn main() -> ExitCode {
    let (cli, notes) = match proxyd::config::parse(std::env::args_os().collect()) {
        Ok(parsed) => (parsed.cli, parsed.notes),
        Err(e) => e.exit(),
    };
    proxyd::logging::init(&cli.log);
    for note in notes {
        tracing::info!("{note}");
    }
    match cli.command {
        Command::Replay(args) => proxyd::replay::main(args),
        Command::Run(args) => proxyd::run::main(*args),
        Command::Render(args) => proxyd::render::main(args),
        Command::Explain(args) => proxyd::explain::main(args),
        Command::Cleanup(args) => proxyd::cleanup::cleanup(args),
    }
}
