//! The [`Endpoint`] trait (what routing needs to know of one backend) and
//! its base implementation, [`BaseEndpointInfo`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::{NodeHint, ZoneHints};

/// What routing needs to know of one endpoint of one service port (a
/// node's proxy, a client-side load balancer, a DNS server): its address,
/// whether it runs on the node routing is judged from, its conditions and
/// its topology hints.
///
/// [`BaseEndpointInfo`] implements it; a user that keeps more per endpoint
/// (its own connection pool, say) can implement it on its own type and
/// use the same routing decisions.
pub trait Endpoint {
    /// The endpoint's address and port.
    fn socket_addr(&self) -> SocketAddr;

    /// Whether the endpoint runs on the node routing is judged from (the
    /// local node).
    fn is_local(&self) -> bool;

    /// The EndpointSlice's `ready` condition: eligible for new connections.
    /// An endpoint can be ready and terminating at once (a pod whose
    /// termination does not make it unready); it then counts as ready, as
    /// kube-proxy counts it.
    fn is_ready(&self) -> bool;

    /// Ready, whether terminating or not: usable as a fallback when a
    /// service has no ready endpoints.
    fn is_serving(&self) -> bool;

    /// The backing pod is terminating.
    fn is_terminating(&self) -> bool;

    /// The zones this endpoint is meant to serve.
    fn zone_hints(&self) -> &ZoneHints;

    /// What the endpoint's node hints say to the node routing is judged
    /// from (the local node). Implementations that do not keep node hints
    /// report none.
    fn node_hint(&self) -> NodeHint {
        NodeHint::Unhinted
    }

    /// The endpoint string, `IP:port`, or `[IPv6]:port` (canonical text).
    fn endpoint_string(&self) -> String {
        self.socket_addr().to_string()
    }

    /// The endpoint's IP.
    fn ip(&self) -> IpAddr {
        self.socket_addr().ip()
    }

    /// The endpoint's port.
    fn port(&self) -> u16 {
        self.socket_addr().port()
    }

    /// Whether `other` is the same endpoint: the same address and port,
    /// and the same locality (on this node or not). Deciding which
    /// connections went stale uses this: an endpoint whose locality flips
    /// counts as a different endpoint, one whose readiness flips does not.
    fn same_endpoint(&self, other: &dyn Endpoint) -> bool {
        self.socket_addr() == other.socket_addr() && self.is_local() == other.is_local()
    }
}

/// The base [`Endpoint`] implementation: everything the cache knows of an
/// endpoint, per service port.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct BaseEndpointInfo {
    /// Address and port.
    pub addr: SocketAddr,
    /// Runs on the node routing is judged from (the local node).
    pub is_local: bool,
    /// The slice's `ready` condition (possibly while terminating too, as
    /// [`Endpoint::is_ready`] says).
    pub ready: bool,
    /// Ready regardless of terminating.
    pub serving: bool,
    /// Terminating.
    pub terminating: bool,
    /// Zone hints.
    pub zone_hints: ZoneHints,
    /// What its node hints say to the node routing is judged from (the local node).
    pub node_hint: NodeHint,
}

/// Builders for code that constructs endpoints directly (tests, proxiers'
/// own fixtures).
impl BaseEndpointInfo {
    /// A ready, serving, non-local endpoint without zone hints.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            is_local: false,
            ready: true,
            serving: true,
            terminating: false,
            zone_hints: ZoneHints::default(),
            node_hint: NodeHint::Unhinted,
        }
    }

    /// Sets locality.
    #[must_use]
    pub fn local(mut self, is_local: bool) -> Self {
        self.is_local = is_local;
        self
    }

    /// Sets the conditions.
    #[must_use]
    pub fn with_conditions(mut self, c: crate::Conditions) -> Self {
        (self.ready, self.serving, self.terminating) = (c.ready, c.serving, c.terminating);
        self
    }

    /// Sets the zone hints.
    pub fn with_zones<'a>(mut self, zones: impl IntoIterator<Item = &'a str>) -> Self {
        self.zone_hints = ZoneHints::new(zones);
        self
    }

    /// Sets what the node hints say to the node routing is judged from (the local node).
    #[must_use]
    pub fn with_node_hint(mut self, hint: NodeHint) -> Self {
        self.node_hint = hint;
        self
    }
}

impl Endpoint for BaseEndpointInfo {
    fn socket_addr(&self) -> SocketAddr {
        self.addr
    }
    fn is_local(&self) -> bool {
        self.is_local
    }
    fn is_ready(&self) -> bool {
        self.ready
    }
    fn is_serving(&self) -> bool {
        self.serving
    }
    fn is_terminating(&self) -> bool {
        self.terminating
    }
    fn zone_hints(&self) -> &ZoneHints {
        &self.zone_hints
    }
    fn node_hint(&self) -> NodeHint {
        self.node_hint
    }
}

impl fmt::Display for BaseEndpointInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.addr, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str, local: bool, ready: bool) -> BaseEndpointInfo {
        BaseEndpointInfo::new(addr.parse().unwrap())
            .local(local)
            .with_conditions(crate::Conditions {
                ready,
                serving: ready,
                terminating: false,
            })
    }

    #[test]
    fn endpoint_string_brackets_ipv6() {
        assert_eq!(ep("10.0.0.1:80", false, true).endpoint_string(), "10.0.0.1:80");
        assert_eq!(ep("[fd00::1]:53", false, true).endpoint_string(), "[fd00::1]:53");
        assert_eq!(ep("[fd00::1]:53", false, true).ip().to_string(), "fd00::1");
    }

    #[test]
    fn same_endpoint_compares_string_and_locality_only() {
        let a = ep("10.0.0.1:80", false, true);
        assert!(a.same_endpoint(&ep("10.0.0.1:80", false, false)));
        assert!(!a.same_endpoint(&ep("10.0.0.1:80", true, true)));
        assert!(!a.same_endpoint(&ep("10.0.0.1:81", false, true)));
    }
}
