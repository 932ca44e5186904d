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
    let nodeport_addresses = nft_dataplane::nodeport::rule_networks(&proxy.nodeport_addresses, &facts.primary_ips);
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
        loopback_relay: false,
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
}
