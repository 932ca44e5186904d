//! Finding a pod's network namespace.

use std::path::PathBuf;

use informer_glue::multus::PodInfo;

/// Why a pod's namespace could not be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The pod has no namespace now: not started yet, being re-created,
    /// or gone. The pod waits, and is looked up again at every sync.
    #[error("no network namespace: {0}")]
    Gone(String),
    /// Whoever knows could not be asked (the runtime is down): tried again
    /// at every sync, and as soon as the runtime is back.
    #[error("cannot find the network namespace now: {0}")]
    Unavailable(String),
}

/// Finds the network namespace of a pod on this node. Every sync looks
/// every served pod up again, since a pod's sandbox (and so its namespace)
/// can be re-created with nothing on the Pod object changing.
pub trait PodNetnsResolver: Send {
    /// Called once at the start of each sync, before [`Self::resolve`]:
    /// learns what the lookups of this sync read (the CRI runtime's
    /// sandboxes, in one call).
    fn refresh(&mut self) -> Result<(), ResolveError> {
        Ok(())
    }

    /// The namespace file of `pod`.
    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError>;
}

/// One resolver shared by several proxiers (a dual-stack node's two
/// families ask the same runtime).
impl<R: PodNetnsResolver + ?Sized> PodNetnsResolver for std::sync::Arc<std::sync::Mutex<R>> {
    fn refresh(&mut self) -> Result<(), ResolveError> {
        crate::lock(self).refresh()
    }

    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        crate::lock(self).resolve(pod)
    }
}

/// `--pod-netns-dir DIR`: pod NS/NAME's namespace is the file `DIR/NS_NAME`
/// (what `ip netns add NS_NAME` creates under `/run/netns`).
#[derive(Clone, Debug)]
pub struct NetnsDir {
    /// The directory.
    pub dir: PathBuf,
}

impl PodNetnsResolver for NetnsDir {
    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError> {
        let path = self.dir.join(format!("{}_{}", pod.namespace, pod.name));
        if path.exists() {
            Ok(path)
        } else {
            Err(ResolveError::Gone(format!("{} does not exist", path.display())))
        }
    }
}
