//! Routes to cluster IPs inside a pod's namespace, reconciled with `ip`.
//!
//! proxyd's routes carry routing protocol number [`ROUTE_PROTO`], so the
//! ones it made are told apart from everyone else's: missing ones are
//! added, stale ones removed, and a restart finds and keeps its own
//! (`route replace` never duplicates).

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;
use std::process::Stdio;

use serde::Deserialize;
use slice_model::IpFamily;

use super::plan::Route;
use crate::netns::Netns;

/// The routing protocol number marking proxyd's routes.
pub const ROUTE_PROTO: u8 = 201;

/// What a reconciliation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteChange {
    /// Routes added.
    pub added: usize,
    /// Routes removed.
    pub removed: usize,
}

#[derive(Deserialize)]
struct IpRoute {
    dst: String,
    dev: Option<String>,
    prefsrc: Option<String>,
}

fn family_flag(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "-4",
        IpFamily::V6 => "-6",
    }
}

fn host_prefix(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// proxyd's routes of `family` in the namespace.
pub fn read(netns: &Netns, family: IpFamily) -> Result<BTreeSet<Route>, String> {
    let out = netns
        .command("ip")
        .args(["-j", family_flag(family), "route", "show", "table", "main", "proto"])
        .arg(ROUTE_PROTO.to_string())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", netns.describe("ip")))?;
    if !out.status.success() {
        return Err(format!(
            "{} route show: {}",
            netns.describe("ip"),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Ok(BTreeSet::new());
    }
    let routes: Vec<IpRoute> = serde_json::from_str(&text).map_err(|e| format!("ip -j route show: {e}"))?;
    Ok(routes
        .into_iter()
        .filter_map(|r| {
            let dest = r.dst.split('/').next()?.parse().ok()?;
            Some(Route {
                dest,
                dev: r.dev?,
                src: r.prefsrc?.parse().ok()?,
            })
        })
        .collect())
}

/// Makes proxyd's routes of `family` in the namespace exactly `want`.
pub fn reconcile(netns: &Netns, family: IpFamily, want: &BTreeSet<Route>) -> Result<RouteChange, String> {
    let have = read(netns, family)?;
    let stale: Vec<&Route> = have.difference(want).collect();
    let missing: Vec<&Route> = want.difference(&have).collect();
    if stale.is_empty() && missing.is_empty() {
        return Ok(RouteChange::default());
    }
    let mut batch = String::new();
    for r in &stale {
        batch.push_str(&format!(
            "route del {}/{} dev {} proto {ROUTE_PROTO}\n",
            r.dest,
            host_prefix(&r.dest),
            r.dev
        ));
    }
    for r in &missing {
        batch.push_str(&format!(
            "route replace {}/{} dev {} src {} proto {ROUTE_PROTO}\n",
            r.dest,
            host_prefix(&r.dest),
            r.dev,
            r.src
        ));
    }
    // -force: one route that cannot be set does not stop the others.
    let mut child = netns
        .command("ip")
        .args([family_flag(family), "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", netns.describe("ip")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(batch.as_bytes())
            .map_err(|e| format!("{}: {e}", netns.describe("ip")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", netns.describe("ip")))?;
    if !out.status.success() {
        return Err(format!(
            "{} -batch: {}",
            netns.describe("ip"),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(RouteChange {
        added: missing.len(),
        removed: stale.len(),
    })
}
