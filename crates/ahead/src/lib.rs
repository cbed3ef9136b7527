//! # ahead — a user-space read path for Linux files
//!
//! `ahead` brings the kernel's buffered read machinery — on-demand readahead
//! with a pipelined lookahead marker, window ramp-up, thrashing recovery — to
//! user space, and goes beyond it with a readahead policy that follows several
//! interleaved streams on one handle, backward and strided reads, and adapts
//! to thrashing and to slow devices.
//!
//! This crate is the library. Today it holds:
//!
//! * [`ra`] — the readahead policies (pure decision logic) and the
//!   [`ra::drive`] function that every engine uses to consult them;
//! * [`units`] — page/byte conversions and human-readable sizes.
//!
//! ```
//! use ahead::ra::{self, PolicyKind, RaConfig, Request, Trigger, CacheView};
//!
//! // A cache that holds nothing, for a file of 1000 pages.
//! struct Empty;
//! impl CacheView for Empty {
//!     fn file_pages(&self) -> u64 { 1000 }
//!     fn is_present(&self, _index: u64) -> bool { false }
//! }
//!
//! let mut policy = ra::new_policy(PolicyKind::OnDemand, RaConfig::with_max_pages(32));
//! // A 1-page read at the start of the file starts a window of 4 pages
//! // (the request rounded up, times 4), with the marker on page 1.
//! let w = policy.decide(Request::new(0, 1), Trigger::Miss, &Empty).unwrap();
//! assert_eq!((w.start, w.size, w.async_size), (0, 4, 3));
//! assert_eq!(w.marker_page(), Some(1));
//! ```
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cache;
mod error;
mod file;
pub mod io;
pub mod ra;
pub mod sys;
pub mod testdata;
pub mod units;

pub use error::{Error, Result};
pub use file::{Advice, Engine, EngineConfig, File, Pages, ReadAt, Reader};
