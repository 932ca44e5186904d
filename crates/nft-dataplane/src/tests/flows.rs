//! What packets do: every service kind and policy, checked by tracing
//! packets through the table a full sync writes (kube-proxy's packet-flow
//! expectations, in this crate's objects).

use std::net::SocketAddr;

use slice_model::{IpFamily, Protocol, TrafficPolicy};

use super::support::{forwarded, local, with_protocol};
use super::*;
use crate::tracer::Fate;

/// Every kind of service kube-proxy's overall test programs.
fn overall() -> Engine {
    let mut e = Engine::new(IpFamily::V4);
    let tcp = Protocol::Tcp;
    e.service(&service("ns1", "svc1", "172.30.0.41", 80, tcp)).slice(slice(
        "ns1",
        "svc1",
        tcp,
        80,
        &[Ep::Remote("10.180.0.1")],
    ));
    let mut svc2 = external_local(load_balancer(
        service("ns2", "svc2", "172.30.0.42", 80, tcp),
        3001,
        &["1.2.3.4"],
    ));
    svc2.external_ips = vec!["192.168.99.22".parse().unwrap()];
    e.service(&svc2)
        .slice(slice("ns2", "svc2", tcp, 80, &[Ep::Remote("10.180.0.2")]));
    e.service(&node_port(service("ns3", "svc3", "172.30.0.43", 80, tcp), 3003))
        .slice(slice("ns3", "svc3", tcp, 80, &[Ep::Remote("10.180.0.3")]));
    let mut svc4 = node_port(service("ns4", "svc4", "172.30.0.44", 80, tcp), 3004);
    svc4.external_ips = vec!["192.168.99.33".parse().unwrap()];
    e.service(&svc4).slice(slice(
        "ns4",
        "svc4",
        tcp,
        80,
        &[Ep::Remote("10.180.0.4"), Ep::Local("10.180.0.5")],
    ));
    let mut svc5 = affinity(
        load_balancer(service("ns5", "svc5", "172.30.0.45", 80, tcp), 3002, &["5.6.7.8"]),
        10800,
    );
    svc5.load_balancer_source_ranges = vec!["203.0.113.0/25".parse().unwrap()];
    e.service(&svc5)
        .slice(slice("ns5", "svc5", tcp, 80, &[Ep::Remote("10.180.0.3")]));
    e.service(&service("ns6", "svc6", "172.30.0.46", 80, tcp));
    e.update();
    e
}

#[test]
fn overall_ruleset() {
    super::mirror::in_both_families(|| {
        let k = fresh(&overall(), &config());
        let cases = [
            ("pod to svc1", forwarded(POD, "172.30.0.41", 80), "10.180.0.1:80"),
            (
                "outside the cluster to svc1: masqueraded",
                forwarded(CLIENT, "172.30.0.41", 80),
                "10.180.0.1:80 (masq)",
            ),
            (
                "pod to svc2's cluster IP",
                forwarded(POD, "172.30.0.42", 80),
                "10.180.0.2:80",
            ),
            (
                "pod to svc2's LB IP: no local endpoint, but pods use the cluster's",
                forwarded(POD, "1.2.3.4", 80),
                "10.180.0.2:80",
            ),
            (
                "node to svc2's LB IP: the cluster's endpoints, masqueraded",
                local(NODE_IP, "1.2.3.4", 80),
                "10.180.0.2:80 (masq)",
            ),
            (
                "external to svc2's LB IP: no local endpoint",
                forwarded(CLIENT, "1.2.3.4", 80),
                "DROP",
            ),
            (
                "external to svc2's external IP",
                forwarded(CLIENT, "192.168.99.22", 80),
                "DROP",
            ),
            (
                "pod to svc2's external IP",
                forwarded(POD, "192.168.99.22", 80),
                "10.180.0.2:80",
            ),
            ("external to svc2's node port", forwarded(CLIENT, NODE_IP, 3001), "DROP"),
            (
                "pod to svc2's node port",
                forwarded(POD, NODE_IP, 3001),
                "10.180.0.2:80",
            ),
            (
                "node to svc2's node port",
                local(NODE_IP, NODE_IP, 3001),
                "10.180.0.2:80 (masq)",
            ),
            (
                "external to svc3's node port",
                forwarded(CLIENT, NODE_IP, 3003),
                "10.180.0.3:80 (masq)",
            ),
            (
                "external to svc4's external IP",
                forwarded(CLIENT, "192.168.99.33", 80),
                "10.180.0.4:80, 10.180.0.5:80 (masq)",
            ),
            (
                "allowed external to svc5's LB IP",
                forwarded(CLIENT, "5.6.7.8", 80),
                "10.180.0.3:80 (masq)",
            ),
            (
                "blocked external to svc5's LB IP",
                forwarded(CLIENT_BLOCKED, "5.6.7.8", 80),
                "DROP",
            ),
            ("pod to svc6, no endpoints", forwarded(POD, "172.30.0.46", 80), "REJECT"),
            (
                "node to svc6, no endpoints",
                local(NODE_IP, "172.30.0.46", 80),
                "REJECT",
            ),
            (
                "svc1's cluster IP on a port it does not serve",
                forwarded(POD, "172.30.0.41", 443),
                "REJECT",
            ),
            (
                "node to a port svc1 does not serve",
                local(NODE_IP, "172.30.0.41", 443),
                "REJECT",
            ),
            ("an unallocated cluster IP", forwarded(POD, "172.30.0.47", 80), "DROP"),
            (
                "node to an unallocated cluster IP",
                local(NODE_IP, "172.30.0.47", 80),
                "DROP",
            ),
            (
                "traffic to no service passes untouched",
                forwarded(POD, "10.180.0.9", 80),
                "10.180.0.9:80",
            ),
        ];
        for (case, p, want) in cases {
            expect(&k, case, p, want);
        }
        let local_ep = trace(&k, forwarded("10.180.0.5", "192.168.99.33", 80));
        assert_eq!(
            local_ep.masquerade(),
            Some(true),
            "external traffic is always masqueraded"
        );
    });
}

#[test]
fn cluster_ip_general() {
    super::mirror::in_both_families(|| {
        let mut e = Engine::new(IpFamily::V4);
        let tcp = Protocol::Tcp;
        e.service(&service("ns1", "svc1", "172.30.0.41", 80, tcp)).slice(slice(
            "ns1",
            "svc1",
            tcp,
            80,
            &[Ep::Local("10.180.0.1")],
        ));
        let mut svc2 = service("ns2", "svc2", "172.30.0.42", 80, tcp);
        let port = |name: &str, protocol, port| slice_model::ServicePort {
            name: name.into(),
            protocol,
            port: std::num::NonZeroU16::new(port).unwrap(),
            node_port: None,
            app_protocol: None,
        };
        svc2.ports = vec![
            port("http", tcp, 80),
            port("https", tcp, 443),
            port("dns-udp", Protocol::Udp, 53),
            port("dns-tcp", tcp, 53),
            port("dns-sctp", Protocol::Sctp, 53),
        ];
        e.service(&svc2);
        let mut s = slice_model::EndpointSlice::new("ns2", "svc2-1", "svc2")
            .unwrap()
            .with_port("http", tcp, 80)
            .with_port("https", tcp, 8443)
            .with_port("dns-udp", Protocol::Udp, 53)
            .with_port("dns-tcp", tcp, 5353)
            .with_port("dns-sctp", Protocol::Sctp, 53);
        for (addr, node) in [("10.180.0.1", NODE), ("10.180.2.1", "node2")] {
            s = s.with_endpoint(slice_model::SliceEndpoint::new(addr.parse().unwrap()).on_node(node));
        }
        e.slice(s);
        e.update();
        let k = fresh(&e, &config());
        let pod = "10.180.0.2";
        let cases = [
            ("simple cluster IP", forwarded(pod, "172.30.0.41", 80), "10.180.0.1:80"),
            (
                "hairpin: an endpoint reaching itself is masqueraded",
                forwarded("10.180.0.1", "172.30.0.41", 80),
                "10.180.0.1:80 (masq)",
            ),
            (
                "several endpoints",
                forwarded(pod, "172.30.0.42", 80),
                "10.180.0.1:80, 10.180.2.1:80",
            ),
            (
                "target port",
                forwarded(pod, "172.30.0.42", 443),
                "10.180.0.1:8443, 10.180.2.1:8443",
            ),
            (
                "TCP on a port shared by three protocols",
                forwarded(pod, "172.30.0.42", 53),
                "10.180.0.1:5353, 10.180.2.1:5353",
            ),
            (
                "UDP on it",
                with_protocol(forwarded(pod, "172.30.0.42", 53), Protocol::Udp),
                "10.180.0.1:53, 10.180.2.1:53",
            ),
            (
                "SCTP on it",
                with_protocol(forwarded(pod, "172.30.0.42", 53), Protocol::Sctp),
                "10.180.0.1:53, 10.180.2.1:53",
            ),
            (
                "a TCP-only port does not take UDP",
                with_protocol(forwarded(pod, "172.30.0.42", 80), Protocol::Udp),
                "REJECT",
            ),
            (
                "svc1 does not take svc2's ports",
                forwarded(pod, "172.30.0.41", 443),
                "REJECT",
            ),
            ("an unallocated cluster IP", forwarded(pod, "172.30.0.50", 80), "DROP"),
        ];
        for (case, p, want) in cases {
            expect(&k, case, p, want);
        }
    });
}

#[test]
fn load_balancer_source_ranges() {
    super::mirror::in_both_families(|| {
        let mut e = Engine::new(IpFamily::V4);
        let tcp = Protocol::Tcp;
        let mut lb = load_balancer(
            service("ns1", "svc1", "172.30.0.41", 80, tcp),
            3001,
            &["1.2.3.4", "5.6.7.8"],
        );
        lb.load_balancer_source_ranges = vec!["192.168.0.0/24".parse().unwrap(), "203.0.113.0/25".parse().unwrap()];
        e.service(&lb)
            .slice(slice("ns1", "svc1", tcp, 80, &[Ep::Remote("10.180.0.1")]));
        e.update();
        let k = fresh(&e, &config());
        let ep = "10.180.0.1:80";
        let masq = "10.180.0.1:80 (masq)";
        for lb_ip in ["1.2.3.4", "5.6.7.8"] {
            expect(&k, "accepted external to LB", forwarded(CLIENT, lb_ip, 80), masq);
            expect(
                &k,
                "blocked external to LB",
                forwarded(CLIENT_BLOCKED, lb_ip, 80),
                "DROP",
            );
            expect(&k, "pod to LB, not in the ranges", forwarded(POD, lb_ip, 80), "DROP");
            expect(&k, "node to LB, in the ranges", local(NODE_IP, lb_ip, 80), masq);
        }
        expect(&k, "pod to cluster IP", forwarded(POD, "172.30.0.41", 80), ep);
        expect(&k, "external to node port", forwarded(CLIENT, NODE_IP, 3001), masq);
        expect(
            &k,
            "node ports ignore the source ranges",
            forwarded(CLIENT_BLOCKED, NODE_IP, 3001),
            masq,
        );
    });
}

#[test]
fn node_ports_answer_on_the_nodeport_addresses() {
    for family in [IpFamily::V4, IpFamily::V6] {
        let (svc_ip, ep1, ep2, node_ip, alt_ip, pod, client) = match family {
            IpFamily::V4 => (
                "172.30.0.41",
                "10.180.0.1",
                "10.180.2.1",
                NODE_IP,
                NODE_IP_ALT,
                POD,
                CLIENT,
            ),
            IpFamily::V6 => (
                "fd00:172:30::41",
                "fd00:10:180::1",
                "fd00:10:180::2:1",
                "2001:db8::1",
                "2001:db8:1::2",
                "fd00:10::2",
                "2600:5200::1",
            ),
        };
        let mut e = Engine::new(family);
        e.service(&node_port(service("ns1", "svc1", svc_ip, 80, Protocol::Tcp), 3001))
            .slice(slice(
                "ns1",
                "svc1",
                Protocol::Tcp,
                80,
                &[Ep::Remote(ep1), Ep::Local(ep2)],
            ));
        e.update();
        let both = {
            let mut v = [
                SocketAddr::new(ep1.parse().unwrap(), 80),
                SocketAddr::new(ep2.parse().unwrap(), 80),
            ];
            v.sort();
            format!("{}, {}", v[0], v[1])
        };
        let masq = format!("{both} (masq)");
        let host = super::support::host(&[node_ip, alt_ip]);
        for (nets, alt_answers) in [(vec![], true), (vec!["192.168.0.0/24", "2001:db8::/64"], false)] {
            let mut c = DataplaneConfig::new(family);
            c.cluster_cidrs = vec!["10.0.0.0/8".parse().unwrap(), "fd00:10::/64".parse().unwrap()];
            c.nodeport_addresses = nets.iter().map(|n| n.parse().unwrap()).collect();
            let k = fresh(&e, &c);
            let t = |p| k.trace(&host, p).summary();
            assert_eq!(t(forwarded(pod, svc_ip, 80)), both, "{family:?} pod to cluster IP");
            assert_eq!(
                t(forwarded(client, node_ip, 3001)),
                masq,
                "{family:?} external to node port"
            );
            assert_eq!(t(local(node_ip, node_ip, 3001)), masq, "{family:?} node to node port");
            // Loopback is no node-port address, whatever the flag says.
            let lo = if family == IpFamily::V4 { "127.0.0.1" } else { "::1" };
            assert_eq!(
                t(local(lo, lo, 3001)),
                SocketAddr::new(lo.parse().unwrap(), 3001).to_string(),
                "{family:?}: the node to its loopback node port is not DNATed"
            );
            let alt = t(forwarded(client, alt_ip, 3001));
            if alt_answers {
                assert_eq!(alt, masq, "{family:?}: every local address answers by default");
            } else {
                assert_eq!(
                    alt,
                    SocketAddr::new(alt_ip.parse().unwrap(), 3001).to_string(),
                    "{family:?}: the other address is outside --nodeport-addresses"
                );
            }
        }
    }
}

/// `--nodeport-addresses` naming addresses of one family only (`primary`
/// on a node whose Node has only an IPv4 or only an IPv6 address, or CIDRs
/// of one family): the other family's table answers node ports nowhere,
/// as kube-proxy's; not on every local address.
#[test]
fn a_family_the_nodeport_addresses_leave_out_answers_no_node_port() {
    for (family, svc_ip, ep, node_ip, client, other_family_only) in [
        (
            IpFamily::V6,
            "fd00:172:30::41",
            "fd00:10:180::1",
            "2001:db8::1",
            "2600:5200::1",
            "192.0.2.10/32",
        ),
        (
            IpFamily::V4,
            "172.30.0.41",
            "10.180.0.1",
            NODE_IP,
            CLIENT,
            "2001:db8::1/128",
        ),
    ] {
        let mut e = Engine::new(family);
        e.service(&node_port(service("ns1", "svc1", svc_ip, 80, Protocol::Tcp), 3001))
            .slice(slice("ns1", "svc1", Protocol::Tcp, 80, &[Ep::Remote(ep)]));
        e.update();
        let mut c = DataplaneConfig::new(family);
        c.nodeport_addresses = vec![other_family_only.parse().unwrap()];
        let k = fresh(&e, &c);
        let host = super::support::host(&[node_ip]);
        let t = |p| k.trace(&host, p).summary();
        assert_eq!(
            t(forwarded(client, node_ip, 3001)),
            SocketAddr::new(node_ip.parse().unwrap(), 3001).to_string(),
            "{family:?}: no address of this family is a node-port address"
        );
        assert_eq!(
            t(forwarded(client, svc_ip, 80)),
            format!("{}", SocketAddr::new(ep.parse().unwrap(), 80)),
            "{family:?}: the cluster IP still answers"
        );
    }
}

/// A LoadBalancer service with externalTrafficPolicy Local (LB 1.2.3.4,
/// external IP 192.168.99.11, node port 3001) and these endpoints on port
/// 80, as a full sync writes it.
fn local_lb(eps: &[Ep<'_>]) -> KernelModel {
    fresh(&local_lb_engine(eps), &config())
}

/// The service of [`local_lb`], in an engine.
fn local_lb_engine(eps: &[Ep<'_>]) -> Engine {
    let mut e = Engine::new(IpFamily::V4);
    let tcp = Protocol::Tcp;
    let mut svc = external_local(load_balancer(
        service("ns1", "svc1", "172.30.0.41", 80, tcp),
        3001,
        &["1.2.3.4"],
    ));
    svc.external_ips = vec!["192.168.99.11".parse().unwrap()];
    e.service(&svc).slice(slice("ns1", "svc1", tcp, 80, eps));
    e.update();
    e
}

#[test]
fn external_traffic_policy_local() {
    super::mirror::in_both_families(|| {
        let k = local_lb(&[Ep::Remote("10.180.0.1"), Ep::Local("10.180.2.1")]);
        let all = "10.180.0.1:80, 10.180.2.1:80";
        for dst in ["1.2.3.4", "192.168.99.11"] {
            expect(
                &k,
                "pod to an external address: every endpoint",
                forwarded(POD, dst, 80),
                all,
            );
            expect(
                &k,
                "node to an external address: every endpoint, masqueraded",
                local(NODE_IP, dst, 80),
                "10.180.0.1:80, 10.180.2.1:80 (masq)",
            );
            expect(
                &k,
                "external: the local endpoint, source kept",
                forwarded(CLIENT, dst, 80),
                "10.180.2.1:80",
            );
        }
        expect(
            &k,
            "external to node port",
            forwarded(CLIENT, NODE_IP, 3001),
            "10.180.2.1:80",
        );
        expect(&k, "pod to node port", forwarded(POD, NODE_IP, 3001), all);
        expect(&k, "pod to cluster IP", forwarded(POD, "172.30.0.41", 80), all);
    });
}

#[test]
fn local_policy_without_local_endpoints_still_serves_the_cluster() {
    super::mirror::in_both_families(|| {
        let k = local_lb(&[Ep::Remote("10.180.0.1"), Ep::Remote("10.180.0.2")]);
        let all = "10.180.0.1:80, 10.180.0.2:80";
        let masq = "10.180.0.1:80, 10.180.0.2:80 (masq)";
        for (dst, port) in [("1.2.3.4", 80), ("192.168.99.11", 80), (NODE_IP, 3001)] {
            expect(
                &k,
                "pod: the cluster's endpoints, source kept",
                forwarded(POD, dst, port),
                all,
            );
            expect(
                &k,
                "node: the cluster's endpoints, masqueraded",
                local(NODE_IP, dst, port),
                masq,
            );
            expect(&k, "outside the cluster: dropped", forwarded(CLIENT, dst, port), "DROP");
        }
    });
}

#[test]
fn internal_traffic_policy_local() {
    super::mirror::in_both_families(|| {
        let mut e = Engine::new(IpFamily::V4);
        let tcp = Protocol::Tcp;
        let mut svc = service("ns1", "svc1", "172.30.0.41", 80, tcp);
        svc.internal_traffic_policy = TrafficPolicy::Local;
        e.service(&svc).slice(slice(
            "ns1",
            "svc1",
            tcp,
            80,
            &[Ep::Remote("10.180.0.1"), Ep::Local("10.180.2.1")],
        ));
        let mut none_here = service("ns2", "svc2", "172.30.0.42", 80, tcp);
        none_here.internal_traffic_policy = TrafficPolicy::Local;
        e.service(&none_here)
            .slice(slice("ns2", "svc2", tcp, 80, &[Ep::Remote("10.180.0.3")]));
        e.update();
        let k = fresh(&e, &config());
        expect(
            &k,
            "only the local endpoint",
            forwarded(POD, "172.30.0.41", 80),
            "10.180.2.1:80",
        );
        expect(
            &k,
            "none on this node: dropped",
            forwarded(POD, "172.30.0.42", 80),
            "DROP",
        );
        expect(&k, "from the node too", local(NODE_IP, "172.30.0.42", 80), "DROP");
    });
}

#[test]
fn terminating_endpoints() {
    super::mirror::in_both_families(|| {
        let mut e = Engine::new(IpFamily::V4);
        let tcp = Protocol::Tcp;
        e.service(&service("ns1", "mixed", "172.30.0.41", 80, tcp)).slice(slice(
            "ns1",
            "mixed",
            tcp,
            80,
            &[
                Ep::Remote("10.180.0.1"),
                Ep::Terminating("10.180.0.2"),
                Ep::NotReady("10.180.0.3"),
            ],
        ));
        e.service(&service("ns1", "draining", "172.30.0.42", 80, tcp))
            .slice(slice(
                "ns1",
                "draining",
                tcp,
                80,
                &[Ep::Terminating("10.180.0.4"), Ep::NotReady("10.180.0.5")],
            ));
        e.service(&service("ns1", "down", "172.30.0.43", 80, tcp)).slice(slice(
            "ns1",
            "down",
            tcp,
            80,
            &[Ep::NotReady("10.180.0.6")],
        ));
        e.update();
        let k = fresh(&e, &config());
        expect(
            &k,
            "ready ones only",
            forwarded(POD, "172.30.0.41", 80),
            "10.180.0.1:80",
        );
        expect(
            &k,
            "only terminating: they still serve",
            forwarded(POD, "172.30.0.42", 80),
            "10.180.0.4:80",
        );
        expect(&k, "none serving: reject", forwarded(POD, "172.30.0.43", 80), "REJECT");
    });
}

#[test]
fn masquerade_all_and_no_service_cidr() {
    super::mirror::in_both_families(|| {
        let mut e = Engine::new(IpFamily::V4);
        e.service(&service("ns1", "svc1", "172.30.0.41", 80, Protocol::Tcp))
            .slice(slice("ns1", "svc1", Protocol::Tcp, 80, &[Ep::Remote("10.180.0.1")]));
        e.update();
        let mut c = DataplaneConfig::new(IpFamily::V4);
        c.masquerade_all = true;
        let k = fresh(&e, &c);
        expect(
            &k,
            "pod, masquerade-all",
            forwarded(POD, "172.30.0.41", 80),
            "10.180.0.1:80 (masq)",
        );
        expect(
            &k,
            "without --service-cidr, unallocated addresses are not the proxy's",
            forwarded(POD, "172.30.0.47", 80),
            "172.30.0.47:80",
        );
        expect(
            &k,
            "wrong port still rejected",
            forwarded(POD, "172.30.0.41", 81),
            "REJECT",
        );
    });
}

/// The services whose split is checked: every frontend kind.
fn split_service(n: usize, sticky: bool) -> (Engine, Vec<SocketAddr>) {
    let mut e = Engine::new(IpFamily::V4);
    let mut s = load_balancer(
        service("ns", "web", "172.30.0.10", 80, Protocol::Tcp),
        30080,
        &["1.2.3.4"],
    );
    s.external_ips = vec!["192.168.99.10".parse().unwrap()];
    if sticky {
        s = affinity(s, 60);
    }
    let addrs: Vec<String> = (0..n).map(|i| format!("10.180.{}.{}", i / 200, i % 200 + 1)).collect();
    let eps: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
    e.service(&s).slice(slice("ns", "web", Protocol::Tcp, 8080, &eps));
    e.update();
    let sockets = addrs
        .iter()
        .map(|a| SocketAddr::new(a.parse().unwrap(), 8080))
        .collect();
    (e, sockets)
}

#[track_caller]
fn assert_exact(t: &Trace, want: &[SocketAddr], case: &str) {
    let got = t.endpoints();
    assert_eq!(got.len(), want.len(), "{case}: every endpoint is a candidate: {got:?}");
    let share = 1.0 / want.len() as f64;
    for ep in want {
        let p = got.get(ep).copied().unwrap_or_default();
        assert!((p - share).abs() < 1e-12, "{case}: {ep} gets {p}, not 1/{}", want.len());
    }
    let total: f64 = t.outcomes.iter().map(|(_, p)| p).sum();
    assert!((total - 1.0).abs() < 1e-12, "{case}: probabilities sum to {total}");
}

#[test]
fn every_endpoint_gets_an_equal_share_for_any_count() {
    for n in 1..=64 {
        for sticky in [false, true] {
            let (e, eps) = split_service(n, sticky);
            let k = fresh(&e, &config());
            let case = |what: &str| format!("{what}, N={n}, affinity={sticky}");
            assert_exact(&trace(&k, forwarded(POD, "172.30.0.10", 80)), &eps, &case("cluster IP"));
            assert_exact(
                &trace(&k, forwarded(CLIENT, "192.168.99.10", 80)),
                &eps,
                &case("external IP"),
            );
            assert_exact(&trace(&k, forwarded(CLIENT, "1.2.3.4", 80)), &eps, &case("LB IP"));
            assert_exact(&trace(&k, forwarded(CLIENT, NODE_IP, 30080)), &eps, &case("node port"));
        }
    }
}

/// ClientIP affinity through the tracer: a client that the port's set of
/// clients holds with an endpoint goes to that endpoint alone, from every
/// frontend; another client picks among all of them; once the endpoint
/// goes, the same client picks among the rest (its element is the
/// kernel's, and stays until it times out).
#[test]
fn a_known_client_goes_back_to_its_endpoint_while_the_endpoint_stays() {
    let (mut e, eps) = split_service(3, true);
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    sync(&mut syncer, &mut e);
    let client: std::net::IpAddr = CLIENT.parse().unwrap();
    let clients = crate::names::SetId::Clients("ns/web/tcp/80".into());
    let mut tx = crate::transaction::Transaction::for_table(IpFamily::V4, crate::names::TABLE);
    tx.push(crate::transaction::Op::AddElements(
        clients,
        vec![crate::element::Element::key(crate::element::Key::Client(
            client, eps[1],
        ))],
    ));
    syncer.dataplane().apply_transaction(&tx).unwrap();
    let k = syncer.dataplane().clone();
    for (frontend, port) in [
        ("172.30.0.10", 80),
        ("192.168.99.10", 80),
        ("1.2.3.4", 80),
        (NODE_IP, 30080),
    ] {
        let known = trace(&k, forwarded(CLIENT, frontend, port));
        assert_exact(&known, &eps[1..2], &format!("the known client, to {frontend}"));
        assert_exact(
            &trace(&k, forwarded(POD, frontend, port)),
            &eps,
            &format!("another client, to {frontend}"),
        );
    }
    // The known client's endpoint goes.
    let rest: Vec<String> = [0, 2].iter().map(|i| eps[*i].ip().to_string()).collect();
    let rest_eps: Vec<Ep<'_>> = rest.iter().map(|a| Ep::Remote(a)).collect();
    e.slice(slice("ns", "web", Protocol::Tcp, 8080, &rest_eps));
    sync(&mut syncer, &mut e);
    let k = syncer.dataplane().clone();
    assert_exact(
        &trace(&k, forwarded(CLIENT, "172.30.0.10", 80)),
        &[eps[0], eps[2]],
        "the known client, its endpoint gone",
    );
}

#[test]
fn local_endpoint_subsets_split_equally() {
    for n in 1..=20 {
        let mut e = Engine::new(IpFamily::V4);
        let svc = external_local(node_port(service("ns", "web", "172.30.0.10", 80, Protocol::Tcp), 30080));
        let addrs: Vec<String> = (0..2 * n).map(|i| format!("10.180.0.{}", i + 1)).collect();
        // Every other endpoint is on this node.
        let eps: Vec<Ep<'_>> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| if i % 2 == 0 { Ep::Local(a) } else { Ep::Remote(a) })
            .collect();
        e.service(&svc).slice(slice("ns", "web", Protocol::Tcp, 8080, &eps));
        e.update();
        let k = fresh(&e, &config());
        let sock = |a: &String| SocketAddr::new(a.parse().unwrap(), 8080);
        let locals: Vec<SocketAddr> = addrs.iter().step_by(2).map(sock).collect();
        let all: Vec<SocketAddr> = addrs.iter().map(sock).collect();
        let external = trace(&k, forwarded(CLIENT, NODE_IP, 30080));
        assert_exact(&external, &locals, &format!("external, {n} local"));
        assert_eq!(external.masquerade(), Some(false), "Local keeps the source");
        assert_exact(
            &trace(&k, forwarded(POD, NODE_IP, 30080)),
            &all,
            &format!("pod, N={}", 2 * n),
        );
    }
}

#[test]
fn a_new_connection_costs_the_same_whatever_the_cluster_size() {
    let cost = |services: u32, n: usize| {
        let mut e = Engine::new(IpFamily::V4);
        for i in 0..services {
            let ip = format!("172.30.{}.{}", i / 250, i % 250 + 1);
            let name = format!("svc-{i}");
            let addrs: Vec<String> = (0..n)
                .map(|j| format!("10.{}.{}.{}", j + 1, i / 250, i % 250 + 1))
                .collect();
            let eps: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
            e.service(&node_port(
                service("ns", &name, &ip, 80, Protocol::Tcp),
                30000 + i as u16,
            ))
            .slice(slice("ns", &name, Protocol::Tcp, 80, &eps));
        }
        e.update();
        let k = fresh(&e, &config());
        let to_ip = trace(&k, forwarded(POD, "172.30.0.5", 80));
        let to_port = trace(&k, forwarded(CLIENT, NODE_IP, 30004));
        assert_eq!(to_ip.endpoints().len(), n);
        assert_eq!(to_port.endpoints().len(), n);
        (to_ip.rules, to_ip.lookups, to_port.rules, to_port.lookups)
    };
    for n in [1, 3, 16] {
        let small = cost(10, n);
        let large = cost(1000, n);
        assert_eq!(small, large, "{n} endpoints: rules and lookups per new connection");
    }
    // The shape's whole cost (nat, filter and postrouting chains), which
    // benches/RESULTS.md compares with the earlier shapes: the slot
    // frontends' sets are looked up one width at a time, so a node port
    // passes all sixteen of the addresses' before its own.
    let (ip_rules, ip_lookups, np_rules, np_lookups) = cost(10, 3);
    assert!(
        ip_rules <= 17 && ip_lookups <= 10 && np_rules <= 35 && np_lookups <= 27,
        "cluster IP: {ip_rules} rules, {ip_lookups} lookups; node port: {np_rules} rules, {np_lookups} lookups"
    );
    eprintln!(
        "per new connection: cluster IP {ip_rules} rules / {ip_lookups} lookups; node port {np_rules} rules / {np_lookups} lookups"
    );
}

#[test]
fn ipv6() {
    let mut e = Engine::new(IpFamily::V6);
    let svc = affinity(service("ns", "web", "fd00:172:30::10", 80, Protocol::Tcp), 30);
    e.service(&svc).slice(slice(
        "ns",
        "web",
        Protocol::Tcp,
        8080,
        &[Ep::Local("fd00:10:180::1"), Ep::Remote("fd00:10:180::2")],
    ));
    e.update();
    let mut c = DataplaneConfig::new(IpFamily::V6);
    c.cluster_cidrs = vec!["10.0.0.0/8".parse().unwrap(), "fd00:10::/64".parse().unwrap()];
    let k = fresh(&e, &c);
    let t = trace(&k, forwarded("fd00:10::2", "fd00:172:30::10", 80));
    assert_eq!(t.summary(), "[fd00:10:180::1]:8080, [fd00:10:180::2]:8080");
    let hairpin = trace(&k, forwarded("fd00:10:180::1", "fd00:172:30::10", 80));
    assert!(hairpin.outcomes.contains(&(
        Fate::Delivered {
            to: "[fd00:10:180::1]:8080".parse().unwrap(),
            masquerade: true
        },
        0.5
    )));
}

/// kube-proxy's `--detect-local-mode`, each mode: traffic from this node's
/// pods (here on `veth1`, 10.0.0.0/24) reaches a cluster IP with its source
/// kept and an external address of a Local-policy service through every
/// endpoint; traffic from elsewhere (`eth0`) is masqueraded to the cluster
/// IP and gets only the local endpoint from outside. With nothing to tell
/// them apart, nothing is masqueraded for being from elsewhere.
#[test]
fn each_local_traffic_detector_tells_pods_from_the_rest() {
    super::mirror::in_both_families(|| {
        use crate::desired::LocalDetector;
        use crate::tracer::Interface;

        let e = local_lb_engine(&[Ep::Remote("10.180.0.1"), Ep::Local("10.180.2.1")]);
        use super::mirror::{net, packet, text};
        let mut host = super::support::host(&[NODE_IP]);
        host.local_addrs = host.local_addrs.into_iter().map(super::mirror::addr).collect();
        host.interfaces = vec![
            Interface {
                name: "veth1".into(),
                networks: vec![net("10.0.0.0/24".parse().unwrap())],
            },
            Interface {
                name: "eth0".into(),
                networks: vec![net("203.0.113.0/24".parse().unwrap())],
            },
        ];
        let all = text("10.180.0.1:80, 10.180.2.1:80");
        for (name, detector, cluster_cidrs) in [
            ("ClusterCIDR", LocalDetector::ClusterCidr, vec!["10.0.0.0/8"]),
            (
                "NodeCIDR",
                LocalDetector::NodeCidr(vec!["10.0.0.0/24".parse().unwrap()]),
                vec![],
            ),
            (
                "BridgeInterface",
                LocalDetector::BridgeInterface("veth1".into()),
                vec![],
            ),
            (
                "InterfaceNamePrefix",
                LocalDetector::InterfaceNamePrefix("veth".into()),
                vec![],
            ),
        ] {
            let mut c = DataplaneConfig::new(IpFamily::V4);
            c.detect_local = detector;
            c.cluster_cidrs = cluster_cidrs.iter().map(|n| n.parse().unwrap()).collect();
            let k = fresh(&e, &c);
            let t = |p| k.trace(&host, packet(p)).summary();
            assert_eq!(t(forwarded(POD, "172.30.0.41", 80)), all, "{name}: pod to cluster IP");
            assert_eq!(
                t(forwarded(CLIENT, "172.30.0.41", 80)),
                format!("{all} (masq)"),
                "{name}: from elsewhere to cluster IP"
            );
            assert_eq!(
                t(local(NODE_IP, "172.30.0.41", 80)),
                format!("{all} (masq)"),
                "{name}: the node to cluster IP"
            );
            assert_eq!(
                t(forwarded(POD, "1.2.3.4", 80)),
                all,
                "{name}: pod to Local LB: every endpoint"
            );
            assert_eq!(
                t(forwarded(CLIENT, "1.2.3.4", 80)),
                text("10.180.2.1:80"),
                "{name}: outside to Local LB"
            );
        }
        // NodeCIDR before the Node's pod ranges are known: nothing tells pods
        // from the rest.
        let mut c = DataplaneConfig::new(IpFamily::V4);
        c.detect_local = LocalDetector::NodeCidr(Vec::new());
        let k = fresh(&e, &c);
        assert_eq!(
            k.trace(&host, packet(forwarded(CLIENT, "172.30.0.41", 80))).summary(),
            all
        );
    });
}

/// Localhost node ports (the relay answers TCP on loopback): UDP and SCTP
/// to a node port on loopback are rejected and counted, by protocol, as
/// kube-proxy's are; TCP is left to the relay, other ports and other
/// addresses are untouched; without the relay nothing is.
#[test]
fn loopback_node_ports_the_relay_does_not_answer_are_rejected_and_counted() {
    super::mirror::in_both_families(|| {
        let mut e = Engine::new(super::mirror::family(IpFamily::V4));
        for (name, ip, protocol, np) in [
            ("dns", "172.30.0.53", Protocol::Udp, 3053),
            ("sig", "172.30.0.54", Protocol::Sctp, 3054),
            ("web", "172.30.0.55", Protocol::Tcp, 3055),
        ] {
            e.service(&node_port(service("ns", name, ip, 80, protocol), np))
                .slice(slice("ns", name, protocol, 80, &[Ep::Remote("10.180.0.1")]));
        }
        // No endpoints: still rejected on loopback, and counted.
        e.service(&node_port(
            service("ns", "empty", "172.30.0.56", 80, Protocol::Udp),
            3056,
        ));
        e.update();
        let lo = "127.0.0.1";
        let counted = |t: &crate::tracer::Trace| t.counted.iter().map(|(c, p)| (c.to_string(), *p)).collect::<Vec<_>>();
        let mut relayed = config();
        relayed.loopback_relay = true;
        let k = fresh(&e, &relayed);
        for (protocol, port, counter) in [
            (Protocol::Udp, 3053, "localhost-nodeport-rejected-udp"),
            (Protocol::Sctp, 3054, "localhost-nodeport-rejected-sctp"),
            (Protocol::Udp, 3056, "localhost-nodeport-rejected-udp"),
        ] {
            let t = trace(&k, with_protocol(local(lo, lo, port), protocol));
            assert_eq!(
                t.only(),
                Some(Fate::Rejected),
                "{protocol:?} to loopback node port {port}"
            );
            assert_eq!(counted(&t), [(counter.to_string(), 1.0)], "{protocol:?} {port}");
        }
        let untouched = [
            ("TCP is the relay's", with_protocol(local(lo, lo, 3055), Protocol::Tcp)),
            (
                "a UDP port no service has",
                with_protocol(local(lo, lo, 3099), Protocol::Udp),
            ),
            (
                "UDP to the TCP service's node port",
                with_protocol(local(lo, lo, 3055), Protocol::Udp),
            ),
        ];
        for (case, p) in untouched {
            let t = trace(&k, p);
            assert!(
                matches!(t.only(), Some(Fate::Delivered { to, masquerade: false }) if to.ip().is_loopback()),
                "{case}: {}",
                t.summary()
            );
            assert!(t.counted.is_empty(), "{case}");
        }
        expect(
            &k,
            "UDP to the node's address still reaches the endpoint",
            with_protocol(local(NODE_IP, NODE_IP, 3053), Protocol::Udp),
            "10.180.0.1:80 (masq)",
        );
        let without = fresh(&e, &config());
        let t = trace(&without, with_protocol(local(lo, lo, 3053), Protocol::Udp));
        assert!(
            matches!(t.only(), Some(Fate::Delivered { .. })),
            "no relay: {}",
            t.summary()
        );
        assert!(t.counted.is_empty());
    });
}
