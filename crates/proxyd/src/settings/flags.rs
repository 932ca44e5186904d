//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
pub use nft_dataplane::nodeport::NodePortAddress;
use slice_model::IpFamily;

/// A node service proxy that tracks Kubernetes EndpointSlices and Services
/// the way kube-proxy does.
#[derive(Parser, Debug)]
#[command(name = "proxyd", version, about)]
pub struct Cli {
    /// Logging.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,

    /// Read settings from a YAML file: a mapping of long flag names to
    /// values (e.g. `cluster-cidr: 10.244.0.0/16`), or kube-proxy's
    /// KubeProxyConfiguration; flags given on the command line win.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Feed a JSON-lines trace of watch events through the endpoint cache and
    /// print what the proxy would see after each sync (see
    /// docs/replay-format.md in the repository).
    Replay(ReplayArgs),
    /// Run the proxy: watch Services and EndpointSlices (from the API
    /// server or manifest files) and keep the nftables table in step.
    Run(Box<RunArgs>),
    /// Print the nftables ruleset proxyd would apply for a set of manifests,
    /// and a table of services and the endpoints they use.
    Render(RenderArgs),
    /// Explain, endpoint by endpoint, how a service's traffic is handled on
    /// this node and why.
    Explain(ExplainArgs),
    /// Remove everything proxyd created (its nftables tables), or, with
    /// --kube-proxy, what kube-proxy left.
    Cleanup(CleanupArgs),
    /// Write the EndpointSlices multus mode reads: for each Service on a
    /// secondary network, its pods' addresses there (the cluster's
    /// controller, run as a Deployment).
    Slices(SlicesArgs),
}

/// `proxyd slices`.
#[derive(Args, Debug)]
pub struct SlicesArgs {
    /// Path to a kubeconfig; without it: $KUBECONFIG, ~/.kube/config, then
    /// the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The Services handled: those labelled
    /// service.kubernetes.io/service-proxy-name=NAME.
    #[arg(long, default_value = "multus-proxy", value_name = "NAME")]
    pub service_proxy_name: String,
    /// Also serve DRA networks: Services annotated
    /// networking.proxyd.io/service-device-class=CLASS get their pods'
    /// addresses from the network data of their ResourceClaims' devices of
    /// that DeviceClass (watches resource.k8s.io/v1 ResourceClaims).
    #[arg(long)]
    pub dra_networks: bool,
    /// At most this many endpoints in a slice (as kube-controller-manager's flag).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub max_endpoints_per_slice: u16,
    /// /healthz (200 once the caches are filled, or while standing by for
    /// the lease) and /metrics on this address; empty: none.
    #[arg(long, default_value = "0.0.0.0:10267", value_parser = parse_bind_address)]
    pub bind_address: BindAddress,
    /// Lead through a Lease before writing (one active replica of several).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// The Lease's namespace and name.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// The Lease's name.
    #[arg(long, default_value = "proxyd-slices")]
    pub leader_elect_resource_name: String,
    /// How long a leader's Lease lasts without a renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: std::time::Duration,
    /// How long a leader tries to renew before it stops leading (and exits).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: std::time::Duration,
    /// How often candidates try, and the leader renews.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: std::time::Duration,
}

/// `proxyd cleanup`.
#[derive(Args, Debug)]
pub struct CleanupArgs {
    /// Clean up inside this named network namespace.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,

    /// Remove multus mode's table and routes from every pod namespace found
    /// (in --pod-netns-dir, else through the container runtime).
    #[arg(long, conflicts_with = "kube_proxy")]
    pub multus: bool,

    /// Remove kube-proxy's rules instead of proxyd's, as `kube-proxy
    /// --cleanup` does: its nftables tables, and its iptables chains (and
    /// the jumps to them) in iptables-nft and legacy iptables; kubelet's
    /// KUBE-FIREWALL, KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT stay.
    #[arg(long)]
    pub kube_proxy: bool,

    /// Multus mode: where pods' network namespaces are found.
    #[command(flatten)]
    pub pods: PodNetnsArgs,
}

/// Multus mode: where pods' network namespaces are found (`run` and
/// `cleanup`).
#[derive(Args, Debug, Clone, Default)]
pub struct PodNetnsArgs {
    /// Multus mode: the network namespace of pod NS/NAME is the file
    /// DIR/NS_NAME (what `ip netns add NS_NAME` creates under /run/netns),
    /// instead of asking the container runtime.
    #[arg(long, value_name = "DIR")]
    pub pod_netns_dir: Option<PathBuf>,

    /// Multus mode: the CRI v1 runtime that knows each pod's network
    /// namespace (default: containerd's socket, else CRI-O's, whichever
    /// exists).
    #[arg(long, value_name = "unix:///PATH")]
    pub container_runtime_endpoint: Option<String>,

    /// Multus mode: where the host's root is mounted, when proxyd runs in a
    /// container (the runtime's socket and the namespace paths it names are
    /// read under it, e.g. /host/proc/PID/ns/net).
    #[arg(long, value_name = "DIR")]
    pub host_prefix: Option<PathBuf>,
}

impl PodNetnsArgs {
    /// What is wrong with these flags (`multus`: whether --multus is given).
    pub fn problems(&self, multus: bool) -> Vec<String> {
        let mut problems = Vec::new();
        let given = [
            ("--pod-netns-dir", self.pod_netns_dir.is_some()),
            (
                "--container-runtime-endpoint",
                self.container_runtime_endpoint.is_some(),
            ),
            ("--host-prefix", self.host_prefix.is_some()),
        ];
        for (flag, given) in given {
            if given && !multus {
                problems.push(format!("{flag} is for --multus"));
            }
        }
        if self.pod_netns_dir.is_some() && self.container_runtime_endpoint.is_some() {
            problems.push(
                "--pod-netns-dir and --container-runtime-endpoint both say where namespaces are: give one".into(),
            );
        }
        if let Some(e) = &self.container_runtime_endpoint
            && let Err(why) = multus_dataplane::cri::socket_path(e)
        {
            problems.push(format!("--container-runtime-endpoint: {why}"));
        }
        problems
    }

    /// The runtime to ask, when no --pod-netns-dir is given: the endpoint
    /// given, else the default one whose socket exists.
    pub fn runtime(&self) -> Result<multus_dataplane::cri::CriResolver, multus_dataplane::cri::NotUnixEndpoint> {
        let prefix = self.host_prefix.clone().unwrap_or_default();
        let endpoint = self
            .container_runtime_endpoint
            .clone()
            .unwrap_or_else(|| multus_dataplane::cri::default_endpoint(&prefix));
        multus_dataplane::cri::CriResolver::new(&endpoint, &prefix)
    }
}

/// Where Services and EndpointSlices come from.
#[derive(Args, Debug, Clone)]
pub struct SourceArgs {
    /// Read objects from a YAML/JSON file or a directory of them (Services,
    /// EndpointSlices, and optionally this node's Node for its zone)
    /// instead of the API server. `proxyd run` re-reads them when they
    /// change.
    #[arg(long, value_name = "PATH", conflicts_with = "kubeconfig")]
    pub manifests: Option<PathBuf>,

    /// Path to a kubeconfig; without it: $KUBECONFIG, ~/.kube/config, then
    /// the in-cluster service account. Not with --manifests.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// How this node proxies: shared by `run`, `render` and `explain`.
#[derive(Args, Debug, Clone)]
pub struct ProxyArgs {
    /// The node name to use instead of the host name (decides which
    /// endpoints are local).
    #[arg(long)]
    pub hostname_override: Option<String>,

    /// Handle only Services and EndpointSlices labelled
    /// service.kubernetes.io/service-proxy-name=NAME; without it, skip
    /// every object that carries that label. With --multus the default is
    /// multus-proxy.
    #[arg(long)]
    pub service_proxy_name: Option<String>,

    /// Multus mode: serve Services on secondary networks (annotated
    /// k8s.v1.cni.cncf.io/service-network, with EndpointSlices from the
    /// multus EndpointSlice controller) inside the network namespace of
    /// each pod on this node attached to their network.
    #[arg(long)]
    pub multus: bool,

    /// The IP family to serve: ipv4 or ipv6. Without it (or
    /// --ip-families), `run` serves both where the node has IPv6 enabled,
    /// as kube-proxy does, and IPv4 alone where not; the other commands
    /// serve IPv4.
    #[arg(long)]
    pub ip_family: Option<IpFamily>,

    /// The pod network(s), comma-separated: cluster-IP traffic from outside
    /// them is masqueraded, and pods reaching an external address of an
    /// externalTrafficPolicy: Local service use all endpoints.
    #[arg(long, value_delimiter = ',', value_name = "CIDR", value_parser = parse_cidr)]
    pub cluster_cidr: Vec<ipnet::IpNet>,

    /// How traffic from this node's pods is told from other traffic (which
    /// is masqueraded on its way to a cluster IP): ClusterCIDR (source in
    /// --cluster-cidr), NodeCIDR (source in this Node's spec.podCIDRs,
    /// followed as it changes), BridgeInterface (arriving on
    /// --pod-bridge-interface) or InterfaceNamePrefix (arriving on an
    /// interface named --pod-interface-name-prefix...).
    #[arg(long, value_enum, default_value = "ClusterCIDR", value_name = "MODE")]
    pub detect_local_mode: DetectLocalMode,

    /// The bridge this node's pods are on (--detect-local-mode
    /// BridgeInterface).
    #[arg(long, value_name = "NAME", value_parser = parse_interface)]
    pub pod_bridge_interface: Option<String>,

    /// The start of the names of this node's pods' interfaces, e.g. `cali`
    /// or `veth` (--detect-local-mode InterfaceNamePrefix).
    #[arg(long, value_name = "PREFIX", value_parser = parse_interface)]
    pub pod_interface_name_prefix: Option<String>,

    /// Masquerade all traffic sent to cluster IPs.
    #[arg(long)]
    pub masquerade_all: bool,

    /// Where node ports answer, comma-separated: `primary` (this node's
    /// primary addresses, from its Node's status.addresses; every local
    /// address while they are not known), `localhost` (127.0.0.0/8 and
    /// ::1), `all` (every local address), or local addresses in these
    /// CIDRs. Loopback is answered by a TCP relay on 127.0.0.1 or ::1 (see
    /// --feature-gates KubeProxyNFTablesLocalhostNodePorts), never by the
    /// rules.
    #[arg(long, value_delimiter = ',', value_name = "primary|localhost|all|CIDR", default_value = "primary", value_parser = parse_nodeport_address)]
    pub nodeport_addresses: Vec<NodePortAddress>,

    /// The service CIDR(s), comma-separated: traffic to an address in them
    /// that is no service's cluster IP is dropped (kube-proxy reads them
    /// from ServiceCIDR objects).
    #[arg(long, value_delimiter = ',', value_name = "CIDR", value_parser = parse_cidr)]
    pub service_cidr: Vec<ipnet::IpNet>,

    /// This node's topology.kubernetes.io/zone, for topology hints
    /// (default: the label of this node's Node object, when known).
    #[arg(long)]
    pub node_zone: Option<String>,
}

/// `primary`, `localhost`, `all` or a CIDR.
pub fn parse_nodeport_address(s: &str) -> Result<NodePortAddress, String> {
    match s.trim() {
        "primary" => Ok(NodePortAddress::Primary),
        "localhost" => Ok(NodePortAddress::Localhost),
        "all" => Ok(NodePortAddress::All),
        other => parse_cidr(other).map(NodePortAddress::Cidr),
    }
}

pub use node_proxy::feature_gates::{FeatureGate, LOCALHOST_NODEPORTS, parse as parse_feature_gate};

/// kube-proxy's `--detect-local-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DetectLocalMode {
    /// By source address, in --cluster-cidr.
    #[default]
    #[value(name = "ClusterCIDR")]
    ClusterCidr,
    /// By source address, in this Node's spec.podCIDRs.
    #[value(name = "NodeCIDR")]
    NodeCidr,
    /// Arriving on --pod-bridge-interface.
    #[value(name = "BridgeInterface")]
    BridgeInterface,
    /// Arriving on an interface named --pod-interface-name-prefix...
    #[value(name = "InterfaceNamePrefix")]
    InterfaceNamePrefix,
}

/// An interface name (or the start of one) as nft may quote it.
pub fn parse_interface(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.len() < 16 && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an interface name (1-15 letters, digits, - _ . @ :)"
        ))
    }
}

impl ProxyArgs {
    /// The family `--ip-family` names, else IPv4 (what the commands that
    /// do not look at the host serve).
    pub fn family(&self) -> IpFamily {
        self.ip_family.unwrap_or(IpFamily::V4)
    }

    /// Whether node ports answer on this node's primary addresses.
    pub fn nodeport_primary(&self) -> bool {
        self.nodeport_addresses.contains(&NodePortAddress::Primary)
    }

    /// Whether `--nodeport-addresses` names `family`'s loopback address
    /// (`localhost`, 127.0.0.1/32, ::1/128, ...): where localhost node ports
    /// are answered, with their feature gate on.
    pub fn nodeport_names_loopback(&self, family: IpFamily) -> bool {
        self.nodeport_addresses.iter().any(|a| a.names_loopback(family))
    }

    /// What is wrong with the local-traffic and node-port flags together.
    pub fn detect_local_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        match self.detect_local_mode {
            DetectLocalMode::BridgeInterface if self.pod_bridge_interface.is_none() => {
                problems.push("--detect-local-mode BridgeInterface needs --pod-bridge-interface".into());
            }
            DetectLocalMode::InterfaceNamePrefix if self.pod_interface_name_prefix.is_none() => {
                problems.push("--detect-local-mode InterfaceNamePrefix needs --pod-interface-name-prefix".into());
            }
            _ => {}
        }
        problems
    }

    /// How the dataplane tells this node's pods from the rest; NodeCIDR
    /// starts with no ranges (the Node's come later).
    pub fn local_detector(&self) -> nft_dataplane::LocalDetector {
        use nft_dataplane::LocalDetector;
        match self.detect_local_mode {
            DetectLocalMode::ClusterCidr => LocalDetector::ClusterCidr,
            DetectLocalMode::NodeCidr => LocalDetector::NodeCidr(Vec::new()),
            DetectLocalMode::BridgeInterface => {
                LocalDetector::BridgeInterface(self.pod_bridge_interface.clone().unwrap_or_default())
            }
            DetectLocalMode::InterfaceNamePrefix => {
                LocalDetector::InterfaceNamePrefix(self.pod_interface_name_prefix.clone().unwrap_or_default())
            }
        }
    }

    /// The flags' defaults, for a proxy on `node` (for code that builds
    /// them without a command line: tests, tools). The defaults are clap's,
    /// so they cannot drift from the command line's.
    pub fn for_node(node: &str) -> Self {
        use clap::FromArgMatches;
        let parsed = Self::augment_args(clap::Command::new("proxyd"))
            .try_get_matches_from(["proxyd"])
            .and_then(|m| Self::from_arg_matches(&m));
        let mut args = parsed.unwrap_or_else(|e| unreachable!("the flags' defaults parse: {e}"));
        args.hostname_override = Some(node.into());
        args
    }
}

/// `proxyd render`.
#[derive(Args, Debug)]
pub struct RenderArgs {
    /// Where the objects come from (--manifests is the usual one here).
    #[command(flatten)]
    pub source: SourceArgs,

    /// How this node proxies.
    #[command(flatten)]
    pub proxy: ProxyArgs,

    /// Print only the nft ruleset, not the services table.
    #[arg(long)]
    pub nft_only: bool,

    /// In the services table, list every endpoint, external address and
    /// source range (by default a long list shows its first
    /// eight and how many there are).
    #[arg(long)]
    pub all_endpoints: bool,
}

/// `proxyd explain`.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The service: NAMESPACE/NAME, optionally :PORT (a port name or
    /// number).
    pub service: String,

    /// Where the objects come from.
    #[command(flatten)]
    pub source: SourceArgs,

    /// How this node proxies.
    #[command(flatten)]
    pub proxy: ProxyArgs,
}

/// `proxyd run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Where the objects come from.
    #[command(flatten)]
    pub source: SourceArgs,

    /// How this node proxies.
    #[command(flatten)]
    pub proxy: ProxyArgs,

    /// The shortest time between two syncs, e.g. 1s or 500ms; 0 syncs on
    /// every change. Unset, the next sync may start once four times what
    /// the last one took has passed (at least 10 ms), and under sustained
    /// churn one per 30 ms on average.
    #[arg(long, value_parser = parse_duration)]
    pub min_sync_period: Option<std::time::Duration>,

    /// The longest time between two syncs (re-asserting the state even
    /// when nothing changed).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub sync_period: std::time::Duration,

    /// Objects per page of the initial lists.
    #[arg(long, default_value_t = 500)]
    pub list_page_size: u32,

    /// Relist all Services and EndpointSlices this often even when the
    /// watches are healthy, e.g. 15m; 0 never does.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub config_sync_period: std::time::Duration,

    /// Do not touch nftables: write each sync's nft script to standard
    /// output (or to --dry-run-dir).
    #[arg(long)]
    pub dry_run: bool,

    /// Write sync-000001.nft, sync-000002.nft, … here instead of applying
    /// them (implies --dry-run).
    #[arg(long, value_name = "DIR")]
    pub dry_run_dir: Option<PathBuf>,

    /// Apply the rules (and delete conntrack entries) inside this named
    /// network namespace (`ip netns exec NAME nft`).
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,

    /// Multus mode: where pods' network namespaces are found.
    #[command(flatten)]
    pub pods: PodNetnsArgs,

    /// The families to serve, e.g. `ipv4,ipv6` for dual-stack: one engine
    /// and one table per family, sharing the watches (default: --ip-family,
    /// else both where the node has IPv6 enabled, else IPv4).
    #[arg(long, value_delimiter = ',', value_name = "FAMILIES")]
    pub ip_families: Vec<IpFamily>,

    /// kube-proxy's node IP override: an address other than 0.0.0.0 or ::
    /// makes its family the primary one (which orders the families and
    /// words the start-up checks); otherwise the Node's first address does.
    #[arg(long, default_value = "0.0.0.0", value_name = "IP")]
    pub bind_address: std::net::IpAddr,

    /// Where to serve /healthz and /livez (ADDRESS:PORT); empty disables.
    #[arg(long, default_value = "0.0.0.0:10256", value_parser = parse_bind_address, value_name = "ADDRESS:PORT")]
    pub healthz_bind_address: BindAddress,

    /// Where to serve /metrics (ADDRESS:PORT); empty disables.
    #[arg(long, default_value = "127.0.0.1:10249", value_parser = parse_bind_address, value_name = "ADDRESS:PORT")]
    pub metrics_bind_address: BindAddress,

    /// Who writes chains, rules and set declarations: `netlink` (proxyd
    /// itself, as `nft` would send them: no `nft` process) or `nft` (the
    /// fallback: `nft -f -` for every transaction with more than elements).
    #[arg(long, default_value = "netlink", value_parser = parse_nft_writer, value_name = "netlink|nft")]
    pub nft_writer: linux_dataplane::NftWriter,

    /// Do not delete stale UDP conntrack entries after syncs (for hosts
    /// where proxyd may not use netlink conntrack; stale entries then live
    /// until they time out).
    #[arg(long)]
    pub no_conntrack: bool,

    /// Make the startup settings that need more than CAP_NET_ADMIN (the
    /// conntrack settings) and exit, as kube-proxy's `--init-only` does: run
    /// it in a privileged init container, then proxyd with NET_ADMIN only.
    #[arg(long)]
    pub init_only: bool,

    /// kube-proxy's feature gates, comma-separated `NAME=true|false`. The
    /// one that acts here is KubeProxyNFTablesLocalhostNodePorts (beta, on
    /// by default, as in kube-proxy 1.38): a TCP relay on 127.0.0.1 and ::1
    /// for node ports when --nodeport-addresses names loopback (AllBeta
    /// sets it too). kube-proxy's other gates are accepted and have no
    /// effect; a name that is not kube-proxy's is said at the start.
    #[arg(long, value_delimiter = ',', value_name = "NAME=BOOL", value_parser = parse_feature_gate)]
    pub feature_gates: Vec<FeatureGate>,

    /// kube-proxy's conntrack settings, made at startup.
    #[command(flatten)]
    pub conntrack: ConntrackArgs,

    /// kube-proxy's flags for its process and its API client.
    #[command(flatten)]
    pub kube_proxy: KubeProxyArgs,
}

/// kube-proxy's flags for the process and the API client, so that its
/// command lines work.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct KubeProxyArgs {
    /// The proxy mode: only nftables (kube-proxy's iptables, ipvs and
    /// kernelspace modes are not proxyd's).
    #[arg(long, default_value = "nftables", value_parser = parse_proxy_mode, value_name = "MODE")]
    pub proxy_mode: String,

    /// The process's oom_score_adj, in [-1000, 1000] (kube-proxy's -999:
    /// the kernel's OOM killer picks proxyd last).
    #[arg(long, default_value_t = -999, allow_negative_numbers = true, value_parser = parse_oom_score_adj)]
    pub oom_score_adj: i32,

    /// Stop when --healthz-bind-address or --metrics-bind-address cannot be
    /// listened on (without it: say so and run without that server, as
    /// kube-proxy does).
    #[arg(long)]
    pub bind_address_hard_fail: bool,

    /// kube-proxy's API request rate (accepted; proxyd's watches make no
    /// requests but their lists and watches, so it sets no client-side
    /// limit).
    #[arg(long, default_value_t = 5.0)]
    pub kube_api_qps: f32,

    /// kube-proxy's API request burst (accepted; see --kube-api-qps).
    #[arg(long, default_value_t = 10)]
    pub kube_api_burst: u32,

    /// kube-proxy's API content type (accepted; proxyd's client speaks
    /// JSON).
    #[arg(long, default_value = "application/vnd.kubernetes.protobuf")]
    pub kube_api_content_type: String,
}

/// `--oom-score-adj`: a whole number in [-1000, 1000].
pub fn parse_oom_score_adj(s: &str) -> Result<i32, String> {
    match s.trim().parse::<i32>() {
        Ok(n) if (-1000..=1000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number in [-1000, 1000]")),
    }
}

/// `--proxy-mode`: nftables (or empty, kube-proxy's "the default").
pub fn parse_proxy_mode(s: &str) -> Result<String, String> {
    match s {
        "" | "nftables" => Ok("nftables".into()),
        other => Err(format!(
            "{other:?}: proxyd is kube-proxy's nftables mode (iptables, ipvs and kernelspace are not proxyd's)"
        )),
    }
}

impl RunArgs {
    /// Whether a feature gate is on, as kube-proxy 1.38 resolves it (see
    /// [`node_proxy::feature_gates::enabled`]).
    pub fn feature_gate(&self, name: &str) -> bool {
        node_proxy::feature_gates::enabled(&self.feature_gates, name)
    }

    /// Whether `family`'s localhost node ports are answered: the gate on
    /// and `--nodeport-addresses` naming its loopback address.
    pub fn localhost_nodeports(&self, family: IpFamily) -> bool {
        self.feature_gate(LOCALHOST_NODEPORTS) && self.proxy.nodeport_names_loopback(family)
    }

    /// Whether `family`'s loopback address is answered by a relay: its
    /// localhost node ports on, and not a dry run (which opens nothing).
    pub fn relays_localhost(&self, family: IpFamily) -> bool {
        self.localhost_nodeports(family) && !self.is_dry_run()
    }

    /// Whether nothing is applied: --dry-run, or --dry-run-dir.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run || self.dry_run_dir.is_some()
    }

    /// The families the flags name, in order (the first is the primary
    /// one); `None` when they name none, and the host decides
    /// (`run`'s families module).
    pub fn families(&self) -> Option<Vec<IpFamily>> {
        let mut f = if self.ip_families.is_empty() {
            vec![self.proxy.ip_family?]
        } else {
            self.ip_families.clone()
        };
        let mut seen = Vec::new();
        f.retain(|x| {
            let new = !seen.contains(x);
            seen.push(*x);
            new
        });
        Some(f)
    }
}

/// A server address from the command line: `ADDRESS:PORT`, or nothing
/// (the empty string turns the server off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindAddress(pub Option<std::net::SocketAddr>);

/// Parses `ADDRESS:PORT` (`[::]:10256` for IPv6); the empty string is off.
pub fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(BindAddress(None));
    }
    s.parse()
        .map(|a| BindAddress(Some(a)))
        .map_err(|_| format!("{s:?} is not ADDRESS:PORT (e.g. 0.0.0.0:10256 or [::]:10256); empty turns it off"))
}

/// Parses a CIDR, saying what is missing when it is only an address.
pub fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        let example = if ip.is_ipv4() { "/16" } else { "/64" };
        return Err(format!(
            "{s:?} is an address, not a CIDR: the prefix length is missing (e.g. {s}{example})"
        ));
    }
    s.parse()
        .map_err(|_| format!("{s:?} is not a CIDR (ADDRESS/PREFIX-LENGTH, e.g. 10.244.0.0/16 or fd00::/64)"))
}

/// `--nft-writer`: `netlink` or `nft`.
pub fn parse_nft_writer(s: &str) -> Result<linux_dataplane::NftWriter, String> {
    s.parse()
}

/// Parses a duration as kube-proxy's flags take it (Go's syntax): one or
/// more decimal numbers each with a unit, `ns`, `us` (or `µs`), `ms`, `s`,
/// `m`, `h`: `1s`, `500ms`, `1m30s`, `1.5h`. `0` alone is zero; any other
/// number needs a unit.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let text = s.trim();
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if text.is_empty() {
        return Err("a duration is needed (e.g. 1s, 500ms, 1m30s)".into());
    }
    let mut secs = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let n: f64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a duration (e.g. 1s, 500ms, 1m30s)"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("{text:?}: the unit is missing (e.g. {number}s or {number}ms)")),
            other => return Err(format!("{text:?}: unknown unit {other:?} (use ns, us, ms, s, m or h)")),
        };
        secs += n * scale;
        rest = next;
    }
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?}: {e}"))
}

/// `proxyd replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The trace; `-` or nothing reads standard input.
    pub input: Option<PathBuf>,

    /// The node the proxy runs on (decides isLocal); empty: nothing is local.
    #[arg(long, default_value = "")]
    pub node_name: String,

    /// The IP family this proxier serves: ipv4 or ipv6. Endpoints of the
    /// other family are ignored.
    #[arg(long, default_value = "ipv4")]
    pub ip_family: IpFamily,

    /// Print only the last sync's line.
    #[arg(long)]
    pub final_only: bool,

    /// Print one JSON line of timings to stderr at the end.
    #[arg(long)]
    pub timing: bool,

    /// Do not print warnings about skipped objects and fields.
    #[arg(long)]
    pub quiet: bool,
}

/// `--conntrack-*`: kube-proxy's flags, defaults and meanings.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct ConntrackArgs {
    /// Maximum number of NAT connections to track per CPU core (0 leaves
    /// the limit as it is and ignores --conntrack-min).
    #[arg(long, default_value_t = 32768)]
    pub conntrack_max_per_core: u64,

    /// Minimum number of conntrack entries, whatever
    /// --conntrack-max-per-core gives.
    #[arg(long, default_value_t = 131072)]
    pub conntrack_min: u64,

    /// Idle timeout for established TCP connections (0 leaves it as it
    /// is).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub conntrack_tcp_timeout_established: Duration,

    /// NAT timeout for TCP connections in the CLOSE_WAIT state (0 leaves
    /// it as it is).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub conntrack_tcp_timeout_close_wait: Duration,

    /// Mark packets outside the TCP window INVALID no more
    /// (nf_conntrack_tcp_be_liberal=1).
    #[arg(long)]
    pub conntrack_tcp_be_liberal: bool,

    /// Idle timeout for UNREPLIED UDP connections (0 leaves it as it is).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub conntrack_udp_timeout: Duration,

    /// Idle timeout for ASSURED UDP connections (0 leaves it as it is).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub conntrack_udp_timeout_stream: Duration,
}

impl ConntrackArgs {
    /// The settings these flags ask for.
    pub fn settings(&self) -> linux_dataplane::sysctl::Conntrack {
        linux_dataplane::sysctl::Conntrack {
            max_per_core: self.conntrack_max_per_core,
            min: self.conntrack_min,
            tcp_timeout_established: self.conntrack_tcp_timeout_established,
            tcp_timeout_close_wait: self.conntrack_tcp_timeout_close_wait,
            tcp_be_liberal: self.conntrack_tcp_be_liberal,
            udp_timeout: self.conntrack_udp_timeout,
            udp_timeout_stream: self.conntrack_udp_timeout_stream,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn conntrack_flags_default_to_kube_proxys_settings() {
        use clap::Parser;
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            conntrack: super::ConntrackArgs,
        }
        let given = |flags: &[&str]| Only::parse_from(std::iter::once("proxyd").chain(flags.iter().copied()));
        let defaults = given(&[]).conntrack.settings();
        assert_eq!(defaults.wanted(2).len(), 3, "table size and the two TCP timeouts");
        assert_eq!(defaults.max(8), Some(262_144), "32,768 per core");
        assert_eq!(defaults.max(1), Some(131_072), "at least 131,072");
        let liberal = given(&["--conntrack-tcp-be-liberal", "--conntrack-udp-timeout", "30s"]);
        let wanted = liberal.conntrack.settings().wanted(2);
        assert!(wanted.contains(&("nf_conntrack_tcp_be_liberal", 1)), "{wanted:?}");
        assert!(wanted.contains(&("nf_conntrack_udp_timeout", 30)), "{wanted:?}");
    }

    #[test]
    fn durations_parse_like_kube_proxy_flags() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h0m0.5s"), Ok(Duration::from_millis(3_600_500)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        let bare = parse_duration("30").unwrap_err();
        assert!(bare.contains("the unit is missing (e.g. 30s"), "{bare}");
        assert!(parse_duration("1 day").is_err());
        assert!(parse_duration("1d").unwrap_err().contains("unknown unit \"d\""));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn proxy_args_for_code_take_the_command_lines_defaults() {
        use clap::Parser;
        let parsed =
            match crate::settings::flags::Cli::parse_from(["proxyd", "render", "--hostname-override", "n"]).command {
                crate::settings::flags::Command::Render(r) => r.proxy,
                _ => unreachable!("parsed render"),
            };
        let built = super::ProxyArgs::for_node("n");
        assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    }

    #[test]
    fn addresses_and_cidrs_say_what_is_wrong() {
        use super::{BindAddress, parse_bind_address, parse_cidr};
        assert_eq!(parse_bind_address(""), Ok(BindAddress(None)));
        assert_eq!(
            parse_bind_address("[::]:10256"),
            Ok(BindAddress(Some("[::]:10256".parse().unwrap())))
        );
        assert!(
            parse_bind_address("localhost")
                .unwrap_err()
                .contains("is not ADDRESS:PORT")
        );
        assert_eq!(parse_cidr("10.244.0.0/16"), Ok("10.244.0.0/16".parse().unwrap()));
        let e = parse_cidr("10.244.0.0").unwrap_err();
        assert!(e.contains("the prefix length is missing (e.g. 10.244.0.0/16)"), "{e}");
        assert!(parse_cidr("fd00::").unwrap_err().contains("fd00::/64"));
        assert!(parse_cidr("nonsense").unwrap_err().contains("is not a CIDR"));
    }

    #[test]
    fn feature_gates_parse_as_kube_proxy_takes_them_and_the_last_wins() {
        use clap::Parser;
        let run = |extra: &[&str]| -> super::RunArgs {
            let mut all = vec!["proxyd", "run", "--manifests", "x", "--hostname-override", "n"];
            all.extend_from_slice(extra);
            match super::Cli::try_parse_from(all).unwrap().command {
                super::Command::Run(r) => *r,
                _ => unreachable!(),
            }
        };
        let gate = super::LOCALHOST_NODEPORTS;
        assert!(run(&[]).feature_gate(gate), "on by default, as in kube-proxy 1.38");
        let off = run(&[
            "--feature-gates",
            "KubeProxyNFTablesLocalhostNodePorts=false,NFTablesNetlink=true",
        ]);
        assert!(!off.feature_gate(gate));
        let again = run(&[
            "--feature-gates",
            "KubeProxyNFTablesLocalhostNodePorts=false",
            "--feature-gates",
            "KubeProxyNFTablesLocalhostNodePorts=True",
        ]);
        assert!(again.feature_gate(gate), "the last setting wins");
        assert!(super::parse_feature_gate("KubeProxyNFTablesLocalhostNodePorts=yes").is_err());
        assert!(super::parse_feature_gate("=true").is_err());
        let both = run(&["--nodeport-addresses", "primary,localhost"]);
        assert!(both.localhost_nodeports(slice_model::IpFamily::V4));
        let gated = run(&[
            "--nodeport-addresses",
            "primary,localhost",
            "--feature-gates",
            "KubeProxyNFTablesLocalhostNodePorts=false",
        ]);
        assert!(!gated.localhost_nodeports(slice_model::IpFamily::V6));
    }
}
