//! proxyd as operators run it, as root: the image `deploy/image.sh`
//! packs (no registry, no base image), imported into a containerd of the
//! test's own (Debian's, with runc) and run as a container the way the
//! DaemonSet runs it: every capability dropped but `NET_ADMIN`, a
//! read-only root filesystem, the node's network namespace (here a
//! namespace of the test's, standing for the host's), the configuration
//! mounted read-only. It must start, sync the example cluster, answer
//! `/healthz`, and leave its table in the namespace.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::image::{Containerd, DEFAULT_CAPABILITIES, get, repo, require_containerd, table};
use common::{KillOnDrop, Netns, free_port};

const WAIT: Duration = Duration::from_secs(60);

#[test]
#[ignore = "needs root, containerd and runc: packs the image, imports it and runs it as a container"]
fn the_image_runs_as_the_daemonset_runs_it() {
    require_containerd();
    let ctd = Containerd::start();
    let image = ctd.import_image();

    let node = Netns::named(format!("pimg-{}", std::process::id() % 100_000));
    let healthz = free_port();
    let cluster = std::fs::canonicalize(repo().join("examples/cluster")).unwrap();
    let mount = format!(
        "type=bind,src={},dst=/etc/proxyd/cluster,options=rbind:ro",
        cluster.display()
    );
    let netns = format!("network:/run/netns/{}", node.0);
    let bind = format!("127.0.0.1:{healthz}");
    // ctr has no `ALL`: the capabilities containerd's default spec grants,
    // each dropped (the DaemonSet drops all), and NET_ADMIN added.
    let mut args = vec!["run", "--detach", "--read-only"];
    for cap in DEFAULT_CAPABILITIES {
        args.extend(["--cap-drop", cap]);
    }
    args.extend(["--cap-add", "CAP_NET_ADMIN"]);
    args.extend([
        "--with-ns",
        &netns,
        "--mount",
        &mount,
        &image,
        "proxyd",
        "/usr/local/bin/proxyd",
        "run",
        "--manifests",
        "/etc/proxyd/cluster",
        "--hostname-override",
        "node-1",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--healthz-bind-address",
        &bind,
        "--metrics-bind-address",
        "",
    ]);
    ctd.ctr(&args);

    let started = Instant::now();
    let url = format!("http://{bind}/healthz");
    let answer = loop {
        match get(&node, &url) {
            Some((200, body)) => break body,
            other => {
                let running = ctd.ctr_quiet(&["tasks", "ps", "proxyd"]);
                assert!(
                    running && started.elapsed() < WAIT,
                    "/healthz did not answer 200 within {WAIT:?} (last: {other:?}; task running: {running}):\n{}",
                    ctd.ctr(&["tasks", "ls"])
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert!(answer.contains("lastUpdated"), "kube-proxy's /healthz body: {answer}");

    // The table in the node's namespace is the one proxyd writes outside
    // a container for the same cluster and flags.
    let outside = Netns::named(format!("pimg-out-{}", std::process::id() % 100_000));
    let _direct = KillOnDrop(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &outside.0,
                env!("CARGO_BIN_EXE_proxyd"),
                "run",
                "--manifests",
            ])
            .arg(&cluster)
            .args(["--hostname-override", "node-1", "--cluster-cidr", "10.244.0.0/16"])
            .args(["--healthz-bind-address", &bind, "--metrics-bind-address", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while get(&outside, &url).map(|(s, _)| s) != Some(200) {
        assert!(
            started.elapsed() < WAIT,
            "proxyd outside a container did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let inside = table(&node);
    assert!(
        inside.contains("10.96.0.60"),
        "the example's services programmed:\n{inside}"
    );
    assert_eq!(inside, table(&outside), "the container's table and proxyd's own");
}
