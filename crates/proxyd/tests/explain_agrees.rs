//! `explain` and the programmed table agree on every endpoint: what
//! explain says reaches an endpoint is exactly where the packet tracer,
//! walking the ruleset a full sync wrote, sends traffic. Checked on the
//! bundled example cluster and on a generated trace (its final state, with
//! services made up for its slices: Cluster and Local policies, node
//! ports, zone and node hints), for several nodes and zones.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use nft_dataplane::tracer::{Host, Origin, Packet};
use nft_dataplane::{KernelModel, NftSyncer, SyncKind};
use node_inspect::explain::explain_port;
use proxyd::ProxyArgs;
use proxyd::{Snapshot, effective};
use serde_json::{Value, json};

const NODE_IP: &str = "192.168.0.1";

fn proxy_args(node: &str, zone: Option<&str>) -> ProxyArgs {
    ProxyArgs {
        cluster_cidr: vec!["10.244.0.0/16".parse().unwrap()],
        node_zone: zone.map(Into::into),
        ..ProxyArgs::for_node(node)
    }
}

/// Where the tracer sends the first packet of a connection: the endpoints
/// it may be DNATed to.
fn traced(
    model: &KernelModel,
    src: &str,
    dst: IpAddr,
    port: u16,
    protocol: slice_model::Protocol,
) -> BTreeSet<SocketAddr> {
    let host = Host {
        local_addrs: vec![NODE_IP.parse().unwrap()],
        ..Host::default()
    };
    let packet = Packet {
        src: src.parse().unwrap(),
        dst,
        protocol,
        port,
        origin: Origin::Forwarded,
    };
    model.trace(&host, packet).endpoints().into_keys().collect()
}

/// Checks every service port of `snapshot` on `node`; returns how many
/// endpoints were compared.
fn check(snapshot: &Snapshot, node: &str, zone: Option<&str>) -> usize {
    let proxy = proxy_args(node, zone);
    let engine = proxyd::snapshot_engine(snapshot, node, &proxy);
    let config = effective(&proxy, &snapshot.facts);
    let mut syncer = NftSyncer::new(config.clone(), KernelModel::default());
    let names: BTreeSet<_> = engine.services.iter().map(|p| p.name.service.clone()).collect();
    syncer
        .sync(&engine.services, &engine.endpoints, &names, SyncKind::Changes)
        .unwrap();
    let model = syncer.dataplane();
    let mut compared = 0;
    for port in engine.services.iter() {
        let name = &port.name;
        let eps = engine.endpoints.get(name).unwrap_or(&[]);
        let x = explain_port(port, eps, &config);
        let used = |external: bool| -> BTreeSet<SocketAddr> { x.used(external).map(|e| e.addr).collect() };
        let at = format!("{name} on {node} (zone {zone:?})");
        assert_eq!(x.endpoints.len(), eps.len(), "{at}: every endpoint explained");
        let internal = traced(model, "10.244.250.250", port.cluster_ip, port.port.get(), name.protocol);
        assert_eq!(used(false), internal, "{at}: traffic to the cluster IP");
        if let Some(np) = port.node_port.filter(|_| port.externally_accessible()) {
            let external = traced(model, "203.0.113.77", NODE_IP.parse().unwrap(), np.get(), name.protocol);
            assert_eq!(used(true), external, "{at}: traffic to the node port");
        }
        compared += eps.len();
    }
    compared
}

#[test]
fn explain_agrees_with_the_table_on_the_example_cluster() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    let m = daemon_sources::manifests::load(&path).unwrap();
    let mut compared = 0;
    for (node, zone) in [("node-1", None), ("node-2", Some("zone-b")), ("node-3", None)] {
        let mut snapshot = Snapshot::of(m.services.clone(), m.slices.clone());
        snapshot.facts.zone = m.node_zone(node);
        compared += check(&snapshot, node, zone);
    }
    assert!(compared > 40, "{compared} endpoints compared");
}

/// The generated trace's slices as they stand at its end; a third of the
/// services get node hints (each endpoint hinted for its own node).
fn trace_slices() -> Vec<EndpointSlice> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/k_edge_generated.jsonl");
    let mut live: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        let obj = &event["object"];
        let key = (
            obj["kind"].as_str().unwrap_or_default().to_owned(),
            obj["metadata"]["namespace"].as_str().unwrap_or_default().to_owned(),
            obj["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
        );
        match event["type"].as_str() {
            Some("ADDED" | "MODIFIED") => {
                live.insert(key, obj.clone());
            }
            Some("DELETED") => {
                live.remove(&key);
            }
            _ => {}
        }
    }
    live.into_iter()
        .filter(|((kind, _, _), _)| kind == "EndpointSlice")
        .map(|(_, v)| v)
        .enumerate()
        .filter_map(|(i, mut v)| {
            if i % 3 == 0
                && let Some(eps) = v["endpoints"].as_array_mut()
            {
                for e in eps {
                    if let Some(node) = e["nodeName"].as_str().map(str::to_owned) {
                        e["hints"]["forNodes"] = json!([{"name": node}]);
                    }
                }
            }
            // The trace's edge cases include slices the typed client would
            // refuse; the watch path never sees those.
            serde_json::from_value(v).ok()
        })
        .collect()
}

/// A service for each service the slices name, with the ports they carry:
/// ClusterIP, NodePort with externalTrafficPolicy Local, or with
/// internalTrafficPolicy Local, in turn.
fn services_for(slices: &[EndpointSlice]) -> Vec<Service> {
    let mut ports: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
    for s in slices {
        let Some(svc) = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
        else {
            continue;
        };
        let entry = ports
            .entry((s.metadata.namespace.clone().unwrap_or_default(), svc.clone()))
            .or_default();
        for p in s.ports.iter().flatten() {
            entry.insert((
                p.name.clone().unwrap_or_default(),
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            ));
        }
    }
    let mut node_ports = 30000..;
    ports
        .into_iter()
        .enumerate()
        .map(|(i, ((ns, name), ports))| {
            let ports: Vec<Value> = ports
                .iter()
                .enumerate()
                .map(|(j, (pname, proto))| {
                    json!({"name": pname, "protocol": proto, "port": 80 + j,
                           "nodePort": node_ports.next()})
                })
                .collect();
            let spec = match i % 3 {
                0 => json!({"type": "ClusterIP"}),
                1 => json!({"type": "NodePort", "externalTrafficPolicy": "Local"}),
                _ => json!({"type": "NodePort", "internalTrafficPolicy": "Local"}),
            };
            let mut spec = spec.as_object().unwrap().clone();
            spec.insert("clusterIP".into(), json!(format!("10.96.{}.{}", i / 250, i % 250 + 1)));
            spec.insert("ports".into(), json!(ports));
            serde_json::from_value(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})).unwrap()
        })
        .collect()
}

#[test]
fn explain_agrees_with_the_table_on_a_generated_trace() {
    let slices = trace_slices();
    let services = services_for(&slices);
    assert!(services.len() > 10 && slices.len() > 20);
    let mut compared = 0;
    for node in ["node-0", "node-1", "node-2", "node-4"] {
        for zone in [None, Some("zone-a"), Some("zone-c")] {
            let snapshot = Snapshot::of(services.clone(), slices.clone());
            compared += check(&snapshot, node, zone);
        }
    }
    assert!(compared > 500, "{compared} endpoints compared");
}
