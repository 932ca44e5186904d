//! A CRI v1 runtime service for tests: a real gRPC server on a unix
//! socket, as containerd and CRI-O serve it, holding pod sandboxes whose
//! verbose status names their network namespace.
//!
//! Only what a pod-namespace resolver asks is served (`Version`,
//! `ListPodSandbox`, `PodSandboxStatus`, and `GetContainerEvents` as
//! containerd 1.7+ and CRI-O stream it: a sandbox event for each sandbox
//! put or removed); every other call answers `UNIMPLEMENTED`, and so does
//! `GetContainerEvents` after [`FakeCri::without_events`] (containerd
//! 1.6). Faults: sandboxes come and go ([`FakeCri::put`],
//! [`FakeCri::remove`]), their info can be malformed ([`Sandbox::info`]),
//! and the runtime can be stopped and started again on the same socket
//! ([`FakeCri::stop`], [`FakeCri::start`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use cri_api::v1;
use cri_api::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{UnboundedReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

/// One pod sandbox.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// Sandbox id.
    pub id: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid (the kubelet's `io.kubernetes.pod.uid` label); empty:
    /// no such label.
    pub uid: String,
    /// Creation time (nanoseconds): the newest ready one is the pod's.
    pub created_at: i64,
    /// Ready (else not ready).
    pub ready: bool,
    /// The verbose `info` JSON of its status.
    pub info: String,
}

impl Sandbox {
    /// A ready sandbox whose info names `netns` the way containerd does.
    pub fn containerd(id: &str, namespace: &str, name: &str, created_at: i64, netns: &Path) -> Self {
        let info = serde_json::json!({
            "pid": 1,
            "runtimeSpec": {"linux": {"namespaces": [
                {"type": "pid"},
                {"type": "network", "path": netns.display().to_string()},
            ]}},
        });
        Self {
            id: id.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: String::new(),
            created_at,
            ready: true,
            info: info.to_string(),
        }
    }

    /// The same sandbox, labelled with the pod's uid.
    pub fn with_uid(mut self, uid: &str) -> Self {
        self.uid = uid.into();
        self
    }

    fn labels(&self) -> HashMap<String, String> {
        let mut labels = HashMap::from([
            ("io.kubernetes.pod.namespace".to_owned(), self.namespace.clone()),
            ("io.kubernetes.pod.name".to_owned(), self.name.clone()),
        ]);
        if !self.uid.is_empty() {
            labels.insert("io.kubernetes.pod.uid".to_owned(), self.uid.clone());
        }
        labels
    }

    /// The event a runtime streams when this sandbox changes.
    fn event(&self, kind: v1::ContainerEventType) -> v1::ContainerEventResponse {
        v1::ContainerEventResponse {
            container_id: self.id.clone(),
            container_event_type: kind as i32,
            created_at: self.created_at,
            pod_sandbox_status: Some(v1::PodSandboxStatus {
                id: self.id.clone(),
                created_at: self.created_at,
                ..Default::default()
            }),
            containers_statuses: Vec::new(),
        }
    }
}

struct State {
    sandboxes: Vec<Sandbox>,
    /// `GetContainerEvents` is served.
    streams_events: bool,
    /// The open event streams.
    subscribers: Vec<mpsc::UnboundedSender<Result<v1::ContainerEventResponse, Status>>>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            sandboxes: Vec::new(),
            streams_events: true,
            subscribers: Vec::new(),
        }
    }
}

impl State {
    fn publish(&mut self, event: v1::ContainerEventResponse) {
        self.subscribers.retain(|s| s.send(Ok(event.clone())).is_ok());
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone)]
struct Service(Arc<Mutex<State>>);

/// The fake runtime.
pub struct FakeCri {
    socket: PathBuf,
    state: Arc<Mutex<State>>,
    stop: Option<oneshot::Sender<()>>,
}

impl FakeCri {
    /// A runtime that will serve on `socket` once started.
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_owned(),
            state: Arc::default(),
            stop: None,
        }
    }

    /// The endpoint clients use: `unix:///path`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Starts serving (on the current tokio runtime).
    pub fn start(&mut self) -> std::io::Result<()> {
        let _ = std::fs::remove_file(&self.socket);
        let listener = UnixListener::bind(&self.socket)?;
        let (tx, rx) = oneshot::channel();
        self.stop = Some(tx);
        let service = RuntimeServiceServer::new(Service(self.state.clone()));
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(())
    }

    /// A runtime that answers `GetContainerEvents` with `UNIMPLEMENTED`,
    /// as containerd 1.6 does.
    pub fn without_events(self) -> Self {
        lock(&self.state).streams_events = false;
        self
    }

    /// Stops serving; the socket is removed and event streams end (as when
    /// the runtime is down).
    pub fn stop(&mut self) {
        lock(&self.state).subscribers.clear();
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Adds or replaces (by id) a sandbox, streaming its event.
    pub fn put(&self, sandbox: Sandbox) {
        let mut s = lock(&self.state);
        s.sandboxes.retain(|x| x.id != sandbox.id);
        let kind = if sandbox.ready {
            v1::ContainerEventType::ContainerStartedEvent
        } else {
            v1::ContainerEventType::ContainerStoppedEvent
        };
        let event = sandbox.event(kind);
        s.sandboxes.push(sandbox);
        s.publish(event);
    }

    /// Removes a sandbox, streaming its event.
    pub fn remove(&self, id: &str) {
        let mut s = lock(&self.state);
        let gone: Vec<Sandbox> = s.sandboxes.iter().filter(|x| x.id == id).cloned().collect();
        s.sandboxes.retain(|x| x.id != id);
        for sb in gone {
            s.publish(sb.event(v1::ContainerEventType::ContainerDeletedEvent));
        }
    }
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.stop();
    }
}

type EventStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for Service {
    type GetContainerEventsStream = EventStream;

    async fn version(&self, _: Request<v1::VersionRequest>) -> Result<Response<v1::VersionResponse>, Status> {
        Ok(Response::new(v1::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake-cri".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<v1::ListPodSandboxRequest>,
    ) -> Result<Response<v1::ListPodSandboxResponse>, Status> {
        let filter = request.into_inner().filter.unwrap_or_default();
        let want_ready = filter
            .state
            .map(|s| s.state == v1::PodSandboxState::SandboxReady as i32);
        let items = lock(&self.0)
            .sandboxes
            .iter()
            .filter(|s| want_ready.is_none_or(|r| r == s.ready))
            .filter(|s| filter.id.is_empty() || filter.id == s.id)
            .filter(|s| {
                let l = s.labels();
                filter.label_selector.iter().all(|(k, v)| l.get(k) == Some(v))
            })
            .map(|s| v1::PodSandbox {
                id: s.id.clone(),
                metadata: Some(v1::PodSandboxMetadata {
                    name: s.name.clone(),
                    uid: s.uid.clone(),
                    namespace: s.namespace.clone(),
                    attempt: 0,
                }),
                state: if s.ready {
                    v1::PodSandboxState::SandboxReady as i32
                } else {
                    v1::PodSandboxState::SandboxNotready as i32
                },
                created_at: s.created_at,
                labels: s.labels(),
                annotations: HashMap::new(),
                runtime_handler: String::new(),
            })
            .collect();
        Ok(Response::new(v1::ListPodSandboxResponse { items }))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<v1::PodSandboxStatusRequest>,
    ) -> Result<Response<v1::PodSandboxStatusResponse>, Status> {
        let req = request.into_inner();
        let state = lock(&self.0);
        let Some(s) = state.sandboxes.iter().find(|s| s.id == req.pod_sandbox_id) else {
            return Err(Status::not_found(format!("sandbox {} not found", req.pod_sandbox_id)));
        };
        let info = if req.verbose {
            HashMap::from([("info".to_owned(), s.info.clone())])
        } else {
            HashMap::new()
        };
        Ok(Response::new(v1::PodSandboxStatusResponse {
            status: Some(v1::PodSandboxStatus {
                id: s.id.clone(),
                created_at: s.created_at,
                ..Default::default()
            }),
            info,
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        _: Request<v1::RunPodSandboxRequest>,
    ) -> Result<Response<v1::RunPodSandboxResponse>, Status> {
        Err(Status::unimplemented("run_pod_sandbox: not part of the fake runtime"))
    }
    async fn stop_pod_sandbox(
        &self,
        _: Request<v1::StopPodSandboxRequest>,
    ) -> Result<Response<v1::StopPodSandboxResponse>, Status> {
        Err(Status::unimplemented("stop_pod_sandbox: not part of the fake runtime"))
    }
    async fn remove_pod_sandbox(
        &self,
        _: Request<v1::RemovePodSandboxRequest>,
    ) -> Result<Response<v1::RemovePodSandboxResponse>, Status> {
        Err(Status::unimplemented(
            "remove_pod_sandbox: not part of the fake runtime",
        ))
    }
    async fn get_container_events(
        &self,
        _: Request<v1::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let mut state = lock(&self.0);
        if !state.streams_events {
            return Err(Status::unimplemented(
                "get_container_events: not served (as containerd 1.6)",
            ));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        state.subscribers.push(tx);
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}
