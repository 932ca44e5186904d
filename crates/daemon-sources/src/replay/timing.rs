//! The `--timing` line.

use std::time::Instant;

use serde::Serialize;

/// Counters and the time spent in each phase of a replay.
#[derive(Serialize, Default, Debug, Clone)]
pub struct Timing {
    /// ADDED/MODIFIED/DELETED lines, of any kind.
    pub events: u64,
    /// Syncs run, the implicit final one included.
    pub syncs: u64,
    /// Parsing JSON into objects.
    pub decode_ns: u64,
    /// Converting objects and updating the cache.
    pub update_ns: u64,
    /// Applying pending changes to the endpoints map.
    pub sync_ns: u64,
    /// Peak resident set size (`VmHWM`), in KiB.
    pub peak_rss_kib: u64,
}

/// Runs `f` and adds its duration to `counter`.
pub fn timed<T>(counter: &mut u64, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    *counter += u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    out
}

/// `VmHWM` of this process in KiB, or 0 where /proc is not available.
pub fn peak_rss_kib() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
