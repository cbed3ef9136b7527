//! placeholder
pub mod device;
pub mod engine;
