//! The conntrack settings kube-proxy makes at startup
//! (`--conntrack-*`): the table's size from the CPU count, the TCP
//! established and close-wait timeouts, and, when asked for, TCP "be
//! liberal" and the UDP timeouts. A node that swaps kube-proxy for proxyd
//! keeps them; without them it would fall back to the kernel's 5-day
//! established timeout and default table size.
//!
//! `linux_dataplane::sysctl` writes each value only where it differs from
//! the kernel's. What may not be written is one warning naming what was
//! left as it is, never a failed start.

use crate::settings::flags::ConntrackArgs;
use linux_dataplane::sysctl::{Applied, Sysctls, cpus};

/// kube-proxy's cap on the scaled table size.
const MAX_LIMIT: u64 = 1 << 20;

impl ConntrackArgs {
    /// The table size to set for `cpus` CPUs, if any: max-per-core × CPUs,
    /// at least `min`, at most 2^20 (kube-proxy's rule).
    pub fn max(&self, cpus: u64) -> Option<u64> {
        if self.conntrack_max_per_core == 0 {
            return None;
        }
        let scaled = self.conntrack_max_per_core.saturating_mul(cpus);
        Some(if scaled > MAX_LIMIT {
            MAX_LIMIT
        } else {
            scaled.max(self.conntrack_min)
        })
    }

    /// The sysctls to set (under `net/netfilter/`), in kube-proxy's order.
    pub fn wanted(&self, cpus: u64) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        if let Some(max) = self.max(cpus) {
            out.push(("nf_conntrack_max", max));
        }
        for (name, d) in [
            (
                "nf_conntrack_tcp_timeout_established",
                self.conntrack_tcp_timeout_established,
            ),
            (
                "nf_conntrack_tcp_timeout_close_wait",
                self.conntrack_tcp_timeout_close_wait,
            ),
        ] {
            if !d.is_zero() {
                out.push((name, d.as_secs()));
            }
        }
        if self.conntrack_tcp_be_liberal {
            out.push(("nf_conntrack_tcp_be_liberal", 1));
        }
        for (name, d) in [
            ("nf_conntrack_udp_timeout", self.conntrack_udp_timeout),
            ("nf_conntrack_udp_timeout_stream", self.conntrack_udp_timeout_stream),
        ] {
            if !d.is_zero() {
                out.push((name, d.as_secs()));
            }
        }
        out
    }
}

/// Sets kube-proxy's conntrack values at startup and says what it did:
/// an INFO line per value written, one WARN for everything that could
/// not be.
pub fn set_conntrack(args: &ConntrackArgs, sysctls: &Sysctls) -> Applied {
    let applied = sysctls.apply(&args.wanted(cpus()));
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
            "conntrack settings left as they are: {}; set them on the host, or give proxyd a writable /proc/sys \
             (--conntrack-max-per-core 0 and zero timeouts leave them alone)",
            list.join(", ")
        );
    }
    applied
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        conntrack: ConntrackArgs,
    }

    fn args(flags: &[&str]) -> ConntrackArgs {
        let mut all = vec!["proxyd"];
        all.extend_from_slice(flags);
        Cli::parse_from(all).conntrack
    }

    #[test]
    fn kube_proxys_defaults_and_table_size() {
        let d = args(&[]);
        assert_eq!(
            d.wanted(2),
            [
                ("nf_conntrack_max", 131_072),
                ("nf_conntrack_tcp_timeout_established", 86_400),
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
            ],
            "2 CPUs: the minimum wins"
        );
        assert_eq!(d.max(8), Some(262_144), "8 CPUs: scaled");
        assert_eq!(d.max(64), Some(1 << 20), "capped");
        assert_eq!(args(&["--conntrack-max-per-core", "0"]).max(8), None, "left alone");
        assert_eq!(args(&["--conntrack-min", "0"]).max(1), Some(32_768));
        let all = args(&[
            "--conntrack-tcp-be-liberal",
            "--conntrack-udp-timeout",
            "30s",
            "--conntrack-udp-timeout-stream",
            "2m",
            "--conntrack-tcp-timeout-established",
            "0",
        ]);
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
}
