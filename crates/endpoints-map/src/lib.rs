#![doc = include_str!("../README.md")]

mod map;
pub mod reference;
mod services;
mod stale;
pub mod topology;

pub use map::{EndpointsMap, ServiceEndpoint, UpdateResult};
pub use services::{ServicesMap, ServicesUpdateResult};

#[cfg(test)]
mod tests;
