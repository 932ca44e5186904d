//! `proxyd render` and `proxyd explain`: one read of the cluster (or the
//! manifests), then what this node would program, as text
//! ([`node_inspect`] words it).

use std::process::ExitCode;

use node_inspect::listing::Shown;
use node_inspect::{explain, render};
use slice_model::IpFamily;

use crate::settings::flags::{ExplainArgs, RenderArgs};
use crate::snapshot_engine::{one_shot, slices_of};

/// `proxyd render`: the ruleset, and the services table.
pub fn render(args: RenderArgs) -> ExitCode {
    // Without --ip-family the IPv6 table is rendered too, from the IPv6
    // slices kept for it (the IPv4 engine is fed as they stream by).
    let both = args.proxy.ip_family.is_none() && !args.proxy.multus;
    let keep = crate::snapshot_engine::ipv6_slices_if(both);
    one_shot("render", &args.source, &args.proxy, &keep, |l| {
        if args.proxy.multus {
            let (pods, networks) = l
                .snapshot
                .multus_view(&l.node, &crate::snapshot_engine::selection(&args.proxy));
            let e = &l.engine;
            return Ok(multus_dataplane::view::render_pods(
                &e.services,
                &e.endpoints,
                l.config.family,
                &pods,
                &networks,
            )?);
        }
        let table = (!args.nft_only).then_some(if args.all_endpoints {
            Shown::All
        } else {
            Shown::First(8)
        });
        let (mut text, syncer) = render::render_keeping_view(&l.engine, &l.config, table)?;
        // The process ends next: freeing the view piece by piece would only
        // cost time.
        std::mem::forget(syncer);
        // Without --ip-family, the IPv6 table follows when the objects
        // hold IPv6 services (kube-proxy writes both where the node has
        // IPv6), as `explain` does.
        if both {
            let v6 = crate::ProxyArgs {
                ip_family: Some(slice_model::IpFamily::V6),
                ..args.proxy.clone()
            };
            let engine = crate::snapshot_engine::engine(&l.snapshot, &l.node, &v6);
            if !engine.services.is_empty() {
                let config = crate::effective::effective(&v6, &l.snapshot.facts);
                let (six, syncer) = render::render_keeping_view(&engine, &config, table)?;
                std::mem::forget(syncer);
                std::mem::forget(engine);
                text.push('\n');
                text.push_str(&six);
            }
        }
        Ok(text)
    })
}

/// `proxyd explain`: one service, endpoint by endpoint.
pub fn explain(args: ExplainArgs) -> ExitCode {
    // Only the asked-for service's slices are kept for the explanation.
    let keep = slices_of(explain::parse_query(&args.service).ok().map(|(name, _)| name));
    one_shot("explain", &args.source, &args.proxy, &keep, |l| {
        let selection = crate::snapshot_engine::selection(&args.proxy);
        let mut text = explain::explain(&l.snapshot, &l.engine, &l.config, &selection, &l.node, &args.service)?;
        // Without --ip-family, a service with IPv6 cluster IPs is explained
        // for the IPv6 proxier too (kube-proxy runs both where the node
        // has IPv6).
        if args.proxy.ip_family.is_none() {
            let (name, _) = explain::parse_query(&args.service)?;
            let v6 = crate::ProxyArgs {
                ip_family: Some(IpFamily::V6),
                ..args.proxy.clone()
            };
            let engine = crate::snapshot_engine::engine(&l.snapshot, &l.node, &v6);
            if engine.services.service(&name).is_some_and(|ports| !ports.is_empty()) {
                let config = crate::effective::effective(&v6, &l.snapshot.facts);
                text.push('\n');
                text.push_str(&explain::explain(
                    &l.snapshot,
                    &engine,
                    &config,
                    &selection,
                    &l.node,
                    &args.service,
                )?);
            }
        }
        if args.proxy.multus {
            let (service, _) = explain::parse_query(&args.service)?;
            let (pods, networks) = l.snapshot.multus_view(&l.node, &selection);
            text.push_str(&multus_dataplane::view::explain_pods(
                &service,
                &l.engine.services,
                l.config.family,
                &pods,
                &networks,
            ));
        }
        Ok(text)
    })
}
