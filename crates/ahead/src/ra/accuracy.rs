//! Accuracy of speculative reads: every window a rule issues beyond what the
//! reader asked for is held to account.
//!
//! # The idea
//!
//! The kernel's `ondemand` is conservative by construction: it reads ahead
//! only for a reader that continues exactly where it left off. ahead's own
//! rules (strides, backward streams, sweeps) speculate on less evidence, and
//! a pattern that only looks regular (a stride whose gap varies by a page,
//! rows fetched in index order) makes them predict pages nobody reads. So
//! each such window is kept with its record:
//!
//! * **Issued.** A window's *speculative pages* are the pages it reads
//!   beyond the request that caused it (`new`).
//! * **Used.** Every later request credits the windows it lands in with the
//!   pages it takes from them (`credit`); a page is credited once
//!   at most (a window's credit never passes its speculative pages).
//! * **Settled.** A window is judged when it leaves its stream (the stream
//!   keeps its last two; a third pushes the oldest out, and a stream that is
//!   dropped from the table settles both): its speculative and used pages go
//!   to the stream's `Ledger` and to the file's.
//! * **Held.** A ledger with at least [`EVIDENCE_PAGES`] settled speculative
//!   pages of which less than `ACCURACY_FLOOR` were used is *poor*. A
//!   stream with a poor ledger stops speculating and reads exactly what is
//!   asked, as `ondemand` does for a random read; and while the file's
//!   ledger is poor, every new stream starts that way.
//! * **Re-armed** only on new evidence: `REARM_RUN` requests in a row that
//!   each continue the stream exactly as its pattern predicts (the next
//!   page, the page below, one period on). The stream then starts again from
//!   the kernel's initial window, with a fresh ledger that is judged
//!   sooner (`PROBATION_PAGES`). Each time a stream of
//!   the file is held the file asks twice as many of its streams (up to
//!   `REARM_MAX`), and each window a stream with a good record settles
//!   halves that again, so a pattern that is regular only in short
//!   stretches stops re-arming.
//!
//! A forward stream is the kernel's own rule and is never held: what ahead
//! adds must not make it read less than `ondemand` would.

use super::{Request, Shape, Window};

/// Below this share of speculative pages used (numerator, denominator: one
/// half), a rule stops speculating. At one half, each wasted page is paid
/// for by a used one: on a bandwidth-bound device a used page saves no
/// bandwidth (it would be read anyway) while a wasted one costs a page of
/// it, so a rule under one half costs more device time than the latency it
/// hides; `ahead run --stats` reports the same ratio as `accuracy`. The
/// sqlite3 IN-list query that made this rule (rows 200 apart, gaps of 20 and
/// 21 pages) ran at 0.07.
pub(crate) const ACCURACY_FLOOR: (u64, u64) = (1, 2);

/// Speculative pages a ledger must have settled before it is judged: 32,
/// the kernel's default maximum window (128 KiB of 4 KiB pages). A rule is
/// given one full kernel window of credit; a wrong rule wastes about that
/// before it is stopped, a right one loses nothing.
pub const EVIDENCE_PAGES: u64 = 32;

/// A ledger halves both counts once it holds this many speculative pages
/// (8 kernel windows), so it follows what a rule does now rather than what
/// it did at the start of the file.
pub(crate) const EVIDENCE_DECAY: u64 = 8 * EVIDENCE_PAGES;

/// Exact continuations in a row that re-arm a held stream: four, twice the
/// evidence a stride needs to start ([`STRIDE_CONFIRMATIONS`] requests after
/// the first). A held stream has already been wrong, so it needs more
/// evidence than a fresh one; four requests of a run that goes on for
/// hundreds cost it little.
///
/// [`STRIDE_CONFIRMATIONS`]: super::ahead::STRIDE_CONFIRMATIONS
pub(crate) const REARM_RUN: u32 = 4;

/// The most exact continuations a held stream may be asked for: 64. A file
/// whose streams keep failing after they re-arm asks for twice as many each
/// time ([`REARM_RUN`], 8, 16, …): a pattern that is regular for a while and
/// then slips (a stride off by a page every twenty rows) stops costing
/// anything once its regular stretches are shorter than what is asked; a
/// true stride after a bad stretch loses at most 64 requests of readahead.
pub(crate) const REARM_MAX: u32 = 64;

/// Speculative pages on which a re-armed stream is judged: 8, two of the
/// smallest windows. It has been wrong before, so it gets a quarter of a
/// fresh stream's credit ([`EVIDENCE_PAGES`]): a pattern that slips again
/// is held at its first slip, a true one passes 8 pages in its first two
/// windows.
pub(crate) const PROBATION_PAGES: u64 = 8;

/// Settled speculative pages and how many of them were used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ledger {
    speculative: u64,
    used: u64,
    /// Pages of evidence before it is judged: [`EVIDENCE_PAGES`], or
    /// [`PROBATION_PAGES`] for a stream that was held.
    evidence: u64,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger::EMPTY
    }
}

impl Ledger {
    /// Nothing settled yet.
    pub(crate) const EMPTY: Ledger = Ledger {
        speculative: 0,
        used: 0,
        evidence: EVIDENCE_PAGES,
    };

    /// Nothing settled yet, for a stream that was held and re-armed.
    pub(crate) const PROBATION: Ledger = Ledger {
        evidence: PROBATION_PAGES,
        ..Ledger::EMPTY
    };

    /// Adds a settled window's record.
    pub fn settle(&mut self, speculative: u64, used: u64) {
        self.speculative += speculative;
        self.used += used.min(speculative);
        while self.speculative >= EVIDENCE_DECAY {
            self.speculative /= 2;
            self.used /= 2;
        }
    }

    /// Enough evidence, and less than `ACCURACY_FLOOR` of it used.
    pub fn poor(&self) -> bool {
        let (num, den) = ACCURACY_FLOOR;
        self.speculative >= self.evidence && self.used * den < self.speculative * num
    }

    /// Used ÷ speculative, if anything was settled.
    pub fn accuracy(&self) -> Option<f64> {
        (self.speculative > 0).then(|| self.used as f64 / self.speculative as f64)
    }

    /// Judged, and not poor: the rule has paid.
    pub fn proven(&self) -> bool {
        self.speculative >= self.evidence && !self.poor()
    }
}

/// A window issued by a stream, with its record so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Issued {
    /// The window.
    pub window: Window,
    /// The reader's page when it was issued.
    pub reader_at: u64,
    /// Pages it reads beyond the request that caused it.
    pub speculative: u64,
    /// Of those, pages later requests took.
    pub used: u64,
}

impl Issued {
    /// A window issued for `req` (the request, or the rest of it from the
    /// trigger page) when the reader was at `reader_at`, of whose pages the
    /// reader is expected to take `expected` (all of them, but for a
    /// window that reads through a stride's gaps: its runs).
    pub fn new(window: Window, expected: u64, req: Request, reader_at: u64) -> Issued {
        let own = pages_in(&window, req.index, req.end());
        Issued {
            window,
            reader_at,
            speculative: expected.saturating_sub(own),
            used: 0,
        }
    }

    /// A later request took its pages of this window.
    pub fn credit(&mut self, req: Request) {
        let taken = pages_in(&self.window, req.index, req.end());
        self.used = (self.used + taken).min(self.speculative);
    }
}

/// How many of the pages `[first, end)` window `w` reads. Constant time
/// whatever the sizes (a request may be megabytes, and every request is
/// checked against every live window).
pub(crate) fn pages_in(w: &Window, first: u64, end: u64) -> u64 {
    let lo = first.max(w.start);
    let hi = end.min(w.end());
    if lo >= hi {
        return 0;
    }
    match w.shape {
        Shape::Forward | Shape::Backward => hi - lo,
        Shape::Strided { run, period } => {
            // Run pages in [start, x): whole periods, then the part of a run.
            let upto = |x: u64| {
                let d = x - w.start;
                d / period * run + (d % period).min(run)
            };
            upto(hi) - upto(lo)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_in_counts_only_the_runs_of_a_strided_window() {
        let w = Window {
            start: 100,
            size: 3 * 10 + 2,
            async_size: 0,
            shape: Shape::Strided { run: 2, period: 10 },
        };
        assert_eq!(w.pages(), 8);
        assert_eq!(pages_in(&w, 0, 1000), 8);
        // By brute force, for every sub-range.
        for a in 95..140 {
            for b in a..140 {
                let brute = (a..b).filter(|&p| w.contains(p)).count() as u64;
                assert_eq!(pages_in(&w, a, b), brute, "[{a}, {b})");
            }
        }
        let f = Window::forward(10, 5, 0);
        assert_eq!(pages_in(&f, 12, 100), 3);
        assert_eq!(pages_in(&f, 0, 10), 0);
    }

    #[test]
    fn a_window_is_credited_once_per_page_and_not_for_its_request() {
        let w = Window::forward(10, 8, 4);
        let mut i = Issued::new(w, w.pages(), Request::new(10, 2), 10);
        assert_eq!(i.speculative, 6);
        i.credit(Request::new(12, 4));
        i.credit(Request::new(12, 4));
        i.credit(Request::new(16, 10));
        assert_eq!(i.used, 6, "credit is capped at the speculative pages");
    }

    #[test]
    fn a_ledger_is_judged_only_on_enough_evidence_and_follows_the_recent_past() {
        let mut l = Ledger::default();
        l.settle(EVIDENCE_PAGES - 1, 0);
        assert!(!l.poor(), "too little evidence to judge");
        l.settle(1, 0);
        assert!(l.poor());
        // A long good run afterwards outweighs the old waste.
        for _ in 0..64 {
            l.settle(16, 16);
        }
        assert!(!l.poor(), "{l:?}");
        assert!(l.accuracy().unwrap() > 0.9);
        assert!(l.proven());
        assert!(l.speculative < EVIDENCE_DECAY);
        // And a long bad run outweighs the good.
        for _ in 0..64 {
            l.settle(16, 1);
        }
        assert!(l.poor(), "{l:?}");
    }
}
