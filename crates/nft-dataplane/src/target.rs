//! [`Target`]: one table (the node's, or one pod's) and the work it still
//! owes: the services to rewrite, the stale conntrack flows its new rules
//! make safe to delete, and the trigger times its programming latency is
//! measured from. The node's proxier and each multus pod run the same
//! machine: an engine update adds to what a target owes; a sync that
//! writes the table hands the flows and trigger times over and clears what
//! it owed; a failed sync keeps everything for the next one (whose write is
//! then a full one).

use std::collections::BTreeSet;
use std::time::SystemTime;

use endpoints_map::{EndpointsMap, EngineUpdate, ServicesMap};
use slice_model::ServiceName;

use crate::stale_flows::Cleanup;
use crate::{Dataplane, DataplaneError, NftSyncer, Planned, SyncKind, SyncReport};

/// A table and what it owes.
pub struct Target<D> {
    syncer: NftSyncer<D>,
    services: BTreeSet<ServiceName>,
    cleanup: Cleanup,
    trigger_times: Vec<SystemTime>,
}

/// What a sync that wrote the table leaves to its caller.
#[derive(Debug)]
pub struct Written {
    /// The dataplane's report.
    pub report: SyncReport,
    /// The changed services it owed (written, unless a full sync wrote
    /// everything).
    pub services: BTreeSet<ServiceName>,
    /// The conntrack entries the new rules leave wrong: the rules are in
    /// place, so they can be deleted now.
    pub cleanup: Cleanup,
    /// `last-change-trigger-time`s of the changes now programmed.
    pub trigger_times: Vec<SystemTime>,
    /// What the sync planned, when the syncer keeps plans
    /// ([`NftSyncer::keep_plans`]).
    pub plans: Option<Planned>,
}

impl<D: Dataplane> Target<D> {
    /// A target writing through `syncer`, owing nothing yet.
    pub fn new(syncer: NftSyncer<D>) -> Self {
        Self {
            syncer,
            services: BTreeSet::new(),
            cleanup: Cleanup::default(),
            trigger_times: Vec::new(),
        }
    }

    /// The syncer.
    pub fn syncer(&self) -> &NftSyncer<D> {
        &self.syncer
    }

    /// The syncer, to change (its configuration, filter, dataplane).
    pub fn syncer_mut(&mut self) -> &mut NftSyncer<D> {
        &mut self.syncer
    }

    /// Records what an engine update makes this target owe: the changed
    /// services it `serves`, their trigger times, and the conntrack
    /// `cleanup` of its table (the update's, planned once for every
    /// target with [`plan`](crate::stale_flows::plan), narrowed to what the
    /// table serves).
    pub fn owe(&mut self, update: &EngineUpdate, cleanup: Cleanup, serves: impl Fn(&ServiceName) -> bool) {
        self.services
            .extend(update.changed.iter().filter(|s| serves(s)).cloned());
        let times = &update.endpoints.last_change_trigger_times;
        self.trigger_times.extend(
            times
                .iter()
                .filter(|(s, _)| serves(s))
                .flat_map(|(_, t)| t.iter().copied()),
        );
        self.cleanup.merge(cleanup);
    }

    /// Whether a sync now has something to do without being asked for a
    /// periodic one: services or flows owed, a table to rewrite whole, or a
    /// refused service to check again.
    pub fn owes(&self) -> bool {
        !self.services.is_empty()
            || !self.cleanup.is_empty()
            || self.syncer.needs_full_sync()
            || self.syncer.recheck_due()
    }

    /// The services owed.
    pub fn owed_services(&self) -> &BTreeSet<ServiceName> {
        &self.services
    }

    /// Writes the table (the owed services, or all of it) and, once that
    /// worked, hands over what may follow it. A failure keeps everything
    /// owed.
    pub fn sync(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        kind: SyncKind,
    ) -> Result<Written, DataplaneError> {
        let report = self.syncer.sync(services, endpoints, &self.services, kind)?;
        Ok(Written {
            report,
            services: std::mem::take(&mut self.services),
            cleanup: std::mem::take(&mut self.cleanup),
            trigger_times: std::mem::take(&mut self.trigger_times),
            plans: self.syncer.take_plans(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;
    use std::time::Duration;

    use endpoints_map::Engine;
    use slice_model::{EndpointSlice, IpFamily, Protocol, ServiceInfo, ServicePort, SliceEndpoint};

    use super::*;
    use crate::stale_flows::plan;
    use crate::{DataplaneConfig, Recording};

    /// A dataplane that fails while told to.
    #[derive(Default)]
    struct Flaky {
        failing: bool,
        applied: usize,
    }

    impl Dataplane for Flaky {
        fn apply(&mut self, tx: &crate::Transaction) -> Result<usize, DataplaneError> {
            if self.failing {
                return Err(DataplaneError::Rejected {
                    status: "exit status 1".into(),
                    stderr: "injected".into(),
                });
            }
            self.applied += 1;
            Ok(tx.text().len())
        }
    }

    fn dns(engine: &mut Engine, endpoint: &str, at: u64) {
        let mut s = ServiceInfo::new(ServiceName::new("ns", "dns"));
        s.cluster_ips = vec!["10.96.0.10".parse().unwrap()];
        s.ports = vec![ServicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: NonZeroU16::new(53).unwrap(),
            node_port: None,
            app_protocol: None,
        }];
        engine.update_service(&s);
        let slice = EndpointSlice::new("ns", "dns-1", "dns")
            .unwrap()
            .with_port("dns", Protocol::Udp, 53)
            .with_endpoint(SliceEndpoint::new(endpoint.parse().unwrap()))
            .with_trigger_time(SystemTime::UNIX_EPOCH + Duration::from_secs(at));
        engine.update_slice(slice);
    }

    #[test]
    fn what_a_failed_sync_owed_is_owed_until_a_sync_writes_it() {
        let mut engine = Engine::new("node-1", IpFamily::V4);
        let config = DataplaneConfig::new(IpFamily::V4);
        let mut target = Target::new(NftSyncer::new(config, Flaky::default()));
        dns(&mut engine, "10.1.0.1", 1);
        let first = engine.update();
        target.owe(&first, plan(&first, &engine.services, &engine.endpoints), |_| true);
        target
            .sync(&engine.services, &engine.endpoints, SyncKind::Changes)
            .unwrap();

        // The endpoint is replaced while the dataplane fails: the service,
        // the stale flow and the trigger time stay owed.
        target.syncer_mut().dataplane().failing = true;
        dns(&mut engine, "10.1.0.2", 2);
        let second = engine.update();
        target.owe(&second, plan(&second, &engine.services, &engine.endpoints), |_| true);
        assert!(
            target
                .sync(&engine.services, &engine.endpoints, SyncKind::Changes)
                .is_err()
        );
        assert!(target.owes());
        assert_eq!(target.owed_services().len(), 1);

        target.syncer_mut().dataplane().failing = false;
        let nothing_new = engine.update();
        target.owe(
            &nothing_new,
            plan(&nothing_new, &engine.services, &engine.endpoints),
            |_| true,
        );
        let written = target
            .sync(&engine.services, &engine.endpoints, SyncKind::Changes)
            .unwrap();
        assert!(written.report.full, "after a failure the table is written whole");
        assert_eq!(written.services.len(), 1);
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(
            written.cleanup.deletes(ip("10.96.0.10"), 53, ip("10.1.0.1")),
            "the replaced endpoint's entries: {:?}",
            written.cleanup
        );
        assert!(!written.cleanup.deletes(ip("10.96.0.10"), 53, ip("10.1.0.2")));
        assert_eq!(written.trigger_times, [SystemTime::UNIX_EPOCH + Duration::from_secs(2)]);
        assert!(!target.owes(), "all handed over");
    }

    #[test]
    fn a_target_owes_only_what_it_serves() {
        let mut engine = Engine::new("node-1", IpFamily::V4);
        let mut target = Target::new(NftSyncer::new(DataplaneConfig::new(IpFamily::V4), Recording::default()));
        dns(&mut engine, "10.1.0.1", 1);
        let update = engine.update();
        let cleanup = plan(&update, &engine.services, &engine.endpoints);
        target.owe(&update, cleanup.only_addresses(|_| false), |s| s.name.as_ref() != "dns");
        let written = target
            .sync(&engine.services, &engine.endpoints, SyncKind::Changes)
            .unwrap();
        assert!(written.services.is_empty() && written.cleanup.is_empty() && written.trigger_times.is_empty());
    }

    /// The plans a sync made reach its reader once it succeeded, and only
    /// then: the whole table's on a full sync, the changed services' on a
    /// partial one, nothing of a failed one; only the targets kept.
    #[test]
    fn a_successful_syncs_plans_are_handed_over_once() {
        let mut engine = Engine::new("node-1", IpFamily::V4);
        let mut syncer = NftSyncer::new(DataplaneConfig::new(IpFamily::V4), Flaky::default());
        syncer.keep_plans(Box::new(|t| t.port == 53));
        let mut target = Target::new(syncer);
        let sync = |engine: &mut Engine, target: &mut Target<Flaky>| {
            let update = engine.update();
            target.owe(&update, plan(&update, &engine.services, &engine.endpoints), |_| true);
            target.sync(&engine.services, &engine.endpoints, SyncKind::Changes)
        };
        dns(&mut engine, "10.1.0.1", 1);
        let first = sync(&mut engine, &mut target).unwrap().plans.unwrap();
        assert!(first.full);
        let dns_name = ServiceName::new("ns", "dns");
        let backends = |p: &Planned| -> Vec<String> {
            p.services[&dns_name][0]
                .internal
                .backends
                .iter()
                .map(|b| b.addr.ip().to_string())
                .collect()
        };
        assert_eq!(backends(&first), ["10.1.0.1"]);
        assert!(target.syncer_mut().take_plans().is_none(), "taken once");

        target.syncer_mut().dataplane().failing = true;
        dns(&mut engine, "10.1.0.2", 2);
        assert!(sync(&mut engine, &mut target).is_err());
        assert!(
            target.syncer_mut().take_plans().is_none(),
            "a failed sync's plans are not the kernel's"
        );

        target.syncer_mut().dataplane().failing = false;
        dns(&mut engine, "10.1.0.3", 3);
        let again = sync(&mut engine, &mut target).unwrap().plans.unwrap();
        assert!(again.full, "after a failure");
        assert_eq!(backends(&again), ["10.1.0.3"]);
        dns(&mut engine, "10.1.0.4", 4);
        let partial = sync(&mut engine, &mut target).unwrap().plans.unwrap();
        assert!(!partial.full);
        assert_eq!(backends(&partial), ["10.1.0.4"]);

        // A reader that keeps no target of the service learns it has none.
        target.syncer_mut().keep_plans(Box::new(|_| false));
        dns(&mut engine, "10.1.0.5", 5);
        let none = sync(&mut engine, &mut target).unwrap().plans.unwrap();
        assert_eq!(none.services.get(&dns_name).map(Vec::len), Some(0));
    }

    /// A refused service's check is a debt like a changed service: once its
    /// wait is over the target owes a sync of changes (which checks it),
    /// though nothing else changed; the check pays it.
    #[test]
    fn a_refused_service_due_for_a_check_is_owed() {
        let mut engine = Engine::new("node-1", IpFamily::V4);
        let config = DataplaneConfig {
            refuse_for_tests: Some(ServiceName::new("ns", "dns")),
            ..DataplaneConfig::new(IpFamily::V4)
        };
        let mut target = Target::new(NftSyncer::new(config, crate::KernelModel::default()));
        dns(&mut engine, "10.1.0.1", 1);
        let update = engine.update();
        target.owe(&update, plan(&update, &engine.services, &engine.endpoints), |_| true);
        target
            .sync(&engine.services, &engine.endpoints, SyncKind::Changes)
            .unwrap();
        assert_eq!(target.syncer().refused().len(), 1, "the kernel model refuses dns");
        assert!(!target.owes(), "within its wait");
        std::thread::sleep(crate::syncer::FIRST_RECHECK + Duration::from_millis(20));
        assert!(target.owes(), "its check is due");
        target
            .sync(&engine.services, &engine.endpoints, SyncKind::Changes)
            .unwrap();
        assert_eq!(
            target.syncer().refused()[&ServiceName::new("ns", "dns")].refused_again,
            1
        );
        assert!(!target.owes(), "checked: the wait doubled");
    }
}
