//! # proxyd
//!
//! The daemon and its tools. The binary calls [`main`]; the other public
//! items (re-exported from private modules) are there so that the
//! integration tests, benches and fuzz targets reach the same code the
//! binary runs. The modules:
//!
//! ```text
//!  settings         every flag (flags), --config files in proxyd's format
//!                   (file) and kube-proxy's KubeProxyConfiguration
//!                   (kube_proxy), merged under the command line
//!  logging          the tracing subscriber and its filter
//!  replay           `proxyd replay` (its engine: daemon_sources::replay)
//!  snapshot_engine  one read of the cluster (manifests or API) into an Engine
//!  run              `proxyd run`: sources ─► engines ─► the sync actor
//!  metrics_registry the run's registry: kube-proxy's, the sources', multus
//!                   mode's and the process metrics
//!  inspect          `proxyd render` and `proxyd explain` (their text: node_inspect)
//!  cleanup          `proxyd cleanup`
//!  slices           `proxyd slices`: network_slices' controller, served
//! ```
//!
//! The engine (`endpoints_map::Engine`), the dataplane's plans and its
//! sync machine (`nft_dataplane`), the node's sync loop with kube-proxy's
//! health and metrics (`node_proxy`), multus mode (`multus_dataplane`: the
//! per-pod planner and sync, the CRI resolver) and everything that touches
//! the host (`linux_dataplane`: nft, netlink, namespaces, routes,
//! kube-proxy's leftovers) are library crates of their own.

mod cleanup;
mod effective;
mod inspect;
mod logging;
mod metrics_registry;
mod replay;
mod run;
mod settings;
mod slices;
mod snapshot_engine;

pub use effective::effective;
pub use run::validate as validate_run;
pub use settings::flags::{Command, ProxyArgs, RunArgs};
pub use settings::parse as parse_command_line;
pub use snapshot_engine::{Snapshot, engine as snapshot_engine};

/// Runs a long-running subcommand's future on `runtime`: its error, or the
/// runtime's, logged and a failure exit.
fn block_on(
    runtime: std::io::Result<tokio::runtime::Runtime>,
    run: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run),
        Err(e) => Err(anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The `proxyd` command: parses the command line (and `--config`), sets up
/// logging and runs the subcommand.
pub fn main() -> std::process::ExitCode {
    let (cli, notes) = match settings::parse(std::env::args_os().collect()) {
        Ok(parsed) => (parsed.cli, parsed.notes),
        Err(e) => e.exit(),
    };
    logging::init(&cli.log);
    for note in notes {
        tracing::info!("{note}");
    }
    match cli.command {
        Command::Replay(args) => replay::main(args),
        Command::Run(args) => run::main(*args),
        Command::Render(args) => inspect::render(args),
        Command::Explain(args) => inspect::explain(args),
        Command::Cleanup(args) => cleanup::cleanup(args),
        Command::Slices(args) => slices::main(args),
    }
}
