//! The kernel's on-demand readahead (the on-demand RFC and commit,
//! docs/references.md), as mainline Linux runs it today.
//!
//! One window per file: `start`, `size`, `async_size`, plus the end of the
//! previous read. The policy is consulted on a miss (synchronous readahead,
//! `page_cache_sync_ra`) and on a hit of the marker page (asynchronous
//! readahead, `page_cache_async_ra`), and sorts each call into the on-demand
//! commit's four cases:
//!
//! * **sequential-next** — a marker hit at the expected place (`start + size -
//!   async_size`): push the window forward (`start += size`) and ramp it up
//!   (`next_window`: ×4 below max/16, ×2 up to max/2, then max), all of it
//!   asynchronous (`async_size = size`).
//! * **sequential-first** — a miss at page 0, a miss right after the previous
//!   read (`index - prev ≤ 1`), or an oversize request: a new window of
//!   `init_window` pages with `async_size = size - request` (or `size` when
//!   the request fills it).
//! * **random** — any other miss: read the request as is and leave the state
//!   alone, *unless* context readahead (below) finds a stream.
//! * **lookahead-clueless** — a marker hit away from the expected place (an
//!   interleaved stream, or a stale marker): find where the cached run after
//!   the marker ends (`page_cache_next_miss`), take the distance as the old
//!   window and ramp it up from there.
//!
//! Mainline refinements reproduced here, each with the kernel code it comes
//! from:
//!
//! * **Context readahead** (Wu, 2.6.31, `try_context_readahead`; today inline
//!   in `page_cache_sync_ra`): on a non-sequential miss, count the cached pages
//!   just before the request (`page_cache_prev_miss`). If there are more than
//!   the request, a stream passed here (interleaved readers on one file
//!   descriptor, or a reader on another): start a window of `history +
//!   request` pages (×2 history if the file is cached from its first page),
//!   capped at max, with `async_size = 1`. [`RaConfig::context_readahead`]
//!   turns it off, which gives the on-demand readahead the RFC measured
//!   (2.6.21-rc7-mm1): every non-sequential miss read as is.
//! * **Oversize requests** are read whole: the maximum for that call is the
//!   request itself (`ractl_max_pages`, where the device allows it).
//! * **Merge the next window** (`ondemand_readahead`'s `readit`, 2.6.23–6.9):
//!   when a new window would put its marker on the very page being read
//!   (`size == async_size` at `start == index`), the next window is added to
//!   it at once instead of triggering a second call.
//! * **Random reads don't pollute the state**: the random case returns the
//!   request only and keeps `start/size/async_size` for the stream that may
//!   resume.
//!
//! `prev` is kept in pages as the end of the previous request; a miss at
//! `prev` or `prev + 1` is sequential (the kernel's `index - prev_index <=
//! 1`, where `prev_index` is the page after the last byte read), and so is a
//! miss on `prev - 1`, the last page read again by an unaligned reader.

use super::{
    init_window, next_miss, next_window, prev_miss, CacheView, Policy, PrevMiss, RaConfig, Request,
    Trigger, Window,
};

/// The on-demand policy's per-file state (`struct file_ra_state`).
#[derive(Clone, Debug)]
pub struct OnDemand {
    max: u64,
    start: u64,
    size: u64,
    async_size: u64,
    /// End (exclusive) of the previous request; `None` before the first.
    prev_end: Option<u64>,
    /// Context readahead on ([`RaConfig::context_readahead`]).
    context: bool,
    /// The file was advised random ([`RaConfig::random_advice`]).
    random: bool,
    /// The kernel reads in large folios ([`RaConfig::large_folios`]).
    folios: bool,
    /// The folio order of the last window (the kernel's `ra->order`):
    /// 0 after a window read on a miss; after a mark, two above the last,
    /// then no more than the window's size allows.
    order: u32,
}

/// A bound on the kept folio order: each window's size bounds it well
/// below this (2,048 pages, order 11, at the largest window here).
const MAX_ORDER: u32 = 16;

impl OnDemand {
    /// A fresh state.
    pub fn new(config: RaConfig) -> OnDemand {
        OnDemand {
            max: config.max_pages.max(1),
            start: 0,
            size: 0,
            async_size: 0,
            prev_end: None,
            context: config.context_readahead,
            random: config.random_advice,
            folios: config.large_folios,
            order: 0,
        }
    }

    /// The current window `(start, size, async_size)`, for tests.
    pub fn state(&self) -> (u64, u64, u64) {
        (self.start, self.size, self.async_size)
    }

    /// Whether page `index` is where this state's window put its
    /// lookahead marker (the kernel's `PG_readahead` page): a marker hit
    /// elsewhere is on a page the kernel would not have marked.
    pub fn marks(&self, index: u64) -> bool {
        self.async_size > 0 && self.start + self.size - self.async_size == index
    }

    fn is_sequential(&self, index: u64) -> bool {
        match self.prev_end {
            Some(prev) => index.wrapping_sub(prev) <= 1 || index + 1 == prev,
            None => false,
        }
    }

    fn sync_readahead(&mut self, req: Request, view: &dyn CacheView) -> Option<Window> {
        let index = req.index;
        let oversize = req.count > self.max;
        let max = self.max.max(req.count);
        if index == 0 || oversize || self.is_sequential(index) {
            // sequential-first (or start of file, or oversize read).
            self.order = 0;
            self.start = index;
            self.size = init_window(req.count, max).max(req.count);
            self.async_size = if self.size > req.count {
                self.size - req.count
            } else {
                self.size
            };
            return Some(self.readit(index, max));
        }
        if !self.context {
            // random, as the RFC's kernel read every other miss.
            return Some(Window::forward(index, req.count, 0));
        }
        // Context readahead: look for the trail a stream leaves behind.
        let (history, from_start) = match prev_miss(view, index - 1, max) {
            PrevMiss::At(miss) => (index - 1 - miss, false),
            PrevMiss::FromStart => (index, true),
            PrevMiss::NotWithin => (max, false),
        };
        if history <= req.count {
            // random: read as is, do not pollute the state.
            return Some(Window::forward(index, req.count, 0));
        }
        let history = if from_start { history * 2 } else { history };
        self.order = 0;
        self.start = index;
        self.size = (history + req.count).min(max);
        self.async_size = 1;
        Some(self.readit(index, max))
    }

    fn async_readahead(&mut self, req: Request, view: &dyn CacheView) -> Option<Window> {
        // A mark on a large folio is hit at the folio's first page, as the
        // kernel passes it (`page_cache_async_ra` of the folio).
        let (index, hit) = match view.marked_folio().filter(|_| self.folios) {
            Some((first, order)) => (first, Some(order)),
            None => (req.index, None),
        };
        let max = self.max;
        let expected = self.start + self.size - self.async_size;
        let on_mark = hit.map_or(index == expected, |o| index == expected >> o << o);
        if self.size > 0 && (on_mark || index == self.start + self.size) {
            // sequential-next
            self.start += self.size;
            self.size = next_window(self.size, max);
        } else {
            // lookahead-clueless: the cached run after the marker is the
            // old window's asynchronous part; ramp up from it.
            let start = next_miss(view, index + 1, max);
            if start - index > max || start >= view.file_pages() {
                return None;
            }
            self.start = start;
            self.size = next_window(start - index + req.count, max);
        }
        // In large folios the window's order is two above the last
        // window's, and it ends where that order aligns, unless that would
        // leave nothing; the order kept is then no more than the window
        // holds (6.18's `readahead:page_cache_ra_order` trace: a 16-page
        // window from page 55,950 ran to 55,964 at order 2; ramps of 56,
        // 208 and 352 pages ran 52, 176 and 128 at orders 4, 6 and 8).
        if self.folios {
            let order = (self.order + 2).min(MAX_ORDER);
            let aligned = (self.start + self.size) >> order << order;
            if aligned > self.start {
                self.size = aligned - self.start;
            }
            self.order = order.min(self.size.ilog2());
        }
        self.async_size = self.size;
        Some(self.readit(index, max))
    }

    fn readit(&mut self, index: u64, max: u64) -> Window {
        if index == self.start && self.size == self.async_size {
            let add = next_window(self.size, max);
            if self.size + add <= max {
                self.async_size = add;
                self.size += add;
            } else {
                self.size = max;
                self.async_size = max / 2;
            }
        }
        Window::forward(self.start, self.size, self.async_size)
    }
}

impl Policy for OnDemand {
    fn name(&self) -> &'static str {
        "ondemand"
    }

    fn max_pages(&self) -> u64 {
        self.max
    }
    fn set_max_pages(&mut self, pages: u64) {
        self.max = pages.clamp(1, crate::ra::MAX_WINDOW_PAGES);
    }

    fn decide(&mut self, req: Request, trigger: Trigger, view: &dyn CacheView) -> Option<Window> {
        if req.count == 0 {
            return None;
        }
        match trigger {
            // FMODE_RANDOM: the request as asked, no state, no marker.
            Trigger::Miss | Trigger::Request if self.random => {
                Some(Window::forward(req.index, req.count, 0))
            }
            Trigger::MarkerHit if self.random => None,
            Trigger::Miss | Trigger::Request => self.sync_readahead(req, view),
            Trigger::MarkerHit => self.async_readahead(req, view),
        }
    }

    fn finish(&mut self, req: Request) {
        self.prev_end = Some(req.end());
    }

    /// The kernel's state after a readahead is the window it read; where
    /// another window was read in this one's place (the floor of a
    /// speculation budget, [`super::budget`]), a forward one becomes the
    /// state, as if this policy had read it.
    fn admitted(&mut self, _decided: Window, admitted: Option<Window>) {
        if let Some(w) = admitted.filter(|w| w.shape == super::Shape::Forward) {
            self.start = w.start;
            self.size = w.size;
            self.async_size = w.async_size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ra::tests_support::{Sim, VecCache};
    use crate::ra::{new_policy, PolicyKind};

    /// 4 KiB sequential reads from offset 0 with the kernel's default 128 KiB
    /// maximum: the window grows 4, 8, 16, 32, then stays at 32, each new
    /// window issued when the reader reaches the previous one's marker.
    #[test]
    fn golden_sequential_4k_from_zero_max_128k() {
        let mut sim = Sim::new(PolicyKind::OnDemand, 32, 1000);
        for i in 0..200 {
            sim.read(i, 1);
        }
        let windows = sim.first_windows(usize::MAX);
        assert_eq!(
            &windows[..6],
            &[
                (0, 4, 3),
                (4, 8, 8),
                (12, 16, 16),
                (28, 32, 32),
                (60, 32, 32),
                (92, 32, 32)
            ]
        );
        // Triggered at the markers: pages 1, 4, 12, 28, 60.
        assert_eq!(&sim.trigger_pages()[..5], &[0, 1, 4, 12, 28]);
        // Only the first read missed.
        assert_eq!(sim.demand_ios(), 0);
    }

    /// The on-demand RFC's setup: 64 KiB records, 1 MiB maximum (256 pages).
    #[test]
    fn golden_sequential_64k_records_max_1m() {
        let mut sim = Sim::new(PolicyKind::OnDemand, 256, 100_000);
        for r in 0..100 {
            sim.read(r * 16, 16);
        }
        let sizes: Vec<(u64, u64, u64)> = sim.first_windows(5);
        // init: 16 pages rounded 16 <= 256/4 -> 32, async 16; then 64 (32 <
        // 256/16? no, <= 128: x2), 128, 256, 256.
        assert_eq!(
            sizes,
            vec![
                (0, 32, 16),
                (32, 64, 64),
                (96, 128, 128),
                (224, 256, 256),
                (480, 256, 256)
            ]
        );
    }

    #[test]
    fn random_reads_read_only_the_request_and_keep_state() {
        let mut p = OnDemand::new(RaConfig::with_max_pages(32));
        let cache = VecCache::new(10_000);
        let w = p.decide(Request::new(0, 1), Trigger::Miss, &cache).unwrap();
        assert_eq!((w.start, w.size), (0, 4));
        p.finish(Request::new(0, 1));
        let before = p.state();
        let w = p
            .decide(Request::new(5000, 2), Trigger::Miss, &cache)
            .unwrap();
        assert_eq!((w.start, w.size, w.async_size), (5000, 2, 0));
        assert_eq!(p.state(), before, "a random read must not touch the state");
    }

    #[test]
    fn a_file_advised_random_is_read_as_asked() {
        let mut cfg = RaConfig::with_max_pages(32);
        cfg.random_advice = true;
        let mut p = OnDemand::new(cfg);
        let cache = VecCache::new(10_000);
        // A sequential run from the start of the file: each request alone.
        for i in 0..8 {
            let req = Request::new(i * 4, 4);
            let w = p.decide(req, Trigger::Miss, &cache).unwrap();
            assert_eq!((w.start, w.size, w.async_size), (i * 4, 4, 0));
            p.finish(req);
        }
        assert_eq!(
            p.decide(Request::new(40, 4), Trigger::MarkerHit, &cache),
            None
        );
        // Without the advice the same run ramps up.
        let mut q = OnDemand::new(RaConfig::with_max_pages(32));
        let w = q.decide(Request::new(0, 4), Trigger::Miss, &cache).unwrap();
        assert!(w.size > 4, "{w:?}");
    }

    #[test]
    fn oversize_request_is_read_whole() {
        let mut p = OnDemand::new(RaConfig::with_max_pages(32));
        let cache = VecCache::new(10_000);
        let w = p
            .decide(Request::new(777, 100), Trigger::Miss, &cache)
            .unwrap();
        assert_eq!(w.start, 777);
        assert!(w.size >= 100);
        assert!(w.marker_page().unwrap() < w.end());
    }

    #[test]
    fn context_readahead_finds_a_stream_in_the_cache() {
        let mut p = OnDemand::new(RaConfig::with_max_pages(32));
        let mut cache = VecCache::new(10_000);
        // Pages 100..120 were read by some stream.
        for i in 100..120 {
            cache.present[i] = true;
        }
        p.finish(Request::new(9000, 1)); // the last read was elsewhere
        let w = p
            .decide(Request::new(120, 1), Trigger::Miss, &cache)
            .unwrap();
        // history 20 + request 1 = 21 pages, async 1.
        assert_eq!((w.start, w.size, w.async_size), (120, 21, 1));
        // No history: random.
        let w = p
            .decide(Request::new(5000, 1), Trigger::Miss, &cache)
            .unwrap();
        assert_eq!((w.size, w.async_size), (1, 0));
    }

    #[test]
    fn without_context_readahead_a_miss_after_cached_pages_is_read_as_is() {
        // The on-demand RFC's kernel (2.6.21): no context readahead.
        let mut p = OnDemand::new(RaConfig {
            context_readahead: false,
            ..RaConfig::with_max_pages(32)
        });
        let mut cache = VecCache::new(10_000);
        for i in 100..120 {
            cache.present[i] = true;
        }
        p.finish(Request::new(9000, 1));
        let w = p
            .decide(Request::new(120, 1), Trigger::Miss, &cache)
            .unwrap();
        assert_eq!((w.start, w.size, w.async_size), (120, 1, 0));
        // The state is left alone, as for any random read; a sequential
        // miss still starts a window.
        assert_eq!(p.state(), (0, 0, 0));
        p.finish(Request::new(120, 1));
        let w = p
            .decide(Request::new(121, 1), Trigger::Miss, &cache)
            .unwrap();
        assert_eq!((w.start, w.size), (121, 4));
    }

    /// A cache that keeps its marks on large folios: the folio hit is
    /// `marked`.
    struct Folios {
        cache: VecCache,
        marked: Option<(u64, u32)>,
    }

    impl CacheView for Folios {
        fn file_pages(&self) -> u64 {
            self.cache.file_pages()
        }
        fn is_present(&self, index: u64) -> bool {
            self.cache.is_present(index)
        }
        fn marked_folio(&self) -> Option<(u64, u32)> {
            self.marked
        }
    }

    /// The windows 6.18 read for a sqlite3 IN-list stepping over pages of
    /// a 469 MB table on ext4, from its `readahead:page_cache_ra_order`
    /// and `page_cache_async_ra` tracepoints: a read one page past the
    /// last (55,946 after 55,944) starts 4 pages; the hit on its mark
    /// (55,947, a small folio) reads from 55,950 in order-2 folios, ending
    /// at 55,964 where order 2 aligns (14 pages, not 16); a read at 55,965
    /// lands in the order-2 folio marked at 55,964, and the next window
    /// runs from 55,964 to 56,016 (52 pages, order 4); the next to 56,192
    /// (176, order 6); the next, hit at 56,019 in the order-4 folio at
    /// 56,016, to 56,320 (128 pages: 352 asked, cut where order 8 aligns).
    /// A hit a page past a one-page mark is the clueless case instead.
    #[test]
    fn in_large_folios_a_hit_anywhere_in_the_marked_folio_ramps_and_windows_end_aligned() {
        let mut p = OnDemand::new(RaConfig {
            large_folios: true,
            ..RaConfig::with_max_pages(2048)
        });
        let mut view = Folios {
            cache: VecCache::new(114_480),
            marked: None,
        };
        p.finish(Request::new(55_944, 1));
        let w = p
            .decide(Request::new(55_946, 1), Trigger::Miss, &view)
            .unwrap();
        assert_eq!((w.start, w.size, w.async_size), (55_946, 4, 3));
        p.finish(Request::new(55_946, 1));
        // Each read, the folio whose mark it hit, and the window after.
        let steps = [
            (55_947, (55_947, 0), (55_950, 14)),
            (55_950, (55_950, 1), (55_964, 52)),
            (55_965, (55_964, 2), (56_016, 176)),
            (56_019, (56_016, 4), (56_192, 128)),
        ];
        let mut read = (w.start, w.size);
        let mut last = w;
        for (at, folio, window) in steps {
            for i in read.0..read.0 + read.1 {
                view.cache.present[i as usize] = true;
            }
            view.marked = Some(folio);
            last = p
                .decide(Request::new(at, 1), Trigger::MarkerHit, &view)
                .unwrap();
            assert_eq!((last.start, last.size), window, "hit at {at}");
            assert_eq!(last.async_size, last.size);
            p.finish(Request::new(at, 1));
            read = window;
        }
        let w = last;
        // Without large folios the same hit, a page past a one-page mark,
        // is the clueless case: from the next missing page, 4 × the 52
        // pages it skipped, no alignment.
        let mut q = OnDemand::new(RaConfig::with_max_pages(2048));
        q.admitted(w, Some(Window::forward(55_964, 52, 52)));
        for i in 56_016..56_192 {
            view.cache.present[i] = false;
        }
        let w = q
            .decide(Request::new(55_965, 1), Trigger::MarkerHit, &view.cache)
            .unwrap();
        assert_eq!((w.start, w.size), (56_016, 208));
    }

    #[test]
    fn clueless_marker_hit_ramps_up_from_the_cached_run() {
        let mut p = OnDemand::new(RaConfig::with_max_pages(64));
        let mut cache = VecCache::new(10_000);
        // A window [500, 516) whose marker is at 500 but the state points
        // elsewhere (another stream moved it).
        for i in 500..516 {
            cache.present[i] = true;
        }
        let w = p
            .decide(Request::new(500, 1), Trigger::MarkerHit, &cache)
            .unwrap();
        // next miss at 516: old async 16 + 1 = 17 -> x2 = 34.
        assert_eq!((w.start, w.size, w.async_size), (516, 34, 34));
    }

    #[test]
    fn policy_by_name() {
        assert_eq!(
            new_policy(PolicyKind::OnDemand, RaConfig::default()).name(),
            "ondemand"
        );
    }
}
