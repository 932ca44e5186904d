//! Merging a service's slices into endpoints per service port.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use slice_model::{BaseEndpointInfo, Protocol, SliceContent};

/// The endpoints of one service port (port name + protocol), sorted by
/// address and port, one entry per address and port.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PortEndpoints {
    /// The port's name (`""` for an unnamed port).
    pub name: Arc<str>,
    /// The port's protocol.
    pub protocol: Protocol,
    /// The endpoints, sorted by [`SocketAddr`] and never empty.
    pub endpoints: Vec<BaseEndpointInfo>,
}

impl PortEndpoints {
    /// The endpoint with this address and port, if any.
    pub fn get(&self, addr: &SocketAddr) -> Option<&BaseEndpointInfo> {
        self.endpoints
            .binary_search_by(|e| e.addr.cmp(addr))
            .ok()
            .map(|i| &self.endpoints[i])
    }
}

/// All endpoints of one service, per port: what one service contributes to
/// the endpoints map. Ports are sorted by name, then protocol.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ServiceEndpoints {
    ports: Vec<PortEndpoints>,
}

impl ServiceEndpoints {
    /// The service's ports that have endpoints, sorted by name, then protocol.
    pub fn ports(&self) -> &[PortEndpoints] {
        &self.ports
    }

    /// The endpoints of one port, if it has any.
    pub fn port(&self, name: &str, protocol: Protocol) -> Option<&PortEndpoints> {
        self.ports
            .binary_search_by(|p| (&*p.name, p.protocol).cmp(&(name, protocol)))
            .ok()
            .map(|i| &self.ports[i])
    }

    /// Whether no port has an endpoint.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// The number of distinct IPs of ready, local endpoints across all ports:
    /// what a health-check node port reports for the service.
    pub fn local_ready_ip_count(&self) -> usize {
        let counted = |e: &&BaseEndpointInfo| e.ready && e.is_local;
        if !self.ports.iter().flat_map(|p| &p.endpoints).any(|e| counted(&e)) {
            return 0;
        }
        let mut ips: Vec<IpAddr> = self
            .ports
            .iter()
            .flat_map(|p| &p.endpoints)
            .filter(counted)
            .map(|e| e.addr.ip())
            .collect();
        ips.sort_unstable();
        ips.dedup();
        ips.len()
    }

    /// Merges a service's slices, visited in the order given (by slice name,
    /// in the cache). One address and port appears once per service port:
    /// the first copy wins, except that a local copy beats a non-local one
    /// (contract rule 11).
    pub fn merge<'a>(slices: impl IntoIterator<Item = &'a SliceContent> + Clone, node_name: &str) -> Self {
        let mut ports: Vec<PortEndpoints> = Vec::new();
        // Size every bucket up front: regrowing large ones showed up in profiles.
        for slice in slices.clone() {
            for port in &slice.ports {
                match ports
                    .iter_mut()
                    .find(|p| p.protocol == port.protocol && p.name == port.name)
                {
                    Some(p) => p.endpoints.reserve(slice.endpoints.len()),
                    None => ports.push(PortEndpoints {
                        name: port.name.clone(),
                        protocol: port.protocol,
                        endpoints: Vec::with_capacity(slice.endpoints.len()),
                    }),
                }
            }
        }
        for slice in slices {
            for port in &slice.ports {
                let Some(bucket) = ports
                    .iter_mut()
                    .find(|p| p.protocol == port.protocol && p.name == port.name)
                else {
                    continue;
                };
                bucket
                    .endpoints
                    .extend(slice.endpoints.iter().map(|e| BaseEndpointInfo {
                        addr: SocketAddr::new(e.addr, port.port.get()),
                        is_local: e.is_on_node(node_name),
                        ready: e.conditions.ready,
                        serving: e.conditions.serving,
                        terminating: e.conditions.terminating,
                        zone_hints: e.zone_hints.clone(),
                    }));
            }
        }
        for p in &mut ports {
            // Each slice's endpoints are sorted already (SliceBuilder), so a
            // one-slice service without copies of an address needs neither
            // pass; several slices are sorted runs that the stable sort
            // merges.
            if !p.endpoints.is_sorted_by(|a, b| a.addr < b.addr) {
                p.endpoints.sort_by_key(|e| e.addr);
                dedup_prefer_local(&mut p.endpoints);
            }
        }
        ports.retain(|p| !p.endpoints.is_empty());
        ports.sort_by(|a, b| (&a.name, a.protocol).cmp(&(&b.name, b.protocol)));
        Self { ports }
    }
}

/// Keeps one endpoint per address in a list sorted by address: the first
/// copy, unless a later copy is local and the first is not (rule 11).
fn dedup_prefer_local(v: &mut Vec<BaseEndpointInfo>) {
    let mut kept = 0;
    let mut i = 0;
    while i < v.len() {
        let mut pick = i;
        let mut j = i + 1;
        while j < v.len() && v[j].addr == v[i].addr {
            if v[j].is_local && !v[pick].is_local {
                pick = j;
            }
            j += 1;
        }
        // Everything before `i` at or after `kept` is already consumed.
        v.swap(kept, pick);
        kept += 1;
        i = j;
    }
    v.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str, local: bool, ready: bool) -> BaseEndpointInfo {
        BaseEndpointInfo::new(addr.parse().unwrap())
            .local(local)
            .with_conditions(ready, ready, false)
    }

    #[test]
    fn dedup_keeps_first_unless_a_later_copy_is_local() {
        let mut v = vec![
            ep("10.0.0.1:80", false, true),
            ep("10.0.0.1:80", false, false),
            ep("10.0.0.2:80", false, true),
            ep("10.0.0.2:80", true, false),
            ep("10.0.0.2:80", true, true),
            ep("10.0.0.3:80", true, true),
            ep("10.0.0.4:80", false, false),
        ];
        dedup_prefer_local(&mut v);
        let got: Vec<(String, bool, bool)> = v.iter().map(|e| (e.addr.to_string(), e.is_local, e.ready)).collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1:80".to_string(), false, true),
                ("10.0.0.2:80".to_string(), true, false),
                ("10.0.0.3:80".to_string(), true, true),
                ("10.0.0.4:80".to_string(), false, false),
            ]
        );
        let mut empty: Vec<BaseEndpointInfo> = Vec::new();
        dedup_prefer_local(&mut empty);
        assert!(empty.is_empty());
    }
}
