//! What multus mode would program, for `render --multus` and `explain`:
//! each pod's table and routes, and which pods get a service and why the
//! others do not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use endpoints_map::{EndpointsMap, ServicesMap};
use informer_glue::multus::{NetworkName, PodInfo};
use nft_dataplane::{DataplaneConfig, NftSyncer, Recording, SyncKind};
use slice_model::{IpFamily, ServiceName};

use super::plan::{Skip, plan_pod};

/// Every pod on the node: the table and routes its namespace would get, or
/// why it gets nothing.
pub fn render_pods(
    services: &ServicesMap,
    endpoints: &EndpointsMap,
    family: IpFamily,
    pods: &[PodInfo],
    networks: &BTreeMap<ServiceName, NetworkName>,
) -> Result<String, nft_dataplane::DataplaneError> {
    let mut out = String::new();
    let mut sorted: Vec<&PodInfo> = pods.iter().collect();
    sorted.sort_by_key(|p| p.key());
    for pod in sorted {
        let plan = match plan_pod(pod, networks, services, family) {
            Ok(p) => p,
            Err(skip) => {
                let _ = writeln!(out, "# pod {}: nothing ({skip})\n", pod.key());
                continue;
            }
        };
        let names: Vec<String> = plan.services.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "# pod {}: {}", pod.key(), names.join(", "));
        let mut syncer = NftSyncer::new(DataplaneConfig::pod(family), Recording::default());
        let served = plan.services.clone();
        syncer.set_filter(Box::new(move |n| served.contains(n)));
        syncer.sync(services, endpoints, &BTreeSet::new(), SyncKind::Changes)?;
        for tx in &syncer.dataplane().applied {
            out.push_str(&tx.text());
        }
        for r in &plan.routes {
            let prefix = if r.dest.is_ipv4() { 32 } else { 128 };
            let _ = writeln!(
                out,
                "# route: {}/{prefix} dev {} src {} proto {}",
                r.dest,
                r.dev,
                r.src,
                linux_dataplane::routes::ROUTE_PROTO
            );
        }
        out.push('\n');
    }
    if pods.is_empty() {
        out.push_str("# no pods on this node\n");
    }
    Ok(out)
}

/// Which pods on the node get `service`, through which interface, and why
/// each other pod does not.
pub fn explain_pods(
    service: &ServiceName,
    services: &ServicesMap,
    family: IpFamily,
    pods: &[PodInfo],
    networks: &BTreeMap<ServiceName, NetworkName>,
) -> String {
    let mut out = String::new();
    let Some(network) = networks.get(service) else {
        return "multus: not on a secondary network (no k8s.v1.cni.cncf.io/service-network)\n".into();
    };
    let _ = writeln!(out, "multus: network {network}; pods on this node:");
    let mut sorted: Vec<&PodInfo> = pods.iter().collect();
    sorted.sort_by_key(|p| p.key());
    for pod in sorted {
        let why = match plan_pod(pod, networks, services, family) {
            Ok(plan) if plan.services.contains(service) => {
                let routes: Vec<String> = plan
                    .routes
                    .iter()
                    .filter(|r| {
                        services
                            .service(service)
                            .unwrap_or(&[])
                            .iter()
                            .any(|p| p.cluster_ip == r.dest)
                    })
                    .map(|r| format!("{} via {} (source {})", r.dest, r.dev, r.src))
                    .collect();
                format!("gets it: {}", routes.join(", "))
            }
            Ok(_) | Err(Skip::NotAttached) => match pod.attachment(network) {
                Some(_) => format!("not used: no {family} address on {network}"),
                None => format!("not used: not attached to {network}"),
            },
            Err(skip) => format!("not used: {skip}"),
        };
        let _ = writeln!(out, "  {}: {why}", pod.key());
    }
    if pods.is_empty() {
        out.push_str("  (none)\n");
    }
    out
}
