//! # daemon-sources
//!
//! What only the proxyd daemon reads, kept out of `informer-glue` so that
//! a library user of the watch glue (and of `kube-endpoints`) does not
//! carry it:
//!
//! * [`manifests`]: Kubernetes objects read from manifest files (YAML or
//!   JSON), converted and checked as a watch's objects are;
//! * [`manifest_source`]: those files as a live source, polled and handed
//!   to the same handlers as a relist;
//! * [`snapshot`]: a one-time read of a cluster (the API or the files), for
//!   commands that work from a moment's state (`render`, `explain`);
//! * [`replay`]: a recorded watch trace replayed through the cache and
//!   the endpoints map (`proxyd replay`);
//! * [`kubeconfig`]: the API client's configuration, with the placeholder
//!   and in-cluster mistakes said plainly;
//! * [`kube_proxy_file`]: kube-proxy's `KubeProxyConfiguration` file
//!   type, which proxyd maps to its settings.

pub mod kube_proxy_file;
pub mod kubeconfig;
pub mod manifest_source;
pub mod manifests;
pub mod replay;
pub mod snapshot;
