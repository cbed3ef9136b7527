//! # ahead-sim — a readahead simulator
//!
//! A discrete-event simulator, in virtual time and deterministic, that drives
//! `ahead`'s readahead policies — the same code, through [`ahead::ra::drive`] —
//! over modelled devices ([`device`]) and a page cache with a memory budget
//! ([`engine`]), on the workloads of docs/references.md's sources and ahead's
//! own ([`scenario`]).
//!
//! ```
//! use ahead_sim::scenario::{run, Scenario, SimOptions};
//! use ahead_sim::device::DeviceKind;
//! use ahead::ra::PolicyKind;
//!
//! let opts = SimOptions {
//!     policies: vec![PolicyKind::OnDemand.into()],
//!     device: DeviceKind::Ssd,
//!     file_size: Some(16 << 20),
//!     memory: Some(64 << 20),
//!     ..SimOptions::default()
//! };
//! let rows = run(&Scenario::Interleaved, &opts).unwrap();
//! assert_eq!(rows.len(), 2); // single, interleaved-8
//! assert!(rows[0].throughput_mb_s > 0.0);
//! ```
#![deny(missing_docs)]

pub mod device;
pub mod engine;
pub mod scenario;
