//! Full syncs over a kernel: the first load of a table that does not exist
//! (short transactions, the same table in the end as one transaction would
//! give, and between any two of them every service either complete or
//! untouched), and a restart over an existing table (rewritten in place
//! when it can be read and trusted, replaced whole otherwise).

use slice_model::{IpFamily, Protocol};

use super::support::forwarded;
use super::*;
use crate::lock_cost::LockCost;
use crate::names::{ChainId, SetId};
use crate::transaction::{Op, Transaction};

/// A kernel model that keeps each transaction it commits; it reads the
/// table back only when `readable`, and then also reports a chain named
/// `foreign` when one is given (one proxyd does not name).
#[derive(Default)]
struct Kept {
    model: KernelModel,
    applied: Vec<Transaction>,
    readable: bool,
    /// Its sets' elements can be read back too.
    elements_readable: bool,
    foreign: Option<String>,
    /// Sets whose elements were read.
    element_reads: usize,
}

impl crate::Dataplane for Kept {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, crate::DataplaneError> {
        self.applied.push(tx.clone());
        self.model.apply(tx)
    }

    fn generation(&mut self) -> Option<u64> {
        self.model.generation().filter(|_| self.readable)
    }

    fn table_exists(&mut self, family: IpFamily, table: &str) -> Option<bool> {
        self.model.table_exists(family, table)
    }

    fn objects(&mut self, family: IpFamily, table: &str) -> Option<Result<crate::TableObjects, crate::DataplaneError>> {
        let mut read = self.model.objects(family, table).filter(|_| self.readable)?;
        if let (Ok(objects), Some(name)) = (&mut read, &self.foreign) {
            objects.chains.push((name.clone(), 0));
        }
        Some(read)
    }

    fn elements(
        &mut self,
        family: IpFamily,
        table: &str,
        set: &crate::names::SetId,
    ) -> Option<Result<Vec<crate::element::Element>, crate::DataplaneError>> {
        self.element_reads += 1;
        self.model
            .elements(family, table, set)
            .filter(|_| self.elements_readable)
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
        let ip = format!("172.20.{}.{}", i / 250, i % 250 + 1);
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
    // Each holds elements alone or none: the elements need no nft.
    for tx in &applied[1..] {
        assert!(size(tx) < 100 + 30, "{} elements and rules", size(tx));
        let adds = tx.ops.iter().filter(|op| matches!(op, Op::AddElements(..))).count();
        assert!(adds == 0 || adds == tx.ops.len(), "elements among rules: {tx}");
    }
    assert!(
        applied[1..]
            .iter()
            .any(|tx| tx.ops.iter().any(|op| matches!(op, Op::AddRule(..)))),
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

/// Each set a table holds makes every later lookup of a set by name
/// longer: as a first load declares services' own sets, it puts fewer of
/// them in each transaction, so that none costs more than the chunk
/// (the cost of one service aside), and the table is the same.
#[test]
fn a_first_load_puts_fewer_sets_in_each_transaction_as_the_table_fills() {
    let mut engine = Engine::new(IpFamily::V4);
    for i in 0..600u32 {
        let name = format!("svc-{i}");
        let ip = format!("172.20.{}.{}", i / 250, i % 250 + 1);
        // Affinity: a set and a map per port, a chain per endpoint.
        let addrs: Vec<String> = (0..2)
            .map(|k| format!("10.{}.{}.{}", 2 + k, i / 250, i % 250 + 1))
            .collect();
        let eps: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
        engine
            .service(&affinity(service("ns", &name, &ip, 80, Protocol::Tcp), 60))
            .slice(slice("ns", &name, Protocol::Tcp, 80, &eps));
    }
    let chunk = 2_000;
    let mut syncer = NftSyncer::new(config(), Kept::default());
    syncer.set_first_load_chunk(chunk);
    sync(&mut syncer, &mut engine);
    let applied = std::mem::take(&mut syncer.dataplane().applied);

    // What each transaction cost, replayed in order over a table that
    // grows as they declare sets.
    let mut cost = LockCost::with_sets(0);
    applied[0].ops.iter().for_each(|op| {
        cost.charge(op);
    });
    // A transaction passes the chunk by the cost of the service that
    // reached it (2 sets each here; a later one costs more than the
    // transaction's mean, as the sets grow with each).
    let mut declared_per_rules_tx = Vec::new();
    for tx in &applied[1..] {
        let total: usize = tx.ops.iter().map(|op| cost.charge(op)).sum();
        let declared = tx.ops.iter().filter(|op| matches!(op, Op::AddSet(..))).count();
        let services = (declared / 2).max(1);
        if declared > 0 {
            declared_per_rules_tx.push(declared);
        }
        assert!(
            total < chunk + 2 * total / services,
            "{total} against a chunk of {chunk}: {declared} sets declared"
        );
    }
    let (first, last) = (
        declared_per_rules_tx[0],
        declared_per_rules_tx[declared_per_rules_tx.len() - 2],
    );
    assert!(last < first, "sets declared per transaction: {declared_per_rules_tx:?}");

    let mut atomic = NftSyncer::new(config(), OneTransaction::default());
    sync(&mut atomic, &mut engine);
    assert_eq!(syncer.dataplane().model, atomic.dataplane().0);
}

/// One affinity port of thousands of endpoints (a chain and two rules per
/// endpoint) is cut over several transactions of a first load, none
/// costing more than the chunk and one operation; the service is not
/// reached before all of it is there, and the table is what one
/// transaction gives.
#[test]
fn a_service_larger_than_a_transaction_is_cut_between_its_operations() {
    let mut engine = Engine::new(IpFamily::V4);
    let addrs: Vec<String> = (0..2_000u32)
        .map(|k| format!("10.2.{}.{}", k / 250, k % 250 + 1))
        .collect();
    let eps: Vec<Ep<'_>> = addrs.iter().map(|a| Ep::Remote(a)).collect();
    engine
        .service(&affinity(service("ns", "sticky", "172.30.0.9", 80, Protocol::Tcp), 60))
        .slice(slice("ns", "sticky", Protocol::Tcp, 80, &eps));
    let chunk = 5_000;
    let mut syncer = NftSyncer::new(config(), Kept::default());
    syncer.set_first_load_chunk(chunk);
    sync(&mut syncer, &mut engine);
    let applied = std::mem::take(&mut syncer.dataplane().applied);
    assert!(applied.len() > 5, "{} transactions", applied.len());
    let mut cost = LockCost::with_sets(0);
    let mut k = KernelModel::default();
    let probe = |k: &KernelModel| trace(k, forwarded(POD, "172.30.0.9", 80)).summary();
    let mut untouched = None;
    for tx in &applied {
        let costs: Vec<usize> = tx.ops.iter().map(|op| cost.charge(op)).collect();
        let (total, largest) = (costs.iter().sum::<usize>(), costs.iter().max().copied().unwrap_or(0));
        assert!(total <= chunk + largest, "{total} against a chunk of {chunk}");
        k.apply_transaction(tx).unwrap();
        let now = probe(&k);
        let before = untouched.get_or_insert_with(|| now.clone());
        if !std::ptr::eq(tx, applied.last().unwrap()) {
            assert_eq!(&now, before, "not reached before it is complete");
        }
    }
    assert_ne!(probe(&k), untouched.unwrap(), "reached at the end");
    let mut atomic = NftSyncer::new(config(), OneTransaction::default());
    sync(&mut atomic, &mut engine);
    assert_eq!(syncer.dataplane().model, atomic.dataplane().0);
}

/// A syncer restarted over `kernel`: a new one, remembering nothing.
/// A kernel whose table holds the test cluster and every kind of service,
/// as `engine` now does, and the cluster's service IPs.
fn loaded(engine: &mut Engine) -> (KernelModel, Vec<String>) {
    let ips = cluster(engine);
    super::sync::every_kind(engine);
    let mut first = NftSyncer::new(config(), Kept::default());
    sync(&mut first, engine);
    (first.dataplane().model.clone(), ips)
}

fn restarted(kernel: &KernelModel, readable: bool) -> NftSyncer<Kept> {
    restarted_reading(kernel, readable, readable)
}

/// A syncer after a restart over `kernel`'s table, which it can read back
/// (`readable`), and its sets' elements too (`elements_readable`).
fn restarted_reading(kernel: &KernelModel, readable: bool, elements_readable: bool) -> NftSyncer<Kept> {
    let mut syncer = NftSyncer::new(
        config(),
        Kept {
            model: kernel.clone(),
            applied: Vec::new(),
            readable,
            elements_readable,
            foreign: None,
            element_reads: 0,
        },
    );
    syncer.set_first_load_chunk(100);
    syncer
}

fn replaces_the_table(tx: &Transaction) -> bool {
    tx.ops.iter().any(|op| matches!(op, Op::DeleteTable(_)))
}

#[test]
fn a_restart_rewrites_its_own_table_in_place_and_no_service_is_ever_without_rules() {
    // With the sets' elements read back (only what differs is written) and
    // without (every set emptied and refilled at once).
    for elements_readable in [true, false] {
        restart_in_place(elements_readable);
    }
}

fn restart_in_place(elements_readable: bool) {
    let mut engine = Engine::new(IpFamily::V4);
    let (kernel, ips) = loaded(&mut engine);
    let probe = |k: &KernelModel, ip: &str| trace(k, forwarded(POD, ip, 80)).summary();
    let before: Vec<String> = ips.iter().map(|ip| probe(&kernel, ip)).collect();

    // While it was down: services with chains and sets of their own went
    // away (affinity, more endpoints than slots), one came, one's
    // endpoints changed.
    engine.remove_service("ns", "sticky");
    engine.remove_service("ns", "big");
    engine.remove_service("ns", "svc-10");
    engine
        .service(&service("ns", "new", "172.30.9.1", 80, Protocol::Tcp))
        .slice(slice("ns", "new", Protocol::Tcp, 80, &[Ep::Remote("10.9.0.1")]));
    engine.slice(slice("ns", "svc-7", Protocol::Tcp, 80, &[Ep::Remote("10.9.7.1")]));
    engine.update();

    let mut syncer = restarted_reading(&kernel, true, elements_readable);
    let r = sync(&mut syncer, &mut engine);
    assert!(r.full && r.transactions >= 4, "{r:?}");
    let applied = std::mem::take(&mut syncer.dataplane().applied);
    assert!(!applied.iter().any(replaces_the_table), "rewritten in place");
    assert_eq!(
        syncer.dataplane().model,
        fresh(&engine, &config()),
        "the same table as a fresh one"
    );
    let model = &syncer.dataplane().model;
    let table = model.table(IpFamily::V4).expect("the table");
    assert!(
        !table
            .chains
            .keys()
            .any(|c| c.to_string().contains("sticky") || c.to_string().contains("/big/"))
    );
    assert!(!table.sets.keys().any(|s| s.to_string().contains("sticky")));
    // Of the services' chains, only those whose rules changed while it was
    // down are written (the rules' digests tell which the table holds).
    let fixed: std::collections::BTreeSet<ChainId> =
        crate::skeleton::chains(&config()).into_iter().map(|(c, _)| c).collect();
    let written: std::collections::BTreeSet<ChainId> = applied
        .iter()
        .flat_map(|tx| &tx.ops)
        .filter_map(|op| match op {
            Op::AddRule(c, _) | Op::FlushChain(c) => Some(c.clone()),
            _ => None,
        })
        .filter(|c| !fixed.contains(c) && table.chains.contains_key(c))
        .collect();
    let held = &kernel.table(IpFamily::V4).expect("the old table").chains;
    let differ: std::collections::BTreeSet<ChainId> = table
        .chains
        .iter()
        .filter(|(c, rules)| !fixed.contains(c) && held.get(*c) != Some(*rules))
        .map(|(c, _)| c.clone())
        .collect();
    assert!(
        table.chains.len() > fixed.len() + 5,
        "services have chains of their own"
    );
    assert_eq!(written, differ, "the chains written are those that changed");

    // After each transaction, every service that was there before and is
    // still there answers as before or as at the end.
    let end: Vec<String> = ips.iter().map(|ip| probe(model, ip)).collect();
    let mut k = kernel.clone();
    for tx in &applied {
        k.apply_transaction(tx).expect("each transaction commits");
        for (i, ip) in ips.iter().enumerate().filter(|(i, _)| *i != 10) {
            let now = probe(&k, ip);
            assert!(
                now == before[i] || now == end[i],
                "{ip}: {now} (before {}, after {})",
                before[i],
                end[i]
            );
        }
    }
    // No transaction but the elements' own holds the ruleset: the rules
    // come a few services at a time.
    let rules_per_tx = applied
        .iter()
        .map(|tx| tx.ops.iter().filter(|op| matches!(op, Op::AddRule(..))).count())
        .max();
    assert!(rules_per_tx < Some(100 + 30), "{rules_per_tx:?}");
    let elements: Vec<usize> = applied.iter().map(Transaction::element_count).collect();
    if elements_readable {
        // Only what changed while it was down is written, a few services
        // per transaction: the slot maps too, whose values are not read
        // back but known from their frontends' digests.
        assert!(elements.iter().all(|n| *n < 100 + 30), "{elements:?}");
        let in_slot_maps: usize = applied
            .iter()
            .flat_map(|tx| &tx.ops)
            .map(|op| match op {
                Op::AddElements(set, e) | Op::DeleteElements(set, e) if is_slot_map(set) => e.len(),
                _ => 0,
            })
            .sum();
        let written: usize = elements.iter().sum();
        assert!(
            written < 100 && in_slot_maps < 20,
            "{written} elements written for 5 changed services, {in_slot_maps} of them slots"
        );
    } else {
        assert!(
            elements.iter().any(|n| *n > 300),
            "one refill of every set: {elements:?}"
        );
    }
}

/// A restart reads its table while the lists arrive
/// ([`NftSyncer::read_ahead`]): the first sync then reads nothing more and
/// writes what it would have written reading the table itself. A commit in
/// between (someone else's) makes the first sync read the table again.
#[test]
fn a_table_read_ahead_is_used_unless_something_committed_since() {
    let mut engine = Engine::new(IpFamily::V4);
    let (kernel, _) = loaded(&mut engine);
    // While it was down: a service went away, one's endpoints changed.
    engine.remove_service("ns", "sticky");
    engine.slice(slice("ns", "svc-7", Protocol::Tcp, 80, &[Ep::Remote("10.9.7.1")]));
    engine.update();

    let mut reading_itself = restarted(&kernel, true);
    sync(&mut reading_itself, &mut engine);
    let mut ahead = restarted(&kernel, true);
    ahead.read_ahead();
    let read = ahead.dataplane().element_reads;
    assert!(read > 10, "every set read ahead: {read}");
    let r = sync(&mut ahead, &mut engine);
    assert!(
        r.full && !ahead.dataplane().applied.iter().any(replaces_the_table),
        "in place"
    );
    assert_eq!(ahead.dataplane().element_reads, read, "nothing read again");
    // (Elements come in hash order within a set: compare the sizes.)
    let sizes = |applied: &[Transaction]| -> Vec<(usize, usize)> {
        applied.iter().map(|tx| (tx.ops.len(), tx.element_count())).collect()
    };
    assert_eq!(
        sizes(&ahead.dataplane().applied),
        sizes(&reading_itself.dataplane().applied),
        "the same transactions"
    );
    assert_eq!(ahead.dataplane().model, fresh(&engine, &config()));

    // Someone deletes an element the table needs after the read-ahead.
    let mut ahead = restarted(&kernel, true);
    ahead.read_ahead();
    let read = ahead.dataplane().element_reads;
    let table = kernel.table(IpFamily::V4).expect("the table");
    let (set, key) = table
        .sets
        .iter()
        .filter(|(s, _)| matches!(s, SetId::ClusterIps))
        .find_map(|(s, held)| held.keys().next().map(|k| (s.clone(), *k)))
        .expect("a service's cluster IP");
    let mut tamper = Transaction::new(IpFamily::V4);
    tamper
        .ops
        .push(Op::DeleteElements(set, vec![crate::element::Element::key(key)]));
    ahead
        .dataplane()
        .model
        .apply_transaction(&tamper)
        .expect("the tamper commits");
    sync(&mut ahead, &mut engine);
    assert!(ahead.dataplane().element_reads > read, "read again");
    assert_eq!(
        ahead.dataplane().model,
        fresh(&engine, &config()),
        "the deleted element is back"
    );
}

#[test]
fn a_table_it_cannot_read_or_trust_is_replaced_in_one_transaction() {
    let mut engine = Engine::new(IpFamily::V4);
    cluster(&mut engine);
    let mut first = NftSyncer::new(config(), Kept::default());
    sync(&mut first, &mut engine);
    let kernel = first.dataplane().model.clone();
    let one_replacement = |kernel: &KernelModel, readable: bool, engine: &mut Engine| {
        let mut syncer = restarted(kernel, readable);
        let r = sync(&mut syncer, engine);
        assert_eq!(syncer.dataplane().model, fresh(engine, &config()));
        r.full && r.transactions == 1 && replaces_the_table(&syncer.dataplane().applied[0])
    };
    assert!(
        !one_replacement(&kernel, true, &mut engine),
        "readable and intact: in place"
    );
    assert!(one_replacement(&kernel, false, &mut engine), "unreadable");
    // A slot chain someone flushed: nft cannot refill it in place.
    let mut damaged = kernel.clone();
    if let Some(t) = damaged.tables.get_mut(&IpFamily::V4) {
        t.chains.insert(crate::names::ChainId::ServiceSlots(2), Vec::new());
    }
    assert!(one_replacement(&damaged, true, &mut engine), "a damaged slot chain");
    // A table of another shape: no canary of this one.
    let mut older = kernel.clone();
    if let Some(t) = older.tables.get_mut(&IpFamily::V4) {
        t.sets.remove(&crate::names::SetId::Canary);
    }
    assert!(one_replacement(&older, true, &mut engine), "another shape");
    // A chain of proxyd's that no service wants: deleted in place.
    let mut unwanted = kernel.clone();
    if let Some(t) = unwanted.tables.get_mut(&IpFamily::V4) {
        t.chains.insert(crate::names::ChainId::Svc(String::new()), Vec::new());
    }
    let mut syncer = restarted(&unwanted, true);
    let r = sync(&mut syncer, &mut engine);
    assert!(r.transactions > 1 && !syncer.dataplane().applied.iter().any(replaces_the_table));
    assert_eq!(
        syncer.dataplane().model,
        fresh(&engine, &config()),
        "an unwanted chain is deleted"
    );
    // Something proxyd did not name: it cannot tell what that is for.
    let mut syncer = restarted(&kernel, true);
    syncer.dataplane().foreign = Some("KUBE-SERVICES".into());
    let r = sync(&mut syncer, &mut engine);
    assert!(r.full && r.transactions == 1 && replaces_the_table(&syncer.dataplane().applied[0]));
}

#[test]
fn after_a_failed_apply_the_next_full_sync_replaces_the_table() {
    let mut engine = Engine::new(IpFamily::V4);
    cluster(&mut engine);
    let mut syncer = NftSyncer::new(
        config(),
        Kept {
            readable: true,
            ..Kept::default()
        },
    );
    sync(&mut syncer, &mut engine);
    // Someone deletes the table: the next partial sync fails.
    let saved = std::mem::take(&mut syncer.dataplane().model.tables);
    engine.slice(slice("ns", "svc-1", Protocol::Tcp, 80, &[Ep::Remote("10.9.1.1")]));
    let changed = engine.update();
    assert!(
        syncer
            .sync(&engine.services, &engine.endpoints, &changed, crate::SyncKind::Changes)
            .is_err()
    );
    // It comes back as it was, looking like this shape's: after a failure
    // nothing in it is trusted all the same.
    syncer.dataplane().model.tables = saved;
    syncer.dataplane().applied.clear();
    let r = sync(&mut syncer, &mut engine);
    assert!(r.full && r.transactions == 1 && replaces_the_table(&syncer.dataplane().applied[0]));
    assert_eq!(syncer.dataplane().model, fresh(&engine, &config()));
}

/// A restart's first sync leaves the chains whose rules' digests are those
/// it would write; a chain changed from outside (another rule, so another
/// digest) is written again; the periodic full sync trusts no digest and
/// writes every chain.
#[test]
fn a_restart_leaves_the_chains_the_table_holds_and_the_periodic_sync_writes_all() {
    let mut engine = Engine::new(IpFamily::V4);
    let (mut kernel, _) = loaded(&mut engine);
    let fixed: std::collections::BTreeSet<ChainId> =
        crate::skeleton::chains(&config()).into_iter().map(|(c, _)| c).collect();
    let table = kernel.table(IpFamily::V4).expect("the table");
    let services_chains: Vec<ChainId> = table.chains.keys().filter(|c| !fixed.contains(*c)).cloned().collect();
    // Someone rewrites one service chain with a rule of its own.
    let (victim, rules) = table
        .chains
        .iter()
        .find(|(c, rules)| !fixed.contains(*c) && !rules.is_empty())
        .map(|(c, r)| (c.clone(), r.clone()))
        .expect("a service chain with rules");
    let mut tamper = Transaction::new(IpFamily::V4);
    tamper.ops.push(Op::FlushChain(victim.clone()));
    tamper.ops.push(Op::AddRule(
        victim.clone(),
        crate::rule::Rule::always(vec![crate::rule::Statement::Drop]),
    ));
    kernel.apply_transaction(&tamper).expect("the tamper commits");

    let chains_written = |applied: &[Transaction]| -> std::collections::BTreeSet<ChainId> {
        applied
            .iter()
            .flat_map(|tx| &tx.ops)
            .filter_map(|op| match op {
                Op::AddRule(c, _) => Some(c.clone()),
                _ => None,
            })
            .filter(|c| !fixed.contains(c))
            .collect()
    };
    let mut syncer = restarted(&kernel, true);
    sync(&mut syncer, &mut engine);
    assert_eq!(
        chains_written(&syncer.dataplane().applied),
        std::collections::BTreeSet::from([victim.clone()]),
        "only the chain changed from outside"
    );
    let model = &syncer.dataplane().model;
    assert_eq!(*model, fresh(&engine, &config()));
    assert_eq!(model.table(IpFamily::V4).expect("the table").chains[&victim], rules);
    let slots_held: usize = model
        .table(IpFamily::V4)
        .expect("the table")
        .sets
        .iter()
        .filter(|(s, _)| is_slot_map(s))
        .map(|(_, held)| held.len())
        .sum();
    assert!(slots_held > 10, "the cluster has slot services");
    assert_eq!(
        slots_added(&syncer.dataplane().applied),
        0,
        "the slots' digests are trusted"
    );

    syncer.dataplane().applied.clear();
    syncer.make_full_sync_due();
    let r = super::periodic(&mut syncer, &engine).expect("the periodic full sync");
    assert!(r.full);
    let with_rules: std::collections::BTreeSet<ChainId> = services_chains
        .into_iter()
        .filter(|c| !model_rules_empty(&syncer.dataplane().model, c))
        .collect();
    assert_eq!(chains_written(&syncer.dataplane().applied), with_rules, "every chain");
    assert_eq!(slots_added(&syncer.dataplane().applied), slots_held, "every slot");
}

fn is_slot_map(set: &SetId) -> bool {
    matches!(set, SetId::ServiceSlots(_) | SetId::NodePortSlots(_))
}

/// The slot-map elements `applied` added.
fn slots_added(applied: &[Transaction]) -> usize {
    applied
        .iter()
        .flat_map(|tx| &tx.ops)
        .map(|op| match op {
            Op::AddElements(set, e) if is_slot_map(set) => e.len(),
            _ => 0,
        })
        .sum()
}

fn model_rules_empty(model: &KernelModel, chain: &ChainId) -> bool {
    model
        .table(IpFamily::V4)
        .and_then(|t| t.chains.get(chain))
        .is_none_or(Vec::is_empty)
}
