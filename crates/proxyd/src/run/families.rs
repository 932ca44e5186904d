//! Which IP families `run` serves: the flags' families, else the host's
//! ([`node_proxy::families`] holds kube-proxy's rules), and the flags'
//! settings those rules check.

use slice_model::IpFamily;

use crate::settings::flags::{DetectLocalMode, RunArgs};
use node_proxy::families::{
    Chosen, IpConfig, Ipv6Disabled, families_text, family_of_bind_address, from_host, holds_only,
};

/// The families `args` serve: those the flags name, else the host's.
pub fn choose(args: &RunArgs) -> Result<Chosen, Ipv6Disabled> {
    if let Some(families) = args.families() {
        return Ok(Chosen {
            families,
            why: "as --ip-family or --ip-families says".into(),
        });
    }
    let netns = if args.is_dry_run() {
        linux_dataplane::Netns::Current
    } else {
        linux_dataplane::Netns::from_flag(args.netns.clone())
    };
    let ipv6 = linux_dataplane::sysctl::ipv6_enabled(&netns).unwrap_or_else(|e| {
        tracing::warn!("cannot tell whether IPv6 is enabled ({e}): serving IPv4 alone");
        false
    });
    from_host(family_of_bind_address(args.bind_address), ipv6)
}

/// The start's fatal problems: a flag whose networks are all of a family
/// not served, where proxyd cannot do without them (`--cluster-cidr` for
/// `--detect-local-mode ClusterCIDR`: no network of a served family tells
/// pods from the rest). Other flags of a family not served are only
/// left out for that family.
pub fn problems(args: &RunArgs, families: &[IpFamily]) -> Vec<String> {
    let unserved: Vec<IpFamily> = [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .filter(|f| !families.contains(f))
        .collect();
    let mut out = Vec::new();
    for family in unserved {
        if args.proxy.detect_local_mode == DetectLocalMode::ClusterCidr && holds_only(&args.proxy.cluster_cidr, family)
        {
            out.push(format!(
                "--cluster-cidr holds only {family} networks, but proxyd serves {}: with --detect-local-mode \
                 ClusterCIDR no network tells this node's pods from other traffic",
                families_text(families)
            ));
        }
    }
    out
}

/// The settings [`IpConfig::bad_ip_config`] checks, from `args` serving
/// `families`.
pub fn ip_config(args: &RunArgs, families: &[IpFamily]) -> IpConfig {
    IpConfig {
        bind_address: args.bind_address,
        dual_stack: families.len() > 1,
        cluster_cidrs: args.proxy.cluster_cidr.clone(),
        local_by_cluster_cidr: args.proxy.detect_local_mode == DetectLocalMode::ClusterCidr,
        bind_addresses: vec![
            ("healthz-bind-address", args.healthz_bind_address.0),
            ("metrics-bind-address", args.metrics_bind_address.0),
        ],
    }
}
