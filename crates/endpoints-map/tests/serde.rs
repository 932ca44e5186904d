//! The `serde` feature: a dump of the map, read back as JSON, holds every
//! service port and every endpoint the map's own accessors give, in their
//! order, with each field's value.

use endpoints_map::EndpointsMap;
use proptest::prelude::*;
use serde_json::{Value, json};
use slice_cache::EndpointSliceCache;
use slice_model::strategies::endpoint_slice;
use slice_model::{BaseEndpointInfo, IpFamily, NodeHint, Protocol};

fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Sctp => "SCTP",
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
    }
}

fn endpoint(e: &BaseEndpointInfo) -> Value {
    json!({
        "addr": e.addr.to_string(),
        "is_local": e.is_local,
        "ready": e.ready,
        "serving": e.serving,
        "terminating": e.terminating,
        "zone_hints": e.zone_hints.iter().collect::<Vec<_>>(),
        "node_hint": match e.node_hint {
            NodeHint::Unhinted => "Unhinted",
            NodeHint::ThisNode => "ThisNode",
            NodeHint::OtherNodes => "OtherNodes",
        },
    })
}

proptest! {
    #[test]
    fn a_dump_holds_what_the_map_holds(slices in prop::collection::vec(endpoint_slice(), 0..12)) {
        let mut cache = EndpointSliceCache::new("node-a", IpFamily::V4);
        for slice in slices {
            cache.update(slice);
        }
        let mut map = EndpointsMap::new();
        let _ = map.update(&mut cache);
        let dump: Value = serde_json::from_str(&serde_json::to_string(&map).expect("serializes")).expect("JSON");
        let want: Vec<Value> = map
            .ports()
            .map(|(port, endpoints)| {
                json!({
                    "service_port": {
                        "service": {"namespace": &*port.service.namespace, "name": &*port.service.name},
                        "port": &*port.port,
                        "protocol": protocol(port.protocol),
                    },
                    "endpoints": endpoints.iter().map(endpoint).collect::<Vec<_>>(),
                })
            })
            .collect();
        prop_assert_eq!(dump, Value::Array(want));
    }
}
