//! # ahead-bench — reports for benchmarks and simulations
//!
//! Plain-text tables and SVG plots, shared by `ahead sim` and `ahead bench`.
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

pub mod report;
