//! `proxyd slices`: the EndpointSlice controller of secondary networks
//! (`network_slices::controller`), leading through a Lease
//! (`network_slices::leader`), with /healthz and /metrics.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use network_slices::controller::{ControllerConfig, SliceController};
use network_slices::leader::{Candidate, LeaseConfig};
use network_slices::metrics::ControllerMetrics;
use network_slices::reconcile::SliceRules;
use node_proxy::http::{Reply, serve};
use prometheus_client::registry::Registry;

use crate::settings::flags::SlicesArgs;

/// Runs the controller until SIGTERM or SIGINT.
pub fn main(args: SlicesArgs) -> ExitCode {
    crate::block_on(
        tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        run(args),
    )
}

async fn run(args: SlicesArgs) -> anyhow::Result<()> {
    let client = daemon_sources::kubeconfig::client(args.kubeconfig.as_deref()).await?;
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let registry = Arc::new(registry);
    // Standing by for the lease is healthy; leading is once the caches
    // are filled.
    let ready = Arc::new(AtomicBool::new(true));
    if let Some(addr) = args.bind_address.0
        && let Some(listener) = node_proxy::http::listen("--bind-address", addr, true).await?
    {
        let (ready, registry) = (ready.clone(), registry.clone());
        let handler: node_proxy::http::Handler = Arc::new(move |path| match path {
            "/healthz" if ready.load(Ordering::Relaxed) => Reply::json(200, "{\"status\":\"ok\"}".into()),
            "/healthz" => Reply::json(503, "{\"status\":\"the caches are not filled yet\"}".into()),
            "/metrics" => {
                let mut body = String::new();
                let _ = prometheus_client::encoding::text::encode(&mut body, &registry);
                let content_type = ("Content-Type", crate::metrics_registry::CONTENT_TYPE.into());
                Reply {
                    status: 200,
                    headers: vec![content_type],
                    body,
                }
            }
            _ => Reply::not_found(),
        });
        tracing::info!(address = %addr, "serving /healthz and /metrics");
        tokio::spawn(serve(listener, handler, std::future::pending()));
    }
    let rules = SliceRules {
        controller: informer_glue::multus::MULTUS_SLICE_CONTROLLER.into(),
        max_endpoints_per_slice: usize::from(args.max_endpoints_per_slice),
    };
    let config = ControllerConfig {
        rules,
        proxy_name: args.service_proxy_name.clone(),
        dra: args.dra_networks,
    };
    let controller = SliceController::new(client.clone(), config, metrics);
    let filled = ready.clone();
    let work = controller.run(move || filled.store(true, Ordering::Relaxed), std::future::pending());
    let shutdown = async {
        crate::run::wait_for_signal().await;
        tracing::info!("stopping");
    };
    if !args.leader_elect {
        ready.store(false, Ordering::Relaxed);
        tokio::select! {
            () = work => {}
            () = shutdown => {}
        }
        return Ok(());
    }
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("proxyd-slices-{}", std::process::id()));
    let lease = LeaseConfig {
        namespace: args.leader_elect_resource_namespace,
        name: args.leader_elect_resource_name,
        identity,
        lease_duration: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry_period: args.leader_elect_retry_period,
    };
    let leading = move || ready.store(false, Ordering::Relaxed);
    Candidate::new(client, lease).lead(leading, work, shutdown).await?;
    Ok(())
}
