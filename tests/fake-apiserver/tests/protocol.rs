//! The fake server's wire protocol, through kube's own client.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Kind};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use serde_json::json;

fn svc(name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({"kind": "Service", "metadata": {"name": name, "namespace": "ns", "labels": labels},
           "spec": {"clusterIP": "10.96.0.1"}})
}

#[tokio::test]
async fn lists_come_in_consistent_pages_and_expire_after_compaction() {
    let server = FakeApiServer::start().await.unwrap();
    for i in 0..5 {
        server.apply(svc(&format!("s{i}"), json!({}))).unwrap();
    }
    let api: Api<Service> = Api::all(server.client());
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().unwrap();
    let rv = page.metadata.resource_version.clone().unwrap();
    // A write after the first page does not show in later pages.
    server.apply(svc("s9", json!({}))).unwrap();
    let page2 = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(page2.items.len(), 3, "the snapshot of the first page");
    assert_eq!(page2.metadata.resource_version.unwrap(), rv);
    assert!(page2.metadata.continue_.is_none());

    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    // Reading at the compacted revision itself is still consistent; a write
    // after the snapshot and a compaction past it make the token too old.
    server.apply(svc("s10", json!({}))).unwrap();
    server.compact();
    let err = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(page.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("too old"), "{err}");
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(svc("a", json!({"app": "x"}))).unwrap();
    server.apply(svc("b", json!({"app": "y"}))).unwrap();
    server.apply(svc("c", json!({}))).unwrap();
    let api: Api<Service> = Api::all(server.client());
    let names = |l: kube::core::ObjectList<Service>| {
        l.items
            .into_iter()
            .map(|s| s.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(api.list(&ListParams::default().labels("app=x")).await.unwrap()),
        ["a"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("!app")).await.unwrap()),
        ["c"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("app,app!=x")).await.unwrap()),
        ["b"]
    );
    let ns: Api<Service> = Api::namespaced(server.client(), "other");
    assert!(ns.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn watch_replays_from_a_resource_version_and_tracks_selector_transitions() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(svc("a", json!({"app": "x"}))).unwrap();
    let rv = server.resource_version().to_string();
    server.apply(svc("b", json!({"app": "x"}))).unwrap();
    server.apply(svc("a", json!({"app": "y"}))).unwrap(); // stops matching app=x
    server.delete(Kind::Service, "ns", "b").unwrap();
    let api: Api<Service> = Api::all(server.client());
    let stream = api
        .watch(&WatchParams::default().labels("app=x").timeout(2), &rv)
        .await
        .unwrap();
    let events: Vec<String> = stream
        .take(3)
        .map_ok(|e| match e {
            WatchEvent::Added(s) => format!("ADDED {}", s.metadata.name.unwrap()),
            WatchEvent::Modified(s) => format!("MODIFIED {}", s.metadata.name.unwrap()),
            WatchEvent::Deleted(s) => format!("DELETED {}", s.metadata.name.unwrap()),
            WatchEvent::Bookmark(_) => "BOOKMARK".into(),
            WatchEvent::Error(e) => format!("ERROR {}", e.code),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events, ["ADDED b", "DELETED a", "DELETED b"]);
}

#[tokio::test]
async fn watch_ends_at_its_timeout_and_old_versions_are_gone() {
    let server = FakeApiServer::start().await.unwrap();
    server.apply(svc("a", json!({}))).unwrap();
    let old = server.resource_version().to_string();
    let api: Api<Service> = Api::all(server.client());
    let start = Instant::now();
    let stream = api.watch(&WatchParams::default().timeout(1), &old).await.unwrap();
    let objects = stream
        .filter(|e| futures::future::ready(!matches!(e, Ok(WatchEvent::Bookmark(_)))))
        .count()
        .await;
    assert_eq!(objects, 0, "only bookmarks while nothing changes");
    assert!(start.elapsed() >= Duration::from_millis(900) && start.elapsed() < Duration::from_secs(10));

    server.apply(svc("b", json!({}))).unwrap();
    server.compact();
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &old)
        .await
        .unwrap()
        .boxed();
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn discovery_and_errors() {
    let server = FakeApiServer::start().await.unwrap();
    let client = server.client();
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    let groups = client.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().any(|g| g.name == "discovery.k8s.io"));
    let core = client.list_core_api_resources("v1").await.unwrap();
    assert!(core.resources.iter().any(|r| r.name == "services"));
    let api: Api<Service> = Api::namespaced(client, "ns");
    assert!(api.get("missing").await.is_err());
    server.fail_next_lists(1);
    assert!(api.list(&ListParams::default()).await.is_err());
    assert!(api.list(&ListParams::default()).await.is_ok());
    assert_eq!(server.stats().faults, 1);
}
