//! Set and map elements: typed keys and values.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use slice_model::Protocol;

use crate::names::ChainId;

pub use crate::protocol::proto;

/// Where traffic for a service arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Frontend {
    /// A cluster, external or load-balancer IP and port.
    Ip {
        /// The address.
        addr: IpAddr,
        /// The protocol.
        #[serde(with = "crate::protocol::stored")]
        protocol: Protocol,
        /// The port.
        port: u16,
    },
    /// A port on every local address of the node.
    NodePort {
        /// The protocol.
        #[serde(with = "crate::protocol::stored")]
        protocol: Protocol,
        /// The node port.
        port: u16,
    },
}

impl Frontend {
    /// Whether this is a node port.
    pub fn is_node_port(&self) -> bool {
        matches!(self, Self::NodePort { .. })
    }

    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        match self {
            Self::Ip { protocol, .. } | Self::NodePort { protocol, .. } => *protocol,
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Self::Ip { port, .. } | Self::NodePort { port, .. } => *port,
        }
    }
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip { addr, protocol, port } => {
                write!(f, "{}/{}", SocketAddr::new(*addr, *port), proto(*protocol))
            }
            Self::NodePort { protocol, port } => write!(f, "node port {port}/{}", proto(*protocol)),
        }
    }
}

/// An element's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Key {
    /// `addr . proto . port` or `proto . port`.
    Frontend(Frontend),
    /// A frontend's slot: `… . slot`.
    Slot(Frontend, u8),
    /// A port number (the canary).
    Port(u16),
    /// An address.
    Addr(IpAddr),
    /// Two addresses (`saddr . daddr`).
    AddrPair(IpAddr, IpAddr),
    /// A position in a large group's backend map (`numgen` output).
    Index(u32),
    /// A client address and the endpoint it was sent to.
    Client(IpAddr, SocketAddr),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Frontend(Frontend::Ip { addr, protocol, port }) => {
                write!(f, "{addr} . {} . {port}", proto(*protocol))
            }
            Self::Frontend(Frontend::NodePort { protocol, port }) => write!(f, "{} . {port}", proto(*protocol)),
            Self::Slot(frontend, slot) => write!(f, "{} . {slot}", Self::Frontend(*frontend)),
            Self::Port(p) => write!(f, "{p}"),
            Self::Addr(a) => write!(f, "{a}"),
            Self::AddrPair(a, b) => write!(f, "{a} . {b}"),
            Self::Index(i) => write!(f, "{i}"),
            Self::Client(client, ep) => write!(f, "{client} . {} . {}", ep.ip(), ep.port()),
        }
    }
}

/// A map element's value, or a plain set element's note.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Value {
    /// A verdict: continue in that chain.
    Goto(ChainId),
    /// A DNAT target: `addr . port`.
    Endpoint(SocketAddr),
    /// A plain set element's note, not nft data: a digest of what goes
    /// with the element (a slot frontend's endpoints, in slot order), kept
    /// in its user data, where `nft` shows nothing. Rendered as nothing.
    Digest(u64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Goto(c) => write!(f, "goto {c}"),
            Self::Endpoint(ep) => write!(f, "{} . {}", ep.ip(), ep.port()),
            Self::Digest(d) => write!(f, "digest {d:016x}"),
        }
    }
}

/// One element: a key, and for maps a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Element {
    /// The key.
    pub key: Key,
    /// The value (maps only).
    pub value: Option<Value>,
}

impl Element {
    /// A set element.
    pub fn key(key: Key) -> Self {
        Self { key, value: None }
    }

    /// A map element.
    pub fn map(key: Key, value: Value) -> Self {
        Self {
            key,
            value: Some(value),
        }
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(Value::Digest(_)) | None => write!(f, "{}", self.key),
            Some(v) => write!(f, "{} : {v}", self.key),
        }
    }
}
