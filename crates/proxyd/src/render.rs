//! `proxyd render`: the ruleset proxyd would apply for a set of objects,
//! and a table of services and the endpoints they use.

use std::collections::BTreeSet;
use std::process::ExitCode;

use endpoints_map::topology::TopologyMode;
use slice_model::ServicePortInfo;

use crate::listing::Shown;
use crate::settings::flags::RenderArgs;
use crate::snapshot_engine::one_shot;
use endpoints_map::Engine;
use nft_dataplane::desired::{EndpointGroup, GroupVerdict};
use nft_dataplane::element::proto;
use nft_dataplane::{DataplaneConfig, NftSyncer, Recording, ServiceTarget, SyncKind};

/// `proxyd render` from the command line.
pub fn main(args: RenderArgs) -> ExitCode {
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
        let (mut text, syncer) = render_keeping_view(&l.engine, &l.config, table)?;
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
                let (six, syncer) = render_keeping_view(&engine, &config, table)?;
                std::mem::forget(syncer);
                std::mem::forget(engine);
                text.push('\n');
                text.push_str(&six);
            }
        }
        Ok(text)
    })
}

/// The full nft ruleset, then (with `table`) the services table, and the
/// syncer that holds the table's view, for a caller that would rather not
/// spend the time to free it.
fn render_keeping_view(
    engine: &Engine,
    config: &DataplaneConfig,
    table: Option<Shown>,
) -> anyhow::Result<(String, NftSyncer<Recording>)> {
    let mut syncer = NftSyncer::new(config.clone(), Recording::default());
    syncer.sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)?;
    let mut out = syncer.dataplane().applied.pop().map(|t| t.text()).unwrap_or_default();
    if let Some(shown) = table {
        out.push('\n');
        out.push_str(&services_table(engine, config, shown));
    }
    Ok((out, syncer))
}

fn group_text(group: Option<&EndpointGroup>, shown: Shown) -> String {
    let Some(g) = group else {
        return "-".into();
    };
    match g.verdict() {
        GroupVerdict::Reject => "REJECT (no endpoints)".into(),
        GroupVerdict::Drop => "DROP (none usable here)".into(),
        GroupVerdict::Forward => {
            let eps = g
                .backends
                .iter()
                .map(|b| format!("{}{}", b.addr, if b.local { "*" } else { "" }));
            // Every endpoint of a group gets the same share of new
            // connections.
            match g.backends.len() {
                1 => shown.list(eps, "endpoints"),
                n => format!("{} (1/{n} each)", shown.list(eps, "endpoints")),
            }
        }
    }
}

fn frontends_text(t: &ServiceTarget, shown: Shown) -> String {
    let mut parts = vec![std::net::SocketAddr::new(t.cluster_ip, t.port).to_string()];
    if t.external.is_some() {
        if !t.external_ips.is_empty() {
            let ips = t
                .external_ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, t.port).to_string());
            parts.push(format!("ext {}", shown.list(ips, "external IPs")));
        }
        if !t.load_balancer_ips.is_empty() {
            let ips = t
                .load_balancer_ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, t.port).to_string());
            parts.push(format!("lb {}", shown.list(ips, "load balancer IPs")));
        }
        parts.extend(t.node_port.map(|p| format!("node :{p}")));
    }
    parts.join(" ")
}

/// What shapes a port's traffic, read from its plan (`t`).
fn notes(port: &ServicePortInfo, t: &ServiceTarget, config: &DataplaneConfig, shown: Shown) -> String {
    let mut notes = Vec::new();
    if port.internal_policy_local {
        notes.push("internal Local".to_owned());
    }
    if port.external_policy_local && port.externally_accessible() {
        notes.push("external Local".to_owned());
    }
    match t.topology {
        TopologyMode::PreferSameZone => notes.push(format!("zone {}", config.node_zone.as_deref().unwrap_or_default())),
        TopologyMode::PreferSameNode => notes.push("same node".into()),
        TopologyMode::None => {}
    }
    if t.internal.terminating_fallback || t.external.as_ref().is_some_and(|g| g.terminating_fallback) {
        notes.push("terminating fallback".into());
    }
    if let Some(t) = port.session_affinity {
        notes.push(format!("affinity {}s", t.as_secs()));
    }
    if !port.load_balancer_source_ranges.is_empty() {
        let ranges = port.load_balancer_source_ranges.iter().map(ToString::to_string);
        notes.push(format!("from {}", shown.list(ranges, "source ranges")));
    }
    notes.join(", ")
}

/// One line per service port: frontends, the endpoints internal and
/// external traffic go to (`*`: on this node), and what shapes them; long
/// lists as `shown` says.
pub fn services_table(engine: &Engine, config: &DataplaneConfig, shown: Shown) -> String {
    let header = ["SERVICE PORT", "PROTO", "FRONTENDS", "INTERNAL", "EXTERNAL", "NOTES"];
    let mut rows: Vec<[String; 6]> = Vec::new();
    for port in engine.services.iter() {
        let eps = engine.endpoints.get(&port.name).unwrap_or(&[]);
        let t = ServiceTarget::plan(port, eps, config);
        rows.push([
            port.name.short(),
            proto(port.name.protocol).to_uppercase(),
            frontends_text(&t, shown),
            group_text(Some(&t.internal), shown),
            group_text(t.external.as_ref(), shown),
            notes(port, &t, config, shown),
        ]);
    }
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            l.push_str(c);
            if i + 1 < cells.len() {
                // Padded by hand: a format width is at most 65,535, and a
                // cell with every endpoint of a large service is wider.
                l.extend(std::iter::repeat_n(' ', w - c.len() + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header);
    for r in &rows {
        line(&r.each_ref().map(String::as_str));
    }
    out
}
