//! kube-proxy's feature gates (`--feature-gates`, the configuration's
//! `featureGates`): the gates kube-proxy's proxying reads in 1.36–1.38,
//! what each one does here, and how settings resolve as kube-proxy's
//! component-base resolves them: a gate set by name takes its last
//! setting; else `AllAlpha` or `AllBeta` sets it by its stage; else its
//! 1.38 default.
//!
//! kube-proxy shares Kubernetes' registry of gates, so a node's gate list
//! often names the kubelet's too, and it refuses a name no component
//! knows. proxyd cannot know every component's gates (nor the next
//! release's), so a name it does not know is accepted and said once; a
//! name that differs from a kube-proxy gate's only by case or a letter or
//! two is the likelier typo and is said as a warning that names the gate.

/// One setting, `Name=true|false`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGate {
    /// The gate's name.
    pub name: String,
    /// On or off.
    pub enabled: bool,
}

/// Parses `Name=true` or `Name=false` (the value in any case, as
/// kube-proxy's `strconv.ParseBool` reads `true`/`false`).
pub fn parse(s: &str) -> Result<FeatureGate, String> {
    let (name, value) = s
        .trim()
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=true|false"))?;
    let enabled = match value.trim().to_ascii_lowercase().as_str() {
        "true" => true,
        "false" => false,
        other => return Err(format!("{name}={other:?}: true or false")),
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{s:?} names no gate"));
    }
    Ok(FeatureGate {
        name: name.to_owned(),
        enabled,
    })
}

/// A gate's maturity in kube-proxy 1.38, which `AllAlpha` and `AllBeta`
/// go by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Off unless set (or `AllAlpha=true`).
    Alpha,
    /// On unless set off (or `AllBeta=false`).
    Beta,
    /// On, and kube-proxy refuses to turn it off; proxyd accepts either.
    Ga,
    /// On until it is removed.
    Deprecated,
    /// `AllAlpha` and `AllBeta` themselves, and the logging gates.
    Meta,
}

/// A gate kube-proxy 1.36–1.38 reads, and what it does in proxyd.
#[derive(Clone, Copy, Debug)]
pub struct KnownGate {
    /// Its name.
    pub name: &'static str,
    /// Its stage in kube-proxy 1.38.
    pub stage: Stage,
    /// What setting it does here.
    pub here: &'static str,
}

/// The localhost node ports' gate (KEP-6032).
pub const LOCALHOST_NODEPORTS: &str = "KubeProxyNFTablesLocalhostNodePorts";

/// The gates kube-proxy's proxying reads, with what each does here.
pub const KUBE_PROXY_GATES: &[KnownGate] = &[
    KnownGate {
        name: LOCALHOST_NODEPORTS,
        stage: Stage::Beta,
        here: "the relay on 127.0.0.1 and ::1 for node ports, when --nodeport-addresses names loopback",
    },
    KnownGate {
        name: "NFTablesNetlink",
        stage: Stage::Beta,
        here: "no effect: proxyd always reads nftables over netlink, and writes over it unless --nft-writer nft",
    },
    KnownGate {
        name: "KubeProxyIPVS",
        stage: Stage::Deprecated,
        here: "no effect: proxyd has no ipvs mode",
    },
    KnownGate {
        name: "NFTablesProxyMode",
        stage: Stage::Ga,
        here: "no effect: proxyd is the nftables mode",
    },
    KnownGate {
        name: "MultiCIDRServiceAllocator",
        stage: Stage::Ga,
        here: "no effect: ServiceCIDR objects are always read",
    },
    KnownGate {
        name: "ServiceTrafficDistribution",
        stage: Stage::Ga,
        here: "no effect: trafficDistribution is always honoured",
    },
    KnownGate {
        name: "PreferSameTrafficDistribution",
        stage: Stage::Ga,
        here: "no effect: PreferSameZone and PreferSameNode are always honoured",
    },
    KnownGate {
        name: "TopologyAwareHints",
        stage: Stage::Ga,
        here: "no effect: zone hints are always honoured",
    },
    KnownGate {
        name: "KubeProxyDrainingTerminatingNodes",
        stage: Stage::Ga,
        here: "no effect: a terminating node's health check always drains",
    },
    KnownGate {
        name: "AllAlpha",
        stage: Stage::Meta,
        here: "sets every alpha gate not set by name (none of the above is alpha in 1.38)",
    },
    KnownGate {
        name: "AllBeta",
        stage: Stage::Meta,
        here: "sets every beta gate not set by name (AllBeta=false turns localhost node ports off)",
    },
    KnownGate {
        name: "ContextualLogging",
        stage: Stage::Meta,
        here: "no effect: proxyd's logs are tracing's",
    },
    KnownGate {
        name: "LoggingAlphaOptions",
        stage: Stage::Meta,
        here: "no effect: proxyd's logs are tracing's",
    },
    KnownGate {
        name: "LoggingBetaOptions",
        stage: Stage::Meta,
        here: "no effect: proxyd's logs are tracing's",
    },
];

/// The kube-proxy gate named `name`, if it is one.
pub fn known(name: &str) -> Option<&'static KnownGate> {
    KUBE_PROXY_GATES.iter().find(|g| g.name == name)
}

/// Whether gate `name` is on under `settings` (in the order given).
pub fn enabled(settings: &[FeatureGate], name: &str) -> bool {
    let last = |n: &str| settings.iter().rev().find(|g| g.name == n).map(|g| g.enabled);
    if let Some(on) = last(name) {
        return on;
    }
    match known(name).map(|g| g.stage) {
        Some(Stage::Alpha) => last("AllAlpha").unwrap_or(false),
        Some(Stage::Beta) => last("AllBeta").unwrap_or(true),
        Some(Stage::Ga | Stage::Deprecated) => true,
        Some(Stage::Meta) | None => false,
    }
}

/// What `settings` name that kube-proxy's proxying does not read, each
/// once, sorted; with the kube-proxy gate each may be a typo of.
pub fn not_kube_proxys(settings: &[FeatureGate]) -> Vec<(&str, Option<&'static str>)> {
    let mut names: Vec<&str> = settings
        .iter()
        .map(|g| g.name.as_str())
        .filter(|n| known(n).is_none())
        .collect();
    names.sort_unstable();
    names.dedup();
    names.into_iter().map(|n| (n, near_miss(n))).collect()
}

/// The kube-proxy gate `name` most likely misspells: the same but for
/// case, or at most two letters added, dropped or changed.
fn near_miss(name: &str) -> Option<&'static str> {
    KUBE_PROXY_GATES
        .iter()
        .map(|g| g.name)
        .find(|g| g.eq_ignore_ascii_case(name) || edit_distance(g, name) <= 2)
}

/// Levenshtein distance over bytes (gate names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(x != y));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(s: &str) -> Vec<FeatureGate> {
        s.split(',')
            .filter(|s| !s.is_empty())
            .map(|g| parse(g).unwrap())
            .collect()
    }

    #[test]
    fn a_setting_by_name_wins_then_its_stage_then_its_default() {
        let on = |s: &str| enabled(&settings(s), LOCALHOST_NODEPORTS);
        assert!(on(""), "beta in 1.38: on by default");
        assert!(!on("KubeProxyNFTablesLocalhostNodePorts=false"));
        assert!(on(
            "KubeProxyNFTablesLocalhostNodePorts=false,KubeProxyNFTablesLocalhostNodePorts=TRUE"
        ));
        assert!(!on("AllBeta=false"), "a beta gate follows AllBeta");
        assert!(
            on("AllBeta=false,KubeProxyNFTablesLocalhostNodePorts=true"),
            "by name beats AllBeta"
        );
        assert!(on("AllAlpha=false"), "AllAlpha leaves a beta gate alone");
        assert!(enabled(&settings(""), "KubeProxyIPVS"));
        assert!(!enabled(&settings(""), "SomeoneElsesGate"));
        assert!(enabled(&settings("SomeoneElsesGate=true"), "SomeoneElsesGate"));
    }

    #[test]
    fn names_not_kube_proxys_are_listed_once_with_the_gate_they_may_misspell() {
        let s = settings(
            "KubeProxyNFTablesLocalhostNodePort=true,NFTablesNetlink=false,kubeproxyipvs=true,\
             SELinuxMount=true,SELinuxMount=false,AllBeta=true",
        );
        assert_eq!(
            not_kube_proxys(&s),
            [
                ("KubeProxyNFTablesLocalhostNodePort", Some(LOCALHOST_NODEPORTS)),
                ("SELinuxMount", None),
                ("kubeproxyipvs", Some("KubeProxyIPVS")),
            ]
        );
    }

    #[test]
    fn settings_parse_as_kube_proxy_takes_them() {
        assert_eq!(
            parse(" NFTablesNetlink = False "),
            Ok(FeatureGate {
                name: "NFTablesNetlink".into(),
                enabled: false
            })
        );
        assert!(parse("NFTablesNetlink=yes").unwrap_err().contains("true or false"));
        assert!(parse("=true").unwrap_err().contains("names no gate"));
        assert!(parse("NFTablesNetlink").unwrap_err().contains("NAME=true|false"));
    }

    #[test]
    fn edit_distance_counts_letters_added_dropped_or_changed() {
        assert_eq!(edit_distance("AllBeta", "AllBeta"), 0);
        assert_eq!(edit_distance("AllBeta", "AllBetas"), 1);
        assert_eq!(edit_distance("AllBeta", "AlBeta"), 1);
        assert_eq!(edit_distance("AllBeta", "AllBata"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
