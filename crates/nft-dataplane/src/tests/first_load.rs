//! The first load of a table that does not exist: short transactions, the
//! same table in the end as one transaction would give, and between any
//! two of them every service either complete or untouched.

use slice_model::{IpFamily, Protocol};

use super::support::forwarded;
use super::*;
use crate::transaction::{Op, Transaction};

/// A kernel model that keeps each transaction it commits.
#[derive(Default)]
struct Kept {
    model: KernelModel,
    applied: Vec<Transaction>,
}

impl crate::Dataplane for Kept {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, crate::DataplaneError> {
        self.applied.push(tx.clone());
        self.model.apply(tx)
    }

    fn table_exists(&mut self, family: IpFamily, table: &str) -> Option<bool> {
        self.model.table_exists(family, table)
    }
}

/// A kernel model that cannot tell whether the table exists: every full
/// sync is one transaction.
#[derive(Default)]
struct OneTransaction(KernelModel);

impl crate::Dataplane for OneTransaction {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, crate::DataplaneError> {
        self.0.apply(tx)
    }
}

fn size(tx: &Transaction) -> usize {
    tx.element_count() + tx.ops.iter().filter(|op| matches!(op, Op::AddRule(..))).count()
}

fn cluster(engine: &mut Engine) -> Vec<String> {
    let mut ips = Vec::new();
    for i in 0..300u32 {
        let name = format!("svc-{i}");
        let ip = format!("172.30.{}.{}", i / 250, i % 250 + 1);
        // Every tenth has a chain of its own (more endpoints than slots).
        let n = if i % 10 == 0 { 20 } else { 2 };
        let addrs: Vec<String> = (0..n)
            .map(|k| format!("10.{}.{}.{}", 2 + k, i / 250, i % 250 + 1))
            .collect();
        let eps: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
        engine
            .service(&service("ns", &name, &ip, 80, Protocol::Tcp))
            .slice(slice("ns", &name, Protocol::Tcp, 80, &eps));
        ips.push(ip);
    }
    ips
}

#[test]
fn a_new_tables_first_load_is_short_transactions_each_leaving_whole_services() {
    let mut engine = Engine::new(IpFamily::V4);
    let ips = cluster(&mut engine);
    let mut syncer = NftSyncer::new(config(), Kept::default());
    syncer.set_first_load_chunk(100);
    let report = sync(&mut syncer, &mut engine);
    assert!(report.full && report.services_written == 300);
    let applied = std::mem::take(&mut syncer.dataplane().applied);
    assert_eq!(report.transactions, applied.len());
    assert!(applied.len() > 5, "split: {} transactions", applied.len());
    // The biggest service here is 20 slot elements, its frontend, and its
    // chain's rules: a transaction passes the chunk by less than that.
    // Each is rules alone or elements alone: the elements need no nft.
    for tx in &applied[1..] {
        assert!(size(tx) < 100 + 30, "{} elements and rules", size(tx));
        let rules = tx.ops.iter().filter(|op| matches!(op, Op::AddRule(..))).count();
        assert!(rules == 0 || rules == tx.ops.len(), "rules among elements: {tx}");
    }
    assert!(
        applied[1..]
            .iter()
            .any(|tx| tx.ops.iter().all(|op| matches!(op, Op::AddRule(..)))),
        "the services' own chains get rules"
    );

    // The same table as one transaction.
    let mut atomic = NftSyncer::new(config(), OneTransaction::default());
    let one = sync(&mut atomic, &mut engine);
    assert_eq!(one.transactions, 1);
    assert_eq!(syncer.dataplane().model, atomic.dataplane().0);

    // After each transaction, every service answers as at the end, or as
    // with the empty skeleton (untouched); once complete it stays so.
    let probe = |k: &KernelModel, ip: &str| trace(k, forwarded(POD, ip, 80)).summary();
    let end: Vec<String> = ips.iter().map(|ip| probe(&syncer.dataplane().model, ip)).collect();
    let mut k = KernelModel::default();
    k.apply_transaction(&applied[0]).unwrap();
    let untouched: Vec<String> = ips.iter().map(|ip| probe(&k, ip)).collect();
    assert!(
        untouched.iter().zip(&end).all(|(u, e)| u != e),
        "the skeleton alone serves nothing"
    );
    let mut complete = vec![false; ips.len()];
    for tx in &applied[1..] {
        k.apply_transaction(tx).unwrap();
        for (i, ip) in ips.iter().enumerate() {
            let now = probe(&k, ip);
            if now == end[i] {
                complete[i] = true;
            } else {
                assert!(!complete[i], "{ip} went back to {now}");
                assert_eq!(now, untouched[i], "{ip} half-programmed");
            }
        }
    }
    assert!(complete.iter().all(|c| *c));
}

#[test]
fn a_table_that_exists_is_replaced_in_one_transaction() {
    let mut engine = Engine::new(IpFamily::V4);
    cluster(&mut engine);
    let mut syncer = NftSyncer::new(config(), Kept::default());
    syncer.set_first_load_chunk(100);
    sync(&mut syncer, &mut engine);
    // A restart: a new syncer over the kernel that has the table.
    let kernel = std::mem::take(&mut syncer.dataplane().model);
    let mut restarted = NftSyncer::new(
        config(),
        Kept {
            model: kernel,
            applied: Vec::new(),
        },
    );
    restarted.set_first_load_chunk(100);
    let r = sync(&mut restarted, &mut engine);
    assert!(r.full);
    assert_eq!(r.transactions, 1, "an existing table is never half replaced");
}
