//! The ledger: what the kernel holds, as far as proxyd knows, per service.

use std::collections::{BTreeSet, HashMap};

use slice_model::ServiceName;

use crate::element::Frontend;
use crate::fragment::{Fragment, Shared};
use crate::packed::Packed;

/// What the kernel holds, as far as proxyd knows.
#[derive(Debug, Default)]
pub(super) struct Programmed {
    /// Encoded: they are read back only when their service changes or
    /// the whole table is written.
    pub(super) fragments: HashMap<ServiceName, Packed>,
    /// Which service holds each frontend (first come, first served).
    pub(super) owners: HashMap<Frontend, ServiceName>,
    /// Services that wanted a frontend another one held.
    pub(super) waiting: HashMap<Frontend, BTreeSet<ServiceName>>,
    /// How many services want each shared element.
    pub(super) shared: HashMap<Shared, u32>,
    /// Shared elements that appeared (+1) or disappeared (-1) since the
    /// last [`Programmed::take_shared_changes`]: copying `shared` to diff it
    /// would cost a pass over every cluster IP per sync.
    pub(super) shared_changes: HashMap<Shared, i8>,
}

impl Programmed {
    /// Replaces one service's fragment; returns the one it had and the
    /// services waiting for frontends it gave up.
    pub(super) fn replace(
        &mut self,
        name: &ServiceName,
        build: impl FnOnce(&mut dyn FnMut(&Frontend) -> bool, Option<&Fragment>) -> Fragment,
    ) -> Replaced {
        let old = self.fragments.remove(name).map(|p| p.unpack());
        if let Some(o) = &old {
            for f in &o.frontends {
                if self.owners.get(f) == Some(name) {
                    self.owners.remove(f);
                }
            }
            for f in &o.blocked {
                if let Some(w) = self.waiting.get_mut(f) {
                    w.remove(name);
                    if w.is_empty() {
                        self.waiting.remove(f);
                    }
                }
            }
            for item in &o.shared {
                if let Some(n) = self.shared.get_mut(item) {
                    *n -= 1;
                    if *n == 0 {
                        self.shared.remove(item);
                        *self.shared_changes.entry(*item).or_default() -= 1;
                    }
                }
            }
        }
        let mut blocked = Vec::new();
        let owners = &mut self.owners;
        let mut claim = |f: &Frontend| match owners.get(f) {
            Some(other) if other != name => {
                tracing::warn!(
                    service = %name,
                    "{f} is already used by service {other}; this service's use of it waits until it is free"
                );
                blocked.push(*f);
                false
            }
            _ => {
                owners.insert(*f, name.clone());
                true
            }
        };
        let mut new = build(&mut claim, old.as_ref());
        blocked.shrink_to_fit();
        new.blocked = blocked;
        for f in &new.blocked {
            self.waiting.entry(*f).or_default().insert(name.clone());
        }
        for item in &new.shared {
            let n = self.shared.entry(*item).or_default();
            if *n == 0 {
                *self.shared_changes.entry(*item).or_default() += 1;
            }
            *n += 1;
        }
        let mut wake = Vec::new();
        if let Some(o) = &old {
            for f in o.frontends.iter().filter(|f| !self.owners.contains_key(f)) {
                wake.extend(self.waiting.get(f).into_iter().flatten().cloned());
            }
        }
        if !new.is_empty() {
            self.fragments.insert(name.clone(), Packed::pack(&new));
        }
        Replaced { old, new, wake }
    }

    /// The shared elements to add and to delete since the last call.
    pub(super) fn take_shared_changes(&mut self) -> (Vec<Shared>, Vec<Shared>) {
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        for (item, delta) in self.shared_changes.drain() {
            match delta {
                1.. => added.push(item),
                ..0 => removed.push(item),
                0 => {}
            }
        }
        (added, removed)
    }
}

/// One service's fragment replaced in the view.
pub(super) struct Replaced {
    /// The fragment it had.
    pub(super) old: Option<Fragment>,
    /// The one it has now (the view keeps it packed; this spares a sync
    /// that diffs them decoding it again).
    pub(super) new: Fragment,
    /// Services waiting for frontends it gave up.
    pub(super) wake: Vec<ServiceName>,
}
