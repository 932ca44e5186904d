//! Lenient decoding of watched objects on arbitrary input: every kind's
//! `Watched` either decodes or names the field it could not, and what
//! proxyd makes of the object never panics.
#![no_main]

use informer_glue::lenient::Watched;
use informer_glue::multus::pod_from_k8s;
use informer_glue::node::{eligible, pod_cidrs_of, primary_ips_of, zone_of};
use informer_glue::selection::Selection;
use informer_glue::service_cidr::cidrs_of;
use informer_glue::{service_from_k8s, slice_from_k8s};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use libfuzzer_sys::fuzz_target;
use slice_model::Interner;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut interner = Interner::new();
    if let Ok(slice) = Watched::<EndpointSlice>::from_json(text).into_result() {
        let _ = slice_from_k8s(&slice, &mut interner);
        let _ = Selection::default().selects_slice(&slice);
    }
    if let Ok(svc) = Watched::<Service>::from_json(text).into_result() {
        let _ = service_from_k8s(&svc);
        let _ = Selection::default().handling(&svc);
    }
    if let Ok(node) = Watched::<Node>::from_json(text).into_result() {
        let _ = (
            zone_of(&node),
            pod_cidrs_of(&node),
            primary_ips_of(&node),
            eligible(&node),
        );
    }
    if let Ok(pod) = Watched::<Pod>::from_json(text).into_result() {
        let _ = pod_from_k8s(&pod);
    }
    if let Ok(cidr) = Watched::<ServiceCIDR>::from_json(text).into_result() {
        let _ = cidrs_of(&cidr);
    }
    // Inside a list, as kube's client reads one.
    let _ = serde_json::from_slice::<Vec<Watched<Service>>>(data);
});
