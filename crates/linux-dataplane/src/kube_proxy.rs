//! kube-proxy's rules on a node proxyd takes over: found at startup (both
//! proxies would rewrite the same packets) and removed by `proxyd cleanup
//! --kube-proxy`, as `kube-proxy --cleanup` removes them.
//!
//! * nftables mode: the tables `ip kube-proxy` and `ip6 kube-proxy`;
//! * iptables mode through iptables-nft: kube-proxy's chains (the set its
//!   own cleanup removes, [`is_kube_proxys_chain`]) in the `nat`, `filter`
//!   and `mangle` tables of both families, and the rules of other chains
//!   that jump to them (read and changed with `nft`);
//! * iptables mode through legacy iptables: the same chains, where the
//!   kernel has legacy tables loaded (`/proc/net/ip_tables_names`), read
//!   with `iptables-legacy-save` and removed with `iptables-legacy-restore`.
//!
//! Everything else in those tables is left as it is: other programs'
//! chains and rules, and kubelet's chains, which also start with `KUBE-`
//! (`KUBE-FIREWALL`, its guard against martian traffic to 127.0.0.0/8,
//! `KUBE-KUBELET-CANARY`, `KUBE-IPTABLES-HINT`) and are on every node.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use nft_dataplane::DataplaneError;
use serde_json::Value;
use slice_model::IpFamily;

use crate::netns::{Netns, NetnsError};
use crate::nft::NftCommand;

/// Why kube-proxy's rules could not be read or removed.
#[derive(Debug, thiserror::Error)]
pub enum LeftoverError {
    /// The namespace could not be entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A program could not be started.
    #[error("cannot run {program} ({netns}): {source}")]
    Run {
        /// The program.
        program: String,
        /// Where.
        netns: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program failed.
    #[error("{command} ({netns}): {stderr}")]
    Failed {
        /// The program and its arguments.
        command: String,
        /// Where.
        netns: String,
        /// What it said.
        stderr: String,
    },
    /// nft's JSON did not parse.
    #[error("nft -j list table: not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// nft refused the removal of nftables' part (nothing of it was
    /// removed: one transaction).
    #[error("nothing of nftables' part was removed: {0}")]
    Nft(#[source] DataplaneError),
}

/// The iptables tables kube-proxy writes to.
const IPTABLES_TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// kube-proxy's fixed chains in each iptables table (its proxier's chain
/// constants, the canary included).
const KUBE_PROXY_CHAINS: [(&str, &[&str]); 3] = [
    (
        "nat",
        &[
            "KUBE-SERVICES",
            "KUBE-NODEPORTS",
            "KUBE-POSTROUTING",
            "KUBE-MARK-MASQ",
            "KUBE-PROXY-CANARY",
        ],
    ),
    (
        "filter",
        &[
            "KUBE-SERVICES",
            "KUBE-EXTERNAL-SERVICES",
            "KUBE-FORWARD",
            "KUBE-NODEPORTS",
            "KUBE-PROXY-FIREWALL",
            "KUBE-PROXY-CANARY",
        ],
    ),
    ("mangle", &["KUBE-PROXY-CANARY"]),
];

/// The prefixes of kube-proxy's per-service and per-endpoint chains (in
/// `nat`): service, local service, external, firewall, endpoint.
const KUBE_PROXY_CHAIN_PREFIXES: [&str; 5] = ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"];

/// Whether chain `name` of iptables table `table` is kube-proxy's: the set
/// `kube-proxy --cleanup` removes. Other `KUBE-` chains are not: kubelet
/// makes `KUBE-FIREWALL`, `KUBE-KUBELET-CANARY` and `KUBE-IPTABLES-HINT`.
pub fn is_kube_proxys_chain(table: &str, name: &str) -> bool {
    let fixed = KUBE_PROXY_CHAINS
        .iter()
        .any(|(t, chains)| *t == table && chains.contains(&name));
    fixed || (table == "nat" && KUBE_PROXY_CHAIN_PREFIXES.iter().any(|p| name.starts_with(p)))
}

/// kube-proxy's chains in one iptables-nft table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeChains {
    /// kube-proxy's chains ([`is_kube_proxys_chain`]).
    pub chains: Vec<String>,
    /// Other chains' rules that jump to them: (chain, rule handle).
    pub jumps: Vec<(String, u64)>,
}

/// kube-proxy's rules found on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// nftables mode's tables: `ip kube-proxy`, `ip6 kube-proxy`.
    pub nft_tables: Vec<String>,
    /// iptables-nft's chains of kube-proxy's by (family, table).
    pub iptables_nft: BTreeMap<(String, String), KubeChains>,
    /// Legacy iptables' chains of kube-proxy's by (command, table):
    /// (`iptables-legacy`, `nat`) -> chains.
    pub iptables_legacy: BTreeMap<(String, String), Vec<String>>,
}

impl Leftovers {
    /// Whether nothing of kube-proxy's is there.
    pub fn is_empty(&self) -> bool {
        self.nft_tables.is_empty() && self.iptables_nft.is_empty() && self.iptables_legacy.is_empty()
    }

    /// What was found, for a message: `table ip kube-proxy; iptables-nft ip
    /// nat: KUBE-SERVICES, KUBE-SVC-X; …`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.nft_tables.iter().map(|t| format!("table {t}")).collect();
        for ((family, table), kube) in &self.iptables_nft {
            parts.push(format!("iptables-nft {family} {table}: {}", short_list(&kube.chains)));
        }
        for ((command, table), chains) in &self.iptables_legacy {
            parts.push(format!("{command} {table}: {}", short_list(chains)));
        }
        parts.join("; ")
    }
}

/// The first few names, and how many more.
fn short_list(names: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut text = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// Runs what `spawn` starts in `netns`; its output when it succeeded,
/// else why not (`shown`: the command, for messages).
fn checked(
    netns: &Netns,
    shown: String,
    spawn: impl FnOnce() -> std::io::Result<Output> + Send,
) -> Result<Output, LeftoverError> {
    let out = netns.run(spawn)?.map_err(|source| LeftoverError::Run {
        program: shown.clone(),
        netns: netns.to_string(),
        source,
    })?;
    if !out.status.success() {
        return Err(LeftoverError::Failed {
            command: shown,
            netns: netns.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out)
}

/// Runs `program args` in `netns`; its standard output, or why not.
fn output(netns: &Netns, program: &str, args: &[&str]) -> Result<String, LeftoverError> {
    let shown = format!("{program} {}", args.join(" "));
    let out = checked(netns, shown, || {
        Command::new(program).args(args).stdin(Stdio::null()).output()
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `nft -j -a list ruleset` shows of kube-proxy's.
pub fn from_ruleset(json: &Value) -> Leftovers {
    let mut found = Leftovers::default();
    let items = json["nftables"].as_array().map(Vec::as_slice).unwrap_or_default();
    let iptables_table = |family: &str, table: &str| matches!(family, "ip" | "ip6") && IPTABLES_TABLES.contains(&table);
    for item in items {
        if let Some(t) = item.get("table") {
            let (family, name) = (
                t["family"].as_str().unwrap_or_default(),
                t["name"].as_str().unwrap_or_default(),
            );
            if name == "kube-proxy" && matches!(family, "ip" | "ip6") {
                found.nft_tables.push(format!("{family} kube-proxy"));
            }
        }
        if let Some(c) = item.get("chain") {
            let (family, table, name) = (
                c["family"].as_str().unwrap_or_default(),
                c["table"].as_str().unwrap_or_default(),
                c["name"].as_str().unwrap_or_default(),
            );
            if iptables_table(family, table) && is_kube_proxys_chain(table, name) {
                let entry = found.iptables_nft.entry((family.into(), table.into())).or_default();
                entry.chains.push(name.to_owned());
            }
        }
    }
    // Other chains' rules that jump to one of them.
    for item in items {
        let Some(r) = item.get("rule") else { continue };
        let (family, table, chain) = (
            r["family"].as_str().unwrap_or_default(),
            r["table"].as_str().unwrap_or_default(),
            r["chain"].as_str().unwrap_or_default(),
        );
        let Some(kube) = found.iptables_nft.get_mut(&(family.to_owned(), table.to_owned())) else {
            continue;
        };
        if kube.chains.iter().any(|c| c == chain) {
            continue;
        }
        let to_kube = r["expr"].as_array().into_iter().flatten().any(|e| {
            ["jump", "goto"].iter().any(|verdict| {
                e[verdict]["target"]
                    .as_str()
                    .is_some_and(|t| kube.chains.iter().any(|c| c == t))
            })
        });
        if let (true, Some(handle)) = (to_kube, r["handle"].as_u64()) {
            kube.jumps.push((chain.to_owned(), handle));
        }
    }
    found
}

/// kube-proxy's chains in `iptables-legacy-save` output, by table.
pub fn legacy_chains(save: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut table = String::new();
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_owned();
        } else if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split_whitespace().next().unwrap_or_default();
            if IPTABLES_TABLES.contains(&table.as_str()) && is_kube_proxys_chain(&table, name) {
                out.entry(table.clone()).or_default().push(name.to_owned());
            }
        }
    }
    out
}

/// `iptables-legacy-save` output with kube-proxy's chains, their rules and
/// every rule that jumps (or goes) to one of them taken out: what restoring
/// the table leaves.
pub fn without_kube_proxy(save: &str) -> String {
    let mut out = String::new();
    let mut table = "";
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim();
        }
        let ours = |name: &str| is_kube_proxys_chain(table, name);
        let kube_proxys = if let Some(decl) = line.strip_prefix(':') {
            decl.split_whitespace().next().is_some_and(ours)
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let words = shell_words(rule);
            let chain = words.first().is_some_and(|c| ours(c));
            let target = words
                .windows(2)
                .any(|w| matches!(w[0].as_str(), "-j" | "--jump" | "-g" | "--goto") && ours(&w[1]));
            chain || target
        } else {
            false
        };
        if !kube_proxys {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The words of an iptables-save rule line, double-quoted parts (comments)
/// as one word each.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut escaped, mut any) = (false, false, false);
    for c in line.chars() {
        match c {
            _ if escaped => {
                word.push(c);
                escaped = false;
            }
            '\\' if quoted => escaped = true,
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// The legacy iptables commands whose kernel tables are loaded here.
fn legacy_commands(netns: &Netns) -> Vec<&'static str> {
    [
        ("iptables-legacy", "/proc/net/ip_tables_names"),
        ("ip6tables-legacy", "/proc/net/ip6_tables_names"),
    ]
    .into_iter()
    .filter(|(_, names)| {
        // The thread's /proc/net is its namespace's: read from inside.
        let thread_own = names.replace("/proc/net/", "/proc/thread-self/net/");
        netns
            .run(|| std::fs::read_to_string(&thread_own))
            .is_ok_and(|t| t.is_ok_and(|t| !t.trim().is_empty()))
    })
    .map(|(command, _)| command)
    .collect()
}

/// kube-proxy's rules in `netns`. Legacy iptables is looked at only where
/// its tables are loaded and its tools are there.
///
/// Only the tables kube-proxy writes are read: the ruleset may hold a
/// large table of proxyd's, which nft would take seconds to list. Which of
/// them exist is asked over netlink.
pub fn find(netns: &Netns) -> Result<Leftovers, LeftoverError> {
    let mut netlink = crate::NftNetlink::open(netns).map_err(|source| LeftoverError::Run {
        program: "netlink".into(),
        netns: netns.to_string(),
        source,
    })?;
    let mut items: Vec<Value> = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let word = nft_dataplane::names::FamilyWords::of(family).table;
        for table in std::iter::once("kube-proxy").chain(IPTABLES_TABLES) {
            let exists = netlink
                .table_exists(family, table)
                .map_err(|source| LeftoverError::Run {
                    program: format!("netlink: table {word} {table}"),
                    netns: netns.to_string(),
                    source,
                })?;
            if !exists {
                continue;
            }
            if table == "kube-proxy" {
                items.push(serde_json::json!({"table": {"family": word, "name": table}}));
                continue;
            }
            let text = output(netns, "nft", &["-j", "-a", "list", "table", word, table])?;
            let json: Value = serde_json::from_str(&text).map_err(LeftoverError::NotJson)?;
            items.extend(json["nftables"].as_array().into_iter().flatten().cloned());
        }
    }
    let mut found = from_ruleset(&serde_json::json!({ "nftables": items }));
    for command in legacy_commands(netns) {
        let save = format!("{command}-save");
        match output(netns, &save, &[]) {
            Ok(text) => {
                for (table, chains) in legacy_chains(&text) {
                    found.iptables_legacy.insert((command.to_owned(), table), chains);
                }
            }
            Err(e) => tracing::debug!("legacy iptables not read: {e}"),
        }
    }
    Ok(found)
}

/// Removes `found` from `netns`: nftables' part in one transaction, each
/// legacy table in one restore. Returns what was removed.
pub fn remove(netns: &Netns, found: &Leftovers) -> Result<Vec<String>, LeftoverError> {
    let mut removed = Vec::new();
    let mut script = String::new();
    for t in &found.nft_tables {
        script.push_str(&format!("delete table {t}\n"));
        removed.push(format!("table {t}"));
    }
    for ((family, table), KubeChains { chains, jumps }) in &found.iptables_nft {
        for (chain, handle) in jumps {
            script.push_str(&format!("delete rule {family} {table} {chain} handle {handle}\n"));
        }
        // Flushed first: they jump to each other.
        for c in chains {
            script.push_str(&format!("flush chain {family} {table} {c}\n"));
        }
        for c in chains {
            script.push_str(&format!("delete chain {family} {table} {c}\n"));
        }
        removed.push(format!(
            "iptables-nft {family} {table}: {} chains, {} jumps to them",
            chains.len(),
            jumps.len()
        ));
    }
    if !script.is_empty() {
        NftCommand { netns: netns.clone() }
            .apply_text(&script)
            .map_err(LeftoverError::Nft)?;
    }
    for ((command, table), chains) in &found.iptables_legacy {
        let save = output(netns, &format!("{command}-save"), &["-t", table])?;
        let restore = format!("{command}-restore");
        let input = without_kube_proxy(&save);
        checked(netns, restore.clone(), || {
            let mut child = Command::new(&restore)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(input.as_bytes())?;
            }
            child.wait_with_output()
        })?;
        removed.push(format!("{command} {table}: {} chains", chains.len()));
    }
    Ok(removed)
}

/// At startup: one warning when kube-proxy's rules are on this node.
pub fn warn_if_present(netns: &Netns) {
    match find(netns) {
        Ok(found) if !found.is_empty() => tracing::warn!(
            "kube-proxy's rules are on this node ({}): kube-proxy and proxyd would both rewrite the same packets. \
             Delete kube-proxy's DaemonSet, then remove its rules with `proxyd cleanup --kube-proxy` \
             (or `kube-proxy --cleanup`)",
            found.describe()
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!("cannot look for kube-proxy's rules: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kube_proxys_tables_chains_and_jumps_are_found_and_nothing_else() {
        let ruleset = json!({"nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "ip", "name": "kube-proxy", "handle": 1}},
            {"table": {"family": "ip", "name": "proxyd", "handle": 2}},
            {"table": {"family": "ip", "name": "nat", "handle": 3}},
            {"chain": {"family": "ip", "table": "nat", "name": "PREROUTING", "handle": 1}},
            {"chain": {"family": "ip", "table": "nat", "name": "KUBE-SERVICES", "handle": 2}},
            {"chain": {"family": "ip", "table": "nat", "name": "KUBE-SVC-ABC", "handle": 3}},
            {"chain": {"family": "ip", "table": "nat", "name": "DOCKER", "handle": 4}},
            {"chain": {"family": "ip", "table": "kube-proxy", "name": "services", "handle": 5}},
            {"chain": {"family": "inet", "table": "nat", "name": "KUBE-NOT-IPTABLES", "handle": 6}},
            {"rule": {"family": "ip", "table": "nat", "chain": "PREROUTING", "handle": 10,
                      "expr": [{"xt": {"type": "match", "name": "comment"}}, {"jump": {"target": "KUBE-SERVICES"}}]}},
            {"rule": {"family": "ip", "table": "nat", "chain": "PREROUTING", "handle": 11,
                      "expr": [{"jump": {"target": "DOCKER"}}]}},
            {"rule": {"family": "ip", "table": "nat", "chain": "KUBE-SERVICES", "handle": 12,
                      "expr": [{"jump": {"target": "KUBE-SVC-ABC"}}]}},
        ]});
        let found = from_ruleset(&ruleset);
        assert_eq!(found.nft_tables, ["ip kube-proxy"]);
        let kube = &found.iptables_nft[&("ip".to_owned(), "nat".to_owned())];
        assert_eq!(kube.chains, ["KUBE-SERVICES", "KUBE-SVC-ABC"]);
        assert_eq!(
            kube.jumps,
            [("PREROUTING".to_owned(), 10)],
            "only other chains' jumps to them"
        );
        assert_eq!(found.iptables_nft.len(), 1, "inet is not iptables: {found:?}");
        assert_eq!(
            found.describe(),
            "table ip kube-proxy; iptables-nft ip nat: KUBE-SERVICES, KUBE-SVC-ABC"
        );
        assert!(from_ruleset(&json!({"nftables": []})).is_empty());
        assert!(
            from_ruleset(&json!({})).is_empty(),
            "not nft's shape: nothing, no panic"
        );
    }

    const SAVE: &str = "# Generated by iptables-save\n*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
        :DOCKER - [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-X - [0:0]\n\
        -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
        -A PREROUTING -j DOCKER\n-A KUBE-SERVICES -j KUBE-SVC-X\nCOMMIT\n*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n";

    #[test]
    fn legacy_chains_are_found_and_filtered_out() {
        let chains = legacy_chains(SAVE);
        assert_eq!(chains.len(), 1);
        assert_eq!(chains["nat"], ["KUBE-SERVICES", "KUBE-SVC-X"]);
        let kept = without_kube_proxy(SAVE);
        assert!(!kept.contains("KUBE-"), "{kept}");
        assert!(
            kept.contains(":DOCKER - [0:0]") && kept.contains("-A PREROUTING -j DOCKER"),
            "{kept}"
        );
        assert!(kept.contains("*nat") && kept.contains("COMMIT"), "{kept}");
    }

    /// kubelet's chains start with `KUBE-` too, on every node: they are
    /// never kube-proxy's, and neither are the jumps to them.
    #[test]
    fn kubelets_chains_are_not_kube_proxys() {
        for (table, name) in [
            ("filter", "KUBE-FIREWALL"),
            ("nat", "KUBE-KUBELET-CANARY"),
            ("mangle", "KUBE-IPTABLES-HINT"),
            ("nat", "KUBE-MARK-DROP"),
            ("filter", "KUBE-SVC-ABC"),
            ("mangle", "KUBE-SERVICES"),
        ] {
            assert!(!is_kube_proxys_chain(table, name), "{table} {name}");
        }
        for (table, name) in [
            ("nat", "KUBE-MARK-MASQ"),
            ("nat", "KUBE-SEP-ABC"),
            ("nat", "KUBE-FW-ABC"),
            ("filter", "KUBE-PROXY-FIREWALL"),
            ("mangle", "KUBE-PROXY-CANARY"),
        ] {
            assert!(is_kube_proxys_chain(table, name), "{table} {name}");
        }
        let ruleset = json!({"nftables": [
            {"chain": {"family": "ip", "table": "filter", "name": "INPUT", "handle": 1}},
            {"chain": {"family": "ip", "table": "filter", "name": "KUBE-FIREWALL", "handle": 2}},
            {"chain": {"family": "ip", "table": "filter", "name": "KUBE-FORWARD", "handle": 3}},
            {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 10,
                      "expr": [{"jump": {"target": "KUBE-FIREWALL"}}]}},
            {"rule": {"family": "ip", "table": "filter", "chain": "KUBE-FIREWALL", "handle": 11,
                      "expr": [{"jump": {"target": "KUBE-FORWARD"}}]}},
        ]});
        let found = from_ruleset(&ruleset);
        let kube = &found.iptables_nft[&("ip".to_owned(), "filter".to_owned())];
        assert_eq!(kube.chains, ["KUBE-FORWARD"]);
        assert_eq!(
            kube.jumps,
            [("KUBE-FIREWALL".to_owned(), 11)],
            "a jump from kubelet's chain goes"
        );
    }

    #[test]
    fn legacy_cleanup_keeps_kubelets_chains_and_reads_comments_as_words() {
        let save = "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-FORWARD - [0:0]\n\
            -A INPUT -j KUBE-FIREWALL\n\
            -A INPUT -m comment --comment \"say -j KUBE-FORWARD\" -j ACCEPT\n\
            -A INPUT -m comment --comment \"kube\" -j KUBE-FORWARD\n\
            -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP\nCOMMIT\n";
        assert_eq!(legacy_chains(save)["filter"], ["KUBE-FORWARD"]);
        assert_eq!(
            without_kube_proxy(save),
            "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\n\
             -A INPUT -m comment --comment \"say -j KUBE-FORWARD\" -j ACCEPT\n\
             -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP\nCOMMIT\n"
        );
    }

    #[test]
    fn long_lists_are_shortened() {
        let names: Vec<String> = (0..7).map(|i| format!("KUBE-SVC-{i}")).collect();
        assert_eq!(
            short_list(&names),
            "KUBE-SVC-0, KUBE-SVC-1, KUBE-SVC-2, KUBE-SVC-3 and 3 more"
        );
    }
}
