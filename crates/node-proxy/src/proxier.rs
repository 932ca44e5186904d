//! [`Proxier`]: one IP family's engine, table and conntrack cleanup, and
//! what one sync of it did.
//!
//! A sync applies the pending changes to the maps, writes the changed
//! services' rules, and only then deletes the conntrack entries those rules
//! replace. What a failed sync could not finish (services to rewrite, stale
//! entries to delete, trigger times to report) waits for the next one.

use std::collections::HashMap;
use std::time::Instant;

use slice_model::ServiceName;

use crate::family::{FamilyProxier, FamilySync, HealthChecks};
use crate::localhost_relay::LocalhostRelay;
use endpoints_map::Engine;
use linux_dataplane::flow_cleanup::Conntrack;
use nft_dataplane::desired::NoLocalEndpoints;
use nft_dataplane::{Dataplane, DataplaneConfig, DataplaneError, NftSyncer, SyncKind, SyncReport, Target};

/// One family's proxy.
pub struct Proxier {
    /// Its engine.
    pub engine: Engine,
    table: Target<Box<dyn Dataplane + Send>>,
    conntrack: Box<dyn Conntrack + Send>,
    pending_endpoint_changes: u64,
    pending_service_changes: u64,
    health_checks: HealthChecks,
    /// Services with ports dropped for want of local endpoints, as the
    /// syncs' reports last said.
    no_local: HashMap<ServiceName, NoLocalEndpoints>,
    /// Localhost node ports, when they are on for this family.
    relay: Option<LocalhostRelay>,
}

impl Proxier {
    /// A proxier whose first sync replaces the table.
    pub fn new(
        engine: Engine,
        config: DataplaneConfig,
        dataplane: Box<dyn Dataplane + Send>,
        conntrack: Box<dyn Conntrack + Send>,
    ) -> Self {
        debug_assert_eq!(engine.family(), config.family, "one family");
        Self {
            engine,
            table: Target::new(NftSyncer::new(config, dataplane)),
            conntrack,
            pending_endpoint_changes: 0,
            pending_service_changes: 0,
            health_checks: HealthChecks::new(),
            no_local: HashMap::new(),
            relay: None,
        }
    }

    /// Answers localhost node ports through `relay`, which follows what
    /// each sync planned (every service after a full sync).
    pub fn with_localhost_relay(mut self, relay: LocalhostRelay) -> Self {
        self.table.syncer_mut().keep_plans(Box::new(LocalhostRelay::reads));
        self.reconfigure(|c| c.loopback_relay = true);
        self.relay = Some(relay);
        self
    }

    /// Health-check ports and local ready endpoint counts, kept up to date
    /// by each sync (for the changed services only).
    pub fn health_checks(&self) -> &HealthChecks {
        &self.health_checks
    }

    /// Changes the dataplane's configuration; the next sync rewrites the
    /// table when that is a change (see [`NftSyncer::reconfigure`]).
    pub fn reconfigure(&mut self, change: impl FnOnce(&mut DataplaneConfig)) -> bool {
        self.table.syncer_mut().reconfigure(change)
    }

    /// Changes waiting for the next sync: (endpoint changes, service
    /// changes), counted in services.
    pub fn pending(&self) -> (usize, usize) {
        self.engine.pending()
    }

    fn refresh_health_check(&mut self, name: &ServiceName) {
        let ports = self.engine.services.service(name).unwrap_or(&[]);
        let hc = ports.iter().find_map(|p| p.health_check_node_port);
        match hc {
            Some(port) => {
                let local = self.engine.endpoints.local_ready_count(name);
                self.health_checks.insert(name.clone(), (port.get(), local));
            }
            None => {
                self.health_checks.remove(name);
            }
        }
    }

    /// Follows the dataplane's count of ports dropped for want of local
    /// endpoints (a full sync's report lists every service that has any);
    /// returns the totals (internal, external).
    fn count_no_local(&mut self, report: &SyncReport) -> (u64, u64) {
        if report.full {
            self.no_local.clear();
        }
        for (name, dropped) in &report.no_local_endpoints {
            if dropped.is_zero() {
                self.no_local.remove(name);
            } else {
                self.no_local.insert(name.clone(), *dropped);
            }
        }
        let total = |f: fn(&NoLocalEndpoints) -> usize| self.no_local.values().map(f).sum::<usize>() as u64;
        (total(|n| n.internal), total(|n| n.external))
    }

    /// Applies the engine's pending changes and records what the next sync
    /// owes the table, without writing it.
    pub fn absorb(&mut self) {
        let started = Instant::now();
        let update = self.engine.update();
        if !update.changed.is_empty() {
            tracing::debug!(
                took_ms = started.elapsed().as_secs_f64() * 1e3,
                changed_services = update.changed.len(),
                "engine updated"
            );
        }
        let cleanup = nft_dataplane::stale_flows::plan(&update, &self.engine.services, &self.engine.endpoints);
        self.table.owe(&update, cleanup, |_| true);
        self.pending_endpoint_changes += update.endpoints.changed_services.len() as u64;
        self.pending_service_changes += update.services.updated_services.len() as u64;
        for name in &update.changed {
            self.refresh_health_check(name);
        }
    }

    /// One sync. On failure everything pending stays pending, and the
    /// dataplane's next sync is a full one.
    pub fn sync(&mut self, kind: SyncKind) -> Result<FamilySync, DataplaneError> {
        let started = Instant::now();
        self.absorb();
        self.write(kind, started)
    }

    /// The sync after the absorb, which started at `started`.
    fn write(&mut self, kind: SyncKind, started: Instant) -> Result<FamilySync, DataplaneError> {
        let mut written = self.table.sync(&self.engine.services, &self.engine.endpoints, kind)?;
        if let (Some(relay), Some(planned)) = (&self.relay, written.plans.take()) {
            relay.follow(planned);
        }
        let (no_local_internal, no_local_external) = self.count_no_local(&written.report);
        // The rules are in place: now the entries they replace can go.
        let cleanup = written.cleanup;
        let conntrack_started = Instant::now();
        let (conntrack_deleted, conntrack_errors) = if cleanup.is_empty() {
            (0, Vec::new())
        } else {
            self.conntrack.delete(self.engine.family(), &cleanup)
        };
        Ok(FamilySync {
            duration: started.elapsed(),
            changed: written.services,
            endpoint_changes: std::mem::take(&mut self.pending_endpoint_changes),
            service_changes: std::mem::take(&mut self.pending_service_changes),
            written: written.report,
            trigger_times: written.trigger_times,
            no_local_internal,
            no_local_external,
            conntrack_flows: cleanup.len(),
            conntrack_deleted,
            conntrack_duration: if cleanup.is_empty() {
                std::time::Duration::ZERO
            } else {
                conntrack_started.elapsed()
            },
            conntrack_errors,
            pods: None,
        })
    }
}

impl FamilyProxier for Proxier {
    fn engine(&self) -> &Engine {
        &self.engine
    }

    fn sync(&mut self, kind: SyncKind) -> Result<Option<FamilySync>, DataplaneError> {
        let started = Instant::now();
        self.absorb();
        if kind == SyncKind::Changes && !self.table.owes() {
            return Ok(None);
        }
        self.write(kind, started).map(Some)
    }

    fn read_ahead(&mut self) {
        self.table.syncer_mut().read_ahead();
    }

    fn absorb(&mut self) {
        Proxier::absorb(self);
    }

    fn follow_node(&mut self, wanted: &DataplaneConfig) -> Option<DataplaneConfig> {
        let mut before = None;
        self.reconfigure(|c| {
            // The family and the relay are the proxier's own, not the node's.
            let (family, loopback_relay) = (c.family, c.loopback_relay);
            before = Some(std::mem::replace(
                c,
                DataplaneConfig {
                    family,
                    loopback_relay,
                    ..wanted.clone()
                },
            ));
        });
        before
    }

    fn health_checks(&self) -> Option<&HealthChecks> {
        Some(Proxier::health_checks(self))
    }

    fn repair(&mut self) {
        self.table.syncer_mut().rewrite_next();
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;
    use std::sync::{Arc, Mutex};

    use slice_model::{EndpointSlice, Protocol, ServiceInfo, ServicePort, ServiceType, SliceEndpoint, TrafficPolicy};

    use super::*;
    use linux_dataplane::flow_cleanup::RecordingConntrack;
    use nft_dataplane::Recording;
    use slice_model::IpFamily;

    /// Shares a recording dataplane/conntrack with the test.
    struct Shared<T>(Arc<Mutex<T>>);

    impl Dataplane for Shared<Recording> {
        fn apply(&mut self, tx: &nft_dataplane::Transaction) -> Result<usize, DataplaneError> {
            self.0.lock().unwrap().apply(tx)
        }
    }

    impl Dataplane for Shared<nft_dataplane::KernelModel> {
        fn apply(&mut self, tx: &nft_dataplane::Transaction) -> Result<usize, DataplaneError> {
            self.0.lock().unwrap().apply(tx)
        }
    }

    impl Conntrack for Shared<RecordingConntrack> {
        fn delete(
            &mut self,
            family: IpFamily,
            cleanup: &nft_dataplane::stale_flows::Cleanup,
        ) -> (u64, Vec<linux_dataplane::ConntrackError>) {
            self.0.lock().unwrap().delete(family, cleanup)
        }
    }

    fn lb() -> ServiceInfo {
        let mut s = ServiceInfo::new(ServiceName::new("ns", "dns"));
        s.cluster_ips = vec!["10.96.0.10".parse().unwrap()];
        s.service_type = ServiceType::LoadBalancer;
        s.external_traffic_policy = TrafficPolicy::Local;
        s.health_check_node_port = NonZeroU16::new(32000);
        s.ports = vec![ServicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: NonZeroU16::new(53).unwrap(),
            node_port: NonZeroU16::new(30053),
            app_protocol: None,
        }];
        s
    }

    fn slice(eps: &[(&str, &str)]) -> EndpointSlice {
        let mut s = EndpointSlice::new("ns", "dns-1", "dns")
            .unwrap()
            .with_port("dns", Protocol::Udp, 53);
        for (ip, node) in eps {
            s = s.with_endpoint(SliceEndpoint::new(ip.parse().unwrap()).on_node(node));
        }
        s
    }

    type Recorded = (Proxier, Arc<Mutex<Recording>>, Arc<Mutex<RecordingConntrack>>);

    /// A proxier on node-1 over a recording dataplane and conntrack.
    fn recorded() -> Recorded {
        let dp = Arc::new(Mutex::new(Recording::default()));
        let ct = Arc::new(Mutex::new(RecordingConntrack::default()));
        let p = Proxier::new(
            Engine::new("node-1", IpFamily::V4),
            DataplaneConfig::new(IpFamily::V4),
            Box::new(Shared(dp.clone())),
            Box::new(Shared(ct.clone())),
        );
        (p, dp, ct)
    }

    /// Taking in changes as they arrive (while the initial lists do) writes
    /// nothing, and the sync after it writes, cleans up and reports what
    /// one sync of everything at once does.
    #[test]
    fn absorbing_in_steps_writes_and_reports_what_one_sync_does() {
        let (mut stepwise, stepwise_dp, stepwise_ct) = recorded();
        let (mut at_once, at_once_dp, at_once_ct) = recorded();
        let mut other = lb();
        other.name = ServiceName::new("ns", "other");
        other.cluster_ips = vec!["10.96.0.11".parse().unwrap()];
        other.health_check_node_port = None;
        other.ports[0].node_port = NonZeroU16::new(30054);
        for p in [&stepwise, &at_once] {
            p.engine.update_service(&lb());
        }
        stepwise.absorb();
        for p in [&stepwise, &at_once] {
            p.engine.update_slice(slice(&[("10.1.0.1", "node-1")]));
            p.engine.update_service(&other);
        }
        stepwise.absorb();
        assert!(stepwise_dp.lock().unwrap().applied.is_empty(), "nothing written");
        assert!(stepwise_ct.lock().unwrap().asked.is_empty(), "nothing cleaned up");
        assert_eq!(stepwise.health_checks()[&ServiceName::new("ns", "dns")], (32000, 1));

        let a = stepwise.sync(SyncKind::Changes).unwrap();
        let b = at_once.sync(SyncKind::Changes).unwrap();
        assert_eq!(stepwise_dp.lock().unwrap().applied, at_once_dp.lock().unwrap().applied);
        assert_eq!(stepwise_ct.lock().unwrap().asked, at_once_ct.lock().unwrap().asked);
        assert_eq!(a.changed, b.changed);
        assert_eq!(
            (a.endpoint_changes, a.service_changes, a.no_local_external),
            (b.endpoint_changes, b.service_changes, b.no_local_external)
        );
        assert_eq!(stepwise.health_checks(), at_once.health_checks());
    }

    #[test]
    fn conntrack_waits_for_a_successful_apply() {
        let (mut p, dp, ct) = recorded();
        p.engine.update_service(&lb());
        p.sync(SyncKind::Changes).unwrap();
        assert_eq!(p.health_checks()[&ServiceName::new("ns", "dns")], (32000, 0));
        // A port with no endpoint: its entries (none yet) are cleared too.
        assert_eq!(ct.lock().unwrap().asked.len(), 1);
        ct.lock().unwrap().asked.clear();

        p.engine.update_slice(slice(&[("10.1.0.1", "node-1")]));
        dp.lock().unwrap().fail_next = 1;
        assert!(p.sync(SyncKind::Changes).is_err());
        assert!(
            ct.lock().unwrap().asked.is_empty(),
            "rules not in place: nothing deleted"
        );
        let out = p.sync(SyncKind::Changes).unwrap();
        assert!(out.written.full, "after a failure");
        assert_eq!(out.conntrack_deleted, 2, "the stale service's cluster IP and node port");
        let asked: Vec<usize> = ct.lock().unwrap().asked.iter().map(|(_, c)| c.len()).collect();
        assert_eq!(asked, [2], "one cleanup, of two frontends");
        assert_eq!(out.endpoint_changes, 1, "counted once, across the failure");
        assert_eq!(p.health_checks()[&ServiceName::new("ns", "dns")], (32000, 1));

        p.engine.update_slice(slice(&[("10.1.0.2", "node-2")]));
        let out = p.sync(SyncKind::Changes).unwrap();
        assert_eq!(out.no_local_external, 1, "Local policy, only a remote endpoint");
        assert_eq!(p.health_checks()[&ServiceName::new("ns", "dns")], (32000, 0));
        p.engine.remove_service(&ServiceName::new("ns", "dns"));
        let out = p.sync(SyncKind::Changes).unwrap();
        assert_eq!(out.no_local_external, 0);
        assert!(p.health_checks().is_empty(), "listener closes with the service");
    }

    /// The count of ports dropped for want of local endpoints comes from
    /// the sync that wrote the drop: it follows changes, and a full sync
    /// (after a failure) recounts rather than adds.
    #[test]
    fn no_local_counts_follow_the_verdicts_written() {
        let (mut p, dp, _) = recorded();
        let mut internal = lb();
        internal.internal_traffic_policy = TrafficPolicy::Local;
        p.engine.update_service(&internal);
        p.engine.update_slice(slice(&[("10.1.0.2", "node-2")]));
        let out = p.sync(SyncKind::Changes).unwrap();
        assert_eq!(
            (out.no_local_internal, out.no_local_external),
            (1, 1),
            "both policies Local, the only endpoint remote"
        );

        // Another service's change fails to apply: the next sync is full.
        let mut other = lb();
        other.name = ServiceName::new("ns", "other");
        other.cluster_ips = vec!["10.96.0.11".parse().unwrap()];
        other.health_check_node_port = None;
        other.ports[0].node_port = NonZeroU16::new(30054);
        p.engine.update_service(&other);
        dp.lock().unwrap().fail_next = 1;
        assert!(p.sync(SyncKind::Changes).is_err());
        let out = p.sync(SyncKind::Changes).unwrap();
        assert!(out.written.full);
        assert_eq!(
            (out.no_local_internal, out.no_local_external),
            (1, 1),
            "a full sync recounts"
        );

        p.engine.update_slice(slice(&[("10.1.0.1", "node-1")]));
        let out = p.sync(SyncKind::Changes).unwrap();
        assert_eq!((out.no_local_internal, out.no_local_external), (0, 0));

        p.engine.update_slice(slice(&[]));
        let out = p.sync(SyncKind::Changes).unwrap();
        assert_eq!(
            (out.no_local_internal, out.no_local_external),
            (0, 0),
            "no endpoints anywhere is a reject, not a drop"
        );
    }

    /// Where the kernel model sends new connections to the cluster IP.
    fn reached(model: &Mutex<nft_dataplane::KernelModel>) -> Vec<String> {
        use nft_dataplane::tracer::{Host, Origin, Packet};
        let packet = Packet {
            src: "10.244.9.9".parse().unwrap(),
            dst: "10.96.0.10".parse().unwrap(),
            protocol: Protocol::Udp,
            port: 53,
            origin: Origin::Forwarded,
        };
        let host = Host {
            local_addrs: Vec::new(),
            ..Host::default()
        };
        let trace = model.lock().unwrap().trace(&host, packet);
        trace.endpoints().into_keys().map(|a| a.ip().to_string()).collect()
    }

    #[test]
    fn a_new_node_zone_rewrites_the_hinted_services() {
        let model = Arc::new(Mutex::new(nft_dataplane::KernelModel::default()));
        let mut p = Proxier::new(
            Engine::new("node-1", IpFamily::V4),
            DataplaneConfig {
                node_zone: Some("zone-a".into()),
                ..DataplaneConfig::new(IpFamily::V4)
            },
            Box::new(Shared(model.clone())),
            Box::new(linux_dataplane::flow_cleanup::NoConntrack),
        );
        let mut svc = lb();
        svc.service_type = ServiceType::ClusterIp;
        svc.external_traffic_policy = TrafficPolicy::Cluster;
        svc.health_check_node_port = None;
        p.engine.update_service(&svc);
        let mut s = EndpointSlice::new("ns", "dns-1", "dns")
            .unwrap()
            .with_port("dns", Protocol::Udp, 53);
        for (ip, zone) in [("10.1.0.1", "zone-a"), ("10.1.0.2", "zone-b"), ("10.1.0.3", "zone-b")] {
            s = s.with_endpoint(
                SliceEndpoint::new(ip.parse().unwrap())
                    .on_node("node-2")
                    .with_zones([zone]),
            );
        }
        p.engine.update_slice(s);
        p.sync(SyncKind::Changes).unwrap();
        assert_eq!(reached(&model), ["10.1.0.1"]);

        assert!(
            !p.reconfigure(|c| c.node_zone = Some("zone-a".into())),
            "the same zone is no change"
        );
        assert!(p.reconfigure(|c| c.node_zone = Some("zone-b".into())));
        let out = p.sync(SyncKind::Changes).unwrap();
        assert!(out.written.full, "nothing else changed, yet every service is rewritten");
        assert_eq!(reached(&model), ["10.1.0.2", "10.1.0.3"]);
        assert!(p.reconfigure(|c| c.node_zone = None));
        p.sync(SyncKind::Changes).unwrap();
        assert_eq!(reached(&model).len(), 3, "no zone: hints are not used");
    }

    /// A sync of changes that finds nothing owed writes nothing and
    /// reports nothing; a change of its engine, or a reconfiguration (the
    /// whole table), is owed; a periodic sync always runs.
    #[test]
    fn a_sync_of_changes_with_nothing_owed_is_none() {
        let (mut p, dp, _) = recorded();
        let sync = |p: &mut Proxier, kind| FamilyProxier::sync(p, kind).unwrap().is_some();
        p.engine.update_service(&lb());
        assert!(sync(&mut p, SyncKind::Changes), "a service pending");
        let applied = dp.lock().unwrap().applied.len();
        assert!(!sync(&mut p, SyncKind::Changes), "nothing owed");
        assert_eq!(dp.lock().unwrap().applied.len(), applied, "and nothing written");
        p.engine.update_slice(slice(&[("10.1.0.1", "node-1")]));
        assert!(sync(&mut p, SyncKind::Changes), "an endpoint pending");
        assert!(!sync(&mut p, SyncKind::Changes));
        assert!(sync(&mut p, SyncKind::Periodic), "the periodic sync runs");
        assert!(p.reconfigure(|c| c.node_zone = Some("zone-b".into())));
        assert!(sync(&mut p, SyncKind::Changes), "the whole table owed");
    }
}
