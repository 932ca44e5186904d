//! A `tower::discover::Discover` of one service port (the `tower`
//! feature): the endpoints kube-proxy would send new connections to,
//! followed as they change.
//!
//! Which endpoints is [`ServiceEndpoints::routing`](crate::ServiceEndpoints::routing)'s answer for
//! cluster-IP traffic: ready endpoints; a terminating endpoint gets no new
//! requests while a ready one exists, and serving terminating endpoints
//! take them when none is ready (kube-proxy's fallback); with
//! [`Config::node`](crate::Config::node) and
//! [`Config::zone`](crate::Config::zone) set, topology hints narrow the
//! choice as kube-proxy narrows it on that node.
//!
//! ```no_run
//! # async fn example(reader: kube_endpoints::Reader) {
//! use kube_endpoints::{Protocol, ServiceName};
//! use tower::discover::Change;
//! // Each endpoint becomes a service of yours: here, its address.
//! let endpoints = reader.discover(&ServiceName::new("shop", "web"), "http", Protocol::Tcp, |e| e.addr);
//! // `endpoints` is a Discover: hand it to tower's balancers, or read it.
//! # let _ = endpoints;
//! # }
//! ```

use std::collections::{BTreeSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;

use futures::Stream;
use slice_model::{BaseEndpointInfo, EndpointFacts, Protocol, ServiceName};
use tower::discover::Change;

use crate::{Location, Reader, Traffic};

/// The changes of one service port's endpoints, as a stream that
/// `tower::discover::Discover` is implemented for. `Send` and `Sync`: a
/// balancer holding it may be shared. Needs the `tower` feature.
pub type Discovery<S> = Pin<Box<dyn Stream<Item = Result<Change<SocketAddr, S>, Infallible>> + Send + Sync>>;

/// An endpoint as [`Reader::discover`] hands it to the function that makes
/// your service of it. Needs the `tower` feature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// Its address and the port on it: the key of its changes.
    pub addr: SocketAddr,
    /// Its conditions (ready, serving, terminating), topology hints, and
    /// whether it is on the reader's node.
    pub endpoint: BaseEndpointInfo,
    /// What its slice says of it: hostname (a name for TLS), node, zone
    /// and target reference (its Pod); `None` when the slice says none of
    /// it.
    pub facts: Option<EndpointFacts>,
}

impl Reader {
    /// The endpoints of port `port`/`protocol` of `service` that take new
    /// connections, as `Change::Insert` (made into a service by `make`)
    /// and `Change::Remove`, keyed by address and port. `make` gets each
    /// endpoint with its facts ([`Discovered`]). It starts with the
    /// endpoints there are now and ends when the reader's watches are
    /// dropped. Needs the `tower` feature.
    pub fn discover<S, F>(&self, service: &ServiceName, port: &str, protocol: Protocol, make: F) -> Discovery<S>
    where
        S: Send + Sync + 'static,
        F: FnMut(&Discovered) -> S + Send + Sync + 'static,
    {
        self.discover_from(service, port, protocol, None, make)
    }

    /// [`Self::discover`] as kube-proxy on another node and zone decides
    /// it ([`ServiceEndpoints::routing_at`](crate::ServiceEndpoints::routing_at)):
    /// one reader serves clients on several nodes or in several zones.
    /// Needs the `tower` feature.
    pub fn discover_at<S, F>(
        &self,
        service: &ServiceName,
        port: &str,
        protocol: Protocol,
        at: Location,
        make: F,
    ) -> Discovery<S>
    where
        S: Send + Sync + 'static,
        F: FnMut(&Discovered) -> S + Send + Sync + 'static,
    {
        self.discover_from(service, port, protocol, Some(at), make)
    }

    fn discover_from<S, F>(
        &self,
        service: &ServiceName,
        port: &str,
        protocol: Protocol,
        at: Option<Location>,
        make: F,
    ) -> Discovery<S>
    where
        S: Send + Sync + 'static,
        F: FnMut(&Discovered) -> S + Send + Sync + 'static,
    {
        let state = State {
            updates: self.subscribe(service),
            port: port.to_owned(),
            protocol,
            at,
            make,
            current: BTreeSet::new(),
            pending: VecDeque::new(),
            started: false,
        };
        Box::pin(futures::stream::unfold(state, |mut st| async move {
            loop {
                if let Some(change) = st.pending.pop_front() {
                    return Some((Ok(change), st));
                }
                if st.started && st.updates.changed().await.is_err() {
                    return None;
                }
                st.started = true;
                st.refresh();
            }
        }))
    }
}

struct State<S, F> {
    updates: crate::Subscription,
    port: String,
    protocol: Protocol,
    /// Where routing is judged from (`None`: the reader's location).
    at: Option<Location>,
    make: F,
    current: BTreeSet<SocketAddr>,
    pending: VecDeque<Change<SocketAddr, S>>,
    started: bool,
}

impl<S, F: FnMut(&Discovered) -> S> State<S, F> {
    /// Queues the changes from what was handed out to what is used now.
    fn refresh(&mut self) {
        let latest = self.updates.latest();
        let view = latest.as_deref();
        let used: Vec<BaseEndpointInfo> = view
            .and_then(|v| match &self.at {
                Some(at) => v.routing_at(&self.port, self.protocol, Traffic::Internal, at),
                None => v.routing(&self.port, self.protocol, Traffic::Internal),
            })
            .map(|r| r.used)
            .unwrap_or_default();
        let want: BTreeSet<SocketAddr> = used.iter().map(|e| e.addr).collect();
        for gone in self.current.difference(&want) {
            self.pending.push_back(Change::Remove(*gone));
        }
        for e in used.iter().filter(|e| !self.current.contains(&e.addr)) {
            // The facts of the copy the endpoint came from.
            let facts = view.and_then(|v| match &self.at {
                Some(at) => v.facts_at(e.addr.ip(), at).map(|f| (*f).clone()),
                None => v.facts(e.addr.ip()).cloned(),
            });
            let discovered = Discovered {
                addr: e.addr,
                endpoint: e.clone(),
                facts,
            };
            self.pending.push_back(Change::Insert(e.addr, (self.make)(&discovered)));
        }
        self.current = want;
    }
}
