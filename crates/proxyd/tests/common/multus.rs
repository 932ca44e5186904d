//! What the multus root tests share: the servers and clients they run in
//! pod namespaces, and the cluster they describe to proxyd (a service on
//! the secondary network `macvlan1`, the multus controller's slice, the
//! default controller's slice that must never be used, and pods).

use std::collections::BTreeMap;

/// Answers TCP and UDP on port 8080 with `NAME PEER-ADDRESS`.
pub const SERVER: &str = r#"
import socket, sys, threading
name = sys.argv[1]
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 8080)); s.listen(128)
    while True:
        c, peer = s.accept()
        try: c.sendall(f"{name} {peer[0]}".encode())
        finally: c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 8080))
    while True:
        _, peer = s.recvfrom(64)
        s.sendto(f"{name} {peer[0]}".encode(), peer)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
tcp()
"#;

/// N requests; one line per answer, or `error: …`.
pub const CLIENT: &str = r#"
import socket, sys
proto, host, port, n, src_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for _ in range(n):
    try:
        if proto == "tcp":
            c = socket.socket(); c.settimeout(2)
            c.connect((host, port)); print(c.recv(64).decode()); c.close()
        else:
            c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.settimeout(1)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if src_port: c.bind(("", src_port))
            c.sendto(b"q", (host, port)); print(c.recv(64).decode()); c.close()
    except OSError as e:
        print("error:", e.__class__.__name__)
"#;

/// The service's cluster IP.
pub const CLUSTER_IP: &str = "10.96.77.10";

/// How many answers came from each server.
pub fn names(answers: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for a in answers {
        *m.entry(a.split(' ').next().unwrap_or_default().to_owned()).or_default() += 1;
    }
    m
}

/// The secondary network's address of each server.
pub fn server_ip(name: &str) -> &'static str {
    if name == "server1" {
        "192.168.77.11"
    } else {
        "192.168.77.12"
    }
}

/// A multus network-status annotation: the cluster network on `eth0` and,
/// with an address, `macvlan1` on `net1`.
pub fn network_status(ns: &str, net1: Option<&str>) -> String {
    let primary = r#"{"name":"cbr0","interface":"eth0","ips":["10.88.0.2"],"default":true}"#;
    match net1 {
        Some(ip) => format!(r#"[{primary},{{"name":"{ns}/macvlan1","interface":"net1","ips":["{ip}"]}}]"#),
        None => format!("[{primary}]"),
    }
}

/// A running pod on node-1 with this network-status (and uid, if any).
pub fn pod_yaml(ns: &str, name: &str, uid: Option<&str>, status: &str) -> String {
    let uid = uid.map(|u| format!("  uid: {u}\n")).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n{uid}  annotations:\n    \
         k8s.v1.cni.cncf.io/network-status: '{status}'\nspec: {{nodeName: node-1}}\nstatus: {{phase: Running}}\n"
    )
}

/// The service `web` on `macvlan1` (TCP 80 and UDP 53 to 8080), the
/// multus controller's slice with `ready` per server, the default
/// controller's slice (a primary address: never to be used), then `pods`.
pub fn cluster_yaml(ns: &str, servers: &[(&str, bool)], pods: &[String]) -> String {
    let mut eps = String::new();
    for (name, ready) in servers {
        let ip = server_ip(name);
        eps.push_str(&format!(
            "- addresses: [{ip}]\n  nodeName: node-2\n  conditions: {{ready: {ready}}}\n"
        ));
    }
    let eps = if eps.is_empty() {
        " []\n".to_owned()
    } else {
        format!("\n{eps}")
    };
    let mut text = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\n  labels: \
         {{service.kubernetes.io/service-proxy-name: multus-proxy}}\n  annotations: \
         {{k8s.v1.cni.cncf.io/service-network: macvlan1}}\nspec:\n  clusterIP: {CLUSTER_IP}\n  ports:\n  \
         - {{name: http, port: 80, protocol: TCP}}\n  - {{name: dns, port: 53, protocol: UDP}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-multus\n  namespace: {ns}\n  \
         labels: {{kubernetes.io/service-name: web, service.kubernetes.io/service-proxy-name: multus-proxy, \
         endpointslice.kubernetes.io/managed-by: multus-endpointslice-controller.npwg.k8s.io}}\naddressType: IPv4\n\
         ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 8080, protocol: UDP}}]\nendpoints:{eps}---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-default\n  namespace: {ns}\n  \
         labels: {{kubernetes.io/service-name: web, service.kubernetes.io/service-proxy-name: multus-proxy, \
         endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io}}\naddressType: IPv4\n\
         ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 8080, protocol: UDP}}]\nendpoints:\n\
         - addresses: [10.88.0.11]\n  nodeName: node-2\n"
    );
    for p in pods {
        text.push_str("---\n");
        text.push_str(p);
    }
    text
}

/// Writes `text` as `dir/cluster.yaml` whole, then renamed: proxyd never
/// reads half a file.
pub fn write_manifests(dir: &std::path::Path, text: &str) {
    let tmp = dir.join(".cluster.tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
    std::fs::rename(&tmp, dir.join("cluster.yaml")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
}

/// The value of a `/metrics` sample line starting with `name`, from
/// 127.0.0.1:`port`.
pub fn metric(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
