//! Merging a service's slices into endpoints per service port.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use slice_model::internal::{ip_sort_key, is_sorted_by_address};
use slice_model::{BaseEndpointInfo, Protocol, ServiceName, ServicePortName, SliceContent, SliceEndpoint};

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

impl PortEndpoints {
    /// This port's full name, as a port of `service`.
    pub fn port_name(&self, service: &ServiceName) -> ServicePortName {
        ServicePortName::new(service.clone(), self.name.clone(), self.protocol)
    }
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
    /// ([rule 11](slice_model::rules)). Slices whose endpoints are not in address order
    /// ([`SliceContent::normalize`]) are sorted on a copy first.
    pub fn merge<'a>(slices: impl IntoIterator<Item = &'a SliceContent>, node_name: &str) -> Self {
        let slices: Vec<Cow<'a, SliceContent>> = slices
            .into_iter()
            .map(|s| {
                if is_sorted_by_address(&s.endpoints) {
                    Cow::Borrowed(s)
                } else {
                    let mut owned = s.clone();
                    owned.normalize();
                    Cow::Owned(owned)
                }
            })
            .collect();
        Self::merge_normalized(slices.iter().map(|s| &**s), node_name)
    }

    /// [`merge`](Self::merge) for slices whose endpoints are known to be in
    /// address order, as the cache keeps them: it skips the check, a pass
    /// over every endpoint of every slice of the service, most of them not
    /// in any CPU cache.
    pub(crate) fn merge_normalized<'a>(slices: impl IntoIterator<Item = &'a SliceContent>, node_name: &str) -> Self {
        // Each port of each slice is a run; a stable sort groups the runs
        // by service port (name, protocol), slices in order within each,
        // and leaves the groups in the order the ports are listed in.
        let mut runs: Vec<Run<'a>> = Vec::new();
        for slice in slices {
            debug_assert!(is_sorted_by_address(&slice.endpoints));
            runs.extend(slice.ports.iter().map(|p| Run {
                name: &p.name,
                protocol: p.protocol,
                endpoints: &slice.endpoints,
                port: p.port.get(),
            }));
        }
        runs.sort_by(|a, b| (a.name, a.protocol).cmp(&(b.name, b.protocol)));
        let mut ports: Vec<PortEndpoints> = runs
            .chunk_by(|a, b| a.name == b.name && a.protocol == b.protocol)
            .filter_map(|bucket| {
                let first = bucket.first()?;
                let endpoints = merge_runs(bucket, node_name);
                (!endpoints.is_empty()).then(|| PortEndpoints {
                    name: first.name.clone(),
                    protocol: first.protocol,
                    endpoints,
                })
            })
            .collect();
        // Kept until the service changes again; collecting reserved four.
        ports.shrink_to_fit();
        Self { ports }
    }
}

/// One slice's endpoints (sorted by address) on one of its ports.
struct Run<'a> {
    name: &'a Arc<str>,
    protocol: Protocol,
    endpoints: &'a [SliceEndpoint],
    port: u16,
}

/// Merges sorted runs into one list sorted by address and port, keeping one
/// endpoint per address and port: the first copy in run order, unless a
/// later copy is local and the first is not ([rule 11](slice_model::rules)).
///
/// Each endpoint is converted and written once, in order. Appending the
/// runs and sorting the result moved every endpoint several times: for the
/// services of many slices that dominate a busy cluster's syncs, the sort
/// was about a third of the instructions spent syncing.
fn merge_runs(runs: &[Run<'_>], node_name: &str) -> Vec<BaseEndpointInfo> {
    let mut out = Vec::with_capacity(runs.iter().map(|r| r.endpoints.len()).sum());
    let convert = |e: &SliceEndpoint, port: u16| BaseEndpointInfo {
        addr: SocketAddr::new(e.addr, port),
        is_local: e.is_on_node(node_name),
        ready: e.conditions.ready,
        serving: e.conditions.serving,
        terminating: e.conditions.terminating,
        zone_hints: e.zone_hints.clone(),
        node_hint: e.node_hints.for_node(node_name),
    };
    let push = |out: &mut Vec<BaseEndpointInfo>, e: &SliceEndpoint, port: u16| {
        let addr = SocketAddr::new(e.addr, port);
        match out.last_mut() {
            Some(last) if last.addr == addr => {
                if !last.is_local && e.is_on_node(node_name) {
                    *last = convert(e, port);
                }
            }
            _ => out.push(convert(e, port)),
        }
    };
    if let [run] = runs {
        run.endpoints.iter().for_each(|e| push(&mut out, e, run.port));
        return out;
    }
    // A min-heap of each run's next endpoint, by address and port; ties go
    // to the earlier run, so copies of one address come out in run order.
    let head = |r: usize, i: usize| {
        let run = &runs[r];
        let e = run.endpoints.get(i)?;
        Some(Reverse((ip_sort_key(e.addr), run.port, r, i)))
    };
    let mut heads: BinaryHeap<_> = (0..runs.len()).filter_map(|r| head(r, 0)).collect();
    while let Some(mut top) = heads.peek_mut() {
        let Reverse((_, _, r, i)) = *top;
        push(&mut out, &runs[r].endpoints[i], runs[r].port);
        match head(r, i + 1) {
            Some(next) => *top = next,
            None => drop(PeekMut::pop(top)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str, node: &str, ready: bool) -> SliceEndpoint {
        SliceEndpoint::new(addr.parse().unwrap())
            .on_node(node)
            .with_conditions(slice_model::Conditions {
                ready,
                serving: ready,
                terminating: false,
            })
    }

    #[test]
    fn a_merge_holds_no_spare_ports() {
        let slice = SliceContent {
            ports: vec![slice_model::SlicePort {
                name: "p".into(),
                protocol: Protocol::Tcp,
                port: std::num::NonZeroU16::new(80).unwrap(),
                app_protocol: None,
            }],
            endpoints: vec![ep("10.0.0.1", "here", true)],
        };
        let m = ServiceEndpoints::merge_normalized([&slice], "here");
        assert_eq!(m.ports.len(), 1);
        assert_eq!(m.ports.capacity(), 1);
    }

    fn merged(runs: &[(&[SliceEndpoint], u16)]) -> Vec<(String, bool, bool)> {
        let name: Arc<str> = "p".into();
        let runs: Vec<Run<'_>> = runs
            .iter()
            .map(|&(endpoints, port)| Run {
                name: &name,
                protocol: Protocol::Tcp,
                endpoints,
                port,
            })
            .collect();
        merge_runs(&runs, "here")
            .iter()
            .map(|e| (e.addr.to_string(), e.is_local, e.ready))
            .collect()
    }

    fn row(addr: &str, local: bool, ready: bool) -> (String, bool, bool) {
        (addr.to_owned(), local, ready)
    }

    #[test]
    fn copies_keep_the_first_unless_a_later_one_is_local() {
        let one = [
            ep("10.0.0.1", "a", true),
            ep("10.0.0.1", "b", false),
            ep("10.0.0.2", "a", true),
            ep("10.0.0.2", "here", false),
            ep("10.0.0.2", "here", true),
            ep("10.0.0.3", "here", true),
        ];
        assert_eq!(
            merged(&[(&one, 80)]),
            [
                row("10.0.0.1:80", false, true),
                row("10.0.0.2:80", true, false),
                row("10.0.0.3:80", true, true),
            ]
        );
        let two = [
            ep("10.0.0.0", "a", false),
            ep("10.0.0.1", "here", false),
            ep("10.0.0.3", "a", false),
        ];
        assert_eq!(
            merged(&[(&one, 80), (&two, 80)]),
            [
                row("10.0.0.0:80", false, false),
                row("10.0.0.1:80", true, false),
                row("10.0.0.2:80", true, false),
                row("10.0.0.3:80", true, true),
            ],
            "across runs: earlier runs first, a later local copy still wins"
        );
        assert!(merged(&[]).is_empty());
        assert!(merged(&[(&[], 80), (&[], 81)]).is_empty());
    }

    #[test]
    fn runs_on_different_port_numbers_interleave_by_address_then_port() {
        let a = [ep("10.0.0.1", "a", true), ep("10.0.0.2", "a", true)];
        let b = [ep("10.0.0.1", "a", false)];
        let mut c = vec![ep("fd00::1", "a", true), ep("10.0.0.2", "a", true)];
        c.sort_by_key(|e| ip_sort_key(e.addr));
        assert_eq!(
            merged(&[(&a, 8080), (&b, 80), (&c, 80)]),
            [
                row("10.0.0.1:80", false, false),
                row("10.0.0.1:8080", false, true),
                row("10.0.0.2:80", false, true),
                row("10.0.0.2:8080", false, true),
                row("[fd00::1]:80", false, true),
            ]
        );
    }
}
