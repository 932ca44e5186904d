//! A protocol as nft names it and as the programmed view stores it (one
//! byte), for every type that holds one.

use slice_model::Protocol;

/// nft's name for a protocol.
pub fn proto(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// A protocol as one byte (`slice_model` has no serde support).
pub(crate) mod stored {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Protocol;

    pub(crate) fn serialize<S: Serializer>(p: &Protocol, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(match p {
            Protocol::Sctp => 0,
            Protocol::Tcp => 1,
            Protocol::Udp => 2,
        })
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Protocol, D::Error> {
        match u8::deserialize(d)? {
            0 => Ok(Protocol::Sctp),
            1 => Ok(Protocol::Tcp),
            2 => Ok(Protocol::Udp),
            n => Err(serde::de::Error::custom(format!("no protocol {n}"))),
        }
    }
}
