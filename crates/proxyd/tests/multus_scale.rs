//! Multus mode at 50 pod namespaces x 50 services on 5 networks, with the
//! real `nft` (root): one endpoint change writes exactly the pods on that
//! service's network, one transaction each, and leaves every other pod's
//! table as it was. Transactions are counted by a backend wrapped around
//! the real one, not by the proxier's own report.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU16;
use std::sync::{Arc, Mutex};

use endpoints_map::Engine;
use informer_glue::multus::{Attachment, NetworkName, PodInfo, PodStore, ServiceNetworks};
use linux_dataplane::ConntrackError;
use linux_dataplane::Netns as NetnsPath;
use linux_dataplane::RouteChange;
use multus_dataplane::backend::Commands;
use multus_dataplane::{MultusProxier, NetnsDir, PodBackend, Route};
use nft_dataplane::stale_flows::Cleanup;
use nft_dataplane::{Dataplane, DataplaneError, SyncKind, Transaction};
use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceInfo, ServiceName, ServicePort, SliceEndpoint};

mod common;

use common::{Netns, require};

const PODS: usize = 50;
const SERVICES: u32 = 50;
const NETWORKS: usize = 5;

type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

/// The real backend, counting the transactions applied in each pod.
struct Counting {
    inner: Commands,
    counts: Counts,
}

struct Counted {
    pod: String,
    inner: Box<dyn Dataplane + Send>,
    counts: Counts,
}

impl Dataplane for Counted {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        *self.counts.lock().unwrap().entry(self.pod.clone()).or_default() += 1;
        self.inner.apply(tx)
    }
}

impl PodBackend for Counting {
    fn dataplane(&mut self, pod: &slice_model::PodName, netns: &NetnsPath) -> Box<dyn Dataplane + Send> {
        Box::new(Counted {
            pod: pod.to_string(),
            inner: self.inner.dataplane(pod, netns),
            counts: self.counts.clone(),
        })
    }

    fn routes(
        &mut self,
        pod: &slice_model::PodName,
        netns: &NetnsPath,
        family: IpFamily,
        want: &BTreeSet<Route>,
    ) -> Result<RouteChange, linux_dataplane::RouteError> {
        self.inner.routes(pod, netns, family, want)
    }

    fn conntrack(
        &mut self,
        pod: &slice_model::PodName,
        netns: &NetnsPath,
        family: IpFamily,
        cleanup: &Cleanup,
    ) -> (u64, Vec<ConntrackError>) {
        self.inner.conntrack(pod, netns, family, cleanup)
    }

    fn remove_table(
        &mut self,
        pod: &slice_model::PodName,
        netns: &NetnsPath,
        family: IpFamily,
    ) -> Result<(), nft_dataplane::DataplaneError> {
        self.inner.remove_table(pod, netns, family)
    }
}

fn service(i: u32) -> ServiceInfo {
    let mut s = ServiceInfo::new(ServiceName::new("scale", format!("svc-{i}").as_str()));
    s.cluster_ips = vec![IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + i))];
    s.ports = vec![ServicePort {
        name: "p".into(),
        protocol: Protocol::Tcp,
        port: NonZeroU16::new(80).unwrap(),
        node_port: None,
        app_protocol: None,
    }];
    s
}

fn slice(i: u32, generation: u32) -> EndpointSlice {
    let mut s = EndpointSlice::new("scale", &format!("svc-{i}-1"), &format!("svc-{i}"))
        .unwrap()
        .with_port("p", Protocol::Tcp, 8080);
    for k in 0..2 {
        let addr = IpAddr::V4(Ipv4Addr::from(0xc0a8_0000 + i * 8 + k + generation * 4));
        s = s.with_endpoint(SliceEndpoint::new(addr).on_node("node-2"));
    }
    s
}

fn net(i: usize) -> NetworkName {
    NetworkName::parse(&format!("net{}", i % NETWORKS), "scale").unwrap()
}

#[test]
#[ignore = "needs root, nft, conntrack, iproute2 and python3"]
fn one_endpoint_change_writes_only_the_pods_on_that_network() {
    require();
    let ns = format!("ms{}", std::process::id());
    let pods: Vec<Netns> = (0..PODS)
        .map(|i| {
            let p = Netns::named(format!("{ns}_p{i}"));
            p.ip(&["link", "add", "net1", "type", "veth", "peer", "name", "peer1"]);
            p.ip(&["addr", "add", &format!("172.31.0.{}/16", i + 1), "dev", "net1"]);
            p.ip(&["link", "set", "net1", "up"]);
            p.ip(&["link", "set", "peer1", "up"]);
            p
        })
        .collect();

    let store: Arc<Mutex<PodStore>> = Arc::default();
    let networks: Arc<Mutex<ServiceNetworks>> = Arc::default();
    let engine = Engine::new("node-1", IpFamily::V4);
    for i in 0..SERVICES {
        engine.update_service(&service(i));
        engine.update_slice(slice(i, 0));
        networks
            .lock()
            .unwrap()
            .by_service
            .insert(ServiceName::new("scale", format!("svc-{i}").as_str()), net(i as usize));
    }
    for i in 0..PODS {
        let pod = PodInfo {
            namespace: ns.clone(),
            name: format!("p{i}"),
            uid: None,
            node: Some("node-1".into()),
            running: true,
            host_network: false,
            attachments: vec![Attachment {
                network: net(i),
                interface: "net1".into(),
                ips: vec![IpAddr::V4(Ipv4Addr::new(172, 31, 0, i as u8 + 1))],
            }],
        };
        store.lock().unwrap().set(pod.key(), Some(pod));
    }
    let counts: Counts = Arc::default();
    let mut proxier = MultusProxier::new(
        engine,
        store,
        networks,
        Box::new(NetnsDir {
            dir: "/run/netns".into(),
        }),
        Box::new(Counting {
            inner: Commands {
                no_conntrack: true,
                ..Commands::default()
            },
            counts: counts.clone(),
        }),
    );
    let first = proxier.sync(SyncKind::Changes);
    assert!(first.pods().failures.is_empty(), "{first:?}");
    assert_eq!(first.pods().programmed, PODS);
    assert_eq!(
        counts.lock().unwrap().values().sum::<usize>(),
        PODS,
        "one transaction per pod"
    );

    let table = |i: usize| pods[i].exec("nft", &["list", "table", "ip", "proxyd-multus"]);
    let before: Vec<String> = (0..PODS).map(table).collect();
    counts.lock().unwrap().clear();
    // Service 10 is on net0: pods 0, 5, 10, … get it.
    proxier.engine.update_slice(slice(10, 1));
    let out = proxier.sync(SyncKind::Changes);
    assert!(out.pods().failures.is_empty(), "{out:?}");
    let written: BTreeSet<String> = counts.lock().unwrap().keys().cloned().collect();
    let on_net0: BTreeSet<String> = (0..PODS).step_by(NETWORKS).map(|i| format!("{ns}/p{i}")).collect();
    assert_eq!(written, on_net0, "only the pods on the changed service's network");
    assert!(counts.lock().unwrap().values().all(|n| *n == 1), "one transaction each");
    for (i, was) in before.iter().enumerate() {
        let after = table(i);
        if i % NETWORKS == 0 {
            assert!(after.contains("192.168.0.84"), "pod {i} has the new endpoint:\n{after}");
        } else {
            assert_eq!(&after, was, "pod {i}'s table is untouched");
        }
    }
}
