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
//! already accounted for. Only the cache is still asked page by page, for
//! the pages that pass the rest. The pages visited, and their order, are
//! the ones the page-by-page test selects (`walk_visits_what_the_page_test_selects`).

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
                p += 1;
            } else {
                return Some(p);
            }
        }
        None
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
                p = p.checked_sub(1)?;
            } else {
                return Some(p);
            }
        }
        None
    }
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
        }
    }
}
