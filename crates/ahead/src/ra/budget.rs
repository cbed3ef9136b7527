//! One speculation budget per file: the bound every readahead rule of
//! ahead's is held to, whatever the rule.
//!
//! # The idea
//!
//! ahead's rules (backward and strided streams, irregular strides read
//! through, sweeps, dense regions, interleaved forward streams, the
//! context readahead it leaves on) each keep a record of their own
//! ([`super::accuracy`]) by which they decide how bold to be. Those records
//! are heuristics; this budget is the bound. [`Budgeted`] wraps a policy
//! and stands between it and the engine at the one place every window
//! passes ([`super::drive`] submits what `decide` returns), so no rule can
//! go around it:
//!
//! * **Spent.** A window's *speculative pages* are the pages it makes the
//!   engine read beyond the request that caused it: pages neither in the
//!   request, nor present, nor already speculated on. For a strided window
//!   that the engine reads whole, gaps included (hints,
//!   [`RaConfig::read_through_gap`]), the gaps count too.
//! * **Earned.** A later request that takes a speculative page earns it
//!   back, once per page ([`Budget::credit`]); so does a gap of a few pages
//!   read through below it ([`Budget::gap_credit`]: reading it cost less
//!   than the request it saved).
//! * **Bounded.** A window is cut, in the reader's direction, to what the
//!   budget has left: speculative pages not (yet) used never exceed
//!   [`WASTE_PER_USE`] times the speculative pages used, plus `c`
//!   ([`CREDIT_PAGES`], or a quarter of the largest window where that is
//!   more). Pages not yet used count as wasted until a request takes them,
//!   so the bound holds after every request, not only in the long run:
//!   `charged − used ≤ k · (used + floor used) + c`.
//! * **The kernel's readahead is the floor.** Beside the policy runs the
//!   kernel's own, [`OnDemand`], asked at every decision what it would read
//!   (finding only its own markers, and following the windows actually
//!   read, as the kernel's state follows its readahead). Pages of its
//!   window are not charged; where the budget cut ahead's window to fewer
//!   pages ahead than the kernel's, the kernel's window is read instead.
//!   So with an empty budget a file reads as `ondemand` would, and a file
//!   read as the kernel reads it earns (its pages used are speculative
//!   pages used) what ahead's own rules may then spend.
//!
//! An engine that only sends hints to a kernel that reads ahead by itself
//! (`ahead run`, Buffered mode, [`RaConfig::hints`]) has no floor: the
//! kernel under it is the floor, and every page it hints is charged.

use std::collections::BTreeMap;

use super::ondemand::OnDemand;
use super::{
    CacheView, Feedback, Policy, RaConfig, Request, Shape, Trigger, Window, DEFAULT_MAX_PAGES,
};

/// `k` of the bound, as (numerator, denominator): one wasted page for each
/// page used. Where a page read for nothing costs the device what a page
/// read ahead saves the reader (one page of bandwidth on a bandwidth-bound
/// device, one request on an IOPS-bound one when each is a request of its
/// own), speculation at this rate breaks even; the per-rule records hold a
/// rule at the same ratio ([`super::accuracy::ACCURACY_FLOOR`], one half
/// used), and `ahead run --stats` reports it as `accuracy`.
pub const WASTE_PER_USE: (u64, u64) = (1, 1);

/// The least `c` of the bound, the pages a file may speculate on before
/// any of it has been used: 64, two of the kernel's default windows (128
/// KiB each, [`DEFAULT_MAX_PAGES`]). A rule needs one window of evidence
/// before its record judges it ([`super::accuracy::EVIDENCE_PAGES`]), and
/// a stream whose first window is used earns the next: under this credit a
/// backward reader's windows double each time it reads one, as the
/// kernel's ramp does, until they reach the maximum.
pub const CREDIT_PAGES: u64 = 2 * DEFAULT_MAX_PAGES;

/// Where the policy's largest window is larger, `c` is this share of it
/// (a quarter): an engine configured for 64 MiB windows (objects) starts a
/// stream with 4 MiB GETs and ramps through 16 MiB, so a credit of 16 MiB
/// lets its first windows go out whole, and a file that wastes it has
/// wasted a quarter of one window.
pub const CREDIT_WINDOW_SHARE: u64 = 4;

/// In a cache whose capacity the engine knows, a window on the kernel's
/// floor holds at most this share of it (one sixteenth): the share each of
/// eight interleaved streams keeps for its two windows in ahead's policy
/// (`share_max`), which took eight interleaved readers of an object from
/// 2.45 times the bytes they used to 1.06. `ondemand` sizes its windows
/// for a cache as large as memory.
pub const FLOOR_CACHE_SHARE: u64 = 16;

/// The most ranges of speculative pages a budget remembers for credit;
/// past it the farthest from the reader are forgotten (they can no longer
/// be earned back, so the bound only tightens): 65,536, a few megabytes of
/// map at most. With 4,096, a backward scan of a table of 8 KiB rows (its
/// windows broken into short ranges by the overflow pages read before
/// them) lost the credit of a third of the pages it read.
pub const MAX_RANGES: usize = 1 << 16;

/// Pages as disjoint, non-adjacent `start → end` ranges.
#[derive(Clone, Debug, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether page `p` is in a range.
    fn has(&self, p: u64) -> bool {
        self.0
            .range(..=p)
            .next_back()
            .is_some_and(|(_, &end)| p < end)
    }

    /// Adds page `p` (not in a range), merged with its neighbours. Past
    /// [`MAX_RANGES`] the range farthest from `p` is dropped (the reader's
    /// next pages lie near what it reads now, below it for a backward
    /// reader).
    fn add(&mut self, p: u64) {
        let mut start = p;
        let mut end = p + 1;
        if let Some((&s, &e)) = self.0.range(..p).next_back() {
            if e == p {
                start = s;
            }
        }
        if let Some(e) = self.0.remove(&(p + 1)) {
            end = e;
        }
        self.0.insert(start, end);
        if self.0.len() > MAX_RANGES {
            let low = self.0.first_key_value().map_or(0, |(&s, _)| p - s.min(p));
            let high = self.0.last_key_value().map_or(0, |(&s, _)| s.max(p) - p);
            if low >= high {
                self.0.pop_first();
            } else {
                self.0.pop_last();
            }
        }
    }

    /// Removes `[a, b)`; returns how many pages were there.
    fn take(&mut self, a: u64, b: u64) -> u64 {
        let mut taken = 0;
        // The last range starting before `b`, while it overlaps [a, b).
        while let Some((&s, &e)) = self.0.range(..b).next_back() {
            if e <= a || a >= b {
                break;
            }
            self.0.remove(&s);
            taken += e.min(b) - s.max(a);
            if e > b {
                self.0.insert(b, e);
            }
            if s < a {
                self.0.insert(s, a);
                break;
            }
        }
        taken
    }

    /// Takes `req`'s pages and, if it took any, the gap of at most `gap`
    /// pages between `after` (where the last request that took pages
    /// ended) and `req`: pages read through between two that the reader
    /// took.
    fn take_with_gap(&mut self, req: Request, gap: u64, after: u64) -> u64 {
        let mut taken = self.take(req.index, req.end());
        if taken > 0 && after < req.index && req.index - after <= gap {
            taken += self.take(after, req.index);
        }
        taken
    }
}

/// A file's speculation budget: what was charged, what was earned back,
/// and which speculative pages a request may still take.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Charged pages not yet used.
    charged_out: Ranges,
    /// Pages read on the kernel's floor not yet used.
    floor_out: Ranges,
    /// Speculative pages charged, in all.
    charged: u64,
    /// Of those, pages a request took.
    used: u64,
    /// Pages read ahead on the kernel's floor, uncharged.
    floor: u64,
    /// Of those, pages a request took.
    floor_used: u64,
    /// Strided windows whose gaps are at most this many pages are read
    /// whole ([`RaConfig::read_through_gap`]).
    read_through_gap: u64,
    /// See [`Budget::gap_credit`].
    gap_credit: u64,
    /// `c` of the bound ([`Budget::credit_pages`]).
    credit: u64,
    /// Where the last request that took speculative pages ended.
    taken_end: u64,
}

impl Budget {
    /// A fresh budget for a policy configured as `config`:
    /// [`CREDIT_PAGES`] to spend.
    pub fn new(config: &RaConfig) -> Budget {
        Budget {
            charged_out: Ranges::default(),
            floor_out: Ranges::default(),
            charged: 0,
            used: 0,
            floor: 0,
            floor_used: 0,
            read_through_gap: config.read_through_gap,
            credit: CREDIT_PAGES.max(config.max_pages / CREDIT_WINDOW_SHARE),
            taken_end: 0,
            gap_credit: if config.read_through_gap > 0 {
                config.read_through_gap
            } else {
                super::ahead::MERGE_GAP
            },
        }
    }

    /// `c` of the bound: [`CREDIT_PAGES`], or a share of the policy's
    /// largest window ([`CREDIT_WINDOW_SHARE`]) where that is more.
    pub fn credit_pages(&self) -> u64 {
        self.credit
    }

    /// Speculative pages charged so far.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Of those, pages that a request took.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Pages read ahead on the kernel's floor (what `ondemand` would have
    /// read at the same decision), which are not charged.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Of those, pages that a request took.
    pub fn floor_used(&self) -> u64 {
        self.floor_used
    }

    /// Speculative pages used, charged or on the floor: what earns.
    fn earned(&self) -> u64 {
        self.used + self.floor_used
    }

    /// Pages that may still be charged:
    /// `k · (used + floor used) + c − (charged − used)`.
    pub fn left(&self) -> u64 {
        let (num, den) = WASTE_PER_USE;
        (self.earned() * num / den + self.credit).saturating_sub(self.charged - self.used)
    }

    /// The bound: pages charged and not used are at most `k` times the
    /// speculative pages used (charged or on the floor), plus `c`. Holds
    /// after every call; the property tests check it.
    pub fn holds(&self) -> bool {
        let (num, den) = WASTE_PER_USE;
        (self.charged - self.used) * den <= self.earned() * num + self.credit * den
    }

    /// Whether speculative pages are out that a request may take.
    pub fn outstanding(&self) -> bool {
        !self.charged_out.is_empty() || !self.floor_out.is_empty()
    }

    /// Credits the speculative pages in `req`, each once, and, if it took
    /// some, the gap of at most [`Budget::gap_credit`] pages between it and
    /// the last request that took some: read through between two pages the
    /// reader took, they cost less than the request they saved (a stride
    /// read whole), as the pages a skipping reader passes over in one of
    /// the kernel's windows do.
    pub fn credit(&mut self, req: Request) {
        if !self.outstanding() {
            return;
        }
        let (gap, after) = (self.gap_credit, self.taken_end);
        let charged = self.charged_out.take_with_gap(req, gap, after);
        let floor = self.floor_out.take_with_gap(req, gap, after);
        if charged + floor > 0 {
            self.taken_end = req.end();
        }
        self.used += charged;
        self.floor_used += floor;
    }

    /// The widest gap below a request that its use credits: the engine's
    /// read-through gap where it reads strided windows whole (hints), else
    /// the widest gap ahead's stride rules read through on this device
    /// (from its costs, [`super::DeviceCost`]; [`super::ahead::MERGE_GAP`]
    /// where they are unknown).
    pub fn gap_credit(&self) -> u64 {
        self.gap_credit
    }

    /// Forgets speculative page `index` (it was evicted unused): it stays
    /// charged and can no longer be earned back.
    pub fn forget(&mut self, index: u64) {
        self.charged_out.take(index, index + 1);
        self.floor_out.take(index, index + 1);
    }

    /// Admits `window`, decided for `req`, where the kernel's `ondemand`
    /// would have read `floor` at the same decision: cut, in the reader's
    /// direction, to the speculative pages the budget has left (pages of
    /// `floor` are free), and charged for them. Where the budget cut it to
    /// fewer pages ahead than `floor` reads, `floor` is read instead.
    /// `None` if neither reads anything.
    pub fn admit(
        &mut self,
        window: Option<Window>,
        floor: Option<Window>,
        req: Request,
        view: &dyn CacheView,
    ) -> Option<Window> {
        if self.read_through_gap == 0 {
            self.gap_credit = super::ahead::widest_gap_read_through(view);
        }
        let pages = view.file_pages();
        let floor = floor
            .and_then(|f| f.clip(pages))
            .map(|f| match view.capacity_pages() {
                // ondemand sizes its windows for a cache as large as
                // memory; in a cache of known size the floor keeps the
                // share that ahead's streams keep.
                Some(c) if f.size > c / FLOOR_CACHE_SHARE => {
                    let size = (c / FLOOR_CACHE_SHARE).max(1);
                    Window {
                        size,
                        async_size: f.async_size.min(size),
                        ..f
                    }
                }
                _ => f,
            });
        let Some(window) = window.and_then(|w| w.clip(pages)) else {
            return self.read_floor(floor, req, view);
        };
        let on_floor = |p: u64| floor.is_some_and(|f| f.contains(p));
        let read_whole = matches!(window.shape,
            Shape::Strided { run, period } if period.saturating_sub(run) <= self.read_through_gap);
        // The pages the engine will read for nobody yet: the window's (or
        // its span's, read whole), less the request, what is present and
        // what is already speculated on.
        let ahead = |b: &Budget, p: u64| {
            (read_whole || window.contains(p))
                && (p < req.index || p >= req.end())
                && !view.is_present(p)
                && !b.charged_out.has(p)
                && !b.floor_out.has(p)
        };
        // Nearest the reader first (downwards for a backward window), until
        // the budget runs out at page `cut`.
        let (lo, hi) = (window.start, window.end());
        let backward = window.shape == Shape::Backward;
        let mut left = self.left();
        let (mut cut, mut kept) = (None, 0);
        for i in 0..hi - lo {
            let p = if backward { hi - 1 - i } else { lo + i };
            if !ahead(self, p) {
                continue;
            }
            if !on_floor(p) {
                if left == 0 {
                    cut = Some(p);
                    break;
                }
                left -= 1;
            }
            kept += 1;
        }
        let admitted = match cut {
            None => window,
            Some(p) => {
                if kept < floor.map_or(0, |f| reads_ahead(&f, req, view)) {
                    return self.read_floor(floor, req, view);
                }
                if backward {
                    if p + 1 == hi {
                        return None;
                    }
                    Window {
                        start: p + 1,
                        size: hi - (p + 1),
                        async_size: window.async_size.min(hi - (p + 1)),
                        ..window
                    }
                } else {
                    window.clip(p)?
                }
            }
        };
        for p in admitted.start..admitted.end() {
            if ahead(self, p) {
                if on_floor(p) {
                    self.floor += 1;
                    self.floor_out.add(p);
                } else {
                    self.charged += 1;
                    self.charged_out.add(p);
                }
            }
        }
        Some(admitted)
    }

    /// `floor` as it is, uncharged.
    fn read_floor(
        &mut self,
        floor: Option<Window>,
        req: Request,
        view: &dyn CacheView,
    ) -> Option<Window> {
        let f = floor?;
        for p in f.start..f.end() {
            if f.contains(p)
                && (p < req.index || p >= req.end())
                && !view.is_present(p)
                && !self.charged_out.has(p)
                && !self.floor_out.has(p)
            {
                self.floor += 1;
                self.floor_out.add(p);
            }
        }
        Some(f)
    }
}

/// The pages `w` reads ahead of `req` that are not present.
fn reads_ahead(w: &Window, req: Request, view: &dyn CacheView) -> u64 {
    (w.start..w.end())
        .filter(|&p| w.contains(p) && (p < req.index || p >= req.end()) && !view.is_present(p))
        .count() as u64
}

/// A policy held to a [`Budget`]: every window it decides is admitted by
/// the file's budget before the engine reads it. [`super::new_policy`]
/// wraps ahead's policy in it; `ondemand` and `legacy` are the baselines
/// and are not wrapped.
pub struct Budgeted<P> {
    inner: P,
    /// The kernel's `ondemand`, consulted at every decision for the floor;
    /// none for hints ([`RaConfig::hints`]), whose floor is the kernel
    /// under them.
    kernel: Option<OnDemand>,
    budget: Budget,
}

impl<P: Policy> Budgeted<P> {
    /// `inner` held to a fresh budget, over the floor of an `ondemand`
    /// configured alike.
    pub fn new(inner: P, config: &RaConfig) -> Budgeted<P> {
        Budgeted {
            inner,
            kernel: (!config.hints).then(|| OnDemand::new(*config)),
            budget: Budget::new(config),
        }
    }

    /// The budget.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }
}

impl<P: Policy> Policy for Budgeted<P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn max_pages(&self) -> u64 {
        self.inner.max_pages()
    }
    fn calls(&self) -> super::Calls {
        self.inner.calls()
    }
    fn demand_fill(&self) -> super::DemandFill {
        self.inner.demand_fill()
    }
    fn begin(&mut self, req: Request) {
        self.budget.credit(req);
        if let Some(k) = &mut self.kernel {
            k.begin(req);
        }
        self.inner.begin(req);
    }
    fn decide(&mut self, req: Request, trigger: Trigger, view: &dyn CacheView) -> Option<Window> {
        // The kernel would find only its own markers.
        let floor = self.kernel.as_mut().and_then(|k| match trigger {
            Trigger::MarkerHit if !k.marks(req.index) => None,
            _ => k.decide(req, trigger, view),
        });
        let window = self.inner.decide(req, trigger, view);
        let admitted = self.budget.admit(window, floor, req, view);
        if let Some(w) = window {
            self.inner.admitted(w, admitted);
        }
        if let (Some(k), Some(f)) = (&mut self.kernel, floor) {
            k.admitted(f, admitted);
        }
        admitted
    }
    fn finish(&mut self, req: Request) {
        if let Some(k) = &mut self.kernel {
            k.finish(req);
        }
        self.inner.finish(req);
    }
    fn feedback(&mut self, event: Feedback) {
        if let Feedback::EvictedUnused { index } = event {
            self.budget.forget(index);
        }
        if let Some(k) = &mut self.kernel {
            k.feedback(event);
        }
        self.inner.feedback(event);
    }
    fn outstanding(&self) -> bool {
        self.budget.outstanding() || self.inner.outstanding()
    }
    fn describe(&self) -> Vec<String> {
        let mut out = self.inner.describe();
        let b = &self.budget;
        out.push(format!(
            "speculation budget: {} pages read ahead beyond the kernel's rules ({} on them), {} of them used, {} left",
            b.charged(),
            b.floor(),
            b.used(),
            b.left()
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ra::tests_support::VecCache;

    fn cfg(read_through_gap: u64) -> RaConfig {
        RaConfig {
            read_through_gap,
            ..RaConfig::default()
        }
    }

    fn view(pages: usize) -> VecCache {
        VecCache::new(pages)
    }

    #[test]
    fn ranges_merge_split_and_credit_each_page_once() {
        let mut b = Ranges::default();
        for p in [5, 6, 7, 9, 8, 20] {
            b.add(p);
        }
        assert_eq!(b.0.len(), 2, "{:?}", b.0);
        assert_eq!(b.take(6, 8), 2);
        assert_eq!(b.take(6, 8), 0, "a page is earned once");
        assert!(b.has(5) && b.has(8) && b.has(9) && !b.has(6) && b.has(20));
        assert_eq!(b.take(0, 100), 4);
        assert!(b.is_empty());
    }

    /// A backward scan of 8 KiB rows under `ahead run` hinted a third less
    /// once the range map was full: it forgot the lowest ranges, the next
    /// ones a backward reader takes.
    #[test]
    fn a_full_range_map_forgets_what_lies_farthest_from_the_reader() {
        let mut b = Ranges::default();
        let n = MAX_RANGES as u64 + 100;
        // Single pages walking down, as a backward reader's fragmented
        // windows leave them.
        for k in (0..n).rev() {
            b.add(2 * k);
        }
        assert_eq!(b.0.len(), MAX_RANGES);
        assert!(
            b.has(0) && b.has(2),
            "the pages next to the reader are kept"
        );
        assert!(!b.has(2 * (n - 1)), "the farthest are forgotten");
        // And walking up, the other way.
        let mut b = Ranges::default();
        for k in 0..n {
            b.add(2 * k);
        }
        assert!(b.has(2 * (n - 1)) && !b.has(0));
    }

    #[test]
    fn a_short_gap_between_pages_used_is_credited_with_them() {
        let mut b = Ranges::default();
        for p in 100..140 {
            b.add(p);
        }
        // Read 1, skip 3, through the span: each gap lies between the last
        // page taken and this one.
        let used: u64 = (0..10)
            .map(|k| b.take_with_gap(Request::new(100 + 4 * k, 1), 16, 100 + 4 * k - 3))
            .sum();
        assert_eq!(used, 37, "all but the gap after the last page");
        // A page taken far above the last leaves the gap between alone.
        let mut b = Ranges::default();
        for p in 100..200 {
            b.add(p);
        }
        let used = b.take_with_gap(Request::new(100, 1), 16, 0)
            + b.take_with_gap(Request::new(150, 1), 16, 101);
        assert_eq!(used, 2);
        // So does a first page taken inside a span: the pages below it lie
        // between no two pages the reader took.
        let mut b = Budget::new(&cfg(0));
        let v = view(1000);
        let w = Window::forward(100, 40, 0);
        b.admit(Some(w), None, Request::new(99, 1), &v);
        b.credit(Request::new(110, 1));
        assert_eq!(b.used(), 1);
        b.credit(Request::new(114, 1));
        assert_eq!(b.used(), 5, "the gap between two pages taken");
    }

    #[test]
    fn a_window_is_cut_to_what_is_left_in_the_readers_direction() {
        let v = view(10_000);
        let mut b = Budget::new(&cfg(0));
        let w = Window {
            start: 4000,
            size: 1001,
            async_size: 500,
            shape: Shape::Backward,
        };
        let got = b.admit(Some(w), None, Request::new(5000, 1), &v).unwrap();
        assert_eq!(got.end(), 5001, "the pages nearest the reader are kept");
        assert_eq!(got.size, CREDIT_PAGES + 1);
        assert_eq!(b.left(), 0);
        assert!(b.holds());
        // Nothing more may be speculated on until some of it is used.
        let next = Window::forward(7000, 100, 50);
        assert_eq!(b.admit(Some(next), None, Request::new(6990, 1), &v), None);
        // A reader that takes what was read ahead earns twice its pages.
        b.credit(Request::new(4990, 10));
        assert_eq!(b.used(), 10);
        assert_eq!(b.left(), 20);
        assert!(b.holds());
    }

    #[test]
    fn the_kernels_window_is_free_and_read_when_the_budget_is_spent() {
        let v = view(100_000);
        let mut b = Budget::new(&cfg(0));
        // Spend the budget.
        let w = Window::forward(50_000, 1000, 0);
        b.admit(Some(w), None, Request::new(50_000, 1), &v);
        assert_eq!(b.left(), 0);
        // A window that the kernel's would cover is read whole, uncharged.
        let req = Request::new(0, 4);
        let kernel = Window::forward(0, 32, 28);
        let ours = Window::forward(0, 16, 12);
        assert_eq!(b.admit(Some(ours), Some(kernel), req, &v), Some(ours));
        assert_eq!(b.charged(), CREDIT_PAGES);
        assert_eq!(b.floor(), 12);
        // One that reads elsewhere gives way to the kernel's.
        let back = Window {
            start: 100,
            size: 200,
            async_size: 100,
            shape: Shape::Backward,
        };
        let req = Request::new(296, 4);
        let kernel = Window::forward(296, 16, 12);
        assert_eq!(b.admit(Some(back), Some(kernel), req, &v), Some(kernel));
        assert_eq!(b.charged(), CREDIT_PAGES);
        assert!(b.holds());
    }

    /// The floor through the policy: a sequential reader in a file whose
    /// budget went to waste still gets the kernel's windows, all of them.
    #[test]
    fn a_sequential_reader_keeps_the_kernels_windows_with_an_empty_budget() {
        use crate::ra::{ahead::StreamTable, drive, ondemand::OnDemand, SparseTable};
        let config = RaConfig::with_max_pages(64);
        let run = |policy: &mut dyn Policy| {
            let mut t = SparseTable::new(1 << 20);
            // Random reads far apart, then a scan.
            for k in 0..200u64 {
                drive(policy, &mut t, Request::new(500_000 + k * 997 % 100_000, 1));
            }
            t.windows.clear();
            for k in 0..4096u64 {
                drive(policy, &mut t, Request::new(10_000 + k, 1));
            }
            t.windows.iter().map(|w| w.pages()).sum::<u64>()
        };
        let mut ours = Budgeted::new(StreamTable::new(config), &config);
        let mut kernel = OnDemand::new(config);
        assert!(run(&mut ours) >= run(&mut kernel));
        assert!(ours.budget().holds());
    }

    #[test]
    fn the_gaps_of_a_stride_read_whole_are_charged() {
        let v = view(10_000);
        let w = Window {
            start: 100,
            size: 3 * 40 + 1,
            async_size: 0,
            shape: Shape::Strided { run: 1, period: 3 },
        };
        let req = Request::new(100, 1);
        let mut runs_only = Budget::new(&cfg(0));
        let a = runs_only.admit(Some(w), None, req, &v).unwrap();
        assert_eq!(runs_only.charged(), 40, "its runs beyond the request");
        assert_eq!(a, w);
        let mut whole = Budget::new(&cfg(2));
        let b = whole.admit(Some(w), None, req, &v).unwrap();
        let charged = whole.charged();
        assert!(
            charged <= CREDIT_PAGES && charged > CREDIT_PAGES - 3,
            "gaps and runs: {charged}"
        );
        assert!(b.size < w.size && b.size > CREDIT_PAGES / 3, "{b:?}");
    }

    /// A page table that counts, independently of the budget, the pages
    /// read ahead and how many of them a later request took.
    struct Counting {
        table: crate::ra::SparseTable,
        unused: std::collections::HashSet<u64>,
        read_ahead: u64,
        taken: u64,
        /// The request being served: its own pages are not read ahead.
        current: Request,
        /// Strided windows with gaps up to this are read whole.
        gap: u64,
    }

    impl CacheView for Counting {
        fn file_pages(&self) -> u64 {
            self.table.file_pages()
        }
        fn is_present(&self, index: u64) -> bool {
            self.table.is_present(index)
        }
    }

    impl crate::ra::PageTable for Counting {
        fn lookup(&self, index: u64) -> crate::ra::Lookup {
            self.table.lookup(index)
        }
        fn clear_marker(&mut self, index: u64) {
            self.table.clear_marker(index)
        }
        fn submit_readahead(&mut self, w: &Window) {
            // An engine that reads a strided window whole, gaps included.
            let whole = matches!(w.shape, Shape::Strided { run, period } if period.saturating_sub(run) <= self.gap);
            let w = &if whole {
                Window {
                    shape: Shape::Forward,
                    ..*w
                }
            } else {
                *w
            };
            w.for_each_run(|s, n| {
                for p in s..s + n {
                    let own = p >= self.current.index && p < self.current.end();
                    if !own && !self.table.present.contains(&p) {
                        self.read_ahead += 1;
                        self.unused.insert(p);
                    }
                }
            });
            self.table.submit_readahead(w);
        }
        fn submit_demand(&mut self, index: u64, count: u64) {
            self.table.submit_demand(index, count)
        }
    }

    /// Requests of every shape the policy knows: runs forward, backward,
    /// strided with jitter, at random.
    fn requests() -> impl proptest::strategy::Strategy<Value = Vec<(u64, u64)>> {
        use proptest::prelude::*;
        prop::collection::vec(
            (0u64..60_000, 1u64..40, -40i64..60, 0u64..3, 1usize..60),
            1..10,
        )
        .prop_map(|runs| {
            let mut out: Vec<(u64, u64)> = Vec::new();
            for (start, count, step, jitter, n) in runs {
                let mut at = start as i64;
                for k in 0..n {
                    let index = at.max(0) as u64 + (k as u64 % (jitter + 1));
                    out.push((index, count));
                    at += step;
                }
            }
            out
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// The budget's inequality after every request, and the same
        /// bound counted from outside: pages read ahead that no request
        /// took are at most `k` (plus the gap credit) times those taken,
        /// plus `c`.
        #[test]
        fn speculation_never_exceeds_the_budget(reqs in requests(), max in 4u64..512, gap in 0u64..20, hints: bool) {
            use crate::ra::{ahead::StreamTable, drive, RaConfig};
            let config = RaConfig { read_through_gap: gap, hints, ..RaConfig::with_max_pages(max) };
            let mut policy = Budgeted::new(StreamTable::new(config), &config);
            let mut t = Counting {
                table: crate::ra::SparseTable::new(70_000),
                unused: Default::default(),
                read_ahead: 0,
                taken: 0,
                current: Request::new(0, 0),
                gap,
            };
            for (index, count) in reqs {
                for p in index..index + count {
                    if t.unused.remove(&p) {
                        t.taken += 1;
                    }
                }
                let req = Request::new(index, count);
                t.current = req;
                drive(&mut policy, &mut t, req);
                let b = policy.budget();
                proptest::prop_assert!(b.holds(), "{:?}", b);
                let (num, den) = WASTE_PER_USE;
                let wasted = t.read_ahead - t.taken;
                // The gap credit gives each request that takes a page at
                // most `g` pages below it, so the budget's `used` is at
                // most (1 + g) pages taken, and what it bounds,
                // `charged − used ≤ k·used + c`, gives
                // `read ahead − taken ≤ (k(1 + g) + g)·taken + c`.
                let g = b.gap_credit();
                // Pages on the kernel's floor are read as `ondemand` would
                // read them, outside the budget (and earn).
                let bound = (num.div_ceil(den) * (1 + g) + g) * t.taken + b.credit_pages() + b.floor();
                proptest::prop_assert!(
                    wasted <= bound,
                    "read ahead {} taken {} (budget {:?})", t.read_ahead, t.taken, b
                );
            }
        }
    }
}
