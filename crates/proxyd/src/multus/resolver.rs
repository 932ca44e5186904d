//! Finding a pod's network namespace.

use std::path::PathBuf;

use informer_glue::multus::PodInfo;

/// Why a pod's namespace could not be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The pod has no namespace (any more): it is gone or not started.
    /// Tried again only when the pod changes.
    #[error("no network namespace: {0}")]
    Gone(String),
    /// Whoever knows could not be asked (the runtime is down): tried again
    /// at the next sync.
    #[error("cannot find the network namespace now: {0}")]
    Unavailable(String),
}

/// Finds the network namespace of a pod on this node.
pub trait PodNetnsResolver: Send {
    /// The namespace file of `pod`.
    fn resolve(&mut self, pod: &PodInfo) -> Result<PathBuf, ResolveError>;
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
