//! Following a namespace's nftables changes, against the kernel: what the
//! monitor says of another program's commit too large to announce, of
//! commits a writer tells it it missed, and the count of proxyd's own
//! commits that a writer compares with the ruleset's generation.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use linux_dataplane::{NftChange, NftCommand, NftMonitor, NftNetlink, WatchedNft, own_commits};
use nft_dataplane::{Dataplane as _, Op, Transaction};
use slice_model::IpFamily;

mod common;

use common::Scratch;

/// A namespace with proxyd's table and one chain holding a rule.
fn with_table(tag: &str) -> Scratch {
    let ns = Scratch::new(tag);
    ns.exec(&["nft", "add table ip proxyd"]);
    ns.exec(&["nft", "add chain ip proxyd c"]);
    ns.exec(&["nft", "add rule ip proxyd c counter"]);
    ns
}

/// Runs `nft -f -` inside `ns` with `script`, as another program would.
fn foreign_nft(ns: &Scratch, script: &str) {
    let mut nft = Command::new("ip")
        .args(["netns", "exec", &ns.0, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    nft.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success(), "nft -f");
}

/// A firewall loads a large set of its own and, in the same commit,
/// flushes one of proxyd's chains, while the monitor is not reading: the
/// announcements overflow its socket, and the monitor says it lost them
/// rather than nothing.
#[test]
#[ignore = "needs root and nft: makes network namespaces"]
fn a_commit_too_large_to_announce_is_said_lost() {
    let ns = with_table("mon-lost");
    let mut monitor = NftMonitor::open(&ns.netns(), "proxyd").unwrap();
    let mut script = String::from("add table ip firewall\nadd set ip firewall blocked { type ipv4_addr; }\n");
    for chunk in 0..40u32 {
        let elements: Vec<String> = (0..1000u32)
            .map(|i| {
                let n = chunk * 1000 + i;
                format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255)
            })
            .collect();
        script.push_str(&format!(
            "add element ip firewall blocked {{ {} }}\n",
            elements.join(", ")
        ));
    }
    script.push_str("flush chain ip proxyd c\n");
    foreign_nft(&ns, &script);
    assert_eq!(monitor.next_change().unwrap(), Some(NftChange::Unknown));
}

/// What a writer tells the monitor it missed comes out as the next change,
/// ahead of nothing; and an announced commit by another program still
/// comes out as that program's.
#[test]
#[ignore = "needs root and nft: makes network namespaces"]
fn missed_commits_are_the_next_change() {
    let ns = with_table("mon-missed");
    let mut monitor = NftMonitor::open(&ns.netns(), "proxyd").unwrap();
    let listening = monitor.listening().unwrap();
    assert_eq!(monitor.next_within(Duration::from_millis(50)).unwrap(), None);
    listening.missed(2).unwrap();
    assert_eq!(
        monitor.next_within(Duration::from_secs(1)).unwrap(),
        Some(NftChange::Unheard { commits: 2 })
    );
    foreign_nft(&ns, "flush chain ip proxyd c\n");
    assert!(
        matches!(
            monitor.next_within(Duration::from_secs(1)).unwrap(),
            Some(NftChange::Foreign { ref process, .. }) if process == "nft"
        ),
        "a flush by another nft"
    );
    // Stopped listening: a commit meanwhile is not announced.
    listening.pause().unwrap();
    foreign_nft(&ns, "add rule ip proxyd c counter\n");
    listening.resume().unwrap();
    assert_eq!(monitor.next_within(Duration::from_millis(200)).unwrap(), None);
}

/// Each commit proxyd makes, by nft or over netlink, is counted once and
/// advances the ruleset's generation by one; a check and a refused
/// transaction do neither. (A writer subtracts the count from the
/// generations it saw advance: the rest are another program's.)
#[test]
#[ignore = "needs root and nft: makes network namespaces"]
fn own_commits_advance_the_generation_one_each() {
    let ns = with_table("mon-own");
    let mut generation = NftNetlink::open(&ns.netns()).unwrap();
    let at = |generation: &mut NftNetlink| (generation.generation().unwrap(), own_commits());
    let by_nft = NftCommand { netns: ns.netns() };
    let mut by_netlink = WatchedNft::new(ns.netns());
    let mut tx = Transaction::for_table(IpFamily::V6, "proxyd");
    tx.push(Op::AddTable(IpFamily::V6));

    let (g0, c0) = at(&mut generation);
    by_nft.apply_text("add rule ip proxyd c counter\n").unwrap();
    by_netlink.apply(&tx).unwrap();
    by_nft.check(&tx).unwrap();
    assert!(by_nft.apply_text("add rule ip proxyd nowhere counter\n").is_err());
    let (g1, c1) = at(&mut generation);
    assert_eq!((g1.wrapping_sub(g0), c1 - c0), (2, 2));

    // Another program's commit: the generation moves, the count does not.
    foreign_nft(&ns, "add rule ip proxyd c counter\n");
    let (g2, c2) = at(&mut generation);
    assert_eq!((g2.wrapping_sub(g1), c2 - c1), (1, 0));
}
