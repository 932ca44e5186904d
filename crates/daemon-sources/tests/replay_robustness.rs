//! The replay reader must never panic: arbitrary bytes, and JSON that is
//! close to a watch event but wrong in random places, either replay or fail
//! with a line error.

use daemon_sources::replay::{Options, Replayer};
use proptest::prelude::*;
use serde_json::{Value, json};

fn replayer() -> Replayer<Vec<u8>> {
    let opts = Options {
        node_name: "node-1".into(),
        quiet: true,
        ..Options::default()
    };
    Replayer::new(opts, Vec::new(), Box::new(|_| {}))
}

/// JSON values of any shape, small.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-zA-Z0-9:.%/ -]{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "10.0.0.1",
            "fd00::1",
            "::ffff:1.2.3.4",
            "TCP",
            "UDP",
            "FQDN",
            "IPv4",
            ""
        ])
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,8}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A well-formed EndpointSlice event with one field replaced by anything.
fn mutated_event() -> impl Strategy<Value = String> {
    let base = json!({
        "type": "ADDED",
        "object": {
            "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
            "metadata": {"name": "s", "namespace": "n", "labels": {"kubernetes.io/service-name": "svc"},
                         "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2024-01-01T00:00:00Z"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "nodeName": "node-1",
                           "hints": {"forZones": [{"name": "a"}]}, "deprecatedTopology": {"kubernetes.io/hostname": "x"}}],
            "ports": [{"name": "p", "protocol": "UDP", "port": 53}]
        }
    });
    let paths: Vec<Vec<&'static str>> = vec![
        vec!["type"],
        vec!["object"],
        vec!["object", "kind"],
        vec!["object", "metadata"],
        vec!["object", "metadata", "name"],
        vec!["object", "metadata", "labels"],
        vec!["object", "metadata", "annotations"],
        vec!["object", "addressType"],
        vec!["object", "endpoints"],
        vec!["object", "ports"],
    ];
    (
        prop::sample::select(paths),
        any_json(),
        prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED", "SYNC"]),
    )
        .prop_map(move |(path, value, ty)| {
            let mut v = base.clone();
            v["type"] = json!(ty);
            let (last, parents) = path.split_last().expect("non-empty path");
            let mut cur = &mut v;
            for p in parents {
                cur = &mut cur[*p];
            }
            cur[*last] = value;
            v.to_string()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut r = replayer();
        for (i, line) in lines.iter().enumerate() {
            let _ = r.line(i as u64 + 1, line);
        }
        let _ = r.finish();
    }

    #[test]
    fn mutated_events_never_panic(lines in prop::collection::vec(mutated_event(), 1..6)) {
        let mut r = replayer();
        for (i, line) in lines.iter().enumerate() {
            let _ = r.line(i as u64 + 1, line.as_bytes());
        }
        r.finish().expect("writing to memory cannot fail");
    }

    #[test]
    fn any_json_object_never_panics(obj in any_json(), ty in prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED"])) {
        let mut r = replayer();
        let line = json!({"type": ty, "object": obj}).to_string();
        let _ = r.line(1, line.as_bytes());
        r.finish().expect("writing to memory cannot fail");
    }
}
