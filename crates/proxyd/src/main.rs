//! `proxyd`: a node service proxy built on the endpoint-tracking crates.
//! The subcommands are the `proxyd` library's ([`proxyd::main`]).

fn main() -> std::process::ExitCode {
    proxyd::main()
}
