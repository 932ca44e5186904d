//! The daemon's API client configuration: a kubeconfig file, else what
//! kube infers (`$KUBECONFIG`, `~/.kube/config`, else in-cluster), with the
//! two mistakes a node's service proxy meets said plainly: the shipped
//! manifest's placeholder address, and an API server reached through the
//! `kubernetes` Service that only a service proxy makes reachable.

use std::path::{Path, PathBuf};

/// Why no client configuration could be made (the cause is the error's
/// source: `{:#}` with anyhow shows both).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The kubeconfig file could not be read.
    #[error("cannot read kubeconfig {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig names the shipped manifest's placeholder server.
    #[error(
        "kubeconfig {}: the API server's address {server} is a placeholder (a .invalid name never resolves): set \
         its server to the address the nodes reach the API server by: the server of the kubelet's kubeconfig on a \
         node (/etc/kubernetes/kubelet.conf), or kubeadm's controlPlaneEndpoint (`kubectl cluster-info` prints \
         your own kubeconfig's, which the nodes may not reach); deploy/proxyd.yaml: the ConfigMap's \
         kubeconfig.conf",
        path.display()
    )]
    Placeholder {
        /// The file.
        path: PathBuf,
        /// The placeholder address.
        server: String,
    },
    /// The kubeconfig was read but is not usable (its context, files, …).
    #[error("kubeconfig {} is not usable", path.display())]
    Unusable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig given, none found, and not in a cluster.
    #[error("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration makes no client (its TLS settings, …).
    #[error("cannot make an API client from the configuration")]
    Client(#[source] kube::Error),
}

/// A client of the API server `kubeconfig` names (or the inferred one),
/// made by [`client_from`].
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ConfigError> {
    client_from(config(kubeconfig).await?)
}

/// A client of `config`, its connections guarded against a silent API
/// server ([`informer_glue::liveness::guard_connections`]): every client
/// the daemon makes comes from here.
pub fn client_from(mut config: kube::Config) -> Result<kube::Client, ConfigError> {
    informer_glue::liveness::guard_connections(&mut config, informer_glue::liveness::Probe::default());
    kube::Client::try_from(config).map_err(ConfigError::Client)
}

/// The client configuration from `kubeconfig`, or inferred.
pub async fn config(kubeconfig: Option<&Path>) -> Result<kube::Config, ConfigError> {
    let config = match kubeconfig {
        Some(path) => {
            let read = kube::config::Kubeconfig::read_from(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
            if let Some(server) = placeholder(&read) {
                return Err(ConfigError::Placeholder {
                    path: path.to_owned(),
                    server,
                });
            }
            kube::Config::from_custom_kubeconfig(read, &Default::default())
                .await
                .map_err(|source| ConfigError::Unusable {
                    path: path.to_owned(),
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(ConfigError::Infer)?,
    };
    tracing::info!(server = %config.cluster_url, "connecting to the API server");
    Ok(config)
}

/// A server of `kubeconfig` that is a placeholder (a `.invalid` name, which
/// never resolves), checked before its other files are read.
fn placeholder(kubeconfig: &kube::config::Kubeconfig) -> Option<String> {
    let servers = kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref()?.server.as_deref());
    servers
        .into_iter()
        .find(|server| {
            let authority = server.split_once("://").map_or(*server, |(_, rest)| rest);
            authority
                .split(['/', ':'])
                .next()
                .unwrap_or_default()
                .ends_with(".invalid")
        })
        .map(str::to_owned)
}

/// The API server's address when `config` reaches it through the
/// `kubernetes` Service (the in-cluster configuration: the address the
/// kubelet puts in `KUBERNETES_SERVICE_HOST`), which a service proxy
/// cannot count on: it is the one making that address reachable.
pub fn through_kubernetes_service(config: &kube::Config) -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let url_host = config.cluster_url.host()?.trim_matches(['[', ']']);
    (url_host == host.trim_matches(['[', ']'])).then(|| config.cluster_url.to_string())
}
