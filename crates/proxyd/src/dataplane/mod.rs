//! The dataplane: the desired state, rendered as nftables text, applied in
//! one `nft -f -` transaction behind the [`Dataplane`] trait (tests use
//! [`Recording`]).
//!
//! So far: cluster-IP traffic (DNAT with fair load balancing, REJECT for
//! services without endpoints, DROP where endpoints exist but none is usable
//! from this node). Node ports, external and load-balancer IPs, affinity,
//! masquerade and partial syncs come next (issue #4).

pub mod desired;
pub mod nft;

use std::io::Write;
use std::process::{Command, Stdio};

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// `nft` could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `nft` rejected the transaction; nothing of it was applied.
    #[error("nft rejected the transaction (exit {status}): {stderr}")]
    Rejected {
        /// Exit status.
        status: String,
        /// What nft said.
        stderr: String,
    },
}

/// Applies nft scripts.
pub trait Dataplane {
    /// Applies one script as one transaction: all of it or none.
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError>;
}

/// The real thing: `nft -f -`, optionally inside a named network namespace
/// (`ip netns exec NAME nft -f -`).
#[derive(Debug, Clone, Default)]
pub struct NftCommand {
    /// The network namespace, if not the current one.
    pub netns: Option<String>,
}

impl Dataplane for NftCommand {
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError> {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "nft", "-f", "-"]);
                c
            }
            None => {
                let mut c = Command::new("nft");
                c.args(["-f", "-"]);
                c
            }
        };
        let program = if self.netns.is_some() {
            "ip netns exec … nft"
        } else {
            "nft"
        };
        let spawn_err = |source| DataplaneError::Spawn {
            program: program.into(),
            source,
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(script.as_bytes()).map_err(spawn_err)?;
        }
        let out = child.wait_with_output().map_err(spawn_err)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(DataplaneError::Rejected {
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }
}

/// A dataplane that records scripts, for tests; it can be told to fail.
#[derive(Debug, Default)]
pub struct Recording {
    /// Scripts applied, in order.
    pub applied: Vec<String>,
    /// Fail the next this many applies.
    pub fail_next: u32,
}

impl Dataplane for Recording {
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError> {
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Err(DataplaneError::Rejected {
                status: "injected".into(),
                stderr: "injected failure".into(),
            });
        }
        self.applied.push(script.to_owned());
        Ok(())
    }
}
