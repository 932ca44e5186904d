//! Which IP families a node proxy serves, as kube-proxy 1.36 chooses them
//! in nftables mode: the families the flags name; without any, both where
//! the node has IPv6 enabled (one engine and one table each) and IPv4
//! alone where not. The primary family (kube-proxy's: `--bind-address`
//! when it is not 0.0.0.0 or ::, else the Node's first address) orders
//! them and words the checks of configuration against the cluster's shape
//! ([`IpConfig::bad_ip_config`], kube-proxy's `checkBadIPConfig`).
//!
//! One difference, deliberate: kube-proxy waits for the Node's addresses
//! before it starts; a proxy built on this crate starts both families at
//! once (the primary family changes nothing it writes) and checks the
//! configuration when the Node's addresses arrive
//! ([`check_against_the_node`]).

use std::net::{IpAddr, SocketAddr};

use informer_glue::node::NodeFacts;
use ipnet::IpNet;
use slice_model::IpFamily;
use tokio::sync::watch;

/// The families served, primary first, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The families.
    pub families: Vec<IpFamily>,
    /// Why these, for the start's log line.
    pub why: String,
}

/// The primary family `--bind-address` gives: its family, unless it is
/// 0.0.0.0 or :: (kube-proxy's `detectNodeIPs`).
pub fn family_of_bind_address(address: IpAddr) -> Option<IpFamily> {
    (!address.is_unspecified()).then(|| IpFamily::of(&address))
}

/// `--bind-address` names IPv6 on a node where IPv6 is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--bind-address is IPv6, but IPv6 is not enabled on this node (no /proc/net/if_inet6, or \
     net.ipv6.conf.all.disable_ipv6=1): enable it, or set --ip-family"
)]
pub struct Ipv6Disabled;

/// The families of a host that has IPv6 enabled or not, with `primary`
/// (from `--bind-address`) when known.
pub fn from_host(primary: Option<IpFamily>, ipv6: bool) -> Result<Chosen, Ipv6Disabled> {
    match (ipv6, primary) {
        (true, Some(IpFamily::V6)) => Ok(Chosen {
            families: vec![IpFamily::V6, IpFamily::V4],
            why: "IPv6 is enabled on this node: both families, IPv6 first (--bind-address)".into(),
        }),
        (true, _) => Ok(Chosen {
            families: vec![IpFamily::V4, IpFamily::V6],
            why: "IPv6 is enabled on this node: both families".into(),
        }),
        (false, Some(IpFamily::V6)) => Err(Ipv6Disabled),
        (false, _) => Ok(Chosen {
            families: vec![IpFamily::V4],
            why: "IPv6 is not enabled on this node (no /proc/net/if_inet6, or net.ipv6.conf.all.disable_ipv6=1): \
                  IPv4 alone"
                .into(),
        }),
    }
}

/// The families, as the log writes them: `ipv4`, `ipv4,ipv6`.
pub fn families_text(families: &[IpFamily]) -> String {
    let names: Vec<&str> = families.iter().map(|f| f.as_str()).collect();
    names.join(",")
}

/// Whether `cidrs` is a non-empty list of networks all of `family`
/// (kube-proxy's `badCIDRs`).
pub fn holds_only(cidrs: &[IpNet], family: IpFamily) -> bool {
    !cidrs.is_empty() && cidrs.iter().all(|c| IpFamily::of(&c.addr()) == family)
}

/// The settings [`IpConfig::bad_ip_config`] checks (kube-proxy's flags
/// of the same names).
pub struct IpConfig {
    /// `--bind-address`.
    pub bind_address: IpAddr,
    /// Both families are served.
    pub dual_stack: bool,
    /// `--cluster-cidr`.
    pub cluster_cidrs: Vec<IpNet>,
    /// `--detect-local-mode` is ClusterCIDR: the cluster CIDRs tell
    /// pods from the rest.
    pub local_by_cluster_cidr: bool,
    /// The servers' addresses by flag name (`healthz-bind-address`,
    /// `metrics-bind-address`), where given.
    pub bind_addresses: Vec<(&'static str, Option<SocketAddr>)>,
}

impl IpConfig {
    /// kube-proxy's `checkBadIPConfig`, in substance: settings of the
    /// other family only, in a cluster whose primary family is `primary`
    /// and whose Node has `pod_cidrs`.
    pub fn bad_ip_config(&self, primary: IpFamily, pod_cidrs: &[IpNet]) -> Vec<String> {
        let bad = match primary {
            IpFamily::V4 => IpFamily::V6,
            IpFamily::V6 => IpFamily::V4,
        };
        let cluster = if self.dual_stack {
            format!("{primary}-primary")
        } else {
            primary.to_string()
        };
        let mut out = Vec::new();
        if self.local_by_cluster_cidr && holds_only(&self.cluster_cidrs, bad) {
            out.push(format!(
                "cluster is {cluster} but --cluster-cidr holds only {bad} networks"
            ));
        }
        if holds_only(pod_cidrs, bad) {
            out.push(format!(
                "cluster is {cluster} but the Node's spec.podCIDRs holds only {bad} networks"
            ));
        }
        if !self.dual_stack {
            for (flag, address) in &self.bind_addresses {
                if let Some(a) = address.filter(|a| !a.ip().is_unspecified() && IpFamily::of(&a.ip()) == bad) {
                    out.push(format!("cluster is {cluster} but --{flag} is {bad} ({a})"));
                }
            }
        }
        out
    }
}

/// The primary family from the Node's addresses (its first), unless
/// `--bind-address` named one; `None` when neither tells (kube-proxy then
/// assumes IPv4 and says so).
pub fn primary(bind_address: IpAddr, node_ips: &[IpAddr]) -> Option<IpFamily> {
    family_of_bind_address(bind_address).or_else(|| node_ips.first().map(IpFamily::of))
}

/// kube-proxy's checks of the configuration against the cluster's shape,
/// once the Node's addresses tell the primary family (or after a minute
/// without them, as kube-proxy gives up waiting: IPv4 then, said once).
pub async fn check_against_the_node(settings: IpConfig, mut facts: watch::Receiver<NodeFacts>) {
    let known = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            if !facts.borrow_and_update().primary_ips.is_empty() {
                return;
            }
            if facts.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    let node = facts.borrow().clone();
    let primary = primary(settings.bind_address, &node.primary_ips).unwrap_or_else(|| {
        if known.is_err() {
            tracing::info!(
                "cannot tell this node's primary IP family (the Node has no address yet): taking IPv4; \
                 --bind-address sets it"
            );
        }
        IpFamily::V4
    });
    for problem in settings.bad_ip_config(primary, &node.pod_cidrs) {
        tracing::warn!("{problem}: the settings of the other family alone are left out");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn families_are_written_as_the_log_writes_them() {
        assert_eq!(families_text(&[IpFamily::V4, IpFamily::V6]), "ipv4,ipv6");
    }

    #[test]
    fn without_a_flag_the_host_decides_and_bind_address_puts_its_family_first() {
        let both = from_host(None, true).unwrap();
        assert_eq!(both.families, [IpFamily::V4, IpFamily::V6]);
        assert_eq!(
            from_host(Some(IpFamily::V6), true).unwrap().families,
            [IpFamily::V6, IpFamily::V4]
        );
        let v4 = from_host(None, false).unwrap();
        assert_eq!(v4.families, [IpFamily::V4]);
        assert!(v4.why.contains("IPv6 is not enabled"), "{}", v4.why);
        assert!(
            from_host(Some(IpFamily::V6), false)
                .unwrap_err()
                .to_string()
                .contains("--bind-address is IPv6")
        );
        assert_eq!(family_of_bind_address("0.0.0.0".parse().unwrap()), None);
        assert_eq!(family_of_bind_address("::".parse().unwrap()), None);
        assert_eq!(family_of_bind_address("fd00::5".parse().unwrap()), Some(IpFamily::V6));
        assert_eq!(
            primary(
                "0.0.0.0".parse().unwrap(),
                &["fd00::9".parse().unwrap(), "10.0.0.9".parse().unwrap()]
            ),
            Some(IpFamily::V6),
            "the Node's first address"
        );
        assert_eq!(
            primary("10.0.0.1".parse().unwrap(), &["fd00::9".parse().unwrap()]),
            Some(IpFamily::V4),
            "--bind-address wins"
        );
        assert_eq!(primary("::".parse().unwrap(), &[]), None);
    }

    #[test]
    fn settings_of_the_other_family_alone_are_said_as_kube_proxy_says_them() {
        let off = None;
        let v6_metrics = Some("[fd00::1]:10249".parse().unwrap());
        let shape =
            |primary, dual_stack, cluster: &[&str], pods: &[&str]| (primary, dual_stack, nets(cluster), nets(pods));
        let check = |(primary, dual_stack, cluster, pods): (IpFamily, bool, Vec<IpNet>, Vec<IpNet>), metrics| {
            let settings = IpConfig {
                bind_address: "0.0.0.0".parse().unwrap(),
                dual_stack,
                cluster_cidrs: cluster,
                local_by_cluster_cidr: true,
                bind_addresses: vec![("healthz-bind-address", off), ("metrics-bind-address", metrics)],
            };
            settings.bad_ip_config(primary, &pods)
        };
        // A dual-stack cluster's own arguments: nothing to say.
        let ok = shape(
            IpFamily::V4,
            true,
            &["10.244.0.0/16", "fd00:244::/56"],
            &["10.244.1.0/24"],
        );
        assert!(check(ok, off).is_empty());
        // An IPv4-primary cluster whose pod network is only IPv6.
        let said = check(
            shape(IpFamily::V4, true, &["fd00:244::/56"], &["fd00:244:1::/64"]),
            v6_metrics,
        );
        assert_eq!(
            said,
            [
                "cluster is ipv4-primary but --cluster-cidr holds only ipv6 networks",
                "cluster is ipv4-primary but the Node's spec.podCIDRs holds only ipv6 networks",
            ],
            "a bind address of the other family is fine where both are served"
        );
        // Single-stack: the metrics address of the other family too.
        let said = check(shape(IpFamily::V4, false, &[], &[]), v6_metrics);
        assert_eq!(
            said,
            ["cluster is ipv4 but --metrics-bind-address is ipv6 ([fd00::1]:10249)"]
        );
        // An IPv6-only cluster with IPv6 settings: nothing.
        assert!(
            check(
                shape(IpFamily::V6, false, &["fd00:244::/56"], &["fd00:244:1::/64"]),
                v6_metrics
            )
            .is_empty()
        );
    }
}
