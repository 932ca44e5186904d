//! Conversion tests: the same JSON through k8s-openapi and through the wire
//! decoder must give the same model.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use serde_json::json;
use slice_model::{Protocol, ServiceType, SliceError, TrafficPolicy, WarningKind};

use crate::wire::WireObject;
use crate::{service_from_k8s, slice_from_k8s, slice_name_of};

fn both(v: serde_json::Value) -> (Result<slice_model::EndpointSlice, SliceError>, Vec<WarningKind>) {
    let text = v.to_string();
    let k: K8sSlice = serde_json::from_value(v).expect("k8s-openapi decodes it");
    let w: WireObject<'_> = serde_json::from_str(&text).expect("wire decodes it");
    let mut interner = slice_model::Interner::new();
    let a = slice_from_k8s(&k, &mut interner);
    let b = w.to_slice(&mut interner);
    assert_eq!(a, b, "k8s-openapi and wire paths agree");
    match a {
        Ok((s, warns)) => (Ok(s), warns.into_iter().map(|w| w.kind).collect()),
        Err(e) => (Err(e), vec![]),
    }
}

fn slice_json(endpoints: serde_json::Value, ports: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "web", "app": "web"},
                     "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2024-01-01T00:00:00Z"},
                     "managedFields": [{"manager": "x", "fieldsV1": {"f:a": {}}}]},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    })
}

#[test]
fn full_slice_converts_identically_on_both_paths() {
    let (s, warns) = both(slice_json(
        json!([
            {"addresses": ["10.0.0.1", "10.0.0.99"], "conditions": {"ready": true, "serving": true, "terminating": false},
             "nodeName": "node-1", "zone": "zone-a", "hints": {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-1"}, {"name": "node-0"}]},
             "targetRef": {"kind": "Pod", "name": "p", "namespace": "ns"}},
            {"addresses": ["FD00::1"], "conditions": {"ready": false}, "deprecatedTopology": {"kubernetes.io/hostname": "node-2"}},
            {"addresses": ["not-an-ip"]},
            {"addresses": []},
        ]),
        json!([{"name": "http", "port": 80}, {"name": "dns", "protocol": "UDP", "port": 53}, {"name": "x", "port": null}]),
    ));
    let s = s.unwrap();
    assert_eq!(s.service_name().to_string(), "ns/web");
    assert!(s.trigger_time.is_some());
    let eps = &s.content.endpoints;
    assert_eq!(eps.len(), 2);
    assert_eq!(eps[0].addr.to_string(), "10.0.0.1");
    assert_eq!(eps[0].zone_hints.as_slice(), [std::sync::Arc::from("zone-a")]);
    assert_eq!(eps[0].node_hints, slice_model::NodeHints::new(["node-0", "node-1"]));
    assert!(eps[1].node_hints.is_empty());
    assert_eq!(eps[1].addr.to_string(), "fd00::1");
    assert!(!eps[1].conditions.ready && !eps[1].conditions.serving);
    assert_eq!(eps[1].host(), Some("node-2"));
    assert_eq!(s.content.ports.len(), 2);
    let ports: Vec<_> = s.content.ports.iter().map(|p| (&*p.name, p.protocol)).collect();
    assert_eq!(
        ports,
        [("dns", Protocol::Udp), ("http", Protocol::Tcp)],
        "sorted; no protocol means TCP"
    );
    assert_eq!(
        warns,
        [
            WarningKind::PortWithoutNumber,
            WarningKind::InvalidAddress("not-an-ip".into()),
            WarningKind::NoAddress
        ]
    );
}

#[test]
fn several_hints_convert_identically_on_both_paths() {
    let (s, _) = both(slice_json(
        json!([{"addresses": ["10.0.0.1"], "zone": null, "hostname": "h",
                "hints": {"forZones": [{"name": "c"}, {}, {"name": "a"}, {"name": "c"}],
                          "forNodes": [{"name": "n2"}, {"name": "n1"}, {"name": ""}]}},
               {"addresses": ["10.0.0.2"], "hints": {"forZones": [], "forNodes": null}}]),
        json!([{"name": "", "port": 80}]),
    ));
    let s = s.unwrap();
    let zones: Vec<&str> = s.content.endpoints[0]
        .zone_hints
        .as_slice()
        .iter()
        .map(|z| &**z)
        .collect();
    assert_eq!(zones, ["", "a", "c"]);
    assert_eq!(s.content.endpoints[0].node_hints.as_slice().len(), 2);
    assert!(s.content.endpoints[1].zone_hints.is_empty());
}

#[test]
fn null_lists_are_accepted() {
    let (s, warns) = both(slice_json(json!(null), json!(null)));
    let s = s.unwrap();
    assert!(s.content.endpoints.is_empty() && s.content.ports.is_empty());
    assert!(warns.is_empty());
}

#[test]
fn null_fields_count_as_missing() {
    let (s, _) = both(slice_json(
        json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": false, "serving": null, "terminating": null},
                "nodeName": null, "hints": null, "deprecatedTopology": null}]),
        json!([{"name": "", "port": 80, "protocol": null}]),
    ));
    let s = s.unwrap();
    let c = s.content.endpoints[0].conditions;
    assert!(!c.ready && !c.serving && !c.terminating);
    assert_eq!(s.content.endpoints[0].host(), None);
}

#[test]
fn missing_label_and_fqdn_are_rejected_and_deletes_need_only_names() {
    let mut v = slice_json(json!([]), json!([]));
    v["metadata"]["labels"] = json!({"app": "web"});
    let (r, _) = both(v.clone());
    assert!(matches!(r, Err(SliceError::MissingServiceName(_))));
    let k: K8sSlice = serde_json::from_value(v).unwrap();
    assert_eq!(slice_name_of(&k).unwrap().to_string(), "ns/web-abc");

    let mut v = slice_json(json!([]), json!([]));
    v["addressType"] = json!("FQDN");
    assert!(matches!(both(v.clone()).0, Err(SliceError::Fqdn(_))));
    let k: K8sSlice = serde_json::from_value(v.clone()).unwrap();
    assert!(
        matches!(slice_name_of(&k), Err(SliceError::Fqdn(_))),
        "an FQDN delete is ignored too"
    );
    let text = v.to_string();
    let w: WireObject<'_> = serde_json::from_str(&text).unwrap();
    assert!(matches!(w.deleted_slice_name(), Err(SliceError::Fqdn(_))));
}

#[test]
fn wire_rejects_wrong_types_in_slice_fields() {
    for bad in [
        r#"{"kind":"EndpointSlice","ports":[{"port":"x"}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"addresses":"10.0.0.1"}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"addresses":["10.0.0.1", 5]}]}"#,
        r#"{"kind":"EndpointSlice","metadata":{"labels":{"a":1}}}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"conditions":{"ready":"yes"}}]}"#,
        r#"{"kind":"EndpointSlice","ports":[{"port":99999999999}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"zone":5}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"hostname":["h"]}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"hints":{"forZones":[{"name":1}]}}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"hints":{"forZones":[{"name":"a"},"b"]}}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":[{"hints":{"forNodes":"n"}}]}"#,
        r#"{"kind":"EndpointSlice","endpoints":{"a":1}}"#,
    ] {
        assert!(serde_json::from_str::<WireObject<'_>>(bad).is_err(), "{bad}");
    }
}

#[test]
fn escaped_strings_decode() {
    let text = r#"{"kind":"EndpointSlice","metadata":{"name":"a\u0062","namespace":"ns","labels":{"kubernetes.io/service-name":"w\"eb"}},"endpoints":[{"addresses":["10.0.0.\u0031"]}],"ports":[{"name":"","port":1}]}"#;
    let w: WireObject<'_> = serde_json::from_str(text).unwrap();
    let (s, _) = w.to_slice(&mut slice_model::Interner::new()).unwrap();
    assert_eq!(s.name.to_string(), "ns/ab");
    assert_eq!(&*s.service, "w\"eb");
    assert_eq!(s.content.endpoints[0].addr.to_string(), "10.0.0.1");
}

fn service(spec: serde_json::Value, status: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

#[test]
fn service_converts_every_field() {
    let svc = service(
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "dns", "port": 53, "protocol": "UDP"},
                         {"name": "bad", "port": 70000}],
               "externalIPs": ["192.0.2.1", "nope"], "loadBalancerSourceRanges": ["10.0.0.0/8", " 192.168.0.0/16 ", "x"],
               "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
               "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Cluster", "healthCheckNodePort": 32000,
               "trafficDistribution": "PreferClose"}),
        json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}, {"ip": "203.0.113.2", "ipMode": "Proxy"},
                                            {"ip": "203.0.113.3", "ipMode": "VIP"}, {"hostname": "lb.example"}]}}),
    );
    let (info, warns) = service_from_k8s(&svc).unwrap();
    assert_eq!(info.service_type, ServiceType::LoadBalancer);
    assert_eq!(info.cluster_ips.len(), 2);
    assert!(info.is_proxied());
    assert_eq!(info.ports.len(), 2);
    assert_eq!(info.ports[0].node_port.map(|p| p.get()), Some(30080));
    assert_eq!(info.ports[1].protocol, Protocol::Udp);
    assert_eq!(info.external_ips.len(), 1);
    let lb: Vec<String> = info.load_balancer_ips.iter().map(ToString::to_string).collect();
    assert_eq!(lb, ["203.0.113.1", "203.0.113.3"]);
    assert_eq!(info.load_balancer_source_ranges.len(), 2);
    assert_eq!(info.session_affinity, Some(std::time::Duration::from_secs(60)));
    assert_eq!(info.external_traffic_policy, TrafficPolicy::Local);
    assert_eq!(info.health_check_node_port.map(|p| p.get()), Some(32000));
    assert_eq!(info.traffic_distribution.as_deref(), Some("PreferClose"));
    let fields: Vec<&str> = warns.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.ports[2].port",
            "spec.externalIPs[1]",
            "spec.loadBalancerSourceRanges[2]"
        ]
    );
    assert!(warns[0].to_string().starts_with("service ns/web: spec.ports[2].port"));
}

#[test]
fn headless_and_external_name_are_not_proxied() {
    let (h, _) = service_from_k8s(&service(json!({"clusterIP": "None"}), json!({}))).unwrap();
    assert!(h.headless && !h.is_proxied());
    let (e, _) = service_from_k8s(&service(
        json!({"type": "ExternalName", "externalName": "db.example"}),
        json!({}),
    ))
    .unwrap();
    assert!(!e.is_proxied());
    let (a, _) = service_from_k8s(&service(
        json!({"clusterIP": "10.0.0.1", "sessionAffinity": "ClientIP"}),
        json!({}),
    ))
    .unwrap();
    assert_eq!(a.session_affinity, Some(crate::DEFAULT_AFFINITY_TIMEOUT));
}

#[test]
fn wire_service_with_odd_spec_is_tracked_with_a_warning() {
    let text = r#"{"kind":"Service","metadata":{"name":"s","namespace":"n"},"spec":{"ports":"x"}}"#;
    let w: WireObject<'_> = serde_json::from_str(text).unwrap();
    let (info, warns) = w.to_service().unwrap();
    assert_eq!(info.name.to_string(), "n/s");
    assert_eq!(warns.len(), 1);
    assert_eq!(warns[0].field, "spec");
}
