//! `proxyd explain NAMESPACE/SERVICE[:PORT]`: for each service port, the
//! slices that contributed, every endpoint with its conditions and why it
//! is or is not used for cluster and local traffic, and the nftables
//! elements and chains that implement it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use endpoints_map::topology::{Categorized, TopologyDecision, TrafficPolicies, categorize};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use slice_model::{BaseEndpointInfo, Endpoint, IpFamily, SERVICE_NAME_LABEL, ServiceName, ServicePortInfo};

use crate::cli::ExplainArgs;
use crate::dataplane::desired::{DataplaneConfig, ServiceTarget, plan_service};
use crate::dataplane::fragment;
use crate::engine::Engine;
use crate::snapshot::{Snapshot, one_shot};
use nft_dataplane::element::proto;
use nft_dataplane::names::FamilyWords;

/// `proxyd explain` from the command line.
pub fn main(args: ExplainArgs) -> ExitCode {
    one_shot("explain", &args.source, &args.proxy, |l| {
        let mut text = explain(&l.snapshot, &l.engine, &l.config, &l.node, &args.service)?;
        if args.proxy.multus {
            let (service, _) = parse_query(&args.service)?;
            let (pods, networks) = l
                .snapshot
                .multus_view(&l.node, &crate::snapshot::selection(&args.proxy));
            text.push_str(&crate::multus::view::explain_pods(
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

/// Splits `ns/name[:port]`.
fn parse_query(q: &str) -> anyhow::Result<(ServiceName, Option<String>)> {
    let (svc, port) = match q.split_once(':') {
        Some((s, p)) => (s, Some(p.to_owned())),
        None => (q, None),
    };
    let Some((ns, name)) = svc.split_once('/').filter(|(n, s)| !n.is_empty() && !s.is_empty()) else {
        anyhow::bail!("{q:?}: expected NAMESPACE/SERVICE or NAMESPACE/SERVICE:PORT");
    };
    Ok((ServiceName::new(ns, name), port))
}

/// The whole explanation, as text.
pub fn explain(
    snapshot: &Snapshot,
    engine: &Engine,
    config: &DataplaneConfig,
    node: &str,
    query: &str,
) -> anyhow::Result<String> {
    let (name, port_filter) = parse_query(query)?;
    let svc = snapshot.services.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(&*name.namespace) && s.metadata.name.as_deref() == Some(&*name.name)
    });
    let Some(svc) = svc else {
        let mut known: Vec<String> = snapshot
            .services
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(&*name.namespace))
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        known.sort();
        anyhow::bail!(
            "no service {name}; services in namespace {}: {}",
            name.namespace,
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        );
    };
    let mut out = String::new();
    let spec = svc.spec.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "Service {name}: type {}, cluster IPs {}",
        spec.type_.as_deref().unwrap_or("ClusterIP"),
        spec.cluster_ips
            .clone()
            .filter(|ips| !ips.is_empty())
            .or_else(|| spec.cluster_ip.clone().map(|ip| vec![ip]))
            .unwrap_or_default()
            .join(", ")
    );
    let _ = writeln!(
        out,
        "  this node: {node}, {} proxier, zone {}",
        config.family,
        config.node_zone.as_deref().unwrap_or("(none)")
    );
    let ports = engine.services.service(&name).unwrap_or(&[]);
    if ports.is_empty() {
        let why = if spec.cluster_ip.as_deref() == Some("None") {
            "it is headless (clusterIP: None): clients reach the pods directly"
        } else if spec.type_.as_deref() == Some("ExternalName") {
            "it is an ExternalName alias: there is nothing to proxy"
        } else if !svc.metadata.labels.as_ref().is_none_or(|l| {
            !l.contains_key("service.kubernetes.io/service-proxy-name")
                && !l.contains_key("service.kubernetes.io/headless")
        }) {
            "its labels hand it to another proxy (service.kubernetes.io/service-proxy-name or headless)"
        } else {
            "it has no cluster IP of this family, or no ports"
        };
        let _ = writeln!(out, "  not programmed: {why}");
        return Ok(out);
    }
    let slices: Vec<&EndpointSlice> = snapshot
        .slices
        .iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(&*name.namespace)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .map(String::as_str)
                    == Some(&*name.name)
        })
        .collect();
    let targets = plan_service(&name, &engine.services, &engine.endpoints, config);
    let mut matched = false;
    for port in ports {
        let wanted = port_filter
            .as_deref()
            .is_none_or(|f| *f == *port.name.port || f == port.port.to_string());
        if !wanted {
            continue;
        }
        matched = true;
        let eps = engine.endpoints.get(&port.name).unwrap_or(&[]);
        explain_port(&mut out, port, eps, &slices, config, node);
        if let Some(t) = targets.iter().find(|t| t.name == port.name) {
            implementation(&mut out, t, config);
        }
    }
    if !matched {
        let names: Vec<String> = ports.iter().map(|p| format!("{} ({})", p.name.port, p.port)).collect();
        anyhow::bail!(
            "service {name} has no port {:?}; its ports: {}",
            port_filter.unwrap_or_default(),
            names.join(", ")
        );
    }
    Ok(out)
}

fn explain_port(
    out: &mut String,
    port: &ServicePortInfo,
    eps: &[BaseEndpointInfo],
    slices: &[&EndpointSlice],
    config: &DataplaneConfig,
    node: &str,
) {
    let port_name = if port.name.port.is_empty() {
        "(unnamed)"
    } else {
        &port.name.port
    };
    let _ = writeln!(
        out,
        "\nPort {port_name}: {}/{} on {}",
        port.port,
        proto(port.name.protocol).to_uppercase(),
        SocketAddr::new(port.cluster_ip, port.port.get())
    );
    if let Some(np) = port.node_port {
        let _ = writeln!(out, "  node port {np}");
    }
    for ip in &port.external_ips {
        let _ = writeln!(out, "  external IP {ip}");
    }
    for ip in &port.load_balancer_ips {
        let _ = writeln!(out, "  load-balancer IP {ip}");
    }
    let policy = |local: bool| if local { "Local" } else { "Cluster" };
    let _ = writeln!(
        out,
        "  internalTrafficPolicy {}, externalTrafficPolicy {}{}, session affinity {}",
        policy(port.internal_policy_local),
        policy(port.external_policy_local),
        if port.externally_accessible() {
            ""
        } else {
            " (not reachable from outside)"
        },
        port.session_affinity
            .map_or("none".to_owned(), |t| format!("ClientIP {}s", t.as_secs()))
    );
    let chosen = categorize(eps, TrafficPolicies::of(port), config.node_zone.as_deref());
    let _ = writeln!(out, "  topology: {}", topology_text(chosen.topology_decision, config));

    let _ = writeln!(out, "  slices:");
    if slices.is_empty() {
        let _ = writeln!(
            out,
            "    none (no EndpointSlice is labelled {SERVICE_NAME_LABEL}={})",
            port.name.service.name
        );
    }
    let mut seen: BTreeMap<SocketAddr, String> = BTreeMap::new();
    for slice in slices {
        slice_lines(out, slice, port, eps, &chosen, config, node, &mut seen);
    }
    let _ = writeln!(
        out,
        "  result: cluster traffic -> {}; local traffic -> {}",
        list(chosen.cluster.as_deref()),
        list(chosen.local.as_deref())
    );
}

fn list(eps: Option<&[&BaseEndpointInfo]>) -> String {
    match eps {
        None => "(policy not used)".into(),
        Some([]) => "nothing".into(),
        Some(e) => e
            .iter()
            .map(|e| e.socket_addr().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn topology_text(d: TopologyDecision, config: &DataplaneConfig) -> String {
    match d {
        TopologyDecision::UsingZoneHints => format!(
            "zone hints used: only endpoints hinted for zone {}",
            config.node_zone.as_deref().unwrap_or_default()
        ),
        TopologyDecision::NoReadyEndpoints => "no ready endpoint: hints do not apply".into(),
        TopologyDecision::SomeEndpointUnhinted => "hints ignored: a ready endpoint has no zone hint".into(),
        TopologyDecision::NodeHasNoZone => "hints ignored: this node has no zone".into(),
        TopologyDecision::NoEndpointForZone => "hints ignored: no endpoint is hinted for this node's zone".into(),
    }
}

#[allow(clippy::too_many_arguments, reason = "one line per endpoint needs the whole picture")]
fn slice_lines(
    out: &mut String,
    slice: &EndpointSlice,
    port: &ServicePortInfo,
    merged: &[BaseEndpointInfo],
    chosen: &Categorized<'_, BaseEndpointInfo>,
    config: &DataplaneConfig,
    node: &str,
    seen: &mut BTreeMap<SocketAddr, String>,
) {
    let name = slice.metadata.name.as_deref().unwrap_or("(no name)");
    let family_ok = match (slice.address_type.as_str(), config.family) {
        ("IPv4", IpFamily::V4) | ("IPv6", IpFamily::V6) => None,
        ("FQDN", _) => Some("FQDN slice: proxies ignore it"),
        _ => Some("other IP family: this proxier ignores it"),
    };
    let slice_port = slice.ports.iter().flatten().find(|p| {
        p.name.as_deref().unwrap_or_default() == &*port.name.port
            && p.protocol
                .as_deref()
                .unwrap_or("TCP")
                .eq_ignore_ascii_case(proto(port.name.protocol))
    });
    let _ = writeln!(
        out,
        "    {name} ({}, {} endpoints){}",
        slice.address_type,
        slice.endpoints.as_ref().map_or(0, Vec::len),
        family_ok.map(|w| format!(": {w}")).unwrap_or_default()
    );
    if family_ok.is_some() {
        return;
    }
    let Some(target_port) = slice_port.and_then(|p| p.port).and_then(|p| u16::try_from(p).ok()) else {
        let _ = writeln!(
            out,
            "      has no port named {:?} ({}): contributes nothing to this port",
            &*port.name.port,
            proto(port.name.protocol).to_uppercase()
        );
        return;
    };
    for ep in slice.endpoints.iter().flatten() {
        let cond = ep.conditions.clone().unwrap_or_default();
        let ready = cond.ready.unwrap_or(true);
        let serving = cond.serving.unwrap_or(ready);
        let terminating = cond.terminating.unwrap_or(false);
        let on = ep.node_name.as_deref().unwrap_or("(no node)");
        let zones: Vec<String> = ep
            .hints
            .iter()
            .flat_map(|h| h.for_zones.iter().flatten().map(|z| z.name.clone()))
            .collect();
        for addr in &ep.addresses {
            let state = format!(
                "{}{}{}, node {on}{}{}",
                if ready { "ready" } else { "not ready" },
                if serving && !ready { ", serving" } else { "" },
                if terminating { ", terminating" } else { "" },
                if on == node { " (this node)" } else { "" },
                if zones.is_empty() {
                    String::new()
                } else {
                    format!(", zone hints [{}]", zones.join(","))
                },
            );
            let Ok(ip) = addr.parse::<IpAddr>() else {
                let _ = writeln!(out, "      {addr}: {state}\n        not a valid IP address: ignored");
                continue;
            };
            let sa = SocketAddr::new(ip, target_port);
            let _ = writeln!(out, "      {sa}: {state}");
            if let Some(first) = seen.get(&sa) {
                let _ = writeln!(
                    out,
                    "        duplicate of the same endpoint in slice {first}: counted once"
                );
                continue;
            }
            seen.insert(sa, name.to_owned());
            let Some(e) = merged.iter().find(|e| e.socket_addr() == sa) else {
                let _ = writeln!(out, "        not in the endpoints map (dropped when slices merged)");
                continue;
            };
            let _ = writeln!(
                out,
                "        cluster: {}",
                verdict(e, chosen.cluster.as_deref(), chosen, true, config)
            );
            let _ = writeln!(
                out,
                "        local:   {}",
                verdict(e, chosen.local.as_deref(), chosen, false, config)
            );
        }
    }
}

/// Why `e` is or is not in `group`.
fn verdict(
    e: &BaseEndpointInfo,
    group: Option<&[&BaseEndpointInfo]>,
    chosen: &Categorized<'_, BaseEndpointInfo>,
    cluster: bool,
    config: &DataplaneConfig,
) -> String {
    let Some(group) = group else {
        return if cluster {
            "not used: every kind of traffic to this port uses Local policy".into()
        } else {
            "not used: no traffic to this port uses Local policy".into()
        };
    };
    let fallback = if cluster {
        chosen.cluster_terminating_fallback
    } else {
        chosen.local_terminating_fallback
    };
    if group.iter().any(|g| g.socket_addr() == e.socket_addr()) {
        return if fallback {
            "USED (terminating fallback: no ready endpoint, serving terminating ones are used)".into()
        } else {
            "USED".into()
        };
    }
    if !cluster && !e.is_local() {
        return "not used: not on this node".into();
    }
    if !(e.is_ready() || e.is_serving() && e.is_terminating()) {
        return "not used: not ready and not serving".into();
    }
    if !e.is_ready() {
        return "not used: terminating, and ready endpoints exist".into();
    }
    if cluster && chosen.topology_decision == TopologyDecision::UsingZoneHints {
        return format!(
            "not used: hinted for zone(s) {:?}, this node is in {}",
            e.zone_hints().as_slice(),
            config.node_zone.as_deref().unwrap_or_default()
        );
    }
    "not used".into()
}

fn implementation(out: &mut String, t: &ServiceTarget, config: &DataplaneConfig) {
    let frag = fragment::build(std::slice::from_ref(t), config, |_| true);
    let words = FamilyWords::of(config.family);
    let _ = writeln!(out, "  nftables (table {} proxyd):", words.table);
    for e in &frag.entries {
        if let fragment::Entry::Slots { frontend, endpoints } = e {
            let n = endpoints.len();
            let eps: Vec<String> = endpoints.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "    {frontend}: {n} slot(s), numgen random mod {n}, 1/{n} each -> {}",
                eps.join(", ")
            );
            continue;
        }
        e.for_each_element(|set, element| {
            let _ = writeln!(out, "    {set}: {element}");
        });
    }
    for c in &frag.chains {
        let _ = writeln!(out, "    chain {}:", c.id);
        for r in &c.rules {
            let _ = writeln!(out, "      {}", r.text(words));
        }
    }
    for (set, key) in &frag.shared {
        let why = match set {
            nft_dataplane::names::SetId::Hairpin => " (masquerade an endpoint reaching itself)",
            nft_dataplane::names::SetId::ClusterIps => " (other ports of this address are rejected)",
            _ => "",
        };
        let _ = writeln!(out, "    {set}: {key}{why}");
    }
    if frag.entries.is_empty() {
        let _ = writeln!(out, "    nothing");
    }
}
