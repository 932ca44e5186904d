//! The CRI resolver against a real gRPC server on a unix socket speaking
//! CRI v1 (`fake-cri`): a runtime down at start, a restarted pod's new
//! sandbox, a missing sandbox, malformed info, a runtime that goes away.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};

use fake_cri::{FakeCri, Sandbox};
use informer_glue::multus::PodInfo;
use proxyd::multus::cri::CriResolver;
use proxyd::multus::{PodNetnsResolver, ResolveError};

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

    // Malformed info: reported, not retried in a loop.
    let mut bad = Sandbox::containerd("s2", "apps", "client", 2, &b);
    bad.info = "{not json".into();
    cri.put(bad);
    assert!(gone(resolver.resolve_async(&pod()).await).contains("not JSON"));

    // A namespace file that is gone.
    cri.put(Sandbox::containerd("s2", "apps", "client", 2, &dir.join("cni-missing")));
    assert!(gone(resolver.resolve_async(&pod()).await).contains("does not exist"));

    // The runtime goes away and comes back: unavailable, then found again.
    cri.put(Sandbox::containerd("s2", "apps", "client", 2, &b));
    cri.stop();
    assert!(matches!(
        resolver.resolve_async(&pod()).await,
        Err(ResolveError::Unavailable(_))
    ));
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
            tokio::task::spawn(async move { resolver.resolve(&pod()) })
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
