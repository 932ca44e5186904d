//! The checked-in code is what the proto generates: regenerates it with
//! tonic-prost-build (which runs `protoc`) and compares. After changing the
//! proto, run this test with `CRI_API_BLESS=1` to write the new code.

use std::path::Path;

#[test]
#[ignore = "runs protoc (Debian's protobuf-compiler), which a first build must not need; CI runs it"]
fn the_checked_in_code_is_what_the_proto_generates() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("cri-api-generated-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    tonic_prost_build::configure()
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(&out)
        .compile_protos(&[crate_dir.join("proto/runtime_v1.proto")], &[crate_dir.join("proto")])
        .unwrap_or_else(|e| panic!("protoc or the proto: {e}"));
    let generated = std::fs::read_to_string(out.join("runtime.v1.rs")).unwrap();
    let checked_in_path = crate_dir.join("src/runtime.v1.rs");
    if std::env::var_os("CRI_API_BLESS").is_some() {
        std::fs::write(&checked_in_path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&checked_in_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        generated == checked_in,
        "src/runtime.v1.rs is not what proto/runtime_v1.proto generates; rerun this test with CRI_API_BLESS=1"
    );
}
