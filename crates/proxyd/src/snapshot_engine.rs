//! One look at the cluster (manifest files or one API list) as `render`
//! and `explain` see it: `daemon_sources::snapshot` reads it, fed into an
//! engine through the same handlers and selection as `proxyd run`.

use anyhow::Context;
use daemon_sources::snapshot::{SnapshotFeed, SnapshotSource};
use informer_glue::selection::Selection;
use k8s_openapi::api::discovery::v1::EndpointSlice;

pub use daemon_sources::snapshot::{Snapshot, slices_of};

use crate::settings::flags::{ProxyArgs, SourceArgs};
use endpoints_map::Engine;
use nft_dataplane::DataplaneConfig;

/// The node name: --hostname-override, else the kernel's host name.
pub fn node_name(proxy: &ProxyArgs) -> anyhow::Result<String> {
    if let Some(n) = proxy
        .hostname_override
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        return Ok(n.to_lowercase());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the host name; set --hostname-override")?;
    Ok(host.trim().to_lowercase())
}

/// The proxy name multus mode serves by default.
pub const MULTUS_PROXY_NAME: &str = "multus-proxy";

/// The objects this proxy handles, as `proxy` selects them.
pub fn selection(proxy: &ProxyArgs) -> Selection {
    let proxy_name = match (&proxy.service_proxy_name, proxy.multus) {
        (None, true) => Some(MULTUS_PROXY_NAME.to_owned()),
        (name, _) => name.clone(),
    };
    Selection {
        proxy_name,
        multus: proxy.multus,
    }
}

/// A client from `--kubeconfig`, or inferred.
pub async fn client(source: &SourceArgs) -> anyhow::Result<kube::Client> {
    Ok(daemon_sources::kubeconfig::client(source.kubeconfig.as_deref()).await?)
}

/// Reads the objects once from `source`, handing each EndpointSlice to
/// the engine as it is read and keeping only those `keep` picks; returns
/// them with the engine, applied.
pub async fn fetch(
    source: &SourceArgs,
    node: &str,
    proxy: &ProxyArgs,
    keep: &dyn Fn(&EndpointSlice) -> bool,
) -> anyhow::Result<(Snapshot, Engine)> {
    let engine = Engine::new(node, proxy.family());
    let mut feed = feed(&engine, proxy);
    let mut each_slice = |slice| feed.slice(slice);
    let snapshot = match &source.manifests {
        Some(path) => {
            let from = SnapshotSource::Manifests(path);
            Snapshot::read(from, node, &selection(proxy), keep, &mut each_slice).await?
        }
        None => {
            let client = client(source).await?;
            let from = SnapshotSource::Api(&client);
            Snapshot::read(from, node, &selection(proxy), keep, &mut each_slice).await?
        }
    };
    snapshot.finish(feed);
    Ok((snapshot, applied(engine)))
}

/// Which slices a snapshot keeps for an IPv6 engine built from it later
/// (`when`): the IPv6 ones; none otherwise.
pub fn ipv6_slices_if(when: bool) -> impl Fn(&EndpointSlice) -> bool {
    move |s| when && s.address_type == "IPv6"
}

/// An engine holding `snapshot`'s objects (applied), as proxy `node` would
/// see them.
pub fn engine(snapshot: &Snapshot, node: &str, proxy: &ProxyArgs) -> Engine {
    let engine = Engine::new(node, proxy.family());
    snapshot.feed_into(feed(&engine, proxy));
    applied(engine)
}

fn feed(engine: &Engine, proxy: &ProxyArgs) -> SnapshotFeed {
    let feed = engine.feed();
    SnapshotFeed::new(feed.slices, feed.service_changes, selection(proxy))
}

fn applied(mut engine: Engine) -> Engine {
    engine.update();
    engine
}

/// What a one-shot command (`render`, `explain`) works from.
pub struct Loaded {
    /// The node this view is for.
    pub node: String,
    /// The objects as read.
    pub snapshot: Snapshot,
    /// The engine holding them.
    pub engine: Engine,
    /// The dataplane settings.
    pub config: DataplaneConfig,
}

/// Reads the cluster once, runs `body` on it and prints its text, or the
/// error prefixed with `proxyd COMMAND:` (exit status 1).
pub fn one_shot(
    command: &str,
    source: &SourceArgs,
    proxy: &ProxyArgs,
    keep_slices: &dyn Fn(&EndpointSlice) -> bool,
    body: impl FnOnce(&Loaded) -> anyhow::Result<String>,
) -> std::process::ExitCode {
    let result = (|| -> anyhow::Result<String> {
        let node = node_name(proxy)?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (snapshot, engine) = runtime.block_on(fetch(source, &node, proxy, keep_slices))?;
        let config = crate::effective::effective(proxy, &snapshot.facts);
        let loaded = Loaded {
            node,
            snapshot,
            engine,
            config,
        };
        let text = body(&loaded);
        // The process ends next: freeing a cluster's worth of small
        // allocations one by one would only cost time.
        std::mem::forget(loaded);
        text
    })();
    match result {
        Ok(text) => {
            // `proxyd render | head`: a reader that stops early is fine.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            crate::logging::say(&format!("proxyd {command}: {e:#}"));
            std::process::ExitCode::FAILURE
        }
    }
}
