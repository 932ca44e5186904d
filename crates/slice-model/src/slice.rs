//! The model of an EndpointSlice as the cache needs it.

use std::net::IpAddr;
use std::num::NonZeroU16;
use std::sync::Arc;
use std::time::SystemTime;

use crate::{EndpointFacts, IpFamily, NodeHints, NodeName, Protocol, ServiceName, SliceName, ZoneHints};

/// An endpoint's conditions, with the API's defaults already applied.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Conditions {
    /// Ready to take new connections. The API means "serving and not
    /// terminating", but an object may say ready and terminating at once;
    /// such an endpoint is counted as ready, as kube-proxy counts it.
    pub ready: bool,
    /// Able to serve, whether or not it is terminating.
    pub serving: bool,
    /// Shutting down (its pod is being deleted).
    pub terminating: bool,
}

impl Conditions {
    /// Ready, serving, not terminating: an endpoint in normal service.
    pub const READY: Self = Self {
        ready: true,
        serving: true,
        terminating: false,
    };

    /// Ready, serving and terminating at once: what an object that says
    /// both decodes to. It counts as ready ([rule 8](crate::rules)), as
    /// kube-proxy counts it.
    pub const READY_TERMINATING: Self = Self {
        ready: true,
        serving: true,
        terminating: true,
    };

    /// Neither ready nor serving (starting, or failing its probe).
    pub const NOT_READY: Self = Self {
        ready: false,
        serving: false,
        terminating: false,
    };

    /// Terminating but still serving: used only when no endpoint is ready.
    pub const SERVING_TERMINATING: Self = Self {
        ready: false,
        serving: true,
        terminating: true,
    };

    /// Applies the discovery/v1 defaults: a missing `ready` is `true`, a
    /// missing `serving` takes the value of `ready`, a missing `terminating`
    /// is `false` ([rule 8](crate::rules)).
    pub fn from_api(ready: Option<bool>, serving: Option<bool>, terminating: Option<bool>) -> Self {
        let ready = ready.unwrap_or(true);
        Self {
            ready,
            serving: serving.unwrap_or(ready),
            terminating: terminating.unwrap_or(false),
        }
    }
}

impl Default for Conditions {
    /// The conditions of an endpoint whose `conditions` are absent.
    fn default() -> Self {
        Self::from_api(None, None, None)
    }
}

/// One port of a slice that can carry traffic: named (possibly `""`), with a
/// known protocol and a port number in 1..=65535.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SlicePort {
    /// The port's name; it must match the service port's name.
    pub name: Arc<str>,
    /// The protocol.
    pub protocol: Protocol,
    /// The port number on the endpoints.
    pub port: NonZeroU16,
    /// `appProtocol` (kept with the [facts](crate::EndpointFacts) only).
    pub app_protocol: Option<Arc<str>>,
}

/// One endpoint of a slice: its first address (canonical) and what decides
/// its locality, conditions and zone hints.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SliceEndpoint {
    /// The first address, parsed; its `Display` is the canonical text.
    pub addr: IpAddr,
    /// Conditions, defaults applied.
    pub conditions: Conditions,
    /// The node it runs on: `nodeName` when present (even if empty), else
    /// `deprecatedTopology["kubernetes.io/hostname"]` ([rule 2](crate::rules)).
    pub node: Option<NodeName>,
    /// `hints.forZones[].name`.
    pub zone_hints: ZoneHints,
    /// `hints.forNodes[].name`.
    pub node_hints: NodeHints,
    /// Hostname, node name, zone and target reference, when the builder
    /// keeps them ([`EndpointFacts`]).
    pub facts: Option<Arc<EndpointFacts>>,
}

impl SliceEndpoint {
    /// The node this endpoint runs on, if known.
    pub fn host(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// Whether the endpoint runs on `node` (never when `node` is empty).
    pub fn is_on_node(&self, node: &str) -> bool {
        !node.is_empty() && self.node.as_ref().is_some_and(|n| n.is(node))
    }

    /// The endpoint's IP family.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.addr)
    }
}

/// What the cache compares to decide whether a slice changed: its usable
/// ports and its endpoints.
///
/// The cache compares and merges content in normal form
/// ([`SliceContent::normalize`]: ports sorted without exact duplicates,
/// endpoints in address order, copies of one address in the slice's order)
/// and normalises what it is given. [`SliceBuilder`](crate::SliceBuilder)
/// already leaves content in that form; [`EndpointSlice::with_port`] and
/// [`EndpointSlice::with_endpoint`] keep the order and duplicates they are
/// given.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct SliceContent {
    /// Ports that carry traffic.
    pub ports: Vec<SlicePort>,
    /// Endpoints with a valid first address.
    pub endpoints: Vec<SliceEndpoint>,
}

/// Whether the endpoints are in address order (the order of
/// [`ip_sort_key`](crate::internal::ip_sort_key), which is `IpAddr`'s).
pub fn is_sorted_by_address(endpoints: &[SliceEndpoint]) -> bool {
    endpoints.is_sorted_by_key(|e| crate::addr::ip_sort_key(e.addr))
}

/// Puts the endpoints in address order, copies of one address in the order
/// they came ([rule 11](crate::rules)); endpoints already in order are only checked.
pub fn sort_by_address(endpoints: &mut [SliceEndpoint]) {
    if is_sorted_by_address(endpoints) {
        return;
    }
    // Sort each endpoint's key and position, then move each endpoint once.
    // Sorting the records themselves computed two keys per comparison and
    // moved the 72-byte records around many times. Ties on the address go
    // to the earlier position, which keeps copies in order.
    let mut from: Vec<usize> = match ipv4_keys(endpoints) {
        Some(mut keys) => {
            keys.sort_unstable();
            // The low half is the position.
            keys.into_iter().map(|k| k as u32 as usize).collect()
        }
        None => {
            let mut from: Vec<usize> = (0..endpoints.len()).collect();
            from.sort_unstable_by_key(|&i| (crate::addr::ip_sort_key(endpoints[i].addr), i));
            from
        }
    };
    permute(endpoints, &mut from);
}

/// Each endpoint's address and position in one word, the cheapest key to
/// sort; `None` unless every address is IPv4 (as in any IPv4 slice the API
/// server accepts).
fn ipv4_keys(endpoints: &[SliceEndpoint]) -> Option<Vec<u64>> {
    u32::try_from(endpoints.len()).ok()?;
    // Sized up front: collecting into an `Option` gives no size hint, and
    // growing the vector step by step cost more than the sort.
    let mut keys = Vec::with_capacity(endpoints.len());
    for (e, i) in endpoints.iter().zip(0u32..) {
        match e.addr {
            IpAddr::V4(a) => keys.push(u64::from(a.to_bits()) << 32 | u64::from(i)),
            IpAddr::V6(_) => return None,
        }
    }
    Some(keys)
}

/// Ports by name, protocol and number.
fn port_order(a: &SlicePort, b: &SlicePort) -> std::cmp::Ordering {
    (&a.name, a.protocol, a.port).cmp(&(&b.name, b.protocol, b.port))
}

/// Rearranges `items` so that position `j` holds what was at `from[j]`,
/// following each cycle of the permutation with swaps. `from` must be a
/// permutation of the positions; it is used up (each entry is set to its
/// own index once placed).
fn permute<T>(items: &mut [T], from: &mut [usize]) {
    for start in 0..from.len() {
        let mut j = start;
        loop {
            let k = from[j];
            from[j] = j;
            if k == start || k == j {
                break;
            }
            items.swap(j, k);
            j = k;
        }
    }
}

impl SliceContent {
    /// Puts the content in the canonical form the cache compares and merges:
    /// endpoints in address order (copies of one address in slice order),
    /// ports sorted without exact duplicates. Content already in that form
    /// (as [`SliceBuilder`](crate::SliceBuilder) leaves it) is only checked.
    pub fn normalize(&mut self) {
        sort_by_address(&mut self.endpoints);
        if !self.ports.is_sorted_by(|a, b| port_order(a, b).is_le()) {
            self.ports.sort_unstable_by(port_order);
        }
        self.ports.dedup();
    }

    /// This content without the endpoints of other families: what a
    /// single-family proxier keeps.
    pub fn only_family(mut self, family: IpFamily) -> Self {
        self.endpoints.retain(|e| e.family() == family);
        self
    }
}

/// An accepted EndpointSlice: its name, the service it belongs to, its
/// content and the `endpoints.kubernetes.io/last-change-trigger-time`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct EndpointSlice {
    /// The slice object's namespace and name.
    pub name: SliceName,
    /// The `kubernetes.io/service-name` label (never empty).
    pub service: Arc<str>,
    /// Ports and endpoints.
    pub content: SliceContent,
    /// When the change that produced this version of the slice was
    /// triggered, if the annotation was present and valid.
    pub trigger_time: Option<SystemTime>,
}

impl EndpointSlice {
    /// The service this slice belongs to.
    pub fn service_name(&self) -> ServiceName {
        ServiceName::new(self.name.namespace.clone(), self.service.clone())
    }
}

/// Builders for code that constructs slices directly (tests, fixtures,
/// simulations) rather than decoding them.
impl SliceEndpoint {
    /// A ready endpoint at `addr`, on no node, without zone hints.
    pub fn new(addr: IpAddr) -> Self {
        Self {
            addr,
            conditions: Conditions::default(),
            node: None,
            zone_hints: ZoneHints::default(),
            node_hints: NodeHints::default(),
            facts: None,
        }
    }

    /// Sets the node.
    #[must_use]
    pub fn on_node(mut self, node: &str) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Sets the conditions.
    #[must_use]
    pub fn with_conditions(mut self, conditions: Conditions) -> Self {
        self.conditions = conditions;
        self
    }

    /// Sets the zone hints.
    pub fn with_zones<'a>(mut self, zones: impl IntoIterator<Item = &'a str>) -> Self {
        self.zone_hints = ZoneHints::new(zones);
        self
    }

    /// Sets the node hints.
    pub fn with_node_hints<'a>(mut self, nodes: impl IntoIterator<Item = &'a str>) -> Self {
        self.node_hints = NodeHints::new(nodes);
        self
    }

    /// Sets the facts.
    #[must_use]
    pub fn with_facts(mut self, facts: EndpointFacts) -> Self {
        self.facts = Some(Arc::new(facts));
        self
    }
}

impl EndpointSlice {
    /// An empty slice `namespace/name` of service `namespace/service`; all
    /// three must be non-empty (as [rule 6](crate::rules) asks of decoded
    /// slices).
    pub fn new(namespace: &str, name: &str, service: &str) -> Result<Self, crate::SliceError> {
        if namespace.is_empty() || name.is_empty() {
            return Err(crate::SliceError::MissingName {
                namespace: namespace.into(),
                name: name.into(),
            });
        }
        let slice = SliceName::new(namespace, name);
        if service.is_empty() {
            return Err(crate::SliceError::MissingServiceName(slice));
        }
        Ok(Self {
            name: slice,
            service: service.into(),
            content: SliceContent::default(),
            trigger_time: None,
        })
    }

    /// Adds a port, after the others (duplicates kept: the cache sorts and
    /// de-duplicates, see [`SliceContent`]). Port 0 carries no traffic and
    /// adds nothing, as [rule 9](crate::rules) reads it in decoded slices.
    #[must_use]
    pub fn with_port(mut self, name: &str, protocol: Protocol, port: u16) -> Self {
        let Some(port) = NonZeroU16::new(port) else {
            return self;
        };
        self.content.ports.push(SlicePort {
            name: name.into(),
            protocol,
            port,
            app_protocol: None,
        });
        self
    }

    /// Adds an endpoint, after the others (the cache puts them in address
    /// order, see [`SliceContent`]).
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: SliceEndpoint) -> Self {
        self.content.endpoints.push(endpoint);
        self
    }

    /// Sets the trigger time.
    #[must_use]
    pub fn with_trigger_time(mut self, t: SystemTime) -> Self {
        self.trigger_time = Some(t);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_defaults_follow_the_api() {
        let c = |r, s, t| Conditions::from_api(r, s, t);
        assert_eq!(
            c(None, None, None),
            Conditions {
                ready: true,
                serving: true,
                terminating: false
            }
        );
        assert_eq!(
            c(Some(false), None, None),
            Conditions {
                ready: false,
                serving: false,
                terminating: false
            }
        );
        assert_eq!(
            c(Some(false), Some(true), Some(true)),
            Conditions {
                ready: false,
                serving: true,
                terminating: true
            }
        );
        assert_eq!(
            c(None, Some(false), None),
            Conditions {
                ready: true,
                serving: false,
                terminating: false
            }
        );
    }

    #[test]
    fn address_order_is_stable_among_copies() {
        let ep = |a: &str, node: &str| SliceEndpoint::new(a.parse().unwrap()).on_node(node);
        let mut v = vec![
            ep("fd00::1", "a"),
            ep("10.0.0.2", "b"),
            ep("10.0.0.10", "c"),
            ep("10.0.0.2", "d"),
        ];
        assert!(!is_sorted_by_address(&v));
        sort_by_address(&mut v);
        let got: Vec<(String, &str)> = v.iter().map(|e| (e.addr.to_string(), e.host().unwrap())).collect();
        assert_eq!(
            got,
            [
                ("10.0.0.2".to_string(), "b"),
                ("10.0.0.2".to_string(), "d"),
                ("10.0.0.10".to_string(), "c"),
                ("fd00::1".to_string(), "a"),
            ]
        );
        assert!(is_sorted_by_address(&v));
    }

    /// Whether the content is in the form `normalize` leaves it.
    fn is_normalized(c: &SliceContent) -> bool {
        is_sorted_by_address(&c.endpoints) && c.ports.is_sorted_by(|a, b| port_order(a, b).is_lt())
    }

    #[test]
    fn normal_form_sorts_endpoints_and_ports_and_drops_duplicate_ports() {
        let mut s = EndpointSlice::new("ns", "web-1", "web")
            .unwrap()
            .with_port("http", Protocol::Tcp, 80)
            .with_port("dns", Protocol::Udp, 53)
            .with_port("http", Protocol::Tcp, 80)
            .with_port("dns", Protocol::Tcp, 53)
            .with_endpoint(SliceEndpoint::new("10.0.0.2".parse().unwrap()))
            .with_endpoint(SliceEndpoint::new("10.0.0.1".parse().unwrap()));
        assert!(!is_normalized(&s.content));
        s.content.normalize();
        assert!(is_normalized(&s.content));
        let ports: Vec<(&str, Protocol)> = s.content.ports.iter().map(|p| (&*p.name, p.protocol)).collect();
        assert_eq!(
            ports,
            [("dns", Protocol::Tcp), ("dns", Protocol::Udp), ("http", Protocol::Tcp)]
        );
        assert!(is_sorted_by_address(&s.content.endpoints));
        let again = s.content.clone();
        s.content.normalize();
        assert_eq!(s.content, again, "normal form is a fixed point");
    }

    #[test]
    fn permute_places_each_item_from_its_source() {
        for from in [
            vec![],
            vec![0],
            vec![1, 0],
            vec![2, 0, 1],
            vec![1, 2, 0, 3],
            vec![3, 2, 1, 0],
        ] {
            let mut items: Vec<usize> = (0..from.len()).map(|i| i * 10).collect();
            let want: Vec<usize> = from.iter().map(|&i| i * 10).collect();
            permute(&mut items, &mut from.clone());
            assert_eq!(items, want, "from {from:?}");
        }
    }

    proptest::proptest! {
        /// Sorting by address is a stable sort by the address key: copies
        /// of one address keep their order.
        #[test]
        fn sort_by_address_is_a_stable_sort(
            families in 0u8..3,
            addrs in proptest::collection::vec((0u8..6, proptest::bool::ANY), 0..40),
        ) {
            // IPv4 only, IPv6 only (the one-family path), or both.
            let endpoints: Vec<SliceEndpoint> = addrs
                .iter()
                .enumerate()
                .map(|(i, &(a, v6))| {
                    let v6 = match families {
                        0 => false,
                        1 => true,
                        _ => v6,
                    };
                    let addr: IpAddr = if v6 { format!("fd00::{a}") } else { format!("10.0.0.{a}") }.parse().unwrap();
                    SliceEndpoint::new(addr).on_node(&i.to_string())
                })
                .collect();
            let mut want = endpoints.clone();
            want.sort_by_key(|e| crate::addr::ip_sort_key(e.addr));
            let mut got = endpoints;
            sort_by_address(&mut got);
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn an_empty_node_or_none_is_never_local() {
        let mut e = SliceEndpoint::new("10.0.0.1".parse().unwrap());
        assert!(!e.is_on_node("n1") && e.host().is_none());
        e = e.on_node("n1");
        assert!(e.is_on_node("n1") && !e.is_on_node("n2"));
        e = e.on_node("");
        assert!(!e.is_on_node("n1"));
        assert!(!e.is_on_node(""), "an empty node name is nobody's");
    }

    #[test]
    fn bad_data_is_an_error_not_a_panic() {
        assert!(matches!(
            EndpointSlice::new("", "", "x"),
            Err(crate::SliceError::MissingName { .. })
        ));
        assert!(matches!(
            EndpointSlice::new("ns", "a", ""),
            Err(crate::SliceError::MissingServiceName(_))
        ));
        let s = EndpointSlice::new("ns", "a", "web")
            .unwrap()
            .with_port("zero", Protocol::Tcp, 0)
            .with_port("http", Protocol::Tcp, 80);
        let names: Vec<&str> = s.content.ports.iter().map(|p| &*p.name).collect();
        assert_eq!(names, ["http"], "port 0 adds nothing (rule 9)");
    }
}
