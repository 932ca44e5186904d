//! Endpoint addresses as [rule 5](crate::rules) reads them.

use std::net::{IpAddr, Ipv4Addr};

/// Parses an endpoint address by [rule 5](crate::rules): an IPv4 dotted quad
/// without leading zeros, or an IPv6 address without a zone. The result's
/// `Display` is the canonical text (RFC 5952; `::ffff:a.b.c.d` for mapped
/// addresses, which stay IPv6).
pub fn parse_endpoint_ip(s: &str) -> Option<IpAddr> {
    // std rejects zones, leading zeros in IPv4 and surrounding spaces, as
    // rule 5 asks; it is the authority, the quad reader only a shortcut.
    match dotted_quad(s.as_bytes()) {
        Some(v4) => Some(IpAddr::V4(v4)),
        None => s.parse().ok(),
    }
}

/// A key that orders addresses exactly as `IpAddr`'s `Ord` does (IPv4
/// before IPv6, then by value), compared as two integers: sorting and
/// merging endpoints by address showed in profiles.
pub fn ip_sort_key(ip: IpAddr) -> (bool, u128) {
    match ip {
        IpAddr::V4(v4) => (false, u128::from(v4.to_bits())),
        IpAddr::V6(v6) => (true, v6.to_bits()),
    }
}

/// Reads the plain form of an IPv4 address (`a.b.c.d`, each part 0..=255
/// in one to three digits, no leading zero), or gives up. It accepts only
/// what std's parser accepts, with the same result, in about half the
/// instructions (std's general parser was a fifth of those spent per
/// endpoint update). Anything else (IPv6, or a malformed text) goes to std.
fn dotted_quad(text: &[u8]) -> Option<Ipv4Addr> {
    let digit = |i: usize| text.get(i).filter(|b| b.is_ascii_digit()).map(|b| u16::from(b - b'0'));
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (n, octet) in octets.iter_mut().enumerate() {
        if n > 0 {
            if text.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let mut value = digit(i)?;
        i += 1;
        // A leading 0 stands alone: "01" fails on the next separator.
        if value > 0
            && let Some(d) = digit(i)
        {
            value = value * 10 + d;
            i += 1;
            if let Some(d) = digit(i) {
                value = value * 10 + d;
                i += 1;
            }
        }
        *octet = u8::try_from(value).ok()?;
    }
    (i == text.len()).then_some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rule_5() {
        let ok = |s: &str| parse_endpoint_ip(s).map(|a| a.to_string());
        assert_eq!(ok("10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(ok("0.0.0.0").as_deref(), Some("0.0.0.0"));
        assert_eq!(ok("255.255.255.255").as_deref(), Some("255.255.255.255"));
        assert_eq!(ok("FD00:0:0::1").as_deref(), Some("fd00::1"));
        assert_eq!(ok("::ffff:10.0.0.1").as_deref(), Some("::ffff:10.0.0.1"));
        for bad in [
            "",
            "10.0.0",
            "10.0.0.1.",
            "10.0.0.01",
            "010.0.0.1",
            "256.0.0.1",
            "1000.0.0.1",
            " 10.0.0.1",
            "10.0.0.1 ",
            "10..0.1",
            "+1.0.0.1",
            "fe80::1%eth0",
            "10.0.0.1/32",
            "1.2.3.4.5",
        ] {
            assert_eq!(parse_endpoint_ip(bad), None, "{bad:?}");
            assert_eq!(dotted_quad(bad.as_bytes()), None, "{bad:?}");
        }
    }

    proptest! {
        /// The shortcut never disagrees with std, on texts made mostly of
        /// the characters an address is made of.
        #[test]
        fn quad_reader_agrees_with_std(s in "[0-9.]{0,18}|[0-9a-f:.%]{0,20}|\\PC{0,16}") {
            if let Some(v4) = dotted_quad(s.as_bytes()) {
                prop_assert_eq!(Some(v4), s.parse::<Ipv4Addr>().ok());
            }
            prop_assert_eq!(parse_endpoint_ip(&s), s.parse::<IpAddr>().ok());
        }

        /// The sort key orders addresses as `IpAddr` does.
        #[test]
        fn sort_key_orders_like_ip_addr(a in any::<IpAddr>(), b in any::<IpAddr>(), v4 in any::<[u8; 4]>()) {
            prop_assert_eq!(ip_sort_key(a).cmp(&ip_sort_key(b)), a.cmp(&b));
            let mapped = IpAddr::V6(Ipv4Addr::from(v4).to_ipv6_mapped());
            let plain = IpAddr::V4(Ipv4Addr::from(v4));
            prop_assert_eq!(ip_sort_key(plain).cmp(&ip_sort_key(mapped)), plain.cmp(&mapped));
        }

        /// Every address std writes is read by the shortcut.
        #[test]
        fn quad_reader_reads_every_plain_address(octets in any::<[u8; 4]>()) {
            let addr = Ipv4Addr::from(octets);
            prop_assert_eq!(dotted_quad(addr.to_string().as_bytes()), Some(addr));
        }
    }
}
