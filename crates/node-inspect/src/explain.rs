//! The explanation of `proxyd explain NAMESPACE/SERVICE[:PORT]`: for each service port, the
//! slices that contributed, every endpoint with its conditions and why it
//! is or is not used for traffic to the cluster IP and from outside, and
//! the nftables elements and chains that implement it.
//!
//! Everything here is read from the model the proxier programs: services
//! and slices converted by the watch path's own conversion (handed out by
//! the snapshot as views), the merged endpoints of the endpoints map, the
//! planner's decision for each endpoint and why
//! ([`Categorized::use_of`](endpoints_map::topology::Categorized::use_of)),
//! and the table as a syncer programs it (a frontend two services claim is
//! shown under the one that holds it). [`explain_port`] is that reading as
//! data; the text only words it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::net::SocketAddr;

use endpoints_map::topology::{EndpointUse, TopologyDecision, TopologyMode};
use informer_glue::selection::{Handling, Selection};
use slice_model::{
    BaseEndpointInfo, Endpoint, IpFamily, NodeHint, SERVICE_NAME_LABEL, ServiceName, ServicePortInfo, ServiceType,
};

use daemon_sources::snapshot::{SliceView, Snapshot};
use endpoints_map::Engine;
use nft_dataplane::desired::{DataplaneConfig, ServiceTarget, choose};
use nft_dataplane::element::proto;
use nft_dataplane::fragment;
use nft_dataplane::names::FamilyWords;
use nft_dataplane::{KernelModel, NftSyncer, Recording, SyncKind};

/// Why a service cannot be explained.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The query is not `NAMESPACE/SERVICE[:PORT]`.
    #[error("{0:?}: expected NAMESPACE/SERVICE or NAMESPACE/SERVICE:PORT")]
    Query(String),
    /// No such service; the names of its namespace's services.
    #[error("no service {name}; services in namespace {}: {}", name.namespace, known_text(.known))]
    NoService {
        /// The service asked about.
        name: ServiceName,
        /// The services of its namespace.
        known: Vec<String>,
    },
    /// The service has no such port; its ports, named and numbered.
    #[error("service {name} has no port {port:?}; its ports: {}", ports.join(", "))]
    NoPort {
        /// The service asked about.
        name: ServiceName,
        /// The port asked about.
        port: String,
        /// The service's ports.
        ports: Vec<String>,
    },
    /// Planning the table failed.
    #[error("planning the table: {0}")]
    Plan(#[from] nft_dataplane::DataplaneError),
}

fn known_text(known: &[String]) -> String {
    if known.is_empty() {
        "none".into()
    } else {
        known.join(", ")
    }
}

/// Splits `ns/name[:port]`.
pub fn parse_query(q: &str) -> Result<(ServiceName, Option<String>), ExplainError> {
    let (svc, port) = match q.split_once(':') {
        Some((s, p)) => (s, Some(p.to_owned())),
        None => (q, None),
    };
    let Some((ns, name)) = svc.split_once('/').filter(|(n, s)| !n.is_empty() && !s.is_empty()) else {
        return Err(ExplainError::Query(q.to_owned()));
    };
    Ok((ServiceName::new(ns, name), port))
}

/// The whole explanation, as text.
pub fn explain(
    snapshot: &Snapshot,
    engine: &Engine,
    config: &DataplaneConfig,
    selection: &Selection,
    node: &str,
    query: &str,
) -> Result<String, ExplainError> {
    let (name, port_filter) = parse_query(query)?;
    let view = snapshot
        .service(&name, selection)
        .map_err(|known| ExplainError::NoService {
            name: name.clone(),
            known,
        })?;
    let mut out = String::new();
    let info = &view.info;
    let cluster_ips: Vec<String> = if info.headless {
        vec!["None".into()]
    } else {
        info.cluster_ips.iter().map(ToString::to_string).collect()
    };
    let _ = writeln!(
        out,
        "Service {name}: type {}, cluster IPs {}",
        info.service_type,
        cluster_ips.join(", ")
    );
    let _ = writeln!(
        out,
        "  this node: {node}, {} proxier, zone {}",
        config.family,
        config.node_zone.as_deref().unwrap_or("(none)")
    );
    let ports = engine.services.service(&name).unwrap_or(&[]);
    if ports.is_empty() {
        let why = match &view.handling {
            Handling::NotSelected => format!(
                "its labels do not match this proxy's selector {}: another proxy handles it",
                selection.label_selector()
            ),
            Handling::Proxied if info.service_type == ServiceType::ExternalName => {
                "it is an ExternalName alias: there is nothing to proxy".into()
            }
            Handling::Proxied => "it has no cluster IP of this family, or no ports".into(),
            Handling::Headless => "it is headless (clusterIP: None): clients reach the pods directly".into(),
            other => other.to_string(),
        };
        let _ = writeln!(out, "  not programmed: {why}");
        return Ok(out);
    }
    let slices = snapshot.slices_of_service(&name, selection);
    let (table, targets) = programmed(&name, engine, config)?;
    if let Some(reason) = kernel_refusal(&name, engine, config) {
        let _ = writeln!(
            out,
            "  NOT PROGRAMMED: the kernel refuses this service's rules ({reason}); \
             proxyd leaves it out, programs every other service, and checks it again with backoff \
             (metric proxyd_services_refused)"
        );
    }
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
        let explained = explain_port(port, eps, config);
        write_port(&mut out, &explained, &slices, config, node);
        if let Some(t) = targets.iter().find(|t| t.name == port.name) {
            implementation(&mut out, t, config, &table);
        }
    }
    if !matched {
        return Err(ExplainError::NoPort {
            port: port_filter.unwrap_or_default(),
            ports: ports.iter().map(|p| format!("{} ({})", p.name.port, p.port)).collect(),
            name,
        });
    }
    Ok(out)
}

/// What the kernel says of `name`'s rules when it refuses them (and not
/// the fixed chains alone): asked of this host's kernel, in a check that
/// commits nothing, where this process may change nftables; else of the
/// kernel model.
fn kernel_refusal(name: &ServiceName, engine: &Engine, config: &DataplaneConfig) -> Option<String> {
    fn refusal<D: nft_dataplane::Dataplane>(
        mut syncer: NftSyncer<D>,
        name: &ServiceName,
        engine: &Engine,
    ) -> Option<String> {
        let (services, endpoints) = (&engine.services, &engine.endpoints);
        syncer.check_services(services, endpoints, &[])?.ok()?;
        syncer
            .check_services(services, endpoints, std::slice::from_ref(name))?
            .err()
            .map(|e| e.to_string())
    }
    let here = linux_dataplane::Netns::Current;
    if linux_dataplane::check_netlink(&here).is_ok() {
        refusal(
            NftSyncer::new(config.clone(), linux_dataplane::WatchedNft::new(here)),
            name,
            engine,
        )
    } else {
        refusal(NftSyncer::new(config.clone(), KernelModel::default()), name, engine)
    }
}

/// What a decision about one endpoint says, in words: the reason is the
/// planner's ([`EndpointUse`]), only worded here.
fn use_text(why: EndpointUse, e: &BaseEndpointInfo, config: &DataplaneConfig) -> String {
    match why {
        EndpointUse::Used => "USED".into(),
        EndpointUse::TerminatingFallback => {
            "USED (terminating fallback: no ready endpoint, serving terminating ones are used)".into()
        }
        EndpointUse::NotLocal => "not used: not on this node (Local policy)".into(),
        EndpointUse::NotReadyNorServing => "not used: not ready and not serving".into(),
        EndpointUse::TerminatingWhileReadyExist => "not used: terminating, and ready endpoints exist".into(),
        EndpointUse::ServingNotReady => "not used: serving but not ready, and not terminating".into(),
        EndpointUse::OutsideTopology(TopologyMode::PreferSameNode) => {
            "not used: node hints: hinted for other nodes only".into()
        }
        EndpointUse::OutsideTopology(_) => format!(
            "not used: hinted for zone(s) {:?}, this node is in {}",
            e.zone_hints().as_slice(),
            config.node_zone.as_deref().unwrap_or_default()
        ),
    }
}

/// One endpoint of a service port and what reaches it.
#[derive(Clone, Debug)]
pub struct EndpointReach {
    /// The merged endpoint, as the endpoints map holds it.
    pub endpoint: BaseEndpointInfo,
    /// Traffic to the cluster IP (internal traffic policy).
    pub internal: EndpointUse,
    /// Traffic to node ports, external and load-balancer IPs (external
    /// traffic policy); `None` when the port is not reachable from outside.
    pub external: Option<EndpointUse>,
}

/// One service port as the proxier decides it.
#[derive(Clone, Debug)]
pub struct PortExplanation<'a> {
    /// The port.
    pub port: &'a ServicePortInfo,
    /// How topology narrowed the Cluster-policy endpoints, and why.
    pub topology: (TopologyMode, TopologyDecision),
    /// Every endpoint of the port in the endpoints map, in its order.
    pub endpoints: Vec<EndpointReach>,
}

impl PortExplanation<'_> {
    /// The endpoints new connections reach: to the cluster IP, or (when
    /// `external`) from outside.
    pub fn used(&self, external: bool) -> impl Iterator<Item = &BaseEndpointInfo> {
        self.endpoints
            .iter()
            .filter(move |e| if external { e.external } else { Some(e.internal) }.is_some_and(EndpointUse::is_used))
            .map(|e| &e.endpoint)
    }
}

/// What reaches each endpoint of `port`, from the decision the planner
/// makes ([`choose`]).
pub fn explain_port<'a>(
    port: &'a ServicePortInfo,
    endpoints: &[BaseEndpointInfo],
    config: &DataplaneConfig,
) -> PortExplanation<'a> {
    let chosen = choose(port, endpoints, config);
    let uses = |e: &BaseEndpointInfo, local_policy: bool| chosen.use_of(e, local_policy, config.node_zone.as_deref());
    PortExplanation {
        port,
        topology: (chosen.topology, chosen.topology_decision),
        endpoints: endpoints
            .iter()
            .map(|e| EndpointReach {
                endpoint: e.clone(),
                internal: uses(e, port.internal_policy_local),
                external: port
                    .externally_accessible()
                    .then(|| uses(e, port.external_policy_local)),
            })
            .collect(),
    }
}

fn write_port(out: &mut String, x: &PortExplanation<'_>, slices: &[SliceView], config: &DataplaneConfig, node: &str) {
    let port = x.port;
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
    let _ = writeln!(out, "  topology: {}", topology_text(x.topology.1, config, node));

    let _ = writeln!(out, "  slices:");
    if slices.is_empty() {
        let _ = writeln!(
            out,
            "    none (no EndpointSlice is labelled {SERVICE_NAME_LABEL}={})",
            port.name.service.name
        );
    }
    let mut seen: BTreeMap<SocketAddr, &str> = BTreeMap::new();
    for slice in slices {
        slice_lines(out, slice, x, config, node, &mut seen);
    }
    let used = |external: bool| {
        let v: Vec<String> = x.used(external).map(|e| e.socket_addr().to_string()).collect();
        if v.is_empty() {
            "nothing".into()
        } else {
            crate::listing::Shown::First(8).joined(v.into_iter(), "endpoints", ", ")
        }
    };
    let _ = write!(out, "  result: to the cluster IP -> {}", used(false));
    if port.externally_accessible() {
        let _ = write!(out, "; from outside -> {}", used(true));
    }
    out.push('\n');
}

fn topology_text(d: TopologyDecision, config: &DataplaneConfig, node: &str) -> String {
    match d {
        TopologyDecision::UsingNodeHints => format!("node hints used: only endpoints hinted for node {node}"),
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

/// The slice's endpoints on this port, each with what reaches it.
fn slice_lines<'s>(
    out: &mut String,
    slice: &'s SliceView,
    x: &PortExplanation<'_>,
    config: &DataplaneConfig,
    node: &str,
    seen: &mut BTreeMap<SocketAddr, &'s str>,
) {
    let port = x.port;
    let (model, warnings) = match &slice.converted {
        Ok((m, w)) => (m, w),
        Err(e) => {
            let _ = writeln!(out, "    {} ({}): {e}", slice.name, slice.address_type);
            return;
        }
    };
    let family = model.content.endpoints.first().map(|e| e.family());
    let other_family = family.is_some_and(|f| f != config.family)
        || matches!(
            (slice.address_type.as_str(), config.family),
            ("IPv4", IpFamily::V6) | ("IPv6", IpFamily::V4)
        );
    let _ = writeln!(
        out,
        "    {} ({}, {} endpoints){}",
        slice.name,
        slice.address_type,
        model.content.endpoints.len(),
        if other_family {
            ": other IP family: this proxier ignores it"
        } else {
            ""
        }
    );
    for w in warnings {
        let _ = writeln!(out, "      skipped: {w}");
    }
    if other_family {
        return;
    }
    let Some(slice_port) = model
        .content
        .ports
        .iter()
        .find(|p| *p.name == *port.name.port && p.protocol == port.name.protocol)
    else {
        let _ = writeln!(
            out,
            "      has no port named {:?} ({}): contributes nothing to this port",
            &*port.name.port,
            proto(port.name.protocol).to_uppercase()
        );
        return;
    };
    for ep in &model.content.endpoints {
        let c = ep.conditions;
        let on = ep.host().unwrap_or("(no node)");
        let mut state = format!(
            "{}{}{}, node {on}{}",
            if c.ready { "ready" } else { "not ready" },
            if c.serving && !c.ready { ", serving" } else { "" },
            if c.terminating { ", terminating" } else { "" },
            if ep.is_on_node(node) { " (this node)" } else { "" },
        );
        if !ep.zone_hints.is_empty() {
            let zones: Vec<&str> = ep.zone_hints.as_slice().iter().map(|z| &**z).collect();
            let _ = write!(state, ", zone hints [{}]", zones.join(","));
        }
        if !ep.node_hints.is_empty() {
            let nodes: Vec<&str> = ep.node_hints.as_slice().iter().map(|n| n.as_str()).collect();
            let _ = write!(state, ", node hints [{}]", nodes.join(","));
        }
        let sa = SocketAddr::new(ep.addr, slice_port.port.get());
        let _ = writeln!(out, "      {sa}: {state}");
        if let Some(first) = seen.get(&sa) {
            let _ = writeln!(
                out,
                "        the same endpoint as in slice {first}: counted once (a copy on this node wins)"
            );
            continue;
        }
        seen.insert(sa, &slice.name);
        let Some(e) = x.endpoints.iter().find(|e| e.endpoint.socket_addr() == sa) else {
            let _ = writeln!(out, "        not in the endpoints map");
            continue;
        };
        if e.endpoint.node_hint == NodeHint::ThisNode && x.topology.0 == TopologyMode::PreferSameNode {
            let _ = writeln!(out, "        hinted for this node");
        }
        let _ = writeln!(
            out,
            "        to the cluster IP: {}",
            use_text(e.internal, &e.endpoint, config)
        );
        if let Some(ext) = e.external {
            let _ = writeln!(out, "        from outside:      {}", use_text(ext, &e.endpoint, config));
        }
    }
}

/// The table as a syncer programs every service (so that a frontend two
/// services claim goes to the one that holds it), and its plan of `name`:
/// what is explained is what the syncer planned.
fn programmed(
    name: &ServiceName,
    engine: &Engine,
    config: &DataplaneConfig,
) -> Result<(NftSyncer<Recording>, Vec<ServiceTarget>), nft_dataplane::DataplaneError> {
    let mut table = NftSyncer::new(config.clone(), Recording::default());
    let planned = name.clone();
    table.keep_plans(Box::new(move |t| t.name.service == planned));
    table.sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)?;
    let targets = table.take_plans().and_then(|mut p| p.services.remove(name));
    Ok((table, targets.unwrap_or_default()))
}

/// The elements, chains and rules of one port, as the table holds them:
/// built as the syncer built them, with the frontends this service holds;
/// a frontend another service holds first is named with its holder.
fn implementation(out: &mut String, t: &ServiceTarget, config: &DataplaneConfig, table: &NftSyncer<Recording>) {
    let service = &t.name.service;
    let mut held_by_others = Vec::new();
    let frag = fragment::build(
        std::slice::from_ref(t),
        config,
        |f| match table.frontend_owner(f) {
            Some(owner) if owner != service => {
                held_by_others.push((*f, owner.clone()));
                false
            }
            _ => true,
        },
        None,
    );
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
            let _ = writeln!(out, "      {}", crate::listing::cut(&r.text(words), 400));
        }
    }
    for shared in &frag.shared {
        let why = match shared {
            nft_dataplane::fragment::Shared::Hairpin(_) => " (masquerade an endpoint reaching itself)",
            nft_dataplane::fragment::Shared::ClusterIp(_) => " (other ports of this address are rejected)",
            nft_dataplane::fragment::Shared::NodePortNotRelayed(_) => {
                " (on loopback rejected and counted: the localhost relay answers TCP only)"
            }
        };
        let _ = writeln!(out, "    {}: {}{why}", shared.set(), shared.element().key);
    }
    if frag.entries.is_empty() {
        let _ = writeln!(out, "    nothing");
    }
    for (frontend, owner) in held_by_others {
        let _ = writeln!(
            out,
            "    {frontend}: not this service's: service {owner} holds it (the first to claim it); this one's use waits until it is free"
        );
    }
}
