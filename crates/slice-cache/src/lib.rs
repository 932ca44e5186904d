#![doc = include_str!("../README.md")]

mod by_name;
mod cache;
mod merged;
mod services;

pub use cache::{EndpointSliceCache, ServiceChange};
pub use merged::{PortEndpoints, ServiceEndpoints};
pub use services::{ServiceChangeTracker, ServicePorts, ServicePortsChange};

#[cfg(test)]
mod tests;
