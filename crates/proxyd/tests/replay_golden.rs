//! Golden tests: every `tests/golden/*.args` run through the real
//! `proxyd replay` binary, output compared byte for byte; and the error
//! paths of the contract (bad lines stop the replay, name the line, exit 1).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden")
}

fn replay_bytes(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("proxyd starts");
    let mut input = child.stdin.take().expect("stdin");
    // A replay that stops early may close its stdin first; that is fine.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("proxyd finishes")
}

fn replay(args: &[&str], stdin: Option<&str>) -> Output {
    replay_bytes(args, stdin.unwrap_or("").as_bytes())
}

#[test]
fn golden_traces_replay_exactly() {
    let mut ran = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("tests/golden exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "args"))
        .collect();
    entries.sort();
    for args_file in entries {
        let stem = args_file
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 name")
            .to_owned();
        let base = stem.split('.').next().expect("base name");
        let trace = golden_dir().join(format!("{base}.jsonl"));
        let expected = std::fs::read_to_string(golden_dir().join(format!("{stem}.expected"))).expect("expected file");
        let args = std::fs::read_to_string(&args_file).expect("args file");
        let mut argv: Vec<&str> = args.split_whitespace().collect();
        let trace_s = trace.to_str().expect("utf-8 path");
        argv.push(trace_s);
        let out = replay(&argv, None);
        assert!(
            out.status.success(),
            "{stem}: exit {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).expect("utf-8 output");
        if got != expected {
            let (g, e): (Vec<_>, Vec<_>) = (got.lines().collect(), expected.lines().collect());
            let first = g
                .iter()
                .zip(&e)
                .position(|(a, b)| a != b)
                .unwrap_or(g.len().min(e.len()));
            panic!(
                "{stem}: output differs at line {} ({} lines vs {} expected)\n got: {}\nwant: {}",
                first + 1,
                g.len(),
                e.len(),
                g.get(first).unwrap_or(&"<none>"),
                e.get(first).unwrap_or(&"<none>")
            );
        }
        ran.push(stem);
    }
    assert!(ran.len() >= 12, "golden cases found: {ran:?}");
}

#[test]
fn final_only_prints_the_last_line_of_a_full_run() {
    let trace = golden_dir().join("a_move.jsonl");
    let path = trace.to_str().unwrap();
    let full = replay(&["--node-name", "node-1", path], None);
    let last = replay(&["--node-name", "node-1", "--final-only", path], None);
    let full = String::from_utf8(full.stdout).unwrap();
    assert!(full.lines().count() > 1);
    assert_eq!(
        String::from_utf8(last.stdout).unwrap(),
        format!("{}\n", full.lines().last().unwrap())
    );
}

const EMPTY: &str = "{\"endpoints\":[],\"staleEndpoints\":[],\"staleServiceNames\":[],\"localReadyEndpoints\":{}}\n";

#[test]
fn empty_input_and_bookmarks_give_one_empty_sync() {
    for input in [
        "",
        "\n\n",
        "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"EndpointSlice\"}}\n",
    ] {
        let out = replay(&["-"], Some(input));
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), EMPTY, "input {input:?}");
    }
}

#[test]
fn final_sync_runs_only_when_events_follow_the_last_sync() {
    let slice = r#"{"type":"ADDED","object":{"kind":"EndpointSlice","metadata":{"name":"a","namespace":"n","labels":{"kubernetes.io/service-name":"s"}},"endpoints":[{"addresses":["10.0.0.1"]}],"ports":[{"name":"","port":80}]}}"#;
    let sync = r#"{"type":"SYNC"}"#;
    let lines = |input: String| {
        String::from_utf8(replay(&[], Some(&input)).stdout)
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(lines(format!("{slice}\n{sync}\n")), 1);
    assert_eq!(lines(format!("{sync}\n{slice}\n")), 2);
    assert_eq!(
        lines(format!("{slice}\n{sync}\n{{\"type\":\"BOOKMARK\"}}\n")),
        1,
        "a bookmark is no event"
    );
    assert_eq!(lines(format!("{sync}\n{sync}\n")), 2);
}

#[test]
fn services_and_other_kinds_do_not_change_the_output() {
    let input = [
        r#"{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"s","namespace":"n"},"ports":"x"}}"#,
        r#"{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"s","namespace":"n","labels":{"a":1}},"ports":"x"}}"#,
        r#"{"type":"MODIFIED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"t","namespace":"n"},"spec":{"clusterIP":"10.96.0.1","ports":[{"port":80}]}}}"#,
        r#"{"type":"DELETED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"s","namespace":"n"}}}"#,
        r#"{"type":"ADDED","object":{"kind":"Endpoints","apiVersion":"v1","metadata":{"name":"s","namespace":"n"}}}"#,
    ]
    .join("\n");
    let out = replay(&[], Some(&input));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), EMPTY);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("line 5") && err.contains("Endpoints"),
        "skipped kind is named: {err}"
    );
}

#[test]
fn bad_lines_stop_the_replay_naming_the_line() {
    let cases = [
        ("{\"type\":\"SYNC\"}\n\n{\"type\":\"ADDED\",\"object\":\n", "line 3"),
        (
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"EndpointSlice\",\"ports\":[{\"port\":\"x\"}]}}\n",
            "line 1",
        ),
        (
            "{\"type\":\"SYNC\"}\n{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\"}}\n",
            "line 2",
        ),
        ("{\"type\":\"ADDED\"}\n", "line 1"),
        ("[]\n", "line 1"),
        ("{\"type\":\"SY\u{0}NC\"}\n", "line 1"),
    ];
    for (input, line) in cases {
        let out = replay(&[], Some(input));
        assert_eq!(out.status.code(), Some(1), "input {input:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(line), "input {input:?}: stderr {err:?} should name {line}");
    }
    // What was synced before the bad line is still printed.
    let out = replay(&[], Some("{\"type\":\"SYNC\"}\nnot json\n"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), EMPTY);
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let out = replay_bytes(&["-"], b"{\"type\":\"\xff\"}\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}

#[test]
fn timing_line_has_every_field() {
    let trace = golden_dir().join("b_udp_stale.jsonl");
    let out = replay(&["--timing", "--final-only", trace.to_str().unwrap()], None);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    let line = err.lines().last().expect("a timing line");
    let v: serde_json::Value = serde_json::from_str(line).expect("timing is JSON");
    for key in ["events", "syncs", "decode_ns", "update_ns", "sync_ns", "peak_rss_kib"] {
        assert!(
            v.get(key).and_then(serde_json::Value::as_u64).is_some(),
            "{key} in {line}"
        );
    }
    assert!(v["events"].as_u64().unwrap() > 0 && v["syncs"].as_u64().unwrap() > 0);
}

#[test]
fn bad_flags_and_missing_files_fail_cleanly() {
    let out = replay(&["--ip-family", "ipv5"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ipv4 or ipv6"));
    let out = replay(&["/nonexistent/trace.jsonl"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/trace.jsonl"));
}
