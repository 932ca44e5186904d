//! Which network namespace to work in: this process's, a named one
//! (`--netns NAME`, under `/run/netns`), or one given by path (a pod's,
//! from its runtime or `/proc/PID/ns/net`).
//!
//! Work in another namespace runs on a short-lived thread that entered it
//! (`setns`): a network namespace belongs to a thread, and what that thread
//! opens (netlink sockets) or starts (`nft`) lives in the namespace for
//! good. No `nsenter` or `ip netns exec` is run.

use std::fmt;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// The identity of a network namespace: its nsfs device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NetnsId {
    /// Device of the namespace file.
    pub dev: u64,
    /// Inode of the namespace file: the namespace's number.
    pub ino: u64,
}

/// A network namespace to work in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Netns {
    /// This process's.
    #[default]
    Current,
    /// A named namespace under `/run/netns` (`--netns NAME`).
    Named(String),
    /// A namespace file: `/run/netns/NS_NAME`, `/proc/PID/ns/net`, ….
    Path(PathBuf),
}

/// Why work could not be done in a namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// Its file could not be opened (the namespace is gone, or was never
    /// there).
    #[error("network namespace {path}: {source}")]
    Open {
        /// The namespace file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread could not enter it (`setns`; needs CAP_SYS_ADMIN).
    #[error("entering network namespace {path}: {source}")]
    Enter {
        /// The namespace file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl From<NetnsError> for std::io::Error {
    fn from(e: NetnsError) -> Self {
        let kind = match &e {
            NetnsError::Open { source, .. } | NetnsError::Enter { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, e)
    }
}

impl Netns {
    /// `--netns NAME`, or the current namespace.
    pub fn from_flag(name: Option<String>) -> Self {
        name.map_or(Self::Current, Self::Named)
    }

    /// The namespace's file (`None`: this process's own).
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Self::Current => None,
            Self::Named(ns) => Some(Path::new("/run/netns").join(ns)),
            Self::Path(p) => Some(p.clone()),
        }
    }

    /// Runs `work` inside this namespace: here for the current one, else on
    /// a thread that entered it and ends with `work`.
    pub fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        let Some(path) = self.path() else {
            return Ok(work());
        };
        let shown = || path.display().to_string();
        let file = std::fs::File::open(&path).map_err(|source| NetnsError::Open { path: shown(), source })?;
        std::thread::scope(|scope| {
            let entered = scope.spawn(move || {
                rustix::thread::move_into_link_name_space(
                    file.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| NetnsError::Enter {
                    path: shown(),
                    source: e.into(),
                })?;
                Ok(work())
            });
            entered.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Which namespace this names now (`None`: its file is gone): a
    /// namespace deleted and made again at the same path is another one.
    pub fn identity(&self) -> Option<NetnsId> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path().unwrap_or_else(|| PathBuf::from("/proc/self/ns/net"));
        let m = std::fs::metadata(path).ok()?;
        Some(NetnsId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// For messages: `this network namespace`, `network namespace NAME`,
/// `network namespace /proc/42/ns/net`.
impl fmt::Display for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Current => f.write_str("this network namespace"),
            Self::Named(name) => write!(f, "network namespace {name}"),
            Self::Path(p) => write!(f, "network namespace {}", p.display()),
        }
    }
}

/// A named network namespace made for a test (`ip netns add`, so needs
/// root and iproute2) and deleted when dropped.
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug)]
pub struct ScratchNetns {
    /// Its name under `/run/netns`.
    pub name: String,
}

#[cfg(any(test, feature = "test-util"))]
impl ScratchNetns {
    /// A new namespace named for `tag` and this process (one left by an
    /// earlier run of the same name is replaced).
    ///
    /// # Panics
    ///
    /// When `ip netns add` fails: a test cannot go on without it.
    pub fn new(tag: &str) -> Self {
        let name = format!("{tag}-{}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &name])
            .status();
        let made = std::process::Command::new("ip").args(["netns", "add", &name]).status();
        assert!(made.is_ok_and(|s| s.success()), "ip netns add {name}");
        Self { name }
    }

    /// The namespace, to work in.
    pub fn netns(&self) -> Netns {
        Netns::Named(self.name.clone())
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Drop for ScratchNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_namespace_runs_here_and_a_missing_one_is_named() {
        let here = std::thread::current().id();
        assert_eq!(Netns::Current.run(|| std::thread::current().id()).unwrap(), here);
        let gone = Netns::Path("/nonexistent/ns/net".into());
        let e = gone.run(|| ()).unwrap_err();
        assert!(matches!(e, NetnsError::Open { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with("network namespace /nonexistent/ns/net: "),
            "{e}"
        );
        assert_eq!(gone.identity(), None);
        assert_eq!(Netns::Named("a".into()).path(), Some(PathBuf::from("/run/netns/a")));
    }

    #[test]
    #[ignore = "needs root: enters another network namespace"]
    fn work_runs_inside_the_namespace() {
        let scratch = ScratchNetns::new("ld-netns");
        let ns = scratch.netns();
        let inside = ns
            .run(|| std::fs::read_link("/proc/thread-self/ns/net").map(|p| p.display().to_string()))
            .unwrap()
            .unwrap();
        let want = ns.identity().unwrap();
        assert_eq!(inside, format!("net:[{}]", want.ino));
    }
}
