//! The multus proxier against models: each pod's table is a
//! `KernelModel`, its routes a set; packets are traced from the pod.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU16;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use informer_glue::multus::{Attachment, NetworkName, PodInfo, PodStore, ServiceNetworks};
use nft_dataplane::stale_flows::Cleanup;
use nft_dataplane::tracer::{Host, Origin, Packet};
use nft_dataplane::{Dataplane, DataplaneError, KernelModel, SyncKind, Transaction};
use proptest::prelude::*;
use slice_model::{
    EndpointSlice, IpFamily, PodName, Protocol, ServiceInfo, ServiceName, ServicePort, SliceEndpoint, SliceName,
};

use super::PodProblem;
use super::proxier::{MultusProxier, PodBackend};
use super::resolver::{PodNetnsResolver, ResolveError};
use endpoints_map::Engine;
use linux_dataplane::ConntrackError;
use linux_dataplane::Route;
use linux_dataplane::{Netns, NetnsId};
use linux_dataplane::{RouteChange, RouteError};

/// The trigger time of every slice change here.
const CHANGED_AT: std::time::SystemTime = std::time::SystemTime::UNIX_EPOCH;

/// Every pod's namespace, as models: tables and routes by namespace
/// path, counts by pod.
#[derive(Default)]
struct World {
    kernels: BTreeMap<String, KernelModel>,
    routes: BTreeMap<String, BTreeSet<Route>>,
    transactions: BTreeMap<String, usize>,
    conntrack: BTreeMap<String, Vec<Cleanup>>,
    /// Namespaces that no longer exist (their sandbox died).
    dead: BTreeSet<String>,
    /// Pods whose nft fails (their namespace is fine).
    failing: BTreeSet<String>,
}

fn path_of(netns: &Netns) -> String {
    match netns {
        Netns::Path(p) => p.display().to_string(),
        other => format!("{other:?}"),
    }
}

type Shared = Arc<Mutex<World>>;

struct PodKernel {
    pod: String,
    netns: String,
    world: Shared,
}

impl Dataplane for PodKernel {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        let mut w = self.world.lock().unwrap();
        if w.dead.contains(&self.netns) {
            // What `nsenter --net=PATH nft` says then.
            return Err(DataplaneError::Rejected {
                status: "exit status: 1".into(),
                stderr: format!("nsenter: cannot open {}: No such file or directory", self.netns),
            });
        }
        if w.failing.contains(&self.pod) {
            return Err(DataplaneError::Rejected {
                status: "exit status: 1".into(),
                stderr: "injected".into(),
            });
        }
        *w.transactions.entry(self.pod.clone()).or_default() += 1;
        w.kernels
            .entry(self.netns.clone())
            .or_default()
            .apply_transaction(tx)
            .map(|()| 0)
    }

    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        self.world
            .lock()
            .unwrap()
            .kernels
            .entry(self.netns.clone())
            .or_default()
            .check(tx)
    }
}

struct Fake(Shared);

impl PodBackend for Fake {
    fn dataplane(&mut self, pod: &PodName, netns: &Netns) -> Box<dyn Dataplane + Send> {
        Box::new(PodKernel {
            pod: pod.to_string(),
            netns: path_of(netns),
            world: self.0.clone(),
        })
    }

    fn routes(
        &mut self,
        _: &PodName,
        netns: &Netns,
        _: IpFamily,
        want: &BTreeSet<Route>,
    ) -> Result<RouteChange, RouteError> {
        let mut w = self.0.lock().unwrap();
        let path = path_of(netns);
        if w.dead.contains(&path) {
            let source = std::io::Error::from(std::io::ErrorKind::NotFound);
            return Err(RouteError::Netns(linux_dataplane::NetnsError::Open { path, source }));
        }
        let have = w.routes.entry(path).or_default();
        let change = RouteChange {
            added: want.difference(have).count(),
            removed: have.difference(want).count(),
        };
        *have = want.clone();
        Ok(change)
    }

    fn conntrack(&mut self, pod: &PodName, _: &Netns, _: IpFamily, cleanup: &Cleanup) -> (u64, Vec<ConntrackError>) {
        let mut w = self.0.lock().unwrap();
        w.conntrack.entry(pod.to_string()).or_default().push(cleanup.clone());
        (cleanup.len() as u64, Vec::new())
    }

    fn remove_table(&mut self, _: &PodName, netns: &Netns, _: IpFamily) -> Result<(), nft_dataplane::DataplaneError> {
        self.0.lock().unwrap().kernels.remove(&path_of(netns));
        Ok(())
    }

    fn identify(&mut self, netns: &Netns) -> Option<NetnsId> {
        let path = path_of(netns);
        let w = self.0.lock().unwrap();
        (!w.dead.contains(&path)).then(|| NetnsId {
            dev: 0,
            ino: path.bytes().map(u64::from).sum(),
        })
    }
}

/// The runtime's sandboxes: every pod has a ready one, except those
/// named `gone-*` and those marked not ready; a pod's sandbox generation
/// (bumped when it is re-created) is part of its namespace's path.
#[derive(Default)]
struct Sandboxes {
    generation: BTreeMap<String, u32>,
    not_ready: BTreeSet<String>,
    /// The runtime does not answer.
    down: bool,
    /// Lists asked for.
    lists: usize,
}

#[derive(Clone, Default)]
struct Resolver(Arc<Mutex<Sandboxes>>);

impl Resolver {
    fn path(&self, key: &str) -> String {
        let generation = self.0.lock().unwrap().generation.get(key).copied().unwrap_or(0);
        format!("/fake/{}-{generation}", key.replace('/', "_"))
    }
}

impl PodNetnsResolver for Resolver {
    fn refresh(&mut self) -> Result<(), ResolveError> {
        let mut s = self.0.lock().unwrap();
        s.lists += 1;
        if s.down {
            return Err(ResolveError::Unavailable("connect: socket missing".into()));
        }
        Ok(())
    }

    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        let s = self.0.lock().unwrap();
        if s.down {
            return Err(ResolveError::Unavailable("connect: socket missing".into()));
        }
        if pod.name.starts_with("gone") || s.not_ready.contains(&pod.key().to_string()) {
            return Err(ResolveError::Gone("no ready sandbox for it".into()));
        }
        drop(s);
        Ok(PathBuf::from(self.path(&pod.key().to_string())))
    }
}

struct Setup {
    sandboxes: Resolver,
    proxier: MultusProxier,
    pods: Arc<Mutex<PodStore>>,
    networks: Arc<Mutex<ServiceNetworks>>,
    world: Shared,
}

fn setup() -> Setup {
    setup_family(IpFamily::V4)
}

fn setup_family(family: IpFamily) -> Setup {
    let pods: Arc<Mutex<PodStore>> = Arc::default();
    let networks: Arc<Mutex<ServiceNetworks>> = Arc::default();
    let world: Shared = Arc::default();
    let sandboxes = Resolver::default();
    let proxier = MultusProxier::new(
        Engine::new("node-1", family),
        pods.clone(),
        networks.clone(),
        Box::new(sandboxes.clone()),
        Box::new(Fake(world.clone())),
    );
    Setup {
        sandboxes,
        proxier,
        pods,
        networks,
        world,
    }
}

fn net(name: &str) -> NetworkName {
    NetworkName::parse(name, "default").unwrap()
}

/// A running pod on `nets` (network, interface, address).
fn pod(name: &str, nets: &[(&str, &str, &str)]) -> PodInfo {
    PodInfo {
        namespace: "default".into(),
        name: name.into(),
        uid: None,
        node: Some("node-1".into()),
        running: true,
        host_network: false,
        attachments: nets
            .iter()
            .map(|(n, i, ip)| Attachment {
                network: net(n),
                interface: (*i).into(),
                ips: vec![ip.parse().unwrap()],
            })
            .collect(),
    }
}

impl Setup {
    fn pod(&self, p: PodInfo) {
        self.pods.lock().unwrap().set(p.key(), Some(p));
    }

    fn remove_pod(&self, name: &str) {
        self.pods.lock().unwrap().set(PodName::new("default", name), None);
    }

    fn service(&mut self, name: &str, ip: &str, network: &str) {
        let mut s = ServiceInfo::new(ServiceName::new("default", name));
        s.cluster_ips = vec![ip.parse().unwrap()];
        s.ports = vec![ServicePort {
            name: "p".into(),
            protocol: Protocol::Udp,
            port: NonZeroU16::new(53).unwrap(),
            node_port: None,
            app_protocol: None,
        }];
        self.proxier.engine.update_service(&s);
        self.networks
            .lock()
            .unwrap()
            .by_service
            .insert(ServiceName::new("default", name), net(network));
    }

    fn remove_service(&mut self, name: &str) {
        self.proxier.engine.remove_service(&ServiceName::new("default", name));
        self.networks
            .lock()
            .unwrap()
            .by_service
            .remove(&ServiceName::new("default", name));
    }

    fn endpoints(&mut self, service: &str, ips: &[&str]) {
        let mut s = EndpointSlice::new("default", &format!("{service}-1"), service)
            .unwrap()
            .with_port("p", Protocol::Udp, 5353)
            .with_trigger_time(CHANGED_AT);
        for ip in ips {
            s = s.with_endpoint(SliceEndpoint::new(ip.parse().unwrap()).on_node("node-2"));
        }
        self.proxier.engine.update_slice(s);
    }

    fn transactions(&self) -> BTreeMap<String, usize> {
        self.world.lock().unwrap().transactions.clone()
    }

    /// Where a datagram the pod sends from `src` to `dst:53` goes.
    fn trace(&self, pod: &str, src: &str, dst: &str) -> String {
        let w = self.world.lock().unwrap();
        let Some(k) = w.kernels.get(&self.sandboxes.path(&format!("default/{pod}"))) else {
            return "no table".into();
        };
        let host = Host {
            local_addrs: vec![src.parse().unwrap()],
            ..Host::default()
        };
        k.trace(
            &host,
            Packet {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                protocol: Protocol::Udp,
                port: 53,
                origin: Origin::Local,
            },
        )
        .summary()
    }
}

fn two_networks() -> Setup {
    let mut s = setup();
    s.service("dns-blue", "10.96.0.10", "blue");
    s.endpoints("dns-blue", &["192.168.10.11", "192.168.10.12"]);
    s.service("dns-red", "10.96.0.20", "red");
    s.endpoints("dns-red", &["192.168.20.11"]);
    for i in 1..=3 {
        s.pod(pod(
            &format!("blue-{i}"),
            &[("blue", "net1", &format!("192.168.10.{}", 100 + i))],
        ));
    }
    for i in 1..=2 {
        s.pod(pod(
            &format!("red-{i}"),
            &[("red", "net1", &format!("192.168.20.{}", 100 + i))],
        ));
    }
    s.pod(pod("plain", &[]));
    s
}

#[test]
fn each_pod_gets_the_services_of_its_networks_and_routes_through_them() {
    let mut s = two_networks();
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().programmed, 5, "{out:?}");
    assert!(out.pods().failures.is_empty());
    assert_eq!(
        s.trace("blue-1", "192.168.10.101", "10.96.0.10"),
        "192.168.10.11:5353, 192.168.10.12:5353",
        "the pod's own address is kept"
    );
    assert_eq!(
        s.trace("blue-1", "192.168.10.101", "10.96.0.20"),
        "10.96.0.20:53",
        "another network's service: untouched"
    );
    assert_eq!(s.trace("red-2", "192.168.20.102", "10.96.0.20"), "192.168.20.11:5353");
    assert_eq!(
        s.trace("plain", "10.244.1.9", "10.96.0.10"),
        "no table",
        "not attached: untouched"
    );
    let w = s.world.lock().unwrap();
    let routes: Vec<String> = w.routes[&s.sandboxes.path("default/blue-2")]
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(routes, ["10.96.0.10 dev net1 src 192.168.10.102"]);
}

#[test]
fn one_endpoint_change_rewrites_only_the_pods_on_that_network() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    let before = s.transactions();
    s.world.lock().unwrap().conntrack.clear();
    s.endpoints("dns-red", &["192.168.20.12"]);
    let out = s.proxier.sync(SyncKind::Changes);
    let after = s.transactions();
    let written: Vec<&String> = after
        .keys()
        .filter(|k| after[*k] != before.get(*k).copied().unwrap_or(0))
        .collect();
    assert_eq!(written, ["default/red-1", "default/red-2"], "{out:?}");
    assert_eq!(out.pods().written, 2);
    let w = s.world.lock().unwrap();
    assert!(
        w.conntrack.keys().all(|k| k.starts_with("default/red-")),
        "stale UDP entries are deleted in the red pods only: {:?}",
        w.conntrack
    );
    drop(w);
    assert_eq!(s.trace("red-1", "192.168.20.101", "10.96.0.20"), "192.168.20.12:5353");
}

/// A pod whose table could not be written when an endpoint changed still
/// gets the stale entries of that change deleted, once its table is
/// written: what a target owes is kept across failures (as the node's).
#[test]
fn a_failed_write_keeps_the_pods_stale_flows_for_the_next_sync() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    s.world.lock().unwrap().conntrack.clear();
    s.world.lock().unwrap().failing.insert("default/red-1".into());
    s.endpoints("dns-red", &["192.168.20.12"]);
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().failures.len(), 1, "{out:?}");
    // The replaced endpoint's entries to the cluster IP.
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let deleted = |s: &Setup, pod: &str| {
        let w = s.world.lock().unwrap();
        let deletes = |c: &Cleanup| c.deletes(ip("10.96.0.20"), 53, ip("192.168.20.11"));
        w.conntrack.get(pod).is_some_and(|all| all.iter().any(deletes))
    };
    assert!(deleted(&s, "default/red-2"), "the pod written gets its cleanup now");
    assert_eq!(out.trigger_times, [CHANGED_AT], "programmed in red-2");
    assert!(!deleted(&s, "default/red-1"), "not before its rules are in place");
    s.world.lock().unwrap().failing.clear();
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(
        out.pods().failures.is_empty() && out.pods().pending.is_empty(),
        "{out:?}"
    );
    assert!(deleted(&s, "default/red-1"), "once its table is written");
    assert_eq!(out.trigger_times, [CHANGED_AT], "programmed in red-1 now");
    assert_eq!(s.trace("red-1", "192.168.20.101", "10.96.0.20"), "192.168.20.12:5353");
}

#[test]
fn a_pod_event_touches_that_pod_only() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    let before = s.transactions();
    // blue-3 is attached to red as well now.
    s.pod(pod(
        "blue-3",
        &[("blue", "net1", "192.168.10.103"), ("red", "net2", "192.168.20.103")],
    ));
    s.proxier.sync(SyncKind::Changes);
    let after = s.transactions();
    let written: Vec<&String> = after
        .keys()
        .filter(|k| after[*k] != before.get(*k).copied().unwrap_or(0))
        .collect();
    assert_eq!(written, ["default/blue-3"]);
    assert_eq!(s.trace("blue-3", "192.168.20.103", "10.96.0.20"), "192.168.20.11:5353");
    let w = s.world.lock().unwrap();
    let routes: Vec<String> = w.routes[&s.sandboxes.path("default/blue-3")]
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        routes,
        [
            "10.96.0.10 dev net1 src 192.168.10.103",
            "10.96.0.20 dev net2 src 192.168.20.103"
        ]
    );
}

#[test]
fn a_pod_without_a_namespace_stays_pending_and_never_blocks_the_others() {
    let mut s = two_networks();
    s.pod(pod("gone-1", &[("blue", "net1", "192.168.10.199")]));
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().programmed, 5);
    assert_eq!(out.pods().pending.len(), 1, "{out:?}");
    assert!(
        matches!(&out.pods().pending[0].1, PodProblem::NoNamespace(why) if why.contains("no ready sandbox")),
        "{out:?}"
    );
    s.endpoints("dns-blue", &["192.168.10.13"]);
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(
        out.pods().pending.iter().map(|p| p.0.to_string()).collect::<Vec<_>>(),
        ["default/gone-1"],
        "still pending, looked up again: {out:?}"
    );
    assert_eq!(s.trace("blue-2", "192.168.10.102", "10.96.0.10"), "192.168.10.13:5353");
    s.remove_pod("gone-1");
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(
        out.pods().pending.is_empty(),
        "a deleted pod is no longer pending: {out:?}"
    );
}

#[test]
fn every_sync_lists_the_runtime_once() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    s.proxier.sync(SyncKind::Changes);
    s.proxier.sync(SyncKind::Periodic);
    assert_eq!(s.sandboxes.0.lock().unwrap().lists, 3, "one list per sync, not per pod");
}

/// The sandbox of `pod` dies and a new one (a new namespace) takes its
/// place; nothing on the Pod changes.
fn recreate_sandbox(s: &Setup, pod: &str) {
    let key = format!("default/{pod}");
    let old = s.sandboxes.path(&key);
    s.world.lock().unwrap().dead.insert(old);
    *s.sandboxes.0.lock().unwrap().generation.entry(key).or_default() += 1;
}

#[test]
fn a_recreated_sandbox_is_programmed_with_nothing_changed_on_the_pod() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    recreate_sandbox(&s, "blue-1");
    // The next sync, whatever asked for it (here: nothing changed at all).
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(
        out.pods().pending.is_empty() && out.pods().failures.is_empty(),
        "{out:?}"
    );
    assert_eq!(
        s.trace("blue-1", "192.168.10.101", "10.96.0.10"),
        "192.168.10.11:5353, 192.168.10.12:5353",
        "the new namespace has the table"
    );
    let w = s.world.lock().unwrap();
    let routes: Vec<String> = w.routes[&s.sandboxes.path("default/blue-1")]
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(routes, ["10.96.0.10 dev net1 src 192.168.10.101"]);
}

#[test]
fn a_sandbox_recreated_while_not_ready_is_programmed_once_ready() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    // The old sandbox dies; the new one is not ready yet.
    recreate_sandbox(&s, "blue-1");
    s.sandboxes.0.lock().unwrap().not_ready.insert("default/blue-1".into());
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().programmed, 4, "{out:?}");
    assert_eq!(out.pods().pending.len(), 1, "{out:?}");
    assert_eq!(s.trace("blue-1", "192.168.10.101", "10.96.0.10"), "no table");
    // Ready: the next sync (a retry, nothing else changed) programs it.
    s.sandboxes.0.lock().unwrap().not_ready.clear();
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(out.pods().pending.is_empty(), "{out:?}");
    assert_eq!(
        s.trace("blue-1", "192.168.10.101", "10.96.0.10"),
        "192.168.10.11:5353, 192.168.10.12:5353"
    );
}

#[test]
fn a_namespace_gone_before_the_write_is_said_to_be_gone_not_an_nft_failure() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    // The namespace vanishes; the runtime has no new sandbox yet, but its
    // list still names the old one (it has not noticed).
    let old = s.sandboxes.path("default/blue-1");
    s.world.lock().unwrap().dead.insert(old);
    s.endpoints("dns-blue", &["192.168.10.13"]);
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().pending.len(), 1, "{out:?}");
    let why = &out.pods().pending[0].1;
    assert!(
        matches!(why, PodProblem::NamespaceGone(_) | PodProblem::NamespaceGoneDuringWrite),
        "not nft's failure: {why}"
    );
    // The runtime re-creates it: programmed there.
    *s.sandboxes
        .0
        .lock()
        .unwrap()
        .generation
        .entry("default/blue-1".into())
        .or_default() += 1;
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(out.pods().pending.is_empty(), "{out:?}");
    assert_eq!(s.trace("blue-1", "192.168.10.101", "10.96.0.10"), "192.168.10.13:5353");
}

#[test]
fn a_runtime_that_is_down_keeps_programmed_pods_and_holds_new_ones() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    s.sandboxes.0.lock().unwrap().down = true;
    s.pod(pod("blue-9", &[("blue", "net1", "192.168.10.109")]));
    s.endpoints("dns-blue", &["192.168.10.13"]);
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().programmed, 5, "{out:?}");
    assert_eq!(out.pods().pending.len(), 1, "the new pod waits: {out:?}");
    assert_eq!(
        s.trace("blue-2", "192.168.10.102", "10.96.0.10"),
        "192.168.10.13:5353",
        "programmed pods are kept up to date"
    );
    s.sandboxes.0.lock().unwrap().down = false;
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(out.pods().pending.is_empty(), "{out:?}");
    assert_eq!(s.trace("blue-9", "192.168.10.109", "10.96.0.10"), "192.168.10.13:5353");
}

#[test]
fn deleted_pods_and_services_leave_nothing_behind() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    s.remove_pod("blue-1");
    s.remove_service("dns-red");
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.pods().programmed, 2, "blue-2 and blue-3 remain: {out:?}");
    let w = s.world.lock().unwrap();
    assert!(
        !w.kernels.contains_key(&s.sandboxes.path("default/blue-1")),
        "the deleted pod's table is removed"
    );
    assert!(
        !w.kernels.contains_key(&s.sandboxes.path("default/red-1")),
        "no service left on red"
    );
    assert!(
        w.routes[&s.sandboxes.path("default/red-1")].is_empty(),
        "and its routes"
    );
    assert!(
        w.conntrack.values().flatten().any(|c| c
            .frontends
            .iter()
            .any(|(f, serving)| f.addr.to_string() == "10.96.0.20" && serving.is_empty())),
        "entries to the deleted UDP service are cleared"
    );
}

// --- from scratch ----------------------------------------------------------

#[derive(Clone, Debug)]
enum Step {
    /// Pod i's attachments become those picked by the mask (blue, red), or
    /// it stops running.
    Pod(usize, u8, bool),
    DeletePod(usize),
    /// Service j is on network n.
    Service(usize, usize),
    DeleteService(usize),
    Endpoints(usize, u8),
    Periodic,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..4usize, 0..4u8, any::<bool>()).prop_map(|(i, m, r)| Step::Pod(i, m, r)),
        1 => (0..4usize).prop_map(Step::DeletePod),
        2 => (0..3usize, 0..2usize).prop_map(|(j, n)| Step::Service(j, n)),
        1 => (0..3usize).prop_map(Step::DeleteService),
        3 => (0..3usize, any::<u8>()).prop_map(|(j, m)| Step::Endpoints(j, m)),
        1 => Just(Step::Periodic),
    ]
}

fn apply(s: &mut Setup, step: &Step) {
    let nets = ["blue", "red"];
    match *step {
        Step::Pod(i, mask, running) => {
            let atts: Vec<(&str, String, String)> = (0..2)
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| {
                    (
                        nets[b],
                        format!("net{}", b + 1),
                        format!("192.168.{}.{}", 10 * (b + 1), 100 + i),
                    )
                })
                .collect();
            let atts: Vec<(&str, &str, &str)> = atts.iter().map(|(n, i, a)| (*n, i.as_str(), a.as_str())).collect();
            let mut p = pod(&format!("p{i}"), &atts);
            p.running = running;
            s.pod(p);
        }
        Step::DeletePod(i) => s.remove_pod(&format!("p{i}")),
        Step::Service(j, n) => s.service(&format!("s{j}"), &format!("10.96.0.{}", j + 1), nets[n]),
        Step::DeleteService(j) => s.remove_service(&format!("s{j}")),
        Step::Endpoints(j, mask) => {
            let ips: Vec<String> = (0..4u8)
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| format!("192.168.99.{}", 10 * j as u8 + b + 1))
                .collect();
            let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
            s.endpoints(&format!("s{j}"), &ips);
        }
        Step::Periodic => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Pod, service and slice events synced one at a time leave every pod
    /// with the same table and routes as a proxier that saw only the end
    /// state.
    #[test]
    fn incremental_syncs_equal_a_from_scratch_plan(steps in proptest::collection::vec(step(), 1..30)) {
        let mut live = setup();
        let mut history = Vec::new();
        for st in &steps {
            apply(&mut live, st);
            history.push(st.clone());
            let kind = if matches!(st, Step::Periodic) { SyncKind::Periodic } else { SyncKind::Changes };
            let out = live.proxier.sync(kind);
            prop_assert!(out.pods().failures.is_empty(), "{:?}", out);

            let mut scratch = setup();
            for h in &history {
                apply(&mut scratch, h);
            }
            scratch.proxier.sync(SyncKind::Changes);
            let (a, b) = (live.world.lock().unwrap(), scratch.world.lock().unwrap());
            prop_assert_eq!(&a.kernels, &b.kernels);
            let nonempty = |r: &BTreeMap<String, BTreeSet<Route>>| -> BTreeMap<String, BTreeSet<Route>> {
                r.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.clone(), v.clone())).collect()
            };
            prop_assert_eq!(nonempty(&a.routes), nonempty(&b.routes));
            prop_assert_eq!(live.proxier.programmed(), scratch.proxier.programmed());
        }
    }
}

#[test]
fn removing_a_slice_is_seen_too() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    s.proxier.engine.remove_slice(&SliceName::new("default", "dns-blue-1"));
    s.proxier.sync(SyncKind::Changes);
    assert_eq!(
        s.trace("blue-1", "192.168.10.101", "10.96.0.10"),
        "REJECT",
        "no endpoints: refused"
    );
}

#[test]
fn a_restarted_pods_new_sandbox_is_programmed() {
    let mut s = two_networks();
    s.proxier.sync(SyncKind::Changes);
    let before = s.transactions();
    // The pod restarts into a new sandbox; its status changes with it.
    recreate_sandbox(&s, "blue-1");
    let mut p = pod("blue-1", &[("blue", "net1", "192.168.10.151")]);
    p.running = true;
    s.pod(p);
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(out.pods().failures.is_empty(), "{out:?}");
    let after = s.transactions();
    assert_eq!(
        after["default/blue-1"],
        before["default/blue-1"] + 1,
        "a full table in the new namespace"
    );
    assert_eq!(
        s.trace("blue-1", "192.168.10.151", "10.96.0.10"),
        "192.168.10.11:5353, 192.168.10.12:5353"
    );
    let w = s.world.lock().unwrap();
    let routes: Vec<String> = w.routes[&s.sandboxes.path("default/blue-1")]
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(routes, ["10.96.0.10 dev net1 src 192.168.10.151"]);
}

#[test]
fn ipv6_pods_and_services() {
    let mut s = setup_family(IpFamily::V6);
    s.service("dns6", "fd00:96::10", "blue");
    s.endpoints("dns6", &["fd00:10::11", "fd00:10::12"]);
    s.pod(pod("v6", &[("blue", "net1", "fd00:10::5")]));
    s.pod(pod("v4-only", &[("blue", "net1", "192.168.10.5")]));
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(
        out.pods().programmed,
        1,
        "a pod without an IPv6 address there gets no IPv6 rules: {out:?}"
    );
    assert_eq!(
        s.trace("v6", "fd00:10::5", "fd00:96::10"),
        "[fd00:10::11]:5353, [fd00:10::12]:5353"
    );
    let w = s.world.lock().unwrap();
    let routes: Vec<String> = w.routes[&s.sandboxes.path("default/v6")]
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(routes, ["fd00:96::10 dev net1 src fd00:10::5"]);
}

/// The kernel refuses one service's rules in the pods' tables: the pods
/// of its network get every other service, the others are untouched, no
/// pod fails, and the refusal is counted per pod table.
#[test]
fn a_service_the_kernel_refuses_is_left_out_of_each_pods_table_alone() {
    let mut s = two_networks();
    s.service("web-red", "10.96.0.21", "red");
    s.endpoints("web-red", &["192.168.20.12"]);
    s.proxier
        .set_refuse_for_tests(Some(ServiceName::new("default", "dns-red")));
    let out = s.proxier.sync(SyncKind::Changes);
    assert!(
        out.pods().failures.is_empty() && out.pods().pending.is_empty(),
        "{out:?}"
    );
    assert_eq!(out.pods().programmed, 5);
    assert_eq!(out.written.refused_services, 2, "one per red pod's table");
    assert_eq!(out.written.refused_transactions, 2);
    assert_eq!(
        s.trace("red-1", "192.168.20.101", "10.96.0.20"),
        "10.96.0.20:53",
        "not programmed"
    );
    assert_eq!(s.trace("red-1", "192.168.20.101", "10.96.0.21"), "192.168.20.12:5353");
    assert_eq!(
        s.trace("blue-1", "192.168.10.101", "10.96.0.10"),
        "192.168.10.11:5353, 192.168.10.12:5353"
    );
    // Known refusals are not written again.
    s.endpoints("web-red", &["192.168.20.13"]);
    let out = s.proxier.sync(SyncKind::Changes);
    assert_eq!(out.written.refused_transactions, 0);
    assert_eq!(s.trace("red-2", "192.168.20.102", "10.96.0.21"), "192.168.20.13:5353");
}
