//! `proxyd render` and `proxyd explain` (the real binary) over the bundled
//! example cluster.

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::process::Command;

fn proxyd(args: &[&str]) -> (bool, String, String) {
    let cluster = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/cluster");
    run_on(
        args,
        &[
            "--manifests",
            cluster,
            "--hostname-override",
            "node-1",
            "--cluster-cidr",
            "10.244.0.0/16",
        ],
    )
}

/// Runs `proxyd ARGS SOURCE`: success, stdout, stderr.
fn run_on(args: &[&str], source: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(args)
        .args(source)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn render_matches_the_golden_ruleset_and_table() {
    let (ok, out, err) = proxyd(&["render"]);
    assert!(ok, "{err}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden-nft/example-cluster.txt");
    if std::env::var_os("PROXYD_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &out).unwrap();
    }
    assert_eq!(
        out,
        std::fs::read_to_string(path).unwrap(),
        "PROXYD_UPDATE_GOLDEN=1 rewrites it"
    );
    // The table says what each kind of service does on node-1 (zone-a).
    let row = |svc: &str| out.lines().find(|l| l.starts_with(svc)).unwrap().to_owned();
    assert!(row("shop/catalog:http").contains("zone zone-a"));
    assert!(!row("shop/catalog:http").contains("10.244.2.42"), "hinted for zone-b");
    assert!(row("shop/checkout:http").contains("terminating fallback"));
    assert!(row("shop/ingress:https").contains("external Local"));
    assert!(!out.contains("orders-db"), "headless: not proxied");
    assert!(row("shop/cache:redis").contains("same node"), "node hints");
    // Without --ip-family, the dual-stack frontend's IPv6 side follows in
    // the IPv6 table, with its IPv6 endpoint.
    assert!(out.contains("table ip6 proxyd {"), "both families");
    assert!(row("shop/frontend:http").contains("10.96.0.10:80"));
    let six = out.lines().rfind(|l| l.starts_with("shop/frontend:http")).unwrap();
    assert!(
        six.contains("[fd00:96::10]:80") && six.contains("[fd00:10:244:1::11]:8080*"),
        "{six}"
    );
    let (ok, one, err) = proxyd(&["render", "--ip-family", "ipv4"]);
    assert!(ok, "{err}");
    assert!(!one.contains("table ip6"), "one family when asked for one");
}

#[test]
fn explain_gives_a_reason_for_every_endpoint() {
    let (ok, out, err) = proxyd(&["explain", "shop/frontend:http"]);
    assert!(ok, "{err}");
    assert!(out.contains("10.244.2.13:8080: not ready, node node-2"), "{out}");
    assert!(
        out.contains("to the cluster IP: not used: not ready and not serving"),
        "{out}"
    );
    assert!(
        out.contains("frontend-v6-2kd9s (IPv6, 1 endpoints): other IP family"),
        "{out}"
    );
    assert!(
        out.contains(
            "10.96.0.10:80/tcp: 2 slot(s), numgen random mod 2, 1/2 each -> 10.244.1.11:8080, 10.244.2.12:8080"
        ),
        "{out}"
    );

    let (ok, out, _) = proxyd(&["explain", "shop/catalog"]);
    assert!(ok);
    assert!(
        out.contains("not used: hinted for zone(s) [\"zone-b\"], this node is in zone-a"),
        "{out}"
    );

    let (ok, out, _) = proxyd(&["explain", "shop/checkout"]);
    assert!(ok);
    assert!(out.contains("USED (terminating fallback"), "{out}");

    let (ok, out, _) = proxyd(&["explain", "shop/ingress"]);
    assert!(ok);
    assert!(out.contains("chain fw-shop/ingress/tcp/443:"), "{out}");
    assert!(
        out.contains("from outside:      not used: not on this node (Local policy)"),
        "{out}"
    );

    // The node comes from the model: deprecatedTopology when there is no
    // nodeName; only the first address is an endpoint.
    let (ok, out, _) = proxyd(&["explain", "shop/legacy"]);
    assert!(ok);
    assert!(
        out.contains("10.244.1.91:8080: ready, node node-1 (this node)\n        to the cluster IP: USED\n        from outside:      USED"),
        "{out}"
    );
    assert!(!out.contains("10.244.1.99"), "{out}");

    let (ok, out, _) = proxyd(&["explain", "shop/cache"]);
    assert!(ok);
    assert!(
        out.contains("topology: node hints used: only endpoints hinted for node node-1"),
        "{out}"
    );
    assert!(out.contains("result: to the cluster IP -> 10.244.1.81:6379\n"), "{out}");

    let (ok, out, _) = proxyd(&["explain", "shop/orders-db"]);
    assert!(ok && out.contains("not programmed: it is headless"), "{out}");

    let (ok, _, err) = proxyd(&["explain", "shop/nope"]);
    assert!(
        !ok && err.contains("no service shop/nope; services in namespace shop: api, cache, cart"),
        "{err}"
    );
    let (ok, _, err) = proxyd(&["explain", "nonsense"]);
    assert!(!ok && err.contains("expected NAMESPACE/SERVICE"), "{err}");
}

/// Runs `proxyd ARGS --manifests DIR --hostname-override n`, where DIR
/// holds only `text` (as `svc.yaml`): exit code, stdout, stderr.
fn on_one_file(tag: &str, text: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir().join(format!("proxyd-one-file-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("svc.yaml"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
        .args(args)
        .args(["--hostname-override", "n", "--manifests"])
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// A service labelled for another proxy: explain says so, with the
/// selector this proxy uses (the same one it lists and watches with).
#[test]
fn explain_names_the_selector_that_leaves_a_service_out() {
    let other = "kind: Service\nmetadata: {name: other, namespace: ns, labels: {service.kubernetes.io/service-proxy-name: cilium}}\nspec: {clusterIP: 10.96.0.7, ports: [{port: 80}]}\n";
    let (_, out, _) = on_one_file("explain-other", other, &["explain", "ns/other"]);
    assert!(
        out.contains(
            "not programmed: its labels do not match this proxy's selector !service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
        ),
        "{out}"
    );
    let (code, out, err) = on_one_file(
        "explain-named",
        other,
        &["explain", "ns/other", "--service-proxy-name", "cilium"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !out.contains("not programmed") && out.contains("result: to the cluster IP -> nothing"),
        "the named proxy takes it (no endpoints yet):\n{out}"
    );
}

/// Two services claim one external IP and port: the table gives it to
/// one of them, and explain says so of the other instead of showing the
/// element as its own.
#[test]
fn explain_shows_a_frontend_another_service_holds_as_held_by_it() {
    let mut text = String::new();
    for (name, ip, ep) in [("a", "10.96.0.21", "10.244.0.21"), ("b", "10.96.0.22", "10.244.0.22")] {
        text.push_str(&format!(
            "---\nkind: Service\nmetadata: {{name: {name}, namespace: ns}}\n\
             spec: {{clusterIP: {ip}, externalIPs: [192.0.2.9], ports: [{{name: http, port: 80}}]}}\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: {name}-1, namespace: ns, labels: {{kubernetes.io/service-name: {name}}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\n\
             endpoints: [{{addresses: [{ep}], conditions: {{ready: true}}}}]\n"
        ));
    }
    let explain = |svc: &str| {
        let (code, out, err) = on_one_file(&format!("shared-{svc}"), &text, &["explain", &format!("ns/{svc}")]);
        assert_eq!(code, Some(0), "{err}");
        out
    };
    // The table's part of each explanation.
    let table = |out: String| {
        out.split_once("  nftables (")
            .map(|(_, t)| t.to_owned())
            .unwrap_or_default()
    };
    let (a, b) = (table(explain("a")), table(explain("b")));
    let held = |out: &str, other: &str| {
        out.lines()
            .any(|l| l.contains("192.0.2.9") && l.contains(&format!("service ns/{other} holds it")))
    };
    assert!(held(&a, "b") != held(&b, "a"), "exactly one waits:\n{a}\n{b}");
    let (holder, waiter) = if held(&b, "a") { (&a, &b) } else { (&b, &a) };
    assert!(
        holder
            .lines()
            .any(|l| l.contains("192.0.2.9") && !l.contains("holds it")),
        "the holder shows its element:\n{holder}"
    );
    assert!(
        !waiter
            .lines()
            .any(|l| l.contains("192.0.2.9") && !l.contains("holds it")),
        "the other shows none of its own for that frontend:\n{waiter}"
    );
}

/// `render` on a directory holding only `text`: exit code and stderr.
fn render_broken(tag: &str, text: &str) -> (Option<i32>, String) {
    let (code, _, err) = on_one_file(tag, text, &["render"]);
    (code, err)
}

#[test]
fn bad_manifests_fail_with_the_file_and_field() {
    let (code, err) = render_broken(
        "field",
        "kind: Service\nmetadata: {name: web}\nspec: {ports: [{port: eighty}]}\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("svc.yaml: document 1 (Service default/web): spec.ports[0].port: invalid type"),
        "{err}"
    );

    // A syntax error: one line, the position, no parser excerpt.
    let (code, err) = render_broken(
        "syntax",
        "kind: Service\nmetadata: {name: a, namespace: x\nspec:\n  ports: [{port: 80}]\n",
    );
    assert_eq!(code, Some(1));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("svc.yaml: not valid YAML or JSON: line 3 column 5: while parsing a flow mapping"),
        "{err}"
    );

    // No name: the file and the document, not a Rust type.
    let (code, err) = render_broken(
        "name",
        "kind: Service\nmetadata: {name: ok}\n---\nkind: Service\nmetadata: {namespace: x}\nspec: {clusterIP: 10.96.0.1}\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("svc.yaml: document 2 (Service (no name)): metadata.name is missing"),
        "{err}"
    );
    assert!(!err.contains("k8s_openapi"), "{err}");
}

fn multus(args: &[&str]) -> (bool, String, String) {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/multus");
    run_on(
        args,
        &["--multus", "--manifests", example, "--hostname-override", "node-1"],
    )
}

#[test]
fn multus_render_programs_the_attached_pod_only_and_explain_says_why() {
    let (ok, out, err) = multus(&["render"]);
    assert!(ok, "{err}");
    // The attached pod gets a table and a route through its net1.
    let client = out
        .split("# pod ")
        .find(|s| s.starts_with("apps/client:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        client.contains("# route: 10.96.100.53/32 dev net1 src 192.168.100.5 proto 201"),
        "{client}"
    );
    assert!(
        !client.contains("10.244.2.11"),
        "the default controller's slice is ignored"
    );
    for (pod, why) in [
        ("apps/agent", "nothing (host network)"),
        ("apps/web", "nothing (not attached to any service's network)"),
        ("apps/starting", "nothing (not running)"),
    ] {
        assert!(out.contains(&format!("# pod {pod}: {why}")), "{pod}: {out}");
    }
    assert!(!out.contains("apps/elsewhere"), "another node's pod");

    let (ok, out, err) = multus(&["explain", "apps/dns"]);
    assert!(ok, "{err}");
    assert!(out.contains("multus: network apps/macvlan1"), "{out}");
    assert!(
        out.contains("apps/client: gets it: 10.96.100.53 via net1 (source 192.168.100.5)"),
        "{out}"
    );
    assert!(
        out.contains("apps/web: not used: not attached to apps/macvlan1"),
        "{out}"
    );
    assert!(out.contains("apps/starting: not used: not running"), "{out}");
}

/// The largest objects the API server accepts, as manifests: a
/// LoadBalancer with thousands of source ranges and external IPs, and a
/// sticky service of 10,000 endpoints (ten slices of 1,000, the most a
/// slice holds) with the longest names, beside an ordinary one.
fn largest_objects(dir: &std::path::Path) {
    let ns = "n".repeat(63);
    let name = "s".repeat(63);
    let ranges: Vec<String> = (0..3_000u32)
        .map(|i| format!("\"{}.{}.0.0/24\"", 11 + i / 250, i % 250))
        .collect();
    let ext: Vec<String> = (0..1_000u32)
        .map(|i| format!("\"192.0.{}.{}\"", i / 250, i % 250 + 1))
        .collect();
    let service = format!(
        "{{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {{\"namespace\": \"{ns}\", \"name\": \"{name}\"}},
          \"spec\": {{\"type\": \"LoadBalancer\", \"clusterIP\": \"10.96.0.40\", \"sessionAffinity\": \"ClientIP\",
                    \"externalIPs\": [{}], \"loadBalancerSourceRanges\": [{}],
                    \"ports\": [{{\"name\": \"{}\", \"protocol\": \"TCP\", \"port\": 80, \"nodePort\": 30080}}]}}}}\n",
        ext.join(","),
        ranges.join(","),
        "p".repeat(15)
    );
    std::fs::write(dir.join("service.json"), service).unwrap();
    for s in 0..10u32 {
        let eps: Vec<String> = (0..1_000u32)
            .map(|i| {
                format!(
                    "{{\"addresses\": [\"10.1.{}.{}\"]}}",
                    (s * 1000 + i) / 250,
                    (s * 1000 + i) % 250 + 1
                )
            })
            .collect();
        let slice = format!(
            "{{\"apiVersion\": \"discovery.k8s.io/v1\", \"kind\": \"EndpointSlice\",
              \"metadata\": {{\"namespace\": \"{ns}\", \"name\": \"{name}-{s}\", \"labels\": {{\"kubernetes.io/service-name\": \"{name}\"}}}},
              \"addressType\": \"IPv4\", \"endpoints\": [{}],
              \"ports\": [{{\"name\": \"{}\", \"protocol\": \"TCP\", \"port\": 8080}}]}}\n",
            eps.join(","),
            "p".repeat(15)
        );
        std::fs::write(dir.join(format!("slice-{s}.json")), slice).unwrap();
    }
}

/// `render` of the largest objects: no panic, every line of the services
/// table bounded (a long list shows its first eight and its count), and
/// every endpoint with `--all-endpoints`.
#[test]
fn render_of_the_largest_objects_abbreviates_and_can_show_all() {
    let dir = std::env::temp_dir().join(format!("proxyd-render-largest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    largest_objects(&dir);
    let source = ["--manifests", dir.to_str().unwrap(), "--hostname-override", "node-1"];
    let (ok, out, err) = run_on(&["render"], &source);
    assert!(ok, "{err}");
    let table = &out[out.rfind("SERVICE PORT").unwrap()..];
    let row = table.lines().nth(1).unwrap();
    assert!(row.contains("10,000 endpoints (first 8: 10.1.0.1:8080"), "{row}");
    assert!(row.contains("1,000 external IPs (first 8:"), "{row}");
    assert!(row.contains("3,000 source ranges (first 8:"), "{row}");
    assert!(table.lines().all(|l| l.len() < 2_000), "no megabyte lines");
    assert!(out.contains("10.1.39.250"), "the ruleset holds every endpoint");

    let (ok, all, err) = run_on(&["render", "--all-endpoints"], &source);
    assert!(ok, "{err}");
    let table = &all[all.rfind("SERVICE PORT").unwrap()..];
    assert!(table.contains("10.1.39.250:8080") && table.contains("(1/10000 each)"));

    // explain: every endpoint's own line, but no line of megabytes.
    let service = format!("{}/{}", "n".repeat(63), "s".repeat(63));
    let (ok, why, err) = run_on(&["explain", &service], &source);
    assert!(ok, "{err}");
    assert!(why.contains("result: to the cluster IP -> 10,000 endpoints (first 8: 10.1.0.1:8080"));
    let longest = why.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 1_000, "longest line {longest}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A service whose rules the kernel refuses (the writer's test hook): the
/// kernel is asked (as root; the kernel model otherwise), and `explain`
/// says the service is not programmed and why; another service is not
/// affected.
#[test]
fn explain_says_a_service_the_kernel_refuses_is_not_programmed_and_why() {
    let cluster = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/cluster");
    let explain = |service: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_proxyd"))
            .args([
                "explain",
                service,
                "--manifests",
                cluster,
                "--hostname-override",
                "node-1",
            ])
            .env("PROXYD_TEST_REFUSE_SERVICE", "shop/frontend")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let out = explain("shop/frontend");
    let line = out
        .lines()
        .find(|l| l.contains("NOT PROGRAMMED"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("the kernel refuses this service's rules") && line.contains("shop/frontend/tcp/80"),
        "names the port: {line}"
    );
    let out = explain("shop/catalog");
    assert!(!out.contains("NOT PROGRAMMED"), "{out}");
}

/// Without `--ip-family`, a dual-stack service is explained for both
/// proxiers (the IPv6 one with its IPv6 cluster IP and endpoints); with
/// it, for that family's alone; an IPv4-only service for IPv4 alone.
#[test]
fn explain_covers_both_families_of_a_dual_stack_service() {
    let (ok, out, err) = proxyd(&["explain", "shop/frontend"]);
    assert!(ok, "{err}");
    assert!(out.contains("ipv4 proxier") && out.contains("ipv6 proxier"), "{out}");
    assert!(
        out.contains("[fd00:96::10]:80/tcp"),
        "the IPv6 cluster IP's rules: {out}"
    );
    let (ok, out, _) = proxyd(&["explain", "shop/frontend", "--ip-family", "ipv4"]);
    assert!(ok && !out.contains("ipv6 proxier"), "{out}");
    let (ok, out, _) = proxyd(&["explain", "shop/api"]);
    assert!(
        ok && out.contains("ipv4 proxier") && !out.contains("ipv6 proxier"),
        "{out}"
    );
}
