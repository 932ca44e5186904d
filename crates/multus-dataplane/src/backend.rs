//! The backends that change pods' namespaces: the real commands, and
//! `--dry-run`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use nft_dataplane::names::POD_TABLE;
use nft_dataplane::stale_flows::Cleanup;
use nft_dataplane::{Dataplane, DataplaneError};
use slice_model::{IpFamily, PodName};

use super::proxier::PodBackend;
use linux_dataplane::Netns;
use linux_dataplane::Route;
use linux_dataplane::routes::{self, RouteChange, RouteError};
use linux_dataplane::{Conntrack, ConntrackError, NetlinkConntrack};
use linux_dataplane::{DryRun, NftCommand, WatchedNft};

/// Inside each pod's namespace: netlink for the table (chains and rules
/// too unless `nft_writer` says `nft`), conntrack and the nftables
/// generation (an idle periodic sync writes nothing), routes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Commands {
    /// Skip conntrack cleanup (`--no-conntrack`).
    pub no_conntrack: bool,
    /// Who writes chains and rules (`--nft-writer`).
    pub nft_writer: linux_dataplane::NftWriter,
}

impl PodBackend for Commands {
    fn dataplane(&mut self, _pod: &PodName, netns: &Netns) -> Box<dyn Dataplane + Send> {
        Box::new(WatchedNft::with_writer(netns.clone(), self.nft_writer))
    }

    fn routes(
        &mut self,
        _pod: &PodName,
        netns: &Netns,
        family: IpFamily,
        want: &BTreeSet<Route>,
    ) -> Result<RouteChange, RouteError> {
        routes::reconcile(netns, family, want)
    }

    fn conntrack(
        &mut self,
        _pod: &PodName,
        netns: &Netns,
        family: IpFamily,
        cleanup: &Cleanup,
    ) -> (u64, Vec<ConntrackError>) {
        if self.no_conntrack {
            return (0, Vec::new());
        }
        NetlinkConntrack::new(netns.clone()).delete(family, cleanup)
    }

    fn remove_table(&mut self, _pod: &PodName, netns: &Netns, family: IpFamily) -> Result<(), DataplaneError> {
        let tx = nft_dataplane::Transaction::remove_table(family, POD_TABLE);
        NftCommand { netns: netns.clone() }.apply_text(&tx.text()).map(drop)
    }
}

/// `--dry-run`: each pod's transactions written as `NS_NAME-sync-N.nft` to
/// the directory (or standard output); routes and conntrack untouched.
#[derive(Clone, Debug, Default)]
pub struct DryRunPods {
    /// Where the scripts go; `None`: standard output.
    pub dir: Option<PathBuf>,
}

impl PodBackend for DryRunPods {
    fn dataplane(&mut self, pod: &PodName, _netns: &Netns) -> Box<dyn Dataplane + Send> {
        Box::new(DryRun {
            dir: self.dir.clone(),
            count: 0,
            prefix: format!("{}_{}-", pod.namespace, pod.name),
        })
    }

    fn routes(
        &mut self,
        pod: &PodName,
        _: &Netns,
        _: IpFamily,
        want: &BTreeSet<Route>,
    ) -> Result<RouteChange, RouteError> {
        for r in want {
            tracing::info!(pod = %pod, "dry run: route {r}");
        }
        Ok(RouteChange::default())
    }

    fn conntrack(&mut self, _: &PodName, _: &Netns, _: IpFamily, _: &Cleanup) -> (u64, Vec<ConntrackError>) {
        (0, Vec::new())
    }

    fn remove_table(&mut self, pod: &PodName, _: &Netns, _: IpFamily) -> Result<(), DataplaneError> {
        tracing::info!(pod = %pod, "dry run: table {POD_TABLE} removed");
        Ok(())
    }
}
