//! `proxyd cleanup`: removes what proxyd created, saying what it removed
//! and what was not there.

use std::process::ExitCode;

use nft_dataplane::names::{POD_TABLE, TABLE};
use slice_model::IpFamily;

use crate::settings::flags::CleanupArgs;
use linux_dataplane::{Netns, NftCommand, RemovedTables};

/// `proxyd cleanup`: removes proxyd's tables (both families). Conntrack
/// entries are left to time out: deleting them would cut live connections.
pub fn cleanup(args: CleanupArgs) -> ExitCode {
    let problems = args.pods.problems(args.multus);
    if !problems.is_empty() {
        for p in &problems {
            tracing::error!("{p}");
        }
        return ExitCode::FAILURE;
    }
    if args.multus {
        return cleanup_multus(&args);
    }
    let netns = Netns::from_flag(args.netns);
    if args.kube_proxy {
        return cleanup_kube_proxy(&netns);
    }
    match (NftCommand { netns }).remove_tables(TABLE) {
        Ok(RemovedTables { removed, absent }) => {
            if !absent.is_empty() {
                tracing::info!("not there (nothing to remove): {}", absent.join(", "));
            }
            if !removed.is_empty() {
                tracing::info!("removed {}", removed.join(", "));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("cleanup failed, nothing removed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `proxyd cleanup --kube-proxy`: kube-proxy's rules, as `kube-proxy
/// --cleanup` removes them; says what it removed.
fn cleanup_kube_proxy(netns: &Netns) -> ExitCode {
    let found = match linux_dataplane::kube_proxy::find(netns) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!("cleanup --kube-proxy: cannot read the ruleset: {e}");
            return ExitCode::FAILURE;
        }
    };
    if found.is_empty() {
        tracing::info!("no rules of kube-proxy's here (nothing to remove)");
        return ExitCode::SUCCESS;
    }
    match linux_dataplane::kube_proxy::remove(netns, &found) {
        Ok(removed) => {
            tracing::info!("removed kube-proxy's {}", removed.join("; "));
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("cleanup --kube-proxy failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `proxyd cleanup --multus`: multus mode's table and routes out of every
/// pod namespace found; says what it removed and where nothing was.
fn cleanup_multus(args: &CleanupArgs) -> ExitCode {
    let namespaces = match multus_namespaces(args) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!("cleanup --multus: cannot list pod namespaces: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for path in namespaces {
        let netns = Netns::Path(path.clone());
        let mut removed = match (NftCommand { netns: netns.clone() }).remove_tables(POD_TABLE) {
            Ok(tables) => tables.removed,
            Err(e) => {
                tracing::error!(netns = %path.display(), "{POD_TABLE} tables not removed: {e}");
                failed = true;
                Vec::new()
            }
        };
        for family in [IpFamily::V4, IpFamily::V6] {
            match linux_dataplane::routes::reconcile(&netns, family, &Default::default()) {
                Ok(change) if change.removed > 0 => removed.push(format!("{} {family} route(s)", change.removed)),
                Ok(_) => {}
                Err(e) => tracing::debug!(netns = %path.display(), "routes: {e}"),
            }
        }
        if removed.is_empty() {
            tracing::info!(netns = %path.display(), "nothing of proxyd's there");
        } else {
            tracing::info!(netns = %path.display(), "removed {}", removed.join(", "));
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// The pod namespaces `cleanup --multus` visits.
fn multus_namespaces(args: &CleanupArgs) -> anyhow::Result<Vec<std::path::PathBuf>> {
    if let Some(dir) = &args.pods.pod_netns_dir {
        let mut all: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        all.sort();
        return Ok(all);
    }
    let mut cri = args.pods.runtime()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(cri.all_namespaces()).map_err(anyhow::Error::msg)
}
