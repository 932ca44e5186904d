//! Routes to cluster IPs inside a pod's namespace, over rtnetlink (the
//! messages are `netlink-packet-route`'s).
//!
//! proxyd's routes carry routing protocol number [`ROUTE_PROTO`], so the
//! ones it made are told apart from everyone else's: missing ones are
//! added, stale ones removed, and a restart finds and keeps its own (a
//! route is written with replace, so it is never duplicated).

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use slice_model::IpFamily;

use crate::netlink::{ROUTE, Socket};
use crate::netns::{Netns, NetnsError};

/// The routing protocol number marking proxyd's routes.
pub const ROUTE_PROTO: u8 = 201;

/// A route to a cluster IP through a pod's secondary interface, with that
/// interface's address as source (else the pod's packets, and the replies,
/// would use its primary network).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// The cluster IP (a /32 or /128 route).
    pub dest: IpAddr,
    /// The pod's interface on the service's network.
    pub dev: String,
    /// That interface's address.
    pub src: IpAddr,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} dev {} src {}", self.dest, self.dev, self.src)
    }
}

/// What a reconciliation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteChange {
    /// Routes added.
    pub added: usize,
    /// Routes removed.
    pub removed: usize,
}

/// Why routes could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The namespace could not be entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// The rtnetlink socket could not be made or used.
    #[error("rtnetlink: {0}")]
    Socket(#[source] io::Error),
    /// Listing the routes failed.
    #[error("listing routes: {0}")]
    List(#[source] io::Error),
    /// Some changes failed (the others were made): the first, and how many.
    #[error("route {route}: {source}{}", if *.failed > 1 { format!(" (and {} more)", .failed - 1) } else { String::new() })]
    Write {
        /// The first change that failed (`add …` or `del …`).
        route: String,
        /// Why.
        #[source]
        source: io::Error,
        /// How many failed.
        failed: usize,
    },
}

fn host_prefix(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

fn address_family(family: IpFamily) -> AddressFamily {
    match family {
        IpFamily::V4 => AddressFamily::Inet,
        IpFamily::V6 => AddressFamily::Inet6,
    }
}

fn ip(address: &RouteAddress) -> Option<IpAddr> {
    match address {
        RouteAddress::Inet(a) => Some((*a).into()),
        RouteAddress::Inet6(a) => Some((*a).into()),
        _ => None,
    }
}

/// An rtnetlink socket in one namespace.
struct Rtnetlink(Socket);

impl Rtnetlink {
    fn open(netns: &Netns) -> Result<Self, RouteError> {
        Socket::open_protocol(netns, ROUTE)
            .map(Self)
            .map_err(RouteError::Socket)
    }

    /// Sends one request and reads its replies until the ack (or the end
    /// of a dump), handing each route message to `each`.
    fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
        mut each: impl FnMut(RouteMessage),
    ) -> io::Result<()> {
        let seq = self.0.next_seq();
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = seq;
        let mut request = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        self.0.send(&bytes)?;
        loop {
            let mut data = self.0.recv_datagram()?;
            while data.len() >= 16 {
                let len = data
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, |b| u32::from_ne_bytes(b) as usize);
                let Some(one) = data.get(..len).filter(|_| len >= 16) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "rtnetlink reply: bad message length",
                    ));
                };
                data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(one)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink reply: {e}")))?;
                if reply.header.sequence_number != seq {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => each(route),
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(()),
                            Some(code) => Err(io::Error::from_raw_os_error(code.get().saturating_neg())),
                        };
                    }
                    _ => {}
                }
            }
        }
    }

    /// proxyd's routes of `family` in the main table.
    fn read(&mut self, family: IpFamily) -> Result<BTreeSet<Route>, RouteError> {
        let mut query = RouteMessage::default();
        query.header.address_family = address_family(family);
        let mut found = Vec::new();
        self.request(RouteNetlinkMessage::GetRoute(query), NLM_F_REQUEST | NLM_F_DUMP, |r| {
            let ours = u8::from(r.header.protocol) == ROUTE_PROTO && r.header.table == RouteHeader::RT_TABLE_MAIN;
            if ours {
                found.push(r);
            }
        })
        .map_err(RouteError::List)?;
        let mut routes = BTreeSet::new();
        for r in found {
            let (mut dest, mut oif, mut src) = (None, None, None);
            for a in &r.attributes {
                match a {
                    RouteAttribute::Destination(d) => dest = ip(d),
                    RouteAttribute::Oif(i) => oif = Some(*i),
                    RouteAttribute::PrefSource(s) => src = ip(s),
                    _ => {}
                }
            }
            let (Some(dest), Some(oif), Some(src)) = (dest, oif, src) else {
                continue;
            };
            let dev =
                rustix::net::netdevice::index_to_name(self.0.fd(), oif).map_err(|e| RouteError::List(e.into()))?;
            routes.insert(Route { dest, dev, src });
        }
        Ok(routes)
    }

    /// A message for `route` in the main table, marked as proxyd's.
    fn message(&self, route: &Route, with_source: bool) -> io::Result<RouteMessage> {
        let index = rustix::net::netdevice::name_to_index(self.0.fd(), &route.dev)
            .map_err(|e| io::Error::new(e.kind(), format!("interface {}: {e}", route.dev)))?;
        let mut m = RouteMessage::default();
        m.header.address_family = if route.dest.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        m.header.destination_prefix_length = host_prefix(&route.dest);
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::from(ROUTE_PROTO);
        m.header.kind = RouteType::Unicast;
        // A route through an interface without a gateway reaches only what
        // is on that link (as `ip route` defaults it).
        m.header.scope = RouteScope::Link;
        m.attributes.push(RouteAttribute::Destination(route.dest.into()));
        m.attributes.push(RouteAttribute::Oif(index));
        if with_source {
            m.attributes.push(RouteAttribute::PrefSource(route.src.into()));
        }
        Ok(m)
    }
}

/// proxyd's routes of `family` in the namespace.
pub fn read(netns: &Netns, family: IpFamily) -> Result<BTreeSet<Route>, RouteError> {
    Rtnetlink::open(netns)?.read(family)
}

/// Makes proxyd's routes of `family` in the namespace exactly `want`. Every
/// change is tried even when one fails. (The socket, made inside the
/// namespace, speaks for it from any thread; so do the interface lookups
/// made through it.)
pub fn reconcile(netns: &Netns, family: IpFamily, want: &BTreeSet<Route>) -> Result<RouteChange, RouteError> {
    {
        let mut rt = Rtnetlink::open(netns)?;
        let have = rt.read(family)?;
        let stale: Vec<&Route> = have.difference(want).collect();
        let missing: Vec<&Route> = want.difference(&have).collect();
        let mut failures: Vec<(String, io::Error)> = Vec::new();
        for r in &stale {
            let deleted = rt
                .message(r, false)
                .and_then(|m| rt.request(RouteNetlinkMessage::DelRoute(m), NLM_F_REQUEST | NLM_F_ACK, drop));
            if let Err(e) = deleted
                && e.raw_os_error() != Some(3)
            {
                // ESRCH: gone already.
                failures.push((format!("del {r}"), e));
            }
        }
        for r in &missing {
            let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
            let added = rt
                .message(r, true)
                .and_then(|m| rt.request(RouteNetlinkMessage::NewRoute(m), flags, drop));
            if let Err(e) = added {
                failures.push((format!("add {r}"), e));
            }
        }
        let failed = failures.len();
        match failures.into_iter().next() {
            Some((route, source)) => Err(RouteError::Write { route, source, failed }),
            None => Ok(RouteChange {
                added: missing.len(),
                removed: stale.len(),
            }),
        }
    }
}
