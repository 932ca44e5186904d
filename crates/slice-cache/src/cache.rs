//! [`EndpointSliceCache`]: slices grouped per service, with the state the
//! proxier has applied and the changes it has not applied yet.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use slice_model::internal::FastHash;
use slice_model::{EndpointSlice, IpFamily, ServiceName, SliceContent, SliceName};

use crate::ServiceEndpoints;
use crate::by_name::ByName;

/// What a slice will be once pending changes are applied.
#[derive(Debug, Clone, PartialEq)]
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
/// order, as [rule 11](slice_model::rules) asks).
#[derive(Debug, Default, Clone, PartialEq)]
struct ServiceTracker {
    /// Content in normal form ([`SliceContent::normalize`]), which the
    /// merge relies on.
    applied: ByName<SliceContent>,
    /// Changes not checked out yet: boxed, since between syncs nearly every
    /// service has none, and the cache keeps a tracker per service.
    pending: Option<Box<PendingChanges>>,
    /// The merge of `applied`, kept so that a checkout's `previous` costs
    /// nothing and each changed service is merged once.
    merged: Arc<ServiceEndpoints>,
}

/// A service's changes since the last checkout; never empty while kept.
#[derive(Debug, Default, Clone, PartialEq)]
struct PendingChanges {
    slices: ByName<Pending>,
    /// Trigger times of the pending changes.
    trigger_times: Vec<SystemTime>,
}

impl ServiceTracker {
    fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.pending.is_none()
    }

    fn pending(&self, slice: &str) -> Option<&Pending> {
        self.pending.as_ref()?.slices.get(slice)
    }
}

/// The pending changes of one service, checked out: its endpoints before and
/// after, and the trigger times of the slice changes behind it.
#[derive(Clone, Debug, PartialEq)]
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
/// service ([rule 7](slice_model::rules)); a service whose last slice is gone is forgotten
/// (kubernetes#128928); endpoints of the other IP family are dropped on the
/// way in, so changes to them cost nothing.
///
/// `Clone` copies the whole cache (names and merged endpoint lists are
/// shared, not copied), for properties that compare a cache with a fork of
/// itself. Two caches are equal when they serve the same node and family
/// and hold the same slices, applied and pending.
#[derive(Debug, Clone)]
pub struct EndpointSliceCache {
    node_name: Box<str>,
    family: IpFamily,
    trackers: HashMap<ServiceName, ServiceTracker, FastHash>,
    /// The service each known slice is filed under.
    owners: HashMap<SliceName, ServiceName, FastHash>,
    /// Services that gained pending changes since the last checkout, in no
    /// order; a service may be listed twice, or have nothing pending any
    /// more (the checkout skips those). Adding to a list is a push, where a
    /// set looked the name up: a cache miss on every update.
    queued: Vec<ServiceName>,
    /// How many services have pending changes.
    pending_services: usize,
}

impl PartialEq for EndpointSliceCache {
    fn eq(&self, other: &Self) -> bool {
        // `queued` is left out: the order in which services were queued
        // says nothing the trackers' pending changes do not.
        self.node_name == other.node_name
            && self.family == other.family
            && self.trackers == other.trackers
            && self.owners == other.owners
            && self.pending_services == other.pending_services
    }
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
            queued: Vec::new(),
            pending_services: 0,
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

    /// Records an added or modified slice. Only this cache's family is
    /// kept of its endpoints.
    ///
    /// Returns whether the cache's record of the slice changed (a slice it
    /// had not seen, another service, or other content); an update that
    /// changes nothing queues nothing. That is not whether a service's
    /// endpoints change: a new slice whose endpoints are all of the other
    /// family is recorded (`true`) though it adds none. What changed for
    /// the services is what the checkout (and `EndpointsMap::update`)
    /// reports.
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
        let service = match self.owners.get(&name) {
            Some(old) if *old.name == *service => old.clone(),
            old => {
                if let Some(old) = old.cloned() {
                    changed |= self.set_pending(&old, &name.name, Pending::Remove, None);
                }
                let service = self.known_name(ServiceName::new(name.namespace.clone(), service));
                self.owners.insert(name.clone(), service.clone());
                service
            }
        };
        changed | self.set_pending(&service, &name.name, Pending::Update(content), trigger_time)
    }

    /// The copy of `service` the cache already holds, if it tracks the
    /// service: each service's name is held once, however many slices and
    /// maps refer to it.
    fn known_name(&self, service: ServiceName) -> ServiceName {
        self.trackers
            .get_key_value(&service)
            .map_or(service, |(known, _)| known.clone())
    }

    /// Records a deleted slice, found by name whatever service it was filed
    /// under. Returns whether the cache knew the slice (its removal is then
    /// pending); removing a slice the cache never saw changes nothing and
    /// returns `false`.
    pub fn remove(&mut self, name: &SliceName) -> bool {
        let Some(service) = self.owners.remove(name) else {
            return false;
        };
        self.set_pending(&service, &name.name, Pending::Remove, None)
    }

    /// Makes `wanted` the pending state of `slice`, recording `trigger_time`
    /// if that changed anything.
    fn set_pending(
        &mut self,
        service: &ServiceName,
        slice: &Arc<str>,
        wanted: Pending,
        trigger_time: Option<SystemTime>,
    ) -> bool {
        let tracker = self.trackers.entry(service.clone()).or_default();
        let was_pending = tracker.pending.is_some();
        let applied = tracker.applied.get(slice);
        let pending = tracker.pending(slice);
        if let Some(pending) = pending {
            if pending.content() == wanted.content() {
                return false;
            }
        } else if applied == wanted.content() {
            if tracker.is_empty() {
                self.trackers.remove(service);
            }
            return false;
        }
        // Only a slice with a pending change can be going back to what is
        // applied (without one, the check above already compared them).
        let back_to_applied = pending.is_some() && applied == wanted.content();
        let changes = tracker.pending.get_or_insert_default();
        if matches!(wanted, Pending::Remove) {
            // A deletion's annotation is not the time of the change
            // (kube-proxy drops the service's trigger times likewise).
            changes.trigger_times.clear();
        }
        if back_to_applied {
            changes.slices.remove(slice);
        } else {
            changes.slices.insert(slice.clone(), wanted);
        }
        if changes.slices.is_empty() {
            tracker.pending = None;
        } else {
            changes.trigger_times.extend(trigger_time);
        }
        let now_pending = tracker.pending.is_some();
        let forget = !now_pending && tracker.applied.is_empty();
        match (was_pending, now_pending) {
            (false, true) => {
                self.pending_services += 1;
                self.queued.push(service.clone());
                if self.queued.len() > 2 * self.pending_services + 64 {
                    self.compact_queue();
                }
            }
            (true, false) => self.pending_services -= 1,
            _ => {}
        }
        if forget {
            self.trackers.remove(service);
        }
        true
    }

    /// Lists each service with pending changes once: keeps the queue in
    /// proportion to them when changes come and go between checkouts.
    fn compact_queue(&mut self) {
        self.queued.sort_unstable();
        self.queued.dedup();
        let trackers = &self.trackers;
        self.queued
            .retain(|s| trackers.get(s).is_some_and(|t| t.pending.is_some()));
    }

    /// Whether any change is pending.
    pub fn has_pending(&self) -> bool {
        self.pending_services > 0
    }

    /// How many services have pending changes.
    pub fn pending_services(&self) -> usize {
        self.pending_services
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
        self.owners.get(slice).cloned()
    }

    /// The applied slices of a service, by slice name.
    pub fn applied_slices(&self, service: &ServiceName) -> impl Iterator<Item = (&str, &SliceContent)> {
        self.trackers.get(service).into_iter().flat_map(|t| t.applied.iter())
    }

    /// Applies every pending change and returns one [`ServiceChange`] per
    /// service that had any, sorted by service name.
    #[must_use = "checked-out changes are no longer pending: dropping them loses them"]
    pub fn checkout(&mut self) -> Vec<ServiceChange> {
        let mut changes = Vec::with_capacity(self.pending_services);
        self.checkout_each(|change| changes.push(change));
        changes
    }

    /// [`checkout`](Self::checkout), handing each service's change to
    /// `apply` as soon as it is merged, in service name order.
    ///
    /// A caller that compares, counts and stores each change right away
    /// reads the merge while it is still in the CPU caches; with the whole
    /// checkout collected first, a busy sync's merges had left them by the
    /// time they were read.
    pub fn checkout_each(&mut self, mut apply: impl FnMut(ServiceChange)) {
        let mut services = std::mem::take(&mut self.queued);
        services.sort_unstable();
        services.dedup();
        self.pending_services = 0;
        for service in services {
            let Some(tracker) = self.trackers.get_mut(&service) else {
                continue;
            };
            let Some(changes) = tracker.pending.take() else {
                // Its changes were undone before this checkout.
                continue;
            };
            let PendingChanges {
                mut slices,
                trigger_times,
            } = *changes;
            for (slice, p) in slices.take() {
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
            if tracker.applied.is_empty() {
                self.trackers.remove(&service);
            }
            apply(ServiceChange {
                service,
                previous,
                current,
                trigger_times,
            });
        }
    }
}

#[cfg(test)]
mod queue_tests {
    use slice_model::{Protocol, SliceEndpoint};

    use super::*;

    fn slice(name: &str, addr: &str) -> EndpointSlice {
        EndpointSlice::new("ns", name, "web")
            .unwrap()
            .with_port("http", Protocol::Tcp, 80)
            .with_endpoint(SliceEndpoint::new(addr.parse().unwrap()))
    }

    #[test]
    fn caches_holding_the_same_slices_are_equal_whatever_the_order_they_came_in() {
        let of = |service: &str, addr: &str| {
            EndpointSlice::new("ns", &format!("{service}-1"), service)
                .unwrap()
                .with_port("http", Protocol::Tcp, 80)
                .with_endpoint(SliceEndpoint::new(addr.parse().unwrap()))
        };
        let (a, b) = (of("web", "10.0.0.1"), of("api", "10.0.0.2"));
        let mut one = EndpointSliceCache::new("node-1", IpFamily::V4);
        let mut two = one.clone();
        one.update(a.clone());
        one.update(b.clone());
        two.update(b.clone());
        two.update(a.clone());
        assert_ne!(one.queued, two.queued, "queued in another order");
        assert_eq!(one, two);
        let _ = one.checkout();
        assert_ne!(one, two, "applied is not pending");
        let _ = two.checkout();
        assert_eq!(one, two);
        two.update(of("api", "10.0.0.3"));
        assert_ne!(one, two);
        assert_ne!(
            EndpointSliceCache::new("node-2", IpFamily::V4),
            EndpointSliceCache::new("node-1", IpFamily::V4)
        );
    }

    #[test]
    fn changes_undone_before_a_checkout_leave_a_short_queue_and_nothing_to_check_out() {
        let mut c = EndpointSliceCache::new("node-1", IpFamily::V4);
        c.update(slice("a", "10.0.0.1"));
        assert_eq!(c.checkout().len(), 1);
        for _ in 0..1000 {
            assert!(c.update(slice("a", "10.0.0.2")));
            assert!(c.update(slice("a", "10.0.0.1")), "back to what is applied");
        }
        assert!(!c.has_pending() && c.pending_services() == 0);
        assert!(c.queued.len() <= 2 + 64, "queue compacted: {}", c.queued.len());
        assert!(c.checkout().is_empty());

        assert!(c.update(slice("a", "10.0.0.2")));
        assert!(c.update(slice("b", "10.0.0.3")));
        assert!(c.update(slice("a", "10.0.0.1")));
        assert!(c.update(slice("a", "10.0.0.2")), "queued twice");
        assert_eq!(c.pending_services(), 1);
        let changes = c.checkout();
        assert_eq!(changes.len(), 1, "one change per service");
        assert_eq!(changes[0].current.ports()[0].endpoints.len(), 2);
        assert!(!c.has_pending());
    }
}
