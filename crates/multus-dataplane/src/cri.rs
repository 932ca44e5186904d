//! Finding a pod's network namespace through the CRI v1 runtime API
//! (containerd, CRI-O) over its unix socket.
//!
//! Each sync lists the sandboxes once; a pod's ready sandbox (the newest,
//! after a restart) is the one whose kubelet labels name the pod's
//! namespace, name and uid; its verbose status (asked once per sandbox)
//! gives the namespace: the runtime spec's network namespace path
//! (containerd) or the sandbox's pid (`/proc/PID/ns/net`), under
//! `--host-prefix` when the host's paths are mounted elsewhere. A runtime
//! that does not answer is reported as unavailable, once, with why (pods
//! wait for it; never fatal), and its return is said once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::{
    ListPodSandboxRequest, PodSandboxFilter, PodSandboxState, PodSandboxStateValue, PodSandboxStatusRequest,
};
use informer_glue::multus::PodInfo;
use serde_json::Value;
use tonic::transport::{Channel, Endpoint};

use crate::{PodNetnsResolver, ResolveError};

/// The sockets tried when no `--container-runtime-endpoint` is given.
pub const DEFAULT_ENDPOINTS: [&str; 2] = [
    "unix:///run/containerd/containerd.sock",
    "unix:///var/run/crio/crio.sock",
];

/// How long one runtime call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// An endpoint that is not a unix socket's (`unix:///path`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a unix:///path endpoint")]
pub struct NotUnixEndpoint(pub String);

/// Why a sandbox's verbose status names no network namespace.
#[derive(Debug, thiserror::Error)]
pub enum SandboxInfoError {
    /// No verbose `info` in the status.
    #[error("the sandbox status has no verbose \"info\" (is the runtime CRI v1?)")]
    NoInfo,
    /// The `info` is not JSON.
    #[error("the sandbox's verbose info is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// Neither a namespace path nor a process.
    #[error("the sandbox's verbose info names no network namespace path and no pid")]
    NoNamespace,
}

/// The socket path of a `unix://` endpoint.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, NotUnixEndpoint> {
    endpoint
        .strip_prefix("unix://")
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .ok_or_else(|| NotUnixEndpoint(endpoint.to_owned()))
}

/// The first default endpoint whose socket exists (under `host_prefix`),
/// else containerd's.
pub fn default_endpoint(host_prefix: &Path) -> String {
    DEFAULT_ENDPOINTS
        .iter()
        .find(|e| socket_path(e).is_ok_and(|p| under(host_prefix, &p).exists()))
        .unwrap_or(&DEFAULT_ENDPOINTS[0])
        .to_string()
}

/// `path` (absolute, on the host) as seen from here.
fn under(host_prefix: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix("/") {
        Ok(rel) if !host_prefix.as_os_str().is_empty() => host_prefix.join(rel),
        _ => path.to_owned(),
    }
}

/// The namespace file named in a sandbox's verbose info: the runtime
/// spec's network namespace path, else `/proc/PID/ns/net`.
pub fn netns_from_info(info: &HashMap<String, String>) -> Result<PathBuf, SandboxInfoError> {
    let text = info.get("info").ok_or(SandboxInfoError::NoInfo)?;
    let v: Value = serde_json::from_str(text)?;
    let namespaces = v
        .pointer("/runtimeSpec/linux/namespaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for ns in namespaces {
        if ns.get("type").and_then(Value::as_str) == Some("network")
            && let Some(path) = ns.get("path").and_then(Value::as_str).filter(|p| !p.is_empty())
        {
            return Ok(PathBuf::from(path));
        }
    }
    match v.get("pid").and_then(Value::as_u64) {
        Some(pid) if pid > 0 => Ok(PathBuf::from(format!("/proc/{pid}/ns/net"))),
        _ => Err(SandboxInfoError::NoNamespace),
    }
}

/// The kubelet's labels on a pod sandbox.
const LABEL_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const LABEL_NAME: &str = "io.kubernetes.pod.name";
const LABEL_UID: &str = "io.kubernetes.pod.uid";

/// One sandbox as `ListPodSandbox` shows it.
#[derive(Clone, Debug)]
struct Listed {
    id: String,
    namespace: String,
    name: String,
    uid: String,
    created_at: i64,
    ready: bool,
}

impl Listed {
    fn new(mut sb: cri_api::v1::PodSandbox) -> Self {
        let meta = sb.metadata.unwrap_or_default();
        let mut label = |key: &str, fallback: String| sb.labels.remove(key).unwrap_or(fallback);
        Self {
            namespace: label(LABEL_NAMESPACE, meta.namespace),
            name: label(LABEL_NAME, meta.name),
            uid: label(LABEL_UID, meta.uid),
            ready: sb.state == PodSandboxState::SandboxReady as i32,
            created_at: sb.created_at,
            id: sb.id,
        }
    }
}

/// An error and its sources, as one line: tonic's "transport error" alone
/// does not say that the socket is missing or refused the connection.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `--container-runtime-endpoint`: the CRI runtime finds the namespaces.
///
/// Each sync lists the sandboxes once ([`PodNetnsResolver::refresh`]); a
/// pod's namespace is then read from its newest ready sandbox whose labels
/// name the pod (its uid too, where the pod has one), asking the runtime
/// for a sandbox's status only the first time that sandbox is seen.
#[derive(Clone)]
pub struct CriResolver {
    endpoint: String,
    host_prefix: PathBuf,
    client: Option<RuntimeServiceClient<Channel>>,
    /// The sandboxes of the last list, or why it failed.
    listed: Result<Vec<Listed>, String>,
    /// Sandbox id -> the namespace its status named (a sandbox keeps its
    /// namespace for life).
    namespaces: HashMap<String, PathBuf>,
    /// Why the runtime cannot be asked, while it cannot: said once.
    down: Option<String>,
    /// The async runtime it was made in, whose I/O drives the gRPC calls
    /// the sync thread makes.
    runtime: Option<tokio::runtime::Handle>,
}

impl CriResolver {
    /// A resolver asking the runtime at `endpoint` (`unix:///…`); paths
    /// it returns are read under `host_prefix` (empty: as they are).
    pub fn new(endpoint: &str, host_prefix: &Path) -> Result<Self, NotUnixEndpoint> {
        socket_path(endpoint)?;
        Ok(Self {
            endpoint: endpoint.to_owned(),
            host_prefix: host_prefix.to_owned(),
            client: None,
            listed: Err("not listed yet".into()),
            namespaces: HashMap::new(),
            down: None,
            runtime: tokio::runtime::Handle::try_current().ok(),
        })
    }

    /// The endpoint it asks.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A path on the host (as the runtime names it), as seen from here.
    pub fn seen(&self, path: &Path) -> PathBuf {
        under(&self.host_prefix, path)
    }

    /// The socket, as seen from here.
    pub fn socket(&self) -> PathBuf {
        socket_path(&self.endpoint)
            .map(|p| under(&self.host_prefix, &p))
            .unwrap_or_default()
    }

    /// A client on a new connection; the error says why there is none
    /// (`connect unix:///…: No such file or directory (socket missing)`).
    pub async fn connect(&self) -> Result<RuntimeServiceClient<Channel>, String> {
        let socket = self.socket();
        if !socket.exists() {
            return Err(format!(
                "connect {}: No such file or directory (socket missing)",
                self.endpoint
            ));
        }
        // The URI is required by tonic but unused: the connector dials the
        // socket.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(CALL_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .connect_with_connector(tower::service_fn(move |_| {
                let socket = socket.clone();
                async move {
                    tokio::net::UnixStream::connect(socket)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }))
            .await
            .map_err(|e| format!("connect {}: {}", self.endpoint, error_chain(&e)))?;
        Ok(RuntimeServiceClient::new(channel))
    }

    async fn client(&mut self) -> Result<RuntimeServiceClient<Channel>, String> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let c = self.connect().await?;
        self.client = Some(c.clone());
        Ok(c)
    }

    /// The network namespace of every ready sandbox (for `cleanup
    /// --multus`); sandboxes whose info names none are skipped.
    pub async fn all_namespaces(&mut self) -> Result<Vec<PathBuf>, String> {
        let mut client = self.connect().await?;
        let filter = PodSandboxFilter {
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        };
        let items = client
            .list_pod_sandbox(ListPodSandboxRequest { filter: Some(filter) })
            .await
            .map_err(|s| format!("ListPodSandbox: {}", s.message()))?
            .into_inner()
            .items;
        let mut out = Vec::new();
        for sb in items {
            let status = client
                .pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: sb.id.clone(),
                    verbose: true,
                })
                .await;
            if let Some(path) = status.ok().and_then(|r| netns_from_info(&r.into_inner().info).ok()) {
                let seen = under(&self.host_prefix, &path);
                if seen.exists() {
                    out.push(seen);
                }
            }
        }
        Ok(out)
    }

    /// Lists the runtime's sandboxes (one `ListPodSandbox`): what the
    /// lookups until the next list read. A runtime that cannot be asked is
    /// warned about once, and its return said once.
    pub async fn list_async(&mut self) -> Result<(), ResolveError> {
        let listed = match self.client().await {
            Ok(mut client) => client
                .list_pod_sandbox(ListPodSandboxRequest { filter: None })
                .await
                .map(|r| r.into_inner().items)
                .map_err(|s| format!("ListPodSandbox: {}", s.message())),
            Err(why) => Err(why),
        };
        match listed {
            Ok(items) => {
                if self.down.take().is_some() {
                    tracing::info!(endpoint = %self.endpoint, "the container runtime answers again");
                }
                let items: Vec<Listed> = items.into_iter().map(Listed::new).collect();
                self.namespaces.retain(|id, _| items.iter().any(|s| s.id == *id));
                self.listed = Ok(items);
                Ok(())
            }
            Err(why) => {
                // Dial again next time: the runtime may have restarted.
                self.client = None;
                if self.down.is_none() {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        "the container runtime cannot be asked for pods' namespaces: {why}; \
                         pods not programmed yet wait for it, programmed ones keep their rules"
                    );
                } else {
                    tracing::debug!(endpoint = %self.endpoint, "the container runtime still cannot be asked: {why}");
                }
                self.down = Some(why.clone());
                self.listed = Err(why.clone());
                Err(ResolveError::Unavailable(why))
            }
        }
    }

    /// The pod's namespace from the last list (its sandbox's status asked
    /// the first time that sandbox is seen).
    pub async fn find_async(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        let listed = self
            .listed
            .as_ref()
            .map_err(|why| ResolveError::Unavailable(why.clone()))?;
        let named = || {
            listed
                .iter()
                .filter(|s| s.ready && s.namespace == pod.namespace && s.name == pod.name)
        };
        let same_pod = |s: &&Listed| pod.uid.as_ref().is_none_or(|uid| *uid == s.uid);
        // After a restart the newest ready sandbox is the pod's.
        let Some(sandbox) = named().filter(same_pod).max_by_key(|s| s.created_at) else {
            return Err(ResolveError::Gone(match (named().next(), &pod.uid) {
                (Some(other), Some(uid)) => format!(
                    "the runtime's ready sandbox {} for that name belongs to another pod (uid {:?}; this pod's is {uid:?})",
                    other.id, other.uid
                ),
                _ => format!("the runtime at {} has no ready sandbox for it", self.endpoint),
            }));
        };
        let id = sandbox.id.clone();
        let path = match self.namespaces.get(&id) {
            Some(p) => p.clone(),
            None => {
                let path = self.sandbox_namespace(&id).await?;
                self.namespaces.insert(id.clone(), path.clone());
                path
            }
        };
        let seen = under(&self.host_prefix, &path);
        if seen.exists() {
            Ok(seen)
        } else {
            Err(ResolveError::Gone(format!(
                "sandbox {id}: the pod's network namespace is gone ({} does not exist)",
                seen.display()
            )))
        }
    }

    /// The namespace a sandbox's verbose status names.
    async fn sandbox_namespace(&mut self, id: &str) -> Result<PathBuf, ResolveError> {
        let mut client = self.client().await.map_err(ResolveError::Unavailable)?;
        let status = client
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id.to_owned(),
                verbose: true,
            })
            .await;
        let info = match status {
            Ok(r) => r.into_inner().info,
            Err(s) if s.code() == tonic::Code::NotFound => {
                return Err(ResolveError::Gone(format!("sandbox {id} is gone")));
            }
            Err(s) => {
                self.client = None;
                return Err(ResolveError::Unavailable(format!("PodSandboxStatus: {}", s.message())));
            }
        };
        netns_from_info(&info).map_err(|e| ResolveError::Gone(format!("sandbox {id}: {e}")))
    }

    /// Lists, then looks the pod's namespace up (one pod on its own).
    pub async fn resolve_async(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        self.list_async().await?;
        self.find_async(pod).await
    }

    /// Runs `f` on this resolver from a sync: from the sync thread (no
    /// async runtime there) on the runtime it was made in; from a worker
    /// of a runtime, in place.
    fn block_on<T>(&mut self, f: impl AsyncFnOnce(&mut Self) -> Result<T, ResolveError>) -> Result<T, ResolveError> {
        if let Ok(here) = tokio::runtime::Handle::try_current() {
            return tokio::task::block_in_place(|| here.block_on(f(self)));
        }
        let Some(runtime) = self.runtime.clone() else {
            return Err(ResolveError::Unavailable(
                "no async runtime to ask the container runtime".into(),
            ));
        };
        runtime.block_on(f(self))
    }
}

impl PodNetnsResolver for CriResolver {
    fn refresh(&mut self) -> Result<(), ResolveError> {
        self.block_on(async |r| r.list_async().await)
    }

    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        self.block_on(async |r| r.find_async(pod).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(json: &str) -> HashMap<String, String> {
        HashMap::from([("info".to_owned(), json.to_owned())])
    }

    #[test]
    fn the_namespace_comes_from_the_spec_path_or_the_pid() {
        let containerd = info(
            r#"{"pid": 4242, "runtimeSpec": {"linux": {"namespaces": [
                {"type": "pid"}, {"type": "network", "path": "/var/run/netns/cni-1234"}]}}}"#,
        );
        assert_eq!(
            netns_from_info(&containerd).unwrap(),
            Path::new("/var/run/netns/cni-1234")
        );
        let crio = info(r#"{"pid": 4242, "runtimeSpec": {"linux": {"namespaces": [{"type": "network"}]}}}"#);
        assert_eq!(netns_from_info(&crio).unwrap(), Path::new("/proc/4242/ns/net"));
        assert!(
            netns_from_info(&info("{not json"))
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        assert!(netns_from_info(&info(r#"{"pid": 0}"#)).is_err());
        assert!(netns_from_info(&HashMap::new()).is_err());
    }

    #[test]
    fn endpoints_and_host_prefixes() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            Path::new("/run/containerd/containerd.sock")
        );
        assert!(socket_path("tcp://1.2.3.4:5").is_err());
        assert!(socket_path("unix://relative").is_err());
        assert_eq!(
            under(Path::new("/host"), Path::new("/proc/1/ns/net")),
            Path::new("/host/proc/1/ns/net")
        );
        assert_eq!(
            under(Path::new(""), Path::new("/proc/1/ns/net")),
            Path::new("/proc/1/ns/net")
        );
        assert!(CriResolver::new("http://x", Path::new("")).is_err());
    }
}
