//! The Buffered and Uncached modes: reads through the kernel's page cache.
//!
//! **Buffered** (the non-blocking buffered reads series,
//! docs/references.md): a read is first tried with
//! `preadv2(RWF_NOWAIT)` on the caller's thread, which copies what the
//! kernel has cached and never waits for the device; only the rest goes to
//! a blocking read (the backend for the async API, the caller's own thread
//! for the blocking one, which waits anyway). So a cached read never waits
//! in a queue behind an uncached one. Each file keeps a smoothed hit ratio
//! of its probes: a file that rarely hits stops being probed (the probe
//! would be a wasted system call per read) and is probed again now and then,
//! so that a file that becomes cached is noticed. The `ahead` readahead
//! policy sees every request; for the streams the kernel does not detect
//! (backward, strided, interleaved on one descriptor) it sends
//! `POSIX_FADV_WILLNEED` hints for the windows it decides to a helper
//! thread, so that the caller never blocks on a hint. A request that starts
//! where the previous one ended — a plain forward stream — is left to the
//! kernel's own readahead.
//!
//! **Uncached**: reads that leave the kernel's cache as they found it.
//! `RWF_DONTCACHE` (Linux 6.14) where the file system supports it: pages
//! this read brings in leave with it, pages cached before stay. Elsewhere,
//! the file's residency is recorded when it is opened (mincore) and the
//! pages not in the record are dropped as reads go and when it closes
//! (`POSIX_FADV_DONTNEED`; see [`Snapshot`]), with the kernel's readahead
//! turned off for the descriptor (`POSIX_FADV_RANDOM`). Where residency
//! cannot be seen (mincore answers
//! "cached" for every page of a file the caller neither owns nor may
//! write), nothing is dropped and [`super::File::residency_blind`] says so.
//!
//! Here: the file and its blocking reads; in `buffered`, the probe and the
//! hints; in `uncached`, the fallback's record ([`Snapshot`]); in `read`,
//! the async read ([`KernelRead`]).

use crate::cache::Stats;
use crate::io::{AlignedBuf, Backend, IoBuf, ReadOp};
use crate::ra::{self, Policy};
use crate::sys;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

mod buffered;
mod read;
mod uncached;

use buffered::RATIO_ONE;
pub(super) use buffered::{start_hinter, Hint};

pub(super) use read::KernelRead;
use uncached::Snapshot;

/// How a file is read. Chosen per file, when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// O_DIRECT through ahead's own cache and readahead (falls back to
    /// buffered descriptors where the file system refuses O_DIRECT).
    #[default]
    Direct,
    /// The kernel's cache, with a non-blocking fast path for cached data
    /// and kernel hints for the streams the kernel does not detect.
    Buffered,
    /// The kernel's cache left as it was found.
    Uncached,
}

impl std::str::FromStr for Mode {
    type Err = crate::ParseError;
    fn from_str(s: &str) -> Result<Mode, crate::ParseError> {
        match s {
            "direct" => Ok(Mode::Direct),
            "buffered" => Ok(Mode::Buffered),
            "uncached" => Ok(Mode::Uncached),
            _ => Err(crate::ParseError::new(
                "mode",
                s,
                "direct, buffered or uncached",
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Mode::Direct => "direct",
            Mode::Buffered => "buffered",
            Mode::Uncached => "uncached",
        })
    }
}

/// One probe in this many is timed, for `inline_ns` (an estimate: the
/// sampled time times this).
const PROBE_TIMED_EVERY: u64 = 16;

/// Counters of a kernel-mode file. A read the probe serves whole touches
/// three of them (probes, hits, bytes) and one in [`PROBE_TIMED_EVERY`] a
/// fourth (time); requests, bytes and probes are sums.
#[derive(Default)]
struct Counters {
    probe_hits: AtomicU64,
    probe_misses: AtomicU64,
    inline_bytes: AtomicU64,
    inline_ns: AtomicU64,
    /// Probes sent, to pick the ones that are timed.
    probes: AtomicU64,
    backend_reads: AtomicU64,
    backend_bytes: AtomicU64,
    backend_ns: AtomicU64,
    /// Requests for nothing (no probe, no backend read).
    empty_requests: AtomicU64,
    /// Reads of a trusted file served by a plain `pread`, and their bytes.
    plain_reads: AtomicU64,
    plain_bytes: AtomicU64,
    hints: AtomicU64,
    hinted_pages: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn nanos(t: Instant) -> u64 {
    t.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

/// A file read through the kernel's cache.
pub(super) struct KernelFile {
    pub(super) mode: Mode,
    fd: Arc<OwnedFd>,
    /// RWF_NOWAIT works here (the process-wide probe and the file system);
    /// cleared if a read says otherwise.
    nowait: AtomicBool,
    /// RWF_DONTCACHE works here; cleared if a read says otherwise.
    dontcache: AtomicBool,
    /// mincore tells the truth about this file (Uncached's fallback).
    residency_visible: bool,
    /// Uncached fallback: the file's residency when it was opened.
    snapshot: Option<Arc<Snapshot>>,
    /// Smoothed probe hit ratio, in 1/65536.
    ratio: AtomicU32,
    /// Reads since the last probe while probing is off.
    skipped: AtomicU32,
    /// Probes in a row that hit, and the trusted reads after them
    /// ([`buffered::TRUST_AFTER`]).
    streak: AtomicU32,
    /// The readahead policy and the pages it has seen, for hints.
    hints: Option<Mutex<ra::hints::Hinter>>,
    hinter: Option<Sender<Hint>>,
    /// Where the previous request ended: a request that starts there is a
    /// plain forward stream, which the kernel's readahead follows itself.
    last_end: AtomicU64,
    /// Whether the hint policy wants cached reads too (a lookahead marker
    /// is out, or hinted pages whose use it counts): if not, a cached read
    /// skips the table's lock.
    wants_cached: AtomicBool,
    counters: Counters,
}

/// Whether an error says the flag is not supported here.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    )
}

impl KernelFile {
    /// The descriptor it reads.
    pub(super) fn fd(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    pub(super) fn new(
        mode: Mode,
        fd: Arc<OwnedFd>,
        size: u64,
        policy: Option<Box<dyn Policy>>,
        hinter: Option<Sender<Hint>>,
        allow_dontcache: bool,
    ) -> KernelFile {
        let nowait = mode == Mode::Buffered && crate::features::nowait_on(fd.as_fd()).available;
        let dontcache = mode == Mode::Uncached
            && allow_dontcache
            && crate::features::dontcache(fd.as_fd()).available;
        let residency_visible = sys::may_see_residency(fd.as_fd());
        // The kernel's page: mincore and fadvise work in it.
        let page = rustix::param::page_size() as u64;
        if mode == Mode::Uncached && !dontcache {
            // Kernel readahead would bring in pages the read did not ask
            // for, which the fallback cannot tell from others' pages.
            let _ = sys::fadvise(fd.as_fd(), 0, 0, sys::Advice::Random);
        }
        let snapshot = (mode == Mode::Uncached && !dontcache && residency_visible)
            .then(|| Snapshot::take(fd.clone(), size))
            .flatten()
            .map(Arc::new);
        let hints = (mode == Mode::Buffered)
            .then_some(policy)
            .flatten()
            .map(|policy| Mutex::new(ra::hints::Hinter::new(policy, size, page)));
        KernelFile {
            mode,
            fd,
            nowait: AtomicBool::new(nowait),
            dontcache: AtomicBool::new(dontcache),
            residency_visible,
            snapshot,
            ratio: AtomicU32::new(RATIO_ONE),
            skipped: AtomicU32::new(0),
            streak: AtomicU32::new(0),
            hinter: if hints.is_some() { hinter } else { None },
            hints,
            last_end: AtomicU64::new(0),
            wants_cached: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }

    /// Whether Uncached reads of this file cannot see residency and so
    /// drop nothing (RWF_DONTCACHE unsupported and mincore untrustworthy).
    pub(super) fn residency_blind(&self) -> bool {
        self.mode == Mode::Uncached
            && !self.dontcache.load(Ordering::Relaxed)
            && !self.residency_visible
    }

    /// Whether the fast path is in use (the kernel and the file system have
    /// RWF_NOWAIT).
    pub(super) fn nowait(&self) -> bool {
        self.nowait.load(Ordering::Relaxed)
    }

    /// Whether RWF_DONTCACHE is in use.
    pub(super) fn dontcache(&self) -> bool {
        self.dontcache.load(Ordering::Relaxed)
    }

    pub(super) fn set_size(&self, size: u64) {
        if let Some(h) = &self.hints {
            h.lock().unwrap_or_else(|p| p.into_inner()).set_size(size);
            self.wants_cached.store(false, Ordering::Relaxed);
        }
    }

    pub(super) fn stats(&self) -> Stats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            requests: l(&c.probe_hits)
                + l(&c.backend_reads)
                + l(&c.empty_requests)
                + l(&c.plain_reads),
            bytes: l(&c.inline_bytes) + l(&c.backend_bytes) + l(&c.plain_bytes),
            plain_reads: l(&c.plain_reads),
            nowait_probes: l(&c.probe_hits) + l(&c.probe_misses),
            nowait_hits: l(&c.probe_hits),
            inline_bytes: l(&c.inline_bytes),
            backend_reads: l(&c.backend_reads),
            hints: l(&c.hints),
            hinted_pages: l(&c.hinted_pages),
            inline_ns: l(&c.inline_ns),
            backend_ns: l(&c.backend_ns),
            ..Stats::default()
        }
    }

    fn flags(&self) -> i32 {
        if self.mode == Mode::Uncached && self.dontcache() {
            sys::RWF_DONTCACHE
        } else {
            0
        }
    }

    /// A blocking read of `buf.len()` bytes at `offset` (continued until
    /// complete or the end of the file), with the mode's flags.
    fn read_blocking(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            match sys::pread_flags(self.fd.as_fd(), &mut buf[done..], at, self.flags()) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if self.flags() != 0 && unsupported(&e) => {
                    // RWF_DONTCACHE refused after all: the fallback from now.
                    self.dontcache.store(false, Ordering::Relaxed);
                    let _ = sys::fadvise(self.fd.as_fd(), 0, 0, sys::Advice::Random);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Reads up to `buf.len()` bytes at `offset`, blocking: the probe, then
    /// the rest on this thread.
    pub(super) fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        if !buf.is_empty() && self.trusted() {
            // Every recent probe hit: a plain pread, as the kernel's own
            // path is, its readahead included should the page be gone.
            self.hint(offset, buf.len(), true);
            let got = self.read_blocking(buf, offset)?;
            add(&self.counters.plain_reads, 1);
            add(&self.counters.plain_bytes, got as u64);
            return Ok(got);
        }
        let done = self.probe(buf, offset);
        self.hint(offset, buf.len(), done == buf.len());
        let mut n = done;
        if done < buf.len() {
            let t = Instant::now();
            add(&self.counters.backend_reads, 1);
            let before = self.residency_before(offset + done as u64, buf.len() - done);
            let r = self.read_blocking(&mut buf[done..], offset + done as u64);
            KernelFile::drop_new(&self.fd, before);
            if let (Some(snap), Ok(got)) = (&self.snapshot, &r) {
                snap.read(offset + done as u64, *got as u64);
            }
            add(&self.counters.backend_ns, nanos(t));
            let got = r?;
            add(&self.counters.backend_bytes, got as u64);
            n += got;
        } else if buf.is_empty() {
            add(&self.counters.empty_requests, 1);
        }
        Ok(n)
    }

    /// Prefetches byte ranges into the kernel's cache (Buffered; in
    /// Uncached mode a prefetch would leave pages behind, so it does
    /// nothing).
    pub(super) fn prefetch(&self, ranges: &[(u64, u64)]) {
        if self.mode != Mode::Buffered {
            return;
        }
        if let Some(tx) = &self.hinter {
            let runs: Vec<(u64, u64)> = ranges.iter().copied().filter(|r| r.1 > 0).collect();
            add(&self.counters.hints, runs.len() as u64);
            let _ = tx.send(Hint {
                fd: self.fd.clone(),
                runs,
            });
        }
    }
}
