//! One output line per sync, in the contract's format and order.

use std::io::{self, Write};

use endpoints_map::{EndpointsMap, UpdateResult};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use slice_cache::PortEndpoints;
use slice_model::{BaseEndpointInfo, ServiceName, ServicePortName};

#[derive(Serialize)]
struct Endpoint<'a> {
    endpoint: &'a str,
    ip: String,
    port: u16,
    #[serde(rename = "isLocal")]
    is_local: bool,
    ready: bool,
    serving: bool,
    terminating: bool,
    #[serde(rename = "zoneHints")]
    zone_hints: Zones<'a>,
}

struct Zones<'a>(&'a [std::sync::Arc<str>]);

impl Serialize for Zones<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|z| &**z))
    }
}

struct Endpoints<'a>(&'a [BaseEndpointInfo]);

impl Serialize for Endpoints<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The contract orders by the endpoint's text, not its address.
        let mut texts: Vec<(String, &BaseEndpointInfo)> = self.0.iter().map(|e| (e.addr.to_string(), e)).collect();
        texts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut seq = s.serialize_seq(Some(texts.len()))?;
        for (text, e) in &texts {
            seq.serialize_element(&Endpoint {
                endpoint: text,
                ip: e.addr.ip().to_string(),
                port: e.addr.port(),
                is_local: e.is_local,
                ready: e.ready,
                serving: e.serving,
                terminating: e.terminating,
                zone_hints: Zones(e.zone_hints.as_slice()),
            })?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct Port<'a> {
    namespace: &'a str,
    name: &'a str,
    port: &'a str,
    protocol: &'static str,
    endpoints: Endpoints<'a>,
}

struct MapJson<'a>(&'a EndpointsMap);

impl Serialize for MapJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (svc, p) in self.0.iter() {
            seq.serialize_element(&port_json(svc, p))?;
        }
        seq.end()
    }
}

fn port_json<'a>(svc: &'a ServiceName, p: &'a PortEndpoints) -> Port<'a> {
    Port {
        namespace: &svc.namespace,
        name: &svc.name,
        port: &p.name,
        protocol: p.protocol.as_str(),
        endpoints: Endpoints(&p.endpoints),
    }
}

#[derive(Serialize)]
struct StaleEndpoint<'a> {
    namespace: &'a str,
    name: &'a str,
    port: &'a str,
    protocol: &'static str,
    endpoint: String,
}

#[derive(Serialize)]
struct StaleService<'a> {
    namespace: &'a str,
    name: &'a str,
    port: &'a str,
    protocol: &'static str,
}

fn stale_service(p: &ServicePortName) -> StaleService<'_> {
    StaleService {
        namespace: &p.service.namespace,
        name: &p.service.name,
        port: &p.port,
        protocol: p.protocol.as_str(),
    }
}

struct LocalReady<'a>(&'a EndpointsMap);

impl Serialize for LocalReady<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Keys are ordered as text ("a-x/c" < "a/b"), unlike service names.
        let mut entries: Vec<(String, usize)> = self
            .0
            .local_ready_endpoints()
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect();
        entries.sort_unstable();
        let mut map = s.serialize_map(Some(entries.len()))?;
        for (k, v) in &entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SyncLine<'a> {
    endpoints: MapJson<'a>,
    stale_endpoints: Vec<StaleEndpoint<'a>>,
    stale_service_names: Vec<StaleService<'a>>,
    local_ready_endpoints: LocalReady<'a>,
}

/// Writes one sync's line: the whole map after the sync and what the sync
/// found stale.
pub fn write_sync_line(w: &mut impl Write, map: &EndpointsMap, result: &UpdateResult) -> io::Result<()> {
    let mut stale: Vec<StaleEndpoint<'_>> = result
        .stale_endpoints
        .iter()
        .map(|s| StaleEndpoint {
            namespace: &s.service_port.service.namespace,
            name: &s.service_port.service.name,
            port: &s.service_port.port,
            protocol: s.service_port.protocol.as_str(),
            endpoint: s.endpoint.to_string(),
        })
        .collect();
    stale.sort_by(|a, b| {
        (a.namespace, a.name, a.port, a.protocol, &a.endpoint).cmp(&(
            b.namespace,
            b.name,
            b.port,
            b.protocol,
            &b.endpoint,
        ))
    });
    let mut services: Vec<&ServicePortName> = result.stale_service_names.iter().collect();
    services.sort();
    let line = SyncLine {
        endpoints: MapJson(map),
        stale_endpoints: stale,
        stale_service_names: services.into_iter().map(stale_service).collect(),
        local_ready_endpoints: LocalReady(map),
    };
    serde_json::to_writer(&mut *w, &line)?;
    w.write_all(b"\n")
}
