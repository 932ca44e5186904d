//! The CRI v1 `RuntimeService` calls a node proxy makes to find pods'
//! network namespaces, and its tests make to stand in for a runtime:
//! `Version`, `RunPodSandbox`, `StopPodSandbox`, `RemovePodSandbox`,
//! `PodSandboxStatus`, `ListPodSandbox` and `GetContainerEvents`.
//!
//! The code is generated from `proto/runtime_v1.proto`, a subset of
//! cri-api's `runtime/v1` API with its messages unchanged, and checked in,
//! so that building needs no `protoc`; `tests/generated.rs` regenerates it
//! and fails on a difference. A runtime answers these calls by their method
//! paths (`/runtime.v1.RuntimeService/ListPodSandbox`), so the subset
//! talks to containerd and CRI-O as the whole API does; fields a runtime
//! sends that the subset lacks are skipped by the decoder.
//!
//! The client takes any tonic channel (`RuntimeServiceClient::new`): the
//! caller connects it, over a unix socket for a real runtime.

/// `runtime.v1`: messages, `runtime_service_client` and
/// `runtime_service_server`.
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls,
    rustdoc::broken_intra_doc_links,
    reason = "generated code, its docs the proto's comments"
)]
pub mod v1 {
    include!("runtime.v1.rs");
}
