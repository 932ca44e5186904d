#![doc = include_str!("../README.md")]

mod engine;
mod map;
#[cfg(any(test, feature = "test-util"))]
pub mod reference;
mod services;
mod stale;
pub mod topology;

pub use engine::{Engine, EngineFeed, EngineUpdate};
pub use map::{EndpointsMap, ServiceEndpoint, UpdateResult};
pub use services::{ServicesMap, ServicesUpdateResult};

#[cfg(test)]
mod tests;
