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
use tokio::sync::{mpsc, oneshot, watch};
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

/// One family's localhost node ports, as the sync side holds them: what
/// each sync planned goes over a channel to the relay's task
/// ([`LocalhostRelay::start`]), which owns the listeners and their
/// connections. Dropping this closes them all.
pub struct LocalhostRelay {
    loopback: IpAddr,
    plans: mpsc::UnboundedSender<Command>,
}

/// What the sync side tells the relay's task.
enum Command {
    /// What a sync planned (and wrote).
    Follow(Planned),
    /// Says when everything before it is done.
    Settled(oneshot::Sender<()>),
}

impl LocalhostRelay {
    /// A relay for `family`'s loopback address in `netns`, and its task:
    /// the future that runs the listeners, for the caller to spawn on its
    /// runtime. The task ends when this handle is dropped, closing every
    /// listener and connection.
    pub fn start(
        family: IpFamily,
        netns: Netns,
        metrics: RelayMetrics,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (plans, commands) = mpsc::unbounded_channel();
        let relay = Relay {
            family,
            netns: Arc::new(netns),
            metrics,
            listeners: HashMap::new(),
            tasks: JoinSet::new(),
            wanted: HashMap::new(),
            pipes: Arc::default(),
        };
        let handle = Self {
            loopback: relay.loopback(),
            plans,
        };
        (handle, relay.run(commands))
    }

    /// The address listeners bind: `127.0.0.1` or `::1`.
    pub fn loopback(&self) -> IpAddr {
        self.loopback
    }

    /// The targets a relay reads of the syncer's plans
    /// ([`nft_dataplane::NftSyncer::keep_plans`]): those with a TCP node
    /// port.
    pub fn reads(target: &ServiceTarget) -> bool {
        target.node_port.is_some() && target.protocol() == Protocol::Tcp
    }

    /// Hands the relay what a sync planned (and wrote): each planned
    /// service's node ports; after a full sync, services it did not plan
    /// lose their listeners. Does not wait for the listeners.
    pub fn follow(&self, planned: Planned) {
        // The task ends only when this handle goes: a send cannot fail
        // while it is here, but for a runtime shut down under it.
        let _ = self.plans.send(Command::Follow(planned));
    }

    /// Waits (blocking this thread, which must not be one of the relay's
    /// runtime's) until the relay has done what it was handed before;
    /// `false` when its task is gone.
    pub fn settled(&self) -> bool {
        let (done, wait) = oneshot::channel();
        self.plans.send(Command::Settled(done)).is_ok() && wait.blocking_recv().is_ok()
    }
}

/// The relay's task: the listeners, and what each service wants.
struct Relay {
    family: IpFamily,
    netns: Arc<Netns>,
    metrics: RelayMetrics,
    listeners: HashMap<u16, Listener>,
    /// Every listener's accept loop, each owning its connections:
    /// dropped with the relay, which closes them all.
    tasks: JoinSet<()>,
    /// The node ports each service wants (listening or not).
    wanted: HashMap<ServiceName, BTreeMap<u16, Relayed>>,
    /// Idle pipes, shared by every connection.
    pipes: Arc<Pipes>,
}

struct Listener {
    /// The service port it was made for (another service may claim the
    /// node port only after this one lets go).
    owner: ServiceName,
    /// Where the accept loop reads its endpoints.
    targets: watch::Sender<Relayed>,
    /// The accept loop: aborting it closes its connections.
    task: tokio::task::AbortHandle,
}

/// How an accept loop picks: its count of picks, and the endpoint
/// ClientIP affinity pins (every local client has the same address).
#[derive(Debug, Default)]
struct Picker {
    pinned: Option<Pin>,
    picks: u64,
}

/// An endpoint pinned by affinity, last used at `used`, under `timeout`.
#[derive(Clone, Copy, Debug)]
struct Pin {
    endpoint: SocketAddr,
    used: Instant,
    timeout: Duration,
}

impl Picker {
    /// The endpoint of `relayed` for a new connection at `now`; a changed
    /// affinity timeout drops the pin.
    fn pick(&mut self, relayed: &Relayed, now: Instant) -> Option<SocketAddr> {
        let endpoints = &relayed.endpoints;
        if let (Some(timeout), Some(pin)) = (relayed.session_affinity, self.pinned)
            && pin.timeout == timeout
            && now.duration_since(pin.used) <= timeout
            && endpoints.contains(&pin.endpoint)
        {
            self.pinned = Some(Pin { used: now, ..pin });
            return Some(pin.endpoint);
        }
        self.picks = self.picks.wrapping_add(1);
        let at = usize::try_from(random(self.picks) % endpoints.len().max(1) as u64).unwrap_or(0);
        let endpoint = *endpoints.get(at)?;
        self.pinned = relayed.session_affinity.map(|timeout| Pin {
            endpoint,
            used: now,
            timeout,
        });
        Some(endpoint)
    }
}

/// A random number from the standard library's per-process random keys.
fn random(n: u64) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(n)
}

impl Relay {
    fn loopback(&self) -> IpAddr {
        match self.family {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    /// Follows the plans until the handle goes; then every listener and
    /// connection closes with the relay.
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        while let Some(command) = commands.recv().await {
            match command {
                Command::Follow(planned) => self.follow(&planned),
                Command::Settled(done) => {
                    let _ = done.send(());
                }
            }
        }
        self.metrics.listeners.set(0);
    }

    fn follow(&mut self, planned: &Planned) {
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

    /// Makes the listeners what `wanted` says: closes those no service
    /// wants, tells the rest of their endpoints, opens the missing ones.
    fn reconcile(&mut self) {
        // The accept loops of listeners closed before have ended by now:
        // their entries go, so the set holds what is open (and what closed
        // since the last change), not every listener there ever was.
        while self.tasks.try_join_next().is_some() {}
        // Read while listeners open: set back at the end.
        let wanted = std::mem::take(&mut self.wanted);
        let mut want: HashMap<u16, (&ServiceName, &Relayed)> = HashMap::new();
        for (name, ports) in &wanted {
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
                l.targets.send_if_modified(|now| {
                    let changed = now != relayed;
                    if changed {
                        now.clone_from(relayed);
                    }
                    changed
                });
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
        self.wanted = wanted;
    }

    fn open(&mut self, port: u16, owner: &ServiceName, relayed: &Relayed) -> io::Result<Listener> {
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
        let listener = socket.listen(1024)?;
        let (targets, endpoints) = watch::channel(relayed.clone());
        let task = self.tasks.spawn(accept(
            listener,
            endpoints,
            self.netns.clone(),
            self.family,
            self.pipes.clone(),
        ));
        Ok(Listener {
            owner: owner.clone(),
            targets,
            task,
        })
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
    endpoints: watch::Receiver<Relayed>,
    netns: Arc<Netns>,
    family: IpFamily,
    pipes: Arc<Pipes>,
) {
    let mut connections = JoinSet::new();
    let mut picker = Picker::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let endpoint = picker.pick(&endpoints.borrow(), Instant::now());
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

    /// A closed listener's accept loop does not stay in the relay's set:
    /// a node whose services come and go for months holds what is open.
    #[tokio::test]
    async fn closed_listeners_leave_the_relays_task_set() {
        let mut relay = Relay {
            family: IpFamily::V4,
            netns: Arc::new(Netns::Current),
            metrics: RelayMetrics::default(),
            listeners: HashMap::new(),
            tasks: JoinSet::new(),
            wanted: HashMap::new(),
            pipes: Arc::default(),
        };
        let name = ServiceName::new("ns", "web");
        for round in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let ports = BTreeMap::from([(port, relayed(&["127.0.0.1:9"], None))]);
            relay.wanted.insert(name.clone(), ports);
            relay.reconcile();
            assert_eq!(
                (relay.listeners.len(), relay.tasks.len()),
                (1, 1),
                "round {round}: one open"
            );
            relay.wanted.clear();
            relay.reconcile();
            assert!(relay.listeners.is_empty());
            // The abort takes effect once the runtime runs it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        relay.reconcile();
        assert_eq!(relay.tasks.len(), 0, "every closed loop reaped");
    }

    #[test]
    fn picks_spread_without_affinity_and_stick_with_it() {
        let mut t = Picker::default();
        let mut now_relayed = relayed(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"], None);
        let now = Instant::now();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            seen.insert(t.pick(&now_relayed, now).unwrap());
        }
        assert_eq!(seen.len(), 3, "every endpoint is picked");

        now_relayed = relayed(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"], Some(10));
        let first = t.pick(&now_relayed, now).unwrap();
        for s in 1..=30 {
            assert_eq!(
                t.pick(&now_relayed, now + Duration::from_secs(s)).unwrap(),
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
        now_relayed = relayed(&refs, Some(10));
        let second = t.pick(&now_relayed, now + Duration::from_secs(31)).unwrap();
        assert_ne!(second, first);
        assert_eq!(t.pick(&now_relayed, now + Duration::from_secs(32)).unwrap(), second);
        // Idle past the timeout: picked anew (any endpoint may come).
        let later = now + Duration::from_secs(60);
        assert!(t.pick(&now_relayed, later).is_some());
        now_relayed = relayed(&[], Some(10));
        assert_eq!(t.pick(&now_relayed, later), None, "no endpoint, no pick");
    }
}
