//! The fewest writes that make a Service's EndpointSlices hold its wanted
//! endpoints, by Kubernetes' EndpointSlice controller's reconciling: per
//! address type and set of ports, each existing slice keeps the wanted
//! endpoints it holds (updated where they changed) and drops the others;
//! the slices so changed are filled up first, fullest first; what is left
//! goes into the unchanged slice it fits most closely, else into new
//! slices; a slice left empty is reused for a new one rather than deleted
//! and created. A change to one pod is then one slice written.

use std::collections::{BTreeMap, BTreeSet};

use informer_glue::versions::ListField;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::endpoint::{AddressType, PodEndpoint};

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming the controller that manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The label upstream puts on the slices of a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The annotation holding when the last change a write reflects happened.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// How slices are written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceRules {
    /// The `managed-by` label's value: the slices this controller owns.
    pub controller: String,
    /// At most this many endpoints in a slice (upstream's
    /// `--max-endpoints-per-slice`, 100 by default).
    pub max_endpoints_per_slice: usize,
}

/// The writes that bring a Service's slices to what is wanted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// New slices (named by the API server from `generateName`).
    pub create: Vec<EndpointSlice>,
    /// Existing slices, whole, as they should be.
    pub update: Vec<EndpointSlice>,
    /// Names of slices to delete.
    pub delete: Vec<String>,
    /// Endpoints added, over all slices.
    pub added: usize,
    /// Endpoints removed, over all slices.
    pub removed: usize,
}

impl Plan {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }

    /// Slices written (created, updated or deleted).
    pub fn writes(&self) -> usize {
        self.create.len() + self.update.len() + self.delete.len()
    }
}

/// A slice's ports, comparable.
type PortsKey = Vec<(String, i32, String, String)>;

fn ports_key(ports: &[EndpointPort]) -> PortsKey {
    let mut key: PortsKey = ports
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.clone().unwrap_or_default(),
                p.app_protocol.clone().unwrap_or_default(),
            )
        })
        .collect();
    key.sort();
    key
}

/// An endpoint's identity: its address and the pod it stands for.
type EndpointKey = (String, String);

fn endpoint_key(e: &Endpoint) -> EndpointKey {
    let address = e.addresses.first().cloned().unwrap_or_default();
    let target = e
        .target_ref
        .as_ref()
        .map(|t| {
            format!(
                "{}/{}",
                t.namespace.as_deref().unwrap_or_default(),
                t.name.as_deref().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    (address, target)
}

fn uid(svc: &Service) -> Option<&str> {
    svc.metadata.uid.as_deref()
}

/// Whether the Service owns the slice (an owner reference with its uid).
fn owned_by(slice: &EndpointSlice, svc: &Service) -> bool {
    let refs = slice.metadata.owner_references.iter().flatten();
    refs.into_iter()
        .any(|r| r.kind == "Service" && Some(r.uid.as_str()) == uid(svc))
}

/// The labels a slice of `svc` carries: the Service's, but for the
/// reserved ones, with the Service's name and the controller's.
pub fn slice_labels(svc: &Service, rules: &SliceRules) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = svc
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !matches!(k.as_str(), SERVICE_NAME_LABEL | MANAGED_BY_LABEL | HEADLESS_LABEL))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(SERVICE_NAME_LABEL.into(), svc.metadata.name.clone().unwrap_or_default());
    labels.insert(MANAGED_BY_LABEL.into(), rules.controller.clone());
    let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    if headless {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels
}

/// A new, empty slice of `svc` with these ports.
fn new_slice(svc: &Service, rules: &SliceRules, address_type: AddressType, ports: &[EndpointPort]) -> EndpointSlice {
    let name = svc.metadata.name.clone().unwrap_or_default();
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: svc.metadata.namespace.clone(),
            generate_name: Some(format!("{name}-")),
            labels: Some(slice_labels(svc, rules)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name,
                uid: uid(svc).unwrap_or_default().to_owned(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        address_type: address_type.as_str().into(),
        ports: Some(ports.to_vec()),
        endpoints: ListField::of(Some(Vec::new())),
    }
}

/// A slice's endpoints (`null` is none).
fn endpoints_of(slice: &EndpointSlice) -> &[Endpoint] {
    slice.endpoints.items()
}

/// Appends `e` to the slice's endpoints.
fn push(slice: &mut EndpointSlice, e: Endpoint) {
    slice.endpoints.items_mut().push(e);
}

/// The wanted endpoints of one address type, grouped by their ports.
struct Group {
    ports: Vec<EndpointPort>,
    endpoints: BTreeMap<EndpointKey, Endpoint>,
}

fn groups(wanted: &[PodEndpoint]) -> BTreeMap<PortsKey, Group> {
    let mut out: BTreeMap<PortsKey, Group> = BTreeMap::new();
    for w in wanted {
        let g = out.entry(ports_key(&w.ports)).or_insert_with(|| Group {
            ports: w.ports.clone(),
            endpoints: BTreeMap::new(),
        });
        g.endpoints.insert(endpoint_key(&w.endpoint), w.endpoint.clone());
    }
    out
}

/// The plan for `svc`: `wanted` endpoints of each address type it serves,
/// against its `existing` slices (those labelled with its name and the
/// controller's). `trigger_time` goes on every slice written.
pub fn reconcile(
    svc: &Service,
    wanted: &BTreeMap<AddressType, Vec<PodEndpoint>>,
    existing: &[EndpointSlice],
    rules: &SliceRules,
    trigger_time: Option<&str>,
) -> Plan {
    let mut plan = Plan::default();
    let mut by_type: BTreeMap<AddressType, Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in existing {
        match AddressType::parse(&slice.address_type).filter(|t| wanted.contains_key(t)) {
            Some(t) => by_type.entry(t).or_default().push(slice),
            None => plan.delete.push(name_of(slice)),
        }
    }
    for (&address_type, endpoints) in wanted {
        let slices = by_type.remove(&address_type).unwrap_or_default();
        by_address_type(svc, rules, address_type, endpoints, &slices, &mut plan);
    }
    for slice in plan.create.iter_mut().chain(plan.update.iter_mut()) {
        if let Some(t) = trigger_time {
            slice
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(TRIGGER_TIME_ANNOTATION.into(), t.into());
        }
    }
    plan
}

fn name_of(slice: &EndpointSlice) -> String {
    slice.metadata.name.clone().unwrap_or_default()
}

fn by_address_type(
    svc: &Service,
    rules: &SliceRules,
    address_type: AddressType,
    wanted: &[PodEndpoint],
    existing: &[&EndpointSlice],
    plan: &mut Plan,
) {
    let mut by_ports: BTreeMap<PortsKey, Vec<EndpointSlice>> = BTreeMap::new();
    let mut delete: Vec<EndpointSlice> = Vec::new();
    for slice in existing {
        if owned_by(slice, svc) {
            let ports = slice.ports.as_deref().unwrap_or_default();
            by_ports.entry(ports_key(ports)).or_default().push((*slice).clone());
        } else {
            delete.push((*slice).clone());
        }
    }
    let mut create = Vec::new();
    let mut update = Vec::new();
    for (key, group) in groups(wanted) {
        let slices = by_ports.remove(&key).unwrap_or_default();
        let out = by_ports_group(svc, rules, address_type, group, slices);
        plan.added += out.added;
        plan.removed += out.removed;
        create.extend(out.create);
        update.extend(out.update);
        delete.extend(out.delete);
    }
    // Port sets no longer wanted.
    delete.extend(by_ports.into_values().flatten());
    // Without any slice, a placeholder holds the Service's place, as
    // upstream keeps one (kept when it is already there).
    if existing.len() == delete.len() && create.is_empty() {
        let placeholder = new_slice(svc, rules, address_type, &[]);
        match delete.as_slice() {
            [one] if is_placeholder(one, &placeholder) => delete.clear(),
            _ => create.push(placeholder),
        }
    }
    // A slice that would be deleted while another is created is reused:
    // one update instead of a delete and a create.
    while let Some(mut slice) = create.pop() {
        let Some(i) = delete.iter().position(|d| owned_by(d, svc)) else {
            create.push(slice);
            break;
        };
        let old = delete.remove(i);
        slice.metadata.name = old.metadata.name.clone();
        slice.metadata.generate_name = None;
        slice.metadata.resource_version = old.metadata.resource_version.clone();
        update.push(slice);
    }
    plan.create.extend(create);
    plan.update.extend(update);
    plan.delete.extend(delete.iter().map(name_of));
}

fn is_placeholder(slice: &EndpointSlice, placeholder: &EndpointSlice) -> bool {
    endpoints_of(slice).is_empty()
        && slice.ports.as_deref().unwrap_or_default().is_empty()
        && slice.metadata.labels == placeholder.metadata.labels
}

/// One port set's writes.
#[derive(Default)]
struct GroupPlan {
    create: Vec<EndpointSlice>,
    update: Vec<EndpointSlice>,
    delete: Vec<EndpointSlice>,
    added: usize,
    removed: usize,
}

fn by_ports_group(
    svc: &Service,
    rules: &SliceRules,
    address_type: AddressType,
    group: Group,
    existing: Vec<EndpointSlice>,
) -> GroupPlan {
    let max = rules.max_endpoints_per_slice.max(1);
    let labels = slice_labels(svc, rules);
    let mut left = group.endpoints;
    let mut out = GroupPlan::default();
    let (mut changed, mut unchanged) = (Vec::new(), Vec::new());
    // 1. Each slice keeps the wanted endpoints it holds, as they are wanted.
    for mut slice in existing {
        let held = slice.endpoints.take_items();
        let before = held.len();
        let mut endpoint_changed = false;
        let mut kept = Vec::with_capacity(before);
        for e in held {
            if let Some(want) = left.remove(&endpoint_key(&e)) {
                endpoint_changed |= want != e;
                kept.push(want);
            }
        }
        out.removed += before - kept.len();
        let labels_changed = slice.metadata.labels.as_ref() != Some(&labels);
        let now = kept.len();
        slice.endpoints = ListField::of(Some(kept));
        if now == 0 && before > 0 {
            out.delete.push(slice);
        } else if endpoint_changed || now != before || labels_changed {
            slice.metadata.labels = Some(labels.clone());
            changed.push(slice);
        } else {
            unchanged.push(slice);
        }
    }
    out.added = left.len();
    let mut left = left.into_values();
    let mut pending = left.len();
    // 2. Fill the slices being written anyway, fullest first.
    changed.sort_by_key(|s| std::cmp::Reverse(endpoints_of(s).len()));
    for slice in &mut changed {
        while endpoints_of(slice).len() < max {
            let Some(e) = left.next() else { break };
            push(slice, e);
            pending -= 1;
        }
    }
    // 3. The rest into the unchanged slice it fits most closely, else into
    //    new slices.
    while pending > 0 {
        let fits = (pending < max).then(|| closest_fit(&unchanged, pending, max)).flatten();
        let mut slice = match fits {
            Some(i) => unchanged.remove(i),
            None => new_slice(svc, rules, address_type, &group.ports),
        };
        while endpoints_of(&slice).len() < max {
            let Some(e) = left.next() else { break };
            push(&mut slice, e);
            pending -= 1;
        }
        if slice.metadata.name.is_some() {
            changed.push(slice);
        } else {
            out.create.push(slice);
        }
    }
    out.update = changed;
    out
}

/// The unchanged slice with the least room that still takes `n` more.
fn closest_fit(slices: &[EndpointSlice], n: usize, max: usize) -> Option<usize> {
    slices
        .iter()
        .enumerate()
        .filter(|(_, s)| endpoints_of(s).len() + n <= max)
        .min_by_key(|(_, s)| max - (endpoints_of(s).len() + n))
        .map(|(i, _)| i)
}

/// Which slices hold which endpoints: for tests and the controller's
/// checks, every endpoint key with the slices that hold it.
pub fn placement(slices: &[EndpointSlice]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for s in slices {
        for e in endpoints_of(s) {
            out.entry(endpoint_key(e)).or_default().insert(name_of(s));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ObjectReference, ServiceSpec};
    use k8s_openapi::api::discovery::v1::EndpointConditions;
    use proptest::prelude::*;

    use super::*;

    const CONTROLLER: &str = "multus-endpointslice-controller.npwg.k8s.io";

    fn rules(max: usize) -> SliceRules {
        SliceRules {
            controller: CONTROLLER.into(),
            max_endpoints_per_slice: max,
        }
    }

    fn service() -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("web".into()),
                uid: Some("svc-uid".into()),
                labels: Some(BTreeMap::from([
                    ("app".to_owned(), "web".to_owned()),
                    (
                        "service.kubernetes.io/service-proxy-name".to_owned(),
                        "multus-proxy".to_owned(),
                    ),
                    (MANAGED_BY_LABEL.to_owned(), "someone-else".to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec::default()),
            status: None,
        }
    }

    fn port(name: &str, number: i32) -> EndpointPort {
        EndpointPort {
            name: Some(name.into()),
            port: Some(number),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }
    }

    /// Pod `i` (address 192.168.10.i), ready or not, serving `ports`.
    fn pod(i: u32, ready: bool, ports: Vec<EndpointPort>) -> PodEndpoint {
        PodEndpoint {
            endpoint: Endpoint {
                addresses: vec![format!("192.168.{}.{}", 10 + i / 250, i % 250)],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(false),
                }),
                node_name: Some("node-1".into()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some("ns".into()),
                    name: Some(format!("pod-{i}")),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            },
            ports,
        }
    }

    fn wanted(pods: Vec<PodEndpoint>) -> BTreeMap<AddressType, Vec<PodEndpoint>> {
        BTreeMap::from([(AddressType::V4, pods)])
    }

    /// The API server's slices of the Service, with the plans applied.
    #[derive(Default)]
    struct Store {
        slices: BTreeMap<String, EndpointSlice>,
        made: usize,
    }

    impl Store {
        fn apply(&mut self, plan: &Plan) {
            for s in &plan.create {
                self.made += 1;
                let mut s = s.clone();
                let name = format!("{}{}", s.metadata.generate_name.clone().unwrap_or_default(), self.made);
                s.metadata.name = Some(name.clone());
                s.metadata.generate_name = None;
                self.slices.insert(name, s);
            }
            for s in &plan.update {
                let name = s.metadata.name.clone().expect("an update names its slice");
                assert!(self.slices.contains_key(&name), "update of a slice that exists: {name}");
                self.slices.insert(name, s.clone());
            }
            for name in &plan.delete {
                assert!(
                    self.slices.remove(name).is_some(),
                    "delete of a slice that exists: {name}"
                );
            }
        }

        fn all(&self) -> Vec<EndpointSlice> {
            self.slices.values().cloned().collect()
        }

        /// Reconciles and applies; the plan.
        fn sync(&mut self, pods: &[PodEndpoint], max: usize) -> Plan {
            let plan = reconcile(&service(), &wanted(pods.to_vec()), &self.all(), &rules(max), Some("t"));
            self.apply(&plan);
            plan
        }
    }

    #[test]
    fn a_cold_start_fills_slices_to_the_limit_with_the_services_labels_and_owner() {
        let pods: Vec<PodEndpoint> = (0..250).map(|i| pod(i, true, vec![port("http", 8080)])).collect();
        let mut store = Store::default();
        let plan = store.sync(&pods, 100);
        assert_eq!((plan.create.len(), plan.added), (3, 250));
        let mut sizes: Vec<usize> = store.slices.values().map(|s| endpoints_of(s).len()).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [50, 100, 100]);
        let s = store.slices.values().next().unwrap();
        let labels = s.metadata.labels.clone().unwrap();
        assert_eq!(labels.get(SERVICE_NAME_LABEL).map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(MANAGED_BY_LABEL).map(String::as_str),
            Some(CONTROLLER),
            "reserved: not mirrored"
        );
        assert_eq!(
            labels.get("app").map(String::as_str),
            Some("web"),
            "the Service's labels mirrored"
        );
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Service", "svc-uid", Some(true))
        );
        let annotations = s.metadata.annotations.clone().unwrap();
        assert_eq!(annotations.get(TRIGGER_TIME_ANNOTATION).map(String::as_str), Some("t"));
        assert!(store.sync(&pods, 100).is_empty(), "again: nothing to write");
    }

    #[test]
    fn one_pod_changed_is_one_slice_written() {
        let mut pods: Vec<PodEndpoint> = (0..250).map(|i| pod(i, true, vec![port("http", 8080)])).collect();
        let mut store = Store::default();
        store.sync(&pods, 100);
        pods[7] = pod(7, false, vec![port("http", 8080)]);
        let plan = store.sync(&pods, 100);
        assert_eq!((plan.update.len(), plan.writes()), (1, 1), "not ready: its slice only");
        // A pod of a full slice goes: 99, 100 and 50 left.
        let full = store.slices.values().find(|s| endpoints_of(s).len() == 100).unwrap();
        let gone = endpoint_key(&endpoints_of(full)[0]);
        pods.retain(|p| endpoint_key(&p.endpoint) != gone);
        let plan = store.sync(&pods, 100);
        assert_eq!((plan.update.len(), plan.writes(), plan.removed), (1, 1, 1));
        pods.push(pod(900, true, vec![port("http", 8080)]));
        let plan = store.sync(&pods, 100);
        assert_eq!(
            (plan.update.len(), plan.writes(), plan.added),
            (1, 1, 1),
            "into a slice with room"
        );
        let filled = endpoints_of(&plan.update[0]).len();
        assert_eq!(filled, 100, "the closest fit: the slice of 99, not the one of 50");
    }

    #[test]
    fn pods_that_lack_a_named_port_get_a_slice_of_their_own_ports() {
        let both = vec![port("http", 8080), port("metrics", 9090)];
        let pods = vec![
            pod(1, true, both.clone()),
            pod(2, true, vec![port("http", 8080)]),
            pod(3, true, both),
        ];
        let mut store = Store::default();
        store.sync(&pods, 100);
        let mut by_ports: Vec<(usize, usize)> = store
            .slices
            .values()
            .map(|s| (s.ports.as_ref().unwrap().len(), endpoints_of(s).len()))
            .collect();
        by_ports.sort_unstable();
        assert_eq!(by_ports, [(1, 1), (2, 2)]);
    }

    #[test]
    fn a_placeholder_without_pods_is_kept_then_reused() {
        let mut store = Store::default();
        let plan = store.sync(&[], 100);
        assert_eq!(plan.create.len(), 1);
        let placeholder = store.all()[0].clone();
        assert!(endpoints_of(&placeholder).is_empty() && placeholder.ports.as_ref().unwrap().is_empty());
        assert!(store.sync(&[], 100).is_empty(), "kept as it is");
        let plan = store.sync(&[pod(1, true, vec![port("http", 8080)])], 100);
        assert_eq!(
            (plan.update.len(), plan.writes()),
            (1, 1),
            "the placeholder becomes the slice"
        );
        assert_eq!(store.slices.len(), 1);
    }

    #[test]
    fn slices_of_another_owner_or_address_type_go_and_left_behind_ones_are_adopted() {
        let pods = vec![pod(1, true, vec![port("http", 8080)])];
        // What multus-service left: its label, this Service as owner.
        let mut adopted = new_slice(&service(), &rules(100), AddressType::V4, &[port("http", 8080)]);
        adopted.metadata.name = Some("web-old".into());
        adopted.endpoints = Some(vec![pod(1, true, vec![]).endpoint]);
        let mut foreign = adopted.clone();
        foreign.metadata.name = Some("web-foreign".into());
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "an-earlier-service".into();
        let mut six = adopted.clone();
        six.metadata.name = Some("web-six".into());
        six.address_type = "IPv6".into();
        let plan = reconcile(&service(), &wanted(pods), &[adopted, foreign, six], &rules(100), None);
        assert!(
            plan.create.is_empty() && plan.update.is_empty(),
            "web-old holds pod 1 already: {plan:?}"
        );
        let mut deleted = plan.delete.clone();
        deleted.sort();
        assert_eq!(deleted, ["web-foreign", "web-six"]);
    }

    /// One step of a pod set's life.
    #[derive(Clone, Debug)]
    enum Change {
        Add { id: u32, ready: bool, metrics: bool },
        Remove(usize),
        Flip(usize),
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            (0u32..40, any::<bool>(), any::<bool>()).prop_map(|(id, ready, metrics)| Change::Add {
                id,
                ready,
                metrics
            }),
            any::<usize>().prop_map(Change::Remove),
            any::<usize>().prop_map(Change::Flip),
        ]
    }

    fn ports_for(metrics: bool) -> Vec<EndpointPort> {
        if metrics {
            vec![port("http", 8080), port("metrics", 9090)]
        } else {
            vec![port("http", 8080)]
        }
    }

    proptest! {
        /// Against a model of the wanted set: after every change, each
        /// wanted endpoint is in exactly one slice, of its ports, as
        /// wanted; no slice is over the limit or holds what is not
        /// wanted; the change cost one write at most; and reconciling
        /// again writes nothing.
        #[test]
        fn slices_hold_exactly_the_wanted_endpoints_at_one_write_per_change(
            changes in proptest::collection::vec(change(), 1..60),
            max in 1usize..5,
        ) {
            let mut model: BTreeMap<u32, (bool, bool)> = BTreeMap::new();
            let mut store = Store::default();
            store.sync(&[], max);
            for c in changes {
                let ids: Vec<u32> = model.keys().copied().collect();
                match c {
                    Change::Add { id, ready, metrics } => {
                        if model.contains_key(&id) { continue; }
                        model.insert(id, (ready, metrics));
                    }
                    Change::Remove(i) if !ids.is_empty() => { model.remove(&ids[i % ids.len()]); }
                    Change::Flip(i) if !ids.is_empty() => {
                        if let Some(p) = model.get_mut(&ids[i % ids.len()]) { p.0 = !p.0; }
                    }
                    _ => continue,
                }
                let pods: Vec<PodEndpoint> =
                    model.iter().map(|(id, (ready, metrics))| pod(*id, *ready, ports_for(*metrics))).collect();
                let plan = store.sync(&pods, max);
                prop_assert!(plan.writes() <= 1, "one pod changed, {} writes: {plan:?}", plan.writes());
                let slices = store.all();
                for s in &slices {
                    prop_assert!(endpoints_of(s).len() <= max);
                }
                let placed = placement(&slices);
                prop_assert_eq!(placed.len(), pods.len(), "every wanted endpoint, nothing else");
                for want in &pods {
                    let key = endpoint_key(&want.endpoint);
                    let holders = placed.get(&key).cloned().unwrap_or_default();
                    prop_assert_eq!(holders.len(), 1, "{:?} in exactly one slice", key);
                    let holder = &store.slices[holders.iter().next().unwrap()];
                    prop_assert_eq!(ports_key(holder.ports.as_deref().unwrap_or_default()), ports_key(&want.ports));
                    let held = endpoints_of(holder).iter().find(|e| endpoint_key(e) == key).unwrap();
                    prop_assert_eq!(held, &want.endpoint);
                }
                prop_assert!(store.sync(&pods, max).is_empty(), "again: nothing to write");
            }
        }
    }
}
