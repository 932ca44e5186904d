//! Health, as kube-proxy reports it.
//!
//! - [`ProxierHealth`]: `/healthz` and `/livez` on `--healthz-bind-address`.
//!   Unhealthy when some family has a change queued longer than the timeout
//!   (2 × `--sync-period`) without a successful sync since. `/healthz`
//!   (readiness) is also 503 until every family's first sync is written
//!   (ready means programmed), while a watch has been failing for the
//!   timeout, and, with `"nodeEligible": false`, while this node is being
//!   deleted or is tainted `ToBeDeletedByClusterAutoscaler` (KEP-3836), so
//!   that load balancers stop sending it traffic; `/livez` is none of
//!   these. Beside kube-proxy's fields, a family whose last sync failed is
//!   named with the error (`"failedSyncs": {"ipv4": "…"}`) until a sync
//!   succeeds, and each failing watch with its error (`"failingWatches":
//!   {"endpointslices": "…"}`) from its first failure.
//! - [`ServiceHealth`]: one listener per LoadBalancer service with
//!   `externalTrafficPolicy: Local`, on its `healthCheckNodePort`: 200 with
//!   the count of local ready endpoints when there are some and the proxy is
//!   healthy, else 503. Listeners open and close as services come and go.

use informer_glue::node::NodeFacts;
use slice_model::internal::lock;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use informer_glue::watch_runner::WatchMetrics;
use slice_model::{IpFamily, ServiceName};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::http::{Handler, Reply, serve};

#[derive(Clone, Debug, Default)]
struct FamilyHealth {
    last_updated: Option<SystemTime>,
    oldest_queued: Option<SystemTime>,
    /// Why the last sync failed, while no sync has succeeded since.
    failure: Option<String>,
}

/// The proxy's own health, per family.
#[derive(Debug)]
pub struct ProxierHealth {
    timeout: Duration,
    families: Mutex<BTreeMap<IpFamily, FamilyHealth>>,
    /// The watches feeding the proxy: one down longer than `timeout` makes
    /// `/healthz` unhealthy (changes may be missed).
    watches: Mutex<Vec<Arc<WatchMetrics>>>,
    /// Whether this node is eligible for load balancer traffic, as its Node
    /// says (eligible while unknown, as kube-proxy).
    node_eligible: Mutex<Option<tokio::sync::watch::Receiver<NodeFacts>>>,
    /// Replies counted by endpoint and code.
    replies: Option<crate::kube_proxy_metrics::HealthMetrics>,
}

/// RFC 3339 in UTC with nanoseconds, e.g. `2026-11-30T07:33:03.123456789Z`
/// (times before 1970 or past jiff's range read as 1970).
pub fn rfc3339(t: SystemTime) -> String {
    let t = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%dT%H:%M:%S.%9fZ").to_string()
}

impl ProxierHealth {
    /// Health for `families`, unhealthy after `timeout` with a change
    /// queued and not synced.
    pub fn new(families: &[IpFamily], timeout: Duration) -> Self {
        Self {
            timeout,
            families: Mutex::new(families.iter().map(|f| (*f, FamilyHealth::default())).collect()),
            watches: Mutex::new(Vec::new()),
            node_eligible: Mutex::new(None),
            replies: None,
        }
    }

    /// The same, counting its replies (`kubeproxy_proxy_healthz_total`,
    /// `kubeproxy_proxy_livez_total`).
    pub fn counting_into(mut self, replies: crate::kube_proxy_metrics::HealthMetrics) -> Self {
        self.replies = Some(replies);
        self
    }

    /// Follows this node's eligibility for `/healthz`.
    pub fn follow_node(&self, facts: tokio::sync::watch::Receiver<NodeFacts>) {
        *lock(&self.node_eligible) = Some(facts);
    }

    /// Whether this node is eligible for load balancer traffic.
    pub fn node_eligible(&self) -> bool {
        lock(&self.node_eligible).as_ref().is_none_or(|rx| rx.borrow().eligible)
    }

    /// Takes a watch into account for `/healthz`.
    pub fn watch(&self, metrics: Arc<WatchMetrics>) {
        lock(&self.watches).push(metrics);
    }

    /// Whether some watch has been failing for `timeout` or more.
    pub fn watches_down(&self, now: SystemTime) -> bool {
        lock(&self.watches)
            .iter()
            .any(|w| w.down_for(now).is_some_and(|d| d >= self.timeout))
    }

    /// Each failing watch's resource and last error.
    fn failing_watches(&self, now: SystemTime) -> Vec<(&'static str, String)> {
        lock(&self.watches)
            .iter()
            .filter(|w| w.down_for(now).is_some())
            .map(|w| {
                let why = w.last_error().map_or_else(|| "failing".to_owned(), |e| e.to_string());
                (w.resource, why)
            })
            .collect()
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<IpFamily, FamilyHealth>) -> T) -> T {
        f(&mut lock(&self.families))
    }

    /// A change is waiting for a sync (only the oldest one counts).
    pub fn queued(&self, now: SystemTime) {
        self.with(|m| {
            for h in m.values_mut() {
                h.oldest_queued.get_or_insert(now);
            }
        });
    }

    /// `family` synced successfully.
    pub fn updated(&self, family: IpFamily, now: SystemTime) {
        self.with(|m| {
            let h = m.entry(family).or_default();
            h.last_updated = Some(now);
            h.oldest_queued = None;
            h.failure = None;
        });
    }

    /// `family`'s sync failed: `/healthz` names why until a sync succeeds
    /// (the dataplane's error words its own source).
    pub fn failed(&self, family: IpFamily, why: &nft_dataplane::DataplaneError) {
        let text = why.to_string();
        self.with(|m| m.entry(family).or_default().failure = Some(text));
    }

    /// The families whose last sync failed, and why.
    pub fn failures(&self) -> Vec<(IpFamily, String)> {
        self.with(|m| {
            let failed = m.iter().filter_map(|(f, h)| Some((*f, h.failure.clone()?)));
            failed.collect()
        })
    }

    /// Whether every family has written its first sync.
    pub fn programmed(&self) -> bool {
        self.with(|m| m.values().all(|h| h.last_updated.is_some()))
    }

    /// Whether healthy at `now` as kube-proxy judges it (no change queued
    /// for the timeout without a sync since), and the last successful sync.
    pub fn is_healthy(&self, now: SystemTime) -> (bool, Option<SystemTime>) {
        self.with(|m| {
            let last = m.values().filter_map(|h| h.last_updated).max();
            let late = m.values().any(|h| {
                h.oldest_queued
                    .is_some_and(|q| now.duration_since(q).unwrap_or_default() >= self.timeout)
            });
            (!late, last)
        })
    }

    /// The `/healthz` or `/livez` reply (kube-proxy's body; a healthy reply
    /// reports the current time as `lastUpdated`, as kube-proxy does for
    /// compatibility). `/healthz` is also 503 until every family's first
    /// sync is written (kube-proxy answers 200 while it starts: a rollout
    /// would go on past nodes with no rules), while a watch has been down
    /// for the timeout (kube-proxy does not look at its watches), and
    /// while the node is not eligible.
    pub fn reply(&self, now: SystemTime, healthz: bool) -> Reply {
        let (synced, last) = self.is_healthy(now);
        let eligible = self.node_eligible();
        // Only readiness: restarting proxyd would not bring the API back,
        // write rules sooner, nor undo the node's removal.
        let ready = self.programmed() && !self.watches_down(now) && eligible;
        let healthy = synced && (!healthz || ready);
        let last = if healthy { Some(now) } else { last };
        let last = last.map(rfc3339).unwrap_or_else(|| "0001-01-01T00:00:00Z".into());
        let now_s = rfc3339(now);
        let mut body = if healthz {
            format!("{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{now_s}\", \"nodeEligible\": {eligible}")
        } else {
            format!("{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{now_s}\"")
        };
        // Beyond kube-proxy's fields: the watches failing now (at once, not
        // only after the timeout) and why, and why a family's rules are
        // behind.
        let watches = self.failing_watches(now);
        if !watches.is_empty() {
            let each: Vec<String> = watches
                .iter()
                .map(|(resource, why)| format!("{}: {}", json_string(resource), json_string(why)))
                .collect();
            body.push_str(&format!(", \"failingWatches\": {{{}}}", each.join(", ")));
        }
        let failures = self.failures();
        if !failures.is_empty() {
            let each: Vec<String> = failures
                .iter()
                .map(|(family, why)| format!("{}: {}", json_string(family.as_str()), json_string(why)))
                .collect();
            body.push_str(&format!(", \"failedSyncs\": {{{}}}", each.join(", ")));
        }
        body.push('}');
        let code = if healthy { 200 } else { 503 };
        if let Some(m) = &self.replies {
            m.count(healthz, code);
        }
        Reply::json(code, body)
    }

    /// The handler for the healthz server.
    pub fn handler(self: &Arc<Self>) -> Handler {
        let me = self.clone();
        Arc::new(move |path| match path {
            "/healthz" => me.reply(SystemTime::now(), true),
            "/livez" => me.reply(SystemTime::now(), false),
            _ => Reply::not_found(),
        })
    }
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

struct Listener {
    port: u16,
    endpoints: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

/// Health-check listeners for externalTrafficPolicy: Local services.
pub struct ServiceHealth {
    bind: IpAddr,
    proxier: Arc<ProxierHealth>,
    listeners: HashMap<ServiceName, Listener>,
}

/// The reply of one service's health check.
pub fn service_reply(name: &ServiceName, local_endpoints: usize, proxy_healthy: bool) -> Reply {
    let mut r = Reply::json(
        if local_endpoints > 0 && proxy_healthy { 200 } else { 503 },
        format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": \"{}\",\n\t\t\"name\": \"{}\"\n\t}},\n\t\"localEndpoints\": {local_endpoints},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
            name.namespace, name.name
        ),
    );
    r.headers
        .push(("X-Load-Balancing-Endpoint-Weight", local_endpoints.to_string()));
    r
}

impl ServiceHealth {
    /// Listeners bound to `bind` (all addresses: `0.0.0.0` or `::`).
    pub fn new(bind: IpAddr, proxier: Arc<ProxierHealth>) -> Self {
        Self {
            bind,
            proxier,
            listeners: HashMap::new(),
        }
    }

    /// Follows what the syncs publish (the actor's health checks) until
    /// `stop` or the publisher goes; the listeners close with it.
    pub async fn follow(
        mut self,
        mut wanted: tokio::sync::watch::Receiver<BTreeMap<ServiceName, (u16, usize)>>,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                r = wanted.changed() => if r.is_err() { break },
            }
            let now = wanted.borrow_and_update().clone();
            self.sync(&now).await;
        }
    }

    /// Opens and closes listeners so that exactly `wanted` (service ->
    /// health-check node port) have one, and sets their local endpoint
    /// counts. A port that cannot be bound is reported and retried at the
    /// next sync.
    pub async fn sync(&mut self, wanted: &BTreeMap<ServiceName, (u16, usize)>) {
        self.listeners.retain(|name, l| {
            let keep = wanted.get(name).is_some_and(|(port, _)| *port == l.port);
            if !keep {
                tracing::info!(service = %name, port = l.port, "closing health check listener");
                l.task.abort();
            }
            keep
        });
        for (name, (port, count)) in wanted {
            if let Some(l) = self.listeners.get(name) {
                l.endpoints.store(*count, Ordering::Relaxed);
                continue;
            }
            let addr = SocketAddr::new(self.bind, *port);
            let listener = match TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(service = %name, "cannot listen on health check node port {addr}: {e}");
                    continue;
                }
            };
            tracing::info!(service = %name, port, "health check listener open");
            let endpoints = Arc::new(AtomicUsize::new(*count));
            let (n, proxier, eps) = (name.clone(), self.proxier.clone(), endpoints.clone());
            let handler: Handler = Arc::new(move |_| {
                let healthy = proxier.is_healthy(SystemTime::now()).0;
                service_reply(&n, eps.load(Ordering::Relaxed), healthy)
            });
            let task = tokio::spawn(serve(listener, handler, std::future::pending()));
            self.listeners.insert(
                name.clone(),
                Listener {
                    port: *port,
                    endpoints,
                    task,
                },
            );
        }
    }
}

impl Drop for ServiceHealth {
    fn drop(&mut self) {
        for l in self.listeners.values() {
            l.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_formats_as_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_796_023_983, 5);
        assert_eq!(rfc3339(t), "2026-11-30T07:33:03.000000005Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert!(rfc3339(leap).starts_with("2000-02-29T00:00:00"));
    }

    /// The kernel's refusal is said once: the dataplane's message already
    /// words its source.
    #[test]
    fn a_failed_sync_is_named_until_a_sync_succeeds() {
        let h = ProxierHealth::new(&[IpFamily::V4], Duration::from_secs(60));
        let refused = nft_dataplane::DataplaneError::Netlink {
            what: "add 3 elements of set slot-frontends-2".into(),
            source: std::io::Error::from_raw_os_error(1),
        };
        h.failed(IpFamily::V4, &refused);
        let body = h.reply(SystemTime::now(), true).body;
        let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
        let why = reply["failedSyncs"]["ipv4"].as_str().unwrap_or_default();
        assert!(why.contains("slot-frontends-2"), "{body}");
        assert_eq!(why.matches("Operation not permitted").count(), 1, "{body}");
        h.updated(IpFamily::V4, SystemTime::now());
        assert!(h.failures().is_empty());
        let body = h.reply(SystemTime::now(), true).body;
        assert!(!body.contains("failedSyncs"), "{body}");
    }

    /// A failing watch is named at once, with its error; readiness turns
    /// 503 once it has failed for the timeout.
    #[test]
    fn a_failing_watch_is_named_and_unready_after_the_timeout() {
        let h = ProxierHealth::new(&[IpFamily::V4], Duration::from_secs(60));
        h.updated(IpFamily::V4, SystemTime::now());
        let w = Arc::new(WatchMetrics {
            resource: "endpointslices",
            ..WatchMetrics::default()
        });
        h.watch(w.clone());
        let now = SystemTime::now();
        assert!(!h.reply(now, true).body.contains("failingWatches"));
        let since = now - Duration::from_secs(45);
        let ms = since.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis();
        w.failing_since_ms.store(u64::try_from(ms).unwrap(), Ordering::Release);
        *lock(&w.last_error) = Some(informer_glue::watch_error::WatchError::Silent {
            quiet: Duration::from_secs(45),
        });
        let r = h.reply(now, true);
        let reply: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        let why = reply["failingWatches"]["endpointslices"].as_str().unwrap_or_default();
        assert!(why.contains("has said nothing for 45s"), "{}", r.body);
        assert_eq!(r.status, 200, "not yet for the timeout");
        assert_eq!(h.reply(now + Duration::from_secs(15), true).status, 503);
        assert_eq!(
            h.reply(now + Duration::from_secs(15), false).status,
            200,
            "livez unaffected"
        );
    }

    #[test]
    fn a_change_queued_too_long_is_unhealthy() {
        let h = ProxierHealth::new(&[IpFamily::V4, IpFamily::V6], Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(h.is_healthy(t0).0, "healthy while starting");
        h.queued(t0);
        assert!(h.is_healthy(t0 + Duration::from_secs(59)).0);
        h.queued(t0 + Duration::from_secs(30)); // not the oldest
        assert!(!h.is_healthy(t0 + Duration::from_secs(60)).0);
        h.updated(IpFamily::V4, t0 + Duration::from_secs(61));
        assert!(!h.is_healthy(t0 + Duration::from_secs(61)).0, "IPv6 still late");
        h.updated(IpFamily::V6, t0 + Duration::from_secs(62));
        let (ok, last) = h.is_healthy(t0 + Duration::from_secs(200));
        assert!(ok && last == Some(t0 + Duration::from_secs(62)));
        let r = h.reply(t0 + Duration::from_secs(200), true);
        assert_eq!(r.status, 200);
        assert!(r.body.ends_with("\"nodeEligible\": true}"), "{}", r.body);
        h.queued(t0 + Duration::from_secs(300));
        let r = h.reply(t0 + Duration::from_secs(400), false);
        assert_eq!(r.status, 503);
        assert!(
            r.body.starts_with("{\"lastUpdated\": \"1970-01-12T13:47:42"),
            "{}",
            r.body
        );
    }

    #[test]
    fn healthz_waits_for_every_familys_first_sync_and_livez_does_not() {
        let h = ProxierHealth::new(&[IpFamily::V4, IpFamily::V6], Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let status = |healthz| h.reply(t0, healthz).status;
        assert_eq!((status(true), status(false)), (503, 200), "starting: not ready, alive");
        h.updated(IpFamily::V4, t0);
        assert_eq!(status(true), 503, "IPv6 has written nothing yet");
        h.updated(IpFamily::V6, t0);
        assert_eq!((status(true), status(false)), (200, 200));
    }

    #[test]
    fn a_node_being_removed_fails_healthz_but_not_livez() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::kube_proxy_metrics::HealthMetrics::register(&mut registry);
        let h = ProxierHealth::new(&[IpFamily::V4], Duration::from_secs(60)).counting_into(metrics);
        let (tx, rx) = tokio::sync::watch::channel(NodeFacts::default());
        h.follow_node(rx);
        let eligible = |e: bool| NodeFacts {
            eligible: e,
            ..NodeFacts::default()
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        h.updated(IpFamily::V4, now);
        assert_eq!(h.reply(now, true).status, 200);
        tx.send_replace(eligible(false));
        let r = h.reply(now, true);
        assert_eq!(r.status, 503);
        assert!(r.body.ends_with("\"nodeEligible\": false}"), "{}", r.body);
        assert_eq!(h.reply(now, false).status, 200, "liveness does not depend on the node");
        tx.send_replace(eligible(true));
        assert_eq!(h.reply(now, true).status, 200);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kubeproxy_proxy_healthz_total{code=\"200\"} 2",
            "kubeproxy_proxy_healthz_total{code=\"503\"} 1",
            "kubeproxy_proxy_livez_total{code=\"200\"} 1",
            "kubeproxy_proxy_livez_total{code=\"503\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn service_replies_follow_kube_proxy() {
        let name = ServiceName::new("shop", "ingress");
        let r = service_reply(&name, 2, true);
        assert_eq!(r.status, 200);
        assert!(r.headers.contains(&("X-Load-Balancing-Endpoint-Weight", "2".into())));
        assert!(r.body.contains("\"localEndpoints\": 2") && r.body.contains("\"namespace\": \"shop\""));
        assert_eq!(service_reply(&name, 0, true).status, 503);
        assert_eq!(service_reply(&name, 3, false).status, 503, "proxy unhealthy");
    }
}
