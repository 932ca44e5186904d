//! Engine benchmarks: cache updates and map syncs on generated workloads.
//!
//! Run with `cargo bench -p proxyd-benches`. The `sync_one_change` group is
//! the check that a sync's cost follows the change, not the cluster size:
//! its times at 1k, 10k and 100k services should stay within 2x.

use divan::Bencher;
use endpoints_map::EndpointsMap;
use proxyd_benches::{NODE, Shape, Workload};
use slice_cache::EndpointSliceCache;
use slice_model::{EndpointSlice, IpFamily};

fn main() {
    divan::main();
}

fn load(slices: impl IntoIterator<Item = EndpointSlice>) -> EndpointSliceCache {
    let mut cache = EndpointSliceCache::new(NODE, IpFamily::V4);
    for s in slices {
        cache.update(s);
    }
    cache
}

fn loaded(shape: Shape) -> (Workload, EndpointSliceCache, EndpointsMap) {
    let mut w = Workload::new(shape);
    let mut cache = load(w.all_slices());
    let mut map = EndpointsMap::new();
    let _ = map.update(&mut cache);
    (w, cache, map)
}

/// Loading 10k services x 10 endpoints into an empty cache (updates only).
#[divan::bench(sample_count = 10)]
fn initial_load_update(b: Bencher) {
    let slices = Workload::new(Shape::new(10_000, 10)).all_slices();
    b.with_inputs(|| slices.clone()).bench_local_values(load);
}

/// The first sync after loading 10k services x 10 endpoints.
#[divan::bench(sample_count = 10)]
fn initial_load_sync(b: Bencher) {
    let slices = Workload::new(Shape::new(10_000, 10)).all_slices();
    b.with_inputs(|| (load(slices.clone()), EndpointsMap::new()))
        .bench_local_values(|(mut cache, mut map)| {
            let _ = map.update(&mut cache);
            (cache, map)
        });
}

/// Alternates between two versions of one slice: an update then a sync
/// per iteration. The slice is cloned outside the timed part.
fn bench_change(b: Bencher, versions: [EndpointSlice; 2], cache: &mut EndpointSliceCache, map: &mut EndpointsMap) {
    let mut i = 0;
    b.with_inputs(|| {
        i += 1;
        versions[i % 2].clone()
    })
    .bench_local_values(|slice| {
        cache.update(slice);
        map.update(cache)
    });
}

/// One changed slice, then a sync, on maps of 1k, 10k and 100k services of
/// 10 endpoints each.
#[divan::bench(args = [1_000, 10_000, 100_000], sample_count = 200)]
fn sync_one_change(b: Bencher, services: u32) {
    let (mut w, mut cache, mut map) = loaded(Shape::new(services, 10));
    let versions = [w.slice(services / 2, 0, 1), w.slice(services / 2, 0, 0)];
    bench_change(b, versions, &mut cache, &mut map);
}

/// One changed slice of a service of 1,000 endpoints in 10 slices, then a
/// sync (the merge of a big service).
#[divan::bench(sample_count = 200)]
fn sync_big_service_change(b: Bencher) {
    let (mut w, mut cache, mut map) = loaded(Shape::new(20, 1_000));
    let versions = [w.slice(7, 3, 1), w.slice(7, 3, 0)];
    bench_change(b, versions, &mut cache, &mut map);
}

/// An update of one slice of 100 endpoints that changes nothing (the
/// no-op check); the slice is cloned outside the timed part.
#[divan::bench(sample_count = 1000)]
fn update_noop(b: Bencher) {
    let (mut w, mut cache, _map) = loaded(Shape::new(100, 100));
    let same = w.slice(5, 0, 0);
    b.with_inputs(|| same.clone()).bench_local_values(|s| cache.update(s));
}
