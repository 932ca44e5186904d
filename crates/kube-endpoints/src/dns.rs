//! The records the Kubernetes DNS-based service discovery specification
//! (schema 1.1.0) defines for a service, from its [`ServiceEndpoints`]:
//!
//! * a service with cluster IPs: `A`/`AAAA` `<svc>.<ns>.svc.<domain>.` for
//!   each cluster IP, `SRV` `_<port>._<proto>.<svc>.<ns>.svc.<domain>.` for
//!   each named port, and a `PTR` for each cluster IP;
//! * a headless service: `A`/`AAAA` `<svc>.<ns>.svc.<domain>.` for each
//!   ready endpoint, `<hostname>.<svc>.<ns>.svc.<domain>.` for each ready
//!   endpoint by its hostname, an `SRV` per ready endpoint and named port
//!   (the endpoint's port) and a `PTR` per ready endpoint;
//! * an ExternalName service: a `CNAME` to its external name.
//!
//! _Ready_ is the endpoint's `ready` condition, or any endpoint when the
//! Service sets `publishNotReadyAddresses`. An endpoint without a
//! `hostname` is named by its address with dashes (`10-3-0-3`,
//! `fd00--1`), the system-assigned identifier the specification allows.
//! `SRV` priority and weight, which the specification leaves open, are 0
//! and 100. Names are absolute (a trailing dot) and lower-case.
//!
//! [`Resolver`] answers a query by its name and type from a reader, every
//! form above and `dns-version.<domain>.` (the schema version's `TXT`):
//! what a DNS server built on this crate serves. At the edges:
//!
//! * the cluster domain's apex (`cluster.local.`), `svc.<domain>.`, a
//!   namespace that has a service (`<ns>.svc.<domain>.`) and the parents of
//!   a record's name (`_tcp.<svc>.<ns>.svc.<domain>.`) exist without
//!   records of their own: [`Answer::NoData`] (`NOERROR`, no answer), not
//!   `NXDOMAIN`, as DNS requires of a name with names below it. A
//!   namespace with no service is [`Answer::NxDomain`]. SOA and NS records
//!   of the zone are the server's to add;
//! * an ExternalName service's name answers a query of any type (`A`
//!   included) with its `CNAME`: the client's resolver follows it outside
//!   the cluster domain;
//! * negative answers carry no TTL: a server caches them for the SOA's
//!   minimum, which it sets (CoreDNS uses the same TTL as positive
//!   answers: [`Resolver::ttl`]);
//! * names outside the cluster domain and the reverse zones are
//!   [`Answer::NotOurs`]: for the next server.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use slice_model::{Protocol, ServiceName, ServiceType};

use crate::{Reader, ServiceEndpoints};

/// The schema version this crate's records follow.
pub const SCHEMA_VERSION: &str = "1.1.0";

/// The TTL [`Resolver`] answers with unless told otherwise: 5 s, the
/// default of CoreDNS's `kubernetes` plugin (the specification leaves the
/// value to the server).
pub const DEFAULT_TTL: Duration = Duration::from_secs(5);

/// One resource record: owner name and data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    /// The owner name, absolute.
    pub name: String,
    /// Type and data.
    pub data: RecordData,
}

/// A record's type and data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordData {
    /// `A` or `AAAA`, by the address's family.
    Address(IpAddr),
    /// `SRV`: where a named port is served.
    Srv {
        /// Priority (0).
        priority: u16,
        /// Weight (100).
        weight: u16,
        /// The port number.
        port: u16,
        /// The host serving it, absolute.
        target: String,
    },
    /// `CNAME`: an ExternalName service's name.
    Cname(String),
    /// `PTR`: the name of an address.
    Ptr(String),
    /// `TXT`: the schema version (`dns-version.<domain>.`).
    Txt(String),
}

/// A query's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryType {
    /// IPv4 addresses.
    A,
    /// IPv6 addresses.
    Aaaa,
    /// Named ports.
    Srv,
    /// Names of addresses.
    Ptr,
    /// Aliases.
    Cname,
    /// Text: the schema version.
    Txt,
    /// Every record of the name.
    Any,
}

impl QueryType {
    /// Whether `data` answers a query of this type. An alias answers every
    /// type, as a DNS server answers a name that is an alias.
    fn wants(self, data: &RecordData) -> bool {
        matches!(
            (self, data),
            (Self::Any, _)
                | (_, RecordData::Cname(_))
                | (Self::A, RecordData::Address(IpAddr::V4(_)))
                | (Self::Aaaa, RecordData::Address(IpAddr::V6(_)))
                | (Self::Srv, RecordData::Srv { .. })
                | (Self::Ptr, RecordData::Ptr(_))
                | (Self::Txt, RecordData::Txt(_))
        )
    }
}

/// What a query finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The records of the name and type, each to be cached for `ttl`.
    Records {
        /// How long they may be cached.
        ttl: Duration,
        /// The records (at least one).
        records: Vec<Record>,
    },
    /// The name exists, with no record of this type (`NOERROR`, no
    /// answer).
    NoData,
    /// No such name in the cluster domain or the reverse zones
    /// (`NXDOMAIN`).
    NxDomain,
    /// Not a name of the cluster domain or of the reverse zones: for
    /// another server.
    NotOurs,
}

/// Answers queries by name and type from a reader's services.
#[derive(Clone)]
pub struct Resolver {
    reader: Reader,
    domain: String,
    ttl: Duration,
}

impl Resolver {
    /// Answers for `cluster_domain` (e.g. `cluster.local`) and the reverse
    /// zones, from `reader`.
    pub fn new(reader: Reader, cluster_domain: &str) -> Self {
        Self {
            reader,
            domain: cluster_domain.trim_end_matches('.').to_lowercase(),
            ttl: DEFAULT_TTL,
        }
    }

    /// Answers with this TTL instead of [`DEFAULT_TTL`].
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The TTL of its answers (a server's SOA minimum, for negative
    /// answers, is usually the same).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The records of `name` (absolute or not, any case) of type `query`.
    pub fn resolve(&self, name: &str, query: QueryType) -> Answer {
        let name = format!("{}.", name.trim_end_matches('.').to_lowercase());
        let owned = match self.owned(&name) {
            Some(records) => records,
            None => return Answer::NotOurs,
        };
        // A name with names below it exists, records of its own or not.
        let below = format!(".{name}");
        let has_names_below = owned.iter().any(|r| r.name.ends_with(&below)) || self.is_branch(&name);
        if has_names_below && !owned.iter().any(|r| r.name == name) {
            return Answer::NoData;
        }
        let of_name: Vec<Record> = owned.into_iter().filter(|r| r.name == name).collect();
        if of_name.is_empty() {
            return Answer::NxDomain;
        }
        let records: Vec<Record> = of_name.into_iter().filter(|r| query.wants(&r.data)).collect();
        if records.is_empty() {
            Answer::NoData
        } else {
            Answer::Records { ttl: self.ttl, records }
        }
    }

    /// Whether `name` (absolute, lower-case) is the cluster domain's apex,
    /// `svc.` under it, or a namespace with a service: names with names
    /// below them.
    fn is_branch(&self, name: &str) -> bool {
        let apex = format!("{}.", self.domain);
        let Some(relative) = name.strip_suffix(&apex) else {
            return false;
        };
        match relative.strip_suffix("svc.") {
            _ if relative.is_empty() => true,
            Some("") => true,
            Some(namespace) => {
                let namespace = namespace.trim_end_matches('.');
                !namespace.contains('.') && self.reader.services().iter().any(|s| &*s.namespace == namespace)
            }
            None => false,
        }
    }

    /// The records that may hold `name` (absolute, lower-case): the
    /// service it names, the services at the address a reverse name
    /// names, or the schema version; `None` for a name outside the zones.
    fn owned(&self, name: &str) -> Option<Vec<Record>> {
        if let Some(ip) = parse_reverse(name) {
            let services = self.reader.services_at(ip);
            let views = services.iter().filter_map(|s| self.reader.get(s));
            return Some(views.flat_map(|v| records(&v, &self.domain)).collect());
        }
        if name.ends_with(".in-addr.arpa.") || name.ends_with(".ip6.arpa.") {
            return Some(Vec::new());
        }
        if name == format!("{}.", self.domain) {
            return Some(Vec::new());
        }
        let suffix = format!(".{}.", self.domain);
        let relative = name.strip_suffix(&suffix)?;
        if relative == "dns-version" {
            return Some(vec![Record {
                name: name.to_owned(),
                data: RecordData::Txt(SCHEMA_VERSION.into()),
            }]);
        }
        // `[hostname.|_port._proto.]service.namespace.svc`
        let labels: Vec<&str> = relative.split('.').collect();
        let [.., service, namespace, "svc"] = labels.as_slice() else {
            return Some(Vec::new());
        };
        let view = self.reader.get(&ServiceName::new(*namespace, *service));
        Some(view.map(|v| records(&v, &self.domain)).unwrap_or_default())
    }
}

/// The address a reverse name (`d.c.b.a.in-addr.arpa.`, or the 32 nibbles
/// of `ip6.arpa.`) names; `None` for any other name.
fn parse_reverse(name: &str) -> Option<IpAddr> {
    if let Some(rest) = name.strip_suffix(".in-addr.arpa.") {
        let octets: Vec<u8> = rest.split('.').map(str::parse).collect::<Result<_, _>>().ok()?;
        let [d, c, b, a] = octets.as_slice() else { return None };
        return Some(IpAddr::V4(Ipv4Addr::new(*a, *b, *c, *d)));
    }
    let rest = name.strip_suffix(".ip6.arpa.")?;
    let nibbles: Vec<u8> = rest
        .split('.')
        .map(|n| u8::from_str_radix(n, 16).ok().filter(|_| n.len() == 1))
        .collect::<Option<_>>()?;
    if nibbles.len() != 32 {
        return None;
    }
    let value = nibbles.iter().rev().fold(0u128, |acc, n| (acc << 4) | u128::from(*n));
    Some(IpAddr::V6(Ipv6Addr::from(value)))
}

/// The service's name in the cluster domain `cluster_domain` (e.g.
/// `cluster.local`).
pub fn service_name(view: &ServiceEndpoints, cluster_domain: &str) -> String {
    let name = view.name();
    format!(
        "{}.{}.svc.{}.",
        name.name,
        name.namespace,
        cluster_domain.trim_end_matches('.')
    )
    .to_lowercase()
}

/// An address's reverse-lookup name (`in-addr.arpa.` or `ip6.arpa.`).
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
        }
        IpAddr::V6(v6) => {
            let mut out = String::new();
            for byte in v6.octets().iter().rev() {
                out.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            out + "ip6.arpa."
        }
    }
}

/// The label of an endpoint without a hostname: its address, dashed.
fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The `SRV` record of named port `name`/`protocol` of service `own`:
/// `port` on `target`.
fn srv(own: &str, name: &str, protocol: Protocol, port: u16, target: String) -> Record {
    Record {
        name: format!("_{name}._{protocol}.{own}").to_lowercase(),
        data: RecordData::Srv {
            priority: 0,
            weight: 100,
            port,
            target,
        },
    }
}

/// Every record the specification defines for the service.
pub fn records(view: &ServiceEndpoints, cluster_domain: &str) -> Vec<Record> {
    let svc = view.service();
    let own = service_name(view, cluster_domain);
    let mut out = Vec::new();
    let record = |name: &str, data| Record {
        name: name.to_owned(),
        data,
    };
    if svc.service_type == ServiceType::ExternalName {
        if let Some(target) = &svc.external_name {
            let target = format!("{}.", target.trim_end_matches('.')).to_lowercase();
            out.push(record(&own, RecordData::Cname(target)));
        }
        return out;
    }
    if !svc.headless {
        for ip in &svc.cluster_ips {
            out.push(record(&own, RecordData::Address(*ip)));
            out.push(record(&reverse_name(*ip), RecordData::Ptr(own.clone())));
        }
        for port in svc.ports.iter().filter(|p| !p.name.is_empty()) {
            out.push(srv(&own, &port.name, port.protocol, port.port.get(), own.clone()));
        }
    } else {
        let publish_all = svc.publish_not_ready_addresses;
        let mut named = Vec::new();
        for port in view.ports() {
            for e in port.endpoints.iter().filter(|e| publish_all || e.ready) {
                let hostname = view
                    .facts(e.addr.ip())
                    .and_then(|f| f.hostname.as_deref())
                    .map_or_else(|| dashed(e.addr.ip()), str::to_lowercase);
                let host = format!("{hostname}.{own}");
                named.push((e.addr.ip(), host.clone()));
                if !port.name.is_empty() {
                    out.push(srv(&own, &port.name, port.protocol, e.addr.port(), host));
                }
            }
        }
        named.sort();
        named.dedup();
        for (ip, host) in named {
            out.push(record(&own, RecordData::Address(ip)));
            out.push(record(&host, RecordData::Address(ip)));
            out.push(record(&reverse_name(ip), RecordData::Ptr(host)));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;
    use std::sync::Arc;

    use slice_model::{
        Conditions, EndpointFacts, EndpointSlice, ServiceInfo, ServiceName, ServicePort, ServiceType, SliceEndpoint,
    };

    use super::*;

    fn info(ns: &str, name: &str, cluster_ips: &[&str], ports: &[(&str, Protocol, u16)]) -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new(ns, name));
        s.cluster_ips = cluster_ips.iter().map(|ip| ip.parse().expect("test IP")).collect();
        s.headless = cluster_ips.is_empty();
        s.ports = ports
            .iter()
            .map(|(n, protocol, port)| ServicePort {
                name: (*n).into(),
                protocol: *protocol,
                port: NonZeroU16::new(*port).expect("test port"),
                node_port: None,
                app_protocol: None,
            })
            .collect();
        s
    }

    /// A view of `svc` with one slice: port `port` (named as the service's
    /// first port) and endpoints `(ip, ready, hostname)`.
    fn view(svc: ServiceInfo, port: u16, endpoints: &[(&str, bool, Option<&str>)]) -> ServiceEndpoints {
        let (name, protocol) = svc
            .ports
            .first()
            .map_or(("", Protocol::Tcp), |p| (&*p.name, p.protocol));
        let mut slice = EndpointSlice::new(&svc.name.namespace, "s", &svc.name.name)
            .expect("named")
            .with_port(name, protocol, port);
        for (ip, ready, hostname) in endpoints {
            let mut e = SliceEndpoint::new(ip.parse().expect("test IP")).with_conditions(Conditions::from_api(
                Some(*ready),
                None,
                None,
            ));
            if let Some(h) = hostname {
                e = e.with_facts(EndpointFacts {
                    hostname: Some((*h).into()),
                    ..EndpointFacts::default()
                });
            }
            slice = slice.with_endpoint(e);
        }
        ServiceEndpoints::new(Arc::new(svc), Arc::new([Arc::new(slice.content)]), Arc::default())
    }

    fn text(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| match &r.data {
                RecordData::Address(IpAddr::V4(ip)) => format!("{} A {ip}", r.name),
                RecordData::Address(IpAddr::V6(ip)) => format!("{} AAAA {ip}", r.name),
                RecordData::Srv { port, target, .. } => format!("{} SRV {port} {target}", r.name),
                RecordData::Cname(t) => format!("{} CNAME {t}", r.name),
                RecordData::Ptr(t) => format!("{} PTR {t}", r.name),
                RecordData::Txt(t) => format!("{} TXT {t}", r.name),
            })
            .collect()
    }

    #[test]
    fn reverse_names_read_back_as_their_addresses() {
        for ip in ["10.3.0.1", "fd00::1", "2001:db8:85a3::8a2e:370:7334"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(parse_reverse(&reverse_name(ip)), Some(ip));
        }
        for other in [
            "1.0.0.in-addr.arpa.",
            "x.1.0.0.10.in-addr.arpa.",
            "1.2.ip6.arpa.",
            "web.shop.svc.cluster.local.",
        ] {
            assert_eq!(parse_reverse(other), None, "{other}");
        }
    }

    /// The specification's examples, one table row each: the question, and
    /// the answers the records give it.
    #[test]
    fn the_specifications_examples() {
        let kubernetes = view(
            info("default", "kubernetes", &["10.3.0.1"], &[("https", Protocol::Tcp, 443)]),
            6443,
            &[("192.168.0.10", true, None)],
        );
        let headless = view(
            info("default", "headless", &[], &[("https", Protocol::Tcp, 443)]),
            443,
            &[
                ("10.3.0.1", true, None),
                ("10.3.0.2", true, None),
                ("10.3.0.3", true, None),
                ("10.3.0.100", true, Some("my-pet")),
                ("10.3.0.200", false, Some("not-ready")),
            ],
        );
        let answers = |view: &ServiceEndpoints, question: &str| -> Vec<String> {
            let (name, kind) = question.rsplit_once(' ').expect("name and type");
            text(&records(view, "cluster.local"))
                .into_iter()
                .filter(|r| r.starts_with(&format!("{name} {kind} ")))
                .collect()
        };
        let table: &[(&ServiceEndpoints, &str, &[&str])] = &[
            (
                &kubernetes,
                "kubernetes.default.svc.cluster.local. A",
                &["kubernetes.default.svc.cluster.local. A 10.3.0.1"],
            ),
            (
                &kubernetes,
                "_https._tcp.kubernetes.default.svc.cluster.local. SRV",
                &["_https._tcp.kubernetes.default.svc.cluster.local. SRV 443 kubernetes.default.svc.cluster.local."],
            ),
            (
                &kubernetes,
                "1.0.3.10.in-addr.arpa. PTR",
                &["1.0.3.10.in-addr.arpa. PTR kubernetes.default.svc.cluster.local."],
            ),
            (
                &headless,
                "headless.default.svc.cluster.local. A",
                &[
                    "headless.default.svc.cluster.local. A 10.3.0.1",
                    "headless.default.svc.cluster.local. A 10.3.0.100",
                    "headless.default.svc.cluster.local. A 10.3.0.2",
                    "headless.default.svc.cluster.local. A 10.3.0.3",
                ],
            ),
            (
                &headless,
                "my-pet.headless.default.svc.cluster.local. A",
                &["my-pet.headless.default.svc.cluster.local. A 10.3.0.100"],
            ),
            (
                &headless,
                "_https._tcp.headless.default.svc.cluster.local. SRV",
                &[
                    "_https._tcp.headless.default.svc.cluster.local. SRV 443 10-3-0-1.headless.default.svc.cluster.local.",
                    "_https._tcp.headless.default.svc.cluster.local. SRV 443 10-3-0-2.headless.default.svc.cluster.local.",
                    "_https._tcp.headless.default.svc.cluster.local. SRV 443 10-3-0-3.headless.default.svc.cluster.local.",
                    "_https._tcp.headless.default.svc.cluster.local. SRV 443 my-pet.headless.default.svc.cluster.local.",
                ],
            ),
            (
                &headless,
                "100.0.3.10.in-addr.arpa. PTR",
                &["100.0.3.10.in-addr.arpa. PTR my-pet.headless.default.svc.cluster.local."],
            ),
            (&headless, "not-ready.headless.default.svc.cluster.local. A", &[]),
        ];
        for (view, question, expected) in table {
            let mut got = answers(view, question);
            got.sort();
            assert_eq!(got, *expected, "{question}");
        }
    }

    /// `publishNotReadyAddresses` publishes the endpoints that are not
    /// ready; unnamed ports have no SRV; IPv6 gets AAAA and ip6.arpa;
    /// an ExternalName service is a CNAME.
    #[test]
    fn not_ready_unnamed_ipv6_and_external_names() {
        let mut svc = info("db", "pg", &[], &[("", Protocol::Tcp, 5432)]);
        svc.publish_not_ready_addresses = true;
        let v = view(svc, 5432, &[("10.0.0.1", false, Some("pg-0"))]);
        assert_eq!(
            text(&records(&v, "cluster.local")),
            [
                "1.0.0.10.in-addr.arpa. PTR pg-0.pg.db.svc.cluster.local.",
                "pg-0.pg.db.svc.cluster.local. A 10.0.0.1",
                "pg.db.svc.cluster.local. A 10.0.0.1",
            ]
        );
        let v6 = view(info("ns", "v6", &["fd00::1"], &[("dns", Protocol::Udp, 53)]), 53, &[]);
        assert_eq!(
            text(&records(&v6, "cluster.local.")),
            [
                "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. PTR v6.ns.svc.cluster.local.",
                "_dns._udp.v6.ns.svc.cluster.local. SRV 53 v6.ns.svc.cluster.local.",
                "v6.ns.svc.cluster.local. AAAA fd00::1",
            ]
        );
        let mut ext = info("ns", "mail", &[], &[]);
        ext.service_type = ServiceType::ExternalName;
        ext.external_name = Some("Mail.Example.Test".into());
        assert_eq!(
            text(&records(&view(ext, 25, &[]), "cluster.local")),
            ["mail.ns.svc.cluster.local. CNAME mail.example.test."]
        );
    }
}
