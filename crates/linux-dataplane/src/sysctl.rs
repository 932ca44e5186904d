//! The host's conntrack settings under `/proc/sys/net/netfilter` and the
//! conntrack module's hash table size: read, and written only where they
//! differ. A value that may not be written (a read-only `/proc/sys` or
//! `/sys` in a container, a network namespace where the table size is the
//! host's) is reported with why, and the rest are still written.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// This machine's CPUs, as kube-proxy counts them (all online CPUs, not
/// only those this process may use).
pub fn cpus() -> u64 {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").ok();
    online
        .as_deref()
        .and_then(count_cpu_list)
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// The CPUs of a list such as `0-3,8,10-11`.
fn count_cpu_list(list: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<u64>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// kube-proxy's conntrack settings (its `--conntrack-*` flags, in the
/// same units): the table's size from the CPU count, the TCP established
/// and close-wait timeouts, and, when asked for, TCP "be liberal" and the
/// UDP timeouts. A zero leaves its setting as the node has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conntrack {
    /// Table entries per CPU (0: leave the table size alone).
    pub max_per_core: u64,
    /// The table size at least, whatever `max_per_core` gives.
    pub min: u64,
    /// `nf_conntrack_tcp_timeout_established`.
    pub tcp_timeout_established: Duration,
    /// `nf_conntrack_tcp_timeout_close_wait`.
    pub tcp_timeout_close_wait: Duration,
    /// `nf_conntrack_tcp_be_liberal=1`.
    pub tcp_be_liberal: bool,
    /// `nf_conntrack_udp_timeout`.
    pub udp_timeout: Duration,
    /// `nf_conntrack_udp_timeout_stream`.
    pub udp_timeout_stream: Duration,
}

/// kube-proxy's cap on the scaled table size.
const MAX_LIMIT: u64 = 1 << 20;

impl Conntrack {
    /// The table size to set for `cpus` CPUs, if any: max-per-core × CPUs,
    /// at least `min`, at most 2^20 (kube-proxy's rule).
    pub fn max(&self, cpus: u64) -> Option<u64> {
        if self.max_per_core == 0 {
            return None;
        }
        let scaled = self.max_per_core.saturating_mul(cpus);
        Some(if scaled > MAX_LIMIT {
            MAX_LIMIT
        } else {
            scaled.max(self.min)
        })
    }

    /// The sysctls to set (under `net/netfilter/`), in kube-proxy's order.
    pub fn wanted(&self, cpus: u64) -> Vec<(&'static str, u64)> {
        // A zero duration leaves its setting as the node has it.
        let secs = |d: Duration| (!d.is_zero()).then_some(d.as_secs());
        let each = [
            (CONNTRACK_MAX, self.max(cpus)),
            (
                "nf_conntrack_tcp_timeout_established",
                secs(self.tcp_timeout_established),
            ),
            ("nf_conntrack_tcp_timeout_close_wait", secs(self.tcp_timeout_close_wait)),
            ("nf_conntrack_tcp_be_liberal", self.tcp_be_liberal.then_some(1)),
            ("nf_conntrack_udp_timeout", secs(self.udp_timeout)),
            ("nf_conntrack_udp_timeout_stream", secs(self.udp_timeout_stream)),
        ];
        each.into_iter()
            .filter_map(|(name, value)| Some((name, value?)))
            .collect()
    }

    /// Sets these values on this machine (`sysctls`) and says what it did:
    /// an INFO line per value written, one WARN naming everything that
    /// could not be (never a failed start: the rules work without them).
    pub fn set(&self, sysctls: &Sysctls) -> Applied {
        let applied = sysctls.apply(&self.wanted(cpus()));
        for (setting, before, after) in &applied.written {
            tracing::info!(setting = %setting, before, after, "conntrack setting");
        }
        if !applied.refused.is_empty() {
            let list: Vec<String> = applied
                .refused
                .iter()
                .map(|(s, v, why)| format!("{s}={v} ({why})"))
                .collect();
            tracing::warn!(
                "conntrack settings left as they are: {}; set them on the host, or give proxyd a writable \
                 /proc/sys (--conntrack-max-per-core 0 and zero timeouts leave them alone)",
                list.join(", ")
            );
        }
        applied
    }
}

/// The table size's sysctl: raised, never lowered.
const CONNTRACK_MAX: &str = "nf_conntrack_max";

/// What [`Sysctls::apply`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// `(setting, before, after)` for each value written.
    pub written: Vec<(String, u64, u64)>,
    /// `(setting, value, why)` for each value that could not be written.
    pub refused: Vec<(String, u64, String)>,
}

/// Where the settings live: `/proc/sys` and the conntrack module's
/// hashsize parameter (elsewhere in tests).
#[derive(Clone, Debug)]
pub struct Sysctls {
    /// The sysctl tree (`/proc/sys`).
    pub proc_sys: PathBuf,
    /// The conntrack hash table's size
    /// (`/sys/module/nf_conntrack/parameters/hashsize`).
    pub hashsize: PathBuf,
}

impl Default for Sysctls {
    fn default() -> Self {
        Self {
            proc_sys: PathBuf::from("/proc/sys"),
            hashsize: PathBuf::from("/sys/module/nf_conntrack/parameters/hashsize"),
        }
    }
}

fn read_u64(path: &Path) -> std::io::Result<u64> {
    let text = std::fs::read_to_string(path)?;
    text.trim()
        .parse()
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, format!("{:?}: {e}", text.trim())))
}

/// Why a write failed, in an operator's words.
fn why(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ReadOnlyFilesystem => "read-only file system".into(),
        ErrorKind::PermissionDenied => "permission denied (read-only here, or not the host's network namespace)".into(),
        ErrorKind::NotFound => "not there (is the nf_conntrack module loaded?)".into(),
        _ => e.to_string(),
    }
}

impl Sysctls {
    /// Writes each of `wanted` (under `net/netfilter/`) that differs, and
    /// grows the hash table to a quarter of a new table size when it is
    /// smaller. The table size is only ever raised: a node that allows
    /// more connections keeps its value, as kube-proxy 1.38 keeps it
    /// (where the sysctl cannot be written, a lower wish must not fail).
    pub fn apply(&self, wanted: &[(&str, u64)]) -> Applied {
        let mut out = Applied::default();
        for (name, value) in wanted {
            let path = self.proc_sys.join("net/netfilter").join(name);
            let setting = format!("net.netfilter.{name}");
            let before = match read_u64(&path) {
                Ok(v) => v,
                Err(e) => {
                    out.refused.push((setting, *value, why(&e)));
                    continue;
                }
            };
            if *name == CONNTRACK_MAX && before >= *value {
                continue;
            }
            if before != *value {
                if let Err(e) = std::fs::write(&path, value.to_string()) {
                    out.refused.push((setting, *value, why(&e)));
                    continue;
                }
                out.written.push((setting, before, *value));
            }
            if *name == CONNTRACK_MAX {
                self.grow_hashsize(*value / 4, &mut out);
            }
        }
        out
    }

    fn grow_hashsize(&self, want: u64, out: &mut Applied) {
        let setting = "nf_conntrack hashsize".to_owned();
        match read_u64(&self.hashsize) {
            Ok(have) if have >= want => {}
            Ok(have) => match std::fs::write(&self.hashsize, want.to_string()) {
                Ok(()) => out.written.push((setting, have, want)),
                Err(e) => out.refused.push((setting, want, why(&e))),
            },
            Err(e) => out.refused.push((setting, want, why(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-proxy's defaults on 2 CPUs.
    const DEFAULTS: [(&str, u64); 3] = [
        ("nf_conntrack_max", 131_072),
        ("nf_conntrack_tcp_timeout_established", 86_400),
        ("nf_conntrack_tcp_timeout_close_wait", 3600),
    ];

    /// kube-proxy's defaults (its flags').
    fn kube_proxys() -> Conntrack {
        Conntrack {
            max_per_core: 32_768,
            min: 131_072,
            tcp_timeout_established: Duration::from_secs(86_400),
            tcp_timeout_close_wait: Duration::from_secs(3600),
            tcp_be_liberal: false,
            udp_timeout: Duration::ZERO,
            udp_timeout_stream: Duration::ZERO,
        }
    }

    #[test]
    fn kube_proxys_defaults_and_table_size() {
        let d = kube_proxys();
        assert_eq!(d.wanted(2), DEFAULTS, "2 CPUs: the minimum wins");
        assert_eq!(d.max(8), Some(262_144), "8 CPUs: scaled");
        assert_eq!(d.max(64), Some(1 << 20), "capped");
        let left_alone = Conntrack {
            max_per_core: 0,
            ..d.clone()
        };
        assert_eq!(left_alone.max(8), None);
        assert_eq!(Conntrack { min: 0, ..d.clone() }.max(1), Some(32_768));
        let all = Conntrack {
            tcp_be_liberal: true,
            udp_timeout: Duration::from_secs(30),
            udp_timeout_stream: Duration::from_secs(120),
            tcp_timeout_established: Duration::ZERO,
            ..d
        };
        assert_eq!(
            all.wanted(2)[1..],
            [
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
                ("nf_conntrack_tcp_be_liberal", 1),
                ("nf_conntrack_udp_timeout", 30),
                ("nf_conntrack_udp_timeout_stream", 120),
            ]
        );
    }

    #[test]
    fn a_larger_table_is_kept_with_its_hash_size() {
        let (dir, s) = tree(
            "larger",
            &[
                ("nf_conntrack_max", 2_000_000),
                ("nf_conntrack_tcp_timeout_established", 86_400),
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
            ],
            1024,
        );
        assert_eq!(
            s.apply(&DEFAULTS),
            Applied::default(),
            "nothing lowered, nothing refused"
        );
        assert_eq!(value(&dir, "nf_conntrack_max"), 2_000_000);
        assert_eq!(
            read_u64(&dir.join("hashsize")).unwrap(),
            1024,
            "the node's hash size too"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("x"), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert!(cpus() >= 1);
    }

    /// A sysctl tree in a scratch directory.
    fn tree(tag: &str, values: &[(&str, u64)], hashsize: u64) -> (PathBuf, Sysctls) {
        let dir = std::env::temp_dir().join(format!("linux-dataplane-sysctls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let nf = dir.join("proc/net/netfilter");
        std::fs::create_dir_all(&nf).unwrap();
        for (name, v) in values {
            std::fs::write(nf.join(name), format!("{v}\n")).unwrap();
        }
        std::fs::write(dir.join("hashsize"), format!("{hashsize}\n")).unwrap();
        let s = Sysctls {
            proc_sys: dir.join("proc"),
            hashsize: dir.join("hashsize"),
        };
        (dir, s)
    }

    fn value(dir: &Path, name: &str) -> u64 {
        read_u64(&dir.join("proc/net/netfilter").join(name)).unwrap()
    }

    #[test]
    fn only_values_that_differ_are_written_and_the_hash_table_grows() {
        let (dir, s) = tree(
            "write",
            &[
                ("nf_conntrack_max", 65_536),
                ("nf_conntrack_tcp_timeout_established", 432_000),
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
            ],
            16_384,
        );
        let applied = s.apply(&DEFAULTS);
        assert_eq!(
            applied.written,
            [
                ("net.netfilter.nf_conntrack_max".to_owned(), 65_536, 131_072),
                ("nf_conntrack hashsize".to_owned(), 16_384, 32_768),
                (
                    "net.netfilter.nf_conntrack_tcp_timeout_established".to_owned(),
                    432_000,
                    86_400
                ),
            ],
            "close-wait already right"
        );
        assert!(applied.refused.is_empty());
        assert_eq!(value(&dir, "nf_conntrack_max"), 131_072);
        assert_eq!(read_u64(&dir.join("hashsize")).unwrap(), 32_768);
        let again = s.apply(&DEFAULTS);
        assert_eq!(again, Applied::default(), "nothing differs: nothing written");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn what_cannot_be_written_is_reported_and_the_rest_is_still_set() {
        // No nf_conntrack_max here (as where the module is missing).
        let (dir, s) = tree("refused", &[("nf_conntrack_tcp_timeout_established", 432_000)], 1024);
        let applied = s.apply(&DEFAULTS);
        assert_eq!(applied.refused.len(), 2, "{applied:?}");
        assert!(applied.refused[0].0.contains("nf_conntrack_max"), "{applied:?}");
        assert!(applied.refused[0].2.contains("nf_conntrack module"), "{applied:?}");
        assert_eq!(value(&dir, "nf_conntrack_tcp_timeout_established"), 86_400);
        assert_eq!(
            read_u64(&dir.join("hashsize")).unwrap(),
            1024,
            "no table size: no hash change"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Whether IPv6 is enabled in `netns`, as kube-proxy asks it: the kernel
/// has IPv6 (`/proc/net/if_inet6` exists) and it is not disabled
/// (`net.ipv6.conf.all.disable_ipv6` is 0). Read inside the namespace: both
/// are per namespace.
pub fn ipv6_enabled(netns: &crate::Netns) -> Result<bool, crate::NetnsError> {
    netns.run(|| ipv6_enabled_under(Path::new("/proc/thread-self/net"), Path::new("/proc/sys")))
}

/// [`ipv6_enabled`] for the `net` and `sys` trees at these paths.
fn ipv6_enabled_under(net: &Path, sys: &Path) -> bool {
    let disabled = read_u64(&sys.join("net/ipv6/conf/all/disable_ipv6")).unwrap_or(1);
    net.join("if_inet6").exists() && disabled == 0
}

#[cfg(test)]
mod ipv6 {
    use super::*;

    #[test]
    fn ipv6_is_enabled_only_with_addresses_listed_and_not_disabled() {
        let dir = std::env::temp_dir().join(format!("proxyd-ipv6-{}", std::process::id()));
        let (net, sys) = (dir.join("net"), dir.join("sys"));
        let conf = sys.join("net/ipv6/conf/all");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(conf.join("disable_ipv6"), "0\n").unwrap();
        assert!(!ipv6_enabled_under(&net, &sys), "no if_inet6: the kernel has no IPv6");
        std::fs::write(net.join("if_inet6"), "").unwrap();
        assert!(ipv6_enabled_under(&net, &sys));
        std::fs::write(conf.join("disable_ipv6"), "1\n").unwrap();
        assert!(!ipv6_enabled_under(&net, &sys), "disabled");
        std::fs::remove_file(conf.join("disable_ipv6")).unwrap();
        assert!(!ipv6_enabled_under(&net, &sys), "unreadable: not enabled");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
