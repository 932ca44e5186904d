//! The dataplanes that write nftables: `nft -f -` ([`NftCommand`]), the
//! same with netlink for elements and the ruleset generation
//! ([`WatchedNft`]), and `--dry-run` ([`DryRun`]). What to write, and the
//! transactions that write it, come from the `nft-dataplane` crate.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nft_dataplane::names::FamilyWords;
use nft_dataplane::{Dataplane, DataplaneError, Transaction};
use slice_model::IpFamily;

use crate::hearing::{Commits, Ear};
use crate::netlink::NftNetlink;
use crate::netns::Netns;

/// The real thing: `nft -f -`, optionally inside another network namespace.
#[derive(Debug, Clone, Default)]
pub struct NftCommand {
    /// The network namespace.
    pub netns: Netns,
}

/// The text a transaction wrote to nft's standard input, counted; keeps the
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
    /// `nft`, and where it runs, for messages.
    fn program(&self) -> String {
        match self.netns {
            Netns::Current => "nft".into(),
            ref other => format!("nft in {other}"),
        }
    }

    /// Runs `nft ARGS` in the namespace, with `io` to feed and read it.
    fn nft<T: Send>(
        &self,
        args: &[&str],
        io: impl FnOnce(&mut Command) -> std::io::Result<T> + Send,
    ) -> Result<T, DataplaneError> {
        let spawn_err = |source| DataplaneError::Spawn {
            program: self.program(),
            source,
        };
        let mut cmd = Command::new("nft");
        cmd.args(args);
        self.netns
            .run(move || io(&mut cmd))
            .map_err(|e| spawn_err(e.into()))?
            .map_err(spawn_err)
    }

    /// Runs `nft -f -` with what `feed` writes to its standard input (and
    /// returns how much that was). nft reads all its input before it says
    /// anything, so writing everything before reading its stderr is safe.
    fn run(&self, feed: impl FnOnce(&mut dyn Write) -> std::io::Result<usize> + Send) -> Result<usize, DataplaneError> {
        self.run_with(&["-f", "-"], feed)
    }

    fn run_with(
        &self,
        args: &[&str],
        feed: impl FnOnce(&mut dyn Write) -> std::io::Result<usize> + Send,
    ) -> Result<usize, DataplaneError> {
        let (out, fed) = self.nft(args, |cmd| {
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            let fed = match child.stdin.take() {
                Some(stdin) => {
                    let mut stdin = std::io::BufWriter::with_capacity(1 << 16, stdin);
                    feed(&mut stdin).and_then(|n| stdin.flush().map(|()| n))
                }
                None => Ok(0),
            };
            // stdin is closed here: nft sees the end of its input.
            Ok((child.wait_with_output()?, fed))
        })?;
        if !out.status.success() {
            return Err(rejected(&out));
        }
        fed.map_err(|source| DataplaneError::Spawn {
            program: self.program(),
            source,
        })
    }

    /// Whether nft runs and may change the ruleset: a transaction that
    /// creates the table, checked by the kernel and not committed
    /// (`nft --check`). Unlike listing, it costs the same however large the
    /// table is (nft 1.0.6 reads every element to list the tables).
    pub fn check_access(&self) -> Result<(), DataplaneError> {
        let mut probe = Transaction::for_table(IpFamily::V4, nft_dataplane::names::TABLE);
        probe.push(nft_dataplane::Op::AddTable(IpFamily::V4));
        self.check(&probe)
    }

    /// Whether the kernel accepts `tx`, as `nft --check` asks it (nothing
    /// is committed).
    pub fn check(&self, tx: &Transaction) -> Result<(), DataplaneError> {
        let text = tx.text();
        self.run_with(&["--check", "-f", "-"], |stdin| {
            stdin.write_all(text.as_bytes()).map(|()| text.len())
        })
        .map(drop)
    }

    /// Removes the tables named `table` of both families, those there, in
    /// one transaction. Which are there is asked of the kernel (listing
    /// them with nft would read every element). Returns the tables
    /// removed and those that were not there, as `table ip proxyd`.
    pub fn remove_tables(&self, table: &'static str) -> Result<RemovedTables, DataplaneError> {
        let netlink = |source| DataplaneError::Netlink {
            what: format!("look for the {table} tables"),
            source,
        };
        let mut kernel = NftNetlink::open(&self.netns).map_err(netlink)?;
        let mut out = RemovedTables::default();
        let mut script = String::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            let name = format!("table {} {table}", FamilyWords::of(family).table);
            if kernel.table_exists(family, table).map_err(netlink)? {
                script.push_str(&Transaction::remove_table(family, table).text());
                out.removed.push(name);
            } else {
                out.absent.push(name);
            }
        }
        if !script.is_empty() {
            self.apply_text(&script)?;
        }
        Ok(out)
    }

    /// Applies raw nft text as one transaction (for commands that are not
    /// proxyd's own, e.g. in tests).
    pub fn apply_text(&self, script: &str) -> Result<usize, DataplaneError> {
        self.run(|stdin| stdin.write_all(script.as_bytes()).map(|()| script.len()))
    }
}

/// What a failed `nft` said, and how it ended.
fn rejected(out: &std::process::Output) -> DataplaneError {
    DataplaneError::Rejected {
        status: out
            .status
            .code()
            .map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit status {c}")),
        stderr: String::from_utf8_lossy(&out.stderr).trim().replace('\n', " "),
    }
}

impl Dataplane for NftCommand {
    /// Streams the transaction's text to nft as it is rendered: a full
    /// sync of a large cluster never holds its megabytes of text.
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        self.run(|stdin| {
            let mut feed = Feed {
                inner: stdin,
                bytes: 0,
                error: None,
            };
            match (tx.write(&mut feed), feed.error) {
                (_, Some(e)) => Err(e),
                (Ok(()), None) => Ok(feed.bytes),
                (Err(_), None) => Err(std::io::Error::other("the transaction could not be rendered")),
            }
        })
    }
}

/// What [`NftCommand::remove_tables`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RemovedTables {
    /// The tables removed, as `table ip proxyd`.
    pub removed: Vec<String>,
    /// The tables that were not there.
    pub absent: Vec<String>,
}

/// Why `nft` cannot program this host.
#[derive(Debug, thiserror::Error)]
pub enum NftAccessError {
    /// No `nft` program.
    #[error("{nft}: not found; install nftables (Debian: apt-get install nftables)")]
    NotFound {
        /// `nft`, with the namespace it was to run in.
        nft: String,
    },
    /// The kernel does not let this process change nftables.
    #[error("{nft} may not change the ruleset ({stderr}): run as root or with CAP_NET_ADMIN")]
    Denied {
        /// `nft`, with the namespace it was to run in.
        nft: String,
        /// What nft said.
        stderr: String,
    },
    /// Another failure of `nft --check`.
    #[error("{nft} --check: {source}")]
    Other {
        /// `nft`, with the namespace it was to run in.
        nft: String,
        /// What failed.
        #[source]
        source: DataplaneError,
    },
}

/// Checks that `nft` runs in `netns` and may change the ruleset, with a
/// transaction checked and not committed ([`NftCommand::check_access`]),
/// so that a missing `nft` or a missing capability is said once at the
/// start instead of failing every sync. Whether the kernel refused is asked
/// of the kernel (an EPERM over netlink), not read from nft's messages.
pub fn check_nft(netns: &Netns) -> Result<(), NftAccessError> {
    let nft = who("nft", netns);
    let denied = || {
        NftNetlink::open(netns)
            .and_then(|mut n| n.generation().map(drop))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    };
    match (NftCommand { netns: netns.clone() }).check_access() {
        Ok(()) => Ok(()),
        Err(DataplaneError::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(NftAccessError::NotFound { nft })
        }
        Err(DataplaneError::Rejected { stderr, .. }) if denied() => Err(NftAccessError::Denied { nft, stderr }),
        Err(source) => Err(NftAccessError::Other { nft, source }),
    }
}

/// Who writes a transaction's tables, chains and rules (elements always go
/// over netlink when it can be opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NftWriter {
    /// Everything over netlink, as `nft` would send it: no `nft` process.
    #[default]
    Netlink,
    /// `nft -f -` for any transaction that holds more than elements, unless
    /// it holds a rule nft cannot read ([`nft_dataplane::rule::Rule::readable_by_nft`]):
    /// the fallback, should the kernel refuse what netlink writes.
    Nft,
}

impl std::str::FromStr for NftWriter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "netlink" => Ok(Self::Netlink),
            "nft" => Ok(Self::Nft),
            other => Err(format!("{other:?}: expected netlink or nft")),
        }
    }
}

impl NftWriter {
    fn scope(self) -> crate::netlink::Scope {
        match self {
            Self::Netlink => crate::netlink::Scope::Everything,
            Self::Nft => crate::netlink::Scope::Elements,
        }
    }
}

/// `what`, with the namespace it acts in when that is not this one: how
/// the start checks name what they checked.
fn who(what: &str, netns: &Netns) -> String {
    match netns {
        Netns::Current => what.to_owned(),
        other => format!("{what} ({other})"),
    }
}

/// Checks that proxyd may change nftables in `netns` over netlink (the
/// kernel answers a netlink request of a process without CAP_NET_ADMIN
/// with EPERM), for [`NftWriter::Netlink`], which runs no `nft`.
pub fn check_netlink(netns: &Netns) -> Result<(), NftAccessError> {
    let nft = who("nftables over netlink", netns);
    match NftNetlink::open(netns).and_then(|mut n| n.generation()) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(NftAccessError::Denied {
            nft,
            stderr: e.to_string(),
        }),
        Err(source) => Err(NftAccessError::Other {
            nft,
            source: DataplaneError::Netlink {
                what: "reading the ruleset generation".into(),
                source,
            },
        }),
    }
}

/// [`NftCommand`] that commits transactions over netlink
/// ([`NftNetlink::commit`]: no `nft` process; with [`NftWriter::Nft`],
/// transactions of elements alone), and can tell whether anyone committed to nftables since
/// its own last transaction, by reading the ruleset generation
/// ([`NftNetlink`]) before and after each one: an idle periodic sync then
/// runs no `nft` at all, and one after someone else's commit repairs what
/// they may have changed. It also tells whether the table exists, so that
/// a new node's first load is split into short transactions.
#[derive(Debug)]
pub struct WatchedNft {
    nft: NftCommand,
    /// `None` when netlink could not be opened: every periodic sync then
    /// re-asserts, as without it.
    netlink: Option<NftNetlink>,
    /// The generation our last transaction made, when nobody else committed
    /// between its two reads.
    own: Option<u32>,
    writer: NftWriter,
    /// Where the commits of other programs during a write go, when the
    /// namespace is heard ([`crate::hearing`]).
    ear: Option<Ear>,
}

impl WatchedNft {
    /// Writes in `netns` over netlink, `nft -f -` where netlink cannot be
    /// opened.
    pub fn new(netns: Netns) -> Self {
        Self::with_writer(netns, NftWriter::Netlink)
    }

    /// Writes in `netns`, chains and rules as `writer` says.
    pub fn with_writer(netns: Netns, writer: NftWriter) -> Self {
        let netlink = NftNetlink::open(&netns)
            .inspect_err(|e| {
                tracing::warn!(
                    "cannot read the nftables generation over netlink ({e}); every periodic sync re-applies the fixed chains"
                );
            })
            .ok();
        Self {
            nft: NftCommand { netns },
            netlink,
            own: None,
            writer,
            ear: None,
        }
    }

    /// Writes with `ear`'s listening stopped, and tells it of other
    /// programs' commits meanwhile.
    pub fn heard_by(mut self, ear: Ear) -> Self {
        self.ear = Some(ear);
        self
    }

    fn read(&mut self) -> Option<u32> {
        self.netlink
            .as_mut()?
            .generation()
            .inspect_err(|e| tracing::debug!("reading the nftables generation: {e}"))
            .ok()
    }
}

impl Dataplane for WatchedNft {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        let before = self.read();
        let (netlink, nft, scope) = (&mut self.netlink, &mut self.nft, self.writer.scope());
        let mut write = || match netlink.as_mut().and_then(|n| n.commit(tx, scope)) {
            Some(committed) => committed,
            None => nft.apply(tx),
        };
        let applied = match &self.ear {
            Some(ear) => ear.quietly(write),
            None => write(),
        };
        let after = self.read();
        if let (Some(ear), Some(before), Some(after)) = (&self.ear, before, after) {
            let own = u32::from(applied.is_ok());
            ear.count(Commits { before, after, own });
        }
        // Exactly one commit in between: ours.
        self.own = match (&applied, before, after) {
            (Ok(_), Some(b), Some(a)) if a == b.wrapping_add(1) => Some(a),
            _ => None,
        };
        applied
    }

    /// Over netlink (a batch without its end marker, which the kernel
    /// checks and aborts); with `nft --check` where netlink cannot be
    /// opened.
    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        Some(match self.netlink.as_mut() {
            Some(netlink) => netlink.check(tx),
            None => self.nft.check(tx),
        })
    }

    fn may_have_changed(&mut self) -> bool {
        match (self.own, self.read()) {
            (Some(own), Some(now)) => now != own,
            _ => true,
        }
    }

    fn generation(&mut self) -> Option<u64> {
        self.read().map(u64::from)
    }

    fn table_exists(&mut self, family: IpFamily, table: &str) -> Option<bool> {
        self.netlink
            .as_mut()?
            .table_exists(family, table)
            .inspect_err(|e| tracing::debug!("asking whether table {table} exists: {e}"))
            .ok()
    }

    fn objects(
        &mut self,
        family: IpFamily,
        table: &str,
    ) -> Option<Result<nft_dataplane::TableObjects, DataplaneError>> {
        let read = self.netlink.as_mut()?.objects(family, table).map_err(|source| {
            // A new node has no table yet: nothing to say.
            if source.kind() == std::io::ErrorKind::NotFound {
                tracing::debug!("no table {table} to read back: the first sync writes it whole");
            } else {
                tracing::warn!("cannot read table {table} back ({source}): a full sync replaces it whole");
            }
            DataplaneError::Netlink {
                what: format!("reading table {table} back"),
                source,
            }
        });
        Some(read)
    }

    /// Reads the set over netlink; an element it cannot read as proxyd
    /// writes that set's elements makes the whole set unreadable (`None`),
    /// so that the table is refilled rather than trusted.
    fn elements(
        &mut self,
        family: IpFamily,
        table: &str,
        set: &nft_dataplane::names::SetId,
    ) -> Option<Result<Vec<nft_dataplane::element::Element>, DataplaneError>> {
        let decode = |raw: &crate::RawElement<'_>| crate::netlink::read_element(set, family, raw);
        let read = match self.netlink.as_mut()?.elements(family, table, &set.to_string(), decode) {
            Ok(read) => read,
            Err(source) => {
                tracing::warn!("cannot read set {set} of table {table} back ({source}): every set is refilled");
                return Some(Err(DataplaneError::Netlink {
                    what: format!("reading set {set} of table {table} back"),
                    source,
                }));
            }
        };
        let read: Option<Vec<_>> = read.into_iter().collect();
        if read.is_none() {
            tracing::warn!("set {set} of table {table} holds elements proxyd did not write: every set is refilled");
        }
        read.map(Ok)
    }
}

/// `--dry-run`: writes each sync's transaction to standard output, or to
/// numbered files (`sync-000001.nft`, …) in a directory, instead of
/// applying it.
#[derive(Debug, Default)]
pub struct DryRun {
    /// The directory; `None` writes to standard output.
    pub dir: Option<PathBuf>,
    /// Transactions written so far.
    pub count: u64,
    /// Put before file names (`ipv6-` in dual-stack).
    pub prefix: String,
}

impl Dataplane for DryRun {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        self.count += 1;
        let script = tx.text();
        match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{}sync-{:06}.nft", self.prefix, self.count));
                std::fs::write(&path, &script).map_err(|source| DataplaneError::Write {
                    path: path.display().to_string(),
                    source,
                })?;
            }
            None => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "# {}sync {}\n{script}", self.prefix, self.count)
                    .and_then(|()| out.flush())
                    .map_err(|source| DataplaneError::Write {
                        path: "standard output".into(),
                        source,
                    })?;
            }
        }
        Ok(script.len())
    }
}
