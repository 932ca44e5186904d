//! "A flag beats what the cluster says", decided once: the dataplane's
//! settings from the command line and what the cluster says of this node
//! ([`NodeFacts`]). `run` calls it whenever the facts change, `render` and
//! `explain` once with the facts they read, so all three program the same
//! node the same way.

use informer_glue::node::NodeFacts;
use nft_dataplane::{DataplaneConfig, LocalDetector};

use crate::settings::flags::ProxyArgs;

/// The settings `proxy` and `facts` make together. The family is the
/// first of `--ip-family`'s; a dual-stack run sets each proxier's own.
///
/// - the zone: `--node-zone`, else the Node's label;
/// - the service ranges: `--service-cidr`, else the ServiceCIDR objects';
/// - `--detect-local-mode NodeCIDR`: the Node's pod ranges;
/// - `--nodeport-addresses primary`: the Node's primary addresses (none
///   known: every local address), else the ranges the flag names.
pub fn effective(proxy: &ProxyArgs, facts: &NodeFacts) -> DataplaneConfig {
    let detect_local = match proxy.local_detector() {
        LocalDetector::NodeCidr(_) => LocalDetector::NodeCidr(facts.pod_cidrs.clone()),
        other => other,
    };
    // Loopback networks are the relay's: the rules never answer there, so
    // beside other entries they narrow nothing (`primary,localhost` is the
    // primary addresses); alone (`localhost`) they leave the rules no
    // address to answer on.
    let named = proxy.nodeport_cidrs();
    let beyond_loopback: Vec<ipnet::IpNet> = named
        .iter()
        .filter(|n| !(n.network().is_loopback() && n.broadcast().is_loopback()))
        .copied()
        .collect();
    let nodeport_addresses = if proxy.nodeport_primary() {
        if facts.primary_ips.is_empty() {
            Vec::new()
        } else {
            let primary = facts.primary_ips.iter().map(|ip| ipnet::IpNet::from(*ip));
            primary.chain(beyond_loopback).collect()
        }
    } else if beyond_loopback.is_empty() {
        named
    } else {
        beyond_loopback
    };
    let service_cidrs = if proxy.service_cidr.is_empty() {
        facts.service_cidrs.clone()
    } else {
        proxy.service_cidr.clone()
    };
    DataplaneConfig {
        family: proxy.family(),
        scope: nft_dataplane::desired::Scope::Node,
        node_zone: proxy.node_zone.clone().or_else(|| facts.zone.clone()),
        cluster_cidrs: proxy.cluster_cidr.clone(),
        detect_local,
        masquerade_all: proxy.masquerade_all,
        nodeport_addresses,
        service_cidrs,
        refuse_for_tests: refuse_for_tests(),
    }
}

/// The service named by `PROXYD_TEST_REFUSE_SERVICE` (`NAMESPACE/NAME`),
/// whose rules the writer makes the kernel refuse: how the tests show that
/// one refused service leaves the others programmed, on the real kernel.
pub(crate) fn refuse_for_tests() -> Option<slice_model::ServiceName> {
    let value = std::env::var("PROXYD_TEST_REFUSE_SERVICE").ok()?;
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
            tracing::warn!(
                "PROXYD_TEST_REFUSE_SERVICE: the kernel will refuse the rules of service {value} (a test hook)"
            );
            Some(slice_model::ServiceName::new(ns, name))
        }
        _ => {
            tracing::warn!("PROXYD_TEST_REFUSE_SERVICE={value:?} is not NAMESPACE/NAME: ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NodeFacts {
        NodeFacts {
            zone: Some("zone-a".into()),
            eligible: true,
            pod_cidrs: vec!["10.244.1.0/24".parse().unwrap()],
            primary_ips: vec!["192.0.2.10".parse().unwrap()],
            service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        }
    }

    fn with(flags: &[&str]) -> ProxyArgs {
        use clap::{Args, FromArgMatches};
        let mut all = vec!["proxyd", "--hostname-override", "node-1"];
        all.extend_from_slice(flags);
        let m = ProxyArgs::augment_args(clap::Command::new("proxyd"))
            .try_get_matches_from(all)
            .unwrap();
        ProxyArgs::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn the_cluster_fills_what_no_flag_says() {
        let c = effective(
            &with(&["--detect-local-mode", "NodeCIDR", "--nodeport-addresses", "primary"]),
            &facts(),
        );
        assert_eq!(c.node_zone.as_deref(), Some("zone-a"));
        assert_eq!(c.service_cidrs, facts().service_cidrs);
        assert_eq!(c.detect_local, LocalDetector::NodeCidr(facts().pod_cidrs));
        assert_eq!(
            c.nodeport_addresses,
            vec!["192.0.2.10/32".parse::<ipnet::IpNet>().unwrap()]
        );
    }

    #[test]
    fn a_flag_beats_what_the_cluster_says() {
        let c = effective(
            &with(&[
                "--node-zone",
                "zone-z",
                "--service-cidr",
                "10.100.0.0/16",
                "--nodeport-addresses",
                "198.51.100.0/24",
            ]),
            &facts(),
        );
        assert_eq!(c.node_zone.as_deref(), Some("zone-z"));
        assert_eq!(c.service_cidrs, vec!["10.100.0.0/16".parse::<ipnet::IpNet>().unwrap()]);
        assert_eq!(
            c.nodeport_addresses,
            vec!["198.51.100.0/24".parse::<ipnet::IpNet>().unwrap()]
        );
        assert_eq!(
            c.detect_local,
            LocalDetector::ClusterCidr,
            "the default mode reads no Node"
        );
    }

    #[test]
    fn nothing_known_is_nothing_used() {
        let c = effective(
            &with(&["--detect-local-mode", "NodeCIDR", "--nodeport-addresses", "primary"]),
            &NodeFacts::default(),
        );
        assert_eq!(c.node_zone, None);
        assert!(c.service_cidrs.is_empty());
        assert_eq!(c.detect_local, LocalDetector::NodeCidr(Vec::new()));
        assert!(c.nodeport_addresses.is_empty(), "every local address");
    }

    #[test]
    fn loopback_is_the_relays_and_narrows_nothing_for_the_rules() {
        let nets = |flag: &str, facts: &NodeFacts| -> Vec<String> {
            effective(&with(&["--nodeport-addresses", flag]), facts)
                .nodeport_addresses
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(nets("primary,localhost", &facts()), ["192.0.2.10/32"]);
        assert_eq!(
            nets("primary,localhost", &NodeFacts::default()),
            Vec::<String>::new(),
            "primary unknown: every address, as primary alone"
        );
        assert_eq!(
            nets("localhost", &facts()),
            ["127.0.0.0/8", "::1/128"],
            "alone: no address the rules answer on"
        );
        assert_eq!(nets("all", &facts()), ["0.0.0.0/0", "::/0"]);
        assert_eq!(nets("all,127.0.0.1/32", &facts()), ["0.0.0.0/0", "::/0"]);
        assert_eq!(
            nets("10.0.0.0/8,localhost", &facts()),
            ["10.0.0.0/8"],
            "a CIDR beside localhost"
        );
    }

    #[test]
    fn only_a_named_loopback_address_answers_localhost_node_ports() {
        use crate::settings::flags::NodePortAddress;
        let named = |flag: &str| -> (bool, bool) {
            let p = with(&["--nodeport-addresses", flag]);
            (
                p.nodeport_names_loopback(slice_model::IpFamily::V4),
                p.nodeport_names_loopback(slice_model::IpFamily::V6),
            )
        };
        assert_eq!(named("primary"), (false, false), "kube-proxy's default");
        assert_eq!(named("primary,localhost"), (true, true));
        assert_eq!(named("primary,127.0.0.1/32"), (true, false));
        assert_eq!(named("127.0.0.0/8,::1/128"), (true, true));
        assert_eq!(named("all"), (false, false), "all holds loopback but does not name it");
        assert_eq!(named("0.0.0.0/0,::/0"), (false, false));
        assert_eq!(named("all,localhost"), (true, true));
        assert_eq!(named("127.0.0.2/32"), (false, false), "not the address listened on");
        assert_eq!(named("126.0.0.0/7"), (false, false), "more than loopback");
        assert!(NodePortAddress::Localhost.names_loopback(slice_model::IpFamily::V6));
    }
}
