//! Manifest files as the source of Services, EndpointSlices, Pods, this
//! Node and ServiceCIDRs, in place of the watches: the files are polled, and each complete, valid read is handed to the handlers as
//! a relist (vanished objects become deletes, changed ones updates).
//!
//! A read is checked whole before anything is handed over, so a broken or
//! half-written file changes nothing; the objects are then converted again
//! one at a time as they are handed over, so memory never holds a
//! cluster's worth of typed objects (see [`crate::manifests`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;

use crate::manifests::{self, ManifestError, Object, Summary, Texts};
use informer_glue::SliceCacheHandler;
use informer_glue::fold::{EventFold, EventHandler};
use informer_glue::multus::PodHandler;
use informer_glue::node::ThisNode;
use informer_glue::selection::Selection;
use informer_glue::tombstone::{SlimServices, SlimSlices};

/// How often the files are checked for changes.
const POLL: Duration = Duration::from_secs(1);

type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// One read of the files: what they looked like, and their checked text.
pub struct Read {
    fingerprint: Fingerprint,
    result: Result<(Texts, Summary), ManifestError>,
}

impl Read {
    /// Reads and checks every file under `path`.
    pub fn new(path: &Path) -> Self {
        Self::after(path, manifests::fingerprint(path))
    }

    /// Reads and checks the files, which looked like `fingerprint` just
    /// before: taken first, an edit during the read shows as a new
    /// fingerprint at the next poll.
    fn after(path: &Path, fingerprint: Fingerprint) -> Self {
        let result = Texts::read(path).and_then(|texts| {
            let summary = texts.check()?;
            Ok((texts, summary))
        });
        Self { fingerprint, result }
    }

    /// Why the read is not valid.
    pub fn error(&self) -> Option<&ManifestError> {
        self.result.as_ref().err()
    }
}

/// The handler of Services (the engine's, or in multus mode one that also
/// records each service's network).
pub type ServiceSink = Box<dyn EventHandler<Service> + Send>;

/// The handlers the files feed, and their folds.
pub struct Sink {
    slices: SliceCacheHandler,
    slice_fold: EventFold<EndpointSlice, SlimSlices>,
    store: ServiceSink,
    service_fold: EventFold<Service, SlimServices>,
    /// Multus mode: this node's pods.
    pods: Option<(PodHandler, EventFold<Pod>)>,
    /// This node's zone and eligibility, from its Node in the files.
    this_node: Option<ThisNode>,
    /// The ServiceCIDRs' ranges in the files (none when the ranges are
    /// given otherwise).
    service_cidrs: Option<ThisNode>,
}

impl Sink {
    /// Handlers fed with what `selection` selects.
    pub fn new(
        selection: Selection,
        slices: SliceCacheHandler,
        store: ServiceSink,
        pods: Option<PodHandler>,
        this_node: Option<ThisNode>,
        service_cidrs: Option<ThisNode>,
    ) -> Self {
        let sel = selection.clone();
        Self {
            slices,
            slice_fold: EventFold::with_selection(move |s| sel.selects_slice(s)).keeping(SlimSlices),
            store,
            service_fold: EventFold::with_selection(move |s| selection.selects_service(s)).keeping(SlimServices),
            pods: pods.map(|h| (h, EventFold::new())),
            this_node,
            service_cidrs,
        }
    }

    fn hand_over(&mut self, texts: &Texts) -> Result<(), ManifestError> {
        self.service_fold.apply(Event::Init, &mut self.store);
        self.slice_fold.apply(Event::Init, &mut self.slices);
        if let Some((handler, fold)) = &mut self.pods {
            fold.apply(Event::Init, handler);
        }
        texts.for_each(|object| match object {
            Object::Service(s) => self.service_fold.apply(Event::InitApply(*s), &mut self.store),
            Object::Slice(s) => self.slice_fold.apply(Event::InitApply(*s), &mut self.slices),
            Object::Pod(p) => {
                if let Some((handler, fold)) = &mut self.pods {
                    fold.apply(Event::InitApply(*p), handler);
                }
            }
            Object::Node(_) | Object::ServiceCidr(_) | Object::Skipped(_) => {}
        })?;
        // A failure above leaves the lists open: the next read's `Init`
        // abandons them, and nothing was deleted.
        self.service_fold.apply(Event::InitDone, &mut self.store);
        self.slice_fold.apply(Event::InitDone, &mut self.slices);
        if let Some((handler, fold)) = &mut self.pods {
            fold.apply(Event::InitDone, handler);
        }
        Ok(())
    }

    fn take(&mut self, path: &Path, read: Read) {
        match read.result {
            Ok((texts, summary)) => {
                for s in &summary.skipped {
                    tracing::debug!("manifests: skipped {s}");
                }
                tracing::info!(
                    path = %path.display(),
                    services = summary.services,
                    endpoint_slices = summary.slices,
                    pods = summary.pods,
                    "manifests read"
                );
                if let Some(cidrs) = &self.service_cidrs {
                    cidrs.set_service_cidrs(summary.service_cidrs());
                }
                if let Some(this) = &self.this_node {
                    let node = summary
                        .nodes
                        .iter()
                        .find(|n| n.metadata.name.as_deref() == Some(this.node()));
                    this.set_from(node);
                }
                if let Err(e) = self.hand_over(&texts) {
                    tracing::error!("manifests: {e} (after a successful check); the next change retries");
                }
            }
            Err(e) => tracing::warn!("manifests: {e}; keeping what was read before"),
        }
    }
}

/// Hands `first` (read at startup) to `sink`, then re-reads the files
/// under `path` whenever they change, until `shutdown` completes.
pub async fn watch_manifests(path: PathBuf, first: Read, mut sink: Sink, shutdown: impl Future<Output = ()>) {
    let mut last = first.fingerprint.clone();
    sink.take(&path, first);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(POLL) => {}
        }
        let now = manifests::fingerprint(&path);
        if now != last {
            last = now.clone();
            sink.take(&path, Read::after(&path, now));
        }
    }
}
