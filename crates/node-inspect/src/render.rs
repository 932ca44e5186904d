//! What `proxyd render` prints: the ruleset a node proxy would apply for
//! a set of objects, and a table of services and the endpoints they use.

use std::collections::BTreeSet;

use endpoints_map::topology::TopologyMode;
use slice_model::ServicePortInfo;

use crate::listing::Shown;
use endpoints_map::Engine;
use nft_dataplane::desired::{EndpointGroup, GroupVerdict};
use nft_dataplane::element::proto;
use nft_dataplane::{DataplaneConfig, NftSyncer, Recording, ServiceTarget, SyncKind};

/// The full nft ruleset, then (with `table`) the services table, and the
/// syncer that holds the table's view, for a caller that would rather not
/// spend the time to free it.
pub fn render_keeping_view(
    engine: &Engine,
    config: &DataplaneConfig,
    table: Option<Shown>,
) -> Result<(String, NftSyncer<Recording>), nft_dataplane::DataplaneError> {
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
        for (tag, ips, what) in [
            ("ext", &t.external_ips, "external IPs"),
            ("lb", &t.load_balancer_ips, "load balancer IPs"),
        ] {
            if !ips.is_empty() {
                let addrs = ips.iter().map(|ip| std::net::SocketAddr::new(*ip, t.port).to_string());
                parts.push(format!("{tag} {}", shown.list(addrs, what)));
            }
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
