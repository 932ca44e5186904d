//! Fragments as the programmed view keeps them between syncs: encoded
//! (postcard) into one short byte string.
//!
//! The view holds a fragment for every service for as long as the service
//! exists, and reads one back only when the service changes or the whole
//! table is written. As a structure, a typical service's fragment (one
//! frontend, a few endpoints) is seven list headers and half a dozen small
//! allocations, several hundred bytes; encoded it is one allocation of a few
//! dozen.

use crate::fragment::Fragment;

/// A fragment, encoded.
#[derive(Clone, Debug)]
pub(crate) struct Packed(Box<[u8]>);

impl Packed {
    /// Encodes `fragment`.
    ///
    /// Neither encoding nor decoding can fail for these types (every list
    /// has a known length, and only [`Packed::pack`] writes the bytes); if
    /// one ever did, the fragment reads back empty and the periodic full
    /// sync rewrites the service.
    pub(crate) fn pack(fragment: &Fragment) -> Self {
        let bytes = postcard::to_allocvec(fragment).unwrap_or_else(|e| {
            debug_assert!(false, "a fragment did not encode: {e}");
            tracing::error!("a fragment did not encode ({e}); the next full sync rewrites it");
            Vec::new()
        });
        Self(bytes.into_boxed_slice())
    }

    /// The fragment back.
    pub(crate) fn unpack(&self) -> Fragment {
        postcard::from_bytes(&self.0).unwrap_or_else(|e| {
            debug_assert!(false, "a packed fragment did not decode: {e}");
            tracing::error!("a remembered fragment did not decode ({e}); the next full sync rewrites it");
            Fragment::default()
        })
    }

    /// The bytes it holds on the heap.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use slice_model::{IpFamily, Protocol, ServiceName};

    use super::*;
    use crate::fragment::{Entry, build};
    use crate::tests::{Engine, Ep, affinity, config, external_local, load_balancer, node_port, service, slice};

    /// Every kind of fragment the builder makes: slots with a node port,
    /// chains with affinity, an external-Local load balancer, a backend
    /// map, and frontends another service holds.
    #[test]
    fn every_kind_of_fragment_unpacks_as_it_was_packed() {
        let mut engine = Engine::new(IpFamily::V4);
        let many: Vec<String> = (1..=40).map(|i| format!("10.1.0.{i}")).collect();
        let many: Vec<Ep<'_>> = many.iter().map(|a| Ep::Remote(a)).collect();
        engine
            .service(&node_port(
                service("ns", "slots", "172.30.0.1", 80, Protocol::Tcp),
                30080,
            ))
            .slice(slice(
                "ns",
                "slots",
                Protocol::Tcp,
                80,
                &[Ep::Remote("10.2.0.1"), Ep::Local("10.2.0.2")],
            ))
            .service(&affinity(
                external_local(load_balancer(
                    service("ns", "chains", "172.30.0.2", 80, Protocol::Tcp),
                    30081,
                    &["198.51.100.7"],
                )),
                60,
            ))
            .slice(slice("ns", "chains", Protocol::Tcp, 80, &many))
            .service(&service("ns", "big", "172.30.0.3", 53, Protocol::Udp))
            .slice(slice("ns", "big", Protocol::Udp, 53, &many))
            .service(&service("ns", "empty", "172.30.0.4", 9, Protocol::Sctp));
        engine.update();
        let mut kinds = (0, 0, 0);
        for (name, claim_all) in [
            ("slots", true),
            ("chains", true),
            ("big", true),
            ("empty", true),
            ("big", false),
        ] {
            let targets = crate::desired::plan_service(
                &ServiceName::new("ns", name),
                &engine.services,
                &engine.endpoints,
                &config(),
            );
            let mut f = build(&targets, &config(), |_| claim_all, None);
            f.blocked = if claim_all { Vec::new() } else { f.frontends.clone() };
            for e in &f.entries {
                match e {
                    Entry::Slots { .. } => kinds.0 += 1,
                    Entry::Chain { .. } => kinds.1 += 1,
                    Entry::Member { .. } => kinds.2 += 1,
                }
            }
            let packed = Packed::pack(&f);
            assert!(packed.heap_bytes() > 0, "{name}: not encoded");
            assert_eq!(packed.unpack(), f, "{name}");
        }
        assert!(
            kinds.0 > 0 && kinds.1 > 0 && kinds.2 > 0,
            "not every kind of entry: {kinds:?}"
        );
    }

    /// What makes the view small: a service with one frontend and two
    /// endpoints fits a few dozen bytes.
    #[test]
    fn a_typical_service_packs_into_a_few_dozen_bytes() {
        let mut engine = Engine::new(IpFamily::V4);
        engine
            .service(&service("ns", "web", "172.30.0.1", 80, Protocol::Tcp))
            .slice(slice(
                "ns",
                "web",
                Protocol::Tcp,
                8080,
                &[Ep::Remote("10.2.0.1"), Ep::Remote("10.2.0.2")],
            ));
        engine.update();
        let targets = crate::desired::plan_service(
            &ServiceName::new("ns", "web"),
            &engine.services,
            &engine.endpoints,
            &config(),
        );
        let f = build(&targets, &config(), |_| true, None);
        assert_eq!(f.entries.len(), 1, "{f:?}");
        let packed = Packed::pack(&f);
        assert!(packed.heap_bytes() <= 48, "{} bytes for {f:?}", packed.heap_bytes());
    }

    #[test]
    fn a_protocol_byte_out_of_range_is_an_error() {
        // A node port (variant 1) of protocol 7, port 80.
        let decoded: Result<crate::element::Frontend, _> = postcard::from_bytes(&[1, 7, 80]);
        assert!(decoded.is_err(), "{decoded:?}");
        let tcp: Result<crate::element::Frontend, _> = postcard::from_bytes(&[1, 1, 80]);
        assert!(tcp.is_ok(), "{tcp:?}");
    }
}
