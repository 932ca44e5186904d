//! `proxyd slices`: the EndpointSlice controller of secondary networks
//! (`network_slices::controller`), with /healthz and /metrics.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use network_slices::controller::{ControllerConfig, SliceController};
use network_slices::metrics::ControllerMetrics;
use network_slices::reconcile::SliceRules;
use node_proxy::http::{Reply, serve};
use prometheus_client::registry::Registry;

use crate::settings::flags::SlicesArgs;

/// Runs the controller until SIGTERM or SIGINT.
pub fn main(args: SlicesArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: SlicesArgs) -> anyhow::Result<()> {
    let config = daemon_sources::kubeconfig::config(args.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(config)?;
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let registry = Arc::new(registry);
    let ready = Arc::new(AtomicBool::new(false));
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
    let controller = SliceController::new(
        client,
        ControllerConfig {
            rules,
            proxy_name: args.service_proxy_name,
        },
        metrics,
    );
    let shutdown = async {
        crate::run::wait_for_signal().await;
        tracing::info!("stopping");
    };
    controller
        .run(move || ready.store(true, Ordering::Relaxed), shutdown)
        .await;
    Ok(())
}
