//! [`EndpointSliceCache`]: slices grouped per service, with the state the
//! proxier has applied and the changes it has not applied yet.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use indexmap::IndexSet;
use slice_model::{EndpointSlice, FastHash, IpFamily, ServiceName, SliceContent, SliceName};

use crate::ServiceEndpoints;
use crate::by_name::ByName;

/// What a slice will be once pending changes are applied.
#[derive(Debug)]
enum Pending {
    Update(SliceContent),
    Remove,
}

impl Pending {
    fn content(&self) -> Option<&SliceContent> {
        match self {
            Pending::Update(c) => Some(c),
            Pending::Remove => None,
        }
    }
}

/// One service's slices, by slice name (so merging visits them in name
/// order, as contract rule 11 asks).
#[derive(Debug, Default)]
struct ServiceTracker {
    /// Content in normal form ([`SliceContent::normalize`]), which the
    /// merge relies on.
    applied: ByName<SliceContent>,
    pending: ByName<Pending>,
    /// Trigger times of the pending changes.
    trigger_times: Vec<SystemTime>,
    /// The merge of `applied`, kept so that a checkout's `previous` costs
    /// nothing and each changed service is merged once.
    merged: Arc<ServiceEndpoints>,
}

impl ServiceTracker {
    fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.pending.is_empty()
    }
}

/// The pending changes of one service, checked out: its endpoints before and
/// after, and the trigger times of the slice changes behind it.
#[derive(Clone, Debug)]
pub struct ServiceChange {
    /// The service.
    pub service: ServiceName,
    /// Its endpoints as last checked out (empty for a new service).
    pub previous: Arc<ServiceEndpoints>,
    /// Its endpoints now (empty once its last slice is gone).
    pub current: Arc<ServiceEndpoints>,
    /// `last-change-trigger-time` of each slice change behind this one, in
    /// the order they arrived; empty if a slice was removed since the last
    /// checkout (a deletion's annotation is not the time of the change).
    pub trigger_times: Vec<SystemTime>,
}

/// A cache of EndpointSlices for one node and one IP family.
///
/// [`update`](Self::update) and [`remove`](Self::remove) record changes as
/// pending and say whether anything changed; [`checkout`](Self::checkout)
/// applies them and returns, per changed service, its endpoints before and
/// after. The cache is synchronous; share it behind a lock if needed.
///
/// Past the seed it implements: a slice is one object named by namespace
/// and name, so a new `kubernetes.io/service-name` label moves it to its new
/// service (rule 7); a service whose last slice is gone is forgotten
/// (kubernetes#128928); endpoints of the other IP family are dropped on the
/// way in, so changes to them cost nothing.
#[derive(Debug)]
pub struct EndpointSliceCache {
    node_name: Box<str>,
    family: IpFamily,
    trackers: HashMap<ServiceName, ServiceTracker, FastHash>,
    /// The service each known slice is filed under.
    owners: HashMap<SliceName, Arc<str>, FastHash>,
    /// Services with pending changes.
    dirty: IndexSet<ServiceName, FastHash>,
}

impl EndpointSliceCache {
    /// A cache for a proxier on `node_name` (empty: nothing is local) that
    /// serves `family`.
    pub fn new(node_name: impl Into<Box<str>>, family: IpFamily) -> Self {
        Self {
            node_name: node_name.into(),
            family,
            trackers: HashMap::default(),
            owners: HashMap::default(),
            dirty: IndexSet::default(),
        }
    }

    /// The node this cache decides locality for.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The IP family this cache keeps.
    pub fn family(&self) -> IpFamily {
        self.family
    }

    /// Records an added or modified slice. Returns whether anything changed;
    /// an update that changes nothing queues nothing.
    pub fn update(&mut self, slice: EndpointSlice) -> bool {
        let EndpointSlice {
            name,
            service,
            content,
            trigger_time,
        } = slice;
        let mut content = content.only_family(self.family);
        content.normalize();
        let mut changed = false;
        match self.owners.get(&name) {
            Some(old) if *old == service => {}
            Some(old) => {
                let old_service = ServiceName::new(name.namespace.clone(), old.clone());
                changed |= self.set_pending(&old_service, &name.name, Pending::Remove);
                self.owners.insert(name.clone(), service.clone());
            }
            None => {
                self.owners.insert(name.clone(), service.clone());
            }
        }
        let service = ServiceName::new(name.namespace.clone(), service);
        let changed_here = self.set_pending(&service, &name.name, Pending::Update(content));
        if changed_here
            && let Some(t) = trigger_time
            && let Some(tracker) = self.trackers.get_mut(&service)
        {
            tracker.trigger_times.push(t);
        }
        changed || changed_here
    }

    /// Records a deleted slice, found by name whatever service it was filed
    /// under. Removing a slice the cache never saw changes nothing.
    pub fn remove(&mut self, name: &SliceName) -> bool {
        let Some(service) = self.owners.remove(name) else {
            return false;
        };
        let service = ServiceName::new(name.namespace.clone(), service);
        self.set_pending(&service, &name.name, Pending::Remove)
    }

    fn set_pending(&mut self, service: &ServiceName, slice: &Arc<str>, wanted: Pending) -> bool {
        let tracker = self.trackers.entry(service.clone()).or_default();
        let applied = tracker.applied.get(slice);
        let has_pending = tracker.pending.contains_key(slice);
        if has_pending {
            if tracker.pending.get(slice).and_then(Pending::content) == wanted.content() {
                return false;
            }
        } else if applied == wanted.content() {
            if tracker.is_empty() {
                self.trackers.remove(service);
            }
            return false;
        }
        if matches!(wanted, Pending::Remove) {
            // A deletion's annotation is not the time of the change
            // (kube-proxy drops the service's trigger times likewise).
            tracker.trigger_times.clear();
        }
        // Only a slice with a pending change can be going back to what is
        // applied (without one, the check above already compared them).
        if has_pending && applied == wanted.content() {
            tracker.pending.remove(slice);
        } else {
            tracker.pending.insert(slice.clone(), wanted);
        }
        if !tracker.pending.is_empty() {
            self.dirty.insert(service.clone());
        } else {
            tracker.trigger_times.clear();
            self.dirty.swap_remove(service);
            if tracker.applied.is_empty() {
                self.trackers.remove(service);
            }
        }
        true
    }

    /// Whether any change is pending.
    pub fn has_pending(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// How many services have pending changes.
    pub fn pending_services(&self) -> usize {
        self.dirty.len()
    }

    /// How many services the cache tracks (with applied or pending slices).
    pub fn tracked_services(&self) -> usize {
        self.trackers.len()
    }

    /// How many slices the cache knows (applied or pending, not yet removed).
    pub fn known_slices(&self) -> usize {
        self.owners.len()
    }

    /// The service a slice is filed under, if the cache knows the slice.
    pub fn service_of(&self, slice: &SliceName) -> Option<ServiceName> {
        self.owners
            .get(slice)
            .map(|s| ServiceName::new(slice.namespace.clone(), s.clone()))
    }

    /// The applied slices of a service, by slice name.
    pub fn applied_slices(&self, service: &ServiceName) -> impl Iterator<Item = (&str, &SliceContent)> {
        self.trackers.get(service).into_iter().flat_map(|t| t.applied.iter())
    }

    /// Applies every pending change and returns one [`ServiceChange`] per
    /// service that had any, sorted by service name.
    pub fn checkout(&mut self) -> Vec<ServiceChange> {
        // Take the set rather than drain it: draining clears its whole hash
        // index, which after a big initial load costs O(cluster) per sync.
        let mut services: Vec<ServiceName> = std::mem::take(&mut self.dirty).into_iter().collect();
        services.sort_unstable();
        let mut changes = Vec::with_capacity(services.len());
        for service in services {
            let Some(tracker) = self.trackers.get_mut(&service) else {
                continue;
            };
            for (slice, p) in tracker.pending.take() {
                match p {
                    Pending::Update(c) => {
                        tracker.applied.insert(slice, c);
                    }
                    Pending::Remove => {
                        tracker.applied.remove(&slice);
                    }
                }
            }
            let current = Arc::new(ServiceEndpoints::merge_normalized(
                tracker.applied.iter().map(|(_, c)| c),
                &self.node_name,
            ));
            let previous = std::mem::replace(&mut tracker.merged, current.clone());
            let trigger_times = std::mem::take(&mut tracker.trigger_times);
            if tracker.applied.is_empty() {
                self.trackers.remove(&service);
            }
            changes.push(ServiceChange {
                service,
                previous,
                current,
                trigger_times,
            });
        }
        changes
    }
}
