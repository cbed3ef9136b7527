//! Walking a window's speculative pages a range at a time.
//!
//! The budget asks which pages of a window would be speculation not yet
//! accounted for: pages the window reads, outside the request, not
//! present, and in none of the ranges already charged, read on the floor
//! or foreseen. Asked of every page of every window, that cost `ahead run`'s
//! helper several times the CPU of the program it served: a cached sqlite3
//! IN-list of 3,003 `pread`s took 9 ms of the program's CPU and 75–80 ms
//! of the helper's (`--stats`), 90% of it in `Budget::foresee` asking
//! three maps about pages each decision had already recorded (`perf
//! record --call-graph dwarf`, 10 runs); 3.8–4.3 ms with the walk. The
//! walk answers the range questions by jumping:
//! past a stride's gap, past the request, past a whole range of pages
//! already accounted for. The budget then counted and charged what passed
//! page by page, asking the cache of each: in a cold 128 KiB scan through
//! Direct mode that was 12.7% of the process's instructions (issue 36).
//! Now the walk hands out runs of pages that all pass ([`Spec::run_up`]),
//! the cache answers a run at a time ([`CacheView::presence_up`], a probe
//! per chunk of the engine's page table), and the budget counts and
//! charges a run, in pieces on and off the kernel's floor, as one range.
//! The pages visited, and their order, are the ones the page-by-page test
//! selects (`walk_visits_what_the_page_test_selects`, runs included).

use super::Ranges;
use crate::ra::{CacheView, Request, Shape, Window};

/// What a walk selects besides the cache: pages of `window` (of its whole
/// span, where `whole`: a stride read through its gaps), outside `req`.
#[derive(Clone, Copy)]
pub(super) struct Spec<'a> {
    pub(super) window: &'a Window,
    pub(super) whole: bool,
    pub(super) req: Request,
}

impl Spec<'_> {
    /// `p` if it passes the window, the request and `ranges`; else a page
    /// above `p` below which none passes.
    fn skip_up(&self, p: u64, ranges: &[&Ranges]) -> u64 {
        let w = self.window;
        if !self.whole {
            if p < w.start {
                return w.start;
            }
            if p >= w.end() {
                return u64::MAX;
            }
            if let Shape::Strided { run, period } = w.shape {
                if run == 0 || period == 0 {
                    return u64::MAX;
                }
                let off = (p - w.start) % period;
                if off >= run {
                    return p.saturating_add(period - off);
                }
            }
        }
        if self.req.index <= p && p < self.req.end() {
            return self.req.end();
        }
        for r in ranges {
            if let Some((_, end)) = r.holding(p) {
                return end;
            }
        }
        p
    }

    /// `Some(p)` if `p` passes the window, the request and `ranges`; else
    /// `Some` of a page below `p` above which none passes, or `None` if
    /// none at or below `p` does.
    fn skip_down(&self, p: u64, ranges: &[&Ranges]) -> Option<u64> {
        let w = self.window;
        if !self.whole {
            if p < w.start {
                return None;
            }
            if p >= w.end() {
                return w.end().checked_sub(1);
            }
            if let Shape::Strided { run, period } = w.shape {
                if run == 0 || period == 0 {
                    return None;
                }
                let off = (p - w.start) % period;
                if off >= run {
                    // The last page of this period's run.
                    return Some(p - off + run - 1);
                }
            }
        }
        if self.req.index <= p && p < self.req.end() {
            return self.req.index.checked_sub(1);
        }
        for r in ranges {
            if let Some((start, _)) = r.holding(p) {
                return start.checked_sub(1);
            }
        }
        Some(p)
    }

    /// The first page of `[p, hi)` that passes and is not present.
    pub(super) fn next_up(
        &self,
        mut p: u64,
        hi: u64,
        ranges: &[&Ranges],
        view: &dyn CacheView,
    ) -> Option<u64> {
        while p < hi {
            let q = self.skip_up(p, ranges);
            if q != p {
                p = q;
            } else if view.is_present(p) {
                p = view.presence_up(p, hi);
            } else {
                return Some(p);
            }
        }
        None
    }

    /// The first run of pages of `[p, hi)` that pass and are not present,
    /// as `(start, end)`: `start` is [`Spec::next_up`]'s page, and every
    /// page of the run passes, so a caller counts it whole. A run ends
    /// where the window's (or a stride's) pages end, at the request, at a
    /// range of `ranges` or at a present page, or at `hi`; and after at
    /// most `max` pages (at least one), where a caller needs no more: the
    /// cache is asked of each page the run holds.
    pub(super) fn run_up(
        &self,
        p: u64,
        hi: u64,
        ranges: &[&Ranges],
        view: &dyn CacheView,
        max: u64,
    ) -> Option<(u64, u64)> {
        let a = self.next_up(p, hi, ranges, view)?;
        let w = self.window;
        let mut end = hi.min(a.saturating_add(max.max(1)));
        if !self.whole {
            end = end.min(w.end());
            if let Shape::Strided { run, period } = w.shape {
                end = end.min(a - (a - w.start) % period + run);
            }
        }
        if a < self.req.index {
            end = end.min(self.req.index);
        }
        for r in ranges {
            if let Some(s) = r.first_from(a) {
                end = end.min(s);
            }
        }
        Some((a, view.presence_up(a, end)))
    }

    /// The last run of pages of `[lo, p]` that pass and are not present,
    /// as `(start, end)`, `end - 1` being [`Spec::next_down`]'s page: as
    /// [`Spec::run_up`], downwards.
    pub(super) fn run_down(
        &self,
        p: u64,
        lo: u64,
        ranges: &[&Ranges],
        view: &dyn CacheView,
        max: u64,
    ) -> Option<(u64, u64)> {
        let b = self.next_down(p, lo, ranges, view)?;
        let w = self.window;
        let mut start = lo.max((b + 1).saturating_sub(max.max(1)));
        if !self.whole {
            start = start.max(w.start);
            if let Shape::Strided { period, .. } = w.shape {
                start = start.max(b - (b - w.start) % period);
            }
        }
        if b >= self.req.end() {
            start = start.max(self.req.end());
        }
        for r in ranges {
            if let Some(e) = r.last_end_to(b) {
                start = start.max(e);
            }
        }
        Some((view.presence_down(start, b), b + 1))
    }

    /// The last page of `[lo, p]` that passes and is not present.
    pub(super) fn next_down(
        &self,
        mut p: u64,
        lo: u64,
        ranges: &[&Ranges],
        view: &dyn CacheView,
    ) -> Option<u64> {
        while p >= lo {
            let q = self.skip_down(p, ranges)?;
            if q != p {
                p = q;
            } else if view.is_present(p) {
                p = view.presence_down(lo, p).checked_sub(1)?;
            } else {
                return Some(p);
            }
        }
        None
    }
}

/// Whether `w` reads page `p`, and the first page above `p` where that
/// changes (`u64::MAX` if it never does).
fn holds_up(w: Option<&Window>, p: u64) -> (bool, u64) {
    let Some(w) = w else {
        return (false, u64::MAX);
    };
    if p < w.start {
        return (false, w.start);
    }
    if p >= w.end() {
        return (false, u64::MAX);
    }
    match w.shape {
        Shape::Strided { run, period } if period > 0 => {
            let off = (p - w.start) % period;
            if off < run {
                (true, (p - off + run).min(w.end()))
            } else {
                (false, (p - off + period).min(w.end()))
            }
        }
        Shape::Strided { .. } => (false, u64::MAX),
        Shape::Forward | Shape::Backward => (true, w.end()),
    }
}

/// Whether `w` reads page `p`, and the lowest page `q` such that it reads
/// every page of `[q, p]` or none.
fn holds_down(w: Option<&Window>, p: u64) -> (bool, u64) {
    let Some(w) = w else {
        return (false, 0);
    };
    if p < w.start {
        return (false, 0);
    }
    if p >= w.end() {
        return (false, w.end());
    }
    match w.shape {
        Shape::Strided { run, period } if period > 0 => {
            let off = (p - w.start) % period;
            if off < run {
                (true, p - off)
            } else {
                (false, p - off + run)
            }
        }
        Shape::Strided { .. } => (false, 0),
        Shape::Forward | Shape::Backward => (true, w.start),
    }
}

/// `[a, b)` cut where `w` starts or stops reading pages: the pieces as
/// `(start, end, w reads them)`, in the reader's order (from the top
/// down where `down`).
pub(super) fn pieces(
    w: Option<&Window>,
    a: u64,
    b: u64,
    down: bool,
) -> impl Iterator<Item = (u64, u64, bool)> + '_ {
    let (mut lo, mut hi) = (a, b);
    std::iter::from_fn(move || {
        if lo >= hi {
            return None;
        }
        if down {
            let (on, from) = holds_down(w, hi - 1);
            let s = from.max(lo);
            let piece = (s, hi, on);
            hi = s;
            Some(piece)
        } else {
            let (on, until) = holds_up(w, lo);
            let e = until.min(hi);
            let piece = (lo, e, on);
            lo = e;
            Some(piece)
        }
    })
}

/// The pages `w` reads ahead of `req` that are not present.
pub(super) fn reads_ahead(w: &Window, req: Request, view: &dyn CacheView) -> u64 {
    let spec = Spec {
        window: w,
        whole: false,
        req,
    };
    let (mut n, mut p) = (0, w.start);
    while let Some((a, b)) = spec.run_up(p, w.end(), &[], view, u64::MAX) {
        n += b - a;
        p = b;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ra::tests_support::VecCache;
    use proptest::prelude::*;

    fn ranges(pages: &[u64]) -> Ranges {
        let mut r = Ranges::default();
        for &p in pages {
            if !r.has(p) {
                r.add(p);
            }
        }
        r
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Up and down, the walk visits exactly the pages the page test
        /// selects, in order.
        #[test]
        fn walk_visits_what_the_page_test_selects(
            start in 0u64..40,
            size in 1u64..120,
            shape in 0u8..3,
            run in 1u64..5,
            gaps in 0u64..6,
            whole in any::<bool>(),
            req in (0u64..170, 1u64..12),
            present in proptest::collection::vec(0u64..170, 0..60),
            a in proptest::collection::vec(0u64..170, 0..60),
            b in proptest::collection::vec(0u64..170, 0..60),
            bounds in (0u64..170, 0u64..170),
            cap in prop_oneof![Just(u64::MAX), 0u64..8],
        ) {
            let shape = match shape {
                0 => Shape::Forward,
                1 => Shape::Backward,
                _ => Shape::Strided { run, period: run + gaps },
            };
            let window = Window { start, size, async_size: 0, shape };
            let req = Request::new(req.0, req.1);
            let mut view = VecCache::new(200);
            for &p in &present {
                view.present[p as usize] = true;
            }
            let (ra, rb) = (ranges(&a), ranges(&b));
            let (lo, hi) = (bounds.0.min(bounds.1), bounds.0.max(bounds.1));
            let selected = |p: u64| {
                (whole || window.contains(p))
                    && (p < req.index || p >= req.end())
                    && !view.is_present(p)
                    && !ra.has(p)
                    && !rb.has(p)
            };
            let want: Vec<u64> = (lo..hi).filter(|&p| selected(p)).collect();
            let spec = Spec { window: &window, whole, req };
            let rs = [&ra, &rb];
            let mut up = Vec::new();
            let mut p = lo;
            while let Some(q) = spec.next_up(p, hi, &rs, &view) {
                up.push(q);
                p = q + 1;
            }
            prop_assert_eq!(&up, &want);
            let mut down = Vec::new();
            let mut next = hi.checked_sub(1).and_then(|p| spec.next_down(p, lo, &rs, &view));
            while let Some(q) = next {
                down.push(q);
                next = q.checked_sub(1).and_then(|p| spec.next_down(p, lo, &rs, &view));
            }
            down.reverse();
            prop_assert_eq!(&down, &want);
            // The runs, up and down: each a stretch of consecutive selected
            // pages starting (up) or ending (down) at the walk's page, of at
            // most `cap` pages (at least one), and together the selected
            // pages, in order.
            let mut runs_up = Vec::new();
            let mut p = lo;
            while let Some((a, b)) = spec.run_up(p, hi, &rs, &view, cap) {
                prop_assert!(a < b && b <= hi && b - a <= cap.max(1));
                prop_assert_eq!(Some(a), spec.next_up(p, hi, &rs, &view));
                runs_up.extend(a..b);
                p = b;
            }
            prop_assert_eq!(&runs_up, &want);
            let mut runs_down = Vec::new();
            let mut next = hi.checked_sub(1);
            while let Some((a, b)) = next.and_then(|p| spec.run_down(p, lo, &rs, &view, cap)) {
                prop_assert!(a < b && lo <= a && b - a <= cap.max(1));
                prop_assert_eq!(Some(b - 1), next.and_then(|p| spec.next_down(p, lo, &rs, &view)));
                runs_down.extend((a..b).rev());
                next = a.checked_sub(1);
            }
            runs_down.reverse();
            prop_assert_eq!(&runs_down, &want);
            // The pieces of a run on and off another window: that window's
            // own page test, piece by piece, in both orders.
            let other = Window { start: bounds.0, size: size / 2 + 1, async_size: 0, shape };
            for down in [false, true] {
                let mut got = Vec::new();
                for (s, e, on) in pieces(Some(&other), lo, hi, down) {
                    prop_assert!(s < e);
                    let pages: Vec<u64> = if down { (s..e).rev().collect() } else { (s..e).collect() };
                    for q in pages {
                        prop_assert_eq!(on, other.contains(q), "page {}", q);
                        got.push(q);
                    }
                }
                if down {
                    got.reverse();
                }
                prop_assert_eq!(got, (lo..hi).collect::<Vec<_>>());
            }
        }
    }
}
