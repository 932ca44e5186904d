//! Following a namespace's nftables changes, against the kernel: what the
//! monitor says of another program's commit too large to announce, what a
//! hearing hands over (heard, and unheard while a writer wrote), and a
//! writer's own commits, which are neither.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use linux_dataplane::hearing::Commits;
use linux_dataplane::{Hearing, NftChange, NftMonitor, NftNetlink, NftWriter, WatchedNft};
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

/// Starts hearing `ns`, the changes collected in the returned channel.
fn hear(ns: &Scratch) -> (Hearing, Receiver<NftChange>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let on_change: linux_dataplane::hearing::OnChange = Arc::new(move |c| {
        let _ = tx.lock().unwrap().send(c);
    });
    (Hearing::start(&ns.netns(), "proxyd", on_change).unwrap(), rx)
}

/// Another program's commit is heard; one made while a writer does not
/// listen is not announced, but counted from the generation and handed
/// over as unheard; dropping the hearing stops its thread at once.
#[test]
#[ignore = "needs root and nft: makes network namespaces"]
fn changes_heard_and_unheard_are_handed_over() {
    let ns = with_table("mon-heard");
    let (hearing, changes) = hear(&ns);
    assert!(changes.recv_timeout(Duration::from_millis(50)).is_err(), "nothing yet");
    foreign_nft(&ns, "flush chain ip proxyd c\n");
    assert!(
        matches!(
            changes.recv_timeout(Duration::from_secs(1)),
            Ok(NftChange::Foreign { ref process, .. }) if process == "nft"
        ),
        "a flush by another nft"
    );
    let ear = hearing.ear();
    let mut generation = NftNetlink::open(&ns.netns()).unwrap();
    let before = generation.generation().unwrap();
    ear.quietly(|| foreign_nft(&ns, "add rule ip proxyd c counter\n"));
    let after = generation.generation().unwrap();
    assert!(
        changes.recv_timeout(Duration::from_millis(200)).is_err(),
        "not announced while the listening is stopped"
    );
    ear.count(Commits { before, after, own: 0 });
    assert_eq!(changes.try_recv().ok(), Some(NftChange::Unheard { commits: 1 }));
    let stopping = Instant::now();
    drop(hearing);
    assert!(
        stopping.elapsed() < Duration::from_millis(500),
        "{:?}",
        stopping.elapsed()
    );
}

/// A writer's own commits, over netlink and by nft, advance the
/// generation one each and are neither heard nor counted as another
/// program's; a refused transaction commits nothing and says nothing.
#[test]
#[ignore = "needs root and nft: makes network namespaces"]
fn a_writers_own_commits_are_not_changes() {
    let ns = with_table("mon-own");
    let (hearing, changes) = hear(&ns);
    let mut generation = NftNetlink::open(&ns.netns()).unwrap();
    let mut by_netlink = WatchedNft::new(ns.netns()).heard_by(hearing.ear());
    let mut by_nft = WatchedNft::with_writer(ns.netns(), NftWriter::Nft).heard_by(hearing.ear());
    let table = |op| {
        let mut tx = Transaction::for_table(IpFamily::V6, "proxyd");
        tx.push(op);
        tx
    };

    let g0 = generation.generation().unwrap();
    by_netlink.apply(&table(Op::AddTable(IpFamily::V6))).unwrap();
    by_nft.apply(&table(Op::DeleteTable(IpFamily::V6))).unwrap();
    assert!(
        by_netlink.apply(&table(Op::DeleteTable(IpFamily::V6))).is_err(),
        "no such table"
    );
    let g1 = generation.generation().unwrap();
    assert_eq!(g1.wrapping_sub(g0), 2);
    assert!(
        changes.recv_timeout(Duration::from_millis(300)).is_err(),
        "nothing said"
    );
}
