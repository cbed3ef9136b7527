//! # ahead — a user-space read path for Linux files
//!
//! `ahead` brings the kernel's buffered read machinery — on-demand readahead
//! with a pipelined lookahead marker, window ramp-up, thrashing recovery — to
//! user space, and goes beyond it with a readahead policy that follows several
//! interleaved streams on one handle, backward and strided reads, and adapts
//! to thrashing and to slow devices.
//!
//! ## The public API
//!
//! Everything a user reaches, by module (the rest is private):
//!
//! * the crate root: [`Engine`] and [`EngineConfig`]; [`File`], opened
//!   with [`OpenOptions`] in one of three [`Mode`]s, read with
//!   [`File::read_at`], [`File::read_at_async`], [`File::read_owned`]
//!   ([`ReadAt`], [`ReadOwned`], driven by any executor or by
//!   [`block_on`]), [`File::read_many`], [`File::read_pages`]
//!   ([`Pages`]) and [`File::reader`] ([`Reader`]), advised with
//!   [`Advice`], refreshed with [`File::refresh`] ([`Refreshed`]); its
//!   counters [`Stats`]; the cache's [`EvictionKind`]; [`Error`],
//!   [`ParseError`] and [`Result`].
//!   - `Direct` — O_DIRECT reads through ahead's own page cache and
//!     readahead, over an I/O backend (io_uring or a thread pool);
//!   - `Buffered` — the kernel's cache, cached data served by a
//!     non-blocking `preadv2(RWF_NOWAIT)` on the caller's thread and only
//!     misses handed to the backend, with kernel hints for the streams the
//!     kernel does not detect;
//!   - `Uncached` — reads that leave the kernel's cache as they found it
//!     (`RWF_DONTCACHE`, or a residency record and `DONTNEED`).
//!
//!   `docs/modes.md` in the repository is the reference.
//! * [`io`] — the backends reads go to ([`io::Backend`], [`io::Uring`],
//!   [`io::Pool`], [`io::new_backend`], [`io::BackendKind`]), the read
//!   they take ([`io::ReadOp`], its memory [`io::IoBuf`],
//!   [`io::AlignedBuf`]) and what it reads from ([`io::ReadSource`], the
//!   seam a source other than a local file plugs into);
//! * [`ra`] — the readahead policies (pure decision logic: [`ra::Policy`],
//!   [`ra::new_policy`], [`ra::PolicyKind`], one module per policy with
//!   the constants it is tuned by) and [`ra::drive`], the one function
//!   every engine and the simulator consult them through;
//! * [`residency`] — the kernel page cache's view of a file (cachestat,
//!   mincore), evict and warm, and the residency [`residency::record`]
//!   behind the Uncached fallback;
//! * [`features`] — the kernel features ahead uses, probed at run time
//!   (what `ahead doctor` prints);
//! * [`copy`] — the copy engine behind `ahead copy` (parallel,
//!   sparse-aware, neutral to the page cache, resumable, verified):
//!   [`copy::copy`], [`copy::copy_tree`], [`copy::CopyOptions`];
//! * [`units`] — page/byte conversions and human-readable sizes;
//! * [`walk`] — directory trees walked through descriptors, never through
//!   a link (what `copy_tree` and the CLI's `-R` use).
//!
//! For tests and benchmarks: [`testdata`] (generated file contents in which
//! every byte is checkable; `ahead bench` generates its files with it) and
//! [`io::fault`] (a backend that injects errors, short reads and delays:
//! `ahead stress` runs the engine under it). Neither brings a dependency;
//! the embedded S3 server and the Ceph launcher of the tests are a crate of
//! their own (`ahead-testkit`).
//!
//! Reading a file in Direct mode:
//!
//! ```
//! use ahead::{Engine, EngineConfig};
//!
//! # let dir = ahead::testdata::scratch_root();
//! # let path = dir.join(format!("ahead-doc-{}", std::process::id()));
//! # ahead::testdata::write_file(&path, 1 << 20).unwrap();
//! let engine = Engine::new(EngineConfig::default())?;
//! let file = engine.open(&path)?;
//! let mut buf = vec![0u8; 4096];
//! for offset in (0..file.len()).step_by(4096) {
//!     let n = file.read_at(&mut buf, offset)?;
//!     assert_eq!(ahead::testdata::first_mismatch(&buf[..n], offset), None);
//! }
//! // The first read missed; readahead brought in the rest.
//! let stats = file.stats();
//! assert_eq!(stats.requests, 256);
//! assert!(stats.hits + stats.late > 200);
//! # std::fs::remove_file(&path).unwrap();
//! # Ok::<(), ahead::Error>(())
//! ```
//!
//! A file in Buffered mode, read by a spawned task with an owned buffer:
//!
//! ```
//! use ahead::{Engine, EngineConfig, Mode, OpenOptions};
//!
//! # let dir = ahead::testdata::scratch_root();
//! # let path = dir.join(format!("ahead-doc-b-{}", std::process::id()));
//! # ahead::testdata::write_file(&path, 1 << 20).unwrap();
//! let engine = Engine::new(EngineConfig::default())?;
//! let file = engine.open_with(&path, &OpenOptions::new().mode(Mode::Buffered))?;
//! // Any executor; here `block_on` drives it on this thread.
//! let fut = file.read_owned(vec![0u8; 16 << 10], 4096);
//! let (buf, n) = ahead::block_on(fut);
//! assert_eq!(n?, 16 << 10);
//! assert_eq!(ahead::testdata::first_mismatch(&buf, 4096), None);
//! // Cached reads are served inline by the probe where the kernel has
//! // RWF_NOWAIT; the rest by a blocking read.
//! let s = file.stats();
//! assert_eq!(s.nowait_hits + s.backend_reads, 1);
//! # std::fs::remove_file(&path).unwrap();
//! # Ok::<(), ahead::Error>(())
//! ```
//!
//! ## Coherence: files that change under the engine
//!
//! Direct mode keeps its own cache, which the kernel does not keep coherent
//! with other writers. The contract:
//! * a cached page is the file as it was when that page was read;
//! * a read that reaches the device sees the file as it is, and past the
//!   file's end gets the end of the file (a file that shrank is never
//!   padded);
//! * [`File::refresh`] looks at the file again: if its size, modification
//!   or change time differ, every cached page of it is dropped and reads in
//!   flight fill nothing, so the next reads see the file as it is;
//! * so a program that writes a file outside the engine (or knows another
//!   does) calls `refresh()` after the writes, or opens the file again.
//!
//! More in `examples/`: `stream` (a file through [`File::reader`]),
//! `random_depth` (64 KiB random reads at depth 64 through
//! [`File::read_many`]) and `tokio` (tasks awaiting [`File::read_at_async`]).
//!
//! A readahead decision on its own:
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

mod cache;
pub mod copy;
mod error;
pub mod features;
mod file;
pub mod io;
pub mod perf;
pub mod ra;
#[cfg(feature = "remote")]
pub mod remote;
pub mod residency;
mod sys;
pub mod testdata;
pub mod units;
pub mod walk;

pub use cache::{EvictionKind, Stats};
pub use error::{Error, ParseError, Result};
pub use file::{
    block_on, Advice, Engine, EngineConfig, File, Mode, OpenOptions, Pages, ReadAt, ReadOwned,
    ReadaheadTuning, Reader, Refreshed, TuneSample,
};
