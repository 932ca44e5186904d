//! Unit and property tests of the event fold.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::Event;
use proptest::prelude::*;

use crate::fold::{EventFold, EventHandler};

fn obj(id: u8, version: u8) -> Service {
    let mut s = Service::default();
    s.metadata.name = Some(format!("o{id}"));
    s.metadata.namespace = Some("ns".into());
    s.metadata.resource_version = Some(version.to_string());
    if (id + version).is_multiple_of(4) {
        s.metadata.labels = Some([("skip".to_string(), "1".to_string())].into());
    }
    s
}

fn selected(s: &Service) -> bool {
    !s.metadata.labels.as_ref().is_some_and(|l| l.contains_key("skip"))
}

fn key(s: &Service) -> String {
    s.metadata.name.clone().unwrap_or_default()
}

/// A handler that checks every call against what it was told before.
#[derive(Default)]
struct Recorder {
    view: BTreeMap<String, Service>,
    synced: u32,
    calls: Vec<String>,
}

impl EventHandler<Service> for Recorder {
    fn on_add(&mut self, obj: &Service) {
        assert!(
            self.view.insert(key(obj), obj.clone()).is_none(),
            "add of a known object"
        );
        self.calls.push(format!("add {}", key(obj)));
    }
    fn on_update(&mut self, old: &Service, new: &Service) {
        assert_eq!(
            self.view.get(&key(old)),
            Some(old),
            "update's old is what the handler has"
        );
        assert_ne!(
            old.metadata.resource_version, new.metadata.resource_version,
            "no-op update"
        );
        self.view.insert(key(new), new.clone());
        self.calls.push(format!("update {}", key(new)));
    }
    fn on_delete(&mut self, obj: &Service) {
        assert_eq!(
            self.view.remove(&key(obj)).as_ref(),
            Some(obj),
            "tombstone is the last known object"
        );
        self.calls.push(format!("delete {}", key(obj)));
    }
    fn on_synced(&mut self) {
        self.synced += 1;
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Apply(u8, u8),
    Delete(u8, u8),
    Init,
    InitApply(u8, u8),
    InitDone,
}

fn to_event(e: &Ev) -> Event<Service> {
    match *e {
        Ev::Apply(i, v) => Event::Apply(obj(i, v)),
        Ev::Delete(i, v) => Event::Delete(obj(i, v)),
        Ev::Init => Event::Init,
        Ev::InitApply(i, v) => Event::InitApply(obj(i, v)),
        Ev::InitDone => Event::InitDone,
    }
}

/// The reference: what the handler must know after each event. A list's
/// objects count at once; what it did not list goes at its `InitDone`.
#[derive(Default)]
struct Reference {
    view: BTreeMap<String, String>,
    listed: Option<BTreeSet<String>>,
    synced: bool,
}

impl Reference {
    fn apply(&mut self, e: &Ev) {
        let put = |m: &mut BTreeMap<String, String>, i: u8, v: u8| {
            let o = obj(i, v);
            let selected = selected(&o);
            if selected {
                m.insert(key(&o), v.to_string());
            } else {
                m.remove(&key(&o));
            }
            selected
        };
        match *e {
            Ev::Apply(i, v) => {
                put(&mut self.view, i, v);
            }
            Ev::Delete(i, _) => {
                self.view.remove(&format!("o{i}"));
                if let Some(l) = &mut self.listed {
                    l.remove(&format!("o{i}"));
                }
            }
            Ev::Init => self.listed = Some(BTreeSet::new()),
            Ev::InitApply(i, v) => {
                let selected = put(&mut self.view, i, v);
                if let Some(l) = &mut self.listed {
                    if selected {
                        l.insert(format!("o{i}"));
                    } else {
                        l.remove(&format!("o{i}"));
                    }
                }
            }
            Ev::InitDone => {
                if let Some(l) = self.listed.take() {
                    self.view.retain(|k, _| l.contains(k));
                    self.synced = true;
                }
            }
        }
    }
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => (0..6u8, 0..5u8).prop_map(|(i, v)| Ev::Apply(i, v)),
        2 => (0..6u8, 0..5u8).prop_map(|(i, v)| Ev::Delete(i, v)),
        1 => Just(Ev::Init),
        4 => (0..6u8, 0..5u8).prop_map(|(i, v)| Ev::InitApply(i, v)),
        1 => Just(Ev::InitDone),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn handler_view_is_the_last_complete_list_plus_later_events(events in prop::collection::vec(ev(), 0..60)) {
        let mut fold = EventFold::with_selection(selected);
        let mut rec = Recorder::default();
        let mut reference = Reference::default();
        for e in &events {
            fold.apply(to_event(e), &mut rec);
            reference.apply(e);
            let got: BTreeMap<String, String> = rec
                .view
                .iter()
                .map(|(k, s)| (k.clone(), s.metadata.resource_version.clone().unwrap_or_default()))
                .collect();
            prop_assert_eq!(&got, &reference.view, "after {:?}", e);
            prop_assert_eq!(rec.synced, u32::from(reference.synced));
            prop_assert_eq!(fold.is_synced(), reference.synced);
        }
    }
}

/// Every call, with the name and resourceVersion of what it was given.
#[derive(Default)]
struct Log(Vec<String>);

impl EventHandler<Service> for Log {
    fn on_add(&mut self, obj: &Service) {
        self.0.push(format!("add {}", version(obj)));
    }
    fn on_update(&mut self, old: &Service, new: &Service) {
        self.0.push(format!("update {} -> {}", version(old), version(new)));
    }
    fn on_delete(&mut self, obj: &Service) {
        self.0
            .push(format!("delete {} ns={:?}", version(obj), obj.metadata.namespace));
    }
    fn on_synced(&mut self) {
        self.0.push("synced".into());
    }
}

fn version(s: &Service) -> String {
    format!("{}@{}", key(s), s.metadata.resource_version.as_deref().unwrap_or("-"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn slim_records_make_the_same_calls_as_whole_copies(events in prop::collection::vec(ev(), 0..60)) {
        let mut whole = EventFold::with_selection(selected);
        let mut slim = EventFold::with_selection(selected).keeping(crate::tombstone::SlimServices);
        let (mut a, mut b) = (Log::default(), Log::default());
        for e in &events {
            whole.apply(to_event(e), &mut a);
            slim.apply(to_event(e), &mut b);
        }
        prop_assert_eq!(a.0, b.0);
        prop_assert_eq!(whole.len(), slim.len());
    }
}

#[test]
fn delete_while_down_is_found_by_the_relist() {
    let mut fold = EventFold::new();
    let mut rec = Recorder::default();
    for e in [
        Event::Init,
        Event::InitApply(obj(1, 1)),
        Event::InitApply(obj(2, 1)),
        Event::InitDone,
    ] {
        fold.apply(e, &mut rec);
    }
    assert_eq!(rec.synced, 1);
    // The watch drops; o1 is deleted and o2 changed meanwhile; the relist
    // shows only the new o2.
    for e in [Event::Init, Event::InitApply(obj(2, 2)), Event::InitDone] {
        fold.apply(e, &mut rec);
    }
    assert_eq!(rec.calls, ["add o1", "add o2", "update o2", "delete o1"]);
    assert_eq!(rec.synced, 1, "synced fires once");
    assert_eq!(fold.stats().deletes_found_by_relist, 1);
    assert_eq!(fold.stats().lists, 2);
}

#[test]
fn aborted_relist_updates_but_deletes_nothing() {
    let mut fold = EventFold::new();
    let mut rec = Recorder::default();
    for e in [
        Event::Init,
        Event::InitApply(obj(1, 1)),
        Event::InitApply(obj(2, 1)),
        Event::InitDone,
    ] {
        fold.apply(e, &mut rec);
    }
    // A relist fails after one page that has a newer o2 and a new o3 but
    // lacks o1: what it listed is applied, o1 stays.
    for e in [Event::Init, Event::InitApply(obj(2, 2)), Event::InitApply(obj(3, 1))] {
        fold.apply(e, &mut rec);
    }
    assert_eq!(rec.calls, ["add o1", "add o2", "update o2", "add o3"]);
    // The next list completes without o3 (deleted meanwhile): o3 goes, o1
    // and o2 are unchanged (same resourceVersions).
    for e in [
        Event::Init,
        Event::InitApply(obj(1, 1)),
        Event::InitApply(obj(2, 2)),
        Event::InitDone,
    ] {
        fold.apply(e, &mut rec);
    }
    assert_eq!(rec.calls, ["add o1", "add o2", "update o2", "add o3", "delete o3"]);
    assert_eq!(fold.stats().aborted_lists, 1);
    assert_eq!(fold.stats().deletes_found_by_relist, 1);
}

#[test]
fn an_object_that_stops_being_selected_is_deleted() {
    let mut fold = EventFold::with_selection(selected);
    let mut rec = Recorder::default();
    fold.apply(Event::Apply(obj(1, 1)), &mut rec);
    fold.apply(Event::Apply(obj(1, 3)), &mut rec); // (1 + 3) % 4 == 0: skipped
    assert_eq!(rec.calls, ["add o1", "delete o1"]);
    fold.apply(Event::Delete(obj(1, 3)), &mut rec);
    assert_eq!(rec.calls.len(), 2, "no delete of what the handler does not know");
}
