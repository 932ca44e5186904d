//! This process's standing with the kernel: its OOM score adjustment
//! (kube-proxy's `--oom-score-adj`, so the OOM killer picks the proxy
//! last), and the memory it holds.

use std::path::Path;

/// Where the kernel keeps this process's OOM score adjustment.
const OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";

/// Sets this process's OOM score adjustment to `value`; `Ok(false)` when
/// it already was. Lowering it needs `CAP_SYS_RESOURCE`.
pub fn set_oom_score_adj(value: i32) -> std::io::Result<bool> {
    set_in(Path::new(OOM_SCORE_ADJ), value)
}

/// kube-proxy's `--oom-score-adj`: the kernel's OOM killer picks this
/// process last. Said at info level either way, as kube-proxy says it (its
/// verbosity 2): lowering it needs `CAP_SYS_RESOURCE`, the rules do not
/// depend on it, and a warning on every start of a container without the
/// capability would be noise.
pub fn adjust_oom_score(value: i32) {
    match set_oom_score_adj(value) {
        Ok(true) => tracing::info!(oom_score_adj = value, "set"),
        Ok(false) => {}
        Err(e) => tracing::info!(
            "--oom-score-adj {value}: cannot write {OOM_SCORE_ADJ} ({e}; lowering it needs CAP_SYS_RESOURCE): the \
             score stays as it was"
        ),
    }
}

/// Hands the pages the allocator holds free back to the kernel; returns
/// whether it returned any.
///
/// glibc's malloc returns memory to the kernel only from the top of a heap:
/// after a burst (the initial lists, a full sync of a large cluster) the
/// pages freed below live allocations stay resident, and count against the
/// proxy's memory limit, until they are asked for. Call it after such a
/// burst, not on every sync: it walks every arena. With another C library
/// it does nothing and returns `false`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(unsafe_code, reason = "malloc_trim is a C function: calling one is unsafe in Rust")]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointer, and changes only the
    // allocator's own lists, under the allocator's own locks.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Hands the pages the allocator holds free back to the kernel: nothing to
/// do without glibc's malloc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

fn set_in(path: &Path, value: i32) -> std::io::Result<bool> {
    let now = std::fs::read_to_string(path)?;
    if now.trim() == value.to_string() {
        return Ok(false);
    }
    std::fs::write(path, value.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident anonymous memory, in bytes.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn resident_anon() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn memory_freed_below_live_allocations_goes_back_to_the_kernel() {
        // 64 MiB in 4 KiB blocks, every one written; then all but one in
        // 64 freed, so the free memory lies between live blocks, where
        // glibc does not return it by itself.
        let mut blocks: Vec<Box<[u8]>> = (0..16_384).map(|i| vec![i as u8; 4096].into_boxed_slice()).collect();
        let kept: Vec<Box<[u8]>> = blocks.iter_mut().step_by(64).map(std::mem::take).collect();
        drop(blocks);
        let before = resident_anon();
        assert!(release_free_memory(), "nothing returned");
        let after = resident_anon();
        assert!(
            before.saturating_sub(after) > 32 << 20,
            "resident {before} -> {after} bytes"
        );
        assert!(
            kept.iter()
                .enumerate()
                .all(|(i, b)| b.iter().all(|&x| x == (i * 64) as u8))
        );
    }

    #[test]
    fn a_value_is_written_only_when_it_differs() {
        let path = std::env::temp_dir().join(format!("linux-dataplane-oom-{}", std::process::id()));
        std::fs::write(&path, "0\n").expect("scratch file");
        assert!(set_in(&path, -999).expect("written"));
        assert_eq!(std::fs::read_to_string(&path).ok().as_deref(), Some("-999"));
        assert!(!set_in(&path, -999).expect("read"), "already so: not written");
        let _ = std::fs::remove_file(&path);
        assert!(set_in(&path, 1).is_err(), "no such file");
    }

    #[test]
    fn this_process_can_raise_its_own() {
        let now: i32 = std::fs::read_to_string(OOM_SCORE_ADJ)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .expect("a Linux process has one");
        // Raising it needs no privilege; the test process ends soon after.
        let higher = (now + 1).min(1000);
        assert_eq!(set_oom_score_adj(higher).ok(), Some(higher != now));
        assert_eq!(set_oom_score_adj(higher).ok(), Some(false));
    }
}
