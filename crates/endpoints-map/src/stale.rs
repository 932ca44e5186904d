//! Stale UDP connection detection between a service's previous and current
//! endpoints.

use slice_cache::ServiceEndpoints;
use slice_model::{Protocol, ServiceName, ServicePortName};

use crate::{ServiceEndpoint, UpdateResult};

/// Adds to `result` the UDP endpoints of `previous` that `current` lacks (or
/// has with the other locality), and the UDP ports that `current` has
/// endpoints for and `previous` had none.
pub(crate) fn detect_stale(
    service: &ServiceName,
    previous: &ServiceEndpoints,
    current: &ServiceEndpoints,
    result: &mut UpdateResult,
) {
    for old in previous.ports().iter().filter(|p| tracks_stale(p.protocol)) {
        let new = current
            .port(&old.name, old.protocol)
            .map_or(&[][..], |p| &p.endpoints[..]);
        // Both lists are sorted by address: walk them together.
        let mut rest = new.iter().peekable();
        for ep in &old.endpoints {
            while rest.next_if(|n| n.addr < ep.addr).is_some() {}
            let kept = rest
                .peek()
                .is_some_and(|n| n.addr == ep.addr && n.is_local == ep.is_local);
            if !kept {
                result.stale_endpoints.push(ServiceEndpoint {
                    service_port: ServicePortName::new(service.clone(), old.name.clone(), old.protocol),
                    endpoint: ep.addr,
                });
            }
        }
    }
    for new in current.ports().iter().filter(|p| tracks_stale(p.protocol)) {
        if previous.port(&new.name, new.protocol).is_none() {
            result
                .stale_service_names
                .push(ServicePortName::new(service.clone(), new.name.clone(), new.protocol));
        }
    }
}

/// Whether a protocol's stale conntrack entries are tracked (UDP only: TCP
/// and SCTP connections to a gone endpoint fail and are retried).
fn tracks_stale(protocol: Protocol) -> bool {
    protocol == Protocol::Udp
}
