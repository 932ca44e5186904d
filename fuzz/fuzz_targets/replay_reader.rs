//! The replay reader on arbitrary input: every line either replays or
//! stops the replay with a line error; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use daemon_sources::replay::{Options, Replayer};

fuzz_target!(|data: &[u8]| {
    let opts = Options {
        node_name: "node-1".into(),
        quiet: true,
        ..Options::default()
    };
    let mut r = Replayer::new(opts, Vec::new(), Box::new(|_| {}));
    let _ = r.run(data);
});
