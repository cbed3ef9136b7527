//! ahead's own page cache, for files read with O_DIRECT.
//!
//! Pages are keyed by (file, page index) and live in the frames of one
//! [`Arena`] whose size is the byte budget: cached and in-flight data
//! together can never exceed it, because a read must own a frame for every
//! page it fills before it is issued.
//!
//! Each page follows one state machine:
//!
//! ```text
//!   absent ──plan──► reading ──read ok──► up to date ──evict──► shadow
//!     ▲  (one read per page;  │            (may carry the          │
//!     │   readers wait)       │ error       lookahead marker)      │
//!     └──────── failed ◄──────┘                                    │
//!     └────────────────────────────────────────────────────────────┘
//! ```
//!
//! * One in-flight read per page however many readers want it: a reader
//!   that finds a page *reading* waits for it instead of reading it again.
//! * A frame holding an up-to-date page is pinned (an atomic count) while a
//!   reader copies from it or lends it; eviction skips pinned frames, and a
//!   frame is only written while its page is *reading*, when nobody can pin
//!   it. That is the whole soundness argument for reading frames without the
//!   lock. The hit path (`hits`) pins without the lock too, and then checks
//!   the frame's identity word, which eviction clears before it looks at
//!   the pins.
//! * Eviction leaves a *shadow* saying whether the page had been read ahead
//!   and never used, which is how thrashing becomes visible to the readahead
//!   policy (`ra::Feedback::EvictedUnused`, `ra::Shadow`). Shadows are
//!   bounded: at most as many as there are frames.
//! * Speculative reads yield to demand reads: readahead may only take a frame
//!   while more than a reserve of frames is left for demand reads, and it
//!   never waits for one; a demand read that finds no frame leaves its pages
//!   absent and tries again once a read completes or a pin drops.

mod complete;
pub mod eviction;
mod free;
mod kept;
pub(crate) use kept::Identity;
mod hits;
#[cfg(test)]
mod model;
mod pins;
mod planner;
mod stats;
mod table;

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;

use crate::io::{Arena, Version};
use crate::ra::{self, Feedback, Lookup, Shadow, Window};
use crate::units::IndexHasher;
pub use eviction::{Eviction, EvictionKind};
use hits::HitTable;
pub(crate) use planner::{collect, Collected, Planner};
pub use stats::Stats;

/// Identifies a file within one cache.
pub type FileId = u64;

/// One page's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A read into `frame` is in flight.
    Reading {
        frame: u32,
        speculative: bool,
        marker: bool,
    },
    /// `len` valid bytes in `frame` (less than a page only at the end of the
    /// file).
    Ready {
        frame: u32,
        len: u32,
        marker: bool,
        /// Read ahead and not yet used by any reader.
        unused_ra: bool,
        /// Read ahead (a window's page), not on demand: what a scan's
        /// ring may recycle once used.
        read_ahead: bool,
    },
    /// The read failed with this OS error; the next reader retries.
    Failed { errno: i32 },
    /// Evicted.
    Shadow { evicted_unused: bool },
}

/// What the cache knows of one file.
pub(crate) struct FilePages {
    pages: table::PageTable,
    /// Facts for the file's readahead policy, handed over at its next call.
    pub(crate) feedback: Vec<Feedback>,
    /// Size of the file in bytes as far as the cache knows (shrinks when a
    /// read finds the end earlier).
    pub(crate) size: u64,
    /// Frames of this file with a read in flight.
    reading: usize,
    /// Bumped each time the file's pages are dropped because it changed.
    generation: u64,
    closed: bool,
    /// Its last handle closed, its pages kept for the next open of the
    /// same file at the same version (`kept`).
    kept: bool,
    pub(crate) stats: Stats,
}

impl FilePages {
    fn new(size: u64) -> FilePages {
        FilePages {
            pages: table::PageTable::default(),
            feedback: Vec::new(),
            size,
            reading: 0,
            generation: 0,
            closed: false,
            kept: false,
            stats: Stats::default(),
        }
    }
}

/// A run of pages planned for one device read: frames for pages
/// `first..first + frames.len()`.
pub(crate) struct Plan {
    pub(crate) file: FileId,
    pub(crate) first: u64,
    pub(crate) frames: Vec<u32>,
    pub(crate) speculative: bool,
    /// The file's generation when planned: a read planned before the file
    /// was found changed (see [`PageCache::drop_pages`]) fills nothing.
    pub(crate) generation: u64,
}

/// The state under the cache's lock.
pub(crate) struct Inner {
    files: HashMap<FileId, FilePages, BuildHasherDefault<IndexHasher>>,
    owner: Vec<Option<(FileId, u64)>>,
    free: free::FreeFrames,
    kept: kept::Kept,
    eviction: Box<dyn Eviction>,
    shadows: VecDeque<(FileId, u64)>,
    /// Frames with a read in flight, all files.
    reading: usize,
    wakers: Vec<Waker>,
    /// Threads in [`PageCache::wait`]. Counted under the lock, so a
    /// completion that sees none (under the same lock) has no one to wake:
    /// the condvar is signalled only then, one system call saved per read.
    waiting: usize,
    pub(crate) totals: Stats,
}

/// The page cache. See the module docs.
pub struct PageCache {
    page: usize,
    arena: std::sync::Arc<Arena>,
    pins: pins::Pins,
    /// The lock-free hit path's identity words, hints and access bits.
    hits: HitTable,
    /// Frames kept from readahead for demand reads.
    reserve: usize,
    inner: Mutex<Inner>,
    /// Signalled when reads complete and when the last pin of a closed
    /// file's frame drops (which frees the frame), if a thread waits
    /// (`Inner::waiting`). Other pin drops free nothing at once, and
    /// signalling them would cost a system call per read.
    changed: Condvar,
}

impl PageCache {
    /// A cache of `frames` pages of `page` bytes, keeping `reserve` frames
    /// from readahead for demand reads.
    #[cfg(test)]
    pub fn new(
        frames: usize,
        page: usize,
        reserve: usize,
        eviction: EvictionKind,
    ) -> std::io::Result<PageCache> {
        PageCache::with_arena(Arena::new(frames, page)?, reserve, eviction)
    }

    /// As [`PageCache::new`], its memory in transparent huge pages as
    /// `huge` says (`EngineConfig::huge_pages`).
    pub fn with_huge_pages(
        frames: usize,
        page: usize,
        reserve: usize,
        eviction: EvictionKind,
        huge: crate::io::HugePages,
    ) -> std::io::Result<PageCache> {
        let arena = Arena::with_huge_pages(frames, page, huge)?;
        PageCache::with_arena(arena, reserve, eviction)
    }

    fn with_arena(
        arena: std::sync::Arc<Arena>,
        reserve: usize,
        eviction: EvictionKind,
    ) -> std::io::Result<PageCache> {
        let frames = arena.frames();
        let page = arena.frame_size();
        Ok(PageCache {
            page,
            arena,
            pins: pins::Pins::new(frames),
            hits: HitTable::new(frames),
            reserve,
            inner: Mutex::new(Inner {
                files: HashMap::default(),
                owner: vec![None; frames],
                free: free::FreeFrames::all(frames),
                kept: kept::Kept::default(),
                eviction: eviction::new_eviction(eviction, frames),
                shadows: VecDeque::new(),
                reading: 0,
                wakers: Vec::new(),
                waiting: 0,
                totals: Stats::default(),
            }),
            changed: Condvar::new(),
        })
    }

    /// Frames readahead may take: all but the demand reserve.
    pub(crate) fn readahead_frames(&self) -> usize {
        self.frames().saturating_sub(self.reserve)
    }

    /// Number of frames (the budget in pages).
    pub fn frames(&self) -> usize {
        self.arena.frames()
    }

    pub(crate) fn arena(&self) -> &std::sync::Arc<Arena> {
        &self.arena
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    /// Waits (releasing the lock) until a read completes or a frame is
    /// freed by a pin's release, or `timeout` passes.
    pub(crate) fn wait<'a>(
        &self,
        mut guard: MutexGuard<'a, Inner>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, Inner> {
        guard.waiting += 1;
        let mut guard = self.changed.wait_timeout(guard, timeout).unwrap().0;
        guard.waiting -= 1;
        guard
    }

    /// Wakes the threads in [`PageCache::wait`], if any: `g` is the
    /// guard the change was made under, released here. Whether a thread
    /// waits is read under the lock, so none is missed (a waiter counts
    /// itself under the lock and releases it only inside the wait).
    pub(crate) fn signal(&self, g: MutexGuard<'_, Inner>) {
        let waiting = g.waiting > 0;
        drop(g);
        if waiting {
            self.changed.notify_all();
        }
    }

    /// Registers a file opened at `version`, under `new_id`; or, for a file
    /// whose pages are kept at close (`keep_as`, its identity), the pages
    /// kept from its last close if it was closed at the same version, under
    /// their id. The file's id.
    pub(crate) fn open(
        &self,
        new_id: FileId,
        version: Version,
        keep_as: Option<Identity>,
    ) -> FileId {
        let mut g = self.lock();
        if let Some((id, at)) = keep_as.and_then(|identity| g.kept.take(identity)) {
            match g.files.get_mut(&id) {
                Some(fp) if fp.kept && at == version && fp.size == version.size => {
                    fp.kept = false;
                    fp.stats = Stats::default();
                    fp.feedback.clear();
                    return id;
                }
                _ => {
                    self.forget(&mut g, id);
                }
            }
        }
        g.files.insert(new_id, FilePages::new(version.size));
        new_id
    }

    /// The last handle of file `id` closed: its pages stay, kept under
    /// `identity` at `version` for the next open ([`PageCache::open`]).
    pub(crate) fn keep_file(&self, id: FileId, identity: Identity, version: Version) {
        let mut g = self.lock();
        match g.files.get_mut(&id) {
            Some(fp) if !fp.closed => fp.kept = true,
            _ => return,
        }
        for old in g.kept.insert(identity, id, version) {
            self.forget(&mut g, old);
        }
    }

    /// Drops the pages kept of the closed file of identity `identity`; how
    /// many were cached.
    pub(crate) fn forget_kept(&self, identity: Identity) -> u64 {
        let mut g = self.lock();
        match g.kept.take(identity) {
            Some((id, _)) => self.forget(&mut g, id),
            None => 0,
        }
    }

    /// Drops a file's pages (its in-flight reads free theirs on completion).
    pub(crate) fn close_file(&self, id: FileId) {
        let mut g = self.lock();
        self.forget(&mut g, id);
    }

    /// Drops file `id` and its pages: at once, or when its last read in
    /// flight completes. How many pages were cached.
    fn forget(&self, inner: &mut Inner, id: FileId) -> u64 {
        let done = match inner.files.get_mut(&id) {
            Some(fp) => {
                fp.closed = true;
                fp.kept = false;
                fp.reading == 0
            }
            None => return 0,
        };
        let dropped = self.drop_cached(inner, id);
        if done {
            inner.files.remove(&id);
        }
        dropped
    }

    /// The file changed under the engine: drops every cached page, makes the
    /// reads in flight fill nothing, and takes `size` as its size.
    pub(crate) fn drop_pages(&self, id: FileId, size: u64) -> u64 {
        let mut g = self.lock();
        let Some(fp) = g.files.get_mut(&id) else {
            return 0;
        };
        fp.generation += 1;
        fp.size = size;
        let dropped = self.drop_cached(&mut g, id);
        self.signal(g);
        dropped
    }

    /// Drops the file's cached pages (a page still lent out is freed by its
    /// last unpin), its failed and evicted entries; pages being read stay
    /// (their reads free them). The number of cached pages dropped.
    fn drop_cached(&self, inner: &mut Inner, id: FileId) -> u64 {
        let Some(fp) = inner.files.get_mut(&id) else {
            return 0;
        };
        let (mut wasted, mut used) = (0, 0);
        let mut freed = Vec::new();
        let (hits, page) = (&self.hits, self.page);
        fp.pages.retain(|index, slot| match *slot {
            Slot::Ready {
                frame,
                unused_ra,
                marker,
                len,
                ..
            } => {
                if unused_ra {
                    // Used through the hit path, not yet counted: a use.
                    if used_unseen(hits, (id, index), frame, marker, len, page) {
                        used += 1;
                    } else {
                        wasted += 1;
                    }
                }
                hits.clear_fresh(frame);
                freed.push(frame);
                false
            }
            Slot::Reading { .. } => true,
            _ => false,
        });
        fp.stats.readahead_used += used;
        inner.totals.readahead_used += used;
        inner.totals.readahead_wasted += wasted;
        let dropped = freed.len() as u64;
        for f in freed {
            // Retracted before the pins are looked at (see `pins`).
            self.hits.retract(f);
            inner.eviction.remove(f);
            inner.owner[f as usize] = None;
            // A frame still lent out is freed by its last unpin.
            if self.pins.orphan(f) {
                inner.free.push(f);
            }
        }
        dropped
    }

    /// Pins `frame` (under the lock, so that eviction cannot race).
    fn pin(&self, frame: u32) {
        self.pins.pin(frame);
    }

    /// The lock-free hit path: pins the frame holding page `index` of
    /// `file` if the page may be read without the lock (up to date, full,
    /// unmarked, used before) and the hint table knows its frame. The
    /// caller copies from it and drops the pin with [`PageCache::unpin_each`]
    /// as after a locked read.
    ///
    /// Also returns whether this was the first use of a page read ahead,
    /// which the caller must report ([`Inner::note_used`], through the
    /// policy's replay).
    pub(crate) fn pin_hit(&self, file: FileId, index: u64) -> Option<(u32, bool)> {
        let id = hits::identity(file, index)?;
        let frame = self.hits.guess(id)?;
        self.pins.pin(frame);
        if self.hits.holds(frame, id) {
            Some((frame, self.hits.access(frame)))
        } else {
            self.unpin_each(std::iter::once(frame));
            None
        }
    }

    /// Drops pins taken by a reader, given as an iterator (no list made).
    pub(crate) fn unpin_each(&self, frames: impl Iterator<Item = u32>) {
        for f in frames {
            if self.pins.unpin(f) {
                // The last pin of a frame whose page was dropped: free it.
                let mut g = self.lock();
                g.free.push(f);
                self.signal(g);
            }
        }
    }

    /// Frames holding a page or a read in flight (not free).
    pub(crate) fn used_frames(&self) -> usize {
        self.frames() - self.lock().free.len()
    }

    /// Frames pinned right now.
    pub(crate) fn pinned(&self) -> usize {
        self.pins.count()
    }

    /// The bytes of a pinned, up-to-date frame.
    ///
    /// # Safety
    ///
    /// The caller holds a pin on `frame`, taken (under the lock, or by the
    /// hit path's identity check) while its page was up to date, for as
    /// long as it uses the slice: a pinned frame is never evicted, and only
    /// a frame being read (never pinned) is written.
    pub(crate) unsafe fn frame_bytes(&self, frame: u32, len: usize) -> &[u8] {
        // SAFETY: the caller's pin, as this function's contract says.
        unsafe { self.arena.frame(frame, len) }
    }
}

/// Whether a page still marked `unused_ra` (read ahead, no use counted)
/// was in fact used through the hit path, its use not yet replayed: it
/// was published as it landed (whole and unmarked), and the hit path took
/// its [`hits`] `FRESH` bit. Caller holds the lock.
fn used_unseen(
    hits: &HitTable,
    at: (FileId, u64),
    frame: u32,
    marker: bool,
    len: u32,
    page: usize,
) -> bool {
    !marker && len as usize == page && hits::identity(at.0, at.1).is_some() && !hits.is_fresh(frame)
}

/// Takes a free frame, or evicts one; `None` if every frame is busy.
fn take_frame(inner: &mut Inner, pins: &pins::Pins, hits: &HitTable, page: usize) -> Option<u32> {
    if let Some(f) = inner.free.pop() {
        return Some(f);
    }
    let owner = &inner.owner;
    // The eviction policy holds exactly the frames whose page is up to
    // date (inserted when a read completes, removed when the page goes), so
    // a candidate needs no look-up in the page tables: O(1) per frame.
    let victim = inner
        .eviction
        .victim(&mut |f| hits.take_access(f), &mut |f| {
            if owner[f as usize].is_none() {
                return false;
            }
            unpinned_for_eviction(hits, pins, f)
        })?;
    evict(inner, hits, victim, page);
    Some(victim)
}

/// The frame of page `index` of `file`, evicted for a scan's readahead if
/// the page is up to date, was read ahead and then used, and is not
/// pinned: a scan of a file larger than the cache recycles its own trail
/// (see `Planner::ring`). `None` leaves the page as it is. Caller holds
/// the lock.
fn take_used(
    inner: &mut Inner,
    pins: &pins::Pins,
    hits: &HitTable,
    page: usize,
    (file, index): (FileId, u64),
) -> Option<u32> {
    let Some(Slot::Ready {
        frame,
        unused_ra,
        marker,
        len,
        read_ahead: true,
    }) = inner.files.get(&file)?.pages.get(index).copied()
    else {
        // Not cached, or read on demand: a random reader's page, which a
        // scan passing by does not take.
        return None;
    };
    if unused_ra && !used_unseen(hits, (file, index), frame, marker, len, page) {
        return None;
    }
    if !unpinned_for_eviction(hits, pins, frame) {
        return None;
    }
    evict(inner, hits, frame, page);
    let fp = inner.files.get_mut(&file).expect("owner file");
    fp.stats.recycled += 1;
    inner.totals.recycled += 1;
    Some(frame)
}

/// Whether `frame` may be evicted: its identity word is retracted first,
/// then its pins are looked at (a reader of the hit path pins first, then
/// checks the identity, so one of the two sees the other; see `pins`). A
/// pinned frame gets its word back and keeps its page. Caller holds the
/// lock.
fn unpinned_for_eviction(hits: &HitTable, pins: &pins::Pins, frame: u32) -> bool {
    let word = hits.retract(frame);
    if pins.is_pinned(frame) {
        hits.restore(frame, word);
        false
    } else {
        true
    }
}

/// Evicts the up-to-date page in `victim`, whose identity word the caller
/// retracted after finding it unpinned: leaves a shadow, counts a page
/// read ahead and never used as wasted. Caller holds the lock.
fn evict(inner: &mut Inner, hits: &HitTable, victim: u32, page: usize) {
    let (file, index) = inner.owner[victim as usize]
        .take()
        .expect("victim has an owner");
    inner.eviction.remove(victim);
    let fp = inner.files.get_mut(&file).expect("owner file");
    let slot = fp.pages.get_mut(index);
    let Some(&mut Slot::Ready {
        unused_ra,
        marker,
        len,
        ..
    }) = slot
    else {
        unreachable!("victims are up to date")
    };
    let seen = unused_ra && used_unseen(hits, (file, index), victim, marker, len, page);
    let unused_ra = unused_ra && !seen;
    // The shadow takes the page's place in the table (one look-up, not two).
    if let Some(slot) = slot {
        *slot = Slot::Shadow {
            evicted_unused: unused_ra,
        };
    }
    hits.clear_fresh(victim);
    if seen {
        // Its first use came through the hit path and awaits the replay.
        fp.stats.readahead_used += 1;
        inner.totals.readahead_used += 1;
    }
    if unused_ra {
        fp.stats.readahead_wasted += 1;
        inner.totals.readahead_wasted += 1;
        fp.feedback.push(Feedback::EvictedUnused { index });
    }
    inner.shadows.push_back((file, index));
    // Bound the shadows to one per frame, oldest first.
    while inner.shadows.len() > inner.owner.len() {
        let (f, i) = inner.shadows.pop_front().unwrap();
        if let Some(fp) = inner.files.get_mut(&f) {
            fp.pages.remove_if(i, |s| matches!(s, Slot::Shadow { .. }));
        }
    }
}

impl Inner {
    pub(crate) fn file(&mut self, id: FileId) -> &mut FilePages {
        self.files.get_mut(&id).expect("open file")
    }

    /// Whether any page of `pages` of `file` has a read in flight.
    pub(crate) fn any_reading(&mut self, file: FileId, pages: std::ops::Range<u64>) -> bool {
        let fp = self.file(file);
        pages
            .into_iter()
            .any(|i| matches!(fp.pages.get(i), Some(Slot::Reading { .. })))
    }

    /// Pages `pages` of `file` were read without the lock (the hit path):
    /// a page read ahead and not used before is used now, as `collect`
    /// would have counted it.
    pub(crate) fn note_used(&mut self, file: FileId, pages: std::ops::Range<u64>) {
        let Inner { files, totals, .. } = self;
        let Some(fp) = files.get_mut(&file) else {
            return;
        };
        for i in pages {
            if let Some(Slot::Ready { unused_ra, .. }) = fp.pages.get_mut(i) {
                if *unused_ra {
                    *unused_ra = false;
                    fp.stats.readahead_used += 1;
                    totals.readahead_used += 1;
                }
            }
        }
    }

    pub(crate) fn add_waker(&mut self, w: &Waker) {
        if !self.wakers.iter().any(|x| x.will_wake(w)) {
            self.wakers.push(w.clone());
        }
    }

    pub(crate) fn count(&mut self, file: FileId, f: impl Fn(&mut Stats)) {
        f(&mut self.totals);
        f(&mut self.file(file).stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completing_a_read_of_a_file_the_cache_no_longer_knows_frees_its_frames_and_keeps_the_lock_usable(
    ) {
        let cache = PageCache::new(4, 4096, 1, EvictionKind::Clock).unwrap();
        let mut frames = Vec::new();
        {
            let mut g = cache.lock();
            while let Some(f) = g.free.pop() {
                frames.push(f);
            }
            g.reading += frames.len();
        }
        let plan = Plan {
            file: 7,
            first: 0,
            frames: frames.clone(),
            speculative: true,
            generation: 0,
        };
        // Once, this panicked ("file of a read in flight") on the
        // backend's thread and poisoned the lock for every later read.
        cache.complete(&plan, Ok(4 * 4096));
        assert_eq!(cache.used_frames(), 0);
        assert_eq!(cache.lock().reading, 0);
        assert!(!cache.inner.is_poisoned());
    }
}
