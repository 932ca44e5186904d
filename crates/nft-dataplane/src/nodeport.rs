//! Where node ports answer: kube-proxy's `--nodeport-addresses`, its
//! keywords and networks, and what they leave the rules to match.
//!
//! Loopback addresses are never the rules': the kernel drops a packet with
//! a loopback source that leaves the host, so a localhost node port is
//! answered by a relay, and only where the setting names loopback itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use slice_model::IpFamily;

/// One value of `--nodeport-addresses`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodePortAddress {
    /// This node's primary addresses (kube-proxy 1.36's default).
    Primary,
    /// The loopback addresses, 127.0.0.0/8 and ::1 (kube-proxy 1.37).
    Localhost,
    /// Every local address, 0.0.0.0/0 and ::/0 (kube-proxy 1.37).
    All,
    /// Local addresses in this network.
    Cidr(IpNet),
}

const V4_LOOPBACK: IpNet = IpNet::V4(ipnet::Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8));
const V6_LOOPBACK: IpNet = IpNet::V6(ipnet::Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128));
const V4_ALL: IpNet = IpNet::V4(ipnet::Ipv4Net::new_assert(Ipv4Addr::UNSPECIFIED, 0));
const V6_ALL: IpNet = IpNet::V6(ipnet::Ipv6Net::new_assert(Ipv6Addr::UNSPECIFIED, 0));

impl NodePortAddress {
    /// The networks it stands for (none for `primary`).
    pub fn networks(self) -> Vec<IpNet> {
        match self {
            Self::Primary => Vec::new(),
            Self::Localhost => vec![V4_LOOPBACK, V6_LOOPBACK],
            Self::All => vec![V4_ALL, V6_ALL],
            Self::Cidr(n) => vec![n],
        }
    }

    /// Whether it names `family`'s loopback address explicitly: the
    /// keyword `localhost`, or a network of loopback addresses holding
    /// 127.0.0.1 or ::1 (`all` and 0.0.0.0/0 hold them too, but do not name
    /// them: kube-proxy does not listen on loopback for those).
    pub fn names_loopback(self, family: IpFamily) -> bool {
        match self {
            Self::Localhost => true,
            Self::Cidr(n) => {
                let loopback = match family {
                    IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
                };
                n.contains(&loopback) && is_loopback(&n)
            }
            Self::Primary | Self::All => false,
        }
    }
}

fn is_loopback(n: &IpNet) -> bool {
    n.network().is_loopback() && n.broadcast().is_loopback()
}

/// The networks the rules answer node ports on
/// ([`DataplaneConfig::nodeport_addresses`](crate::DataplaneConfig)), for
/// `addresses` on a node whose primary addresses are `primary_ips` (none
/// known yet: every local address, as an empty list means). Loopback
/// networks are the relay's: beside other entries they narrow nothing
/// (`primary,localhost` is the primary addresses); alone (`localhost`) they
/// leave the rules no address to answer on.
pub fn rule_networks(addresses: &[NodePortAddress], primary_ips: &[IpAddr]) -> Vec<IpNet> {
    let named: Vec<IpNet> = addresses.iter().flat_map(|a| a.networks()).collect();
    let beyond_loopback: Vec<IpNet> = named.iter().filter(|n| !is_loopback(n)).copied().collect();
    if addresses.contains(&NodePortAddress::Primary) {
        if primary_ips.is_empty() {
            return Vec::new();
        }
        let primary = primary_ips.iter().map(|ip| IpNet::from(*ip));
        primary.chain(beyond_loopback).collect()
    } else if beyond_loopback.is_empty() {
        named
    } else {
        beyond_loopback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &str) -> Vec<NodePortAddress> {
        let one = |s: &str| match s {
            "primary" => NodePortAddress::Primary,
            "localhost" => NodePortAddress::Localhost,
            "all" => NodePortAddress::All,
            cidr => NodePortAddress::Cidr(cidr.parse().unwrap()),
        };
        list.split(',').map(one).collect()
    }

    #[test]
    fn loopback_is_the_relays_and_narrows_nothing_for_the_rules() {
        let primary: Vec<IpAddr> = vec!["192.0.2.10".parse().unwrap()];
        let nets = |list: &str, primary: &[IpAddr]| -> Vec<String> {
            rule_networks(&parse(list), primary)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(nets("primary", &primary), ["192.0.2.10/32"]);
        assert_eq!(nets("primary,localhost", &primary), ["192.0.2.10/32"]);
        assert!(
            nets("primary,localhost", &[]).is_empty(),
            "primary unknown: every address, as primary alone"
        );
        assert_eq!(
            nets("localhost", &primary),
            ["127.0.0.0/8", "::1/128"],
            "alone: no address the rules answer on"
        );
        assert_eq!(nets("all", &primary), ["0.0.0.0/0", "::/0"]);
        assert_eq!(nets("all,127.0.0.1/32", &primary), ["0.0.0.0/0", "::/0"]);
        assert_eq!(
            nets("10.0.0.0/8,localhost", &primary),
            ["10.0.0.0/8"],
            "a CIDR beside localhost"
        );
    }

    #[test]
    fn only_a_named_loopback_address_answers_localhost_node_ports() {
        let named = |list: &str| -> (bool, bool) {
            let any = |f| parse(list).iter().any(|a| a.names_loopback(f));
            (any(IpFamily::V4), any(IpFamily::V6))
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
    }

    #[test]
    fn primary_of_one_family_leaves_the_other_without_node_ports() {
        let v4: Vec<IpAddr> = vec!["192.0.2.10".parse().unwrap()];
        let v6: Vec<IpAddr> = vec!["2001:db8::10".parse().unwrap()];
        for (primary, served, unserved) in [(v4, IpFamily::V4, IpFamily::V6), (v6, IpFamily::V6, IpFamily::V4)] {
            let config = |family| crate::DataplaneConfig {
                nodeport_addresses: rule_networks(&parse("primary"), &primary),
                ..crate::DataplaneConfig::new(family)
            };
            let answered = config(served).family_nodeport_addresses();
            assert_eq!(answered.map(|n| n.len()), Some(1), "{served:?}: its primary address");
            assert_eq!(
                config(unserved).family_nodeport_addresses(),
                None,
                "{unserved:?}: nowhere"
            );
        }
        let unknown = crate::DataplaneConfig::new(IpFamily::V6);
        assert_eq!(
            unknown.family_nodeport_addresses(),
            Some(Vec::new()),
            "nothing named: everywhere"
        );
    }
}
