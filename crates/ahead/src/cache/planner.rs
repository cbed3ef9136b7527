//! Planning a request under the cache's lock: the [`Planner`] is the
//! cache as `ra::drive` sees it (a page table whose reads become
//! [`Plan`]s), and [`collect`] hands the reader what it found.

use super::*;

/// The cache as one file's readahead sees it and fills it, during one call
/// of [`ra::drive`]: planned reads are collected, to be issued once the lock
/// is released.
pub(crate) struct Planner<'a> {
    pub(crate) cache: &'a PageCache,
    pub(crate) inner: &'a mut Inner,
    pub(crate) file: FileId,
    pub(crate) file_pages: u64,
    /// Most pages in one device read.
    pub(crate) max_io_pages: usize,
    /// The pages the current request needs: the part of a readahead window
    /// that falls here is read on demand (the reader waits for it anyway),
    /// the rest asynchronously.
    pub(crate) request: std::ops::Range<u64>,
    pub(crate) plans: Vec<Plan>,
    /// What the file's source charges, where the engine knows it.
    pub(crate) device: Option<ra::DeviceCost>,
    /// How far behind (or ahead, for a backward reader) a scan's readahead
    /// recycles the pages its reader has used, in pages; 0 for none. Set
    /// only for a file larger than the whole cache ([`Planner::ring_for`]).
    pub(crate) ring: u64,
}

impl Planner<'_> {
    /// The ring distance for a file of `file_pages` pages in a cache of
    /// `frames` frames whose readahead windows reach `window` pages now,
    /// having started at `start` (the tuner grows them,
    /// [`crate::ra::tune::WindowTuner`]): none unless the file is larger
    /// than the cache (it cannot be kept whole) and the ring fits in a
    /// quarter of the cache; else four of the starting windows, or two of
    /// the present ones and one of the starting, whichever is more.
    ///
    /// A scan's reader sits up to two windows behind the page being read
    /// ahead (the window in flight and the one its marker starts), so the
    /// page two windows and a margin back has been used and passed. (Four
    /// windows of 16 MiB cost 28 MiB more of the cache's memory touched
    /// than two and a margin, for no more pages recycled: `ahead read
    /// --stats` of a 1 GiB file counted 212,992 and 221,184.) PostgreSQL gives a
    /// sequential scan of a table larger than a quarter of its buffers a
    /// ring of its own for the same two reasons: the scan does not flush
    /// what others keep, and it touches little memory (here: the cache's
    /// pages are faulted in on first use, about a third of the CPU of a
    /// cold 1 GiB read into a 256 MiB cache; docs/bench.md).
    pub(crate) fn ring_for(file_pages: u64, frames: usize, window: u64, start: u64) -> u64 {
        let frames = frames as u64;
        let (window, start) = (window.max(1), start.max(1));
        let ring = (4 * start).max(2 * window + start);
        if file_pages <= frames || ring > frames / 4 {
            // A shorter ring would reach the pages the reader is on: it
            // would take them or not as its uses happened to be counted.
            return 0;
        }
        ring
    }

    /// For a speculative read of page `index`: the frame of page `j`,
    /// [`Planner::ring`] behind it (or ahead of it, for a backward scan),
    /// if that page was read ahead and then used and is free to go
    /// (`take_used`), and the scan had already
    /// read half the cache's worth before `j`: the page half the cache
    /// behind `j` (ahead of it) was read, and is cached or was evicted.
    ///
    /// So a scan keeps the first half cache it reads, as any read is kept,
    /// and only what it reads beyond that goes round the ring. A region
    /// read once to be read again (the hot part of a large file) stays if
    /// it fits in half the cache, readahead past its end included; and a
    /// scan never pushes out more than half the cache, as the kernel's
    /// pages used once stay on its inactive list and leave the active
    /// one alone.
    fn recycle(&mut self, index: u64, speculative: bool) -> Option<u32> {
        if !speculative || self.ring == 0 {
            return None;
        }
        let half = self.cache.frames() as u64 / 2;
        let take = |p: &mut Self, j: u64| {
            take_used(
                p.inner,
                &p.cache.pins,
                &p.cache.hits,
                p.cache.page,
                (p.file, j),
            )
        };
        // Behind a forward scan first; the page ahead (a backward scan's)
        // is looked up only if that gives nothing: a forward scan's look
        // far ahead was a second page-table probe a page, and a miss.
        let behind = index
            .checked_sub(self.ring)
            .filter(|&j| j.checked_sub(half).is_some_and(|i| self.was_read(i)));
        if let Some(frame) = behind.and_then(|j| take(self, j)) {
            return Some(frame);
        }
        let j = index + self.ring;
        if j + half < self.file_pages && self.was_read(j + half) {
            return take(self, j);
        }
        None
    }

    /// Whether page `index` is cached or was evicted (a shadow remains).
    fn was_read(&self, index: u64) -> bool {
        matches!(
            self.slot(index),
            Some(Slot::Ready { .. } | Slot::Shadow { .. })
        )
    }

    pub(super) fn fp(&self) -> &FilePages {
        &self.inner.files[&self.file]
    }

    pub(super) fn slot(&self, index: u64) -> Option<Slot> {
        self.fp().pages.get(index).copied()
    }

    /// Plans reads of the absent pages among `first..first + count`; stops
    /// at the first page it cannot get a frame for. Returns whether it
    /// planned every absent page.
    pub(super) fn plan(
        &mut self,
        first: u64,
        count: u64,
        speculative: bool,
        marker: Option<u64>,
    ) -> bool {
        let mut planned = 0;
        let mut complete = true;
        let plans_before = self.plans.len();
        let mut current: Option<Plan> = None;
        for index in first..first + count {
            let slot = self.slot(index);
            let absent = matches!(
                slot,
                None | Some(Slot::Shadow { .. }) | Some(Slot::Failed { .. })
            );
            let full = current
                .as_ref()
                .is_some_and(|p| p.frames.len() >= self.max_io_pages);
            if !absent || full {
                if let Some(p) = current.take() {
                    self.plans.push(p);
                }
                if !absent {
                    continue;
                }
            }
            if speculative && self.inner.reading + self.cache.reserve >= self.cache.frames() {
                complete = false;
                break;
            }
            let Some(frame) = self.recycle(index, speculative).or_else(|| {
                take_frame(
                    self.inner,
                    &self.cache.pins,
                    &self.cache.hits,
                    self.cache.page,
                )
            }) else {
                complete = false;
                break;
            };
            self.cache.arena.reach(frame);
            let file = self.file;
            let fp = self.inner.files.get_mut(&file).unwrap();
            let generation = fp.generation;
            if !speculative {
                if let Some(Slot::Shadow {
                    evicted_unused: true,
                }) = slot
                {
                    fp.stats.evicted_before_use += 1;
                    self.inner.totals.evicted_before_use += 1;
                }
            }
            fp.pages.insert(
                index,
                Slot::Reading {
                    frame,
                    speculative,
                    marker: marker == Some(index),
                },
            );
            fp.reading += 1;
            self.inner.reading += 1;
            self.inner.owner[frame as usize] = Some((file, index));
            current
                .get_or_insert_with(|| Plan {
                    file,
                    first: index,
                    frames: Vec::new(),
                    speculative,
                    generation,
                })
                .frames
                .push(frame);
            planned += 1;
        }
        if let Some(p) = current {
            self.plans.push(p);
        }
        // Every plan becomes one device read.
        let reads = (self.plans.len() - plans_before) as u64;
        let bytes = planned * self.cache.page as u64;
        self.inner.count(self.file, |s| {
            s.device_reads += reads;
            s.device_bytes += bytes;
            if speculative {
                s.readahead_pages += planned;
            } else {
                s.misses += planned;
            }
        });
        complete
    }

    /// Reads the pages of `window` that are absent, as readahead.
    pub(crate) fn prefetch(&mut self, window: &Window) {
        let marker = window.marker_page();
        let mut runs = Vec::new();
        window.for_each_run(|s, n| runs.push((s, n)));
        let (rs, re) = (self.request.start, self.request.end);
        for (s, n) in runs {
            let e = s + n.min(self.file_pages.saturating_sub(s));
            // Before the request, inside it (on demand), after it.
            let pieces = [
                (s, e.min(rs), true),
                (s.max(rs), e.min(re), false),
                (s.max(re), e, true),
            ];
            for (from, to, speculative) in pieces {
                if from < to && !self.plan(from, to - from, speculative, marker) {
                    return;
                }
            }
        }
    }
}

/// Whether a page in `slot` is present: cached or being read.
fn present(slot: &Slot) -> bool {
    matches!(slot, Slot::Reading { .. } | Slot::Ready { .. })
}

impl ra::CacheView for Planner<'_> {
    fn file_pages(&self) -> u64 {
        self.file_pages
    }
    fn is_present(&self, index: u64) -> bool {
        self.slot(index).as_ref().is_some_and(present)
    }
    fn presence_up(&self, from: u64, to: u64) -> u64 {
        self.fp().pages.run_up(from, to, |s| s.is_some_and(present))
    }
    fn presence_down(&self, lo: u64, from: u64) -> u64 {
        self.fp()
            .pages
            .run_down(lo, from, |s| s.is_some_and(present))
    }
    fn shadow(&self, index: u64) -> Option<Shadow> {
        match self.slot(index) {
            Some(Slot::Shadow { evicted_unused }) => Some(Shadow { evicted_unused }),
            _ => None,
        }
    }
    fn capacity_pages(&self) -> Option<u64> {
        // What readahead may hold: the frames beyond the demand reserve.
        Some(self.cache.readahead_frames() as u64)
    }
    fn device_cost(&self) -> Option<ra::DeviceCost> {
        self.device
    }
}

impl ra::PageTable for Planner<'_> {
    fn lookup(&self, index: u64) -> Lookup {
        match self.slot(index) {
            Some(Slot::Reading {
                speculative,
                marker,
                ..
            }) => Lookup::Present {
                marked: marker,
                late: speculative,
            },
            Some(Slot::Ready { marker, .. }) => Lookup::Present {
                marked: marker,
                late: false,
            },
            _ => Lookup::Absent,
        }
    }

    fn clear_marker(&mut self, index: u64) {
        let file = self.file;
        if let Some(Slot::Reading { marker, .. } | Slot::Ready { marker, .. }) = self
            .inner
            .files
            .get_mut(&file)
            .unwrap()
            .pages
            .get_mut(index)
        {
            *marker = false;
        }
    }

    fn submit_readahead(&mut self, window: &Window) {
        self.prefetch(window);
    }

    fn submit_demand(&mut self, index: u64, count: u64) {
        self.plan(index, count, false, None);
    }
}

/// What [`collect`] found.
pub(crate) enum Collected {
    /// Pinned frames `(frame, valid bytes)` for pages `from..`, in order; the
    /// bool says the end of the file was reached.
    Pages(Vec<(u32, usize)>, bool),
    /// The first page is being read: wait.
    Wait,
    /// The page at this index is absent: plan again from it.
    Absent(u64),
    /// The page's read failed with this errno.
    Failed(u64, i32),
}

/// Pins the up-to-date pages of `pages` in order, stopping
/// at the first page that is not up to date, or at the end of the file. Also
/// counts hits, readahead use and late waits.
pub(crate) fn collect(
    cache: &PageCache,
    inner: &mut Inner,
    file: FileId,
    pages: std::ops::Range<u64>,
    max_pages: usize,
    demand: &[(u64, u64)],
    waited: &mut bool,
) -> Collected {
    let page = cache.page as u64;
    let Inner {
        files,
        eviction,
        totals,
        ..
    } = inner;
    let fp = files.get_mut(&file).expect("open file");
    let last_page = fp.size.div_ceil(page);
    let (from, end) = (pages.start, pages.end.min(last_page));
    let mut got = Vec::new();
    let mut i = from;
    while i < end && got.len() < max_pages {
        match fp.pages.get_mut(i) {
            Some(Slot::Ready {
                frame,
                len,
                unused_ra,
                marker,
                ..
            }) => {
                let was_demand = demand.iter().any(|&(s, n)| i >= s && i < s + n);
                if *unused_ra {
                    *unused_ra = false;
                    cache.hits.clear_fresh(*frame);
                    fp.stats.readahead_used += 1;
                    totals.readahead_used += 1;
                    if *waited {
                        fp.stats.late += 1;
                        totals.late += 1;
                    } else {
                        fp.stats.hits += 1;
                        totals.hits += 1;
                    }
                } else if !was_demand {
                    fp.stats.hits += 1;
                    totals.hits += 1;
                }
                *waited = false;
                cache.pin(*frame);
                eviction.touch(*frame);
                let valid = (*len as u64).min(fp.size.saturating_sub(i * page)) as usize;
                // Used once (counted above), and whole: later hits may skip
                // the lock.
                if !*marker && valid == cache.page {
                    if let Some(id) = hits::identity(file, i) {
                        cache.hits.publish(*frame, id);
                    }
                }
                got.push((*frame, valid));
                i += 1;
                if valid < cache.page {
                    return Collected::Pages(got, true);
                }
            }
            Some(Slot::Reading { .. }) if got.is_empty() => return Collected::Wait,
            Some(Slot::Failed { errno }) if got.is_empty() => {
                let errno = *errno;
                fp.pages.remove(i);
                return Collected::Failed(i, errno);
            }
            None | Some(Slot::Shadow { .. }) if got.is_empty() => return Collected::Absent(i),
            _ => break,
        }
    }
    let eof = i >= last_page;
    Collected::Pages(got, eof)
}
