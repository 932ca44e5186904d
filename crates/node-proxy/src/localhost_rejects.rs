//! kube-proxy's `kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family,protocol}`:
//! the packets to a localhost node port that the relay does not answer
//! (UDP, SCTP), which the table rejects and counts in named counters
//! ([`CounterId::LocalhostNodePortRejected`]). The kernel counts them; this
//! collector reads the counters at each scrape, so the figure is as fresh
//! as the scrape, and a rewrite of the table keeps it.

use std::sync::atomic::{AtomicBool, Ordering};

use linux_dataplane::{Netns, NftNetlink};
use nft_dataplane::names::{CounterId, TABLE};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use slice_model::{IpFamily, Protocol};

use crate::kube_proxy_metrics::FamilyLabel;

const NAME: &str = "kubeproxy_nftables_localhost_nodeport_rejected_packets";
const HELP: &str = "Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is \
                    answered by the localhost NodePort proxy";

/// Labels of one series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    ip_family: FamilyLabel,
    /// `UDP` or `SCTP`, as kube-proxy writes Kubernetes' protocol names.
    protocol: &'static str,
}

/// Reads the counters of the node's tables of the families whose loopback
/// address answers node ports through the relay.
#[derive(Debug)]
pub struct LocalhostRejects {
    netns: Netns,
    families: Vec<IpFamily>,
    /// A failed read is said once, not at every scrape.
    warned: AtomicBool,
}

impl LocalhostRejects {
    /// The counters of `families`' tables in `netns`.
    pub fn new(netns: Netns, families: Vec<IpFamily>) -> Self {
        Self {
            netns,
            families,
            warned: AtomicBool::new(false),
        }
    }

    /// Each counter's packets in `family`'s table (zero for a counter not
    /// there yet: before the first sync).
    fn read(&self, family: IpFamily) -> std::io::Result<Vec<(Protocol, u64)>> {
        let held = NftNetlink::open(&self.netns)?.counters(family, TABLE)?;
        Ok(CounterId::of_loopback_relay()
            .into_iter()
            .map(|counter| {
                let CounterId::LocalhostNodePortRejected(protocol) = counter;
                let name = counter.to_string();
                let packets = held.iter().find(|(n, _)| *n == name).map_or(0, |(_, p)| *p);
                (protocol, packets)
            })
            .collect())
    }
}

fn protocol_label(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

impl Collector for LocalhostRejects {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.families.is_empty() {
            return Ok(());
        }
        let mut metric = encoder.encode_descriptor(NAME, HELP, None, ConstCounter::new(0u64).metric_type())?;
        for &family in &self.families {
            let counts = match self.read(family) {
                Ok(counts) => counts,
                Err(e) => {
                    if !self.warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(%family, "cannot read the localhost node port reject counters: {e}");
                    }
                    continue;
                }
            };
            for (protocol, packets) in counts {
                let labels = RejectLabels {
                    ip_family: FamilyLabel(family),
                    protocol: protocol_label(protocol),
                };
                ConstCounter::new(packets).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
