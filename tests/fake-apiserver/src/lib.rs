//! # fake-apiserver
//!
//! Test support: an HTTP server on 127.0.0.1 that serves `v1` Services and
//! `discovery.k8s.io/v1` EndpointSlices the way kube-apiserver does, so that
//! kube's real `Client` and kube-runtime's real watcher can be tested
//! without a cluster.
//!
//! ```text
//!  GET  /version, /api, /apis, /api/v1, /apis/discovery.k8s.io[/v1]   discovery
//!  GET  <collection>?labelSelector=&limit=&continue=                  list (consistent pages)
//!  GET  <collection>?watch=true&resourceVersion=&allowWatchBookmarks=&timeoutSeconds=
//!  GET  <object>;  POST <collection> (generateName honoured);  PUT (a stale
//!       resourceVersion is 409 Conflict), DELETE <object> (and what names it
//!       as owner, as the garbage collector deletes it)
//!    <collection> = /api/v1[/namespaces/NS]/services | /api/v1[/namespaces/NS]/pods
//!                 | /apis/discovery.k8s.io/v1[/namespaces/NS]/endpointslices
//!                 | /api/v1/nodes | /apis/networking.k8s.io/v1/servicecidrs
//!                 | /apis/coordination.k8s.io/v1/namespaces/NS/leases
//!                 | /apis/resource.k8s.io/v1[/namespaces/NS]/resourceclaims
//! ```
//!
//! Every write bumps a global resourceVersion and appends to a history that
//! watches replay from any resourceVersion not yet compacted; older ones get
//! the API server's `410 Gone` (an `ERROR` event with reason `Expired`, or an
//! HTTP 410 for a list's expired `continue`). A watch with a label selector
//! sees an object that stops matching as `DELETED` and one that starts
//! matching as `ADDED`, as the API server's watch cache reports them.
//!
//! Fault controls for tests: [`FakeApiServer::drop_watches`],
//! [`FakeApiServer::expire_next_watches`], [`FakeApiServer::fail_next_lists`],
//! [`FakeApiServer::fail_next_continues`], [`FakeApiServer::set_delay`],
//! [`FakeApiServer::set_hanging`] (accepts connections, answers nothing),
//! [`FakeApiServer::set_frozen`] (that, and open watches go silent),
//! [`FakeApiServer::stop`] (refuses connections), [`FakeApiServer::compact`];
//! [`Switch`] stands for a load balancer in front of two servers; and what
//! kube-apiserver answers a client it does not let in:
//! [`FakeApiServer::require_token`] (401) and [`FakeApiServer::forbid`]
//! (403, as RBAC refuses a verb on a resource).

mod selector;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};

pub use selector::Selector;

/// The kinds this server serves.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Kind {
    /// `v1` Service.
    Service,
    /// `discovery.k8s.io/v1` EndpointSlice.
    EndpointSlice,
    /// `v1` Pod (multus mode watches this node's, by field selector).
    Pod,
    /// `v1` Node, cluster-scoped (proxyd watches its own, by name).
    Node,
    /// `networking.k8s.io/v1` ServiceCIDR, cluster-scoped.
    ServiceCidr,
    /// `coordination.k8s.io/v1` Lease (leader election).
    Lease,
    /// `resource.k8s.io/v1` ResourceClaim (DRA networks).
    ResourceClaim,
}

impl Kind {
    /// `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::ServiceCidr => "ServiceCIDR",
            Kind::Lease => "Lease",
            Kind::ResourceClaim => "ResourceClaim",
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Node | Kind::ServiceCidr)
    }

    /// `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Service | Kind::Pod | Kind::Node => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::ServiceCidr => "networking.k8s.io/v1",
            Kind::Lease => "coordination.k8s.io/v1",
            Kind::ResourceClaim => "resource.k8s.io/v1",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
            Kind::Pod => "pods",
            Kind::Node => "nodes",
            Kind::ServiceCidr => "servicecidrs",
            Kind::Lease => "leases",
            Kind::ResourceClaim => "resourceclaims",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        match s {
            "Service" => Some(Kind::Service),
            "EndpointSlice" => Some(Kind::EndpointSlice),
            "Pod" => Some(Kind::Pod),
            "Node" => Some(Kind::Node),
            "ServiceCIDR" => Some(Kind::ServiceCidr),
            "Lease" => Some(Kind::Lease),
            "ResourceClaim" => Some(Kind::ResourceClaim),
            _ => None,
        }
    }
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// `kind` is missing or not served.
    UnknownKind(String),
    /// `metadata.name` is missing, or `metadata.namespace` is missing on a
    /// namespaced kind or given on a cluster-scoped one.
    MissingName,
    /// Create of an object that exists.
    AlreadyExists,
    /// Replace or delete of an object that does not exist.
    NotFound,
    /// Replace of an object whose `metadata.resourceVersion` is not the
    /// stored one (the API server's optimistic concurrency: 409 Conflict).
    Conflict,
}

/// Counters of what the server was asked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// List requests (every page counts).
    pub lists: u64,
    /// List requests that carried a `continue` token.
    pub continued_lists: u64,
    /// Watch requests.
    pub watches: u64,
    /// Bookmarks sent.
    pub bookmarks: u64,
    /// Requests answered with an injected fault or a 410.
    pub faults: u64,
    /// Writes clients asked for over HTTP (POST, PUT, DELETE), whether or
    /// not they succeeded.
    pub writes: u64,
}

#[derive(Debug)]
struct Change {
    rv: u64,
    kind: Kind,
    namespace: String,
    ty: &'static str,
    object: Value,
    previous: Option<Value>,
}

struct Snapshot {
    rv: u64,
    /// What the next pages hand out, front first (a page is taken from
    /// the front without moving the rest, as a real server's cursor does).
    items: std::collections::VecDeque<Arc<Stored>>,
}

/// An object as stored, with its JSON written once (as kube-apiserver's
/// watch cache keeps objects' serializations): a list copies pointers and
/// bytes, not object trees, so the harness's lists cost the server what
/// they cost a real one on another machine — little of the node's CPU.
struct Stored {
    value: Value,
    json: String,
}

impl Stored {
    fn new(value: Value) -> Arc<Self> {
        let json = value.to_string();
        Arc::new(Self { value, json })
    }
}

#[derive(Default)]
struct Faults {
    fail_lists: u32,
    fail_continues: u32,
    expire_watches: u32,
    delay: Duration,
}

/// Who may ask what, as kube-apiserver's authentication and RBAC decide.
#[derive(Default)]
struct Access {
    /// The bearer token every request must carry; `None`: anyone.
    token: Option<String>,
    /// Kinds no request may list or watch (403).
    forbidden: Vec<Kind>,
}

struct Inner {
    rv: u64,
    objects: BTreeMap<(Kind, String, String), Arc<Stored>>,
    history: Vec<Arc<Change>>,
    compacted_rv: u64,
    snapshots: HashMap<String, Snapshot>,
    next_token: u64,
    faults: Faults,
    access: Access,
    stats: Stats,
    bookmark_interval: Duration,
}

impl Inner {
    /// Consumes one injected fault of the kind `pick` selects, if any is
    /// left, and counts it.
    fn take_fault(&mut self, pick: fn(&mut Faults) -> &mut u32) -> bool {
        let left = pick(&mut self.faults);
        if *left == 0 {
            return false;
        }
        *left -= 1;
        self.stats.faults += 1;
        true
    }
}

struct Shared {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Arc<Change>>,
    drop_epoch: watch::Sender<u64>,
    /// While true, every request waits for it to turn false.
    hanging: watch::Sender<bool>,
    /// While true, open watch streams send nothing (what they would send
    /// waits), and requests hang as with `hanging`.
    frozen: watch::Sender<bool>,
    /// Serves HTTPS with this, else plain HTTP.
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// Open connections, cut by [`FakeApiServer::stop`].
    connections: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not take the server down with it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deletes an object, and then (as the garbage collector does, here at
    /// once) every object that names it among its owner references.
    fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, WriteError> {
        let mut inner = self.lock();
        let Some(old) = inner.objects.remove(&(kind, namespace.to_owned(), name.to_owned())) else {
            return Err(WriteError::NotFound);
        };
        inner.rv += 1;
        let old = old.value.clone();
        let mut gone = old.clone();
        gone["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        self.record(&mut inner, kind, namespace, "DELETED", gone.clone(), Some(old.clone()));
        let uid = old.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned);
        let owned: Vec<(Kind, String, String)> = inner
            .objects
            .iter()
            .filter(|(_, o)| {
                let refs = o.value.pointer("/metadata/ownerReferences").and_then(Value::as_array);
                refs.into_iter()
                    .flatten()
                    .any(|r| uid.is_some() && r["uid"].as_str() == uid.as_deref())
            })
            .map(|(k, _)| k.clone())
            .collect();
        drop(inner);
        for (k, ns, n) in owned {
            let _ = self.delete(k, &ns, &n);
        }
        Ok(gone)
    }

    /// Creates (`must_exist: Some(false)`), replaces (`Some(true)`) or
    /// either (`None`).
    fn write(&self, mut obj: Value, must_exist: Option<bool>) -> Result<Value, WriteError> {
        let kind_name = obj["kind"].as_str().unwrap_or_default().to_owned();
        let kind = Kind::from_name(&kind_name).ok_or(WriteError::UnknownKind(kind_name))?;
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut inner = self.lock();
        // A create with `generateName`: the server picks the rest, as
        // kube-apiserver does (five characters).
        let generate = obj
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let name = match (name.is_empty(), generate, must_exist) {
            (true, Some(prefix), Some(false)) if !prefix.is_empty() => {
                let n = format!("{prefix}{}", generated_suffix(inner.rv + 1));
                obj["metadata"]["name"] = json!(n);
                n
            }
            _ => name,
        };
        if name.is_empty() || (ns.is_empty() == kind.namespaced()) {
            return Err(WriteError::MissingName);
        }
        let key = (kind, ns.clone(), name.clone());
        let previous = inner.objects.get(&key).map(|o| o.value.clone());
        match (must_exist, &previous) {
            (Some(false), Some(_)) => return Err(WriteError::AlreadyExists),
            (Some(true), None) => return Err(WriteError::NotFound),
            _ => {}
        }
        // A replace that names a resourceVersion must name the stored one.
        let asked = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str);
        let stored = previous
            .as_ref()
            .and_then(|p| p.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str);
        if must_exist == Some(true) && asked.is_some_and(|a| !a.is_empty()) && asked != stored {
            return Err(WriteError::Conflict);
        }
        inner.rv += 1;
        let rv = inner.rv;
        obj["apiVersion"] = json!(kind.api_version());
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let uid = previous
            .as_ref()
            .and_then(|p| p.pointer("/metadata/uid").cloned())
            .unwrap_or_else(|| json!(format!("uid-{rv}")));
        obj["metadata"]["uid"] = uid;
        inner.objects.insert(key, Stored::new(obj.clone()));
        let ty = if previous.is_some() { "MODIFIED" } else { "ADDED" };
        self.record(&mut inner, kind, &ns, ty, obj.clone(), previous);
        Ok(obj)
    }

    fn record(
        &self,
        inner: &mut Inner,
        kind: Kind,
        ns: &str,
        ty: &'static str,
        object: Value,
        previous: Option<Value>,
    ) {
        let change = Arc::new(Change {
            rv: inner.rv,
            kind,
            namespace: ns.to_owned(),
            ty,
            object,
            previous,
        });
        inner.history.push(change.clone());
        // Sent under the lock, so a watch that reads the history and then
        // subscribes (also under the lock) sees every change exactly once.
        let _ = self.changes.send(change);
    }
}

fn accept_loop(listener: TcpListener, s: Arc<Shared>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // Go's listeners (kube-apiserver's) set TCP_NODELAY: a watch
            // event is sent at once, not held for the client's ACK.
            let _ = stream.set_nodelay(true);
            let conn = s.clone();
            let task = tokio::spawn(async move {
                let tls = conn.tls.clone();
                let service = hyper::service::service_fn(move |req| {
                    let s = conn.clone();
                    async move { Ok::<_, Infallible>(handle(s, req).await) }
                });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
            });
            let mut open = s.connections.lock().unwrap_or_else(|e| e.into_inner());
            open.retain(|h| !h.is_finished());
            open.push(task.abort_handle());
        }
    })
}

/// A running fake API server; stops when dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.drop_epoch.send_modify(|e| *e += 1);
    }
}

impl FakeApiServer {
    /// Starts a server on an ephemeral port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await?)
    }

    /// Starts a server on `listener` (one bound in another network
    /// namespace, say, so that only that namespace reaches it).
    pub fn start_on(listener: TcpListener) -> std::io::Result<Self> {
        Self::serve(listener, None)
    }

    /// Starts an HTTPS server on `listener`, presenting the certificate
    /// chain `cert_pem` (the server's certificate first) with its private
    /// key `key_pem`, as kube-apiserver does.
    pub fn start_tls_on(listener: TcpListener, cert_pem: &[u8], key_pem: &[u8]) -> std::io::Result<Self> {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let invalid = |e: &dyn std::fmt::Display| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string());
        let certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(&e))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| invalid(&e))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(&e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| invalid(&e))?;
        Self::serve(listener, Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }

    fn serve(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (changes, _) = broadcast::channel(65_536);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                rv: 1000,
                objects: BTreeMap::new(),
                history: Vec::new(),
                compacted_rv: 0,
                snapshots: HashMap::new(),
                next_token: 0,
                faults: Faults::default(),
                access: Access::default(),
                stats: Stats::default(),
                bookmark_interval: Duration::from_millis(500),
            }),
            changes,
            drop_epoch: watch::channel(0).0,
            hanging: watch::channel(false).0,
            frozen: watch::channel(false).0,
            tls,
            connections: Mutex::new(Vec::new()),
        });
        let accept = accept_loop(listener, shared.clone());
        Ok(Self { addr, shared, accept })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDRESS:PORT`, or `https://` when serving TLS.
    pub fn url(&self) -> String {
        let scheme = if self.shared.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// A kubeconfig (YAML) pointing at this server, for starting `proxyd`
    /// (or any client) as a separate process.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.url()
        )
    }

    /// A kube `Client` talking to this server over HTTP.
    pub fn client(&self) -> kube::Client {
        let uri = self.url().parse().expect("the server's own URL parses");
        kube::Client::try_from(kube::Config::new(uri)).expect("a plain-HTTP kube client")
    }

    /// Creates or replaces an object (its `kind` says which collection).
    pub fn apply(&self, obj: Value) -> Result<Value, WriteError> {
        self.shared.write(obj, None)
    }

    /// Creates an object; fails if it exists.
    pub fn create(&self, obj: Value) -> Result<Value, WriteError> {
        self.shared.write(obj, Some(false))
    }

    /// Deletes an object; returns its last state.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, WriteError> {
        self.shared.delete(kind, namespace, name)
    }

    /// The current objects of a kind, sorted by namespace and name.
    pub fn objects(&self, kind: Kind) -> Vec<Value> {
        let inner = self.shared.lock();
        inner
            .objects
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, v)| v.value.clone())
            .collect()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    /// Ends every open watch (clients reconnect and resume).
    pub fn drop_watches(&self) {
        self.shared.drop_epoch.send_modify(|e| *e += 1);
    }

    /// Answers the next `n` watches with `410 Gone` (reason `Expired`).
    pub fn expire_next_watches(&self, n: u32) {
        self.shared.lock().faults.expire_watches = n;
    }

    /// Fails the next `n` list requests (any page) with a 500.
    pub fn fail_next_lists(&self, n: u32) {
        self.shared.lock().faults.fail_lists = n;
    }

    /// Fails the next `n` list requests that continue a paginated list, so
    /// a list breaks part-way.
    pub fn fail_next_continues(&self, n: u32) {
        self.shared.lock().faults.fail_continues = n;
    }

    /// Delays every response by `d`.
    pub fn set_delay(&self, d: Duration) {
        self.shared.lock().faults.delay = d;
    }

    /// While `hanging`, the server accepts connections and reads requests
    /// but answers none (an overloaded or wedged API server, or a load
    /// balancer in front of one that is gone); the requests held are
    /// answered once it stops hanging. Open watches go on.
    pub fn set_hanging(&self, hanging: bool) {
        self.shared.hanging.send_replace(hanging);
    }

    /// While `frozen`, the server is a stopped process (SIGSTOP, a frozen
    /// or partitioned control-plane node): connections are accepted (the
    /// kernel does that) but nothing is answered, and open watches, their
    /// bookmarks included, go silent without closing. Everything held is
    /// sent once it thaws, as a process that is continued sends it.
    pub fn set_frozen(&self, frozen: bool) {
        self.shared.frozen.send_replace(frozen);
        self.shared.hanging.send_replace(frozen);
    }

    /// Answers `401 Unauthorized` to every request without
    /// `Authorization: Bearer TOKEN` (a token the API server does not
    /// accept: expired, revoked, another cluster's).
    pub fn require_token(&self, token: &str) {
        self.shared.lock().access.token = Some(token.to_owned());
    }

    /// Answers `403 Forbidden` to lists and watches of `kind`, as RBAC
    /// does when the client's role does not grant them.
    pub fn forbid(&self, kind: Kind) {
        self.shared.lock().access.forbidden.push(kind);
    }

    /// Lets every client in again (undoes [`Self::require_token`] and
    /// [`Self::forbid`]).
    pub fn allow_all(&self) {
        self.shared.lock().access = Access::default();
    }

    /// How often watches that allow bookmarks get one.
    pub fn set_bookmark_interval(&self, d: Duration) {
        self.shared.lock().bookmark_interval = d;
    }

    /// Goes down as a killed API server does: the port refuses connections
    /// and every open one (watches, kept-alive requests) is cut.
    pub fn stop(&mut self) {
        self.accept.abort();
        for c in self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            c.abort();
        }
        self.shared.drop_epoch.send_modify(|e| *e += 1);
    }

    /// Comes back on the same port with a fresh watch cache: the objects
    /// are kept (etcd), but watches from a resourceVersion before the
    /// restart get `410 Gone`, as from a new kube-apiserver.
    pub async fn restart(&mut self) -> std::io::Result<()> {
        self.compact();
        let listener = TcpListener::bind(self.addr).await?;
        self.accept = accept_loop(listener, self.shared.clone());
        Ok(())
    }

    /// Forgets the history: watches and continues from an older
    /// resourceVersion get `410 Gone`.
    pub fn compact(&self) {
        let mut inner = self.shared.lock();
        inner.compacted_rv = inner.rv;
        inner.history.clear();
    }

    /// What the server was asked so far.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    json_text(status, v.to_string())
}

fn json_text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(code, &status_object(code.as_u16(), reason, message))
}

fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// kube-apiserver's answer to a client it does not let in: 401 without
/// the token it requires (before anything else, discovery included), 403
/// for a kind the client may not read.
fn refused(shared: &Shared, req: &Request<Incoming>) -> Option<Response<Body>> {
    let inner = shared.lock();
    if let Some(token) = &inner.access.token {
        let given = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(token.as_str()) {
            return Some(status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"));
        }
    }
    let route = route(req.uri().path())?;
    if !inner.access.forbidden.contains(&route.kind) {
        return None;
    }
    let verb = if query(req).contains_key("watch") {
        "watch"
    } else {
        "list"
    };
    let message = format!(
        "{} is forbidden: User \"system:serviceaccount:kube-system:proxyd\" cannot {verb} resource \"{}\" \
         in API group \"{}\" at the cluster scope",
        route.kind.plural(),
        route.kind.plural(),
        route.kind.api_version().rsplit_once('/').map_or("", |(g, _)| g),
    );
    Some(status(StatusCode::FORBIDDEN, "Forbidden", &message))
}

struct Route {
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
}

fn route(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (kinds, rest): (&[Kind], _) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (&[Kind::Service, Kind::Pod, Kind::Node], rest),
        ["apis", "discovery.k8s.io", "v1", rest @ ..] => (&[Kind::EndpointSlice], rest),
        ["apis", "networking.k8s.io", "v1", rest @ ..] => (&[Kind::ServiceCidr], rest),
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => (&[Kind::Lease], rest),
        ["apis", "resource.k8s.io", "v1", rest @ ..] => (&[Kind::ResourceClaim], rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let kind = *kinds.iter().find(|k| rest.first() == Some(&k.plural()))?;
    if namespace.is_some() && !kind.namespaced() {
        return None;
    }
    match rest {
        [plural] if *plural == kind.plural() => Some(Route {
            kind,
            namespace,
            name: None,
        }),
        [plural, name] if *plural == kind.plural() && (namespace.is_some() || !kind.namespaced()) => Some(Route {
            kind,
            namespace,
            name: Some(name.to_string()),
        }),
        _ => None,
    }
}

fn discovery(path: &str) -> Option<Value> {
    let resource = |kind: Kind| {
        json!({"name": kind.plural(), "singularName": "", "namespaced": kind.namespaced(), "kind": kind.name(),
               "verbs": ["create", "delete", "get", "list", "update", "watch"]})
    };
    Some(match path.trim_end_matches('/') {
        "/version" => json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake"}),
        "/api" => json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
        "/apis" => json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
            "name": "discovery.k8s.io",
            "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"}}, {
            "name": "networking.k8s.io",
            "versions": [{"groupVersion": "networking.k8s.io/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "networking.k8s.io/v1", "version": "v1"}}]}),
        "/api/v1" => json!({"kind": "APIResourceList", "groupVersion": "v1",
            "resources": [resource(Kind::Service), resource(Kind::Pod), resource(Kind::Node)]}),
        "/apis/discovery.k8s.io" => json!({"kind": "APIGroup", "apiVersion": "v1", "name": "discovery.k8s.io",
            "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"}}),
        "/apis/discovery.k8s.io/v1" => json!({"kind": "APIResourceList", "groupVersion": "discovery.k8s.io/v1",
            "resources": [resource(Kind::EndpointSlice)]}),
        "/apis/networking.k8s.io" => json!({"kind": "APIGroup", "apiVersion": "v1", "name": "networking.k8s.io",
            "versions": [{"groupVersion": "networking.k8s.io/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "networking.k8s.io/v1", "version": "v1"}}),
        "/apis/networking.k8s.io/v1" => json!({"kind": "APIResourceList", "groupVersion": "networking.k8s.io/v1",
            "resources": [resource(Kind::ServiceCidr)]}),
        "/apis/coordination.k8s.io/v1" => json!({"kind": "APIResourceList", "groupVersion": "coordination.k8s.io/v1",
            "resources": [resource(Kind::Lease)]}),
        "/apis/resource.k8s.io/v1" => json!({"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1",
            "resources": [resource(Kind::ResourceClaim)]}),
        _ => return None,
    })
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
                .map(|(k, v)| (decode(k), decode(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// Percent-decoding for query values (`%21` is `!`, `+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let mut hanging = shared.hanging.subscribe();
    while *hanging.borrow_and_update() {
        if hanging.changed().await.is_err() {
            break;
        }
    }
    let delay = shared.lock().faults.delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(refused) = refused(&shared, &req) {
        return refused;
    }
    let path = req.uri().path().to_owned();
    if req.method() == Method::GET
        && let Some(v) = discovery(&path)
    {
        return json_response(StatusCode::OK, &v);
    }
    let Some(route) = route(&path) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find {path}"),
        );
    };
    let q = query(&req);
    let selector = match Selector::parse(q.get("labelSelector").map_or("", String::as_str))
        .and_then(|s| s.with_fields(q.get("fieldSelector").map_or("", String::as_str)))
    {
        Ok(s) => s,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e),
    };
    match (req.method().clone(), &route.name) {
        (Method::GET, Some(name)) => {
            let key = (route.kind, route.namespace.clone().unwrap_or_default(), name.clone());
            match shared.lock().objects.get(&key) {
                Some(obj) => json_response(StatusCode::OK, &obj.value),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{} {name:?} not found", route.kind.plural()),
                ),
            }
        }
        (Method::GET, None) if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) => {
            watch_response(shared, &route, selector, &q)
        }
        (Method::GET, None) => list_response(&shared, &route, &selector, &q),
        (Method::POST, None) | (Method::PUT, Some(_)) => {
            shared.lock().stats.writes += 1;
            let create = req.method() == Method::POST;
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
            };
            let mut obj: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
            };
            obj["kind"] = json!(route.kind.name());
            if let Some(ns) = &route.namespace {
                obj["metadata"]["namespace"] = json!(ns);
            }
            match shared.write(obj, Some(!create)) {
                Ok(v) => json_response(if create { StatusCode::CREATED } else { StatusCode::OK }, &v),
                Err(WriteError::AlreadyExists) => status(StatusCode::CONFLICT, "AlreadyExists", "already exists"),
                Err(WriteError::NotFound) => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
                Err(WriteError::Conflict) => status(
                    StatusCode::CONFLICT,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version and try again",
                ),
                Err(e) => status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &format!("{e:?}")),
            }
        }
        (Method::DELETE, Some(name)) => {
            shared.lock().stats.writes += 1;
            match shared.delete(route.kind, route.namespace.as_deref().unwrap_or_default(), name) {
                Ok(v) => json_response(StatusCode::OK, &v),
                Err(_) => status(StatusCode::NOT_FOUND, "NotFound", "not found"),
            }
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "method not allowed"),
    }
}

/// Five lowercase letters and digits from `n`, as the API server's
/// generated names end.
fn generated_suffix(n: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = n.wrapping_mul(2_654_435_761);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn in_scope(route: &Route, kind: Kind, ns: &str) -> bool {
    kind == route.kind && route.namespace.as_deref().is_none_or(|want| want == ns)
}

fn list_response(shared: &Shared, route: &Route, selector: &Selector, q: &HashMap<String, String>) -> Response<Body> {
    let mut inner = shared.lock();
    inner.stats.lists += 1;
    if inner.take_fault(|f| &mut f.fail_lists) {
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected list failure",
        );
    }
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let (token, snapshot) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            inner.stats.continued_lists += 1;
            if inner.take_fault(|f| &mut f.fail_continues) {
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "injected failure mid-list",
                );
            }
            let compacted = inner.compacted_rv;
            match inner.snapshots.remove(token) {
                Some(s) if s.rv >= compacted => (token.clone(), s),
                _ => {
                    inner.stats.faults += 1;
                    return status(
                        StatusCode::GONE,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result.",
                    );
                }
            }
        }
        None => {
            let items = inner
                .objects
                .iter()
                .filter(|((k, ns, _), v)| in_scope(route, *k, ns) && selector.matches(&v.value))
                .map(|(_, v)| Arc::clone(v))
                .collect();
            inner.next_token += 1;
            (format!("page-{}", inner.next_token), Snapshot { rv: inner.rv, items })
        }
    };
    let Snapshot { rv, mut items } = snapshot;
    let (page, rest): (Vec<Arc<Stored>>, _) = if limit > 0 && items.len() > limit {
        (items.drain(..limit).collect(), items)
    } else {
        (items.into(), std::collections::VecDeque::new())
    };
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if !rest.is_empty() {
        metadata["continue"] = json!(token);
        inner.snapshots.insert(token, Snapshot { rv, items: rest });
    }
    drop(inner);
    let head = json!({"kind": format!("{}List", route.kind.name()), "apiVersion": route.kind.api_version(),
                      "metadata": metadata});
    // The head's fields, then the stored items' JSON as it is.
    let head = head.to_string();
    let mut body = String::with_capacity(head.len() + 12 + page.iter().map(|o| o.json.len() + 1).sum::<usize>());
    body.push_str(&head[..head.len() - 1]);
    body.push_str(",\"items\":[");
    for (i, o) in page.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&o.json);
    }
    body.push_str("]}");
    json_text(StatusCode::OK, body)
}

/// One watch event, written as kube-apiserver writes it: `type` before
/// `object` (Go's encoder keeps the struct's field order; a JSON map here
/// would sort `object` first).
fn event_line(ty: &str, object: &Value) -> Bytes {
    let line = format!("{{\"type\":{},\"object\":{object}}}\n", json!(ty));
    Bytes::from(line)
}

/// What a selector-filtered watch shows of a change, if anything.
fn as_seen(change: &Change, selector: &Selector) -> Option<&'static str> {
    let now = selector.matches(&change.object);
    let before = change.previous.as_ref().is_some_and(|p| selector.matches(p));
    match (change.ty, before, now) {
        ("ADDED", _, true) => Some("ADDED"),
        ("MODIFIED", true, true) => Some("MODIFIED"),
        ("MODIFIED", true, false) => Some("DELETED"),
        ("MODIFIED", false, true) => Some("ADDED"),
        ("DELETED", _, _) if before || now => Some("DELETED"),
        _ => None,
    }
}

fn watch_response(
    shared: Arc<Shared>,
    route: &Route,
    selector: Selector,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let bookmarks = matches!(q.get("allowWatchBookmarks").map(String::as_str), Some("true" | "1"));
    let since: Option<u64> = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .filter(|v| *v != 0);
    let (kind, namespace) = (route.kind, route.namespace.clone());

    let mut inner = shared.lock();
    inner.stats.watches += 1;
    let injected = inner.take_fault(|f| &mut f.expire_watches);
    let too_old = since.is_some_and(|s| s < inner.compacted_rv);
    if too_old && !injected {
        inner.stats.faults += 1;
    }
    let mut first: Vec<Bytes> = Vec::new();
    let mut live = None;
    if injected || too_old {
        let msg = format!(
            "too old resource version: {} ({})",
            since.unwrap_or(0),
            inner.compacted_rv
        );
        first.push(event_line("ERROR", &status_object(410, "Expired", &msg)));
    } else {
        let scope = Route {
            kind,
            namespace: namespace.clone(),
            name: None,
        };
        match since {
            // No resourceVersion: synthetic ADDED for everything, then changes.
            None => {
                for ((k, ns, _), obj) in &inner.objects {
                    if in_scope(&scope, *k, ns) && selector.matches(&obj.value) {
                        first.push(event_line("ADDED", &obj.value));
                    }
                }
            }
            Some(since) => {
                for c in inner
                    .history
                    .iter()
                    .filter(|c| c.rv > since && in_scope(&scope, c.kind, &c.namespace))
                {
                    if let Some(ty) = as_seen(c, &selector) {
                        first.push(event_line(ty, &c.object));
                    }
                }
            }
        }
        live = Some(shared.changes.subscribe());
    }
    let bookmark_every = inner.bookmark_interval;
    drop(inner);

    let mut drops = shared.drop_epoch.subscribe();
    drops.mark_unchanged();
    // A drop is immediate: no change recorded after it goes out on this
    // stream, even if the stream has not noticed the drop yet.
    let epoch = *drops.borrow();
    let shared2 = shared.clone();
    tokio::spawn(async move {
        for line in first {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let Some(mut live) = live else { return };
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(3600)));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(bookmark_every);
        tick.tick().await;
        loop {
            let line = tokio::select! {
                biased;
                () = &mut deadline => return,
                _ = drops.changed() => return,
                _ = tick.tick(), if bookmarks => {
                    let rv = {
                        let mut inner = shared2.lock();
                        inner.stats.bookmarks += 1;
                        inner.rv
                    };
                    event_line("BOOKMARK", &json!({"kind": kind.name(), "apiVersion": kind.api_version(),
                                                  "metadata": {"resourceVersion": rv.to_string()}}))
                }
                change = live.recv() => match change {
                    Ok(_) if *drops.borrow() != epoch => return,
                    Ok(c) => {
                        let scope = Route { kind, namespace: namespace.clone(), name: None };
                        match as_seen(&c, &selector).filter(|_| in_scope(&scope, c.kind, &c.namespace)) {
                            Some(ty) => event_line(ty, &c.object),
                            None => continue,
                        }
                    }
                    // Lagged or closed: end the watch; the client resumes
                    // from its last resourceVersion out of the history.
                    Err(_) => return,
                },
            };
            if tx.send(line).await.is_err() {
                return;
            }
        }
    });

    let frozen = shared.frozen.subscribe();
    let stream = futures::stream::unfold((rx, frozen), |(mut rx, mut frozen)| async move {
        let line = rx.recv().await;
        // A frozen server holds what it would send, the end of the watch
        // included.
        if frozen.wait_for(|f| !*f).await.is_err() {
            return None;
        }
        Some((Ok::<_, Infallible>(Frame::data(line?)), (rx, frozen)))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// A TCP forwarder on loopback, as a load balancer or a virtual IP in
/// front of two API servers: each new connection goes to the current
/// backend; connections already made stay where they are.
pub struct Switch {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    backend: std::sync::Arc<std::sync::Mutex<std::net::SocketAddr>>,
}

impl Switch {
    /// Listens on an ephemeral port of 127.0.0.1, forwarding to `backend`;
    /// the forwarding runs on the caller's runtime.
    pub async fn start(backend: std::net::SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let backend = std::sync::Arc::new(std::sync::Mutex::new(backend));
        let current = backend.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = *current.lock().unwrap_or_else(|e| e.into_inner());
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Ok(Self { addr, backend })
    }

    /// New connections go to `backend` from now on.
    pub fn switch_to(&self, backend: std::net::SocketAddr) {
        *self.backend.lock().unwrap_or_else(|e| e.into_inner()) = backend;
    }
}
