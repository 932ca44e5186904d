//! kube-proxy's leftovers against rules the real `iptables` tools write:
//! kubelet's chains (which every kubelet node has) are never kube-proxy's,
//! and removing kube-proxy's leaves kubelet's exactly as they were.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeSet;

use linux_dataplane::kube_proxy::{find, remove};

mod common;

use common::Scratch;

/// What `tool-save` prints, without its comment lines (they carry
/// times) and with counters zeroed.
fn save(ns: &Scratch, tool: &str) -> String {
    ns.exec(&[&format!("{tool}-save")])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.rfind(" [") {
            Some(at) if l.starts_with(':') => format!("{} [0:0]", &l[..at]),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The iptables tools of both backends and both families.
const TOOLS: [&str; 4] = ["iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy"];

/// What kubelet makes on every node (`kubelet_network_linux.go`): its
/// canaries, the iptables hint, and (IPv4) the firewall chain that drops
/// martian traffic to 127.0.0.0/8, jumped to from INPUT and OUTPUT.
fn kubelets_chains(ns: &Scratch, tool: &str) {
    for table in ["mangle", "nat", "filter"] {
        ns.exec(&[tool, "-t", table, "-N", "KUBE-KUBELET-CANARY"]);
    }
    ns.exec(&[tool, "-t", "mangle", "-N", "KUBE-IPTABLES-HINT"]);
    if tool.starts_with("iptables") {
        ns.exec(&[tool, "-t", "filter", "-N", "KUBE-FIREWALL"]);
        ns.exec(&[
            tool,
            "-t",
            "filter",
            "-A",
            "KUBE-FIREWALL",
            "!",
            "-s",
            "127.0.0.0/8",
            "-d",
            "127.0.0.0/8",
            "-m",
            "comment",
            "--comment",
            "block incoming localnet connections",
            "-m",
            "conntrack",
            "!",
            "--ctstate",
            "RELATED,ESTABLISHED,DNAT",
            "-j",
            "DROP",
        ]);
        for hook in ["INPUT", "OUTPUT"] {
            ns.exec(&[tool, "-t", "filter", "-I", hook, "-j", "KUBE-FIREWALL"]);
        }
    }
}

/// kube-proxy's chains (iptables mode) with the jumps to them, as its
/// proxier makes them, per-service chains included.
fn kube_proxys_chains(ns: &Scratch, tool: &str) -> BTreeSet<(String, String)> {
    let mut made = BTreeSet::new();
    let mut chain = |table: &str, name: &str| {
        ns.exec(&[tool, "-t", table, "-N", name]);
        made.insert((table.to_owned(), name.to_owned()));
    };
    for name in [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
        "KUBE-PROXY-CANARY",
        "KUBE-SVC-ABCDEFGHIJKLMNOP",
        "KUBE-SVL-ABCDEFGHIJKLMNOP",
        "KUBE-EXT-ABCDEFGHIJKLMNOP",
        "KUBE-FW-ABCDEFGHIJKLMNOP",
        "KUBE-SEP-QRSTUVWXYZ234567",
    ] {
        chain("nat", name);
    }
    for name in [
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-FIREWALL",
        "KUBE-PROXY-CANARY",
    ] {
        chain("filter", name);
    }
    chain("mangle", "KUBE-PROXY-CANARY");
    let rule = |table: &str, args: &[&str]| {
        let mut all = vec![tool, "-t", table];
        all.extend(args);
        ns.exec(&all);
    };
    let comment = ["-m", "comment", "--comment", "kubernetes service portals"];
    for hook in ["PREROUTING", "OUTPUT"] {
        rule("nat", &[&["-A", hook][..], &comment, &["-j", "KUBE-SERVICES"]].concat());
    }
    rule("nat", &["-A", "POSTROUTING", "-j", "KUBE-POSTROUTING"]);
    rule("nat", &["-A", "KUBE-SERVICES", "-j", "KUBE-SVC-ABCDEFGHIJKLMNOP"]);
    rule("nat", &["-A", "KUBE-SERVICES", "-j", "KUBE-NODEPORTS"]);
    rule(
        "nat",
        &["-A", "KUBE-SVC-ABCDEFGHIJKLMNOP", "-j", "KUBE-SEP-QRSTUVWXYZ234567"],
    );
    rule("nat", &["-A", "KUBE-SEP-QRSTUVWXYZ234567", "-j", "KUBE-MARK-MASQ"]);
    rule("nat", &["-A", "KUBE-MARK-MASQ", "-j", "MARK", "--or-mark", "0x4000"]);
    rule(
        "nat",
        &["-A", "KUBE-EXT-ABCDEFGHIJKLMNOP", "-j", "KUBE-SVL-ABCDEFGHIJKLMNOP"],
    );
    rule(
        "nat",
        &["-A", "KUBE-FW-ABCDEFGHIJKLMNOP", "-j", "KUBE-EXT-ABCDEFGHIJKLMNOP"],
    );
    let new = ["-m", "conntrack", "--ctstate", "NEW"];
    for (hook, targets) in [
        (
            "INPUT",
            &["KUBE-PROXY-FIREWALL", "KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES"][..],
        ),
        (
            "FORWARD",
            &[
                "KUBE-PROXY-FIREWALL",
                "KUBE-FORWARD",
                "KUBE-SERVICES",
                "KUBE-EXTERNAL-SERVICES",
            ][..],
        ),
        ("OUTPUT", &["KUBE-PROXY-FIREWALL", "KUBE-SERVICES"][..]),
    ] {
        for target in targets {
            rule("filter", &[&["-A", hook][..], &new, &["-j", target]].concat());
        }
    }
    made
}

/// Kubelet's chains alone are not kube-proxy's: nothing is found (so no
/// start-up warning), for every iptables backend and family.
#[test]
#[ignore = "needs root, iproute2 and iptables (nft and legacy)"]
fn kubelets_chains_alone_are_not_kube_proxys() {
    let ns = Scratch::new("kubelet");
    for tool in TOOLS {
        kubelets_chains(&ns, tool);
    }
    let found = find(&ns.netns()).unwrap();
    assert!(
        found.is_empty(),
        "kubelet's chains taken for kube-proxy's: {}",
        found.describe()
    );
}

/// With kubelet's and kube-proxy's chains on the node, kube-proxy's (and
/// only they) are found, and removing them leaves each table exactly as
/// kubelet alone had made it, rule for rule.
#[test]
#[ignore = "needs root, iproute2 and iptables (nft and legacy)"]
fn cleanup_removes_kube_proxys_chains_and_keeps_kubelets() {
    let ns = Scratch::new("both");
    for tool in TOOLS {
        kubelets_chains(&ns, tool);
    }
    let kubelet_only: Vec<String> = TOOLS.iter().map(|t| save(&ns, t)).collect();
    let mut made = Vec::new();
    for tool in TOOLS {
        made.push(kube_proxys_chains(&ns, tool));
    }
    // Someone else's chain, with a jump to it, stays too.
    ns.exec(&["iptables-nft", "-t", "nat", "-N", "DOCKER"]);
    ns.exec(&["iptables-nft", "-t", "nat", "-A", "PREROUTING", "-j", "DOCKER"]);
    let mut expected_after: Vec<String> = TOOLS
        .iter()
        .map(|t| {
            if *t == "iptables-nft" {
                save(&ns, t)
            } else {
                String::new()
            }
        })
        .collect();

    let found = find(&ns.netns()).unwrap();
    for (tool, made) in TOOLS.iter().zip(&made) {
        let (family, legacy) = match *tool {
            "iptables-nft" => ("ip", false),
            "ip6tables-nft" => ("ip6", false),
            "iptables-legacy" => ("iptables-legacy", true),
            _ => ("ip6tables-legacy", true),
        };
        let mut seen = BTreeSet::new();
        for table in ["nat", "filter", "mangle"] {
            let key = (family.to_owned(), table.to_owned());
            let chains = if legacy {
                found.iptables_legacy.get(&key).cloned().unwrap_or_default()
            } else {
                found
                    .iptables_nft
                    .get(&key)
                    .map(|k| k.chains.clone())
                    .unwrap_or_default()
            };
            seen.extend(chains.into_iter().map(|c| (table.to_owned(), c)));
        }
        assert_eq!(&seen, made, "{tool}: found exactly kube-proxy's chains");
    }
    let said = found.describe();
    for kubelets in ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"] {
        assert!(
            !said.contains(kubelets),
            "the warning names kubelet's {kubelets}: {said}"
        );
    }

    remove(&ns.netns(), &found).unwrap();
    for (i, tool) in TOOLS.iter().enumerate() {
        let after = save(&ns, tool);
        if *tool == "iptables-nft" {
            let mut expected = std::mem::take(&mut expected_after[i]);
            // What remains is what was there before kube-proxy's, plus DOCKER.
            expected = expected
                .lines()
                .filter(|l| !made[i].iter().any(|(_, c)| l.contains(c.as_str())))
                .collect::<Vec<_>>()
                .join("\n");
            assert_eq!(
                after, expected,
                "{tool}: kube-proxy's chains and jumps removed, the rest kept"
            );
            for line in kubelet_only[i].lines() {
                assert!(after.contains(line), "{tool}: kubelet's `{line}` is gone:\n{after}");
            }
        } else {
            assert_eq!(after, kubelet_only[i], "{tool}: back to kubelet's rules, rule for rule");
        }
    }
    assert!(find(&ns.netns()).unwrap().is_empty());
}
