#![doc = include_str!("../README.md")]

mod map;
mod services;
mod stale;
pub mod topology;

pub use map::{EndpointsMap, ServiceEndpoint, UpdateResult};
pub use services::{ServicesMap, ServicesUpdateResult};

#[cfg(test)]
mod tests;
