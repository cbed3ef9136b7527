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
//!   back, once per page ([`Budget::credit`]); so does, where the engine
//!   reads its own windows, a gap of a few pages read through below it
//!   ([`Budget::gap_credit`]: reading it cost less than the request it
//!   saved). Hinted gaps earn nothing: only pages a request takes do.
//! * **Bounded.** A window is cut, in the reader's direction, to what the
//!   budget has left: speculative pages not (yet) used never exceed
//!   [`WASTE_PER_USE`] times the speculative pages used, plus `c`
//!   ([`CREDIT_PAGES`], or a quarter of the largest window where that is
//!   more, or for a far source [`FAR_CREDIT_ROUND_TRIPS`] of its round
//!   trips). Pages not yet used count as wasted until a request takes them,
//!   so the bound holds after every request, not only in the long run:
//!   `charged − used ≤ k · (used + floor used) + c`.
//! * **The kernel's readahead is the floor.** Beside the policy runs the
//!   kernel's own, [`OnDemand`](crate::ra::ondemand::OnDemand), asked at every decision what it would read
//!   (finding only its own markers, and following the windows actually
//!   read, as the kernel's state follows its readahead). Pages of its
//!   window are not charged; where the budget cut ahead's window to fewer
//!   pages ahead than the kernel's, or the policy decided nothing, the
//!   kernel's window is read instead.
//!   So with an empty budget a file reads as `ondemand` would, and a file
//!   read as the kernel reads it earns (its pages used are speculative
//!   pages used) what ahead's own rules may then spend.
//!
//! An engine that only sends hints to a kernel that reads ahead by itself
//! (`ahead run`, Buffered mode, [`RaConfig::hints`]) has no floor: the
//! kernel under it is the floor, and every page it hints is charged. Nor
//! does it start with a credit: a hint is sent only on evidence, pages the
//! policy *foresaw* (decided, but the budget did not let it read) that the
//! reader then read unaided (`HINT_EVIDENCE_PAGES`), each by a request
//! that continued one of the policy's streams (not one that fell into a
//! foreseen window by chance: `Policy::continues_stream`). So a pattern proves
//! itself at the kernel's pace before ahead speculates on it, and a file
//! whose reads only looked regular sends nothing. Meanwhile the policy is
//! not told that its windows were refused, so that what is judged is its
//! pattern and not the fallback it would take. Then the file's credit is
//! one of the kernel's windows (`HINT_CREDIT_PAGES`), and `k` is the
//! same as for reads ([`WASTE_PER_USE`]); but the credit is a start, not
//! a margin: pages hinted are at most `max((1 + k) · used, c)`, which is
//! within `k · used + c` and holds a file that hinted more than `c` pages
//! to at least half of them read. Windows the kernel under the
//! hints reads by itself (a forward stream's, on a sequential read) are
//! given back ([`Budget::refund`]): only what is hinted is weighed.

use super::{CacheView, RaConfig, Request, Shape, Window, DEFAULT_MAX_PAGES};
use walk::Spec;

/// `k` of the bound, as (numerator, denominator): one wasted page for each
/// page used. Where a page read for nothing costs the device what a page
/// read ahead saves the reader (one page of bandwidth on a bandwidth-bound
/// device, one request on an IOPS-bound one when each is a request of its
/// own), speculation at this rate breaks even; the per-rule records hold a
/// rule at the same ratio (`ACCURACY_FLOOR`, one half
/// used), and `ahead run --stats` reports it as `accuracy`. Hints are held
/// to it too: one half for them ramped a backward reader's hints so slowly
/// that a `tail -n` of 73,072 lines and two `order by ... desc limit`
/// queries ran 1.4–1.6× plain, against 0.9–1.0× with one.
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
pub(crate) const CREDIT_WINDOW_SHARE: u64 = 4;

/// For a source whose round trip is worth more than the kernel's default
/// window (`DeviceCost::latency_pages`: an object store), `c` is at least
/// this many round trips' worth: six (16.2 MB on `bench remote`'s `s3`
/// profile, where a round trip is 2.7 MB), so that several streams of one
/// file can each have a round trip in flight before their pages are used.
/// Eight interleaved readers of a 128 MiB object through `ahead mount`,
/// whose credit was a quarter of its 16 MiB window, waited on this bound
/// while their first windows went out one after another: 1.12–1.13 s
/// (0.50 of the oracle), against 0.95 s with eight round trips' credit
/// (two alternated runs of 3), and 0.91–0.95 s with six. Six is about
/// what an engine with 64 MiB windows already had (a quarter of one), so
/// `bench remote`'s patterns, measured under that, keep their credit:
/// with six, two alternated runs of 3 put its stride at 140–189 MB/s
/// against 139–192 before, and eight interleaved readers at 209–214
/// against 205–213.
pub const FAR_CREDIT_ROUND_TRIPS: u64 = 6;

/// In a cache whose capacity the engine knows, a window on the kernel's
/// floor holds at most this share of it (one sixteenth): what each of
/// eight interleaved streams' two windows may hold, which took eight
/// interleaved readers of an object from 2.45 times the bytes they used
/// to 1.06. (ahead's own policy gives each stream three windows' worth,
/// the third for pages already read: `SHARE_WINDOWS`.) `ondemand` sizes
/// its windows for a cache as large as memory.
pub(crate) const FLOOR_CACHE_SHARE: u64 = 16;

/// The most ranges of speculative pages a budget remembers for credit;
/// past it the farthest from the reader are forgotten (they can no longer
/// be earned back, so the bound only tightens): 65,536, a few megabytes of
/// map at most. With 4,096, a backward scan of a table of 8 KiB rows (its
/// windows broken into short ranges by the overflow pages read before
/// them) lost the credit of a third of the pages it read.
pub(crate) const MAX_RANGES: usize = 1 << 16;

/// `c` of the bound for hints: 32 pages (128 KiB, one of the kernel's
/// default windows), and only once the file's reads have borne its
/// policy out ([`HINT_EVIDENCE_PAGES`]); beyond it, a hint needs pages
/// of the file's hints used ([`Budget::left`]). With a credit of two of the
/// kernel's windows and no evidence asked, files whose reads only looked
/// regular (a forward scan's header pages, an IN-list on rows of an
/// unlucky size, `tarfile` skipping members) hinted 16–60 pages and read
/// 0–4 of them, in 26 of the generator's 44 cases.
pub const HINT_CREDIT_PAGES: u64 = DEFAULT_MAX_PAGES;

/// What a file must show before its first hint: this many pages (16, four
/// of the stride rule's first windows) that its policy *foresaw*, decided
/// but was not let read, and that the program then read unaided, by
/// requests that continued the policy's streams
/// ([`Budget::foreseen_used`]), with the pages foreseen and not (yet)
/// read held to the hints' own bound: at most [`WASTE_PER_USE`] of
/// those read. Until then nothing is hinted and the file reads as the
/// kernel reads it; the policy's windows, had they been hinted, would
/// have been read as the bound asks. Granting the credit on the first
/// page foreseen and read made one-page hints that nobody read in 9 of the
/// generator's 44 cases; on 16 pages read, whatever the rest, 8 of them
/// spent it all for nothing (`tarfile`, whose headers lie somewhere in an
/// irregular stride's span).
pub const HINT_EVIDENCE_PAGES: u64 = 16;

/// A file's speculation budget: what was charged, what was earned back,
/// and which speculative pages a request may still take.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Charged pages not yet used.
    charged_out: Ranges,
    /// Pages read on the kernel's floor not yet used.
    floor_out: Ranges,
    /// Pages foreseen (decided but cut) and not yet requested, while the
    /// budget waits for evidence ([`Budget::foreseen_used`]; hints only).
    foreseen_out: Option<Ranges>,
    /// Foreseen pages a request took.
    foreseen_used: u64,
    /// Pages foreseen, in all.
    foreseen: u64,
    /// The evidence was shown: `c` is granted.
    shown: bool,
    /// Where the last request that took foreseen pages ended.
    foreseen_end: u64,
    /// Speculative pages charged, in all.
    charged: u64,
    /// Of those, pages a request took.
    used: u64,
    /// Pages read ahead on the kernel's floor, uncharged.
    floor: u64,
    /// Of those, pages a request took.
    floor_used: u64,
    /// Strided windows whose gaps are at most this many pages are read
    /// whole ([`RaConfig::read_through_gap`]), while their period is at
    /// most this many times their runs ([`RaConfig::read_through_ratio`]).
    read_through_gap: u64,
    read_through_ratio: u64,
    /// See [`Budget::gap_credit`].
    gap_credit: u64,
    /// `c` of the bound ([`Budget::credit_pages`]).
    credit: u64,
    /// Where the last request that took speculative pages ended.
    taken_end: u64,
    /// Pages charged since the request now served began, as ranges:
    /// what [`Budget::refund`] may give back.
    charged_now: Vec<(u64, u64)>,
    /// Pages foreseen since the request now served began, likewise.
    foreseen_now: Vec<(u64, u64)>,
    /// Hints ([`RaConfig::hints`]): `c` is a start, not a margin
    /// ([`Budget::left`]).
    hints: bool,
}

impl Budget {
    /// A fresh budget for a policy configured as `config`:
    /// [`CREDIT_PAGES`] to spend; for hints `HINT_CREDIT_PAGES`, once
    /// `HINT_EVIDENCE_PAGES` foreseen pages were requested.
    pub fn new(config: &RaConfig) -> Budget {
        Budget {
            charged_out: Ranges::default(),
            floor_out: Ranges::default(),
            foreseen_out: config.hints.then(Ranges::default),
            foreseen_used: 0,
            foreseen: 0,
            shown: !config.hints,
            foreseen_end: 0,
            charged: 0,
            used: 0,
            floor: 0,
            floor_used: 0,
            read_through_gap: config.read_through_gap,
            read_through_ratio: config.read_through_ratio(),
            credit: if config.hints {
                HINT_CREDIT_PAGES
            } else {
                CREDIT_PAGES.max(config.max_pages / CREDIT_WINDOW_SHARE)
            },
            taken_end: 0,
            charged_now: Vec::new(),
            foreseen_now: Vec::new(),
            hints: config.hints,
            // `ahead run`'s hints: no reader takes a gap's pages, and
            // `--stats` counts them unread; only the pages requests take
            // earn. Buffered mode's are read as reads are
            // ([`RaConfig::hint_gaps_as_reads`]).
            gap_credit: if config.hints && !config.hint_gaps_as_reads {
                0
            } else {
                super::ahead::MERGE_GAP
            },
        }
    }

    /// A far source's round trips raise `c` to [`FAR_CREDIT_ROUND_TRIPS`]
    /// of them, where that is more (never lowering it, so that what the
    /// bound admitted stays within it).
    fn far_credit(&mut self, view: &dyn CacheView) {
        if self.foreseen_out.is_some() {
            return;
        }
        // A far source is one whose streams' windows are never cut below a
        // round trip (0 for any other).
        let round_trip = super::ahead::latency_floor(view);
        self.credit = self
            .credit
            .max(round_trip.saturating_mul(FAR_CREDIT_ROUND_TRIPS));
    }

    /// `c` of the bound: [`CREDIT_PAGES`], or a share of the policy's
    /// largest window (`CREDIT_WINDOW_SHARE`) where that is more;
    /// `HINT_CREDIT_PAGES` for hints, and none before their evidence.
    pub fn credit_pages(&self) -> u64 {
        if self.shown {
            self.credit
        } else {
            0
        }
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

    /// Pages a request took that the policy had foreseen but the budget
    /// had not let it read (hints only): evidence that its pattern holds,
    /// gathered at the kernel's pace, since the reader waited for each.
    /// They earn nothing; `HINT_EVIDENCE_PAGES` of them grant `c`.
    pub fn foreseen_used(&self) -> u64 {
        self.foreseen_used
    }

    /// Pages foreseen, read or not.
    pub fn foreseen(&self) -> u64 {
        self.foreseen
    }

    /// Speculative pages used, charged or on the floor: what earns.
    fn earned(&self) -> u64 {
        self.used + self.floor_used
    }

    /// Pages that may still be charged:
    /// `k · (used + floor used) + c − (charged − used)`; for hints
    /// `max((1 + k) · used, c) − charged`.
    ///
    /// For hints `c` is a start, not a margin kept for ever: a file may
    /// hint `c` pages on its evidence alone, and beyond that only `1 + k`
    /// pages for each of its hinted pages a request took. So a file that
    /// hinted more than `c` pages has had at least `1 / (1 + k)`, one
    /// half, of them read (`ahead run --stats`' accuracy) after every
    /// request, and the unused ones are at most `max(k · used, c − used)`,
    /// within the bound of reads. With `k · used + c` as for reads, a file
    /// at the bound stayed under one half by `c / (2 · hinted)`: DuckDB's
    /// `order by id desc limit 20` over a Parquet file hinted 1,092 pages
    /// and 530 were read.
    pub fn left(&self) -> u64 {
        let (num, den) = WASTE_PER_USE;
        if self.hints {
            let cap = (self.earned() * (num + den) / den).max(self.credit_pages());
            return cap.saturating_sub(self.charged);
        }
        (self.earned() * num / den + self.credit_pages()).saturating_sub(self.charged - self.used)
    }

    /// The bound: pages charged and not used are at most `k` times the
    /// speculative pages used (charged or on the floor), plus `c`; for
    /// hints, pages charged are at most the larger of `1 + k` times those
    /// used and `c` ([`Budget::left`]), which is within it. Holds after
    /// every call; the property tests check it.
    pub fn holds(&self) -> bool {
        let (num, den) = WASTE_PER_USE;
        let c = self.credit_pages() * den;
        if self.hints {
            return self.charged * den <= (self.earned() * (num + den)).max(c);
        }
        (self.charged - self.used) * den <= self.earned() * num + c
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
        self.credit_as(req, true);
    }

    /// [`Budget::credit`]; foreseen pages taken count as evidence only
    /// if `shows` ([`crate::ra::Policy::continues_stream`]), else as
    /// foreseen and not read (docs/never-worse.md, seed 85).
    pub(crate) fn credit_as(&mut self, req: Request, shows: bool) {
        self.charged_now.clear();
        self.foreseen_now.clear();
        if let Some(f) = &mut self.foreseen_out {
            if !f.is_empty() {
                // As charged pages earn: a short gap read through between
                // two pages the reader took counts with them (a window
                // that reads a stride whole foresees its gaps too).
                let taken = f.take_with_gap(req, self.gap_credit, self.foreseen_end);
                if taken > 0 {
                    self.foreseen_end = req.end();
                }
                if shows {
                    self.foreseen_used += taken;
                }
            }
            let (num, den) = WASTE_PER_USE;
            let unread = self.foreseen - self.foreseen_used;
            if self.foreseen_used >= HINT_EVIDENCE_PAGES && unread * den <= self.foreseen_used * num
            {
                // Shown: nothing more to gather.
                self.shown = true;
                self.foreseen_out = None;
            }
        }
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

    /// The widest gap below a request that its use credits: none for
    /// `ahead run`'s hints (no reader takes a hinted gap, and `--stats`
    /// counts its pages unread), else the widest gap ahead's stride rules read
    /// through on this device
    /// (from its costs, [`super::DeviceCost`]; `MERGE_GAP`
    /// where they are unknown).
    pub fn gap_credit(&self) -> u64 {
        self.gap_credit
    }

    /// Forgets speculative page `index` (it was evicted unused): it stays
    /// charged and can no longer be earned back.
    pub fn forget(&mut self, index: u64) {
        self.charged_out.take(index, index + 1);
        self.floor_out.take(index, index + 1);
        if let Some(f) = &mut self.foreseen_out {
            f.take(index, index + 1);
        }
    }

    /// Admits `window`, decided for `req`, where the kernel's `ondemand`
    /// would have read `floor` at the same decision: cut, in the reader's
    /// direction, to the speculative pages the budget has left (pages of
    /// `floor` are free), and charged for them. Where the budget cut it to
    /// fewer pages ahead than `floor` reads, or there is no `window`,
    /// `floor` is read instead. `None` if neither reads anything.
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
        self.far_credit(view);
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
        // The pages the engine will read for nobody yet: the window's (or
        // its span's, read whole), speculative.
        let spec = Spec {
            window: &window,
            whole: self.reads_whole(&window),
            req,
        };
        // Nearest the reader first (downwards for a backward window), until
        // the budget runs out at page `cut`: a run of such pages at a time,
        // in pieces on and off the floor (whose pages are free).
        let (lo, hi) = (window.start, window.end());
        let backward = window.shape == Shape::Backward;
        let outstanding = [&self.charged_out, &self.floor_out];
        let mut left = self.left();
        // A run is looked at no further than the page the budget would
        // stop at if none of it were on the floor (the cache is asked of
        // each page a run holds): a budget of none looks at one page.
        let run = |from: Option<u64>, left: u64| -> Option<(u64, u64)> {
            let most = left.saturating_add(1);
            if backward {
                spec.run_down(from?, lo, &outstanding, view, most)
            } else {
                spec.run_up(from?, hi, &outstanding, view, most)
            }
        };
        let (mut cut, mut kept) = (None, 0);
        let mut next = run(
            if backward {
                hi.checked_sub(1)
            } else {
                Some(lo)
            },
            left,
        );
        'walk: while let Some((a, b)) = next {
            for (s, e, free) in walk::pieces(floor.as_ref(), a, b, backward) {
                let n = e - s;
                if !free {
                    if left < n {
                        kept += left;
                        cut = Some(if backward { e - 1 - left } else { s + left });
                        break 'walk;
                    }
                    left -= n;
                }
                kept += n;
            }
            next = run(if backward { a.checked_sub(1) } else { Some(b) }, left);
        }
        if let Some(p) = cut {
            self.foresee(&window, p, req, view);
        }
        let admitted = match cut {
            None => window,
            Some(p) => {
                if kept < floor.map_or(0, |f| walk::reads_ahead(&f, req, view)) {
                    return self.read_floor(floor, req, view);
                }
                if kept == 0 {
                    // Nothing ahead is left of it: refused, not a window
                    // of the request's own pages that the policy would
                    // then judge unused.
                    return None;
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
        self.charge(&spec, &admitted, floor, view);
        Some(admitted)
    }

    /// Charges the speculative pages of `admitted` (as `spec` selects
    /// them), or records them as read on the floor where `floor` holds
    /// them.
    fn charge(
        &mut self,
        spec: &Spec,
        admitted: &Window,
        floor: Option<Window>,
        view: &dyn CacheView,
    ) {
        let mut p = admitted.start;
        while let Some((a, b)) = spec.run_up(
            p,
            admitted.end(),
            &[&self.charged_out, &self.floor_out],
            view,
            u64::MAX,
        ) {
            for (s, e, on_floor) in walk::pieces(floor.as_ref(), a, b, false) {
                if on_floor {
                    self.floor += e - s;
                    self.floor_out.add_range(s, e);
                } else {
                    self.charged += e - s;
                    self.charged_out.add_range(s, e);
                    match self.charged_now.last_mut() {
                        Some((_, end)) if *end == s => *end = e,
                        _ => self.charged_now.push((s, e)),
                    }
                    if let Some(f) = &mut self.foreseen_out {
                        f.take(s, e);
                    }
                }
            }
            p = b;
        }
    }

    /// Whether the engine reads strided window `w` whole, gaps included
    /// ([`RaConfig::read_through_gap`]).
    fn reads_whole(&self, w: &Window) -> bool {
        matches!(w.shape, Shape::Strided { run, period }
            if super::hints::hinted_whole(run, period, self.read_through_gap, self.read_through_ratio))
    }

    /// While the budget waits for evidence (hints): records the pages of
    /// `window` the cut at `cut` left unread, as they would have been
    /// charged (with the gaps of a stride read whole), so that a request
    /// taking one counts, and a short gap below it as it would earn.
    fn foresee(&mut self, window: &Window, cut: u64, req: Request, view: &dyn CacheView) {
        let Some(mut f) = self.foreseen_out.take() else {
            return;
        };
        let spec = Spec {
            window,
            whole: self.reads_whole(window),
            req,
        };
        let (lo, hi) = if window.shape == Shape::Backward {
            (window.start, cut + 1)
        } else {
            (cut, window.end())
        };
        // Consecutive pages go in as one range.
        let mut run: Option<(u64, u64)> = None;
        let mut p = lo;
        while let Some((a, b)) = spec.run_up(
            p,
            hi,
            &[&self.charged_out, &self.floor_out, &f],
            view,
            u64::MAX,
        ) {
            self.foreseen += b - a;
            run = match run {
                Some((s, e)) if e == a => Some((s, b)),
                Some((s, e)) => {
                    f.add_range(s, e);
                    self.foreseen_now.push((s, e));
                    Some((a, b))
                }
                None => Some((a, b)),
            };
            p = b;
        }
        if let Some((a, b)) = run {
            f.add_range(a, b);
            self.foreseen_now.push((a, b));
        }
        self.foreseen_out = Some(f);
    }

    /// Gives back what the request now served charged or foresaw within
    /// `window`, which the engine did not read: the kernel under the hints
    /// reads it by itself ([`Policy::left_to_kernel`]). Its pages neither
    /// spend the budget nor, read, earn it or count as evidence, so that
    /// what the bound weighs is what was hinted.
    ///
    /// [`Policy::left_to_kernel`]: crate::ra::Policy::left_to_kernel
    pub fn refund(&mut self, window: Window) {
        let (lo, hi) = (window.start, window.end());
        // What of `now` lies in the window, taken from `set` (an empty
        // span takes nothing).
        let within = |set: &mut Ranges, now: &[(u64, u64)]| -> u64 {
            now.iter()
                .map(|&(a, b)| set.take(a.max(lo), b.min(hi)))
                .sum()
        };
        self.charged -= within(&mut self.charged_out, &self.charged_now);
        if let Some(f) = &mut self.foreseen_out {
            self.foreseen -= within(f, &self.foreseen_now);
        }
    }

    /// `floor` as it is, uncharged.
    fn read_floor(
        &mut self,
        floor: Option<Window>,
        req: Request,
        view: &dyn CacheView,
    ) -> Option<Window> {
        let f = floor?;
        let spec = Spec {
            window: &f,
            whole: false,
            req,
        };
        let mut p = f.start;
        while let Some((a, b)) = spec.run_up(
            p,
            f.end(),
            &[&self.charged_out, &self.floor_out],
            view,
            u64::MAX,
        ) {
            self.floor += b - a;
            self.floor_out.add_range(a, b);
            p = b;
        }
        Some(f)
    }
}

mod budgeted;
pub use budgeted::Budgeted;
mod ranges;
use ranges::Ranges;
mod walk;

#[cfg(test)]
mod tests;
