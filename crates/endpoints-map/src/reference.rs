//! [`Reference`]: the naive model of an [`EndpointsMap`], for checking
//! code against. It keeps the latest version of every slice and computes
//! the whole map from scratch whenever asked, by the slice rules alone; the
//! incremental cache and map must always agree with it (this project's own
//! property tests check exactly that).
//!
//! ```
//! use endpoints_map::{EndpointsMap, reference::Reference};
//! use slice_cache::EndpointSliceCache;
//! use slice_model::{EndpointSlice, IpFamily, Protocol, SliceEndpoint};
//!
//! let slice = EndpointSlice::new("shop", "web-x1", "web")
//!     .expect("named")
//!     .with_port("http", Protocol::Tcp, 8080)
//!     .with_endpoint(SliceEndpoint::new("10.244.1.5".parse().unwrap()).on_node("node-1"));
//! let (mut cache, mut map) = (EndpointSliceCache::new("node-1", IpFamily::V4), EndpointsMap::new());
//! let mut reference = Reference::new("node-1", IpFamily::V4);
//! cache.update(slice.clone());
//! reference.update(slice);
//! let _ = map.update(&mut cache);
//! assert_eq!(map.snapshot(), reference.snapshot());
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;

use slice_model::{BaseEndpointInfo, EndpointSlice, IpFamily, ServicePortName, SliceName};

use crate::EndpointsMap;

/// A whole endpoints map as plain data, comparable with `==`: every service
/// port with endpoints, each port's endpoints sorted by address.
pub type MapSnapshot = BTreeMap<ServicePortName, Vec<BaseEndpointInfo>>;

/// The naive model; see the module docs.
#[derive(Clone, Debug)]
pub struct Reference {
    node: String,
    family: IpFamily,
    slices: BTreeMap<SliceName, EndpointSlice>,
}

impl Reference {
    /// An empty model of the map a proxier on `node` serving `family` keeps.
    pub fn new(node: &str, family: IpFamily) -> Self {
        Self {
            node: node.to_owned(),
            family,
            slices: BTreeMap::new(),
        }
    }

    /// Records the latest version of a slice (added or changed).
    pub fn update(&mut self, slice: EndpointSlice) {
        self.slices.insert(slice.name.clone(), slice);
    }

    /// Forgets a deleted slice.
    pub fn remove(&mut self, name: &SliceName) {
        self.slices.remove(name);
    }

    /// The latest version of a slice, if it is known.
    pub fn slice(&self, name: &SliceName) -> Option<&EndpointSlice> {
        self.slices.get(name)
    }

    /// The names of the slices known, in order.
    pub fn slice_names(&self) -> Vec<SliceName> {
        self.slices.keys().cloned().collect()
    }

    /// The map, computed from scratch: for each slice (in name order) and
    /// each of its ports, every endpoint of this family at that port; of two
    /// copies of one address and port the first slice's wins, unless a later
    /// one is local and it is not (rule 11); ports without endpoints are left
    /// out.
    pub fn snapshot(&self) -> MapSnapshot {
        let mut ports: BTreeMap<ServicePortName, BTreeMap<SocketAddr, BaseEndpointInfo>> = BTreeMap::new();
        for slice in self.slices.values() {
            let service = slice.service_name();
            for port in &slice.content.ports {
                let key = ServicePortName::new(service.clone(), port.name.clone(), port.protocol);
                let entry = ports.entry(key).or_default();
                for e in slice.content.endpoints.iter().filter(|e| e.family() == self.family) {
                    let addr = SocketAddr::new(e.addr, port.port.get());
                    let info = BaseEndpointInfo {
                        addr,
                        is_local: e.is_on_node(&self.node),
                        ready: e.conditions.ready,
                        serving: e.conditions.serving,
                        terminating: e.conditions.terminating,
                        zone_hints: e.zone_hints.clone(),
                        node_hint: e.node_hints.for_node(&self.node),
                    };
                    let replace = entry.get(&addr).is_none_or(|old| info.is_local && !old.is_local);
                    if replace {
                        entry.insert(addr, info);
                    }
                }
            }
        }
        ports
            .into_iter()
            .filter(|(_, eps)| !eps.is_empty())
            .map(|(k, eps)| (k, eps.into_values().collect()))
            .collect()
    }
}

impl EndpointsMap {
    /// The whole map as plain data (see [`MapSnapshot`]), to compare with
    /// another map or with a [`Reference`].
    pub fn snapshot(&self) -> MapSnapshot {
        self.ports()
            .map(|(name, endpoints)| (name, endpoints.to_vec()))
            .collect()
    }
}

/// Two maps are equal when they hold the same endpoints (their internal
/// bookkeeping may differ).
impl PartialEq for EndpointsMap {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.snapshot() == other.snapshot()
    }
}

impl Eq for EndpointsMap {}
