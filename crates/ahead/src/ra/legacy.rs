//! The current/ahead two-window readahead of Linux 2.6.0–2.6.22, the baseline
//! that on-demand readahead replaced (modelled on `page_cache_readahead` in
//! mm/readahead.c of 2.6.20, the kernel the on-demand RFC benchmarks against,
//! docs/references.md).
//!
//! The algorithm inspects every read request (`do_generic_mapping_read`
//! called it whenever the reader reached `next_index`):
//!
//! * It keeps a **current window** (`start`, `size`) and an **ahead window**
//!   (`ahead_start`, `ahead_size`) right after it. The first sequential read
//!   creates the current window (`init_window`); the next sequential read
//!   creates the ahead window; when the reader crosses into the ahead window,
//!   it becomes current and a new ahead window is submitted. The ahead window
//!   is the pipelining: it is read while the reader consumes the current one.
//! * Sequential means exactly the page after the previous read; anything else
//!   switches readahead off (`ra_off`) and reads just the request.
//! * **Thrashing**: when a page that readahead should have brought in is
//!   missing (`handle_ra_miss`), the next window shrinks by two pages
//!   (`RA_FLAG_MISS`: `max(cur - 2, min)`), down to the 16 KiB minimum — the
//!   window is then "maximally shrunk" (Bhattacharya's AIO readahead patch).
//!   The missing pages are not re-read by readahead: the window has moved on,
//!   and the reader reads them one page at a time ([`DemandFill::PageAtATime`],
//!   2.6.20's `readpage`).
//! * **Cache hits**: after 256 consecutive pages that readahead found already
//!   cached (`VM_MAX_CACHE_HIT`), readahead is switched off for the file
//!   (`RA_FLAG_INCACHE`) until the next miss.
//!
//! Simplifications, all of which the RFC's benchmarks do not exercise:
//! request-queue congestion (which made the ahead window non-blocking) is not
//! modelled; both windows are plain reads of the missing pages. Windows carry
//! no marker (the algorithm had none): the engine calls it on every request.
//! A request of at least the maximum window got its ahead window at once in
//! 2.6.20; here the ahead window is issued by the next call, which [`drive`]
//! makes when the reader reaches the end of the current window.
//!
//! [`drive`]: super::drive

use super::{
    init_window, CacheView, Calls, DemandFill, Feedback, Policy, RaConfig, Request, Trigger, Window,
};

/// The legacy minimum window: 16 KiB (`VM_MIN_READAHEAD`, 2.6.20
/// include/linux/mm.h), in 4 KiB pages.
pub(crate) const MIN_PAGES: u64 = 4;

/// Consecutive cache-hit pages after which readahead switches itself off
/// (`VM_MAX_CACHE_HIT`, 2.6.20 include/linux/mm.h).
pub(crate) const MAX_CACHE_HIT: u64 = 256;

/// The legacy policy's per-file state (2.6.20's `struct file_ra_state`).
#[derive(Clone, Debug)]
pub struct Legacy {
    max: u64,
    start: u64,
    size: u64,
    ahead_start: u64,
    ahead_size: u64,
    /// Last page of the previous read; `None` before the first read (the
    /// kernel's `prev_page = -1`).
    prev_page: Option<u64>,
    cache_hit: u64,
    miss: bool,
    in_cache: bool,
}

impl Legacy {
    /// A fresh state.
    pub fn new(config: RaConfig) -> Legacy {
        Legacy {
            max: config.max_pages.max(1),
            start: 0,
            size: 0,
            ahead_start: 0,
            ahead_size: 0,
            prev_page: None,
            cache_hit: 0,
            miss: false,
            in_cache: false,
        }
    }

    fn min(&self) -> u64 {
        MIN_PAGES.min(self.max)
    }

    fn ra_off(&mut self) {
        self.start = 0;
        self.size = 0;
        self.miss = false;
        self.in_cache = false;
        self.reset_ahead();
    }

    fn reset_ahead(&mut self) {
        self.ahead_start = 0;
        self.ahead_size = 0;
    }

    fn next_size(&mut self) -> u64 {
        let cur = self.size;
        let new = if self.miss {
            self.miss = false;
            cur.saturating_sub(2).max(self.min())
        } else if cur < self.max / 16 {
            4 * cur
        } else {
            2 * cur
        };
        new.min(self.max)
    }

    /// `check_ra_success`: a window that found everything cached counts
    /// towards switching readahead off. Returns false if it was switched off.
    fn check_success(&mut self, window: Window, view: &dyn CacheView) -> bool {
        let end = window.end().min(view.file_pages());
        let missing = (window.start..end).filter(|&i| !view.is_present(i)).count();
        if missing == 0 && window.start < view.file_pages() {
            self.cache_hit += window.size;
            if self.cache_hit >= MAX_CACHE_HIT {
                self.ra_off();
                self.in_cache = true;
                return false;
            }
        } else {
            self.cache_hit = 0;
        }
        true
    }

    fn make_ahead_window(&mut self, view: &dyn CacheView) -> (Option<Window>, bool) {
        self.ahead_size = self.next_size();
        self.ahead_start = self.start + self.size;
        let w = Window::forward(self.ahead_start, self.ahead_size, 0);
        let ok = self.check_success(w, view);
        if !ok {
            self.reset_ahead();
            return (None, false);
        }
        (Some(w), true)
    }
}

impl Policy for Legacy {
    fn name(&self) -> &'static str {
        "legacy"
    }

    fn max_pages(&self) -> u64 {
        self.max
    }
    fn set_max_pages(&mut self, pages: u64) {
        self.max = pages.clamp(1, crate::ra::MAX_WINDOW_PAGES);
    }

    fn calls(&self) -> Calls {
        Calls::EveryRequest
    }

    fn demand_fill(&self) -> DemandFill {
        DemandFill::PageAtATime
    }

    fn decide(&mut self, req: Request, _trigger: Trigger, view: &dyn CacheView) -> Option<Window> {
        let (mut offset, mut req_size) = (req.index, req.count);
        if req_size == 0 {
            return None;
        }
        // Re-reading the last page of the previous read (an unaligned reader)
        // does not count as a new access.
        if Some(offset) == self.prev_page && req_size > 1 {
            req_size -= 1;
            offset += 1;
        }
        let sequential = match self.prev_page {
            None => offset == 0,
            Some(prev) => offset == prev + 1,
        };
        let newsize = req_size.min(self.max);
        self.prev_page = Some(offset + newsize - 1);
        if self.in_cache {
            return None;
        }

        // First sequential read: the current window.
        if sequential && self.size == 0 {
            self.size = init_window(newsize, self.max);
            self.start = offset;
            let w = Window::forward(offset, self.size, 0);
            if !self.check_success(w, view) {
                return None;
            }
            // (2.6.20 also issued the ahead window at once for a request of
            // at least the maximum; here it comes with the next call, which
            // `drive` makes as soon as the reader leaves this window.)
            return Some(w);
        }

        if !sequential {
            // Random: readahead off, read the request.
            self.ra_off();
            let w = Window::forward(offset, newsize, 0);
            self.check_success(w, view);
            return Some(w);
        }

        let mut issued = None;
        if self.ahead_start == 0 {
            let (w, ok) = self.make_ahead_window(view);
            issued = w;
            if !ok {
                return None;
            }
        }
        let prev = self.prev_page.unwrap_or(offset);
        if prev >= self.ahead_start {
            // Crossed into the ahead window: shift, and issue a new ahead.
            self.start = self.ahead_start;
            self.size = self.ahead_size;
            let (w, _) = self.make_ahead_window(view);
            issued = w.or(issued);
        }
        issued
    }

    fn feedback(&mut self, event: Feedback) {
        if let Feedback::DemandMiss { .. } = event {
            // handle_ra_miss
            self.miss = true;
            self.in_cache = false;
            self.cache_hit = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ra::tests_support::Sim;
    use crate::ra::PolicyKind;

    #[test]
    fn sequential_reads_get_current_then_ahead_windows() {
        let mut sim = Sim::new(PolicyKind::Legacy, 32, 10_000);
        for i in 0..100 {
            sim.read(i, 1);
        }
        let w: Vec<(u64, u64)> = sim
            .windows()
            .iter()
            .take(5)
            .map(|w| (w.start, w.size))
            .collect();
        // current [0,4), ahead [4,12) at the second read, then each crossing
        // shifts and issues the next ahead window: 16, 32, 32.
        assert_eq!(w[0], (0, 4));
        assert_eq!(w[1], (4, 8));
        assert_eq!(w[2], (12, 16));
        assert_eq!(w[3], (28, 32));
        assert_eq!(w[4], (60, 32));
        assert_eq!(sim.demand_ios(), 0);
    }

    #[test]
    fn random_read_switches_readahead_off() {
        let mut sim = Sim::new(PolicyKind::Legacy, 32, 10_000);
        sim.read(500, 2);
        assert_eq!(
            sim.windows().last().map(|w| (w.start, w.size)),
            Some((500, 2))
        );
    }

    #[test]
    fn turns_itself_off_after_256_cached_pages() {
        let mut sim = Sim::new(PolicyKind::Legacy, 32, 10_000);
        sim.prefill(0..10_000);
        for i in 0..2000 {
            sim.read(i, 1);
        }
        // Only the first windows were computed before the policy noticed the
        // file is cached and stopped issuing windows.
        assert!(sim.windows().len() < 20, "{} windows", sim.windows().len());
    }

    #[test]
    fn misses_shrink_the_window_and_are_read_page_by_page() {
        let mut sim = Sim::new(PolicyKind::Legacy, 32, 10_000);
        for i in 0..64 {
            sim.read(i, 1);
        }
        // Evict what readahead brought in ahead of the reader.
        sim.evict(64..200);
        for i in 64..70 {
            sim.read(i, 1);
        }
        assert!(sim.demand_ios() > 0, "thrashed pages are read on demand");
    }
}
