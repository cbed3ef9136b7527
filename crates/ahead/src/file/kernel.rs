//! The Buffered and Uncached modes: reads through the kernel's page cache.
//!
//! **Buffered** (seed 004): a read is first tried with
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

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::cache::Stats;
use crate::io::{AlignedBuf, Backend, IoBuf, ReadOp};
use crate::ra::{self, Policy};
use crate::sys;

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
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "direct" => Ok(Mode::Direct),
            "buffered" => Ok(Mode::Buffered),
            "uncached" => Ok(Mode::Uncached),
            _ => Err(format!("unknown mode '{s}' (direct, buffered, uncached)")),
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

/// The weight of each new probe in a file's smoothed hit ratio: 1/8, the
/// gain TCP gives each new sample of its smoothed round-trip time (RFC
/// 6298). From the optimistic start (1.0), 18 misses in a row take a file
/// below [`PROBE_STOP_RATIO`].
pub const PROBE_WEIGHT: f64 = 1.0 / 8.0;
/// Below this smoothed hit ratio a file's reads go straight to a blocking
/// read: the probe would cost a system call and find nothing nine times in
/// ten. The seed's authors kept "fast reads" only for files with a good hit
/// ratio without giving a figure; 10% is where a probe (about 1 µs on a
/// miss) stops paying for itself against a 100 µs device read saved once
/// in ten.
pub const PROBE_STOP_RATIO: f64 = 0.10;
/// While a file is not probed, every this-many-th read probes anyway, so a
/// file that becomes cached is noticed within a few dozen reads (3% of reads
/// spent probing a cold file).
pub const REPROBE_EVERY: u32 = 32;
/// Fixed-point scale of the hit ratio.
const RATIO_ONE: u32 = 1 << 16;

/// Counters of a kernel-mode file. A read the probe serves whole touches
/// three of them (hits, bytes, time); requests, bytes and probes are sums.
#[derive(Default)]
struct Counters {
    probe_hits: AtomicU64,
    probe_misses: AtomicU64,
    inline_bytes: AtomicU64,
    inline_ns: AtomicU64,
    backend_reads: AtomicU64,
    backend_bytes: AtomicU64,
    backend_ns: AtomicU64,
    /// Requests for nothing (no probe, no backend read).
    empty_requests: AtomicU64,
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
    page: u64,
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

/// Hints for the helper thread: `(offset, len)` byte runs of one file.
pub(super) struct Hint {
    fd: Arc<OwnedFd>,
    runs: Vec<(u64, u64)>,
}

/// Starts the thread that issues an engine's kernel hints. It ends when the
/// engine (the last sender) is gone.
pub(super) fn start_hinter() -> Option<Sender<Hint>> {
    let (tx, rx) = channel::<Hint>();
    std::thread::Builder::new()
        .name("ahead-hints".into())
        .spawn(move || {
            for h in rx {
                for (offset, len) in h.runs {
                    let _ = sys::fadvise(h.fd.as_fd(), offset, len, sys::Advice::WillNeed);
                }
            }
        })
        .ok()?;
    Some(tx)
}

/// Whether an error says the flag is not supported here.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    )
}

impl KernelFile {
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
            .then(|| Snapshot::take(&fd, size, page))
            .flatten()
            .map(Arc::new);
        let hints = (mode == Mode::Buffered)
            .then_some(policy)
            .flatten()
            .map(|policy| Mutex::new(ra::hints::Hinter::new(policy, size, page)));
        KernelFile {
            mode,
            fd,
            page,
            nowait: AtomicBool::new(nowait),
            dontcache: AtomicBool::new(dontcache),
            residency_visible,
            snapshot,
            ratio: AtomicU32::new(RATIO_ONE),
            skipped: AtomicU32::new(0),
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
            requests: l(&c.probe_hits) + l(&c.backend_reads) + l(&c.empty_requests),
            bytes: l(&c.inline_bytes) + l(&c.backend_bytes),
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

    /// Whether this read should be tried with RWF_NOWAIT first.
    fn should_probe(&self) -> bool {
        if self.mode != Mode::Buffered || !self.nowait() {
            return false;
        }
        let ratio = self.ratio.load(Ordering::Relaxed) as f64 / RATIO_ONE as f64;
        if ratio >= PROBE_STOP_RATIO {
            return true;
        }
        let n = self.skipped.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= REPROBE_EVERY {
            self.skipped.store(0, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Folds one probe's outcome into the smoothed hit ratio.
    fn record(&self, hit: bool) {
        let old = self.ratio.load(Ordering::Relaxed) as f64;
        let sample = if hit { RATIO_ONE as f64 } else { 0.0 };
        let new = old + PROBE_WEIGHT * (sample - old);
        self.ratio.store(new.round() as u32, Ordering::Relaxed);
    }

    /// The probe: reads what the kernel has cached of `buf.len()` bytes at
    /// `offset` without waiting for the device. Returns the bytes served.
    fn probe(&self, buf: &mut [u8], offset: u64) -> usize {
        if buf.is_empty() || !self.should_probe() {
            return 0;
        }
        let t = Instant::now();
        let n = match sys::pread_flags(self.fd.as_fd(), buf, offset, libc::RWF_NOWAIT) {
            Ok(n) => n,
            Err(e) if unsupported(&e) => {
                // The file system refuses the flag after all.
                self.nowait.store(false, Ordering::Relaxed);
                0
            }
            // EAGAIN: not cached. A real error is found again, and
            // reported, by the blocking read.
            Err(_) => 0,
        };
        let hit = n == buf.len();
        self.record(hit);
        add(
            if hit {
                &self.counters.probe_hits
            } else {
                &self.counters.probe_misses
            },
            1,
        );
        add(&self.counters.inline_bytes, n as u64);
        add(&self.counters.inline_ns, nanos(t));
        n
    }

    /// Feeds a request to the readahead policy and sends the hints it
    /// decides to the helper thread. As in the kernel's on-demand
    /// readahead, the policy is consulted only at misses and lookahead
    /// markers: a request the probe served whole (`cached`) that carries no
    /// marker costs nothing more.
    fn hint(&self, offset: u64, len: usize, cached: bool) {
        let (Some(h), Some(tx)) = (&self.hints, &self.hinter) else {
            return;
        };
        let end = offset + len as u64;
        let sequential = self.last_end.swap(end, Ordering::Relaxed) == offset;
        if cached && !self.wants_cached.load(Ordering::Relaxed) {
            // No marker and no hint is out: a hit is no news to the
            // policy (and takes no lock).
            return;
        }
        let mut runs = Vec::new();
        let pages = {
            let mut g = h.lock().unwrap_or_else(|p| p.into_inner());
            let pages = g.request(offset, len as u64, cached, sequential, &mut runs);
            self.wants_cached
                .store(g.wants_cached_requests(), Ordering::Relaxed);
            pages
        };
        if runs.is_empty() {
            return;
        }
        add(&self.counters.hints, runs.len() as u64);
        add(&self.counters.hinted_pages, pages);
        let _ = tx.send(Hint {
            fd: self.fd.clone(),
            runs,
        });
    }

    /// The page-aligned span of `len` bytes at `offset`.
    fn span(&self, offset: u64, len: usize) -> (u64, usize) {
        let start = offset / self.page * self.page;
        let end = (offset + len as u64).div_ceil(self.page) * self.page;
        (start, (end - start) as usize)
    }

    /// Uncached fallback: which pages of the span are cached now (None when
    /// nothing will be dropped).
    fn residency_before(&self, offset: u64, len: usize) -> Option<(u64, Vec<bool>)> {
        if self.mode != Mode::Uncached
            || self.dontcache()
            || !self.residency_visible
            || self.snapshot.is_some()
        {
            return None;
        }
        let (start, span) = self.span(offset, len);
        let mut v = Vec::new();
        sys::mincore(self.fd.as_fd(), start, span, &mut v).ok()?;
        Some((start, v))
    }

    /// Uncached fallback: drops the pages that were not cached just before
    /// the read. The look comes right before the read and the drop right
    /// after it, to keep short the window in which another process may
    /// start using a page this read brought in: mincore cannot say who
    /// brought a page in, so such a page would be dropped too (RWF_DONTCACHE
    /// has no such window: the kernel knows).
    fn drop_new(fd: &OwnedFd, page: u64, before: Option<(u64, Vec<bool>)>) {
        let Some((start, resident)) = before else {
            return;
        };
        let mut i = 0;
        while i < resident.len() {
            if resident[i] {
                i += 1;
                continue;
            }
            let from = i;
            while i < resident.len() && !resident[i] {
                i += 1;
            }
            let _ = sys::fadvise(
                fd.as_fd(),
                start + from as u64 * page,
                (i - from) as u64 * page,
                sys::Advice::DontNeed,
            );
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
        let done = self.probe(buf, offset);
        self.hint(offset, buf.len(), done == buf.len());
        let mut n = done;
        if done < buf.len() {
            let t = Instant::now();
            add(&self.counters.backend_reads, 1);
            let before = self.residency_before(offset + done as u64, buf.len() - done);
            let r = self.read_blocking(&mut buf[done..], offset + done as u64);
            KernelFile::drop_new(&self.fd, self.page, before);
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

/// Files up to this many pages get a residency snapshot (64 GiB of 4 KiB
/// pages: 16 MiB of map); larger ones are checked read by read.
const SNAPSHOT_MAX_PAGES: u64 = 16 << 20;
/// The fallback drops what reads brought in every this many bytes read,
/// and when the file is closed.
const PASS_EVERY: u64 = 8 << 20;
/// How far past what was read a pass looks: a read landing on a lookahead
/// marker another reader's readahead left starts the kernel's async
/// readahead even under `POSIX_FADV_RANDOM`, up to twice the device's
/// `read_ahead_kb` ahead (8 MiB on the development VM).
const LOOK_PAST: u64 = 16 << 20;

/// The Uncached fallback's record of a file (Debian `nocache`'s method):
/// which pages were cached when it was opened, and the span read since.
/// Every [`PASS_EVERY`] bytes read and when the file is closed, the pages
/// of that span (and [`LOOK_PAST`] beyond) that the snapshot did not have
/// are dropped; at close, pages still under I/O (DONTNEED skips them) are
/// chased for up to 100 ms. A check just before each read missed the
/// async readahead of someone else's markers: a file half cached by a
/// plain reader kept 94% of its other half after an Uncached read.
pub(super) struct Snapshot {
    fd: Arc<OwnedFd>,
    page: u64,
    before: Vec<bool>,
    /// (lowest offset read, end of the highest read, bytes since the last
    /// pass).
    span: Mutex<(u64, u64, u64)>,
}

impl Snapshot {
    fn take(fd: &Arc<OwnedFd>, size: u64, page: u64) -> Option<Snapshot> {
        if size.div_ceil(page) > SNAPSHOT_MAX_PAGES {
            return None;
        }
        let before = crate::residency::page_map(fd.as_fd(), 0, size).ok()??;
        Some(Snapshot {
            fd: fd.clone(),
            page,
            before,
            span: Mutex::new((u64::MAX, 0, 0)),
        })
    }

    fn read(&self, offset: u64, n: u64) {
        let pass = {
            let mut g = self.span.lock().unwrap_or_else(|p| p.into_inner());
            g.0 = g.0.min(offset);
            g.1 = g.1.max(offset + n);
            g.2 += n;
            if g.2 >= PASS_EVERY {
                g.2 = 0;
                true
            } else {
                false
            }
        };
        if pass {
            self.pass(false);
        }
    }

    fn was_cached(&self, index: u64) -> bool {
        self.before.get(index as usize).copied().unwrap_or(false)
    }

    /// Drops the pages of the span read (and beyond) the snapshot did not
    /// have; `chase`: then those that come in from reads still in flight.
    fn pass(&self, chase: bool) {
        let (lo, hi, _) = *self.span.lock().unwrap_or_else(|p| p.into_inner());
        if lo >= hi {
            return;
        }
        let first = lo / self.page;
        let last = (hi + LOOK_PAST).div_ceil(self.page);
        let drop_runs = |resident: Option<(u64, &[bool])>| -> bool {
            let mut any = false;
            let mut i = first;
            while i < last {
                let now = resident.is_none_or(|(at, r)| r.get((i - at) as usize) == Some(&true));
                if self.was_cached(i) || !now {
                    i += 1;
                    continue;
                }
                let from = i;
                while i < last
                    && !self.was_cached(i)
                    && resident.is_none_or(|(at, r)| r.get((i - at) as usize) == Some(&true))
                {
                    i += 1;
                }
                any = true;
                let _ = sys::fadvise(
                    self.fd.as_fd(),
                    from * self.page,
                    (i - from) * self.page,
                    sys::Advice::DontNeed,
                );
            }
            any
        };
        drop_runs(None);
        if !chase {
            return;
        }
        for _ in 0..50 {
            let mut v = Vec::new();
            if sys::mincore(
                self.fd.as_fd(),
                first * self.page,
                ((last - first) * self.page) as usize,
                &mut v,
            )
            .is_err()
            {
                return;
            }
            if !drop_runs(Some((first, &v))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.pass(true);
    }
}

/// Where an async kernel-mode read stands.
#[derive(Default)]
pub(super) enum KernelRead {
    /// Not started.
    #[default]
    Start,
    /// The probe served `done` bytes; the rest is with the backend.
    Waiting {
        done: usize,
        slot: Arc<Slot>,
        started: Instant,
    },
    /// Finished (polled again after Ready).
    Done,
}

/// Where the backend leaves a completed read and whom to wake.
#[derive(Default)]
pub(super) struct Slot {
    result: Mutex<Option<(ReadOp, std::io::Result<usize>)>>,
    waker: Mutex<Option<Waker>>,
}

impl KernelRead {
    /// Polls a read of `buf.len()` bytes at `offset`: the first poll probes
    /// inline and hands the rest to the backend, which never blocks the
    /// caller beyond the probe (unless the backend already has its full
    /// depth in flight); later polls copy the backend's bytes out.
    pub(super) fn poll(
        &mut self,
        kf: &KernelFile,
        backend: &Arc<dyn Backend>,
        buf: &mut [u8],
        offset: u64,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        loop {
            match std::mem::take(self) {
                KernelRead::Start => {
                    let done = kf.probe(buf, offset);
                    kf.hint(offset, buf.len(), done == buf.len());
                    if done == buf.len() {
                        if buf.is_empty() {
                            add(&kf.counters.empty_requests, 1);
                        }
                        *self = KernelRead::Done;
                        return Poll::Ready(Ok(done));
                    }
                    let rest = buf.len() - done;
                    let at = offset + done as u64;
                    let slot = Arc::new(Slot::default());
                    *slot.waker.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(cx.waker().clone());
                    let before = kf.residency_before(at, rest);
                    let (fd, page) = (kf.fd.clone(), kf.page);
                    let snap = kf.snapshot.clone();
                    let s = slot.clone();
                    add(&kf.counters.backend_reads, 1);
                    let op = ReadOp {
                        fd: kf.fd.clone(),
                        offset: at,
                        len: rest,
                        buf: IoBuf::Owned(AlignedBuf::new(rest, 512)),
                        flags: kf.flags(),
                        // The probe missed (or was skipped for a file that
                        // rarely hits).
                        known_miss: true,
                    };
                    *self = KernelRead::Waiting {
                        done,
                        slot,
                        started: Instant::now(),
                    };
                    backend.submit(
                        op,
                        Box::new(move |op, r| {
                            KernelFile::drop_new(&fd, page, before);
                            if let (Some(snap), Ok(got)) = (&snap, &r) {
                                snap.read(at, *got as u64);
                            }
                            *s.result.lock().unwrap_or_else(|p| p.into_inner()) = Some((op, r));
                            let w = s.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
                            if let Some(w) = w {
                                w.wake();
                            }
                        }),
                    );
                    // Completed already? Look before sleeping.
                }
                KernelRead::Waiting {
                    done,
                    slot,
                    started,
                } => {
                    let got = slot.result.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let Some((op, r)) = got else {
                        *slot.waker.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(cx.waker().clone());
                        // The completion may have come between the two locks.
                        let got = slot.result.lock().unwrap_or_else(|p| p.into_inner()).take();
                        match got {
                            None => {
                                *self = KernelRead::Waiting {
                                    done,
                                    slot,
                                    started,
                                };
                                return Poll::Pending;
                            }
                            Some(x) => {
                                return Poll::Ready(self.finish(kf, buf, done, started, x));
                            }
                        }
                    };
                    return Poll::Ready(self.finish(kf, buf, done, started, (op, r)));
                }
                KernelRead::Done => return Poll::Ready(Ok(0)),
            }
        }
    }

    fn finish(
        &mut self,
        kf: &KernelFile,
        buf: &mut [u8],
        done: usize,
        started: Instant,
        (op, r): (ReadOp, std::io::Result<usize>),
    ) -> std::io::Result<usize> {
        *self = KernelRead::Done;
        add(&kf.counters.backend_ns, nanos(started));
        let n = r?;
        if let IoBuf::Owned(b) = &op.buf {
            buf[done..done + n].copy_from_slice(&b.as_slice()[..n]);
        }
        add(&kf.counters.backend_bytes, n as u64);
        Ok(done + n)
    }
}
