//! The largest objects of each kind, both families: every transaction the
//! syncer writes for them (the full sync, and a change to each) is one
//! the kernel model accepts, and its netlink batch holds every length
//! right (read back as the kernel reads it).

#![allow(clippy::unwrap_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::BTreeSet;
use std::path::Path;

use endpoints_map::Engine;
use linux_dataplane::wire;
use nft_dataplane::{Dataplane, DataplaneError, KernelModel, NftSyncer, SyncKind, Transaction};
use proxyd::{ProxyArgs, Snapshot};
use slice_model::IpFamily;

mod common;

/// The kernel model, checking each transaction's netlink batch first.
#[derive(Default)]
struct Encoded {
    kernel: KernelModel,
    transactions: usize,
    largest: usize,
}

impl Dataplane for Encoded {
    fn apply(&mut self, tx: &Transaction) -> Result<usize, DataplaneError> {
        let bytes = wire::encode(tx)
            .map_err(|e| DataplaneError::Unencodable {
                what: e.what,
                why: e.why,
            })?
            .unwrap_or_default();
        let messages = wire::check_lengths(&bytes).map_err(|why| DataplaneError::Unencodable {
            what: "reading the batch back".into(),
            why,
        })?;
        assert!(messages >= 2, "at least the batch markers");
        self.transactions += 1;
        self.largest = self.largest.max(bytes.len());
        self.kernel.apply(tx)
    }
}

fn engine(family: IpFamily) -> (Engine, nft_dataplane::DataplaneConfig) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster");
    let m = daemon_sources::manifests::load(&path).unwrap();
    let proxy = ProxyArgs {
        ip_family: Some(family),
        cluster_cidr: vec![match family {
            IpFamily::V4 => "10.244.0.0/16".parse().unwrap(),
            IpFamily::V6 => "fd00:10:244::/56".parse().unwrap(),
        }],
        ..ProxyArgs::for_node(common::extremes::NODE)
    };
    let snapshot = Snapshot::of(m.services, m.slices);
    let engine = proxyd::snapshot_engine(&snapshot, common::extremes::NODE, &proxy);
    for x in common::extremes::largest(family) {
        engine.update_service(&x.service);
        for s in x.slices {
            engine.update_slice(s);
        }
    }
    (engine, proxyd::effective(&proxy, &snapshot.facts))
}

#[test]
fn every_transaction_of_the_largest_objects_encodes_and_is_accepted() {
    for family in [IpFamily::V4, IpFamily::V6] {
        let (mut engine, config) = engine(family);
        let mut syncer = NftSyncer::new(config, Encoded::default());
        let sync = |syncer: &mut NftSyncer<Encoded>, engine: &mut Engine| {
            let changed = engine.update().changed;
            syncer
                .sync(&engine.services, &engine.endpoints, &changed, SyncKind::Changes)
                .unwrap_or_else(|e| panic!("{family}: {e}"))
        };
        let r = sync(&mut syncer, &mut engine);
        assert!(r.full && r.refused_services == 0, "{family}: {r:?}");
        // A change to each extreme: its largest list shrinks by one.
        for x in common::extremes::largest(family) {
            let mut slice = x.slices[0].clone();
            slice.content.endpoints.pop();
            engine.update_slice(slice);
            let r = sync(&mut syncer, &mut engine);
            assert!(!r.full && r.services_written == 1, "{family}, {}: {r:?}", x.what);
        }
        // The hourly full sync over the table.
        let r = syncer
            .sync(
                &engine.services,
                &engine.endpoints,
                &BTreeSet::new(),
                SyncKind::Periodic,
            )
            .unwrap();
        assert_eq!(r.refused_transactions, 0);
        let d = syncer.dataplane();
        assert!(d.transactions >= 5, "{family}: {} transactions", d.transactions);
        assert!(
            d.largest > 1_000_000,
            "{family}: the largest batch is {} bytes",
            d.largest
        );
    }
}
