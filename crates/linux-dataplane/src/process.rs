//! This process's standing with the kernel: its OOM score adjustment
//! (kube-proxy's `--oom-score-adj`, so the OOM killer picks the proxy
//! last).

use std::path::Path;

/// Where the kernel keeps this process's OOM score adjustment.
const OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";

/// Sets this process's OOM score adjustment to `value`; `Ok(false)` when
/// it already was. Lowering it needs `CAP_SYS_RESOURCE`.
pub fn set_oom_score_adj(value: i32) -> std::io::Result<bool> {
    set_in(Path::new(OOM_SCORE_ADJ), value)
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
