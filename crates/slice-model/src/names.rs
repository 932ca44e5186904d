//! Names of services, slices and service ports.

use std::fmt;
use std::sync::Arc;

use crate::Protocol;

/// A namespaced object name (`namespace/name`), cheap to clone.
///
/// Used for services and for EndpointSlices alike. Ordering is by namespace,
/// then name, which is the order every sorted output of this project uses.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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

/// A [`NamespacedName`] that says what it names, so that one kind of name
/// cannot be passed where the other is meant. Reads as the name it wraps
/// (`.namespace`, `.name`); equality, order, hashing and the serialized
/// form are the name's. `$repr` is how it holds the name: the name itself,
/// or `Arc<NamespacedName>`, one pointer wide, for a kind that many maps
/// are keyed by (clones then share one copy).
///
/// ```compile_fail
/// use slice_model::{ServiceName, SliceName};
/// fn remove(_slice: &SliceName) {}
/// remove(&ServiceName::new("ns", "web")); // a service is not a slice
/// ```
macro_rules! kind_of_name {
    ($(#[$doc:meta])* $ty:ident($repr:ty)) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
        pub struct $ty($repr);

        impl $ty {
            /// Builds a name from anything string-like.
            pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
                Self::from(NamespacedName::new(namespace, name))
            }
        }

        impl std::ops::Deref for $ty {
            type Target = NamespacedName;

            fn deref(&self) -> &NamespacedName {
                &self.0
            }
        }

        impl From<NamespacedName> for $ty {
            fn from(n: NamespacedName) -> Self {
                Self(n.into())
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&**self, f)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&**self, f)
            }
        }
    };
}

kind_of_name!(
    /// The name of a Service (`namespace/name`): `ServiceName::new("shop",
    /// "web")`; its namespace and name are the fields of the
    /// [`NamespacedName`] it dereferences to (`name.namespace`,
    /// `name.name`). One pointer wide and cheap to clone, as it keys every
    /// per-service map.
    ServiceName(Arc<NamespacedName>)
);

kind_of_name!(
    /// The name of an EndpointSlice object (`namespace/name`).
    SliceName(NamespacedName)
);

kind_of_name!(
    /// The name of a Pod (`namespace/name`): multus mode's key for a pod.
    PodName(NamespacedName)
);

/// A service port, the unit endpoints are balanced over: service, port name and
/// protocol. Port names may be empty (a service with a single unnamed port).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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

impl ServicePortName {
    /// kube-proxy's short form, `ns/name:port` (`ns/name` for an unnamed
    /// port), without the protocol: for tables that show the protocol in a
    /// column of its own.
    pub fn short(&self) -> String {
        if self.port.is_empty() {
            self.service.to_string()
        } else {
            format!("{}:{}", self.service, self.port)
        }
    }
}

/// Displays as `ns/name:port/PROTOCOL` (`ns/name/PROTOCOL` for an unnamed
/// port): two ports that differ only by protocol never print the same.
impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}/{}", self.service, self.protocol)
        } else {
            write!(f, "{}:{}/{}", self.service, self.port, self.protocol)
        }
    }
}

impl fmt::Debug for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_port_names_show_the_protocol() {
        let svc = ServiceName::new("ns", "web");
        let tcp = ServicePortName::new(svc.clone(), "dns", Protocol::Tcp);
        let udp = ServicePortName::new(svc.clone(), "dns", Protocol::Udp);
        assert_eq!(tcp.to_string(), "ns/web:dns/TCP");
        assert_ne!(tcp.to_string(), udp.to_string());
        assert_eq!(tcp.short(), "ns/web:dns");
        let unnamed = ServicePortName::new(svc, "", Protocol::Udp);
        assert_eq!(
            (unnamed.to_string(), unnamed.short()),
            ("ns/web/UDP".into(), "ns/web".into())
        );
    }

    #[test]
    fn a_service_name_is_one_pointer_and_compares_as_its_text() {
        assert_eq!(std::mem::size_of::<ServiceName>(), std::mem::size_of::<usize>());
        let (a, b) = (ServiceName::new("ns", "web"), ServiceName::new("ns", "web"));
        assert!(a == b && !Arc::ptr_eq(&a.0, &b.0), "equal copies");
        assert!(ServiceName::new("a", "z") < ServiceName::new("b", "a"));
        assert_eq!(ServiceName::from(NamespacedName::new("ns", "web")), a);
        assert_eq!(
            (a.to_string(), &*a.namespace, &*a.name),
            ("ns/web".to_owned(), "ns", "web")
        );
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
