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

mod advice;
mod cached;
mod engine;
mod future;
mod hits;
mod kernel;
#[cfg(feature = "remote")]
mod object;
mod options;
mod pages;
mod reader;
mod tuning;

pub use advice::Advice;
use advice::{advice_at, set_advice};
use cached::{copy_out, lend};
pub use engine::{Engine, EngineConfig};
use engine::{Shared, FRAME_RETRY};
pub use future::{block_on, ReadAt, ReadOwned};
use hits::{hit_queues, Served, HIT_MAX_PAGES};
pub use kernel::Mode;
pub use options::OpenOptions;
pub use pages::Pages;
pub use reader::Reader;
pub use tuning::{ReadaheadTuning, TuneSample};

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cache::{self, Collected, PageCache, Plan, Planner, Stats};
use crate::io::{IoBuf, ReadOp, ReadSource, Version};
use crate::ra::{self, Policy, Request, Window};
use crate::{sys, Error, Result};
use crossbeam_queue::ArrayQueue;
use std::future::Future as _;
use std::os::fd::AsFd as _;

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

struct FileInner {
    /// This file's requests and bytes (Direct mode), outside the cache's
    /// lock.
    served: Served,
    engine: Arc<Shared>,
    id: cache::FileId,
    path: PathBuf,
    /// What the file is, decided once when it was opened.
    kind: Kind,
    /// What its reads read ([`Kind::source`]), and what the source says of
    /// itself, asked once at open: where the cached kinds' reads go (the
    /// engine's backend, or for a source read by requests its request
    /// backend) and whether they teach the engine its device. What they
    /// cost the policy is asked at each decision
    /// ([`ReadSource::cost`]): an object store's requests in flight grow
    /// as the engine measures the path.
    source: Arc<dyn ReadSource>,
    backend: Arc<dyn crate::io::Backend>,
    /// The device whose costs its reads teach the engine (`st_dev`, or a
    /// block device's `st_rdev`): Direct files only.
    device: Option<u64>,
    policy: Mutex<Box<dyn Policy>>,
    /// Requests served by the hit path, for the policy to see in order
    /// before its next decision (see [`File::read_hit`]); one queue per
    /// thread shard, so that two threads do not pass its cache lines back
    /// and forth on every hit.
    hits_seen: Box<[ArrayQueue<hits::Hit>]>,
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
    stamp: Mutex<Version>,
    /// The identity its pages are kept under at close (`None`: dropped).
    keep_as: Option<cache::Identity>,
}

/// What differs between a file and an object when one is opened: the
/// rest of a [`File`]'s state starts the same for both.
struct Parts {
    engine: Arc<Shared>,
    id: cache::FileId,
    path: PathBuf,
    kind: Kind,
    policy: Box<dyn Policy>,
    stamp: Version,
    keep_as: Option<cache::Identity>,
}

/// What a file is: one of three kinds, decided once at open. Each reads
/// through its own source: a descriptor or an object.
// One per open file, inside its Arc'd FileInner: the kernel variant's
// size costs nothing, where a Box would cost Buffered reads a pointer.
#[allow(clippy::large_enum_variant)]
enum Kind {
    /// Direct mode: ahead's cache over a descriptor, read with O_DIRECT
    /// (`o_direct` false after the fallback for a file system without
    /// it).
    Direct { fd: Arc<OwnedFd>, o_direct: bool },
    /// An object in a store: ahead's cache, read by requests on the
    /// engine's request backend (`io::Requests`).
    #[cfg(feature = "remote")]
    Object(Arc<crate::remote::ObjectSource>),
    /// Buffered or Uncached mode: the kernel's cache, read through the
    /// descriptor the kernel file holds.
    Kernel(kernel::KernelFile),
}

impl Kind {
    /// What reads read.
    fn source(&self) -> Arc<dyn ReadSource> {
        match self {
            Kind::Direct { fd, .. } => fd.clone(),
            #[cfg(feature = "remote")]
            Kind::Object(o) => o.clone(),
            Kind::Kernel(k) => k.fd().clone(),
        }
    }
}

/// The device a descriptor's reads go to, for the engine's cost learners:
/// a block device's own number, a file's file system's.
fn device_of(fd: &OwnedFd) -> Option<u64> {
    let st = rustix::fs::fstat(fd).ok()?;
    let block =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::BlockDevice;
    Some(if block { st.st_rdev } else { st.st_dev })
}

impl File {
    /// A file (or object) opened by an engine, from its parts.
    fn assemble(p: Parts) -> File {
        // The hit path serves reads the policy needs to see only in
        // order (on-demand policies).
        let hit_path = p.engine.config.lock_free_hits && p.policy.calls() == ra::Calls::OnDemand;
        let source = p.kind.source();
        let by_request = source.by_request();
        let backend = match () {
            #[cfg(feature = "remote")]
            () if by_request => p.engine.remote_backend().clone(),
            () => p.engine.backend.clone(),
        };
        let device = match &p.kind {
            Kind::Direct { fd, .. } if !by_request => device_of(fd),
            _ => None,
        };
        File {
            inner: Arc::new(FileInner {
                served: Served::default(),
                engine: p.engine,
                id: p.id,
                path: p.path,
                kind: p.kind,
                source,
                backend,
                device,
                policy: Mutex::new(p.policy),
                hits_seen: hit_queues(),
                hits_queued: std::sync::atomic::AtomicBool::new(false),
                hit_path,
                advice: Mutex::new(Vec::new()),
                advised: std::sync::atomic::AtomicBool::new(false),
                stamp: Mutex::new(p.stamp),
                keep_as: p.keep_as,
            }),
        }
    }
}

impl Drop for FileInner {
    fn drop(&mut self) {
        // First uses the hit path took and the policy has not replayed:
        // counted before the pages go, or they would count as wasted.
        {
            let mut g = self.engine.cache.lock();
            for queue in self.hits_seen.iter() {
                hits::drain(queue, None, |req| {
                    g.note_used(self.id, req.index..req.end())
                });
            }
        }
        let stamp = *self.stamp.lock().unwrap_or_else(|p| p.into_inner());
        match self.keep_as {
            Some(identity) => self.engine.cache.keep_file(self.id, identity, stamp),
            None => self.engine.cache.close_file(self.id),
        }
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
            .field("direct", &self.is_direct())
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

    /// Whether this is an object in a store (opened with
    /// [`Engine::open_url`] or `open_object`), not a file.
    pub fn is_remote(&self) -> bool {
        #[cfg(feature = "remote")]
        return matches!(self.inner.kind, Kind::Object(_));
        #[cfg(not(feature = "remote"))]
        return false;
    }

    /// A Buffered or Uncached file's kernel side.
    fn kernel(&self) -> Option<&kernel::KernelFile> {
        match &self.inner.kind {
            Kind::Kernel(k) => Some(k),
            _ => None,
        }
    }

    /// Whether reads bypass the kernel's cache (false after the fallback
    /// for file systems without O_DIRECT).
    pub fn is_direct(&self) -> bool {
        match &self.inner.kind {
            Kind::Direct { o_direct, .. } => *o_direct,
            #[cfg(feature = "remote")]
            Kind::Object(_) => true,
            Kind::Kernel(_) => false,
        }
    }

    /// The mode it was opened in.
    pub fn mode(&self) -> Mode {
        self.kernel().map_or(Mode::Direct, |k| k.mode)
    }

    /// Buffered mode: whether the non-blocking fast path is in use (the
    /// kernel and the file system have `RWF_NOWAIT`; see
    /// [`crate::features::nowait`]).
    pub fn uses_nowait(&self) -> bool {
        self.kernel().is_some_and(|k| k.nowait())
    }

    /// Uncached mode: whether `RWF_DONTCACHE` is in use (else the
    /// residency fallback).
    pub fn uses_dontcache(&self) -> bool {
        self.kernel().is_some_and(|k| k.dontcache())
    }

    /// Uncached mode: true when this file's reads cannot leave the cache as
    /// they found it — no `RWF_DONTCACHE` here, and mincore does not tell
    /// the truth about a file the caller neither owns nor may write — so
    /// they drop nothing. Tell the user once.
    pub fn residency_blind(&self) -> bool {
        self.kernel().is_some_and(|k| k.residency_blind())
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
        let now = (self.inner.source.version())
            .map_err(|e| Error::io("stat", &self.inner.path, None, e))?;
        let mut stamp = self.inner.stamp.lock().unwrap_or_else(|p| p.into_inner());
        if *stamp == now {
            return Ok(Refreshed {
                changed: false,
                size: self.len(),
                dropped_pages: 0,
            });
        }
        *stamp = now;
        if let Some(k) = self.kernel() {
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
        match self.kernel() {
            Some(k) => k.stats(),
            None => {
                // The hit path's requests first, so that their first uses
                // are counted.
                let mut policy = self.inner.policy.lock().unwrap();
                let mut g = self.inner.engine.cache.lock();
                self.replay_hits(policy.as_mut(), &mut g);
                let mut s = g.file(self.inner.id).stats;
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
        // A failed read reaches its readers as an errno kept in the cache;
        // an object says what the request met.
        #[cfg(feature = "remote")]
        let e = match &self.inner.kind {
            Kind::Object(o) => o.explain(e),
            _ => e,
        };
        Error::io(op, &self.inner.path, Some(offset), e)
    }

    /// Declares how `len` bytes from `offset` will be read.
    /// [`Advice::WillNeed`] starts reading them at once.
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) {
        if let Some(k) = self.kernel() {
            // The kernel's own advice; WillNeed goes to the hint thread.
            let a = match advice {
                Advice::WillNeed => return k.prefetch(&[(offset, len)]),
                Advice::Sequential => sys::Advice::Sequential,
                Advice::Random => sys::Advice::Random,
                Advice::Normal | Advice::Reverse => sys::Advice::Normal,
            };
            if k.mode == Mode::Buffered {
                let _ = sys::fadvise(k.fd().as_fd(), offset, len, a);
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
        if let Some(k) = self.kernel() {
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

    /// Reads up to `buf.len()` bytes at `offset`. Returns fewer only at the
    /// end of the file (0 at or past it).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if let Some(k) = self.kernel() {
            return k
                .read_at(buf, offset)
                .map_err(|e| self.io_error("read", offset, e));
        }
        if let Some(n) = self.read_hit(buf, offset) {
            return Ok(n);
        }
        let len = self.piece_len(offset, buf.len());
        if len < buf.len() && len > 0 {
            return self.read_large(buf, offset);
        }
        let done = if len == 0 {
            0 // past any end of file
        } else {
            self.read_piece(buf, offset, Issue::Inline, None)?
        };
        self.served(done as u64);
        Ok(done)
    }

    /// Reads a batch of requests `(offset, buffer)` at depth: every request
    /// is planned and issued before any is waited for. Returns each
    /// request's result in order.
    pub fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<usize>> {
        if self.kernel().is_some() {
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
        if self.kernel().is_some() {
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
        if let Some((first, count, first_use)) = self.pin_hits(offset, len, &mut frames) {
            // The pins go to the lender as they are.
            let mut pages = Vec::with_capacity(count);
            lend(
                &frames[..count],
                offset,
                offset + len as u64,
                page,
                &mut pages,
            );
            self.hit_done(first, count, len, first_use);
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
        let mut futs: Vec<ReadAt<'_>> = reqs
            .iter_mut()
            .map(|(offset, buf)| self.read_at_async(buf, *offset))
            .collect();
        let mut out: Vec<Option<Result<usize>>> = (0..futs.len()).map(|_| None).collect();
        // All the reads joined: each poll goes over those still pending.
        block_on(std::future::poll_fn(|cx| {
            let mut pending = false;
            for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
                if o.is_none() {
                    match std::pin::Pin::new(&mut *f).poll(cx) {
                        std::task::Poll::Ready(r) => *o = Some(r),
                        std::task::Poll::Pending => pending = true,
                    }
                }
            }
            if pending {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        }));
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
