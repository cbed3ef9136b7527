//! The decisions: a window at a miss and at a lookahead marker, shaped by
//! the stream's direction, and what ahead falls back to where none of its
//! own rules speaks (the kernel's context readahead, or the request as it
//! is).

use super::*;

/// The pages a stream of ahead's own rules may read ahead before its
/// requests have asked for as many ([`Stream::shown`]): one latency's
/// worth where the device's costs are known and a round trip is worth more
/// than one of the kernel's default windows ([`crate::ra::DEFAULT_MAX_PAGES`]: a
/// store across a network); else none. Below that the kernel's first
/// window already covers a round trip, and on the simulator's ssd model
/// (80 µs, 9 pages) a floor made a sqlite3 index-range trace 1.05×
/// `ondemand`'s time against 1.03× without. (Nor is a stream's first
/// window raised to it: eight interleaved readers of an object then spent
/// the file's speculation budget on the first of them, and the others
/// waited a round trip more.)
pub(crate) fn latency_floor(view: &dyn CacheView) -> u64 {
    match view.device_cost() {
        Some(c) if c.latency_pages > crate::ra::DEFAULT_MAX_PAGES => c.latency_pages,
        _ => 0,
    }
}

impl StreamTable {
    /// A window of the stream's shape holding about `pages` pages read,
    /// starting at the request (forward, strided) or ending with it
    /// (backward). Always holds the whole request.
    /// `reach` bounds a strided window ([`Reach`]).
    pub(super) fn shaped(
        direction: Direction,
        req: Request,
        pages: u64,
        async_pages: u64,
        reach: Reach,
    ) -> Window {
        let pages = pages.max(req.count);
        match direction {
            Direction::Backward => {
                let start = req.end().saturating_sub(pages);
                let size = req.end() - start;
                Window {
                    start,
                    size,
                    async_size: async_pages.min(size),
                    shape: Shape::Backward,
                }
            }
            Direction::Strided { run, period } => {
                let runs = (pages / run).max(1);
                // The first run holds the request: the marker goes on a
                // later one.
                let async_runs = async_pages.div_ceil(run).min(runs - 1);
                strided_window(req.index, run, period, runs, async_runs, reach)
            }
            Direction::Forward | Direction::Unknown | Direction::Irregular { .. } => {
                Window::forward(req.index, pages, async_pages.min(pages))
            }
        }
    }

    /// The window after `prev` in the stream's direction, holding `pages`
    /// pages, all of it asynchronous.
    pub(super) fn following(
        direction: Direction,
        prev: &Window,
        pages: u64,
        reach: Reach,
    ) -> Option<Window> {
        match direction {
            Direction::Backward => {
                if prev.start == 0 {
                    return None;
                }
                let start = prev.start.saturating_sub(pages);
                let size = prev.start - start;
                Some(Window {
                    start,
                    size,
                    async_size: size,
                    shape: Shape::Backward,
                })
            }
            Direction::Strided { run, period } => {
                let runs = (pages / run).max(1);
                let last_run = prev.start + (prev.size - 1) / period * period;
                Some(strided_window(
                    last_run + period,
                    run,
                    period,
                    runs,
                    runs,
                    reach,
                ))
            }
            Direction::Forward | Direction::Unknown | Direction::Irregular { .. } => {
                Some(Window::forward(prev.end(), pages, pages))
            }
        }
    }

    pub(super) fn on_miss(&mut self, req: Request, view: &dyn CacheView) -> Option<Window> {
        let Some(slot) = self.current else {
            return Some(self.fallback(req, view));
        };
        let s = self.streams[slot];
        if s.direction == Direction::Unknown || s.holding() {
            // Not (yet) a stream, or one whose speculation did not pay.
            return Some(self.fallback(req, view));
        }
        let max = self.effective_max(&s).min(self.share_max(view));
        // Thrashing: readahead pages of this stream were evicted before use.
        let thrashed = view.shadow(req.index).is_some_and(|sh| sh.evicted_unused);
        let Some((direction, reach)) = self.reading_direction(slot, view) else {
            return Some(self.fallback(req, view));
        };
        // A backward stream of rows reads the rest of the present row with
        // the rows below it (as a request, within the largest window).
        let req = match (direction, s.row) {
            (Direction::Backward, Some((_, end))) if end > req.end() => {
                Request::new(req.index, (end - req.index).min(max).max(req.count))
            }
            _ => req,
        };
        // A widened run takes a window of at least two runs, so that the
        // marker sits on the second.
        let min_pages = match direction {
            Direction::Strided { run, .. } if run > req.count => (2 * run).min(max),
            _ => 0,
        };
        if thrashed {
            if let Some(issued_at) = s.owns(req.index) {
                let survived = req.index.abs_diff(issued_at);
                let cap = (survived * 3 / 4).max(MIN_WINDOW);
                let st = &mut self.streams[slot];
                st.cap = st.cap.min(cap);
                st.size = st.size.min(st.cap);
            }
            let st = self.streams[slot];
            let pages = st
                .size
                .max(MIN_WINDOW)
                .min(self.effective_max(&st).min(self.share_max(view)))
                .max(min_pages);
            let w = Self::shaped(direction, req, pages, pages / 2, reach);
            return Some(self.record(slot, w, req));
        }
        let pages = if s.window.is_none() || s.size == 0 {
            init_window(req.count, max).min(max)
        } else {
            // The reader got ahead of readahead (or the marker was lost):
            // ramp on.
            next_window(s.size, max)
        };
        let pages = if s.boost {
            s.boosted(pages, max, latency_floor(view))
        } else {
            pages
        };
        let pages = s.shown(pages, latency_floor(view)).max(min_pages);
        let st = &mut self.streams[slot];
        st.boost = false;
        st.size = pages;
        let async_pages = if pages > req.count {
            pages - req.count
        } else {
            pages
        };
        let w = Self::shaped(direction, req, pages, async_pages, reach);
        Some(self.record(slot, w, req))
    }

    /// What ahead reads where none of its own rules speaks for a miss: the
    /// kernel's context readahead ([`StreamTable::context`]); else, in a
    /// file the dense rule is for, the rest of a dense region; else the
    /// request as it is. (The kernel's rule comes first: the file's
    /// speculation budget may hold the dense rule back, and the kernel's
    /// rule is the floor ahead never reads below, [`crate::ra::budget`].
    /// Before the budget, files the dense rule was for had no context
    /// readahead, and two sqlite3 traces then ran 1.1–1.3× `ondemand`'s
    /// time once the budget held the dense rule.)
    pub(super) fn fallback(&mut self, req: Request, view: &dyn CacheView) -> Window {
        if let Some(w) = self.current.and_then(|slot| self.context(slot, req, view)) {
            return w;
        }
        self.dense_or_as_is(req, view)
    }

    /// The kernel's context readahead (`ondemand`'s, Wu, 2.6.31): a miss
    /// right after more cached pages than it asks for continues a stream
    /// the table lost (other requests pushed it out, or it was read before
    /// this policy saw it), so stream `slot` becomes a forward stream with a
    /// window of that history plus the request. What the kernel would read
    /// here, ahead reads too. Only for a stream not yet shaped
    /// ([`Direction::Unknown`]).
    pub(super) fn context(
        &mut self,
        slot: usize,
        req: Request,
        view: &dyn CacheView,
    ) -> Option<Window> {
        if !self.context || req.index == 0 || self.streams[slot].direction != Direction::Unknown {
            return None;
        }
        let (history, from_start) = match crate::ra::prev_miss(view, req.index - 1, self.max) {
            crate::ra::PrevMiss::At(miss) => (req.index - 1 - miss, false),
            crate::ra::PrevMiss::FromStart => (req.index, true),
            crate::ra::PrevMiss::NotWithin => (self.max, false),
        };
        if history <= req.count {
            return None;
        }
        let history = if from_start { history * 2 } else { history };
        let size = (history + req.count).min(self.max).max(req.count);
        // The kernel's window, its marker on the last page: a reader that
        // comes to it ramps on as the kernel's would (`async_size` 1,
        // `try_context_readahead`). Without the marker, ahead read an
        // aged sqlite3 table's leaves (a scan in key order over pages in
        // random order) in 19% more requests than `ondemand` in the
        // simulator, and 1.81-2.07x the kernel's time in Direct mode
        // (docs/never-worse.md, seed 80).
        let s = &mut self.streams[slot];
        s.direction = Direction::Forward;
        // On a far store (an object: `latency_floor`), as before: one
        // window, no marker, the ramp afresh. There the kernel is no
        // reference, and the marker's ramps took random 64 KiB reads of
        // an object (`bench --quick`) from 0.75 to 1.20 of the bytes asked
        // fetched, 77 to 72 MB/s.
        let marked = latency_floor(view) == 0;
        s.size = if marked { size } else { 0 };
        let w = Window::forward(req.index, size, u64::from(marked));
        Some(self.record(slot, w, req))
    }

    pub(super) fn on_marker(&mut self, req: Request, view: &dyn CacheView) -> Option<Window> {
        if self.dense.hit(req.index) {
            return None;
        }

        let marked = |s: &Stream| {
            s.live
                && s.window
                    .is_some_and(|i| i.window.marker_page() == Some(req.index))
        };
        let slot = match self.current {
            Some(c) if marked(&self.streams[c]) => Some(c),
            _ => self.streams.iter().position(marked),
        };
        let Some(slot) = slot else {
            // A marker nobody remembers (the stream fell out of the table):
            // like the kernel's lookahead-clueless case, ramp up from the
            // cached run after it, as a forward stream. Unless the reader
            // is known to go another way (backwards, strided, or an
            // irregular stride, whose strided windows were judged and
            // dropped when its gap first moved): then the marker is a
            // leftover of a window it has moved on from.
            if let Some(c) = self.current {
                if matches!(
                    self.streams[c].direction,
                    Direction::Backward | Direction::Strided { .. } | Direction::Irregular { .. }
                ) {
                    return None;
                }
            }
            let start = next_miss(view, req.index + 1, self.max);
            if start - req.index > self.max || start >= view.file_pages() {
                return None;
            }
            let pages = next_window(start - req.index + req.count, self.max);
            let slot = self.current.unwrap_or_else(|| self.new_stream(req));
            let s = &mut self.streams[slot];
            s.direction = Direction::Forward;
            s.size = pages;
            let w = Window::forward(start, pages, pages);
            return Some(self.record(slot, w, req));
        };
        let s = self.streams[slot];
        if s.holding() {
            return None;
        }
        let prev = s.window?.window;
        // A forward window whose reader's gaps inside it were a stride's
        // ([`Stream::gap_inside_window`]): its marker (the kernel's
        // context readahead puts one on its last page) is where the
        // reader is about to leave it, so the stream turns strided here,
        // its first strided window at the reader's next run, instead of
        // ramping forward through the gaps as the kernel would.
        let next = Request::new(s.last.index + s.period, s.last.count);
        if s.direction == Direction::Forward
            && !s.jittered
            && s.period > 0
            && s.confirmations >= STRIDE_CONFIRMATIONS
            && s.last.count <= self.max
            && next.index >= prev.end()
            && next.end() <= view.file_pages()
        {
            self.streams[slot].turn_strided(s.last.count, &mut self.ledger);
            self.current = Some(slot);
            return self.on_miss(next, view);
        }
        let max = self.effective_max(&s).min(self.share_max(view));
        let mut pages = next_window(s.size.max(1), max);
        if s.boost {
            pages = s.boosted(pages, max, latency_floor(view));
        }
        let pages = s.shown(pages, latency_floor(view));
        let st = &mut self.streams[slot];
        st.boost = false;
        st.size = pages;
        st.last_used = self.clock;
        let (direction, reach) = self.reading_direction(slot, view)?;
        let w = Self::following(direction, &prev, pages, reach)?;
        Some(self.record(slot, w, req))
    }
}
