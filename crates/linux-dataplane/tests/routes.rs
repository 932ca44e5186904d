//! Routes over rtnetlink, against the kernel: written, read back, checked
//! with iproute2's own view of the table, reconciled without doubling, and
//! routes an earlier proxyd (or an operator) made with `ip` are found.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeSet;

use linux_dataplane::routes::{ROUTE_PROTO, read, reconcile};
use linux_dataplane::{Netns, Route, RouteError};
use slice_model::IpFamily;

mod common;

use common::Scratch;

fn route(dest: &str, src: &str) -> Route {
    Route {
        dest: dest.parse().unwrap(),
        dev: "net1".into(),
        src: src.parse().unwrap(),
    }
}

#[test]
#[ignore = "needs root and iproute2: makes network namespaces"]
fn routes_are_reconciled_for_both_families() {
    let ns = Scratch::new("routes");
    ns.ip(&["link", "add", "net1", "type", "veth", "peer", "name", "peer1"]);
    ns.ip(&["addr", "add", "192.168.77.2/24", "dev", "net1"]);
    ns.ip(&["addr", "add", "fd00:77::2/64", "dev", "net1", "nodad"]);
    ns.ip(&["link", "set", "net1", "up"]);
    ns.ip(&["link", "set", "peer1", "up"]);
    let netns = ns.netns();
    let proto = ROUTE_PROTO.to_string();
    for (family, flag, a, b, src) in [
        (IpFamily::V4, "-4", "10.96.0.10", "10.96.0.11", "192.168.77.2"),
        (IpFamily::V6, "-6", "fd00:96::10", "fd00:96::11", "fd00:77::2"),
    ] {
        let both: BTreeSet<Route> = [route(a, src), route(b, src)].into();
        let change = reconcile(&netns, family, &both).unwrap();
        assert_eq!((change.added, change.removed), (2, 0), "{family}");
        assert_eq!(read(&netns, family).unwrap(), both, "{family}: read back as written");
        // iproute2's view: host routes through net1, the pod's address as
        // source, on the link, marked with proxyd's protocol.
        let shown = ns.ip(&[flag, "-o", "route", "show", "table", "main", "proto", &proto]);
        for dest in [a, b] {
            let line = shown
                .lines()
                .find(|l| l.starts_with(&format!("{dest} ")))
                .unwrap_or_else(|| panic!("{family}: no route to {dest} in:\n{shown}"));
            assert!(
                line.contains("dev net1") && line.contains(&format!("src {src}")),
                "{line}"
            );
            if family == IpFamily::V4 {
                assert!(line.contains("scope link"), "{line}");
            }
        }
        let again = reconcile(&netns, family, &both).unwrap();
        assert_eq!(
            (again.added, again.removed),
            (0, 0),
            "{family}: nothing to do, nothing doubled"
        );
        let one: BTreeSet<Route> = [route(a, src)].into();
        let change = reconcile(&netns, family, &one).unwrap();
        assert_eq!(
            (change.added, change.removed),
            (0, 1),
            "{family}: the stale one removed"
        );
        assert_eq!(read(&netns, family).unwrap(), one);
        let shown = ns.ip(&[flag, "-o", "route", "show", "table", "main", "proto", &proto]);
        assert_eq!(shown.lines().count(), 1, "{family}: {shown}");
    }
    // Each family's reconciliation leaves the other's routes alone.
    assert_eq!(read(&netns, IpFamily::V4).unwrap().len(), 1);

    // A route made with `ip` (as proxyd made them before it spoke
    // rtnetlink) is found as proxyd's, and replaced, not doubled.
    ns.ip(&[
        "route",
        "replace",
        "10.96.0.12/32",
        "dev",
        "net1",
        "src",
        "192.168.77.2",
        "proto",
        &proto,
    ]);
    let three: BTreeSet<Route> = [route("10.96.0.10", "192.168.77.2"), route("10.96.0.12", "192.168.77.2")].into();
    assert_eq!(read(&netns, IpFamily::V4).unwrap(), three);
    let change = reconcile(&netns, IpFamily::V4, &three).unwrap();
    assert_eq!((change.added, change.removed), (0, 0));
    // Someone else's route to the same kind of address is not proxyd's.
    ns.ip(&["route", "add", "10.96.0.13/32", "dev", "net1"]);
    assert_eq!(read(&netns, IpFamily::V4).unwrap(), three);
}

#[test]
#[ignore = "needs root and iproute2: makes network namespaces"]
fn failures_name_the_route_and_the_others_are_still_made() {
    let ns = Scratch::new("routefail");
    ns.ip(&["link", "add", "net1", "type", "veth", "peer", "name", "peer1"]);
    ns.ip(&["link", "set", "peer1", "up"]);
    ns.ip(&["addr", "add", "192.168.78.2/24", "dev", "net1"]);
    ns.ip(&["link", "set", "net1", "up"]);
    let good = route("10.96.1.1", "192.168.78.2");
    let mut missing_dev = route("10.96.1.2", "192.168.78.2");
    missing_dev.dev = "net9".into();
    let want: BTreeSet<Route> = [good.clone(), missing_dev].into();
    let e = reconcile(&ns.netns(), IpFamily::V4, &want).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, RouteError::Write { failed: 1, .. }), "{e:?}");
    assert!(
        text.starts_with("route add 10.96.1.2 dev net9 src 192.168.78.2: interface net9: "),
        "{text}"
    );
    assert_eq!(
        read(&ns.netns(), IpFamily::V4).unwrap(),
        [good].into(),
        "the good one is made"
    );
    let gone = Netns::Path("/run/netns/ld-no-such-namespace".into());
    let e = read(&gone, IpFamily::V4).unwrap_err();
    assert!(e.to_string().contains("/run/netns/ld-no-such-namespace"), "{e}");
}
