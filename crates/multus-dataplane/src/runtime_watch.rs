//! Following the container runtime between syncs, so that a re-created
//! sandbox, or a runtime that is back, is looked at at once rather than at
//! the next retry or periodic sync:
//!
//! * sandbox events, where the runtime streams them (CRI
//!   `GetContainerEvents`: containerd 1.7 and later, CRI-O): each wakes a
//!   sync, which lists the sandboxes and programs pods whose namespace
//!   moved;
//! * the runtime's socket, where it does not (containerd 1.6 answers
//!   `UNIMPLEMENTED`): a runtime that went away and answers again (its
//!   socket back, or replaced by a restart) wakes a sync.
//!
//! Every sync lists the sandboxes anyway; this only makes it sooner.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cri_api::v1::{ContainerEventResponse, GetEventsRequest, VersionRequest};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::cri::CriResolver;

/// How often a runtime that does not answer, or its socket, is looked at.
const POLL: Duration = Duration::from_millis(250);

/// Whether an event is about a pod sandbox (not one of its containers):
/// the runtime names the sandbox as the event's container.
fn is_sandbox_event(event: &ContainerEventResponse) -> bool {
    event
        .pod_sandbox_status
        .as_ref()
        .is_some_and(|s| s.id == event.container_id)
}

/// The socket's identity: a restarted runtime binds a new one.
fn socket_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Follows `runtime` until `shutdown`, waking `wake` when a sync should
/// look at the sandboxes again.
pub async fn follow_runtime(runtime: CriResolver, wake: Arc<Notify>, shutdown: CancellationToken) {
    let socket = runtime.socket();
    let mut streams_events = true;
    // At start the first sync looks anyway; afterwards, the runtime
    // answering again is always news.
    let mut wake_when_up = false;
    loop {
        // Until the runtime answers.
        let mut client = loop {
            if let Ok(mut c) = runtime.connect().await
                && c.version(VersionRequest::default()).await.is_ok()
            {
                break c;
            }
            wake_when_up = true;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(POLL) => {}
            }
        };
        if wake_when_up {
            tracing::debug!(endpoint = %runtime.endpoint(), "the container runtime answers: syncing");
            wake.notify_one();
        }
        wake_when_up = true;
        let bound = socket_id(&socket);
        if streams_events {
            match client.get_container_events(GetEventsRequest::default()).await {
                Ok(stream) => {
                    tracing::info!(endpoint = %runtime.endpoint(), "following the container runtime's sandbox events");
                    let mut stream = stream.into_inner();
                    loop {
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            event = stream.message() => match event {
                                Ok(Some(e)) => if is_sandbox_event(&e) { wake.notify_one() },
                                // The runtime went away.
                                Ok(None) | Err(_) => break,
                            }
                        }
                    }
                }
                Err(s) if s.code() == tonic::Code::Unimplemented => {
                    tracing::info!(
                        endpoint = %runtime.endpoint(),
                        "the container runtime does not stream sandbox events (containerd before 1.7): \
                         sandboxes are looked at again at every sync"
                    );
                    streams_events = false;
                }
                Err(_) => {}
            }
            if streams_events {
                // The stream ended or could not start: the runtime went
                // away, or will be asked again shortly.
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(POLL) => {}
                }
                continue;
            }
        }
        // No events: a runtime that goes away removes or replaces its
        // socket.
        while socket_id(&socket) == bound {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cri_api::v1::PodSandboxStatus;

    use super::*;

    #[test]
    fn only_sandbox_events_count() {
        let event = |container: &str, sandbox: Option<&str>| ContainerEventResponse {
            container_id: container.into(),
            pod_sandbox_status: sandbox.map(|id| PodSandboxStatus {
                id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_sandbox_event(&event("sb1", Some("sb1"))));
        assert!(
            !is_sandbox_event(&event("c1", Some("sb1"))),
            "a container of the sandbox"
        );
        assert!(!is_sandbox_event(&event("c1", None)));
    }
}
