//! ahead's own policy: a table of streams per file, with direction, stride,
//! thrash and lateness feedback.
//!
//! # Why
//!
//! The kernel keeps one readahead state per open file. Two readers sharing a
//! handle, or one reader walking two regions, keep resetting it; a reader that
//! goes backwards or skips a fixed gap gets no readahead at all; and when
//! readahead pages are evicted before use, the kernel starts the window again
//! from its initial size and ramps it up into the same thrashing.
//!
//! # How
//!
//! * **Stream table.** Up to `DEFAULT_STREAMS` streams per file (16),
//!   reused least-recently-used first. Every request is matched to a stream
//!   by where it falls: right after a stream's previous request (forward),
//!   right before it (backward), one period after it (stride), or inside the
//!   stream's readahead window. A marker hit is matched by the marker's page.
//!   Each stream has its own window, so interleaved readers do not disturb
//!   each other.
//! * **Direction.** A request that ends where the stream's previous one began
//!   makes the stream backward; its windows extend downwards from the
//!   request, with the marker placed so the next window is read while the
//!   reader still has `async_size` pages to go.
//! * **Stride.** Three requests of the same size separated by the same gap
//!   (the gap confirmed twice) make a strided stream (read N, skip M); its
//!   windows read only the runs the reader will want.
//! * **Sweeps.** A strided reader that wraps around and starts again one
//!   column further (at most a run above where its last sweep began, with
//!   the same run and period) is reading a table column by column. Its
//!   windows then read each run together with the next columns, as many as
//!   three quarters of the cache ([`CacheView::capacity_pages`]) can hold
//!   for every run of a sweep until the later sweeps come for them; an
//!   engine that does not know its capacity gets no such columns. Each
//!   sweep that finds columns read ahead for it evicted reads one fewer.
//!   A stride that wraps after fewer rows than the table has streams, to
//!   the page right after its first run, is not a sweep but readers
//!   interleaved on one handle: it is split into a forward stream per row
//!   (`split_rows`).
//! * **Ramp-up** is the kernel's (`init_window`, `next_window`), so a
//!   plain sequential reader gets exactly the kernel's windows.
//! * **Request-size awareness** (Bhattacharya's AIO readahead patch,
//!   docs/references.md). A window made on a miss always
//!   holds the whole request, so it is read in one I/O whatever the state.
//! * **Thrash feedback.** A miss on a page whose shadow says it was read
//!   ahead and evicted unused means the stream's lookahead outlived the
//!   cache. The stream's window is capped at 3/4 of what survived (the
//!   distance from where the lost window was issued to the lost page, as in
//!   Wu's adaptive readahead) and the lost pages are read again at once, in
//!   that capped window, instead of starting from the initial size.
//! * **Lateness and waste feedback.** A reader that waits for a page
//!   readahead already asked for means the window is too small for the
//!   device's latency: the stream's next window is ramped once more (up to
//!   the max). Readahead evicted unused halves the stream's window.
//! * **Random requests** match no stream. A miss right after cached pages
//!   gets the kernel's context readahead, as `ondemand` would read it; else
//!   one in a dense region of a file that fits the cache reads the region
//!   (see `DENSE_REGION` and `DENSE_SHARE_START` for the rule, its
//!   constants, and how it learns from lookahead markers whether it pays);
//!   else exactly the request.
//! * **Every speculative window is held to account** ([`super::accuracy`]):
//!   a stream whose windows go mostly unread stops speculating until its
//!   reader proves the pattern again, and while a file's speculation does
//!   not pay, its new streams start that way.
//! * **Irregular strides.** A gap that moves by a page or two
//!   (`STRIDE_JITTER`) is never predicted page by page: such a stream
//!   reads through its gaps where the device says that is cheaper than
//!   waiting ([`crate::ra::DeviceCost`]), and reads only what is asked
//!   otherwise.
//! * **Windows no larger than the history**: a stream by ahead's own rules
//!   reads ahead no more in one window than its requests asked for.
//! * **One budget over all of it** ([`super::budget`]): whatever the rule,
//!   [`super::new_policy`] holds this policy to the file's speculation
//!   budget, over the floor of the kernel's own readahead.

use super::accuracy::{Issued, Ledger, REARM_MAX, REARM_RUN};
use super::{
    init_window, next_miss, next_window, CacheView, Feedback, Policy, RaConfig, Request, Shape,
    Trigger, Window,
};

mod decide;
mod dense;
mod slots;
mod stream;
mod stride;
#[cfg(test)]
mod tests;

pub(crate) use stream::STRIDE_CONFIRMATIONS;
pub(crate) use stride::{HINT_MAX_READ_THROUGH, MAX_READ_THROUGH, MERGE_GAP};

pub(crate) use decide::latency_floor;
use dense::Dense;
use slots::Slots;
use stream::{Direction, Match, Stream};
pub(crate) use stride::widest_gap_read_through;
use stride::{expected_pages, strided_window, Reach, Sweep};

/// Streams tracked per file by default: enough for the interleaved
/// workloads of the benchmarks (8 readers) with room for random noise; a
/// lookup passes over those whose bounds leave the request out on one
/// comparison each ([`slots`]).
pub(crate) const DEFAULT_STREAMS: usize = 16;

/// How many windows' worth of the cache each stream reading ahead is
/// given ([`StreamTable::share_max`]): three. Two are its windows (the
/// one being read, the next); the third is for the pages it has already
/// read, which stay until the cache's hand comes round to them (CLOCK
/// gives every page one pass) while unread pages of other streams'
/// windows can be taken first. With two, eight interleaved readers of an
/// object overran the cache in one run in three: their next windows were
/// evicted before use, the streams were held, and `bench remote`'s
/// interleaved-8 ran at 0.41–0.51 of the oracle (0.83 otherwise); with
/// three, 0.84–0.86 in 12 runs of 12.
const SHARE_WINDOWS: u64 = 3;

/// The smallest window: 16 KiB, the legacy kernel's `VM_MIN_READAHEAD`.
pub(crate) const MIN_WINDOW: u64 = 4;

/// The `ahead` policy's per-file state.
#[derive(Clone, Debug)]
pub(crate) struct StreamTable {
    max: u64,
    clock: u64,
    streams: Slots,
    current: Option<usize>,
    dense: Dense,
    /// The record of every settled window of ahead's own rules in this
    /// file; while it is poor, new streams start held.
    ledger: Ledger,
    /// Some window may have speculative pages not yet used (a request may
    /// credit one); false only when none has (see `credit`).
    open: bool,
    /// The stream whose window `decide` returned last, until the budget
    /// says what became of it ([`Policy::admitted`]).
    recorded: Option<usize>,
    /// The kernel's context readahead as a fallback
    /// ([`RaConfig::context_readahead`]).
    context: bool,
    /// Exact continuations that re-arm a held stream in this file: from
    /// [`REARM_RUN`], doubled each time a stream is held (up to
    /// [`REARM_MAX`]), halved again by each window settled while a stream
    /// has a proven record ([`Ledger::proven`]).
    rearm_need: u32,
    /// How many times its runs a stride may read through
    /// ([`RaConfig::read_through_ratio`]: for `ahead run`'s hints, only
    /// gaps no wider than the runs, [`stride::HINT_MAX_READ_THROUGH`]).
    read_through_ratio: u64,
    /// Streams just split from interleaved readers (`split_rows`) whose
    /// first windows are still to go out ([`Policy::more`]).
    split: Vec<usize>,
    /// The request begun last continued a stream ([`Policy::continues_stream`]).
    continued: bool,
}

impl StreamTable {
    /// A fresh state with `config.streams` slots (allocated once, here).
    pub fn new(config: RaConfig) -> StreamTable {
        StreamTable {
            max: config.max_pages.max(1),
            clock: 0,
            streams: Slots::new(config.streams),
            current: None,
            dense: Dense::new(),
            ledger: Ledger::EMPTY,
            open: false,
            recorded: None,
            context: config.context_readahead,
            rearm_need: REARM_RUN,
            read_through_ratio: config.read_through_ratio(),
            split: Vec::new(),
            continued: false,
        }
    }

    /// Settles a window that leaves stream `slot`: its record goes to the
    /// stream's ledger and, for ahead's own rules, to the file's. A stream
    /// whose ledger turns poor is held.
    fn settle(&mut self, slot: usize, issued: Issued) {
        let s = &mut self.streams[slot];
        s.ledger.settle(issued.speculative, issued.used);
        if s.speculates_beyond_the_kernel() {
            self.ledger.settle(issued.speculative, issued.used);
            if s.ledger.poor() && !s.held {
                s.held = true;
                s.rearm = 0;
                self.rearm_need = (self.rearm_need * 2).min(REARM_MAX);
            } else if s.ledger.proven() {
                // A stream that has proven itself.
                self.rearm_need = (self.rearm_need / 2).max(REARM_RUN);
            }
        }
    }

    /// Settles both windows of stream `slot` (it is dropped or replaced).
    fn settle_all(&mut self, slot: usize) {
        let s = &mut self.streams[slot];
        let (a, b) = (s.window.take(), s.previous.take());
        for issued in [a, b].into_iter().flatten() {
            self.settle(slot, issued);
        }
    }

    /// Credits every live window with the pages `req` takes from it.
    /// Skips the scan while no window has credit left to take, as on a
    /// file read at random: the scan is on every request's path, cached
    /// ones included.
    fn credit(&mut self, req: Request) {
        if !self.open {
            return;
        }
        self.open = self.streams.credit(req);
    }

    fn effective_max(&self, s: &Stream) -> u64 {
        self.max.min(s.cap).max(MIN_WINDOW.min(self.max))
    }

    /// The largest window one stream may have when the streams reading
    /// ahead now share the pages readahead may hold
    /// ([`CacheView::capacity_pages`]): each keeps up to two windows (the
    /// one being read and the next) and the pages it has read from the
    /// one before, so together they fit ([`SHARE_WINDOWS`]).
    fn share_max(&self, view: &dyn CacheView) -> u64 {
        let Some(capacity) = view.capacity_pages() else {
            return self.max;
        };
        let reading = self
            .streams
            .iter()
            .filter(|s| s.live && s.window.is_some() && s.direction != Direction::Unknown)
            .count()
            .max(1) as u64;
        (capacity / (SHARE_WINDOWS * reading))
            .max(MIN_WINDOW)
            .min(self.max)
    }

    /// Keeps `window`, issued for `req`, as stream `slot`'s latest; the
    /// window before the previous one leaves the stream and is settled.
    fn record(&mut self, slot: usize, window: Window, req: Request) -> Window {
        let s = &mut self.streams[slot];
        let expected = expected_pages(s.direction, &window);
        let gone = s.previous.take();
        s.previous = s.window;
        let issued = Issued::new(window, expected, req, req.index);
        self.open |= issued.speculative > 0;
        s.window = Some(issued);
        self.recorded = Some(slot);
        if let Some(issued) = gone {
            self.settle(slot, issued);
        }
        window
    }
}

impl StreamTable {
    /// Request `req` continues stream `slot` as match `m` says (`previous`:
    /// the stream of the request before, if it reads ahead).
    fn continue_with(&mut self, slot: usize, m: Match, req: Request, previous: Option<usize>) {
        let s = &mut self.streams[slot];
        match m {
            Match::Forward => {
                if s.direction == Direction::Unknown {
                    s.direction = Direction::Forward;
                }
                if s.row.is_some_and(|(_, end)| req.end() > end) {
                    // Read on past the row: a forward reader.
                    s.row = None;
                    s.rows = 0;
                }
                if previous.is_some_and(|p| p != slot) {
                    s.interleaved = true;
                }
            }
            Match::Backward => {
                if s.direction == Direction::Unknown {
                    s.direction = Direction::Backward;
                }
                if let Some(r) = &mut s.row {
                    r.0 = r.0.min(req.index);
                }
            }
            Match::Stride if s.jittered => {
                // An exact gap in a stream whose gaps move says
                // nothing new: it stays irregular.
                if let Direction::Irregular { run, .. } = s.direction {
                    s.direction = Direction::Irregular {
                        run,
                        period: s.period,
                    };
                }
            }
            Match::Stride => {
                s.confirmations += 1;
                // A run larger than the maximum window cannot be read
                // ahead within it; such requests are read whole, one
                // by one.
                if s.confirmations >= STRIDE_CONFIRMATIONS && req.count <= self.max {
                    s.turn_strided(req.count, &mut self.ledger);
                }
            }
            Match::Jitter => s.jitter(req, self.max),
            Match::StrideCandidate(period) => {
                s.period = period;
                s.confirmations = 1;
                s.direction = Direction::Unknown;
            }
            Match::InsideWindow => s.gap_inside_window(req),
            Match::RowBelow => {
                let above = s.present_row().map_or(req.end(), |r| r.0);
                s.row = Some((req.index, above));
                s.rows += 1;
                if s.rows >= 2 {
                    s.direction = Direction::Backward;
                }
            }
            Match::WithinRow => {}
        }
        if s.held {
            // Re-armed only by requests that continue the stream
            // exactly as its pattern predicts (a gap that moved
            // is the evidence that held it).
            let exact = matches!(
                m,
                Match::Forward
                    | Match::Backward
                    | Match::Stride
                    | Match::RowBelow
                    | Match::WithinRow
            );
            s.rearm = if exact { s.rearm + 1 } else { 0 };
            if s.rearm >= self.rearm_need {
                s.held = false;
                s.rearm = 0;
                s.ledger = Ledger::PROBATION;
                s.size = 0;
            }
        }
        s.last = req;
        s.last_used = self.clock;
        s.seen += req.count;
    }
}

impl Policy for StreamTable {
    fn name(&self) -> &'static str {
        "ahead"
    }

    fn read_through_ratio(&self) -> u64 {
        self.read_through_ratio
    }

    fn max_pages(&self) -> u64 {
        self.max
    }
    fn set_max_pages(&mut self, pages: u64) {
        self.max = pages.clamp(1, crate::ra::MAX_WINDOW_PAGES);
    }

    fn begin(&mut self, req: Request) {
        self.clock += 1;
        self.credit(req);
        // The stream of the request before, if it reads ahead: a request
        // the kernel reads as it is (a new stream, of unknown direction,
        // or one that never read ahead: two lone pages one after the
        // other, as a B-tree's interior pages that sqlite3 reads ahead of
        // its scan and keeps) leaves its readahead state alone, and a
        // forward stream continued after one is still the kernel's.
        let previous = self.current.filter(|&p| {
            let s = &self.streams[p];
            s.live && s.direction != Direction::Unknown && s.window.is_some()
        });
        let mut found = self.find(req);
        let continues = found.is_some_and(|(_, m)| m.continues());
        self.continued = continues;
        if !continues && self.split_rows(req) {
            found = self.find(req);
        } else if !continues {
            if let Some(slot) = self.next_sweep(req) {
                self.continued = true;
                self.current = Some(slot);
                return;
            }
        }
        if let Some((slot, Match::Jitter)) = found {
            if matches!(self.streams[slot].direction, Direction::Strided { .. }) {
                // The reader slipped off the pages its strided windows
                // predicted: what they hold beyond here will not be read,
                // so they are judged now.
                self.settle_all(slot);
            }
        }
        let slot = match found {
            None => self.new_stream(req),
            Some((slot, m)) => {
                self.continue_with(slot, m, req, previous);
                slot
            }
        };
        self.current = Some(slot);
    }

    fn decide(&mut self, req: Request, trigger: Trigger, view: &dyn CacheView) -> Option<Window> {
        if req.count == 0 {
            return None;
        }
        match trigger {
            Trigger::Miss | Trigger::Request => self.on_miss(req, view),
            Trigger::MarkerHit => self.on_marker(req, view),
        }
    }

    /// The first window of each row just split from interleaved readers
    /// but the one being read (its own comes with its request), on a far
    /// store only (a round trip worth more than the kernel's window,
    /// [`decide::latency_floor`]): there each row's next request would
    /// otherwise wait a round trip of its own, one after the other. Eight
    /// readers of 16 MiB parts of an object through `ahead mount` on the
    /// `s3` profile waited 7 round trips (230 ms) in their second round.
    fn more(&mut self, view: &dyn CacheView) -> Option<Window> {
        let floor = decide::latency_floor(view);
        while let Some(slot) = self.split.pop() {
            let s = self.streams[slot];
            if floor == 0 || !s.live || s.direction != Direction::Forward || s.window.is_some() {
                continue;
            }
            let max = self.effective_max(&s).min(self.share_max(view));
            let pages = s.shown(init_window(s.last.count, max).min(max), floor);
            self.streams[slot].size = pages;
            let w = Window::forward(s.last.end(), pages, pages);
            return Some(self.record(slot, w, s.last));
        }
        None
    }

    fn continues_stream(&self) -> bool {
        self.continued
    }

    fn admitted(&mut self, decided: Window, admitted: Option<Window>) {
        let Some(slot) = self.recorded.take() else {
            return;
        };
        let s = &mut self.streams[slot];
        if admitted == Some(decided) || s.window.map(|i| i.window) != Some(decided) {
            return;
        }
        match admitted {
            Some(w) => {
                // Cut: the stream's record and its next window's ramp go
                // on from what was read.
                if let Some(i) = s.window.as_mut() {
                    i.window = w;
                    i.speculative = i.speculative.min(w.pages());
                    i.used = i.used.min(i.speculative);
                }
                s.size = s.size.min(w.pages()).max(1);
            }
            None => {
                // Refused: the stream has only the window before.
                s.window = s.previous.take();
                s.size = 0;
            }
        }
    }

    fn describe(&self) -> Vec<String> {
        let mut live: Vec<&Stream> = self.streams.iter().filter(|s| s.live).collect();
        live.sort_by_key(|s| std::cmp::Reverse(s.last_used));
        let mut out: Vec<String> = live
            .iter()
            .map(|s| {
                let dir = match s.direction {
                    Direction::Unknown => "unknown".to_string(),
                    Direction::Forward => "forward".to_string(),
                    Direction::Backward if s.row.is_some() => "backward by rows".to_string(),
                    Direction::Backward => "backward".to_string(),
                    Direction::Strided { run, period } => {
                        format!("strided (run {run}, period {period} pages)")
                    }
                    Direction::Irregular { run, period } => {
                        format!("irregular stride (run {run}, period about {period} pages)")
                    }
                };
                let record = match (s.holding(), s.ledger.accuracy()) {
                    (true, _) => ", held (its readahead went unread)".to_string(),
                    (false, Some(a)) => format!(", {:.0}% of its readahead used", a * 100.0),
                    (false, None) => String::new(),
                };
                format!(
                    "{dir} from page {} to page {}, window {} pages{record}",
                    s.origin, s.last.index, s.size
                )
            })
            .collect();
        if let Some(a) = self.ledger.accuracy() {
            out.push(format!(
                "backward, strided and sweep readahead: {:.0}% used{}",
                a * 100.0,
                if self.ledger.poor() {
                    ", new streams start held"
                } else {
                    ""
                }
            ));
        }
        out.push(format!(
            "dense regions: {}",
            if self.dense.share <= 1 {
                "off".to_string()
            } else {
                format!(
                    "a region with 1 page in {} cached is read whole",
                    self.dense.share
                )
            }
        ));
        out
    }

    fn outstanding(&self) -> bool {
        self.open
    }

    fn feedback(&mut self, event: Feedback) {
        match event {
            Feedback::LateHit { index } => {
                if let Some(slot) = self.stream_owning(index) {
                    self.streams[slot].boost = true;
                }
            }
            Feedback::EvictedUnused { index } => {
                self.sweep_lost(index);
                if let Some(slot) = self.stream_owning(index) {
                    let s = &mut self.streams[slot];
                    let owner = s.owning_window(index).map(|(w, _)| w.start);
                    if owner.is_some() && s.shrunk_for != owner {
                        s.shrunk_for = owner;
                        s.size = (s.size / 2).max(MIN_WINDOW);
                    }
                }
            }
            Feedback::DemandMiss { .. } => {}
        }
    }
}
