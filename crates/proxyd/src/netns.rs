//! Which network namespace a command runs in: this process's, a named one
//! (`ip netns exec`), or one given by path (`nsenter --net=PATH`, for a
//! pod's namespace from its runtime or `/proc/PID/ns/net`).

use std::path::PathBuf;
use std::process::Command;

/// The identity of a network namespace: its nsfs device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NetnsId {
    /// Device of the namespace file.
    pub dev: u64,
    /// Inode of the namespace file: the namespace's number.
    pub ino: u64,
}

/// A network namespace to run commands in.
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

impl Netns {
    /// `--netns NAME`, or the current namespace.
    pub fn from_flag(name: Option<String>) -> Self {
        name.map_or(Self::Current, Self::Named)
    }

    /// `program` inside this namespace.
    pub fn command(&self, program: &str) -> Command {
        match self {
            Self::Current => Command::new(program),
            Self::Named(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            Self::Path(path) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", path.display())).arg(program);
                c
            }
        }
    }

    /// Which namespace this names now (`None`: its file is gone): a
    /// namespace deleted and made again at the same path is another one.
    pub fn identity(&self) -> Option<NetnsId> {
        use std::os::unix::fs::MetadataExt;
        let path = match self {
            Self::Current => PathBuf::from("/proc/self/ns/net"),
            Self::Named(ns) => PathBuf::from("/run/netns").join(ns),
            Self::Path(p) => p.clone(),
        };
        let m = std::fs::metadata(path).ok()?;
        Some(NetnsId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// How the command line starts, for messages: `nft`,
    /// `ip netns exec NAME nft`, `nsenter --net=PATH nft`.
    pub fn describe(&self, program: &str) -> String {
        match self {
            Self::Current => program.to_owned(),
            Self::Named(ns) => format!("ip netns exec {ns} {program}"),
            Self::Path(p) => format!("nsenter --net={} {program}", p.display()),
        }
    }
}
