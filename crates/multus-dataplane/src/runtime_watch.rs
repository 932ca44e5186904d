//! Following the container runtime between syncs, so that a re-created
//! sandbox, or a runtime that is back, is looked at at once rather than at
//! the next retry or periodic sync:
//!
//! * sandbox events, where the runtime streams them (CRI
//!   `GetContainerEvents`: containerd 1.7 and later, CRI-O): each wakes a
//!   sync, which lists the sandboxes and programs pods whose namespace
//!   moved;
//! * where it does not (containerd 1.6 answers `UNIMPLEMENTED`), the
//!   directories where runtimes keep pods' network namespaces as files
//!   (containerd `/run/netns` or `<state>/io.containerd.grpc.v1.cri/netns`,
//!   CRI-O and others `/var/run/netns`, and the directory of every
//!   namespace the runtime named): a namespace created or removed there (a
//!   sandbox made or gone) wakes a sync, through inotify;
//! * and the runtime's socket: a runtime that went away and answers again
//!   (its socket back, or replaced by a restart) wakes a sync.
//!
//! Every sync lists the sandboxes anyway; this only makes it sooner.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cri_api::v1::{ContainerEventResponse, GetEventsRequest, VersionRequest};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::cri::CriResolver;

/// How often a runtime that does not answer, or its socket, is looked at.
const POLL: Duration = Duration::from_millis(250);

/// How long after a namespace file appears or goes the sandboxes are
/// looked at every [`POLL`]: a runtime makes the namespace before the
/// sandbox's network is set up, and says nothing when it is ready.
const SETTLING: Duration = Duration::from_secs(3);

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

/// Where runtimes keep pods' network namespaces as files, as seen on the
/// host: containerd 1.x and CRI-O (`/var/run` is a link to `/run`), and
/// containerd 2 under its default state directory.
const NETNS_DIRS: [&str; 3] = [
    "/run/netns",
    "/var/run/netns",
    "/run/containerd/io.containerd.grpc.v1.cri/netns",
];

/// The directories holding network namespace files, watched for
/// namespaces made and removed; a directory that does not exist yet is
/// watched once it does.
struct NetnsDirs {
    events: inotify::EventStream<[u8; 4096]>,
    /// Directories to watch, and whether they are.
    dirs: Vec<(PathBuf, bool)>,
}

impl NetnsDirs {
    /// Watches `dirs` (those that exist now; the others as they appear).
    fn new(dirs: impl IntoIterator<Item = PathBuf>) -> std::io::Result<Self> {
        let events = inotify::Inotify::init()?.into_event_stream([0u8; 4096])?;
        let mut dirs: Vec<(PathBuf, bool)> = dirs.into_iter().map(|d| (d, false)).collect();
        dirs.sort();
        dirs.dedup();
        let mut this = Self { events, dirs };
        this.watch_new_dirs();
        Ok(this)
    }

    /// Starts watching the directories that appeared since the last look.
    fn watch_new_dirs(&mut self) {
        let mask = inotify::WatchMask::CREATE | inotify::WatchMask::DELETE | inotify::WatchMask::MOVED_TO;
        let mut watches = self.events.watches();
        for (dir, watched) in self.dirs.iter_mut().filter(|(_, w)| !*w) {
            if dir.is_dir() && watches.add(&*dir, mask).is_ok() {
                tracing::debug!(dir = %dir.display(), "watching for network namespaces made and removed");
                *watched = true;
            }
        }
    }

    /// Waits until a namespace is made or removed in one of the
    /// directories; an error when the watch failed.
    async fn changed(&mut self) -> std::io::Result<()> {
        use futures_core::Stream;
        let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut self.events).poll_next(cx)).await;
        match next {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e),
            None => Err(std::io::Error::other("the inotify stream ended")),
        }
    }
}

/// The directories to watch for `runtime`'s network namespaces: the usual
/// ones and the directory of each namespace its sandboxes name (a runtime
/// configured elsewhere), as seen from here.
async fn netns_dirs(runtime: &mut CriResolver) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = NETNS_DIRS.iter().map(|d| runtime.seen(Path::new(d))).collect();
    // A namespace named by a process (`/proc/PID/ns/net`) has no directory
    // of namespaces to watch.
    let named = runtime.all_namespaces().await.unwrap_or_default();
    dirs.extend(
        named
            .iter()
            .filter(|p| !p.starts_with(runtime.seen(Path::new("/proc"))))
            .filter_map(|p| p.parent().map(Path::to_path_buf)),
    );
    dirs
}

/// Follows `runtime` until `shutdown`, waking `wake` when a sync should
/// look at the sandboxes again.
pub async fn follow_runtime(mut runtime: CriResolver, wake: Arc<Notify>, shutdown: CancellationToken) {
    let socket = runtime.socket();
    let mut streams_events = true;
    let mut netns: Option<NetnsDirs> = None;
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
        // No events: a sandbox made or removed shows as a namespace file
        // made or removed; a runtime that goes away removes or replaces its
        // socket.
        if netns.is_none() {
            netns = match NetnsDirs::new(netns_dirs(&mut runtime).await) {
                Ok(n) => Some(n),
                Err(e) => {
                    tracing::warn!(
                        "cannot watch network namespace directories: {e}; sandboxes are looked at every sync"
                    );
                    None
                }
            };
        }
        let mut settling_until: Option<tokio::time::Instant> = None;
        while socket_id(&socket) == bound {
            let mut watch_failed = false;
            let namespace_changed = async {
                match netns.as_mut() {
                    Some(n) => n.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(POLL) => {
                    if let Some(n) = netns.as_mut() {
                        n.watch_new_dirs();
                    }
                    if settling_until.is_some_and(|t| tokio::time::Instant::now() < t) {
                        wake.notify_one();
                    }
                }
                changed = namespace_changed => match changed {
                    Ok(()) => {
                        tracing::debug!("a network namespace was made or removed: syncing");
                        settling_until = Some(tokio::time::Instant::now() + SETTLING);
                        wake.notify_one();
                    }
                    Err(e) => {
                        tracing::warn!(
                            "watching network namespace directories: {e}; sandboxes are looked at every sync"
                        );
                        watch_failed = true;
                    }
                },
            }
            if watch_failed {
                netns = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cri_api::v1::PodSandboxStatus;

    use super::*;

    /// Waits for `dirs` to report a change, for at most a second.
    async fn reports(dirs: &mut NetnsDirs) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(1), dirs.changed()).await,
            Ok(Ok(()))
        )
    }

    #[tokio::test]
    async fn namespace_files_made_and_removed_are_reported_in_directories_old_and_new() {
        let base = std::env::temp_dir().join(format!("proxyd-netns-dirs-{}", std::process::id()));
        let (now, later) = (base.join("now"), base.join("later"));
        std::fs::create_dir_all(&now).unwrap();
        let mut dirs = NetnsDirs::new([now.clone(), later.clone()]).unwrap();
        assert!(!reports(&mut dirs).await, "nothing happened");
        std::fs::write(now.join("cni-1"), b"").unwrap();
        assert!(reports(&mut dirs).await, "a namespace made");
        std::fs::remove_file(now.join("cni-1")).unwrap();
        assert!(reports(&mut dirs).await, "a namespace removed");
        // A directory that appears is watched once it is looked for.
        std::fs::create_dir_all(&later).unwrap();
        dirs.watch_new_dirs();
        std::fs::write(later.join("cni-2"), b"").unwrap();
        assert!(reports(&mut dirs).await, "a namespace made in the new directory");
        std::fs::remove_dir_all(&base).unwrap();
    }

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
