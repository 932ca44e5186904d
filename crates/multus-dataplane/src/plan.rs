//! Which services each pod gets and which routes its namespace needs: a
//! pure function of the pod, the services' networks and the services map.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use endpoints_map::ServicesMap;
use informer_glue::multus::{NetworkName, PodInfo};
use slice_model::{IpFamily, ServiceName};

pub use linux_dataplane::Route;

/// What one pod's namespace should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodPlan {
    /// The services its table serves.
    pub services: BTreeSet<ServiceName>,
    /// The routes to their cluster IPs.
    pub routes: BTreeSet<Route>,
}

/// Why a pod on this node gets nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not (yet) running.
    NotRunning,
    /// It shares the node's network namespace.
    HostNetwork,
    /// None of its attachments is a network a service is on (or multus
    /// has not reported its networks yet).
    NotAttached,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotRunning => "not running",
            Self::HostNetwork => "host network",
            Self::NotAttached => "not attached to any service's network",
        })
    }
}

/// The plan for one pod: the services on networks it is attached to (with
/// an address of `family` there), and a route per cluster IP.
pub fn plan_pod(
    pod: &PodInfo,
    networks: &BTreeMap<ServiceName, NetworkName>,
    services: &ServicesMap,
    family: IpFamily,
) -> Result<PodPlan, Skip> {
    if pod.host_network {
        return Err(Skip::HostNetwork);
    }
    if !pod.running {
        return Err(Skip::NotRunning);
    }
    let mut plan = PodPlan::default();
    for (service, network) in networks {
        let Some(attachment) = pod.attachment(network) else {
            continue;
        };
        let Some(src) = attachment.ips.iter().find(|ip| IpFamily::of(ip) == family) else {
            continue;
        };
        let ports: Vec<_> = services
            .service(service)
            .unwrap_or(&[])
            .iter()
            .filter(|p| IpFamily::of(&p.cluster_ip) == family)
            .collect();
        if ports.is_empty() {
            continue;
        }
        plan.services.insert(service.clone());
        for port in ports {
            plan.routes.insert(Route {
                dest: port.cluster_ip,
                dev: attachment.interface.clone(),
                src: *src,
            });
        }
    }
    if plan.services.is_empty() {
        return Err(Skip::NotAttached);
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use informer_glue::multus::Attachment;
    use proptest::prelude::*;
    use slice_cache::ServiceChangeTracker;
    use slice_model::{Protocol, ServiceInfo, ServicePort};

    use super::*;

    fn net(n: &str) -> NetworkName {
        NetworkName::parse(n, "default").unwrap()
    }

    fn pod(attachments: &[(&str, &str, &[&str])]) -> PodInfo {
        PodInfo {
            namespace: "default".into(),
            name: "client".into(),
            uid: None,
            node: Some("node-1".into()),
            running: true,
            host_network: false,
            attachments: attachments
                .iter()
                .map(|(n, i, ips)| Attachment {
                    network: net(n),
                    interface: (*i).into(),
                    ips: ips.iter().map(|a| a.parse().unwrap()).collect(),
                })
                .collect(),
        }
    }

    fn services(defs: &[(&str, &str)]) -> ServicesMap {
        let mut t = ServiceChangeTracker::new(IpFamily::V4);
        for (name, ip) in defs {
            let mut s = ServiceInfo::new(ServiceName::new("default", *name));
            s.cluster_ips = vec![ip.parse().unwrap()];
            s.ports = vec![ServicePort {
                name: "p".into(),
                protocol: Protocol::Tcp,
                port: NonZeroU16::new(80).unwrap(),
                node_port: None,
                app_protocol: None,
            }];
            t.update(&s);
        }
        let mut m = ServicesMap::new();
        let _ = m.update(&mut t);
        m
    }

    #[test]
    fn services_on_the_pods_networks_get_a_route_through_its_interface() {
        let nets = BTreeMap::from([
            (ServiceName::new("default", "a"), net("blue")),
            (ServiceName::new("default", "b"), net("red")),
            (ServiceName::new("default", "c"), net("blue")),
        ]);
        let svcs = services(&[("a", "10.96.0.1"), ("b", "10.96.0.2"), ("c", "10.96.0.3")]);
        let p = pod(&[("blue", "net1", &["192.168.10.5", "fd00::5"])]);
        let plan = plan_pod(&p, &nets, &svcs, IpFamily::V4).unwrap();
        let names: Vec<String> = plan.services.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(names, ["a", "c"]);
        let routes: Vec<String> = plan.routes.iter().map(ToString::to_string).collect();
        assert_eq!(
            routes,
            [
                "10.96.0.1 dev net1 src 192.168.10.5",
                "10.96.0.3 dev net1 src 192.168.10.5"
            ]
        );
        assert_eq!(
            plan_pod(&p, &nets, &svcs, IpFamily::V6),
            Err(Skip::NotAttached),
            "no v6 services"
        );
        let mut host = p.clone();
        host.host_network = true;
        assert_eq!(plan_pod(&host, &nets, &svcs, IpFamily::V4), Err(Skip::HostNetwork));
        let mut pending = p.clone();
        pending.running = false;
        assert_eq!(plan_pod(&pending, &nets, &svcs, IpFamily::V4), Err(Skip::NotRunning));
        let other = pod(&[("green", "net1", &["192.168.30.5"])]);
        assert_eq!(plan_pod(&other, &nets, &svcs, IpFamily::V4), Err(Skip::NotAttached));
        let no_v4 = pod(&[("blue", "net1", &["fd00::5"])]);
        assert_eq!(
            plan_pod(&no_v4, &nets, &svcs, IpFamily::V4),
            Err(Skip::NotAttached),
            "no address of the family on that network: no route, so no service"
        );
    }

    proptest! {
        /// Every planned service is on a network the pod has, every route
        /// goes through that network's interface with its address, and
        /// every service on such a network (with ports) is planned.
        #[test]
        fn plans_match_a_naive_reading(
            on in proptest::collection::vec(0..4usize, 6),
            attached in proptest::collection::vec(any::<bool>(), 4),
        ) {
            let names = ["blue", "red", "green", "gold"];
            let nets: BTreeMap<ServiceName, NetworkName> = on.iter().enumerate()
                .map(|(i, n)| (ServiceName::new("default", format!("s{i}").as_str()), net(names[*n]))).collect();
            let defs: Vec<(String, String)> = (0..6).map(|i| (format!("s{i}"), format!("10.96.0.{}", i + 1))).collect();
            let defs: Vec<(&str, &str)> = defs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let svcs = services(&defs);
            let addrs: Vec<String> = (0..4).map(|i| format!("192.168.{i}.5")).collect();
            let ifaces: Vec<String> = (0..4).map(|i| format!("net{}", i + 1)).collect();
            let atts: Vec<(&str, &str, Vec<&str>)> = (0..4).filter(|i| attached[*i])
                .map(|i| (names[i], ifaces[i].as_str(), vec![addrs[i].as_str()])).collect();
            let atts: Vec<(&str, &str, &[&str])> = atts.iter().map(|(n, i, a)| (*n, *i, a.as_slice())).collect();
            let p = pod(&atts);
            let want: BTreeSet<ServiceName> = nets.iter().filter(|(_, n)| {
                names.iter().position(|x| *x == n.name).is_some_and(|i| attached[i])
            }).map(|(s, _)| s.clone()).collect();
            match plan_pod(&p, &nets, &svcs, IpFamily::V4) {
                Ok(plan) => {
                    prop_assert_eq!(&plan.services, &want);
                    for r in &plan.routes {
                        let i = ifaces.iter().position(|x| *x == r.dev).expect("a known interface");
                        prop_assert!(attached[i]);
                        prop_assert_eq!(r.src.to_string(), addrs[i].clone());
                    }
                    prop_assert_eq!(plan.routes.len(), want.len());
                }
                Err(skip) => {
                    prop_assert_eq!(skip, Skip::NotAttached);
                    prop_assert!(want.is_empty());
                }
            }
        }
    }
}
