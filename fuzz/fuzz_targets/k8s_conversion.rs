//! Slice and Service conversion on arbitrary JSON: through k8s-openapi
//! types and through the borrowed wire decoder, both paths either convert
//! (with warnings) or reject; nothing panics.
#![no_main]

use informer_glue::wire::WireObject;
use informer_glue::{service_from_k8s, slice_from_k8s};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use libfuzzer_sys::fuzz_target;
use slice_model::Interner;

fuzz_target!(|data: &[u8]| {
    let mut interner = Interner::new();
    if let Ok(slice) = serde_json::from_slice::<EndpointSlice>(data) {
        let _ = slice_from_k8s(&slice, &mut interner);
    }
    if let Ok(svc) = serde_json::from_slice::<Service>(data) {
        let _ = service_from_k8s(&svc);
    }
    if let Ok(obj) = serde_json::from_slice::<WireObject<'_>>(data) {
        let _ = obj.to_slice(&mut interner);
        let _ = obj.to_service();
        let _ = obj.deleted_slice_name();
    }
});
