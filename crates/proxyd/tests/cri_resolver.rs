//! The CRI resolver against a real gRPC server on a unix socket speaking
//! CRI v1 (`fake-cri`): a runtime down at start, a restarted pod's new
//! sandbox, a missing sandbox, malformed info, a runtime that goes away.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};

use fake_cri::{FakeCri, Sandbox};
use informer_glue::multus::PodInfo;
use multus_dataplane::cri::CriResolver;
use multus_dataplane::{PodNetnsResolver, ResolveError};

fn pod() -> PodInfo {
    PodInfo {
        namespace: "apps".into(),
        name: "client".into(),
        uid: None,
        node: Some("node-1".into()),
        running: true,
        host_network: false,
        attachments: Vec::new(),
    }
}

/// A scratch directory with two "namespace files" (the resolver only checks
/// that they exist).
fn scratch(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("proxyd-cri-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("cni-a"), dir.join("cni-b"));
    std::fs::write(&a, "").unwrap();
    std::fs::write(&b, "").unwrap();
    (dir, a, b)
}

fn gone(r: Result<PathBuf, ResolveError>) -> String {
    match r {
        Err(ResolveError::Gone(why)) => why,
        other => panic!("expected Gone, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_names_the_pods_namespace_through_its_faults() {
    let (dir, a, b) = scratch("faults");
    let mut cri = FakeCri::new(&dir.join("cri.sock"));
    let mut resolver = CriResolver::new(&cri.endpoint(), Path::new("")).unwrap();

    // Down at start: unavailable, not fatal.
    assert!(matches!(
        resolver.resolve_async(&pod()).await,
        Err(ResolveError::Unavailable(_))
    ));
    cri.start().unwrap();
    // Up, but no sandbox for the pod yet.
    assert!(gone(resolver.resolve_async(&pod()).await).contains("no ready sandbox"));

    cri.put(Sandbox::containerd("s1", "apps", "client", 1, &a));
    cri.put(Sandbox::containerd("x1", "apps", "other", 5, &b));
    assert_eq!(resolver.resolve_async(&pod()).await.unwrap(), a);

    // The pod restarts: a newer sandbox; the old one is not ready.
    let mut old = Sandbox::containerd("s1", "apps", "client", 1, &a);
    old.ready = false;
    cri.put(old);
    cri.put(Sandbox::containerd("s2", "apps", "client", 2, &b));
    assert_eq!(
        resolver.resolve_async(&pod()).await.unwrap(),
        b,
        "the new sandbox is found"
    );

    // Malformed info (a newer sandbox): reported, not retried in a loop.
    let mut bad = Sandbox::containerd("s3", "apps", "client", 3, &b);
    bad.info = "{not json".into();
    cri.put(bad);
    assert!(gone(resolver.resolve_async(&pod()).await).contains("not JSON"));
    cri.remove("s3");

    // A namespace file that is gone.
    cri.put(Sandbox::containerd("s4", "apps", "client", 4, &dir.join("cni-missing")));
    assert!(gone(resolver.resolve_async(&pod()).await).contains("the pod's network namespace is gone"));
    cri.remove("s4");

    // The runtime goes away and comes back: unavailable (once the
    // connection it had open is closed), then found again.
    cri.stop();
    let stopped = std::time::Instant::now();
    while !matches!(resolver.resolve_async(&pod()).await, Err(ResolveError::Unavailable(_))) {
        assert!(stopped.elapsed() < std::time::Duration::from_secs(5), "still answered");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    cri.start().unwrap();
    assert_eq!(resolver.resolve_async(&pod()).await.unwrap(), b);

    // The synchronous entry point, as the sync loop calls it.
    let r = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tokio::task::spawn(async move { resolver.refresh().and_then(|()| resolver.resolve(&pod())) })
                .await
                .unwrap()
        })
    });
    assert_eq!(r.await.unwrap().unwrap(), b);
    drop(cri);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_prefix_is_applied_to_the_socket_and_the_namespace() {
    let (dir, a, _) = scratch("prefix");
    let mut cri = FakeCri::new(&dir.join("run.sock"));
    cri.start().unwrap();
    // The runtime names host paths; proxyd sees the host under `dir`.
    let host_path = Path::new("/").join(a.strip_prefix(&dir).unwrap());
    cri.put(Sandbox::containerd("s1", "apps", "client", 1, &host_path));
    let mut resolver = CriResolver::new("unix:///run.sock", &dir).unwrap();
    assert_eq!(resolver.resolve_async(&pod()).await.unwrap(), a);
    drop(cri);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_uid_must_match_its_sandbox() {
    let (dir, a, b) = scratch("uid");
    let mut cri = FakeCri::new(&dir.join("cri.sock"));
    cri.start().unwrap();
    // A sandbox left over from an earlier pod of the same name.
    cri.put(Sandbox::containerd("old", "apps", "client", 1, &a).with_uid("uid-old"));
    let mut resolver = CriResolver::new(&cri.endpoint(), Path::new("")).unwrap();
    let mut p = pod();
    p.uid = Some("uid-new".into());
    let why = gone(resolver.resolve_async(&p).await);
    assert!(
        why.contains("belongs to another pod") && why.contains("uid-old") && why.contains("uid-new"),
        "{why}"
    );
    // The new pod's own sandbox, older than the leftover: still the one.
    cri.put(Sandbox::containerd("new", "apps", "client", 0, &b).with_uid("uid-new"));
    assert_eq!(resolver.resolve_async(&p).await.unwrap(), b);
    // A pod without a uid (manifests) matches by name.
    assert_eq!(resolver.resolve_async(&pod()).await.unwrap(), a, "the newest");
    drop(cri);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_socket_is_named_as_such() {
    let (dir, _, _) = scratch("missing");
    let cri = FakeCri::new(&dir.join("cri.sock"));
    let mut resolver = CriResolver::new(&cri.endpoint(), Path::new("")).unwrap();
    match resolver.resolve_async(&pod()).await {
        Err(ResolveError::Unavailable(why)) => assert_eq!(
            why,
            format!("connect {}: No such file or directory (socket missing)", cri.endpoint())
        ),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // A socket nobody listens on: the kernel's reason, not "transport error".
    let stale = std::os::unix::net::UnixListener::bind(dir.join("cri.sock")).unwrap();
    drop(stale);
    match resolver.resolve_async(&pod()).await {
        Err(ResolveError::Unavailable(why)) => assert!(why.contains("Connection refused"), "{why}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_list_serves_every_lookup_of_a_sync() {
    let (dir, a, b) = scratch("list");
    let mut cri = FakeCri::new(&dir.join("cri.sock"));
    cri.start().unwrap();
    cri.put(Sandbox::containerd("s1", "apps", "client", 1, &a));
    let mut resolver = CriResolver::new(&cri.endpoint(), Path::new("")).unwrap();
    resolver.list_async().await.unwrap();
    assert_eq!(resolver.find_async(&pod()).await.unwrap(), a);
    // Re-created after the list: the lookup reads the list, the next list
    // sees the new sandbox.
    cri.remove("s1");
    cri.put(Sandbox::containerd("s2", "apps", "client", 2, &b));
    assert_eq!(resolver.find_async(&pod()).await.unwrap(), a);
    resolver.list_async().await.unwrap();
    assert_eq!(resolver.find_async(&pod()).await.unwrap(), b);
    drop(cri);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits up to `within` for `wake` to be notified.
async fn woken(wake: &tokio::sync::Notify, within: std::time::Duration) -> bool {
    tokio::time::timeout(within, wake.notified()).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_events_and_a_returning_runtime_wake_a_sync() {
    use std::sync::Arc;
    use std::time::Duration;

    use multus_dataplane::runtime_watch::follow_runtime;
    use tokio_util::sync::CancellationToken;

    let (dir, a, b) = scratch("events");
    for events in [true, false] {
        let socket = dir.join(format!("cri-{events}.sock"));
        let mut cri = FakeCri::new(&socket);
        if !events {
            cri = cri.without_events();
        }
        cri.start().unwrap();
        let endpoint = cri.endpoint();
        let wake = Arc::new(tokio::sync::Notify::new());
        let stop = CancellationToken::new();
        let runtime = CriResolver::new(&endpoint, Path::new("")).unwrap();
        let task = tokio::spawn(follow_runtime(runtime, wake.clone(), stop.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !woken(&wake, Duration::from_millis(100)).await || !events,
            "nothing happened yet"
        );

        // A sandbox made: with events, a sync at once. Without, the
        // runtime says nothing; the watch on the host's namespace
        // directories (which other tests running beside this one fill and
        // empty) may still wake one, so no wake-up is not asserted there.
        cri.put(Sandbox::containerd("s1", "apps", "client", 1, &a));
        let first = woken(&wake, Duration::from_secs(1)).await;
        cri.put(Sandbox::containerd("s2", "apps", "client", 2, &b));
        let second = woken(&wake, Duration::from_secs(1)).await;
        if events {
            assert!(first && second, "each sandbox event wakes a sync");
        }

        // The runtime goes away and comes back: a sync within 2 s of it
        // answering, either way.
        cri.stop();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let _ = woken(&wake, Duration::from_millis(10)).await;
        cri.start().unwrap();
        assert!(woken(&wake, Duration::from_secs(2)).await, "events: {events}");
        stop.cancel();
        task.await.unwrap();
        drop(cri);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
