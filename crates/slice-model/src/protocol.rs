//! Transport protocols and IP families.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A service port's transport protocol.
///
/// Variants are declared in the order of their API spelling, so sorting by
/// protocol sorts as the text does (`SCTP` < `TCP` < `UDP`).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "UPPERCASE"))]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Protocol {
    /// SCTP.
    Sctp,
    /// TCP, the API's default.
    Tcp,
    /// UDP: the only protocol whose stale conntrack entries are tracked.
    Udp,
}

impl Protocol {
    /// The API spelling: `TCP`, `UDP` or `SCTP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a protocol other than `TCP`, `UDP` or `SCTP`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol {0:?} (expected TCP, UDP or SCTP)")]
pub struct UnknownProtocol(pub String);

impl FromStr for Protocol {
    type Err = UnknownProtocol;

    /// Parses the API spelling (case-sensitive, as the API validates it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            other => Err(UnknownProtocol(other.to_owned())),
        }
    }
}

/// An IP family: IPv4 or IPv6 (of an address, a service's cluster IP,
/// a slice's `addressType`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub enum IpFamily {
    /// IPv4.
    #[default]
    V4,
    /// IPv6 (IPv4-mapped IPv6 addresses included: they are IPv6 by syntax).
    V6,
}

impl IpFamily {
    /// The family of an address.
    pub fn of(addr: &IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// `ipv4` or `ipv6`: the name in lower case, as logs and metrics
    /// labels write it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for an IP family spelled other than `ipv4`/`ipv6`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown IP family {0:?} (expected ipv4 or ipv6)")]
pub struct UnknownIpFamily(pub String);

impl FromStr for IpFamily {
    type Err = UnknownIpFamily;

    /// Accepts `ipv4`/`ipv6` and the API's `IPv4`/`IPv6`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "ipv4" => Ok(IpFamily::V4),
            "ipv6" => Ok(IpFamily::V6),
            _ => Err(UnknownIpFamily(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_round_trips_and_rejects_other_spellings() {
        for p in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
            assert_eq!(p.as_str().parse::<Protocol>(), Ok(p));
        }
        assert!("tcp".parse::<Protocol>().is_err());
        assert!("".parse::<Protocol>().is_err());
    }

    #[test]
    fn protocols_sort_like_their_names() {
        let mut v = [Protocol::Udp, Protocol::Tcp, Protocol::Sctp];
        v.sort();
        let names: Vec<&str> = v.iter().map(|p| p.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn family_parses_both_spellings() {
        assert_eq!("IPv6".parse::<IpFamily>(), Ok(IpFamily::V6));
        assert_eq!("ipv4".parse::<IpFamily>(), Ok(IpFamily::V4));
        assert!("ip4".parse::<IpFamily>().is_err());
    }
}
