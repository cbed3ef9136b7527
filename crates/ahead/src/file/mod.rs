//! The engine and its files: O_DIRECT reads through ahead's own cache and
//! readahead.
//!
//! An [`Engine`] owns one [`PageCache`] and one I/O backend; every [`File`]
//! it opens shares them. A read goes through three steps:
//!
//! 1. **plan** — under the file's policy lock and the cache lock,
//!    [`ra::drive`] walks the request's pages, consults the readahead policy
//!    at misses and marker hits, and claims frames for every page that must
//!    be read (readahead windows and the request's own missing runs, each
//!    split into device reads of at most `max_io` bytes);
//! 2. **issue** — with no lock held, readahead goes to the backend, and the
//!    request's own missing pages are read in the calling thread (it waits
//!    for them anyway; for `read_many` and the async API they go to the
//!    backend too);
//! 3. **copy** — up-to-date pages are pinned, copied out (or lent, for
//!    [`File::read_pages`]) and unpinned; pages still being read are waited
//!    for, pages evicted in between are planned again.
//!
//! Requests larger than the readahead maximum are served in pieces of that
//! size, each planned as one request, so that one huge read cannot claim
//! the whole cache.
//!
//! Before all that, `read_at` tries the **hit path** (`File::read_hit`): a
//! read of at most 32 pages, each up to date, whole, unmarked and used
//! before, is copied out with no lock at all (pins and identity words, see
//! `cache::hits`). The policy would only have called `begin` and `finish`
//! for such a request; it gets them later, in order, from a queue that the
//! next planning empties first. So two threads hitting one cached file do
//! not queue on its locks, and one reader's policy sees what it always saw.

mod engine;
mod future;
mod kernel;
mod pages;
mod reader;

pub use engine::{Engine, EngineConfig, OpenOptions};
use engine::{Shared, FRAME_RETRY};
pub use future::{ReadAt, ReadOwned};
pub use kernel::{Mode, PROBE_STOP_RATIO, PROBE_WEIGHT, REPROBE_EVERY};
pub use pages::Pages;
pub use reader::Reader;

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cache::{self, Collected, PageCache, Plan, Planner, Stats};
use crate::io::{IoBuf, ReadOp};
use crate::ra::{self, Policy, Request, Window};
use crate::{sys, Error, Result};
use crossbeam_queue::ArrayQueue;
use std::future::Future as _;
use std::os::fd::AsFd as _;

/// What says a file changed: its size and its modification and change
/// times (a writer cannot set the change time back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(fd: &OwnedFd) -> io::Result<Stamp> {
        let st = rustix::fs::fstat(fd)?;
        let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
        let size = if rustix::fs::FileType::from_raw_mode(st.st_mode)
            == rustix::fs::FileType::BlockDevice
        {
            rustix::fs::seek(fd, rustix::fs::SeekFrom::End(0))?
        } else {
            st.st_size as u64
        };
        #[allow(clippy::unnecessary_cast)] // the fields' widths vary by architecture
        Ok(Stamp {
            size,
            mtime_ns: ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime_ns: ns(st.st_ctime as i64, st.st_ctime_nsec as i64),
        })
    }
}

/// What [`File::refresh`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refreshed {
    /// Whether the file changed since it was opened (or last refreshed).
    pub changed: bool,
    /// Its size now.
    pub size: u64,
    /// Cached pages dropped because it changed.
    pub dropped_pages: u64,
}

/// How a range of a file will be read, for [`File::advise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advice {
    /// No particular pattern: the readahead policy decides (the default).
    Normal,
    /// Read forward: each read also asks for the next full window.
    Sequential,
    /// Read backward: each read also asks for the full window before it.
    Reverse,
    /// No readahead: read exactly what is asked.
    Random,
    /// Will be needed soon: prefetch it now.
    WillNeed,
}

/// How many ways per-thread state is split: [`Served`]'s counters and the
/// hit path's queues. Threads beyond that share.
const SHARDS: usize = 8;

/// This thread's shard, handed out round-robin on first use.
fn shard() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// One thread's share of [`Served`], on its own cache lines: counters
/// that two threads bump on every read would otherwise bounce between
/// their cores (it showed in `perf` as most of the hit path's own time).
#[derive(Default)]
#[repr(align(128))]
struct ServedShard {
    requests: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
    hits: std::sync::atomic::AtomicU64,
    /// The hit path's failures in a row on this file (see
    /// [`File::read_hit`]).
    hit_fails: std::sync::atomic::AtomicU32,
}

/// Requests and bytes served, and pages hit without the cache's lock,
/// counted with atomics, one set per thread shard (summed when read).
#[derive(Default)]
pub(super) struct Served([ServedShard; SHARDS]);

impl Served {
    fn add(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.0[shard()];
        s.requests.fetch_add(1, Relaxed);
        s.bytes.fetch_add(bytes, Relaxed);
    }

    fn add_hits(&self, pages: u64) {
        self.0[shard()]
            .hits
            .fetch_add(pages, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn add_to(&self, s: &mut Stats) {
        use std::sync::atomic::Ordering::Relaxed;
        for x in &self.0 {
            s.requests += x.requests.load(Relaxed);
            s.bytes += x.bytes.load(Relaxed);
            let hits = x.hits.load(Relaxed);
            s.hits += hits;
            s.lock_free_hits += hits;
        }
    }
}

struct FileInner {
    /// This file's requests and bytes (Direct mode), outside the cache's
    /// lock.
    served: Served,
    engine: Arc<Shared>,
    id: cache::FileId,
    path: PathBuf,
    fd: Arc<OwnedFd>,
    direct: bool,
    /// Buffered and Uncached files: the kernel's cache is read instead of
    /// the engine's.
    kernel: Option<kernel::KernelFile>,
    policy: Mutex<Box<dyn Policy>>,
    /// Requests served by the hit path, for the policy to see in order
    /// before its next decision (see [`File::read_hit`]); one queue per
    /// thread shard, so that two threads do not pass its cache lines back
    /// and forth on every hit.
    hits_seen: Box<[ArrayQueue<Request>]>,
    /// Set when a request is queued in `hits_seen`, cleared by the replay:
    /// planning skips the queues while it is clear (a cold scan queues
    /// nothing, and looking into eight empty queues per request showed in
    /// its profile).
    hits_queued: std::sync::atomic::AtomicBool,
    /// Whether reads may take the hit path: the policy is consulted only
    /// at misses and marker hits (on-demand), so a request of unmarked,
    /// up-to-date pages asks nothing of it but `begin` and `finish`.
    hit_path: bool,
    advice: Mutex<Vec<(u64, u64, Advice)>>,
    /// Set by the first `advise` that records advice: until then a read
    /// takes no lock to learn there is none.
    advised: std::sync::atomic::AtomicBool,
    /// The file as it was when opened or last refreshed.
    stamp: Mutex<Stamp>,
}

impl Drop for FileInner {
    fn drop(&mut self) {
        self.engine.cache.close_file(self.id);
    }
}

/// A file opened by an [`Engine`]. Cheap to clone; share it across threads.
#[derive(Clone)]
pub struct File {
    inner: Arc<FileInner>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("path", &self.inner.path)
            .field("mode", &self.mode())
            .field("direct", &self.inner.direct)
            .finish()
    }
}

/// Whether a planned demand read runs in the caller or goes to the backend.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Issue {
    Inline,
    Backend,
}

impl File {
    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether reads bypass the kernel's cache (false after the fallback
    /// for file systems without O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }

    /// The mode it was opened in.
    pub fn mode(&self) -> Mode {
        self.inner.kernel.as_ref().map_or(Mode::Direct, |k| k.mode)
    }

    /// Buffered mode: whether the non-blocking fast path is in use (the
    /// kernel and the file system have `RWF_NOWAIT`; see
    /// [`crate::features::nowait`]).
    pub fn uses_nowait(&self) -> bool {
        self.inner.kernel.as_ref().is_some_and(|k| k.nowait())
    }

    /// Uncached mode: whether `RWF_DONTCACHE` is in use (else the
    /// residency fallback).
    pub fn uses_dontcache(&self) -> bool {
        self.inner.kernel.as_ref().is_some_and(|k| k.dontcache())
    }

    /// Uncached mode: true when this file's reads cannot leave the cache as
    /// they found it — no `RWF_DONTCACHE` here, and mincore does not tell
    /// the truth about a file the caller neither owns nor may write — so
    /// they drop nothing. Tell the user once.
    pub fn residency_blind(&self) -> bool {
        self.inner
            .kernel
            .as_ref()
            .is_some_and(|k| k.residency_blind())
    }

    /// Size in bytes as the engine knows it.
    pub fn len(&self) -> u64 {
        self.inner.engine.cache.lock().file(self.inner.id).size
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Looks at the file again. If it changed since it was opened or last
    /// refreshed (its size, modification or change time), every cached
    /// page is dropped, reads in flight fill nothing, and the new size is
    /// taken: the next reads see the file as it is. Unchanged, nothing is
    /// dropped. See the crate docs for the coherence contract.
    pub fn refresh(&self) -> Result<Refreshed> {
        let now =
            Stamp::of(&self.inner.fd).map_err(|e| Error::io("stat", &self.inner.path, None, e))?;
        let mut stamp = self.inner.stamp.lock().unwrap_or_else(|p| p.into_inner());
        if *stamp == now {
            return Ok(Refreshed {
                changed: false,
                size: self.len(),
                dropped_pages: 0,
            });
        }
        *stamp = now;
        if let Some(k) = &self.inner.kernel {
            k.set_size(now.size);
        }
        let dropped_pages = self.inner.engine.cache.drop_pages(self.inner.id, now.size);
        Ok(Refreshed {
            changed: true,
            size: now.size,
            dropped_pages,
        })
    }

    /// This file's counters.
    pub fn stats(&self) -> Stats {
        match &self.inner.kernel {
            Some(k) => k.stats(),
            None => {
                let mut s = self.inner.engine.cache.lock().file(self.inner.id).stats;
                self.inner.served.add_to(&mut s);
                s
            }
        }
    }

    /// Counts one request that returned `bytes` (the file's and the
    /// engine's counters: atomics, no lock).
    fn served(&self, bytes: u64) {
        self.inner.served.add(bytes);
        self.inner.engine.served.add(bytes);
    }

    /// A stream over the file with its own position.
    pub fn reader(&self) -> Reader {
        Reader {
            file: self.clone(),
            pos: 0,
            buf: Vec::new(),
            buf_start: 0,
            buf_len: 0,
        }
    }

    fn page(&self) -> u64 {
        self.inner.engine.config.page_size
    }

    fn io_error(&self, op: &'static str, offset: u64, e: io::Error) -> Error {
        Error::io(op, &self.inner.path, Some(offset), e)
    }

    /// Declares how `len` bytes from `offset` will be read.
    /// [`Advice::WillNeed`] starts reading them at once.
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) {
        if let Some(k) = &self.inner.kernel {
            // The kernel's own advice; WillNeed goes to the hint thread.
            let a = match advice {
                Advice::WillNeed => return k.prefetch(&[(offset, len)]),
                Advice::Sequential => sys::Advice::Sequential,
                Advice::Random => sys::Advice::Random,
                Advice::Normal | Advice::Reverse => sys::Advice::Normal,
            };
            if k.mode == Mode::Buffered {
                let _ = sys::fadvise(self.inner.fd.as_fd(), offset, len, a);
            }
            return;
        }
        if advice == Advice::WillNeed {
            self.prefetch(&[(offset, len)]);
            return;
        }
        let mut a = self.inner.advice.lock().unwrap_or_else(|p| p.into_inner());
        set_advice(&mut a, offset, len, advice);
        self.inner
            .advised
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn advice_at(&self, offset: u64) -> Advice {
        if !self
            .inner
            .advised
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Advice::Normal;
        }
        let a = self.inner.advice.lock().unwrap_or_else(|p| p.into_inner());
        advice_at(&a, offset)
    }

    /// Starts reading the byte ranges `(offset, len)` into the cache, as
    /// readahead, without waiting. Pages already cached or being read are
    /// skipped; what does not fit the budget is left out.
    pub fn prefetch(&self, ranges: &[(u64, u64)]) {
        if let Some(k) = &self.inner.kernel {
            return k.prefetch(ranges);
        }
        let page = self.page();
        let shared = &self.inner.engine;
        let plans = {
            let mut g = shared.cache.lock();
            let file_pages = g.file(self.inner.id).size.div_ceil(page);
            let mut planner = self.planner(&mut g, file_pages, Request::new(0, 0));
            for &(offset, len) in ranges {
                let (first, count) = crate::units::PageSize::new(page).unwrap().span(offset, len);
                let count = count.min(file_pages.saturating_sub(first));
                if count > 0 {
                    planner.prefetch(&Window::forward(first, count, 0));
                }
            }
            planner.plans
        };
        self.issue(plans, Issue::Backend);
    }

    fn planner<'a>(
        &'a self,
        g: &'a mut cache::Inner,
        file_pages: u64,
        request: Request,
    ) -> Planner<'a> {
        Planner {
            cache: &self.inner.engine.cache,
            inner: g,
            file: self.inner.id,
            file_pages,
            max_io_pages: self.inner.engine.max_io_pages,
            request: request.index..request.end(),
            plans: Vec::new(),
        }
    }

    /// Plans one request of pages `req` (at most one window): runs the
    /// readahead policy and claims frames. Returns the plans.
    fn plan(&self, req: Request, offset: u64) -> Vec<Plan> {
        let shared = &self.inner.engine;
        let advice = self.advice_at(offset);
        let mut policy = self.inner.policy.lock().unwrap();
        let mut g = shared.cache.lock();
        let fp = g.file(self.inner.id);
        let feedback = std::mem::take(&mut fp.feedback);
        let file_pages = fp.size.div_ceil(self.page());
        for f in feedback {
            policy.feedback(f);
        }
        self.replay_hits(policy.as_mut());
        let mut planner = self.planner(&mut g, file_pages, req);
        let max = shared.max_ra_pages;
        match advice {
            Advice::Random => {
                // Exactly the request, in one read per run of missing pages.
                ra::PageTable::submit_demand(
                    &mut planner,
                    req.index,
                    req.count.min(file_pages.saturating_sub(req.index)),
                );
            }
            _ => ra::drive(policy.as_mut(), &mut planner, req),
        }
        match advice {
            Advice::Sequential => planner.prefetch(&Window::forward(req.end(), max, 0)),
            Advice::Reverse => {
                let start = req.index.saturating_sub(max);
                planner.prefetch(&Window::forward(start, req.index - start, 0));
            }
            _ => {}
        }
        planner.plans
    }

    /// Shows the policy the requests the hit path served since it last
    /// looked, oldest first (caller holds the policy's lock). For such a
    /// request `ra::drive` would have called `begin` and `finish` and
    /// nothing else: its pages were up to date and unmarked.
    /// Each shard's requests stay in their order (one thread's are all in
    /// one shard); shards are taken one after the other, as if their
    /// threads' hits had come in that order.
    fn replay_hits(&self, policy: &mut dyn Policy) {
        use std::sync::atomic::Ordering;
        let queued = &self.inner.hits_queued;
        // Cleared before the queues are looked at: a request queued after
        // that sets it again for the next replay. (One whose thread saw it
        // still set just before the clear may wait for the next request
        // queued: seen late, never lost, and a thread's own hits keep
        // their order.)
        if !queued.load(Ordering::Relaxed) || !queued.swap(false, Ordering::SeqCst) {
            return;
        }
        for queue in self.inner.hits_seen.iter() {
            replay_queue(queue, policy);
        }
    }

    /// The hit path: serves a read whose pages are all up to date, whole,
    /// unmarked and used before, without the cache's lock or the policy's
    /// (see `cache::hits`). `None` if any page is not, having changed
    /// nothing: the locked path then reads it.
    ///
    /// The policy still sees the request, in order: it goes to a queue the
    /// next planning replays first. A thread that finds the queue half
    /// full replays it if the policy's lock is free; one that finds it
    /// full waits for the lock, so no request is ever left out.
    fn read_hit(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        let mut frames = [(0u32, 0usize); HIT_MAX_PAGES];
        let (first, count) = self.pin_hits(offset, buf.len(), &mut frames)?;
        let frames = &frames[..count];
        let cache = &self.inner.engine.cache;
        copy_out(cache, frames, offset, self.page(), 0, buf);
        cache.unpin_each(frames.iter().map(|&(f, _)| f));
        self.hit_done(first, count, buf.len());
        Some(buf.len())
    }

    /// The hit path's first half: pins the frames of the `len` bytes at
    /// `offset` (`len` > 0) into `frames` if every page may be read without
    /// the lock; returns the first page and the page count. `None`, with
    /// nothing pinned, if any may not.
    fn pin_hits(
        &self,
        offset: u64,
        len: usize,
        frames: &mut [(u32, usize); HIT_MAX_PAGES],
    ) -> Option<(u64, usize)> {
        use std::sync::atomic::Ordering::Relaxed;
        let inner = &*self.inner;
        if !inner.hit_path || len == 0 || inner.advised.load(Relaxed) {
            return None;
        }
        let page = self.page();
        let end = offset.checked_add(len as u64)?;
        let first = offset / page;
        let count = end.div_ceil(page) - first;
        if count as usize > HIT_MAX_PAGES || count > inner.engine.max_ra_pages {
            return None;
        }
        // A thread whose reads keep missing the hit path (a cold scan)
        // tries it only now and then: each try costs a cache miss in the
        // hint table.
        let fails = &inner.served.0[shard()].hit_fails;
        let failed = fails.load(Relaxed);
        if failed >= HIT_FAILS_TOLERATED && failed % HIT_RETRY_EVERY != 0 {
            fails.store(failed.wrapping_add(1), Relaxed);
            return None;
        }
        let cache = &inner.engine.cache;
        for k in 0..count as usize {
            match cache.pin_hit(inner.id, first + k as u64) {
                Some(f) => frames[k] = (f, page as usize),
                None => {
                    cache.unpin_each(frames[..k].iter().map(|&(f, _)| f));
                    fails.store(failed.wrapping_add(1), Relaxed);
                    return None;
                }
            }
        }
        if failed != 0 {
            fails.store(0, Relaxed);
        }
        Some((first, count as usize))
    }

    /// The hit path's second half: counts the request and queues it for
    /// the policy.
    fn hit_done(&self, first: u64, count: usize, bytes: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let inner = &*self.inner;
        inner.served.add_hits(count as u64);
        inner.engine.served.add_hits(count as u64);
        self.served(bytes as u64);
        let req = Request::new(first, count as u64);
        let queue = &inner.hits_seen[shard()];
        if queue.len() >= queue.capacity() / 2 {
            if let Ok(mut policy) = inner.policy.try_lock() {
                replay_queue(queue, policy.as_mut());
            }
        }
        match queue.push(req) {
            Ok(()) => {
                // Set after the push (SeqCst, as the replay's clear), only
                // if clear: two threads' hits then share a line they only
                // read.
                let queued = &inner.hits_queued;
                if !queued.load(Relaxed) {
                    queued.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            Err(req) => {
                let mut policy = inner.policy.lock().unwrap();
                replay_queue(queue, policy.as_mut());
                replay(policy.as_mut(), req);
            }
        }
    }

    /// Issues planned reads: readahead to the backend, demand reads inline
    /// or to the backend.
    fn issue(&self, plans: Vec<Plan>, demand: Issue) {
        let shared = &self.inner.engine;
        let page = self.page();
        let mut inline = Vec::new();
        for plan in plans {
            if !plan.speculative && demand == Issue::Inline {
                inline.push(plan);
                continue;
            }
            let op = self.op_for(&plan, page);
            let engine = shared.clone();
            shared.backend.submit(
                op,
                Box::new(move |_op, result| engine.cache.complete(&plan, result)),
            );
        }
        for plan in inline {
            let mut op = self.op_for(&plan, page);
            let result = shared.backend.read_now(&mut op);
            shared.cache.complete(&plan, result);
        }
    }

    fn op_for(&self, plan: &Plan, page: u64) -> ReadOp {
        let shared = &self.inner.engine;
        let len = plan.frames.len() * page as usize;
        ReadOp {
            fd: self.inner.fd.clone(),
            offset: plan.first * page,
            len,
            buf: IoBuf::Frames(crate::io::FrameBuf::new(
                shared.cache.arena().clone(),
                plan.frames.clone(),
            )),
            flags: 0,
            known_miss: false,
        }
    }

    /// How much of `len` bytes at `offset` one piece serves: at most one
    /// readahead window, ending on a page boundary.
    /// Clipped so that `offset + len` stays a page short of `u64::MAX`: no
    /// page arithmetic overflows on offsets near it (they are past any
    /// file's end, where reads return 0).
    fn piece_len(&self, offset: u64, len: usize) -> usize {
        let page = self.page();
        let max = self.inner.engine.max_ra_pages * page - offset % page;
        let room = (u64::MAX - page).saturating_sub(offset);
        (len as u64).min(max).min(room) as usize
    }

    /// Plans and issues the pages of bytes `[offset, offset + len)` (one
    /// piece, `len > 0`); returns the demand runs (for
    /// hit accounting).
    fn start_piece(&self, offset: u64, len: u64, demand: Issue) -> Vec<(u64, u64)> {
        let page = self.page();
        let first = offset / page;
        let count = (offset + len).div_ceil(page) - first;
        let plans = self.plan(Request::new(first, count), offset);
        let runs = plans
            .iter()
            .filter(|p| !p.speculative)
            .map(|p| (p.first, p.frames.len() as u64))
            .collect();
        self.issue(plans, demand);
        runs
    }

    /// Reads page `index` alone, on demand, in this thread (a page whose
    /// last read failed: see `walk`). The demand run it planned.
    fn retry_page(&self, index: u64) -> Vec<(u64, u64)> {
        let plans = {
            let mut g = self.inner.engine.cache.lock();
            let file_pages = g.file(self.inner.id).size.div_ceil(self.page());
            if index >= file_pages {
                return Vec::new();
            }
            let mut planner = self.planner(&mut g, file_pages, Request::new(index, 1));
            ra::PageTable::submit_demand(&mut planner, index, 1);
            planner.plans
        };
        let runs = plans
            .iter()
            .map(|p| (p.first, p.frames.len() as u64))
            .collect();
        self.issue(plans, Issue::Inline);
        runs
    }

    /// Pins the pages of bytes `[offset, offset + len)` in order, waiting for
    /// reads, planning again what was evicted, and hands each run of pinned
    /// frames to `sink` (which must not keep them past its return unless it
    /// takes over the pins, see `read_pages`). Returns the byte count
    /// (short at the end of the file).
    fn walk(
        &self,
        offset: u64,
        len: u64,
        mut demand: Vec<(u64, u64)>,
        sink: &mut Sink<'_>,
    ) -> Result<u64> {
        let shared = &self.inner.engine;
        let page = self.page();
        if len == 0 {
            return Ok(0);
        }
        let end_page = (offset + len).div_ceil(page);
        let mut index = offset / page;
        let mut done = 0u64;
        let mut waited = false;
        let mut replans = 0u32;
        // A failed page is read once more, alone, before its error is
        // reported: the read that failed may have been a larger one that
        // failed on another page (the kernel retries a page the same way).
        let mut retried: Option<u64> = None;
        let mut g = shared.cache.lock();
        loop {
            let collected = cache::collect(
                &shared.cache,
                &mut g,
                self.inner.id,
                index..end_page,
                usize::MAX,
                &demand,
                &mut waited,
            );
            match collected {
                Collected::Pages(frames, eof) => {
                    drop(g);
                    // Bytes of these pages that fall inside the request.
                    let mut got = 0u64;
                    let mut short = eof;
                    for (k, &(_, valid)) in frames.iter().enumerate() {
                        let p = index + k as u64;
                        let page_start = p * page;
                        let from = offset.max(page_start) - page_start;
                        let to = (offset + len).min(page_start + valid as u64);
                        if to > page_start + from {
                            got += to - page_start - from;
                        }
                        if (valid as u64) < page {
                            short = true;
                        }
                    }
                    let keep_pins = sink(&frames, done);
                    if !keep_pins {
                        shared.cache.unpin_each(frames.iter().map(|&(f, _)| f));
                    }
                    done += got;
                    index += frames.len() as u64;
                    if short || index >= end_page || frames.is_empty() {
                        return Ok(done);
                    }
                    g = shared.cache.lock();
                }
                Collected::Wait => {
                    waited = true;
                    g = shared.cache.wait(g, Duration::from_millis(100));
                }
                Collected::Absent(at) => {
                    drop(g);
                    replans += 1;
                    if replans > 1 {
                        // Planned before, yet absent again: the budget is
                        // under pressure; give reads a moment to finish.
                        std::thread::sleep(FRAME_RETRY);
                    }
                    let count = (end_page - at).min(self.inner.engine.max_ra_pages);
                    demand.extend(self.start_piece(at * page, count * page, Issue::Inline));
                    g = shared.cache.lock();
                }
                Collected::Failed(at, _) if retried != Some(at) => {
                    drop(g);
                    retried = Some(at);
                    demand.extend(self.retry_page(at));
                    g = shared.cache.lock();
                }
                Collected::Failed(at, errno) => {
                    drop(g);
                    return Err(self.io_error(
                        "read",
                        at * page,
                        io::Error::from_raw_os_error(errno),
                    ));
                }
            }
        }
    }

    /// Reads up to `buf.len()` bytes at `offset`. Returns fewer only at the
    /// end of the file (0 at or past it).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if let Some(k) = &self.inner.kernel {
            return k
                .read_at(buf, offset)
                .map_err(|e| self.io_error("read", offset, e));
        }
        if let Some(n) = self.read_hit(buf, offset) {
            return Ok(n);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let len = self.piece_len(at, buf.len() - done);
            if len == 0 {
                break; // past any end of file
            }
            let n = self.read_piece(&mut buf[done..done + len], at, Issue::Inline, None)?;
            done += n;
            if n < len {
                break;
            }
        }
        self.served(done as u64);
        Ok(done)
    }

    fn read_piece(
        &self,
        buf: &mut [u8],
        offset: u64,
        issue: Issue,
        started: Option<Vec<(u64, u64)>>,
    ) -> Result<usize> {
        let page = self.page();
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(0);
        }
        let demand = match started {
            Some(d) => d,
            None => self.start_piece(offset, len, issue),
        };
        let cache = &self.inner.engine.cache;
        let n = self.walk(offset, len, demand, &mut |frames, done| {
            copy_out(cache, frames, offset, page, done, buf);
            false
        })?;
        Ok(n as usize)
    }

    /// Reads a batch of requests `(offset, buffer)` at depth: every request
    /// is planned and issued before any is waited for. Returns each
    /// request's result in order.
    pub fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<usize>> {
        if self.inner.kernel.is_some() {
            return self.read_many_kernel(reqs);
        }
        let started: Vec<Option<Vec<(u64, u64)>>> = reqs
            .iter()
            .map(|(offset, buf)| {
                let len = self.piece_len(*offset, buf.len());
                (len > 0).then(|| self.start_piece(*offset, len as u64, Issue::Backend))
            })
            .collect();
        reqs.iter_mut()
            .zip(started)
            .map(|((offset, buf), s)| {
                let len = self.piece_len(*offset, buf.len());
                let first = self.read_piece(&mut buf[..len], *offset, Issue::Backend, s)?;
                let mut n = first;
                if first == len && len < buf.len() {
                    n += self.read_at(&mut buf[len..], *offset + len as u64)?;
                } else {
                    self.served(n as u64);
                }
                Ok(n)
            })
            .collect()
    }

    /// Reads `len` bytes at `offset` without copying: the returned [`Pages`]
    /// lends the cache's pages (pinned, so they stay put) until dropped.
    /// Fewer bytes only at the end of the file. `len` may be at most half
    /// the cache's budget (the pages lent must leave frames for the reads
    /// that fill the rest); more is an [`Error::Invalid`].
    pub fn read_pages(&self, offset: u64, len: usize) -> Result<Pages> {
        if self.inner.kernel.is_some() {
            return Err(Error::Unsupported {
                path: self.inner.path.clone(),
                why: format!(
                    "read_pages lends pages of ahead's own cache, which a {} file does not use",
                    self.mode()
                ),
            });
        }
        let page = self.page();
        let budget = self.inner.engine.cache.frames() as u64 * page;
        if len as u64 > budget / 2 {
            return Err(Error::Invalid {
                what: "read_pages",
                why: format!(
                    "{len} bytes is more than half the cache ({} bytes) can lend at once",
                    budget
                ),
            });
        }
        let mut frames = [(0u32, 0usize); HIT_MAX_PAGES];
        if let Some((first, count)) = self.pin_hits(offset, len, &mut frames) {
            // The pins go to the lender as they are.
            let mut pages = Vec::with_capacity(count);
            lend(
                &frames[..count],
                offset,
                offset + len as u64,
                page,
                &mut pages,
            );
            self.hit_done(first, count, len);
            return Ok(Pages {
                engine: self.inner.engine.clone(),
                pages,
                len,
            });
        }
        // The pins are held by `lent` from the first run on: if a later
        // page fails, dropping it releases them (they were once leaked,
        // each taking a frame from the budget for good).
        let mut lent = Pages {
            engine: self.inner.engine.clone(),
            pages: Vec::new(),
            len: 0,
        };
        let len = len as u64;
        let mut done = 0u64;
        while done < len {
            let at = offset.saturating_add(done);
            let piece = self.piece_len(at, (len - done) as usize) as u64;
            if piece == 0 {
                break;
            }
            let demand = self.start_piece(at, piece, Issue::Inline);
            let n = self.walk(at, piece, demand, &mut |frames, from| {
                lend(frames, at + from, at + piece, page, &mut lent.pages);
                true
            })?;
            done += n;
            if n < piece {
                break;
            }
        }
        // Pages that lend no byte (the request began at the end of a
        // partial last page) are not kept pinned.
        let empty: Vec<u32> = lent
            .pages
            .iter()
            .filter(|p| p.2 == 0)
            .map(|p| p.0)
            .collect();
        if !empty.is_empty() {
            lent.pages.retain(|p| p.2 > 0);
            self.inner.engine.cache.unpin_each(empty.into_iter());
        }
        lent.len = done as usize;
        self.served(done);
        Ok(lent)
    }

    /// `read_many` of a kernel-mode file: every request probed and, for
    /// the rest, handed to the backend before any is waited for.
    fn read_many_kernel(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<usize>> {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut futs: Vec<ReadAt<'_>> = reqs
            .iter_mut()
            .map(|(offset, buf)| self.read_at_async(buf, *offset))
            .collect();
        let mut out: Vec<Option<Result<usize>>> = (0..futs.len()).map(|_| None).collect();
        loop {
            let mut pending = false;
            for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
                if o.is_none() {
                    match std::pin::Pin::new(&mut *f).poll(&mut cx) {
                        std::task::Poll::Ready(r) => *o = Some(r),
                        std::task::Poll::Pending => pending = true,
                    }
                }
            }
            if !pending {
                break;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
        out.into_iter().map(|o| o.unwrap_or(Ok(0))).collect()
    }

    /// Reads at `offset` into a buffer it owns, as a `'static` future that
    /// can be spawned; the buffer comes back with the result (as io-uring
    /// and tokio-uring do). Reads up to `buf.len()` bytes, with the limits
    /// of [`File::read_at_async`].
    pub fn read_owned(&self, buf: Vec<u8>, offset: u64) -> ReadOwned {
        ReadOwned {
            file: self.clone(),
            buf: Some(buf),
            offset,
            state: Default::default(),
        }
    }

    /// Reads at `offset` into `buf`, as a future that works under any
    /// executor: the reads are issued on the first poll, and the future is
    /// woken when they complete. In Direct mode at most one window is read
    /// per call. In Buffered mode the first poll tries the kernel's cache
    /// without blocking (`RWF_NOWAIT`) and hands only the rest to the
    /// backend; no poll blocks the executor's thread beyond that probe
    /// (unless the backend already has its full depth in flight, when
    /// handing over waits for a slot).
    pub fn read_at_async<'a>(&'a self, buf: &'a mut [u8], offset: u64) -> ReadAt<'a> {
        ReadAt {
            file: self,
            buf,
            offset,
            state: Default::default(),
        }
    }
}

/// Sets `advice` on `[offset, offset + len)` in a list of advised ranges:
/// the parts of earlier ranges outside it keep their advice (a narrower
/// advice once erased a wider one whole).
fn set_advice(list: &mut Vec<(u64, u64, Advice)>, offset: u64, len: u64, advice: Advice) {
    let end = offset.saturating_add(len);
    let mut kept = Vec::with_capacity(list.len() + 2);
    for &(o, l, adv) in list.iter() {
        let e = o.saturating_add(l);
        if e <= offset || o >= end {
            kept.push((o, l, adv));
            continue;
        }
        if o < offset {
            kept.push((o, offset - o, adv));
        }
        if e > end {
            kept.push((end, e - end, adv));
        }
    }
    if advice != Advice::Normal && len > 0 {
        kept.push((offset, end - offset, advice));
    }
    *list = kept;
}

/// The advice in force at `offset`.
fn advice_at(list: &[(u64, u64, Advice)], offset: u64) -> Advice {
    list.iter()
        .find(|&&(o, l, _)| offset >= o && offset < o.saturating_add(l))
        .map_or(Advice::Normal, |&(_, _, adv)| adv)
}

fn copy_out(
    cache: &PageCache,
    frames: &[(u32, usize)],
    offset: u64,
    page: u64,
    done: u64,
    buf: &mut [u8],
) {
    let mut at = offset + done;
    let mut out = done as usize;
    for &(f, valid) in frames {
        let within = (at % page) as usize;
        if valid <= within || out >= buf.len() {
            break;
        }
        let n = (valid - within).min(buf.len() - out);
        buf[out..out + n].copy_from_slice(&cache.frame_bytes(f, valid)[within..within + n]);
        out += n;
        at += n as u64;
    }
}

/// Appends to `out` what pinned `(frame, valid bytes)` pages lend of the
/// bytes from `pos` (in the first of them) to `end`: `(frame, start within
/// it, length)`, a length of 0 for a page that has none of them.
fn lend(
    frames: &[(u32, usize)],
    mut pos: u64,
    end: u64,
    page: u64,
    out: &mut Vec<(u32, usize, usize)>,
) {
    for &(f, valid) in frames {
        let within = (pos % page) as usize;
        let take = (valid.saturating_sub(within) as u64).min(end - pos) as usize;
        out.push((f, within, take));
        pos += take as u64;
    }
}

/// Replays one queue of hit-path requests (caller holds the policy's lock).
fn replay_queue(queue: &ArrayQueue<Request>, policy: &mut dyn Policy) {
    while let Some(req) = queue.pop() {
        replay(policy, req);
    }
}

/// What `ra::drive` does for a request of up-to-date, unmarked pages.
fn replay(policy: &mut dyn Policy, req: Request) {
    policy.begin(req);
    policy.finish(req);
}

/// Most pages one read may span and still take the hit path (128 KiB of
/// 4 KiB pages); larger reads copy long enough that the lock is no cost.
const HIT_MAX_PAGES: usize = 32;
/// Failures of the hit path in a row after which a thread tries it only
/// once every [`HIT_RETRY_EVERY`] reads of the file.
const HIT_FAILS_TOLERATED: u32 = 64;
/// See [`HIT_FAILS_TOLERATED`].
const HIT_RETRY_EVERY: u32 = 16;

/// Requests the hit path may queue for the policy, per shard (see
/// [`File::read_hit`]).
const HITS_QUEUED: usize = 32;

/// The hit path's queues of a new file.
fn hit_queues() -> Box<[ArrayQueue<Request>]> {
    (0..SHARDS).map(|_| ArrayQueue::new(HITS_QUEUED)).collect()
}

/// Receives runs of pinned `(frame, valid bytes)` with the bytes done so
/// far; returns true if it keeps the pins.
type Sink<'a> = dyn FnMut(&[(u32, usize)], u64) -> bool + 'a;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrower_advice_keeps_the_rest_of_a_wider_one() {
        let mut a = Vec::new();
        set_advice(&mut a, 0, 1 << 20, Advice::Sequential);
        set_advice(&mut a, 256 << 10, 4096, Advice::Random);
        assert_eq!(advice_at(&a, 0), Advice::Sequential);
        assert_eq!(advice_at(&a, (256 << 10) - 1), Advice::Sequential);
        assert_eq!(advice_at(&a, 256 << 10), Advice::Random);
        assert_eq!(advice_at(&a, (256 << 10) + 4096), Advice::Sequential);
        assert_eq!(advice_at(&a, (1 << 20) - 1), Advice::Sequential);
        assert_eq!(advice_at(&a, 1 << 20), Advice::Normal);
        // Normal clears only its own range.
        set_advice(&mut a, 0, 4096, Advice::Normal);
        assert_eq!(advice_at(&a, 0), Advice::Normal);
        assert_eq!(advice_at(&a, 4096), Advice::Sequential);
        // Ranges reaching u64::MAX do not overflow.
        set_advice(&mut a, u64::MAX - 10, 100, Advice::Reverse);
        assert_eq!(advice_at(&a, u64::MAX - 1), Advice::Reverse);
    }
}
