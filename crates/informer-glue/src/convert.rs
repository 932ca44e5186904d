//! `k8s-openapi` objects into the slice model.

use crate::versions::ListField;
use k8s_openapi::api::discovery::v1 as discovery;
use slice_model::{
    EndpointSlice, HOSTNAME_TOPOLOGY_KEY, Interner, RawEndpoint, RawTargetRef, SERVICE_NAME_LABEL, SliceBuilder,
    SliceError, SliceName, SliceWarning, TRIGGER_TIME_ANNOTATION,
};

/// Converts an EndpointSlice from an ADDED or MODIFIED event, applying the
/// [slice rules](slice_model::rules). Parts that cannot be used are skipped and named
/// in the warnings; a slice that cannot be filed under a service (or is of
/// type FQDN) is rejected. Node names and zone sets are shared through
/// `interner`.
pub fn slice_from_k8s(
    slice: &discovery::EndpointSlice,
    interner: &mut Interner,
) -> Result<(EndpointSlice, Vec<SliceWarning>), SliceError> {
    convert(slice, interner, false)
}

/// [`slice_from_k8s`], keeping what a proxy does not read: each endpoint's
/// [facts](slice_model::EndpointFacts) (hostname, node name, zone, target
/// reference) and each port's `appProtocol`.
pub fn slice_with_facts_from_k8s(
    slice: &discovery::EndpointSlice,
    interner: &mut Interner,
) -> Result<(EndpointSlice, Vec<SliceWarning>), SliceError> {
    convert(slice, interner, true)
}

fn convert(
    slice: &discovery::EndpointSlice,
    interner: &mut Interner,
    keep_facts: bool,
) -> Result<(EndpointSlice, Vec<SliceWarning>), SliceError> {
    let meta = &slice.metadata;
    let label = meta.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL));
    let mut b = SliceBuilder::new(
        interner,
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        label.map(String::as_str),
        Some(slice.address_type.as_str()),
    )?;
    if keep_facts {
        b = b.keeping_facts();
    }
    b.reserve(slice.ports.as_ref().map_or(0, Vec::len), slice.endpoints.items().len());
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        b.port_with_app_protocol(
            i,
            p.name.as_deref(),
            p.protocol.as_deref(),
            p.port.map(i64::from),
            p.app_protocol.as_deref(),
        );
    }
    for (i, e) in slice.endpoints.items().iter().enumerate() {
        let cond = e.conditions.as_ref();
        let raw = RawEndpoint {
            first_address: e.addresses.first().map(String::as_str),
            ready: cond.and_then(|c| c.ready),
            serving: cond.and_then(|c| c.serving),
            terminating: cond.and_then(|c| c.terminating),
            node_name: e.node_name.as_deref(),
            topology_hostname: e
                .deprecated_topology
                .as_ref()
                .and_then(|t| t.get(HOSTNAME_TOPOLOGY_KEY))
                .map(String::as_str),
            hostname: e.hostname.as_deref(),
            zone: e.zone.as_deref(),
            target_ref: e.target_ref.as_ref().map(|r| RawTargetRef {
                kind: r.kind.as_deref(),
                namespace: r.namespace.as_deref(),
                name: r.name.as_deref(),
                uid: r.uid.as_deref(),
            }),
        };
        let zones = e
            .hints
            .iter()
            .flat_map(|h| h.for_zones.iter().flatten())
            .map(|z| z.name.as_str());
        let nodes = e
            .hints
            .iter()
            .flat_map(|h| h.for_nodes.iter().flatten())
            .map(|n| n.name.as_str());
        b.endpoint_with_node_hints(i, raw, zones, nodes);
    }
    let trigger = meta.annotations.as_ref().and_then(|a| a.get(TRIGGER_TIME_ANNOTATION));
    Ok(b.finish(trigger.map(String::as_str)))
}

/// The name of a slice from a DELETED event: namespace and name are all a
/// delete needs ([rule 6](slice_model::rules)); FQDN slices are ignored ([rule 4](slice_model::rules)).
pub fn slice_name_of(slice: &discovery::EndpointSlice) -> Result<SliceName, SliceError> {
    slice_model::deleted_slice_name(
        slice.metadata.namespace.as_deref(),
        slice.metadata.name.as_deref(),
        Some(slice.address_type.as_str()),
    )
}
