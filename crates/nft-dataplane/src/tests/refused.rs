//! A service whose rules the kernel refuses is left out and every other
//! service is programmed, in every kind of sync; it is checked again with
//! backoff or when it changes, and comes back once accepted.

use std::collections::BTreeSet;

use proptest::prelude::*;
use slice_model::{IpFamily, ServiceName};

use super::support::{forwarded, with_protocol};
use super::sync::{apply_step, every_kind, probes, step};
use super::*;
use crate::syncer::FIRST_RECHECK;
use crate::transaction::Transaction;
use crate::{Dataplane, DataplaneError};

fn web() -> ServiceName {
    ServiceName::new("ns", "web")
}

/// The kernel model, counting the checks it is asked.
#[derive(Default)]
struct Counted {
    kernel: KernelModel,
    checks: usize,
    applies_refused: usize,
}

impl Dataplane for Counted {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        self.kernel.apply(tx).inspect_err(|_| self.applies_refused += 1)
    }

    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        self.checks += 1;
        self.kernel.check(tx)
    }

    fn generation(&mut self) -> Option<u64> {
        self.kernel.generation()
    }

    fn table_exists(&mut self, family: IpFamily, table: &str) -> Option<bool> {
        self.kernel.table_exists(family, table)
    }

    fn objects(&mut self, family: IpFamily, table: &str) -> Option<Result<crate::TableObjects, DataplaneError>> {
        self.kernel.objects(family, table)
    }

    fn elements(
        &mut self,
        family: IpFamily,
        table: &str,
        set: &crate::names::SetId,
    ) -> Option<Result<Vec<crate::element::Element>, DataplaneError>> {
        self.kernel.elements(family, table, set)
    }
}

fn refusing(name: &ServiceName) -> DataplaneConfig {
    DataplaneConfig {
        refuse_for_tests: Some(name.clone()),
        ..config()
    }
}

/// What the table should hold: every service of `engine` but `left_out`,
/// as a fresh full sync writes it.
fn without(engine: &Engine, left_out: &ServiceName) -> KernelModel {
    let mut syncer = NftSyncer::new(config(), KernelModel::default());
    let left_out = left_out.clone();
    syncer.set_filter(Box::new(move |n| *n != left_out));
    syncer
        .sync(&engine.services, &engine.endpoints, &BTreeSet::new(), SyncKind::Changes)
        .expect("the model accepts every other service");
    positions_sorted(syncer.dataplane())
}

#[track_caller]
fn holds_all_but_web(syncer: &mut NftSyncer<Counted>, engine: &Engine, what: &str) {
    assert_eq!(
        syncer.refused().keys().collect::<Vec<_>>(),
        vec![&web()],
        "{what}: web is the one refused"
    );
    assert_eq!(
        positions_sorted(&syncer.dataplane().kernel),
        without(engine, &web()),
        "{what}: every other service is programmed, web is not"
    );
    let dns = trace(
        &syncer.dataplane().kernel,
        with_protocol(forwarded(POD, "172.30.0.53", 53), Protocol::Udp),
    );
    assert!(
        dns.summary().starts_with("10.1.1."),
        "{what}: another service answers: {dns:?}"
    );
    assert_eq!(
        trace(&syncer.dataplane().kernel, forwarded(POD, "172.30.0.10", 80)).summary(),
        "DROP",
        "{what}: web's cluster IP is not programmed (an unallocated address of the service CIDR)"
    );
}

#[test]
fn one_refused_service_leaves_every_other_programmed_in_every_kind_of_sync() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    engine.update();

    // The first sync of a new node: a first load.
    let mut syncer = NftSyncer::new(refusing(&web()), Counted::default());
    let r = periodic(&mut syncer, &engine).expect("the sync succeeds without web");
    assert!(r.full);
    assert_eq!(r.refused_transactions, 1, "{r:?}");
    holds_all_but_web(&mut syncer, &engine, "first load");
    let reason = &syncer.refused()[&web()].reason;
    assert!(reason.contains("ns/web/tcp/80"), "names the port: {reason}");

    // The hourly full sync: web is not written again, so nothing is refused.
    syncer.make_full_sync_due();
    let r = periodic(&mut syncer, &engine).unwrap();
    assert!(r.full);
    assert_eq!(r.refused_transactions, 0, "a known refusal is not written again");
    holds_all_but_web(&mut syncer, &engine, "hourly full sync");

    // A restart over the table: the first sync rewrites it in place.
    let kernel = syncer.dataplane().kernel.clone();
    let mut restarted = NftSyncer::new(
        refusing(&web()),
        Counted {
            kernel,
            ..Counted::default()
        },
    );
    let r = periodic(&mut restarted, &engine).unwrap();
    assert_eq!(r.refused_transactions, 1);
    holds_all_but_web(&mut restarted, &engine, "restart over the table");

    // A sync of changes that brings web in: only web stays out, and the
    // change beside it is written.
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    engine.remove_service("ns", "web");
    let mut syncer = NftSyncer::new(refusing(&web()), Counted::default());
    sync(&mut syncer, &mut engine);
    assert!(syncer.refused().is_empty());
    every_kind(&mut engine);
    engine.slice(slice("ns", "dns", Protocol::Udp, 53, &[Ep::Remote("10.1.1.9")]));
    let r = sync(&mut syncer, &mut engine);
    assert_eq!(r.refused_transactions, 1);
    holds_all_but_web(&mut syncer, &engine, "sync of changes");
    assert_eq!(
        trace(
            &syncer.dataplane().kernel,
            with_protocol(forwarded(POD, "172.30.0.53", 53), Protocol::Udp)
        )
        .summary(),
        "10.1.1.9:53"
    );
}

#[test]
fn a_refused_service_is_checked_again_with_backoff_or_when_it_changes_and_comes_back() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    engine.update();
    let mut syncer = NftSyncer::new(refusing(&web()), Counted::default());
    periodic(&mut syncer, &engine).unwrap();
    let since = syncer.refused()[&web()].since;

    // Within its wait, an unrelated change checks nothing.
    let checks = syncer.dataplane().checks;
    engine.slice(slice("ns", "dns", Protocol::Udp, 53, &[Ep::Remote("10.1.1.7")]));
    let r = sync(&mut syncer, &mut engine);
    assert!(!r.full, "a known refusal costs no full sync");
    assert_eq!(syncer.dataplane().checks, checks, "web is not due");

    // A change of web checks it at once (the fixed chains, then web), in
    // the scratch table: the kernel is asked no apply it refuses.
    engine.slice(slice("ns", "web", Protocol::Tcp, 8080, &[Ep::Remote("10.1.0.9")]));
    let refused_applies = syncer.dataplane().applies_refused;
    let r = sync(&mut syncer, &mut engine);
    assert_eq!(syncer.dataplane().checks, checks + 2);
    assert_eq!(syncer.dataplane().applies_refused, refused_applies);
    assert_eq!(r.refused_transactions, 0);
    let refusal = &syncer.refused()[&web()];
    assert_eq!((refusal.since, refusal.refused_again), (since, 1));
    assert!(
        refusal.next_check > std::time::Instant::now() + FIRST_RECHECK,
        "the wait doubled"
    );

    // Accepted again (here: the configuration no longer refuses it): web
    // is checked at the next sync, and programmed.
    assert!(syncer.reconfigure(|c| c.refuse_for_tests = None));
    let r = periodic(&mut syncer, &engine).unwrap();
    assert!(syncer.refused().is_empty());
    assert_eq!(r.refused_transactions, 0);
    assert_eq!(
        positions_sorted(&syncer.dataplane().kernel),
        positions_sorted(&fresh(&engine, &config()))
    );
    assert_eq!(
        trace(&syncer.dataplane().kernel, forwarded(POD, "172.30.0.10", 80)).summary(),
        "10.1.0.9:8080"
    );

    // A refused service that is deleted is forgotten.
    let mut syncer = NftSyncer::new(refusing(&web()), Counted::default());
    periodic(&mut syncer, &engine).unwrap();
    engine.remove_service("ns", "web");
    sync(&mut syncer, &mut engine);
    assert!(syncer.refused().is_empty());
}

#[test]
fn a_refusal_no_service_explains_is_the_syncs_error() {
    let mut engine = Engine::new(IpFamily::V4);
    every_kind(&mut engine);
    engine.update();
    // The dataplane cannot check: nothing to narrow down.
    let mut syncer = NftSyncer::new(config(), Recording::default());
    syncer.dataplane().fail_next = 1;
    assert!(periodic(&mut syncer, &engine).is_err());
    assert!(syncer.refused().is_empty());

    // The kernel refuses the table whatever services it holds: a node
    // whose table cannot be written, not a refused service.
    let mut syncer = NftSyncer::new(config(), NoTables(Counted::default()));
    assert!(periodic(&mut syncer, &engine).is_err());
    assert!(syncer.refused().is_empty());
    assert_eq!(
        syncer.dataplane().0.checks,
        1,
        "the fixed chains alone are refused: no service is checked"
    );
}

/// A kernel that refuses every table.
struct NoTables(Counted);

impl Dataplane for NoTables {
    fn apply(&mut self, _: &Transaction) -> Result<usize, DataplaneError> {
        Err(DataplaneError::Rejected {
            status: "model".into(),
            stderr: "no tables here".into(),
        })
    }

    fn check(&mut self, tx: &Transaction) -> Option<Result<(), DataplaneError>> {
        self.0.check(tx)?.ok()?;
        Some(self.apply(tx).map(drop))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// After any sequence of changes with one service the kernel refuses,
    /// every packet meets the fate a table of every other service gives
    /// it, and the sync never fails.
    #[test]
    fn with_one_service_refused_the_rest_is_what_a_fresh_sync_writes(
        refused in 0..6usize,
        steps in proptest::collection::vec(step(), 1..30),
    ) {
        let name = ServiceName::new("ns", format!("s{refused}").as_str());
        let mut engine = Engine::new(IpFamily::V4);
        let mut syncer = NftSyncer::new(refusing(&name), Counted::default());
        sync(&mut syncer, &mut engine);
        let probes = probes();
        for step in steps {
            let kind = apply_step(&mut engine, step);
            let changed = engine.update();
            let report = syncer.sync(&engine.services, &engine.endpoints, &changed, kind);
            prop_assert!(report.is_ok(), "{report:?}");
            let want = without(&engine, &name);
            for p in &probes {
                prop_assert_eq!(trace(&syncer.dataplane().kernel, *p), trace(&want, *p), "{:?}", p);
            }
            prop_assert_eq!(positions_sorted(&syncer.dataplane().kernel), want);
            let exists = engine.services.service(&name).is_some();
            prop_assert_eq!(syncer.refused().contains_key(&name), exists);
        }
    }
}
