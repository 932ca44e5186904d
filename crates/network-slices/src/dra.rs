//! Secondary networks through Dynamic Resource Allocation (KEP-4817): a
//! pod's address on a network is what the network's DRA driver reported
//! for the device allocated to it, in its ResourceClaim's
//! `status.devices[].networkData`.
//!
//! A Service names its network by DeviceClass, in the annotation
//! [`SERVICE_DEVICE_CLASS_ANNOTATION`]: the pods' claims request devices of
//! a class, and the class is what an administrator defines once per
//! network and every pod names. A driver's pool is usually one node's (so
//! it names no network), and an interface name is each claim's own choice.
//!
//! ResourceClaims are read leniently (only the fields used, unknown ones
//! ignored), so any `resource.k8s.io/v1` server's objects decode whatever
//! Kubernetes version this crate's user builds against.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

/// The Service annotation naming the DeviceClass of its network.
pub const SERVICE_DEVICE_CLASS_ANNOTATION: &str = "networking.proxyd.io/service-device-class";

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Claim {
    #[serde(default)]
    spec: Option<ClaimSpec>,
    #[serde(default)]
    status: Option<ClaimStatus>,
}

#[derive(Deserialize, Default)]
struct ClaimSpec {
    #[serde(default)]
    devices: Option<DeviceClaim>,
}

#[derive(Deserialize, Default)]
struct DeviceClaim {
    #[serde(default)]
    requests: Option<Vec<Request>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default)]
    name: String,
    #[serde(default)]
    exactly: Option<ClassOnly>,
    #[serde(default)]
    first_available: Option<Vec<SubRequest>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ClassOnly {
    #[serde(default)]
    device_class_name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SubRequest {
    #[serde(default)]
    name: String,
    #[serde(default)]
    device_class_name: String,
}

#[derive(Deserialize, Default)]
struct ClaimStatus {
    #[serde(default)]
    allocation: Option<Allocation>,
    #[serde(default)]
    devices: Option<Vec<DeviceStatus>>,
}

#[derive(Deserialize, Default)]
struct Allocation {
    #[serde(default)]
    devices: Option<AllocatedDevices>,
}

#[derive(Deserialize, Default)]
struct AllocatedDevices {
    #[serde(default)]
    results: Option<Vec<AllocatedDevice>>,
}

/// Which device: what an allocation result and a device's status both
/// name it by.
#[derive(Deserialize, Default, PartialEq, Eq)]
struct DeviceId {
    #[serde(default)]
    driver: String,
    #[serde(default)]
    pool: String,
    #[serde(default)]
    device: String,
}

#[derive(Deserialize, Default)]
struct AllocatedDevice {
    #[serde(default)]
    request: String,
    #[serde(flatten)]
    id: DeviceId,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DeviceStatus {
    #[serde(flatten)]
    id: DeviceId,
    #[serde(default)]
    network_data: Option<NetworkData>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NetworkData {
    #[serde(default)]
    interface_name: Option<String>,
    #[serde(default)]
    ips: Option<Vec<String>>,
}

/// What a claim says of its devices of one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimNetwork {
    /// The claim requests no device of the class.
    NotRequested,
    /// Requested, but not allocated yet, or the driver has reported no
    /// network data for it yet.
    Pending,
    /// The interface and its addresses, as the driver reported them.
    Attached {
        /// `networkData.interfaceName`.
        interface: Option<String>,
        /// `networkData.ips`, without their prefix lengths.
        ips: Vec<IpAddr>,
    },
}

/// What the claim `json` (a `resource.k8s.io/v1` ResourceClaim) says of its
/// devices of DeviceClass `class`; an error when it is not a claim.
pub fn claim_network(json: &serde_json::Value, class: &str) -> Result<ClaimNetwork, String> {
    let claim = Claim::deserialize(json).map_err(|e| format!("not a ResourceClaim: {e}"))?;
    let requests = claim
        .spec
        .and_then(|s| s.devices)
        .and_then(|d| d.requests)
        .unwrap_or_default();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for r in &requests {
        if r.exactly.as_ref().is_some_and(|e| e.device_class_name == class) {
            wanted.insert(r.name.clone());
        }
        for sub in r.first_available.iter().flatten() {
            if sub.device_class_name == class {
                wanted.insert(format!("{}/{}", r.name, sub.name));
            }
        }
    }
    if wanted.is_empty() {
        return Ok(ClaimNetwork::NotRequested);
    }
    let status = claim.status.unwrap_or_default();
    let results = status
        .allocation
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .unwrap_or_default();
    let devices: Vec<&AllocatedDevice> = results.iter().filter(|r| wanted.contains(&r.request)).collect();
    let reported = status.devices.unwrap_or_default();
    for d in devices {
        let Some(data) = reported
            .iter()
            .find(|s| s.id == d.id)
            .and_then(|s| s.network_data.as_ref())
        else {
            continue;
        };
        let ips: Vec<IpAddr> = data
            .ips
            .iter()
            .flatten()
            .filter_map(|cidr| cidr.split('/').next()?.parse().ok())
            .collect();
        if !ips.is_empty() {
            return Ok(ClaimNetwork::Attached {
                interface: data.interface_name.clone(),
                ips,
            });
        }
    }
    Ok(ClaimNetwork::Pending)
}

/// The names of the pod's ResourceClaims: named in its spec, or generated
/// from a template (its status says which).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    let spec = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    names.extend(spec.into_iter().flatten().filter_map(|c| c.resource_claim_name.clone()));
    let status = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    names.extend(
        status
            .into_iter()
            .flatten()
            .filter_map(|c| c.resource_claim_name.clone()),
    );
    names.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A claim as the scheduler and a DRA network driver leave it: one
    /// request of `class`, allocated on node-1's pool, its network data
    /// reported.
    fn claim(class: &str, network_data: Option<serde_json::Value>) -> serde_json::Value {
        let mut device = json!({"driver": "net.example.com", "pool": "node-1", "device": "eth1"});
        if let Some(d) = network_data {
            device["networkData"] = d;
        }
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "web-0-net-abcde", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": class}}]}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "net", "driver": "net.example.com", "pool": "node-1", "device": "eth1"}]}},
                "devices": [device],
                "reservedFor": [{"resource": "pods", "name": "web-0", "uid": "u1"}],
            },
        })
    }

    #[test]
    fn the_address_the_driver_reported_for_the_class() {
        let data =
            json!({"interfaceName": "net1", "ips": ["192.168.50.7/24", "fd00:50::7/64"], "hardwareAddress": "aa:bb"});
        assert_eq!(
            claim_network(&claim("macvlan-net1", Some(data)), "macvlan-net1"),
            Ok(ClaimNetwork::Attached {
                interface: Some("net1".into()),
                ips: vec!["192.168.50.7".parse().unwrap(), "fd00:50::7".parse().unwrap()],
            })
        );
        assert_eq!(
            claim_network(&claim("macvlan-net1", None), "macvlan-net1"),
            Ok(ClaimNetwork::Pending),
            "allocated, not yet reported"
        );
        assert_eq!(
            claim_network(&claim("gpu", None), "macvlan-net1"),
            Ok(ClaimNetwork::NotRequested)
        );
        assert!(claim_network(&json!({"spec": 7}), "x").is_err());
    }

    #[test]
    fn a_first_available_subrequest_counts_by_its_full_name() {
        let mut c = claim("other", Some(json!({"ips": ["10.9.0.4/16"]})));
        c["spec"]["devices"]["requests"][0] = json!({"name": "net", "firstAvailable": [
            {"name": "fast", "deviceClassName": "sriov"}, {"name": "slow", "deviceClassName": "macvlan-net1"}]});
        c["status"]["allocation"]["devices"]["results"][0]["request"] = json!("net/slow");
        assert!(matches!(
            claim_network(&c, "macvlan-net1"),
            Ok(ClaimNetwork::Attached { ips, .. }) if ips == vec!["10.9.0.4".parse::<IpAddr>().unwrap()]
        ));
    }

    #[test]
    fn a_pods_claims_by_name_or_generated_from_a_template() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "ns"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "net-template"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "web-0-b-xyz"}]},
        }))
        .unwrap();
        assert_eq!(claim_names(&pod), ["shared", "web-0-b-xyz"]);
    }
}
