//! Localhost node ports (kube-proxy's `KubeProxyNFTablesLocalhostNodePorts`):
//! a TCP listener on `127.0.0.1` or `::1` for each TCP node port whose
//! traffic has endpoints, relaying each connection to one of them.
//!
//! nftables cannot send a loopback connection to a pod (the kernel drops a
//! packet with a loopback source that leaves the host unless
//! `route_localnet` is set, which is unsafe), so the rules leave loopback
//! alone and this relay answers there instead. Its endpoints are the ones
//! the rules send the node port's traffic to, planned from the same maps
//! by the same code (`nft_dataplane::desired::plan_service`): the external
//! traffic policy (a Local policy without an endpoint on this node has no
//! listener), topology, terminating fallback. ClientIP affinity pins the
//! listener to one endpoint (every local client has the same address),
//! renewed by each connection, as kube-proxy does.
//!
//! Bytes move with `splice` through a pipe, from socket to socket in the
//! kernel (never copied through this process; a pipe is held only while
//! bytes are in it).
//!
//! A listener exists while its node port has endpoints: made when they
//! come, told of every change of them, closed (with its connections) when
//! they go or the relay stops. A port it cannot bind (another program has
//! it) is warned about, counted, and tried again at the next change or
//! full sync; every other listener carries on.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use linux_dataplane::Netns;
use nft_dataplane::{Planned, ServiceTarget};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use slice_model::internal::lock;
use slice_model::{IpFamily, Protocol, ServiceName, ServicePortName};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// How long a connection to an endpoint may take before the client's
/// connection is closed (kube-proxy's dial timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The relay's counters, one family's series of kube-proxy's
/// `kubeproxy_nftables_localhost_nodeport_listeners` and
/// `…_listener_creation_failures_total`.
#[derive(Clone, Debug, Default)]
pub struct RelayMetrics {
    /// Listeners open.
    pub listeners: Gauge,
    /// Listeners that could not be made (the port taken, ...).
    pub creation_failures: Counter,
}

/// What one node port's listener relays to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relayed {
    /// The service port.
    pub name: ServicePortName,
    /// The endpoints new connections go to.
    pub endpoints: Vec<SocketAddr>,
    /// ClientIP affinity's timeout.
    pub session_affinity: Option<Duration>,
}

impl Relayed {
    /// What `target`'s node port relays to, if it has a TCP node port
    /// whose traffic has endpoints.
    pub fn of(target: &ServiceTarget) -> Option<(u16, Self)> {
        let node_port = target.node_port?;
        let group = target.external.as_ref()?;
        if target.protocol() != Protocol::Tcp || group.backends.is_empty() {
            return None;
        }
        Some((
            node_port,
            Self {
                name: target.name.clone(),
                endpoints: group.backends.iter().map(|b| b.addr).collect(),
                session_affinity: target.session_affinity,
            },
        ))
    }
}

/// One family's localhost node ports.
pub struct LocalhostRelay {
    family: IpFamily,
    netns: Arc<Netns>,
    runtime: tokio::runtime::Handle,
    metrics: RelayMetrics,
    listeners: HashMap<u16, Listener>,
    /// The node ports each service wants (listening or not).
    wanted: HashMap<ServiceName, BTreeMap<u16, Relayed>>,
    /// Idle pipes, shared by every connection.
    pipes: Arc<Pipes>,
}

struct Listener {
    /// The service port it was made for (another service may claim the
    /// node port only after this one lets go).
    owner: ServiceName,
    targets: Arc<Mutex<Targets>>,
    /// The accept loop, which owns every connection: aborting it closes
    /// them all.
    task: tokio::task::AbortHandle,
}

/// The endpoints a listener picks from, and its affinity pin.
#[derive(Debug)]
struct Targets {
    relayed: Relayed,
    pinned: Option<(SocketAddr, Instant)>,
    picks: u64,
}

impl Targets {
    /// The endpoint for a new connection at `now`.
    fn pick(&mut self, now: Instant) -> Option<SocketAddr> {
        let endpoints = &self.relayed.endpoints;
        if let (Some(timeout), Some((pinned, used))) = (self.relayed.session_affinity, self.pinned)
            && now.duration_since(used) <= timeout
            && endpoints.contains(&pinned)
        {
            self.pinned = Some((pinned, now));
            return Some(pinned);
        }
        self.picks = self.picks.wrapping_add(1);
        let at = usize::try_from(random(self.picks) % endpoints.len().max(1) as u64).unwrap_or(0);
        let chosen = *endpoints.get(at)?;
        if self.relayed.session_affinity.is_some() {
            self.pinned = Some((chosen, now));
        }
        Some(chosen)
    }

    /// New endpoints; a changed affinity drops the pin.
    fn follow(&mut self, relayed: Relayed) {
        if relayed.session_affinity != self.relayed.session_affinity {
            self.pinned = None;
        }
        self.relayed = relayed;
    }
}

/// A random number from the standard library's per-process random keys.
fn random(n: u64) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(n)
}

impl LocalhostRelay {
    /// A relay for `family`'s loopback address in `netns`, running its
    /// listeners on `runtime`.
    pub fn new(family: IpFamily, netns: Netns, runtime: tokio::runtime::Handle, metrics: RelayMetrics) -> Self {
        Self {
            family,
            netns: Arc::new(netns),
            runtime,
            metrics,
            listeners: HashMap::new(),
            wanted: HashMap::new(),
            pipes: Arc::default(),
        }
    }

    /// The address listeners bind: `127.0.0.1` or `::1`.
    pub fn loopback(&self) -> IpAddr {
        match self.family {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    /// The targets a relay reads of the syncer's plans
    /// ([`nft_dataplane::NftSyncer::keep_plans`]): those with a TCP node
    /// port.
    pub fn reads(target: &ServiceTarget) -> bool {
        target.node_port.is_some() && target.protocol() == Protocol::Tcp
    }

    /// Follows what a sync planned (and wrote): each planned service's
    /// node ports; after a full sync, services it did not plan lose their
    /// listeners.
    pub fn follow(&mut self, planned: &Planned) {
        if planned.full {
            self.wanted.retain(|name, _| planned.services.contains_key(name));
        }
        for (name, targets) in &planned.services {
            let ports: BTreeMap<u16, Relayed> = targets.iter().filter_map(Relayed::of).collect();
            if ports.is_empty() {
                self.wanted.remove(name);
            } else {
                self.wanted.insert(name.clone(), ports);
            }
        }
        self.reconcile();
    }

    /// Closes every listener and its connections.
    pub fn shutdown(&mut self) {
        for (_, l) in self.listeners.drain() {
            l.task.abort();
        }
        self.wanted.clear();
        self.metrics.listeners.set(0);
    }

    /// Makes the listeners what `wanted` says: closes those no service
    /// wants, tells the rest of their endpoints, opens the missing ones.
    fn reconcile(&mut self) {
        let mut want: HashMap<u16, (&ServiceName, &Relayed)> = HashMap::new();
        for (name, ports) in &self.wanted {
            for (port, relayed) in ports {
                // Two services claiming one node port (the API server
                // forbids it; a stale view may not): the listener's owner
                // keeps it, else the first by name.
                let keep = match want.get(port) {
                    None => true,
                    Some((other, _)) => {
                        let owner = self.listeners.get(port).map(|l| &l.owner);
                        owner == Some(name) || (owner != Some(*other) && name < *other)
                    }
                };
                if keep {
                    want.insert(*port, (name, relayed));
                }
            }
        }
        self.listeners.retain(|port, l| {
            let keep = want.get(port).is_some_and(|(name, _)| **name == l.owner);
            if !keep {
                tracing::debug!(port, service = %l.owner, "localhost node port closed");
                l.task.abort();
            }
            keep
        });
        for (port, (name, relayed)) in want {
            if let Some(l) = self.listeners.get(&port) {
                lock(&l.targets).follow(relayed.clone());
                continue;
            }
            match self.open(port, name, relayed) {
                Ok(l) => {
                    tracing::debug!(port, service = %relayed.name, endpoints = relayed.endpoints.len(), "localhost node port open");
                    self.listeners.insert(port, l);
                }
                Err(e) => {
                    self.metrics.creation_failures.inc();
                    tracing::warn!(
                        service = %relayed.name,
                        address = %SocketAddr::new(self.loopback(), port),
                        error = %e,
                        "cannot listen on a localhost node port; connections to it fail (tried again at the service's next change)"
                    );
                }
            }
        }
        self.metrics
            .listeners
            .set(i64::try_from(self.listeners.len()).unwrap_or(i64::MAX));
    }

    fn open(&self, port: u16, owner: &ServiceName, relayed: &Relayed) -> io::Result<Listener> {
        let addr = SocketAddr::new(self.loopback(), port);
        let socket = self
            .netns
            .run(|| -> io::Result<TcpSocket> {
                let socket = new_socket(self.family)?;
                socket.set_reuseaddr(true)?;
                socket.bind(addr)?;
                Ok(socket)
            })
            .map_err(io::Error::other)??;
        let listener = {
            let _runtime = self.runtime.enter();
            socket.listen(1024)?
        };
        let targets = Arc::new(Mutex::new(Targets {
            relayed: relayed.clone(),
            pinned: None,
            picks: 0,
        }));
        let task = self
            .runtime
            .spawn(accept(
                listener,
                targets.clone(),
                self.netns.clone(),
                self.family,
                self.pipes.clone(),
            ))
            .abort_handle();
        Ok(Listener {
            owner: owner.clone(),
            targets,
            task,
        })
    }
}

impl Drop for LocalhostRelay {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn new_socket(family: IpFamily) -> io::Result<TcpSocket> {
    match family {
        IpFamily::V4 => TcpSocket::new_v4(),
        IpFamily::V6 => TcpSocket::new_v6(),
    }
}

/// Accepts connections until aborted; each is relayed in a task of its
/// own, owned here so that aborting this closes them all.
async fn accept(
    listener: TcpListener,
    targets: Arc<Mutex<Targets>>,
    netns: Arc<Netns>,
    family: IpFamily,
    pipes: Arc<Pipes>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let endpoint = lock(&targets).pick(Instant::now());
                    if let Some(endpoint) = endpoint {
                        connections.spawn(relay(client, endpoint, netns.clone(), family, pipes.clone()));
                    }
                }
                Err(e) => {
                    // Out of descriptors or memory: wait rather than spin.
                    tracing::debug!(error = %e, "accepting a localhost node port connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Relays one client to `endpoint` until both sides are done.
async fn relay(client: TcpStream, endpoint: SocketAddr, netns: Arc<Netns>, family: IpFamily, pipes: Arc<Pipes>) {
    let socket = match netns
        .run(|| new_socket(family))
        .map_err(io::Error::other)
        .and_then(|s| s)
    {
        Ok(s) => s,
        Err(e) => return tracing::debug!(error = %e, "a socket to an endpoint"),
    };
    let backend = match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(endpoint)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return tracing::debug!(%endpoint, error = %e, "connecting to an endpoint"),
        Err(_) => return tracing::debug!(%endpoint, "connecting to an endpoint timed out"),
    };
    let _ = client.set_nodelay(true);
    let _ = backend.set_nodelay(true);
    let _ = tokio::try_join!(
        splice_one_way(&client, &backend, &pipes),
        splice_one_way(&backend, &client, &pipes)
    );
}

/// Pipes not carrying bytes now, for whichever connection has some next:
/// an idle connection holds none (a pipe is two descriptors).
#[derive(Default)]
struct Pipes(Mutex<Vec<Pipe>>);

impl Pipes {
    /// The most idle pipes kept.
    const KEPT: usize = 64;

    fn take(&self) -> io::Result<Pipe> {
        match lock(&self.0).pop() {
            Some(p) => Ok(p),
            None => Pipe::new(),
        }
    }

    /// Gives back an empty pipe.
    fn give(&self, pipe: Pipe) {
        let mut idle = lock(&self.0);
        if idle.len() < Self::KEPT {
            idle.push(pipe);
        }
    }
}

/// A pipe that carries one direction's bytes between two sockets
/// (`splice`: the kernel moves them without copying them to this
/// process).
struct Pipe {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        use rustix::pipe::{PipeFlags, pipe_with};
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Self { read, write })
    }
}

/// The most bytes moved by one `splice` (a pipe's default capacity).
const SPLICE_CHUNK: usize = 1 << 16;

/// Moves bytes from `from` to `to` through a pipe of `pipes` until `from`
/// ends, then ends `to`'s sending side (a half-close is passed on, as a
/// copy would). The pipe is held only while bytes are in it.
async fn splice_one_way(from: &TcpStream, to: &TcpStream, pipes: &Pipes) -> io::Result<()> {
    use rustix::pipe::{SpliceFlags, splice};
    use tokio::io::Interest;
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        from.readable().await?;
        let pipe = pipes.take()?;
        let moved = match from.try_io(Interest::READABLE, || {
            splice(from, None, &pipe.write, None, SPLICE_CHUNK, flags).map_err(io::Error::from)
        }) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                pipes.give(pipe);
                continue;
            }
            Err(e) => return Err(e),
        };
        if moved == 0 {
            pipes.give(pipe);
            break;
        }
        let mut in_pipe = moved;
        while in_pipe > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe.read, None, to, None, in_pipe, flags).map_err(io::Error::from)
            }) {
                Ok(n) => in_pipe -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The pipe still holds bytes: dropped, not given back.
                Err(e) => return Err(e),
            }
        }
        pipes.give(pipe);
    }
    rustix::net::shutdown(to, rustix::net::Shutdown::Write).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(endpoints: &[&str], session_affinity: Option<u64>) -> Relayed {
        Relayed {
            name: ServicePortName::new(ServiceName::new("ns", "web"), "http", Protocol::Tcp),
            endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
            session_affinity: session_affinity.map(Duration::from_secs),
        }
    }

    #[test]
    fn picks_spread_without_affinity_and_stick_with_it() {
        let mut t = Targets {
            relayed: relayed(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"], None),
            pinned: None,
            picks: 0,
        };
        let now = Instant::now();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            seen.insert(t.pick(now).unwrap());
        }
        assert_eq!(seen.len(), 3, "every endpoint is picked");

        t.follow(relayed(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"], Some(10)));
        let first = t.pick(now).unwrap();
        for s in 1..=30 {
            assert_eq!(
                t.pick(now + Duration::from_secs(s)).unwrap(),
                first,
                "renewed by each use"
            );
        }
        // The pinned endpoint gone: another, pinned in turn.
        let rest: Vec<String> = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]
            .iter()
            .filter(|e| e.parse::<SocketAddr>().unwrap() != first)
            .map(|e| (*e).to_owned())
            .collect();
        let refs: Vec<&str> = rest.iter().map(String::as_str).collect();
        t.follow(relayed(&refs, Some(10)));
        let second = t.pick(now + Duration::from_secs(31)).unwrap();
        assert_ne!(second, first);
        assert_eq!(t.pick(now + Duration::from_secs(32)).unwrap(), second);
        // Idle past the timeout: picked anew (any endpoint may come).
        let later = now + Duration::from_secs(60);
        assert!(t.pick(later).is_some());
        t.follow(relayed(&[], Some(10)));
        assert_eq!(t.pick(later), None, "no endpoint, no pick");
    }
}
