//! [`SliceBuilder`]: turns the fields of an EndpointSlice, however they were
//! decoded, into an [`EndpointSlice`], applying the [slice rules](crate::rules)
//! in one place.
//!
//! Whole-object problems reject the slice ([`SliceError`]); problems with
//! one port or one endpoint skip that part and leave a [`SliceWarning`] that
//! names the slice and the field.

use std::fmt;
use std::num::NonZeroU16;
use std::sync::Arc;

use crate::parse_endpoint_ip;
use crate::trigger_time::parse_rfc3339;
use crate::{
    Conditions, EndpointFacts, EndpointSlice, Interner, NodeHints, Protocol, RawTargetRef, SliceContent, SliceEndpoint,
    SliceName, SlicePort, TargetRef,
};

/// The label that names a slice's service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The annotation that stamps when the change behind a slice was triggered.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The topology key whose value is the endpoint's node ([rule 2](crate::rules)).
pub const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// Why an ADDED or MODIFIED slice is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SliceError {
    /// `metadata.namespace` or `metadata.name` is missing or empty.
    #[error("endpoint slice {namespace:?}/{name:?}: metadata.namespace and metadata.name must be set")]
    MissingName {
        /// The namespace as given (possibly empty).
        namespace: String,
        /// The name as given (possibly empty).
        name: String,
    },
    /// The `kubernetes.io/service-name` label is missing or empty.
    #[error("endpoint slice {0}: label {SERVICE_NAME_LABEL} is missing or empty; slice ignored")]
    MissingServiceName(SliceName),
    /// `addressType: FQDN`: such slices carry no IPs to proxy ([rule 4](crate::rules)).
    #[error("endpoint slice {0}: addressType FQDN is not proxied; slice ignored")]
    Fqdn(SliceName),
}

impl SliceError {
    /// Every [`reason`](Self::reason), for metrics that start at zero.
    pub const REASONS: &'static [&'static str] = &["missing_name", "missing_service_name", "fqdn"];

    /// A short label for metrics: `missing_name`, `missing_service_name`
    /// or `fqdn`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingName { .. } => "missing_name",
            Self::MissingServiceName(_) => "missing_service_name",
            Self::Fqdn(_) => "fqdn",
        }
    }
}

/// What was wrong with one part of an accepted slice.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// `ports[i].name` is absent (only `""` names an unnamed port).
    PortWithoutName,
    /// `ports[i].port` is absent or 0.
    PortWithoutNumber,
    /// `ports[i].port` is outside 1..=65535.
    PortOutOfRange(i64),
    /// `ports[i].protocol` is not TCP, UDP or SCTP.
    UnknownProtocol(String),
    /// `endpoints[i].addresses` is absent or empty.
    NoAddress,
    /// `endpoints[i].addresses[0]` is not a valid IP ([rule 5](crate::rules)).
    InvalidAddress(String),
    /// The trigger-time annotation is not an RFC 3339 time.
    InvalidTriggerTime(String),
}

impl WarningKind {
    /// Every [`reason`](Self::reason), for metrics that start at zero.
    pub const REASONS: &'static [&'static str] = &[
        "port_without_name",
        "port_without_number",
        "port_out_of_range",
        "unknown_protocol",
        "no_address",
        "invalid_address",
        "invalid_trigger_time",
    ];

    /// A short label for metrics, e.g. `invalid_address`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::PortWithoutName => "port_without_name",
            Self::PortWithoutNumber => "port_without_number",
            Self::PortOutOfRange(_) => "port_out_of_range",
            Self::UnknownProtocol(_) => "unknown_protocol",
            Self::NoAddress => "no_address",
            Self::InvalidAddress(_) => "invalid_address",
            Self::InvalidTriggerTime(_) => "invalid_trigger_time",
        }
    }
}

/// A skipped part of a slice, naming the slice and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceWarning {
    /// The slice.
    pub slice: SliceName,
    /// The index in `ports` or `endpoints` (0 for the annotation).
    pub index: usize,
    /// What was wrong.
    pub kind: WarningKind,
}

impl fmt::Display for SliceWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, i) = (&self.slice, self.index);
        match &self.kind {
            WarningKind::PortWithoutName => write!(f, "endpoint slice {s}: ports[{i}].name is missing; port ignored"),
            WarningKind::PortWithoutNumber => {
                write!(f, "endpoint slice {s}: ports[{i}].port is missing or 0; port ignored")
            }
            WarningKind::PortOutOfRange(p) => {
                write!(
                    f,
                    "endpoint slice {s}: ports[{i}].port {p} is outside 1..65535; port ignored"
                )
            }
            WarningKind::UnknownProtocol(p) => {
                write!(
                    f,
                    "endpoint slice {s}: ports[{i}].protocol {p:?} is not TCP, UDP or SCTP; port ignored"
                )
            }
            WarningKind::NoAddress => write!(
                f,
                "endpoint slice {s}: endpoints[{i}].addresses is empty; endpoint ignored"
            ),
            WarningKind::InvalidAddress(a) => {
                write!(
                    f,
                    "endpoint slice {s}: endpoints[{i}].addresses[0] {a:?} is not a valid IP address; endpoint ignored"
                )
            }
            WarningKind::InvalidTriggerTime(t) => write!(
                f,
                "endpoint slice {s}: annotation {TRIGGER_TIME_ANNOTATION} {t:?} is not an RFC 3339 time; ignored"
            ),
        }
    }
}

/// An endpoint's fields as decoded, before normalization. `None` stands for
/// an absent field or a JSON `null` alike.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEndpoint<'a> {
    /// `addresses[0]`, or `None` when the list is absent or empty.
    pub first_address: Option<&'a str>,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
    /// `nodeName`.
    pub node_name: Option<&'a str>,
    /// `deprecatedTopology["kubernetes.io/hostname"]`.
    pub topology_hostname: Option<&'a str>,
    /// `hostname` (a [fact](crate::EndpointFacts)).
    pub hostname: Option<&'a str>,
    /// `zone` (a fact).
    pub zone: Option<&'a str>,
    /// `targetRef` (a fact).
    pub target_ref: Option<RawTargetRef<'a>>,
}

impl RawEndpoint<'_> {
    /// The facts it gives, or `None` when it gives none.
    fn facts(&self) -> Option<Arc<EndpointFacts>> {
        let text = |s: Option<&str>| s.map(Arc::from);
        let facts = EndpointFacts {
            hostname: text(self.hostname),
            node_name: text(self.node_name),
            zone: text(self.zone),
            target_ref: self.target_ref.map(TargetRef::from),
        };
        (!facts.is_empty()).then(|| Arc::new(facts))
    }
}

/// Builds one [`EndpointSlice`] from the fields of an API object, however
/// they were decoded, applying the [slice rules](crate::rules) in one
/// place: [`new`](Self::new) checks the metadata, [`port`](Self::port) and
/// [`endpoint`](Self::endpoint) add the parts (skipping what cannot be
/// used, with a [`SliceWarning`] naming the field), [`finish`](Self::finish)
/// hands back the slice and the warnings.
///
/// ```
/// use slice_model::{Interner, RawEndpoint, SliceBuilder, WarningKind};
///
/// let mut interner = Interner::new();
/// let mut b = SliceBuilder::new(&mut interner, Some("shop"), Some("web-x1"), Some("web"), Some("IPv4"))
///     .expect("named, labelled, not FQDN");
/// b.port(0, Some("http"), None, Some(8080)); // no protocol: TCP (rule 3)
/// let ep = |address| RawEndpoint {
///     first_address: Some(address),
///     node_name: Some("node-1"),
///     ..RawEndpoint::default()
/// };
/// b.endpoint(0, ep("10.244.1.5"), ["zone-a"]);
/// b.endpoint(1, ep("10.244.1.300"), []); // not an IP (rule 5): skipped
/// let (slice, warnings) = b.finish(None);
/// assert_eq!(slice.content.endpoints.len(), 1);
/// assert!(matches!(warnings[0].kind, WarningKind::InvalidAddress(_)));
/// assert_eq!(
///     warnings[0].to_string(),
///     "endpoint slice shop/web-x1: endpoints[1].addresses[0] \"10.244.1.300\" is not a valid IP address; endpoint ignored"
/// );
///
/// // Whole-object problems reject the slice.
/// assert!(SliceBuilder::new(&mut interner, Some("shop"), Some("web-x2"), None, None).is_err());
/// ```
#[derive(Debug)]
pub struct SliceBuilder<'i> {
    interner: &'i mut Interner,
    name: SliceName,
    service: Arc<str>,
    content: SliceContent,
    warnings: Vec<SliceWarning>,
    keep_facts: bool,
}

impl<'i> SliceBuilder<'i> {
    /// Starts a slice, or rejects it for its metadata: `namespace`, `name`
    /// and `service_label` must be non-empty, `address_type` must not be
    /// `FQDN`. The names that repeat across slices (namespaces, port
    /// names, node names too long to hold inline) and zone sets are shared
    /// through `interner`.
    pub fn new(
        interner: &'i mut Interner,
        namespace: Option<&str>,
        name: Option<&str>,
        service_label: Option<&str>,
        address_type: Option<&str>,
    ) -> Result<Self, SliceError> {
        let (namespace, name) = checked_name(namespace, name)?;
        // Namespaces are few and shared; object names are many, and a
        // lookup in a set of every slice and service name cost more (in
        // cache misses) than the allocation it saved.
        let name = SliceName::new(interner.str(namespace), Arc::<str>::from(name));
        if address_type == Some("FQDN") {
            return Err(SliceError::Fqdn(name));
        }
        let service = match service_label {
            Some(s) if !s.is_empty() => Arc::from(s),
            _ => return Err(SliceError::MissingServiceName(name)),
        };
        Ok(Self {
            interner,
            name,
            service,
            content: SliceContent::default(),
            warnings: Vec::new(),
            keep_facts: false,
        })
    }

    /// Keeps each endpoint's [facts](crate::EndpointFacts) (hostname, node
    /// name, zone, target reference) and each port's `appProtocol`, which a
    /// proxy does not read and by default are dropped.
    #[must_use]
    pub fn keeping_facts(mut self) -> Self {
        self.keep_facts = true;
        self
    }

    /// Reserves room for the ports and endpoints about to be added.
    pub fn reserve(&mut self, ports: usize, endpoints: usize) {
        self.content.ports.reserve_exact(ports);
        self.content.endpoints.reserve_exact(endpoints);
    }

    /// The slice being built.
    pub fn name(&self) -> &SliceName {
        &self.name
    }

    fn warn(&mut self, index: usize, kind: WarningKind) {
        self.warnings.push(SliceWarning {
            slice: self.name.clone(),
            index,
            kind,
        });
    }

    /// Adds `ports[index]`. A port without a name or a usable number, or with
    /// an unknown protocol, is skipped with a warning; a missing protocol is
    /// TCP ([rule 3](crate::rules)).
    pub fn port(&mut self, index: usize, name: Option<&str>, protocol: Option<&str>, port: Option<i64>) {
        self.port_with_app_protocol(index, name, protocol, port, None);
    }

    /// [`port`](Self::port) with the port's `appProtocol`, kept when the
    /// builder [keeps facts](Self::keeping_facts).
    pub fn port_with_app_protocol(
        &mut self,
        index: usize,
        name: Option<&str>,
        protocol: Option<&str>,
        port: Option<i64>,
        app_protocol: Option<&str>,
    ) {
        let Some(name) = name else {
            return self.warn(index, WarningKind::PortWithoutName);
        };
        let number = match port {
            None | Some(0) => return self.warn(index, WarningKind::PortWithoutNumber),
            Some(p) => match u16::try_from(p).ok().and_then(NonZeroU16::new) {
                Some(n) => n,
                None => return self.warn(index, WarningKind::PortOutOfRange(p)),
            },
        };
        let protocol = match protocol {
            None => Protocol::Tcp,
            Some(p) => match p.parse() {
                Ok(p) => p,
                Err(_) => return self.warn(index, WarningKind::UnknownProtocol(p.to_owned())),
            },
        };
        let name = self.interner.str(name);
        let app_protocol = app_protocol.filter(|_| self.keep_facts).map(|a| self.interner.str(a));
        self.content.ports.push(SlicePort {
            name,
            protocol,
            port: number,
            app_protocol,
        });
    }

    /// Adds `endpoints[index]`. An endpoint without a valid first address is
    /// skipped with a warning. `zones` are `hints.forZones[].name`.
    pub fn endpoint<'z>(&mut self, index: usize, raw: RawEndpoint<'_>, zones: impl IntoIterator<Item = &'z str>) {
        self.endpoint_with_node_hints(index, raw, zones, []);
    }

    /// [`endpoint`](Self::endpoint) with the endpoint's node hints,
    /// `hints.forNodes[].name`.
    pub fn endpoint_with_node_hints<'z, 'n>(
        &mut self,
        index: usize,
        raw: RawEndpoint<'_>,
        zones: impl IntoIterator<Item = &'z str>,
        nodes: impl IntoIterator<Item = &'n str>,
    ) {
        let Some(text) = raw.first_address else {
            return self.warn(index, WarningKind::NoAddress);
        };
        let Some(addr) = parse_endpoint_ip(text) else {
            return self.warn(index, WarningKind::InvalidAddress(text.to_owned()));
        };
        let zone_hints = self.interner.zones(zones);
        self.content.endpoints.push(SliceEndpoint {
            addr,
            conditions: Conditions::from_api(raw.ready, raw.serving, raw.terminating),
            // Rule 2: `nodeName` when present, even empty; else the
            // topology hostname. Resolved here, so a change to the
            // fallback alone is no change.
            node: raw.node_name.or(raw.topology_hostname).map(|n| self.interner.node(n)),
            zone_hints,
            node_hints: NodeHints::new(nodes),
            facts: if self.keep_facts { raw.facts() } else { None },
        });
    }

    /// Finishes the slice with its trigger-time annotation, returning it with
    /// the warnings for what was skipped.
    #[must_use = "the slice and its warnings are the result of the build"]
    pub fn finish(mut self, trigger_time: Option<&str>) -> (EndpointSlice, Vec<SliceWarning>) {
        let trigger_time = trigger_time.and_then(|t| {
            let parsed = parse_rfc3339(t);
            if parsed.is_none() {
                self.warn(0, WarningKind::InvalidTriggerTime(t.to_owned()));
            }
            parsed
        });
        // A canonical order makes reordering a slice no change, and hands the
        // merge runs that are already sorted.
        self.content.normalize();
        let slice = EndpointSlice {
            name: self.name,
            service: self.service,
            content: self.content,
            trigger_time,
        };
        (slice, self.warnings)
    }
}

/// The name of a slice for a DELETED event, which needs only that ([rule 6](crate::rules):
/// a DELETED slice is removed by namespace and name, whatever its labels).
/// An FQDN slice is ignored here too ([rule 4](crate::rules): entirely, deletes included).
pub fn deleted_slice_name(
    namespace: Option<&str>,
    name: Option<&str>,
    address_type: Option<&str>,
) -> Result<SliceName, SliceError> {
    let name = slice_name(namespace, name)?;
    if address_type == Some("FQDN") {
        return Err(SliceError::Fqdn(name));
    }
    Ok(name)
}

/// A slice's namespace and name, both required and not empty.
pub fn slice_name(namespace: Option<&str>, name: Option<&str>) -> Result<SliceName, SliceError> {
    checked_name(namespace, name).map(|(ns, n)| SliceName::new(ns, n))
}

fn checked_name<'a>(namespace: Option<&'a str>, name: Option<&'a str>) -> Result<(&'a str, &'a str), SliceError> {
    match (namespace, name) {
        (Some(ns), Some(n)) if !ns.is_empty() && !n.is_empty() => Ok((ns, n)),
        (ns, n) => Err(SliceError::MissingName {
            namespace: ns.unwrap_or_default().to_owned(),
            name: n.unwrap_or_default().to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(i: &mut Interner) -> SliceBuilder<'_> {
        SliceBuilder::new(i, Some("ns"), Some("web-abc"), Some("web"), Some("IPv4")).unwrap()
    }

    fn raw(addr: &str) -> RawEndpoint<'_> {
        RawEndpoint {
            first_address: Some(addr),
            ..RawEndpoint::default()
        }
    }

    #[test]
    fn rejects_missing_metadata_label_and_fqdn() {
        assert!(matches!(
            SliceBuilder::new(&mut Interner::new(), Some(""), Some("x"), Some("svc"), None),
            Err(SliceError::MissingName { .. })
        ));
        assert!(matches!(
            SliceBuilder::new(&mut Interner::new(), Some("ns"), None, Some("svc"), None),
            Err(SliceError::MissingName { .. })
        ));
        let e = SliceBuilder::new(&mut Interner::new(), Some("ns"), Some("x"), Some(""), None).unwrap_err();
        assert_eq!(e, SliceError::MissingServiceName(SliceName::new("ns", "x")));
        assert!(e.to_string().contains("ns/x") && e.to_string().contains(SERVICE_NAME_LABEL));
        assert!(matches!(
            SliceBuilder::new(&mut Interner::new(), Some("ns"), Some("x"), None, None),
            Err(SliceError::MissingServiceName(_))
        ));
        assert!(matches!(
            SliceBuilder::new(&mut Interner::new(), Some("ns"), Some("x"), Some("svc"), Some("FQDN")),
            Err(SliceError::Fqdn(_))
        ));
        // Deletes need only the name, but FQDN slices are ignored there too.
        assert_eq!(
            deleted_slice_name(Some("ns"), Some("x"), Some("IPv4")),
            Ok(SliceName::new("ns", "x"))
        );
        assert_eq!(
            deleted_slice_name(Some("ns"), Some("x"), None),
            Ok(SliceName::new("ns", "x"))
        );
        assert!(matches!(
            deleted_slice_name(Some("ns"), Some("x"), Some("FQDN")),
            Err(SliceError::Fqdn(_))
        ));
        assert!(matches!(
            deleted_slice_name(None, Some("x"), None),
            Err(SliceError::MissingName { .. })
        ));
    }

    #[test]
    fn ports_default_to_tcp_and_skip_unusable_ones_in_any_order() {
        let mut i = Interner::new();
        let mut b = builder(&mut i);
        b.port(0, Some("a"), None, None);
        b.port(1, Some(""), None, Some(80));
        b.port(2, None, Some("UDP"), Some(53));
        b.port(3, Some("b"), Some("UDP"), Some(0));
        b.port(4, Some("c"), Some("SCTP"), Some(70000));
        b.port(5, Some("d"), Some("QUIC"), Some(1));
        b.port(6, Some("dns"), Some("UDP"), Some(53));
        let (s, w) = b.finish(None);
        let ports: Vec<_> = s
            .content
            .ports
            .iter()
            .map(|p| (&*p.name, p.protocol, p.port.get()))
            .collect();
        assert_eq!(ports, [("", Protocol::Tcp, 80), ("dns", Protocol::Udp, 53)]);
        let kinds: Vec<_> = w.iter().map(|w| (w.index, w.kind.clone())).collect();
        assert_eq!(
            kinds,
            [
                (0, WarningKind::PortWithoutNumber),
                (2, WarningKind::PortWithoutName),
                (3, WarningKind::PortWithoutNumber),
                (4, WarningKind::PortOutOfRange(70000)),
                (5, WarningKind::UnknownProtocol("QUIC".into())),
            ]
        );
        assert!(w[3].to_string().contains("ns/web-abc: ports[4].port 70000"));
    }

    #[test]
    fn addresses_are_validated_and_canonical() {
        let mut i = Interner::new();
        let mut b = builder(&mut i);
        for (i, a) in [
            "10.0.0.1",
            "010.0.0.1",
            "FD00:0:0::2",
            "fe80::1%eth0",
            "::ffff:1.2.3.4",
            "db.example",
            "1.2.3.4 ",
        ]
        .into_iter()
        .enumerate()
        {
            b.endpoint(i, raw(a), []);
        }
        b.endpoint(7, RawEndpoint::default(), []);
        let (s, w) = b.finish(None);
        let addrs: Vec<String> = s.content.endpoints.iter().map(|e| e.addr.to_string()).collect();
        assert_eq!(addrs, ["10.0.0.1", "::ffff:1.2.3.4", "fd00::2"], "sorted by address");
        assert!(s.content.endpoints[1].addr.is_ipv6());
        let bad: Vec<_> = w.iter().map(|w| w.index).collect();
        assert_eq!(bad, [1, 3, 5, 6, 7]);
        assert!(w[0].to_string().contains("endpoints[1].addresses[0] \"010.0.0.1\""));
        assert_eq!(w[4].kind, WarningKind::NoAddress);
    }

    /// Facts (hostname, node name, zone, target reference, appProtocol) are
    /// kept only when asked: a proxy's slices are as before.
    #[test]
    fn facts_are_kept_only_when_asked() {
        let raw = RawEndpoint {
            first_address: Some("10.0.0.1"),
            node_name: Some("node-1"),
            hostname: Some("web-0"),
            zone: Some("zone-a"),
            target_ref: Some(RawTargetRef {
                kind: Some("Pod"),
                namespace: Some("ns"),
                name: Some("web-0"),
                uid: None,
            }),
            ..RawEndpoint::default()
        };
        let build = |keep: bool| {
            let mut i = Interner::new();
            let mut b = builder(&mut i);
            if keep {
                b = b.keeping_facts();
            }
            b.port_with_app_protocol(0, Some("grpc"), None, Some(50051), Some("kubernetes.io/h2c"));
            b.endpoint(0, raw, []);
            b.endpoint(
                1,
                RawEndpoint {
                    first_address: Some("10.0.0.2"),
                    ..RawEndpoint::default()
                },
                [],
            );
            b.finish(None).0
        };
        let proxy = build(false);
        assert!(proxy.content.endpoints.iter().all(|e| e.facts.is_none()));
        assert_eq!(proxy.content.ports[0].app_protocol, None);
        let kept = build(true);
        let facts = kept.content.endpoints[0].facts.as_deref().expect("kept");
        assert_eq!(facts.hostname.as_deref(), Some("web-0"));
        assert_eq!(facts.node_name.as_deref(), Some("node-1"));
        assert_eq!(facts.zone.as_deref(), Some("zone-a"));
        let target = facts.target_ref.as_ref().expect("target");
        assert_eq!(
            (&*target.kind, &*target.namespace, &*target.name, &*target.uid),
            ("Pod", "ns", "web-0", "")
        );
        assert_eq!(
            kept.content.endpoints[1].facts, None,
            "an endpoint that gives none keeps none"
        );
        assert_eq!(kept.content.ports[0].app_protocol.as_deref(), Some("kubernetes.io/h2c"));
        // The proxy's view of the two is the same.
        let strip = |mut c: SliceContent| {
            c.endpoints.iter_mut().for_each(|e| e.facts = None);
            c.ports.iter_mut().for_each(|p| p.app_protocol = None);
            c
        };
        assert_eq!(strip(kept.content), proxy.content);
    }

    #[test]
    fn endpoint_fields_are_kept() {
        let mut i = Interner::new();
        let mut b = builder(&mut i);
        let r = RawEndpoint {
            first_address: Some("10.0.0.1"),
            ready: Some(false),
            serving: None,
            terminating: Some(true),
            node_name: None,
            topology_hostname: Some("node-1"),
            ..RawEndpoint::default()
        };
        b.endpoint(0, r, ["zone-b", "zone-a"]);
        let (s, w) = b.finish(Some("2024-01-01T00:00:01Z"));
        assert!(w.is_empty());
        let e = &s.content.endpoints[0];
        assert_eq!(
            e.conditions,
            Conditions {
                ready: false,
                serving: false,
                terminating: true
            }
        );
        assert!(e.is_on_node("node-1"));
        assert_eq!(e.zone_hints, crate::ZoneHints::new(["zone-a", "zone-b"]));
        assert!(s.trigger_time.is_some());
        assert_eq!(s.service_name().to_string(), "ns/web");
    }

    #[test]
    fn the_node_is_node_name_when_present_even_empty_else_the_topology_hostname() {
        let mut i = Interner::new();
        let mut b = builder(&mut i);
        let long = "gke-production-default-pool-1a2b3c4d-x9z8";
        for (n, (node_name, topology_hostname)) in [
            (Some("node-1"), None),
            (None, Some("node-1")),
            (Some("node-2"), Some("node-1")),
            (Some(""), Some("node-1")),
            (None, None),
            (Some(long), None),
        ]
        .into_iter()
        .enumerate()
        {
            let raw = RawEndpoint {
                first_address: Some(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"][n]),
                node_name,
                topology_hostname,
                ..RawEndpoint::default()
            };
            b.endpoint(n, raw, []);
        }
        let (s, _) = b.finish(None);
        let hosts: Vec<Option<&str>> = s.content.endpoints.iter().map(SliceEndpoint::host).collect();
        assert_eq!(
            hosts,
            [
                Some("node-1"),
                Some("node-1"),
                Some("node-2"),
                Some(""),
                None,
                Some(long)
            ]
        );
    }

    #[test]
    fn bad_trigger_time_is_a_warning() {
        let mut i = Interner::new();
        let (s, w) = builder(&mut i).finish(Some("yesterday"));
        assert!(s.trigger_time.is_none());
        assert_eq!(w[0].kind, WarningKind::InvalidTriggerTime("yesterday".into()));
    }
}
