//! The dataplane: what each service port should do ([`desired`]), the
//! ruleset's shape ([`fragment`]), nft text ([`nft`]), and the syncer that
//! writes only what changed ([`programmed`]), applied in one `nft -f -`
//! transaction behind the [`Dataplane`] trait (tests use [`Recording`];
//! `--dry-run` uses [`DryRun`]).

pub mod desired;
pub mod fragment;
pub mod nft;
pub mod programmed;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub use desired::{DataplaneConfig, ServiceTarget};
pub use fragment::Fragment;
pub use programmed::{NftSyncer, SyncKind, SyncReport};

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
    /// A dry run could not write its script.
    #[error("cannot write {path}: {source}")]
    Write {
        /// Where.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Writes a transaction's text piece by piece.
pub type Render<'r> = &'r mut dyn FnMut(&mut dyn std::fmt::Write) -> std::fmt::Result;

/// Applies nft scripts.
pub trait Dataplane {
    /// Applies one script as one transaction: all of it or none.
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError>;

    /// Applies the script `render` writes, as one transaction, and returns
    /// its size. By default the text is collected and [`Dataplane::apply`]
    /// applies it; [`NftCommand`] streams it to nft instead, so a full sync
    /// of a large cluster never holds its megabytes of text.
    fn apply_rendered(&mut self, render: Render<'_>) -> Result<usize, DataplaneError> {
        let mut script = String::new();
        // Writing into a String cannot fail.
        let _ = render(&mut script);
        self.apply(&script).map(|()| script.len())
    }
}

/// The real thing: `nft -f -`, optionally inside a named network namespace
/// (`ip netns exec NAME nft -f -`).
#[derive(Debug, Clone, Default)]
pub struct NftCommand {
    /// The network namespace, if not the current one.
    pub netns: Option<String>,
}

/// The text a render wrote to nft's standard input, counted; keeps the
/// first I/O error (`fmt::Write` can only say that one happened).
struct Feed<W> {
    inner: W,
    bytes: usize,
    error: Option<std::io::Error>,
}

impl<W: Write> std::fmt::Write for Feed<W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match self.inner.write_all(s.as_bytes()) {
            Ok(()) => {
                self.bytes += s.len();
                Ok(())
            }
            Err(e) => {
                self.error.get_or_insert(e);
                Err(std::fmt::Error)
            }
        }
    }
}

impl NftCommand {
    fn program(&self) -> String {
        match &self.netns {
            Some(ns) => format!("ip netns exec {ns} nft"),
            None => "nft".to_owned(),
        }
    }

    /// Runs `nft -f -` with what `feed` writes to its standard input (and
    /// returns how much that was). nft reads all its input before it says
    /// anything, so writing everything before reading its stderr is safe.
    fn run(&self, feed: impl FnOnce(&mut dyn Write) -> std::io::Result<usize>) -> Result<usize, DataplaneError> {
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
        let spawn_err = |source| DataplaneError::Spawn {
            program: self.program(),
            source,
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        let fed = match child.stdin.take() {
            Some(stdin) => {
                let mut stdin = std::io::BufWriter::with_capacity(1 << 16, stdin);
                feed(&mut stdin).and_then(|n| stdin.flush().map(|()| n))
            }
            None => Ok(0),
        };
        // stdin is closed here: nft sees the end of its input.
        let out = child.wait_with_output().map_err(spawn_err)?;
        if !out.status.success() {
            return Err(DataplaneError::Rejected {
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        fed.map_err(spawn_err)
    }
}

impl Dataplane for NftCommand {
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError> {
        self.run(|stdin| stdin.write_all(script.as_bytes()).map(|()| script.len()))
            .map(drop)
    }

    fn apply_rendered(&mut self, render: Render<'_>) -> Result<usize, DataplaneError> {
        self.run(|stdin| {
            let mut feed = Feed {
                inner: stdin,
                bytes: 0,
                error: None,
            };
            match (render(&mut feed), feed.error) {
                (_, Some(e)) => Err(e),
                (Ok(()), None) => Ok(feed.bytes),
                (Err(_), None) => Err(std::io::Error::other("the ruleset could not be rendered")),
            }
        })
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

/// `--dry-run`: writes each sync's script to standard output, or to
/// numbered files (`sync-000001.nft`, …) in a directory, instead of
/// applying it.
#[derive(Debug, Default)]
pub struct DryRun {
    /// The directory; `None` writes to standard output.
    pub dir: Option<PathBuf>,
    /// Scripts written so far.
    pub count: u64,
    /// Put before file names (`ipv6-` in dual-stack).
    pub prefix: String,
}

impl Dataplane for DryRun {
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError> {
        self.count += 1;
        match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{}sync-{:06}.nft", self.prefix, self.count));
                std::fs::write(&path, script).map_err(|source| DataplaneError::Write {
                    path: path.display().to_string(),
                    source,
                })
            }
            None => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "# {}sync {}\n{script}", self.prefix, self.count)
                    .and_then(|()| out.flush())
                    .map_err(|source| DataplaneError::Write {
                        path: "standard output".into(),
                        source,
                    })
            }
        }
    }
}

pub mod kernel_model;

#[cfg(test)]
mod tests;

impl<D: Dataplane + ?Sized> Dataplane for Box<D> {
    fn apply(&mut self, script: &str) -> Result<(), DataplaneError> {
        (**self).apply(script)
    }

    fn apply_rendered(&mut self, render: Render<'_>) -> Result<usize, DataplaneError> {
        (**self).apply_rendered(render)
    }
}
