//! The manifest reader (YAML/JSON, many documents, Lists) on arbitrary
//! text: it reads or reports an error naming the document; nothing panics.
#![no_main]

use std::path::Path;

use daemon_sources::manifests::{Manifests, parse_into};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let mut m = Manifests::default();
        let _ = parse_into(Path::new("fuzz.yaml"), text, &mut m);
    }
});
