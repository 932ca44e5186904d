//! Names of services, slices and service ports.

use std::fmt;
use std::sync::Arc;

use crate::Protocol;

/// A namespaced object name (`namespace/name`), cheap to clone.
///
/// Used for services and for EndpointSlices alike. Ordering is by namespace,
/// then name, which is the order every sorted output of this project uses.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespacedName {
    /// The namespace.
    pub namespace: Arc<str>,
    /// The object's name within the namespace.
    pub name: Arc<str>,
}

impl NamespacedName {
    /// Builds a name from anything string-like.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl fmt::Debug for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The name of a service (an alias that says what a [`NamespacedName`] names).
pub type ServiceName = NamespacedName;

/// The name of an EndpointSlice object.
pub type SliceName = NamespacedName;

/// A service port as the proxy load-balances it: service, port name and
/// protocol. Port names may be empty (a service with a single unnamed port).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServicePortName {
    /// The service.
    pub service: ServiceName,
    /// The port's name (`""` for an unnamed port).
    pub port: Arc<str>,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl ServicePortName {
    /// Builds a service port name.
    pub fn new(service: ServiceName, port: impl Into<Arc<str>>, protocol: Protocol) -> Self {
        Self {
            service,
            port: port.into(),
            protocol,
        }
    }
}

/// Displays as `ns/name:port`, or `ns/name` when the port name is empty (as
/// kube-proxy does); the protocol is not shown.
impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

impl fmt::Debug for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}/{}", self.protocol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_port_name_display_omits_empty_port() {
        let svc = NamespacedName::new("ns", "web");
        assert_eq!(
            ServicePortName::new(svc.clone(), "http", Protocol::Tcp).to_string(),
            "ns/web:http"
        );
        assert_eq!(ServicePortName::new(svc, "", Protocol::Udp).to_string(), "ns/web");
    }

    #[test]
    fn names_sort_by_namespace_then_name() {
        let mut v = [
            NamespacedName::new("b", "a"),
            NamespacedName::new("a", "z"),
            NamespacedName::new("a", "b"),
        ];
        v.sort();
        let shown: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a/b", "a/z", "b/a"]);
    }
}
