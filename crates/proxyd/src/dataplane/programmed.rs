//! [`NftSyncer`]: keeps the kernel's table in step with the engine's maps,
//! writing only what changed.
//!
//! It remembers what it programmed, per service ([`Fragment`]s, frontend
//! owners, hairpin counts). A sync rewrites only the services the engine
//! reports as changed; the first sync, a sync after any failed apply, and
//! one per [`FULL_RESYNC_PERIOD`] replace the whole table. On a failed
//! apply the remembered view is dropped: nothing partial is trusted.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use endpoints_map::{EndpointsMap, ServicesMap};
use slice_model::ServiceName;

use super::desired::{DataplaneConfig, plan_service};
use super::fragment::{self, Frontend};
use super::nft::{self, FragmentChange};
use super::{Dataplane, DataplaneError, Fragment};

/// How often the whole table is rewritten even when nothing failed
/// (kube-proxy's nftables mode uses the same hour): it repairs element-level
/// tampering that the canary cannot see.
pub const FULL_RESYNC_PERIOD: Duration = Duration::from_secs(3600);

/// What the kernel holds, as far as proxyd knows.
#[derive(Debug, Default)]
struct Programmed {
    fragments: HashMap<ServiceName, Fragment>,
    /// Which service holds each frontend (first come, first served).
    owners: HashMap<Frontend, ServiceName>,
    /// Services that wanted a frontend another one held.
    waiting: HashMap<Frontend, BTreeSet<ServiceName>>,
    /// How many services send to each local endpoint IP.
    hairpin: HashMap<IpAddr, u32>,
}

impl Programmed {
    /// Replaces one service's fragment; returns the one it had and the
    /// services waiting for frontends it gave up.
    fn replace(
        &mut self,
        name: &ServiceName,
        build: impl FnOnce(&mut dyn FnMut(&Frontend) -> bool) -> Fragment,
    ) -> (Option<Fragment>, Vec<ServiceName>) {
        let old = self.fragments.remove(name);
        if let Some(o) = &old {
            for f in &o.frontends {
                if self.owners.get(f) == Some(name) {
                    self.owners.remove(f);
                }
            }
            for f in &o.blocked {
                if let Some(w) = self.waiting.get_mut(f) {
                    w.remove(name);
                    if w.is_empty() {
                        self.waiting.remove(f);
                    }
                }
            }
            for ip in &o.hairpin {
                if let Some(n) = self.hairpin.get_mut(ip) {
                    *n -= 1;
                    if *n == 0 {
                        self.hairpin.remove(ip);
                    }
                }
            }
        }
        let mut blocked = Vec::new();
        let owners = &mut self.owners;
        let mut claim = |f: &Frontend| match owners.get(f) {
            Some(other) if other != name => {
                tracing::warn!(
                    service = %name,
                    "{f} is already used by service {other}; this service's use of it waits until it is free"
                );
                blocked.push(*f);
                false
            }
            _ => {
                owners.insert(*f, name.clone());
                true
            }
        };
        let mut new = build(&mut claim);
        new.blocked = blocked;
        for f in &new.blocked {
            self.waiting.entry(*f).or_default().insert(name.clone());
        }
        for ip in &new.hairpin {
            *self.hairpin.entry(*ip).or_default() += 1;
        }
        let mut wake = Vec::new();
        if let Some(o) = &old {
            for f in o.frontends.iter().filter(|f| !self.owners.contains_key(f)) {
                wake.extend(self.waiting.get(f).into_iter().flatten().cloned());
            }
        }
        if !new.is_empty() {
            self.fragments.insert(name.clone(), new);
        }
        (old, wake)
    }
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The whole table was replaced.
    pub full: bool,
    /// Services whose rules were written (all of them in a full sync).
    pub services_written: usize,
    /// Size of the nft transaction.
    pub script_bytes: usize,
    /// Time to decide what to write (and, in a partial sync, to render it).
    pub render: Duration,
    /// Time to apply: `nft` (and, in a full sync, rendering the text as
    /// it streams to nft).
    pub apply: Duration,
}

/// Why a sync is happening.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Something changed.
    Changes,
    /// The periodic sync: also re-assert the fixed skeleton.
    Periodic,
}

/// Renders and applies the table for one IP family.
pub struct NftSyncer<D> {
    config: DataplaneConfig,
    dataplane: D,
    view: Option<Programmed>,
    last_full: Option<Instant>,
}

impl<D: Dataplane> NftSyncer<D> {
    /// A syncer whose first sync is a full one.
    pub fn new(config: DataplaneConfig, dataplane: D) -> Self {
        Self {
            config,
            dataplane,
            view: None,
            last_full: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DataplaneConfig {
        &self.config
    }

    /// The dataplane (tests read a [`super::Recording`] through it).
    pub fn dataplane(&mut self) -> &mut D {
        &mut self.dataplane
    }

    /// Whether the next sync will replace the whole table.
    pub fn needs_full_sync(&self) -> bool {
        self.view.is_none() || self.last_full.is_none_or(|t| t.elapsed() >= FULL_RESYNC_PERIOD)
    }

    /// Brings the table in line with the maps. `changed` are the services
    /// whose ports or endpoints changed since the last successful sync
    /// (ignored by a full sync, which writes everything).
    pub fn sync(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> Result<SyncReport, DataplaneError> {
        let started = Instant::now();
        if self.needs_full_sync() {
            return self.sync_full(services, endpoints, started);
        }
        let (script, written) = self.render_partial(services, endpoints, changed, kind);
        let render = started.elapsed();
        if written == 0 && kind == SyncKind::Changes {
            // Nothing to write: don't spend an nft run on the canary alone.
            return Ok(SyncReport {
                render,
                ..SyncReport::default()
            });
        }
        let applied = Instant::now();
        let result = self.dataplane.apply(&script);
        self.report(result.map(|()| script.len()), false, written, render, applied)
    }

    /// Replaces the table: the view is built first, then its text is
    /// rendered as it is applied (see [`Dataplane::apply_rendered`]).
    fn sync_full(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        started: Instant,
    ) -> Result<SyncReport, DataplaneError> {
        let view = self.build_full(services, endpoints);
        let mut names: Vec<&ServiceName> = view.fragments.keys().collect();
        names.sort_unstable();
        let hairpin = sorted(view.hairpin.keys().copied());
        let render = started.elapsed();
        let applied = Instant::now();
        let config = &self.config;
        let result = self.dataplane.apply_rendered(&mut |out| {
            nft::write_full(
                out,
                config,
                names.iter().filter_map(|n| view.fragments.get(*n)),
                hairpin.iter().copied(),
            )
        });
        let written = view.fragments.len();
        self.view = Some(view);
        self.report(result, true, written, render, applied)
    }

    fn report(
        &mut self,
        result: Result<usize, DataplaneError>,
        full: bool,
        written: usize,
        render: Duration,
        applied: Instant,
    ) -> Result<SyncReport, DataplaneError> {
        let apply = applied.elapsed();
        match result {
            Ok(script_bytes) => {
                if full {
                    self.last_full = Some(Instant::now());
                }
                Ok(SyncReport {
                    full,
                    services_written: written,
                    script_bytes,
                    render,
                    apply,
                })
            }
            Err(e) => {
                // The kernel kept its old state (one transaction), which
                // no longer matches the view: forget it.
                self.view = None;
                Err(e)
            }
        }
    }

    fn build_full(&self, services: &ServicesMap, endpoints: &EndpointsMap) -> Programmed {
        let mut view = Programmed::default();
        let mut names: Vec<&ServiceName> = services.iter().map(|p| &p.name.service).collect();
        names.dedup();
        for name in names {
            let targets = plan_service(name, services, endpoints, &self.config);
            view.replace(name, |claim| fragment::build(&targets, &self.config, claim));
        }
        view
    }

    fn render_partial(
        &mut self,
        services: &ServicesMap,
        endpoints: &EndpointsMap,
        changed: &BTreeSet<ServiceName>,
        kind: SyncKind,
    ) -> (String, usize) {
        let config = &self.config;
        let Some(view) = self.view.as_mut() else {
            return (String::new(), 0);
        };
        let hairpin_before = view.hairpin.clone();
        // What the kernel holds for each service touched, before this sync.
        let mut originals: HashMap<ServiceName, Option<Fragment>> = HashMap::new();
        let mut queue: Vec<ServiceName> = changed.iter().rev().cloned().collect();
        let mut rounds = 0usize;
        while let Some(name) = queue.pop() {
            rounds += 1;
            if rounds > 4 * (changed.len() + view.waiting.len()) + 16 {
                break; // cannot happen: each wake-up needs a freed frontend
            }
            let targets = plan_service(&name, services, endpoints, config);
            let (old, wake) = view.replace(&name, |claim| fragment::build(&targets, config, claim));
            originals.entry(name).or_insert(old);
            queue.extend(wake);
        }
        let mut names: Vec<&ServiceName> = originals.keys().collect();
        names.sort_unstable();
        let changes: Vec<FragmentChange<'_>> = names
            .iter()
            .map(|n| FragmentChange {
                old: originals.get(*n).and_then(Option::as_ref),
                new: view.fragments.get(*n),
            })
            .collect();
        let added = sorted(
            view.hairpin
                .keys()
                .filter(|ip| !hairpin_before.contains_key(ip))
                .copied(),
        );
        let removed = sorted(
            hairpin_before
                .keys()
                .filter(|ip| !view.hairpin.contains_key(ip))
                .copied(),
        );
        let script = nft::render_partial(config, &changes, &added, &removed, kind == SyncKind::Periodic);
        (script, changes.iter().filter(|c| c.old != c.new).count())
    }
}

fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort_unstable();
    v
}
