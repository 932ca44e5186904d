//! Finding a pod's network namespace through the CRI v1 runtime API
//! (containerd, CRI-O) over its unix socket.
//!
//! The pod's ready sandbox (the newest, after a restart) is looked up by
//! the kubelet's labels; its verbose status gives the namespace: the
//! runtime spec's network namespace path (containerd) or the sandbox's pid
//! (`/proc/PID/ns/net`), under `--host-prefix` when the host's paths are
//! mounted elsewhere. A runtime that does not answer is reported as
//! unavailable (retried with backoff), never fatal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use informer_glue::multus::PodInfo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ListPodSandboxRequest, PodSandboxFilter, PodSandboxState, PodSandboxStateValue, PodSandboxStatusRequest,
};
use serde_json::Value;
use tonic::transport::{Channel, Endpoint};

use super::resolver::{PodNetnsResolver, ResolveError};

/// The sockets tried when no `--container-runtime-endpoint` is given.
pub const DEFAULT_ENDPOINTS: [&str; 2] = [
    "unix:///run/containerd/containerd.sock",
    "unix:///var/run/crio/crio.sock",
];

/// How long one runtime call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The socket path of a `unix://` endpoint.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, String> {
    endpoint
        .strip_prefix("unix://")
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .ok_or_else(|| format!("{endpoint:?} is not a unix:///path endpoint"))
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
pub fn netns_from_info(info: &HashMap<String, String>) -> Result<PathBuf, String> {
    let text = info
        .get("info")
        .ok_or("the sandbox status has no verbose \"info\" (is the runtime CRI v1?)")?;
    let v: Value = serde_json::from_str(text).map_err(|e| format!("the sandbox's verbose info is not JSON: {e}"))?;
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
        _ => Err("the sandbox's verbose info names no network namespace path and no pid".into()),
    }
}

/// `--container-runtime-endpoint`: the CRI runtime finds the namespaces.
pub struct CriResolver {
    endpoint: String,
    host_prefix: PathBuf,
    client: Option<RuntimeServiceClient<Channel>>,
}

impl CriResolver {
    /// A resolver asking the runtime at `endpoint` (`unix:///…`); paths
    /// it returns are read under `host_prefix` (empty: as they are).
    pub fn new(endpoint: &str, host_prefix: &Path) -> Result<Self, String> {
        socket_path(endpoint)?;
        Ok(Self {
            endpoint: endpoint.to_owned(),
            host_prefix: host_prefix.to_owned(),
            client: None,
        })
    }

    /// The endpoint it asks.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn connect(&self) -> Result<RuntimeServiceClient<Channel>, String> {
        let socket = under(&self.host_prefix, &socket_path(&self.endpoint)?);
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
            .map_err(|e| format!("cannot connect to {}: {e}", self.endpoint))?;
        Ok(RuntimeServiceClient::new(channel))
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
            if let Ok(path) = status
                .map_err(|s| s.to_string())
                .and_then(|r| netns_from_info(&r.into_inner().info))
            {
                let seen = under(&self.host_prefix, &path);
                if seen.exists() {
                    out.push(seen);
                }
            }
        }
        Ok(out)
    }

    /// Looks the pod's namespace up.
    pub async fn resolve_async(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        let mut client = match self.client.clone() {
            Some(c) => c,
            None => {
                let c = self.connect().await.map_err(ResolveError::Unavailable)?;
                self.client = Some(c.clone());
                c
            }
        };
        let unavailable = |client: &mut Option<_>, what: &str, status: tonic::Status| {
            // Dial again next time: the runtime may have restarted.
            *client = None;
            ResolveError::Unavailable(format!("{what}: {}", status.message()))
        };
        let filter = PodSandboxFilter {
            id: String::new(),
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxReady as i32,
            }),
            label_selector: HashMap::from([
                ("io.kubernetes.pod.namespace".to_owned(), pod.namespace.clone()),
                ("io.kubernetes.pod.name".to_owned(), pod.name.clone()),
            ]),
        };
        let items = match client
            .list_pod_sandbox(ListPodSandboxRequest { filter: Some(filter) })
            .await
        {
            Ok(r) => r.into_inner().items,
            Err(s) => return Err(unavailable(&mut self.client, "ListPodSandbox", s)),
        };
        // After a restart the newest ready sandbox is the pod's.
        let Some(sandbox) = items.into_iter().max_by_key(|s| s.created_at) else {
            return Err(ResolveError::Gone(format!(
                "the runtime at {} has no ready sandbox for it",
                self.endpoint
            )));
        };
        let status = client
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.id.clone(),
                verbose: true,
            })
            .await;
        let info = match status {
            Ok(r) => r.into_inner().info,
            Err(s) if s.code() == tonic::Code::NotFound => {
                return Err(ResolveError::Gone(format!("sandbox {} is gone", sandbox.id)));
            }
            Err(s) => return Err(unavailable(&mut self.client, "PodSandboxStatus", s)),
        };
        let path = netns_from_info(&info).map_err(|e| ResolveError::Gone(format!("sandbox {}: {e}", sandbox.id)))?;
        let seen = under(&self.host_prefix, &path);
        if seen.exists() {
            Ok(seen)
        } else {
            Err(ResolveError::Gone(format!(
                "sandbox {}: {} does not exist",
                sandbox.id,
                seen.display()
            )))
        }
    }
}

impl PodNetnsResolver for CriResolver {
    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        // The sync runs on the runtime's worker threads; the call waits
        // for the runtime's answer there.
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| ResolveError::Unavailable(format!("no async runtime to ask the container runtime: {e}")))?;
        tokio::task::block_in_place(|| handle.block_on(self.resolve_async(pod)))
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
        assert!(netns_from_info(&info("{not json")).unwrap_err().contains("not JSON"));
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
