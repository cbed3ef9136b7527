//! The lock-free hit path of reads through ahead's cache (Direct files and
//! objects): cached pages pinned and copied
//! without the cache's lock or the policy's, the requests queued per
//! thread shard for the policy to replay in order, and the sharded
//! counters of what was served.

use super::*;

/// How many ways per-thread state is split: [`Served`]'s counters and the
/// hit path's queues. Threads beyond that share.
pub(super) const SHARDS: usize = 8;

/// This thread's shard, handed out round-robin on first use.
pub(super) fn shard() -> usize {
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
pub(super) struct ServedShard {
    pub(super) requests: std::sync::atomic::AtomicU64,
    pub(super) bytes: std::sync::atomic::AtomicU64,
    pub(super) hits: std::sync::atomic::AtomicU64,
    /// The hit path's failures in a row on this file (see
    /// [`File::read_hit`]).
    pub(super) hit_fails: std::sync::atomic::AtomicU32,
}

/// Requests and bytes served, and pages hit without the cache's lock,
/// counted with atomics, one set per thread shard (summed when read).
#[derive(Default)]
pub(super) struct Served([ServedShard; SHARDS]);

impl Served {
    pub(super) fn add(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.0[shard()];
        s.requests.fetch_add(1, Relaxed);
        s.bytes.fetch_add(bytes, Relaxed);
    }

    pub(super) fn add_hits(&self, pages: u64) {
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

/// A request the hit path served, and whether it was the first use of a
/// page read ahead.
pub(super) type Hit = (Request, bool);

/// Empties one queue of hit-path requests, oldest first: `first_use`
/// gets each request that took a page read ahead for the first time (to
/// count it in the cache), then the policy, if any, sees the request.
pub(super) fn drain(
    queue: &ArrayQueue<Hit>,
    mut policy: Option<&mut dyn Policy>,
    mut first_use: impl FnMut(Request),
) {
    while let Some((req, first)) = queue.pop() {
        if first {
            first_use(req);
        }
        if let Some(p) = policy.as_deref_mut() {
            replay(p, req);
        }
    }
}

/// [`drain`] into `policy` (caller holds its lock), taking the cache's
/// lock only if a request has a first use to count.
pub(super) fn replay_queue(
    queue: &ArrayQueue<Hit>,
    policy: &mut dyn Policy,
    cache: &PageCache,
    file: crate::cache::FileId,
) {
    let mut g = None;
    drain(queue, Some(policy), |req| {
        g.get_or_insert_with(|| cache.lock())
            .note_used(file, req.index..req.end())
    });
}

/// What `ra::drive` does for a request of up-to-date, unmarked pages.
pub(super) fn replay(policy: &mut dyn Policy, req: Request) {
    policy.begin(req);
    policy.finish(req);
}

/// Most pages one read may span and still take the hit path (128 KiB of
/// 4 KiB pages); larger reads copy long enough that the lock is no cost.
pub(super) const HIT_MAX_PAGES: usize = 32;

/// Failures of the hit path in a row after which a thread tries it only
/// once every [`HIT_RETRY_EVERY`] reads of the file.
pub(super) const HIT_FAILS_TOLERATED: u32 = 64;

/// See [`HIT_FAILS_TOLERATED`].
pub(super) const HIT_RETRY_EVERY: u32 = 16;

/// Requests the hit path may queue for the policy, per shard (see
/// [`File::read_hit`]).
pub(super) const HITS_QUEUED: usize = 32;

/// The hit path's queues of a new file.
pub(super) fn hit_queues() -> Box<[ArrayQueue<Hit>]> {
    (0..SHARDS).map(|_| ArrayQueue::new(HITS_QUEUED)).collect()
}

impl File {
    /// Shows the policy the requests the hit path served since it last
    /// looked, oldest first (caller holds the policy's lock). For such a
    /// request `ra::drive` would have called `begin` and `finish` and
    /// nothing else: its pages were up to date and unmarked.
    /// Each shard's requests stay in their order (one thread's are all in
    /// one shard); shards are taken one after the other, as if their
    /// threads' hits had come in that order.
    pub(super) fn replay_hits(&self, policy: &mut dyn Policy, cache: &mut crate::cache::Inner) {
        let file = self.inner.id;
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
            drain(queue, Some(&mut *policy), |req| {
                cache.note_used(file, req.index..req.end())
            });
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
    pub(super) fn read_hit(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        let mut frames = [(0u32, 0usize); HIT_MAX_PAGES];
        let (first, count, first_use) = self.pin_hits(offset, buf.len(), &mut frames)?;
        let frames = &frames[..count];
        let cache = &self.inner.engine.cache;
        // SAFETY: `pin_hits` pinned these frames; they are unpinned below.
        unsafe { copy_out(cache, frames, offset, self.page(), 0, buf) };
        cache.unpin_each(frames.iter().map(|&(f, _)| f));
        self.hit_done(first, count, buf.len(), first_use);
        Some(buf.len())
    }

    /// The hit path's first half: pins the frames of the `len` bytes at
    /// `offset` (`len` > 0) into `frames` if every page may be read without
    /// the lock; returns the first page, the page count, and whether a page
    /// was read ahead and used for the first time. `None`, with nothing
    /// pinned, if any may not (a first use taken then is counted by the
    /// locked path, which reads the same pages).
    pub(super) fn pin_hits(
        &self,
        offset: u64,
        len: usize,
        frames: &mut [(u32, usize); HIT_MAX_PAGES],
    ) -> Option<(u64, usize, bool)> {
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
        if failed >= HIT_FAILS_TOLERATED && !failed.is_multiple_of(HIT_RETRY_EVERY) {
            fails.store(failed.wrapping_add(1), Relaxed);
            return None;
        }
        let cache = &inner.engine.cache;
        let mut first_use = false;
        for k in 0..count as usize {
            match cache.pin_hit(inner.id, first + k as u64) {
                Some((f, fresh)) => {
                    frames[k] = (f, page as usize);
                    first_use |= fresh;
                }
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
        Some((first, count as usize, first_use))
    }

    /// The hit path's second half: counts the request and queues it for
    /// the policy.
    pub(super) fn hit_done(&self, first: u64, count: usize, bytes: usize, first_use: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let inner = &*self.inner;
        inner.served.add_hits(count as u64);
        inner.engine.served.add_hits(count as u64);
        self.served(bytes as u64);
        let req = Request::new(first, count as u64);
        let queue = &inner.hits_seen[shard()];
        if queue.len() >= queue.capacity() / 2 {
            if let Ok(mut policy) = inner.policy.try_lock() {
                replay_queue(queue, policy.as_mut(), &inner.engine.cache, inner.id);
            }
        }
        match queue.push((req, first_use)) {
            Ok(()) => {
                // Set after the push (SeqCst, as the replay's clear), only
                // if clear: two threads' hits then share a line they only
                // read.
                let queued = &inner.hits_queued;
                if !queued.load(Relaxed) {
                    queued.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            Err((req, first_use)) => {
                let mut policy = inner.policy.lock().unwrap();
                let cache = &inner.engine.cache;
                replay_queue(queue, policy.as_mut(), cache, inner.id);
                if first_use {
                    cache.lock().note_used(inner.id, req.index..req.end());
                }
                replay(policy.as_mut(), req);
            }
        }
    }
}
