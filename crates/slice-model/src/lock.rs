//! The workspace's one way to take a lock.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, reading through poisoning. Every lock in the workspace
/// guards plain state (caches, trackers, stores, counters) that each
/// update leaves whole: a holder that panicked left nothing a later
/// reader could trip on, and stopping the proxy for it would only turn
/// one failure into an outage.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_hands_out_its_state() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *g = 2;
            panic!("poisons the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 2);
    }
}
