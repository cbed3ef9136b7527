//! # ahead-bench — reports for benchmarks and simulations
//!
//! Read workloads on real files through the kernel's paths and ahead's
//! ([`workload`], [`suite`]), the mixed cached/uncached workload
//! ([`mix`], [`mix_suite`]), cold sequential reads on the uncapped
//! device judged by each side's best run ([`fast_suite`]), copies against cp and nbdcopy
//! ([`copy_suite`]), `ahead mount` beside the other mounts of a bucket
//! (`mount_suite`, with the embedded server), the steady device of `--device` ([`device`]), the
//! stress test that checks every byte under load ([`stress`]), and
//! plain-text tables and SVG plots ([`report`]), shared by `ahead read`,
//! `ahead bench`, `ahead stress` and `ahead sim`. Every harness lives
//! here; the CLI only parses and prints.
//! No plotting dependency: the plots are a few dozen SVG elements, written
//! directly.
//!
//! ```
//! use ahead_bench::report::Table;
//! let mut t = Table::new(&["policy", "MB/s"]);
//! t.row(vec!["ondemand".into(), "62.1".into()]);
//! assert!(t.render().contains("ondemand"));
//! ```
#![deny(missing_docs)]

pub mod copy_suite;
pub mod device;
mod error;
pub mod fast_suite;
pub mod mix;
pub mod mix_suite;
#[cfg(feature = "embedded-server")]
pub mod mount_suite;
pub mod remote_suite;
pub mod report;
pub mod shaper;
pub mod stress;
pub mod suite;
pub mod workdir;
pub mod workload;

pub use error::{Error, Result};
