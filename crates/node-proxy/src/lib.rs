//! # node-proxy
//!
//! A node service proxy's loop, with kube-proxy's semantics: the parts of
//! kube-proxy's `pkg/proxy` that are neither the maps (`endpoints-map`)
//! nor the rules (`nft-dataplane`) nor the host (`linux-dataplane`).
//!
//! ```text
//!  actor     the sync actor: one thread that owns the proxiers, takes
//!            typed commands (Changed, Listed, Repair, Stop) on one
//!            channel, and syncs when the schedule says; actor::feed is
//!            what sends them (the sources' forwarder, the hearing)
//!  schedule  when to sync: at most one per min interval (or as the
//!            syncs' cost allows), at least one per max interval, failed
//!            syncs retried with a backoff (kube-proxy's
//!            BoundedFrequencyRunner), repairs of other programs'
//!            changes paced
//!  families  which IP families to serve, and kube-proxy's checks of the
//!            configuration against the cluster's primary family
//!  feature_gates  kube-proxy's gates: which act here, how settings resolve
//!  family    what a family's proxier is, in either mode (the
//!            FamilyProxier trait), and its one report (FamilySync)
//!  proxier   node mode's proxier: engine update ─► its nftables Target
//!            ─► the conntrack entries the new rules replace
//!  health    /healthz and /livez, and each Local LoadBalancer service's
//!            healthCheckNodePort
//!  kube_proxy_metrics  kube-proxy's sync and health metric families
//!  localhost_relay  localhost node ports: a TCP listener on loopback per
//!            node port, relaying to the endpoints the rules use
//!  localhost_rejects  the packets to them the relay does not answer (UDP,
//!            SCTP), which the table rejects: its counters, as kube-proxy's metric
//!  http      the small HTTP/1 server the health endpoints answer on
//! ```
//!
//! Multus mode's proxier (each pod's table) is the `multus-dataplane`
//! crate, implementing the same trait; the `proxyd`
//! binary wires these parts to its sources and command line.

pub mod actor;
pub mod families;
pub mod family;
pub mod feature_gates;
pub mod health;
pub mod http;
pub mod kube_proxy_metrics;
pub mod localhost_rejects;
pub mod localhost_relay;
pub mod proxier;
pub mod schedule;
