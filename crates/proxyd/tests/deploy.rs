//! The deployment manifests (`deploy/`): they parse, grant read-only access
//! to exactly what proxyd reads, run with NET_ADMIN only, probe the right
//! endpoints, and their arguments (with the ConfigMap's config file) are
//! accepted by proxyd's own command line and flag validation.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use proxyd::Command;
use serde_json::Value;

fn deploy(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_multiple(&text).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn check(file: &str) -> proxyd::RunArgs {
    // This node's Node, watched for its zone label and eligibility; the
    // ServiceCIDRs, for the service ranges.
    check_with(
        file,
        &[
            ("", "nodes", &["get", "list", "watch"]),
            ("networking.k8s.io", "servicecidrs", &["list", "watch"]),
        ],
        &["NET_ADMIN", "SYS_RESOURCE"],
    )
}

/// As [`check`], with the resources beyond services and slices the mode
/// reads, and the capabilities it needs.
fn check_with(file: &str, extra: &[(&str, &str, &[&str])], caps: &[&str]) -> proxyd::RunArgs {
    let docs = deploy(file);
    // RBAC: read-only, exactly these resources.
    let role = of_kind(&docs, "ClusterRole")[0];
    let mut granted: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().unwrap() {
        let verbs = strings(&rule["verbs"]);
        assert!(
            verbs.iter().all(|v| ["get", "list", "watch"].contains(&v.as_str())),
            "{file}: write verbs {verbs:?}"
        );
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                granted.entry((g.clone(), r)).or_default().extend(verbs.clone());
            }
        }
    }
    let want: BTreeMap<(String, String), Vec<String>> = [
        (("", "services"), vec!["list", "watch"]),
        (("discovery.k8s.io", "endpointslices"), vec!["list", "watch"]),
    ]
    .into_iter()
    .map(|((g, r), v)| ((g.to_owned(), r.to_owned()), v.into_iter().map(String::from).collect()))
    .chain(extra.iter().map(|(g, r, v)| {
        (
            ((*g).to_owned(), (*r).to_owned()),
            v.iter().map(|x| (*x).to_owned()).collect(),
        )
    }))
    .collect();
    assert_eq!(granted, want, "{file}: exactly what proxyd reads");

    // The binding gives that role to the DaemonSet's service account.
    let sa = of_kind(&docs, "ServiceAccount")[0];
    let binding = of_kind(&docs, "ClusterRoleBinding")[0];
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], sa["metadata"]["namespace"]);
    let ds = of_kind(&docs, "DaemonSet")[0];
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"],
        ds["spec"]["template"]["metadata"]["labels"]
    );

    // Least privilege for the container.
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(strings(&sc["capabilities"]["add"]), caps, "{file}");
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert!(sc.get("privileged").is_none_or(|p| p == false));
    assert!(c["resources"]["requests"]["cpu"].is_string() && c["resources"]["requests"]["memory"].is_string());

    // The command line, with the ConfigMap's file, is one proxyd accepts.
    let mut argv: Vec<OsString> = vec!["proxyd".into()];
    let config_dir = std::env::temp_dir().join(format!("proxyd-deploy-{}-{file}", std::process::id()));
    std::fs::create_dir_all(&config_dir).unwrap();
    for a in strings(&c["args"]) {
        let a = a.replace("$(NODE_NAME)", "node-1");
        let a = match a.strip_prefix("--config=") {
            Some(path) => {
                let cm = of_kind(&docs, "ConfigMap")[0];
                let key = Path::new(path).file_name().unwrap().to_str().unwrap();
                let local = config_dir.join(key);
                std::fs::write(&local, cm["data"][key].as_str().unwrap()).unwrap();
                format!("--config={}", local.display())
            }
            None => a,
        };
        argv.push(a.into());
    }
    assert_eq!(strings(&c["command"]), ["/usr/local/bin/proxyd"]);
    let cli = proxyd::parse_command_line(argv)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .cli;
    let Command::Run(args) = cli.command else {
        panic!("{file}: not `proxyd run`")
    };
    proxyd::validate_run(&args).unwrap_or_else(|p| panic!("{file}: {p:?}"));
    assert_eq!(args.proxy.hostname_override.as_deref(), Some("node-1"));

    // Probes hit the health server proxyd actually serves.
    let port = u64::from(args.healthz_bind_address.0.expect("health server on").port());
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], port);
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], port);
    let _ = std::fs::remove_dir_all(&config_dir);
    *args
}

/// The DaemonSets in kube-proxy's place: an init container (privileged,
/// the same image and settings) makes the conntrack settings and exits, so
/// the proxy itself runs with its capabilities alone and says nothing it
/// could not do.
fn check_init_container(file: &str) {
    let docs = deploy(file);
    let pod = &of_kind(&docs, "DaemonSet")[0]["spec"]["template"]["spec"];
    let (init, main) = (&pod["initContainers"][0], &pod["containers"][0]);
    assert_eq!(init["image"], main["image"], "{file}");
    assert_eq!(init["command"], main["command"], "{file}");
    let args = strings(&init["args"]);
    assert_eq!(args[..2], ["run", "--init-only"], "{file}");
    let config = strings(&main["args"]).into_iter().find(|a| a.starts_with("--config="));
    assert_eq!(args.get(2), config.as_ref(), "{file}: the proxy's own settings");
    assert_eq!(init["securityContext"]["privileged"], true, "{file}: sysctls");
    assert_eq!(init["volumeMounts"], main["volumeMounts"], "{file}");
}

#[test]
fn the_daemonset_is_least_privilege_and_its_flags_are_valid() {
    check_init_container("proxyd.yaml");
    let args = check("proxyd.yaml");
    assert!(args.proxy.service_proxy_name.is_none());
    assert_eq!(args.proxy.cluster_cidr.len(), 1, "from the ConfigMap");
    assert_eq!(args.min_sync_period, None, "syncs paced by their cost");
}

#[test]
fn the_multus_daemonset_selects_its_own_services_and_reaches_pods_namespaces() {
    let args = check_with(
        "proxyd-multus.yaml",
        // Nodes: `explain` and `render` read this node's (topology is not
        // used in pods' tables).
        &[("", "pods", &["list", "watch"]), ("", "nodes", &["get"])],
        &["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE", "SYS_RESOURCE"],
    );
    assert!(args.proxy.multus);
    assert_eq!(args.proxy.service_proxy_name.as_deref(), Some("multus-proxy"));
    let docs = deploy("proxyd-multus.yaml");
    let pod = &of_kind(&docs, "DaemonSet")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true, "/proc/PID/ns/net of the host's pids");
    let mounts: Vec<String> = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap().to_owned())
        .collect();
    let endpoint_dirs = multus_dataplane::cri::DEFAULT_ENDPOINTS.map(|e| {
        multus_dataplane::cri::socket_path(e)
            .unwrap()
            .parent()
            .unwrap()
            .display()
            .to_string()
    });
    for dir in endpoint_dirs.iter().map(String::as_str).chain(["/var/run/netns"]) {
        assert!(mounts.iter().any(|m| m == dir), "{dir} mounted: {mounts:?}");
    }
}

#[test]
fn the_image_carries_nft_and_iptables_and_the_binary_where_the_daemonset_runs_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/Containerfile");
    let text = std::fs::read_to_string(path).unwrap();
    let stages = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert_eq!(stages, 2, "multi-stage: build, then a slim runtime");
    let runtime = &text[text.rfind("FROM ").unwrap()..];
    assert!(
        runtime.contains("nftables") && runtime.contains("iptables"),
        "{runtime}"
    );
    assert!(runtime.contains("/usr/local/bin/proxyd"));
    assert!(!runtime.contains("cargo"), "no toolchain in the runtime stage");
    // A source change does not rebuild every dependency: the registry and
    // target directory are cache mounts.
    let build = &text[..text.rfind("FROM ").unwrap()];
    for mount in ["target=/usr/local/cargo/registry", "target=/src/target"] {
        assert!(
            build.contains(&format!("--mount=type=cache,{mount}")),
            "{mount}: {build}"
        );
    }
    // The build context leaves out build output and history.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in [".containerignore", ".dockerignore"] {
        let ignore = std::fs::read_to_string(root.join(file)).unwrap();
        let lines: Vec<&str> = ignore.lines().map(str::trim).collect();
        assert!(
            lines.contains(&"target/") && lines.contains(&".git/"),
            "{file}: {ignore}"
        );
    }
}

/// The drop-in variant: kube-proxy's ServiceAccount and ConfigMap, and
/// kube-proxy's own arguments; with the ConfigMap kubeadm writes (the
/// test fixture) mounted where the DaemonSet mounts it, the arguments are
/// ones proxyd accepts, the probes hit its health server, and the only RBAC
/// it adds is read-only ServiceCIDRs for kube-proxy's ServiceAccount.
#[test]
fn the_kube_proxy_configmap_variant_takes_kubeadms_files_unchanged() {
    let file = "proxyd-kube-proxy-configmap.yaml";
    check_init_container(file);
    let docs = deploy(file);
    let role = of_kind(&docs, "ClusterRole")[0];
    assert_eq!(role["rules"].as_array().unwrap().len(), 1);
    assert_eq!(strings(&role["rules"][0]["resources"]), ["servicecidrs"]);
    assert_eq!(strings(&role["rules"][0]["verbs"]), ["list", "watch"]);
    let binding = of_kind(&docs, "ClusterRoleBinding")[0];
    assert_eq!(binding["subjects"][0]["name"], "kube-proxy");
    let pod = &of_kind(&docs, "DaemonSet")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kube-proxy");
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "kube-proxy");
    let c = &pod["containers"][0];
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/var/lib/kube-proxy");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeadm-kube-proxy-config.conf");
    let mut argv: Vec<OsString> = vec!["proxyd".into()];
    for a in strings(&c["args"]) {
        let a = a
            .replace("$(NODE_NAME)", "node-1")
            .replace("/var/lib/kube-proxy/config.conf", fixture.to_str().unwrap());
        argv.push(a.into());
    }
    let cli = proxyd::parse_command_line(argv)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .cli;
    let Command::Run(args) = cli.command else {
        panic!("{file}: not `proxyd run`")
    };
    proxyd::validate_run(&args).unwrap_or_else(|p| panic!("{file}: {p:?}"));
    assert_eq!(args.proxy.hostname_override.as_deref(), Some("node-1"));
    assert_eq!(
        args.source.kubeconfig.as_deref(),
        Some(Path::new("/var/lib/kube-proxy/kubeconfig.conf")),
        "the ConfigMap's kubeconfig"
    );
    assert_eq!(args.proxy.cluster_cidr.len(), 1, "kubeadm's clusterCIDR");
    let port = u64::from(args.healthz_bind_address.0.expect("health server on").port());
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], port);
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], port);
}

/// The DaemonSet reaches the API server by a kubeconfig naming its real
/// address with the pod's service account token and CA (as kubeadm's
/// kube-proxy ConfigMap does), never through the `kubernetes` Service
/// that proxyd itself makes reachable; the address left as shipped is a
/// placeholder proxyd refuses, naming what to set.
#[test]
fn the_daemonset_reaches_the_api_server_by_its_real_address() {
    let docs = deploy("proxyd.yaml");
    let cm = of_kind(&docs, "ConfigMap")[0];
    let config: Value = serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config["kubeconfig"], "/etc/proxyd/kubeconfig.conf");
    let text = cm["data"]["kubeconfig.conf"].as_str().unwrap();
    let kubeconfig: Value = serde_saphyr::from_str(text).unwrap();
    let cluster = &kubeconfig["clusters"][0]["cluster"];
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(cluster["certificate-authority"], format!("{sa}/ca.crt"));
    assert_eq!(kubeconfig["users"][0]["user"]["tokenFile"], format!("{sa}/token"));
    let server = cluster["server"].as_str().unwrap();
    assert!(
        server.starts_with("https://") && server.contains(".invalid"),
        "{server}"
    );

    let dir = std::env::temp_dir().join(format!("proxyd-deploy-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig.conf");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(["run", "--hostname-override", "node-1", "--dry-run"])
        .args([
            "--healthz-bind-address",
            "",
            "--metrics-bind-address",
            "",
            "--kubeconfig",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("is a placeholder") && err.contains("kubelet.conf") && err.contains("kubeconfig.conf"),
        "{err}"
    );
}

/// `deploy/proxyd-slices.yaml`: two replicas of `proxyd slices` behind a
/// Lease; RBAC that writes only EndpointSlices (and its own Lease) and
/// reads only what the controller watches; no capability; probes on its
/// /healthz; and its arguments are `proxyd slices`' own.
#[test]
fn the_slice_controller_deployment_is_least_privilege_and_its_flags_are_valid() {
    let docs = deploy("proxyd-slices.yaml");
    let role = of_kind(&docs, "ClusterRole")[0];
    let mut granted: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().unwrap() {
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                granted.insert((g.clone(), r), strings(&rule["verbs"]));
            }
        }
    }
    let read = vec!["list".to_owned(), "watch".to_owned()];
    for r in ["services", "pods", "nodes"] {
        assert_eq!(
            granted.remove(&(String::new(), r.to_owned())),
            Some(read.clone()),
            "{r}"
        );
    }
    let slices = granted
        .remove(&("discovery.k8s.io".to_owned(), "endpointslices".to_owned()))
        .unwrap();
    assert_eq!(slices, ["list", "watch", "create", "update", "delete"]);
    assert!(granted.is_empty(), "nothing else cluster-wide: {granted:?}");
    let lease_role = of_kind(&docs, "Role")[0];
    assert_eq!(lease_role["metadata"]["namespace"], "kube-system");
    for rule in lease_role["rules"].as_array().unwrap() {
        assert_eq!(strings(&rule["resources"]), ["leases"]);
        if !rule["resourceNames"].is_null() {
            assert_eq!(
                strings(&rule["resourceNames"]),
                ["proxyd-slices"],
                "update only its own Lease"
            );
        }
    }
    let deployment = of_kind(&docs, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(strings(&container["securityContext"]["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let mut args: Vec<OsString> = vec!["proxyd".into()];
    args.extend(strings(&container["args"]).into_iter().map(OsString::from));
    let parsed = proxyd::parse_command_line(args).unwrap_or_else(|e| panic!("{e}"));
    let Command::Slices(s) = parsed.cli.command else {
        panic!("not `proxyd slices`")
    };
    assert!(s.leader_elect);
    assert_eq!(s.leader_elect_resource_name, "proxyd-slices");
    assert_eq!(
        s.bind_address.0.map(|a| a.port()),
        container["livenessProbe"]["httpGet"]["port"].as_u64().map(|p| p as u16)
    );
}
