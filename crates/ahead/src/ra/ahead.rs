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
//! * **Stream table.** Up to [`DEFAULT_STREAMS`] streams per file (16),
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
//! * **Ramp-up** is the kernel's ([`init_window`], [`next_window`]), so a
//!   plain sequential reader gets exactly the kernel's windows.
//! * **Request-size awareness** (seed 001). A window made on a miss always
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
//! * **Random requests** match no stream and read exactly the request,
//!   unless they fall in a dense region of a file that fits the cache: see
//!   [`DENSE_REGION`] and [`DENSE_SHARE_START`] for the rule, its
//!   constants, and how it learns from lookahead markers whether it pays.
//!   In other files a miss right after cached pages gets the kernel's
//!   context readahead, as `ondemand` would read it.
//! * **Every speculative window is held to account** ([`super::accuracy`]):
//!   a stream whose windows go mostly unread stops speculating until its
//!   reader proves the pattern again, and while a file's speculation does
//!   not pay, its new streams start that way.
//! * **Irregular strides.** A gap that moves by a page or two
//!   ([`STRIDE_JITTER`]) is never predicted page by page: such a stream
//!   reads through its gaps where the device says that is cheaper than
//!   waiting ([`crate::ra::DeviceCost`]), and reads only what is asked
//!   otherwise.
//! * **Windows no larger than the history**: a stream by ahead's own rules
//!   reads ahead no more in one window than its requests asked for.

use super::accuracy::{Issued, Ledger, REARM_MAX, REARM_RUN};
use super::{
    init_window, next_miss, next_window, CacheView, Feedback, Policy, RaConfig, Request, Shape,
    Trigger, Window,
};

/// Streams tracked per file by default: enough for the interleaved
/// workloads of the benchmarks (8 readers) with room for random noise; a
/// lookup scans them linearly, which stays far below a microsecond.
pub const DEFAULT_STREAMS: usize = 16;

/// The smallest window: 16 KiB, the legacy kernel's `VM_MIN_READAHEAD`.
pub const MIN_WINDOW: u64 = 4;

/// Dense random reads: a random miss in an aligned region of this many
/// pages (at most the maximum window) of which one page in
/// [`DENSE_SHARE_START`] is already cached reads the region's absent pages with
/// the request, in one window. This is the kernel's "the more overall read
/// density, the more possible gain" (Wu's context readahead, which
/// `ondemand` gets from the cached pages before a miss) made a rule of its
/// own: an index lookup in sqlite3 visits B-tree and table pages of a file
/// that fits the cache several times each, and a region that already holds
/// a quarter of its pages is being read all over.
pub const DENSE_REGION: u64 = 128;
/// See [`DENSE_REGION`]: a region is dense once 1 page in this many is
/// cached, at first (1 in 4). Each dense window carries a lookahead marker
/// on one of the pages it brings in; two marker hits (net) double the
/// divisor, up to [`DENSE_SHARE_MAX`] (1 in 16: regions read earlier), and
/// two markers aging out unread ([`DENSE_MARKERS`] later windows) halve it,
/// down to 1, where the rule is off. Sqlite3's index range scans, whose
/// regions end up half read, learn 1 in 16; its point lookups, which visit
/// one page in five, turn the rule off before it costs.
pub const DENSE_SHARE_START: u64 = 2;
/// See [`DENSE_SHARE_START`].
pub const DENSE_SHARE_MAX: u64 = 16;
/// Dense windows whose markers are remembered.
pub const DENSE_MARKERS: usize = 128;
/// ...and only in a file that takes at most 1/this of the cache: reading
/// the rest of regions of a file larger than the cache would evict what
/// the reader came back for (aio-random reads over a file larger than
/// memory stay exactly as they are).
pub const DENSE_CACHE_SHARE: u64 = 2;

/// The largest stride period recognised, in pages (16 MiB of 4 KiB pages).
/// Wider gaps are better served as random reads: a window would span more
/// than the device can read sequentially faster than it can seek.
pub const MAX_STRIDE_PERIOD: u64 = 4096;

/// Gaps of a stride up to this many pages (64 KiB) are read through: the
/// window covers the whole span in one read. Skipping a gap costs one more
/// device request; reading it costs its bytes. Measured on the virtio disk
/// this was built on (`ahead bench`, stride 4 KiB read / 12 KiB skipped):
/// reading only the runs gave 76 MB/s of requested data against 32 MB/s for
/// the kernel, reading through the gaps several times more. On the hdd
/// model a short gap passes under the head in less time than a new request
/// costs, so the same holds there.
pub const MERGE_GAP: u64 = 16;

/// Most runs in a strided window that does not read through its gaps:
/// each run is a device request of its own, and 32 is as many as a SATA
/// SSD serves at once (NCQ); more only queue behind the reader's other
/// reads (on a disk, one at a time) and are wasted when the stream stops.
/// A window of the maximum size in single-page runs was 512 requests; on
/// the hdd model, a stride mixed with a scan ran at half `ondemand`'s
/// speed with it (the generated-pattern test, `tests/families.rs` of
/// ahead-sim).
pub const STRIDE_MAX_RUNS: u64 = 32;

/// ...and only while reading through at most quadruples the bytes read
/// (period ≤ 4 × run). A 4 KiB record every 68 KiB is within
/// [`MERGE_GAP`] but would read 17 times what is wanted; in the simulator's
/// iozone stride test at 4 KiB records that filled the cache with gap pages
/// evicted unused (94% of the readahead wasted, 3.8 MB/s against 4.4 for
/// reading the records alone).
pub const MAX_READ_THROUGH: u64 = 4;

/// Whether a stride's gaps are read through rather than skipped: reading
/// it at most multiplies the bytes by [`MAX_READ_THROUGH`], and
/// * on a device whose cost of a request is known (`Through::Cost`), a
///   whole period costs no more than one more request: a device capped in
///   IOPS and bandwidth spends the two budgets side by side, so a run read
///   on its own costs one request whatever its size, and reading through is
///   only cheaper while the period's bytes pass in that time (on a cloud
///   volume, 10 pages; a stride of 3 pages every 11 read through ran no
///   faster and read 1.6 times the bytes, in the generated-pattern test);
/// * else the gap is at most [`MERGE_GAP`] pages (`Through::Gap`), as
///   measured on the development disk.
fn read_through(run: u64, period: u64, through: Through) -> bool {
    let cheap = match through {
        Through::Never => false,
        Through::Cost(pages) => period <= pages,
        Through::Gap(pages) => period - run <= pages,
    };
    cheap && period <= MAX_READ_THROUGH * run
}

/// When stride gaps are read through ([`read_through`]).
#[derive(Clone, Copy, Debug)]
enum Through {
    /// Never (the runs of a sweep are already sized to the cache).
    Never,
    /// Periods of at most this many pages: one request's cost.
    Cost(u64),
    /// Gaps of at most this many pages.
    Gap(u64),
}

/// Where the device's costs are known, a stride is read through only where
/// that is cheaper by this factor (two): a period that costs at most half
/// a request ([`DeviceCost::request_pages`]); an irregular stride's gap at
/// most a quarter of the latency a reader waits
/// ([`DeviceCost::latency_pages`], twice the margin: the kernel's own
/// readahead already follows gaps of one page, so less is left to gain).
/// At a margin of one the trade often came out even in time while the
/// bytes grew 1.3–3.5 times (the generated-pattern test: a 3-page stride
/// every 10 pages on the `cloud` profile, a jittered 2-page stride mixed
/// with a scan on `fast`): the gaps' bytes take bandwidth that other reads
/// of the same reader share, while those reads hide some of the latency.
///
/// [`DeviceCost::request_pages`]: super::DeviceCost::request_pages
/// [`DeviceCost::latency_pages`]: super::DeviceCost::latency_pages
const THROUGH_MARGIN: u64 = 2;

/// How far a stream's windows may reach on this device: which stride gaps
/// they read through, and the most runs a strided window that skips its
/// gaps may hold.
#[derive(Clone, Copy, Debug)]
struct Reach {
    through: Through,
    /// For an irregular stride, whose alternative is not runs read ahead
    /// but requests waited for: gaps cheaper to read than a request's
    /// latency ([`super::DeviceCost::latency_pages`]).
    irregular: Through,
    max_runs: u64,
}

impl Reach {
    /// From what the engine knows of its device: [`MERGE_GAP`] and
    /// [`STRIDE_MAX_RUNS`] where it knows nothing; runs for twice the
    /// requests the device serves at once (one window being read while the
    /// next is issued) where it knows that.
    fn of(view: &dyn CacheView) -> Reach {
        let cost = view.device_cost();
        Reach {
            through: cost.map_or(Through::Gap(MERGE_GAP), |c| {
                Through::Cost(c.request_pages / THROUGH_MARGIN)
            }),
            irregular: cost.map_or(Through::Gap(MERGE_GAP), |c| {
                Through::Gap(c.latency_pages / (2 * THROUGH_MARGIN))
            }),
            max_runs: cost.map_or(STRIDE_MAX_RUNS, |c| {
                (2 * c.parallelism).clamp(1, STRIDE_MAX_RUNS)
            }),
        }
    }
}

/// A strided window of `runs` runs from `start`, or, if the gap is cheaper
/// to read through than to skip ([`read_through`]), a forward window of
/// whole periods (so that consecutive windows tile the file) reading no
/// more pages than the `runs * run` it was granted. A window that skips its
/// gaps holds at most `reach.max_runs` runs.
fn strided_window(
    start: u64,
    run: u64,
    period: u64,
    runs: u64,
    async_runs: u64,
    reach: Reach,
) -> Window {
    let granted = runs * run;
    if read_through(run, period, reach.through) && granted >= period {
        let periods = granted / period;
        let async_periods = (async_runs * run).div_ceil(period).min(periods);
        return Window::forward(start, periods * period, async_periods * period);
    }
    let runs = runs.min(reach.max_runs);
    let async_runs = async_runs.min(runs);
    let size = (runs - 1) * period + run;
    let async_size = if async_runs == 0 {
        0
    } else {
        (async_runs - 1) * period + run
    };
    Window {
        start,
        size,
        async_size,
        shape: Shape::Strided { run, period },
    }
}

/// The pages of `window` a stream going `direction` expects its reader to
/// take, by which the window is judged ([`super::accuracy`]): the runs of a
/// stride, not the gaps a window reads through because that is cheaper than
/// skipping them, nor the further columns a sweep reads for later sweeps
/// (those are judged by eviction, [`Sweep`]); for an irregular stride, the
/// share of the span its run is of its period.
fn expected_pages(direction: Direction, window: &Window) -> u64 {
    match direction {
        Direction::Strided { run, period } => Window {
            shape: Shape::Strided { run, period },
            ..*window
        }
        .pages()
        .min(window.pages()),
        Direction::Irregular { run, period } => {
            (window.size * run / period.max(1)).clamp(1, window.pages())
        }
        _ => window.pages(),
    }
}

/// Stride confirmations needed before a strided window is issued: the gap
/// seen twice.
pub const STRIDE_CONFIRMATIONS: u32 = 2;

/// A gap that differs from a stream's period by at most this many pages
/// (and at most a quarter of the period) continues the stream as an
/// *irregular* stride: B-tree leaves, variable-length records, rows fetched
/// in rowid order (sqlite3 visiting every 200th row of 400-byte rows steps
/// 20 or 21 pages). Such a stream cannot be predicted page by page; its
/// windows read through the whole span where the gaps are cheaper to read
/// than to skip (what the device charges, [`crate::ra::DeviceCost`]), and nothing beyond the request where
/// they are not.
pub const STRIDE_JITTER: u64 = 2;

/// A strided reader that, at the end of its sweep, starts the next sweep a
/// little above where the last one began: the columns of a row-major table
/// read one after the other, or iozone's stride test (record `r` is read in
/// pass `r mod 17`, after its first pass wraps to record 1). Its windows
/// also read the next columns of every run, as many as
/// [`SWEEP_CACHE_SHARE`] of the cache can hold until the sweeps that want
/// them arrive, so that those sweeps find them cached: one visit of the
/// disk head per run for several sweeps instead of one per sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sweep {
    /// First page of the first sweep (column 0).
    base: u64,
    /// Distance between the first pages of consecutive sweeps (at most a
    /// run: columns are adjacent or overlap).
    step: u64,
    /// Pages from the first to the last run of the previous sweep.
    span: u64,
    /// Columns read ahead with each run by the latest window.
    cols: u64,
    /// Most columns to read ahead: one fewer after every sweep that finds
    /// columns read ahead for it evicted.
    cap: u64,
    /// This sweep has lowered `cap` already (once per sweep).
    shrunk: bool,
}

/// Share of the cache that the columns of a sweep, with those read ahead
/// for later sweeps, may fill: three quarters (numerator, denominator),
/// leaving a quarter to everything else the cache holds. If that proves too
/// much, columns are evicted before their sweep comes, and each sweep that
/// finds that reads one column fewer from then on: a few pages lost (to pages
/// that were cached when the window passed, so not read again, and aged out
/// before their sweep) cost one column, not half of them.
const SWEEP_CACHE_SHARE: (u64, u64) = (3, 4);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Unknown,
    Forward,
    Backward,
    Strided {
        run: u64,
        period: u64,
    },
    /// Requests of `run` pages about `period` pages apart, the gap varying
    /// by up to [`STRIDE_JITTER`].
    Irregular {
        run: u64,
        period: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Stream {
    live: bool,
    last_used: u64,
    direction: Direction,
    last: Request,
    /// Candidate stride period and how many times it was seen.
    period: u64,
    confirmations: u32,
    /// First page of the stream's first request.
    origin: u64,
    /// Set when this strided stream is one sweep of several.
    sweep: Option<Sweep>,
    /// Current window size, in pages read.
    size: u64,
    /// Thrash cap on the window, in pages read.
    cap: u64,
    /// Ramp once more on the next window (a late prefetch was seen).
    boost: bool,
    /// Start of the last window whose eviction already shrank the stream:
    /// waste shrinks a stream once per window, not once per page.
    shrunk_for: Option<u64>,
    /// The last two windows issued, with the reader's page when each was
    /// and what of them was used.
    window: Option<Issued>,
    previous: Option<Issued>,
    /// The record of this stream's settled windows.
    ledger: Ledger,
    /// Speculation stopped ([`super::accuracy`]): requests are read as
    /// they are until `rearm` reaches [`REARM_RUN`].
    held: bool,
    /// Exact continuations in a row while held.
    rearm: u32,
    /// A gap of this stream has moved ([`Match::Jitter`]): it stays an
    /// irregular stride, never predicted page by page again.
    jittered: bool,
    /// Pages its requests asked for. A stream by ahead's own rules reads
    /// ahead no more than this in one window ([`Stream::shown`]).
    seen: u64,
    /// Forward, but continued after other streams' requests.
    interleaved: bool,
}

impl Stream {
    const EMPTY: Stream = Stream {
        live: false,
        last_used: 0,
        direction: Direction::Unknown,
        last: Request { index: 0, count: 0 },
        period: 0,
        confirmations: 0,
        origin: 0,
        sweep: None,
        size: 0,
        cap: u64::MAX,
        boost: false,
        shrunk_for: None,
        window: None,
        previous: None,
        ledger: Ledger::EMPTY,
        held: false,
        rearm: 0,
        jittered: false,
        seen: 0,
        interleaved: false,
    };

    fn owns(&self, index: u64) -> Option<u64> {
        self.owning_window(index).map(|(_, issued_at)| issued_at)
    }

    fn owning_window(&self, index: u64) -> Option<(Window, u64)> {
        [self.window, self.previous]
            .into_iter()
            .flatten()
            .find(|i| i.window.contains(index))
            .map(|i| (i.window, i.reader_at))
    }

    /// Whether this stream reads ahead by ahead's own rules (anything but
    /// the kernel's forward stream: a forward stream continued across
    /// another stream's requests is ahead's too, the kernel keeps one),
    /// which are held to account.
    fn speculates_beyond_the_kernel(&self) -> bool {
        self.direction != Direction::Forward || self.interleaved
    }

    /// `pages`, cut to what the stream has shown ([`Stream::seen`]) if it
    /// reads by ahead's own rules (a sweep's columns excepted: they are
    /// sized to the cache and judged by eviction).
    ///
    /// A stream that reads by ahead's own rules (backward, strided, irregular,
    /// interleaved) reads ahead no more pages in one window than its requests
    /// have asked for so far. Where the stream stops, what its last window
    /// read ahead is lost; so bounded, a stream loses at most what it used,
    /// and a short one meets [`super::accuracy::ACCURACY_FLOOR`] even at its
    /// end. (h5py reading a column of 64 chunks, a stride of 8 pages every 512,
    /// ended 0.46 accurate under `ahead run` without it: its last windows ran
    /// 32 runs past the column.) A long stream reaches the maximum window as
    /// before.
    fn shown(&self, pages: u64) -> u64 {
        if self.speculates_beyond_the_kernel() && self.sweep.is_none() {
            pages.min(self.seen.max(1))
        } else {
            pages
        }
    }

    /// Held, and shaped by one of ahead's own rules: it reads exactly what
    /// is asked.
    fn holding(&self) -> bool {
        self.held && self.speculates_beyond_the_kernel()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Match {
    Forward,
    Backward,
    Stride,
    /// About one period after the stream's last request
    /// ([`STRIDE_JITTER`]), not exactly.
    Jitter,
    StrideCandidate(u64),
    InsideWindow,
}

/// The `ahead` policy's per-file state.
#[derive(Clone, Debug)]
pub struct Ahead {
    max: u64,
    clock: u64,
    streams: Vec<Stream>,
    current: Option<usize>,
    dense: Dense,
    /// The record of every settled window of ahead's own rules in this
    /// file; while it is poor, new streams start held.
    ledger: Ledger,
    /// The kernel's context readahead as a fallback
    /// ([`RaConfig::context_readahead`]).
    context: bool,
    /// Exact continuations that re-arm a held stream in this file: from
    /// [`REARM_RUN`], doubled each time a stream is held (up to
    /// [`REARM_MAX`]), halved again by each window settled while a stream
    /// has a proven record ([`Ledger::proven`]).
    rearm_need: u32,
}

/// The dense-region rule's state ([`DENSE_REGION`]): the share of a region
/// that must be cached before the rest is read, learnt from whether the
/// pages such windows bring in get read.
#[derive(Clone, Debug)]
struct Dense {
    /// A region's cached pages × `share` ≥ its size makes it dense.
    share: u64,
    /// Evidence since the share last moved: + a marker hit, − a marker
    /// that aged out unread.
    score: i32,
    /// Marker pages of the latest dense windows (0 = empty).
    markers: [u64; DENSE_MARKERS],
    next: usize,
}

impl Dense {
    fn new() -> Dense {
        Dense {
            share: DENSE_SHARE_START,
            score: 0,
            markers: [0; DENSE_MARKERS],
            next: 0,
        }
    }

    /// A dense window went out with its marker on `page` (+1 so that page
    /// 0 is not the empty slot).
    fn issued(&mut self, page: u64) {
        if self.markers[self.next] != 0 {
            // The oldest marker aged out unread: that window's pages are
            // likely wasted.
            self.vote(-1);
        }
        self.markers[self.next] = page + 1;
        self.next = (self.next + 1) % DENSE_MARKERS;
    }

    /// A marker hit: if it was a dense window's, count it and say so.
    fn hit(&mut self, page: u64) -> bool {
        match self.markers.iter().position(|&m| m == page + 1) {
            Some(i) => {
                self.markers[i] = 0;
                self.vote(1);
                true
            }
            None => false,
        }
    }

    fn vote(&mut self, v: i32) {
        self.score += v;
        if self.score >= 2 {
            self.share = (self.share * 2).min(DENSE_SHARE_MAX);
            self.score = 0;
        } else if self.score <= -8 {
            self.share = (self.share / 2).max(1);
            self.score = 0;
        }
    }
}

impl Ahead {
    /// A fresh state with `config.streams` slots (allocated once, here).
    pub fn new(config: RaConfig) -> Ahead {
        Ahead {
            max: config.max_pages.max(1),
            clock: 0,
            streams: vec![Stream::EMPTY; config.streams.max(1)],
            current: None,
            dense: Dense::new(),
            ledger: Ledger::EMPTY,
            context: config.context_readahead,
            rearm_need: REARM_RUN,
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
    fn credit(&mut self, req: Request) {
        for s in self.streams.iter_mut().filter(|s| s.live) {
            for issued in [&mut s.window, &mut s.previous].into_iter().flatten() {
                issued.credit(req);
            }
        }
    }

    fn find(&self, req: Request) -> Option<(usize, Match)> {
        let mut best: Option<(usize, Match, u64)> = None;
        let mut consider = |slot: usize, m: Match, used: u64| {
            let rank = |m: Match| match m {
                Match::Forward | Match::Backward | Match::Stride | Match::Jitter => 0,
                Match::InsideWindow => 1,
                Match::StrideCandidate(_) => 2,
            };
            let better = match best {
                None => true,
                Some((_, bm, bused)) => rank(m) < rank(bm) || (rank(m) == rank(bm) && used > bused),
            };
            if better {
                best = Some((slot, m, used));
            }
        };
        for (slot, s) in self.streams.iter().enumerate() {
            if !s.live {
                continue;
            }
            let last_end = s.last.end();
            let forwardish = matches!(s.direction, Direction::Forward | Direction::Unknown);
            if forwardish
                && (req.index == last_end || req.index + 1 == last_end)
                && req.index >= s.last.index
            {
                consider(slot, Match::Forward, s.last_used);
                continue;
            }
            let backwardish = matches!(s.direction, Direction::Backward | Direction::Unknown);
            if backwardish
                && req.index < s.last.index
                && (req.end() == s.last.index || req.end() == s.last.index + 1)
            {
                consider(slot, Match::Backward, s.last_used);
                continue;
            }
            if s.period > 0 && req.index == s.last.index + s.period && req.count == s.last.count {
                consider(slot, Match::Stride, s.last_used);
                continue;
            }
            let jitter = STRIDE_JITTER.min(s.period / 4);
            if jitter > 0
                && req.count == s.last.count
                && req.index > last_end
                && req.index.abs_diff(s.last.index + s.period) <= jitter
            {
                consider(slot, Match::Jitter, s.last_used);
                continue;
            }
            if s.owns(req.index).is_some() {
                consider(slot, Match::InsideWindow, s.last_used);
                continue;
            }
            // A stream that has seen one request may turn out strided,
            // even the one at page 0 that was taken for a whole-file read.
            let one_request = s.direction == Direction::Unknown
                || (s.direction == Direction::Forward && s.last.index == s.origin);
            if one_request
                && req.index > last_end
                && req.count == s.last.count
                && req.index - s.last.index <= MAX_STRIDE_PERIOD
            {
                consider(
                    slot,
                    Match::StrideCandidate(req.index - s.last.index),
                    s.last_used,
                );
            }
        }
        best.map(|(slot, m, _)| (slot, m))
    }

    fn new_stream(&mut self, req: Request) -> usize {
        let slot = self
            .streams
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| if s.live { s.last_used } else { 0 })
            .map(|(i, _)| i)
            .unwrap_or(0);
        if self.streams[slot].live {
            self.settle_all(slot);
        }
        self.streams[slot] = Stream {
            live: true,
            last_used: self.clock,
            last: req,
            origin: req.index,
            // A file whose speculation has not paid lately makes a new
            // stream earn it first.
            held: self.ledger.poor(),
            seen: req.count,
            // The first read of a file is taken as the start of a
            // whole-file read, as the kernel does.
            direction: if req.index == 0 {
                Direction::Forward
            } else {
                Direction::Unknown
            },
            ..Stream::EMPTY
        };
        slot
    }

    /// If `req` starts the next sweep of a strided stream (the same run,
    /// at most one run above where that stream's sweep began, after it went
    /// further), turns that stream into the new sweep and returns its slot.
    fn next_sweep(&mut self, req: Request) -> Option<usize> {
        let (slot, _) = self
            .streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let Direction::Strided { run, period } = s.direction else {
                    return None;
                };
                let step = req.index.checked_sub(s.origin)?;
                let base = s.sweep.map_or(s.origin, |w| w.base);
                let fits = req.index - base + run <= period;
                let same_step = s.sweep.is_none_or(|w| w.step == step);
                (s.live
                    && req.count == run
                    && step > 0
                    && step <= run
                    && fits
                    && same_step
                    && req.index < s.last.index)
                    .then_some((i, s.last_used))
            })
            .max_by_key(|&(_, used)| used)?;
        self.settle_all(slot);
        let old = self.streams[slot];
        let step = req.index - old.origin;
        let sweep = Sweep {
            base: old.sweep.map_or(old.origin, |w| w.base),
            step,
            span: old.last.index.saturating_sub(old.origin),
            cols: old.sweep.map_or(0, |w| w.cols),
            cap: old.sweep.map_or(u64::MAX, |w| w.cap),
            shrunk: false,
        };
        self.streams[slot] = Stream {
            live: true,
            last_used: self.clock,
            direction: old.direction,
            last: req,
            period: old.period,
            confirmations: old.confirmations,
            origin: req.index,
            sweep: Some(sweep),
            ledger: old.ledger,
            held: old.held,
            rearm: old.rearm,
            ..Stream::EMPTY
        };
        Some(slot)
    }

    /// How many further columns the windows of a sweep read with each run:
    /// what is left of the period, what [`SWEEP_CACHE_SHARE`] of the cache
    /// holds for every run of a sweep (as far as the last sweep went),
    /// widened, what keeps a widened run within half the maximum window (or
    /// within the whole of it, if half leaves no room), and the cap that
    /// lost columns left.
    fn sweep_columns(&self, s: &Stream, view: &dyn CacheView) -> u64 {
        let (Some(w), Direction::Strided { run, period }) = (s.sweep, s.direction) else {
            return 0;
        };
        let Some(capacity) = view.capacity_pages() else {
            return 0;
        };
        let offset = s.origin - w.base;
        let left = period.saturating_sub(run + offset) / w.step;
        let positions = w.span / period + 1;
        let (num, den) = SWEEP_CACHE_SHARE;
        let per_position = capacity / den * num / positions;
        let by_cache = per_position.saturating_sub(run) / w.step;
        // Two widened runs to a window, so that its marker pipelines the
        // next one; if not even one more column fits that, one run to a
        // window, read when the reader gets there.
        let by_max = match (self.max / 2).saturating_sub(run) / w.step {
            0 => self.max.saturating_sub(run) / w.step,
            n => n,
        };
        left.min(by_cache).min(by_max).min(w.cap)
    }

    /// The direction windows of stream `slot` are shaped by: its own, with
    /// the runs of a sweep widened to the columns read ahead, and an
    /// irregular stride read through as a forward stream; and the longest
    /// stride gap its windows may read through (none for a sweep: its runs
    /// are sized to the cache). `None`: the stream reads nothing beyond
    /// the request (an irregular stride whose gaps cost more to read than
    /// to skip).
    fn reading_direction(
        &mut self,
        slot: usize,
        view: &dyn CacheView,
    ) -> Option<(Direction, Reach)> {
        let s = self.streams[slot];
        let reach = Reach::of(view);
        let cols = self.sweep_columns(&s, view);
        match (s.direction, &mut self.streams[slot].sweep) {
            (Direction::Strided { run, period }, Some(w)) => {
                w.cols = cols;
                let run = run + cols * w.step;
                let sweep = Reach {
                    through: Through::Never,
                    irregular: Through::Never,
                    max_runs: STRIDE_MAX_RUNS,
                };
                Some((Direction::Strided { run, period }, sweep))
            }
            (Direction::Irregular { run, period }, _) => {
                read_through(run, period, reach.irregular).then_some((Direction::Forward, reach))
            }
            (d, _) => Some((d, reach)),
        }
    }

    fn effective_max(&self, s: &Stream) -> u64 {
        self.max.min(s.cap).max(MIN_WINDOW.min(self.max))
    }

    /// A window of the stream's shape holding about `pages` pages read,
    /// starting at the request (forward, strided) or ending with it
    /// (backward). Always holds the whole request.
    /// `reach` bounds a strided window ([`Reach`]).
    fn shaped(
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
    fn following(direction: Direction, prev: &Window, pages: u64, reach: Reach) -> Option<Window> {
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

    /// Keeps `window`, issued for `req`, as stream `slot`'s latest; the
    /// window before the previous one leaves the stream and is settled.
    fn record(&mut self, slot: usize, window: Window, req: Request) -> Window {
        let s = &mut self.streams[slot];
        let expected = expected_pages(s.direction, &window);
        let gone = s.previous.take();
        s.previous = s.window;
        s.window = Some(Issued::new(window, expected, req, req.index));
        if let Some(issued) = gone {
            self.settle(slot, issued);
        }
        window
    }

    fn on_miss(&mut self, req: Request, view: &dyn CacheView) -> Option<Window> {
        let Some(slot) = self.current else {
            return Some(self.fallback(req, view));
        };
        let s = self.streams[slot];
        if s.direction == Direction::Unknown || s.holding() {
            // Not (yet) a stream, or one whose speculation did not pay.
            return Some(self.fallback(req, view));
        }
        let max = self.effective_max(&s);
        // Thrashing: readahead pages of this stream were evicted before use.
        let thrashed = view.shadow(req.index).is_some_and(|sh| sh.evicted_unused);
        let Some((direction, reach)) = self.reading_direction(slot, view) else {
            return Some(self.fallback(req, view));
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
                .min(self.effective_max(&st))
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
            next_window(pages, max)
        } else {
            pages
        };
        let pages = s.shown(pages).max(min_pages);
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

    /// Whether the dense-region rule may act on this file: it fits the
    /// cache twice over ([`DENSE_CACHE_SHARE`]) and the rule has not turned
    /// itself off. In such a file it takes the place of the kernel's
    /// context readahead: both read what the cache's density says the
    /// reader is after (with both, 0.23–0.28 of the readahead on the large
    /// sqlite3 index range trace was wasted, against 0.16 with one).
    fn dense_applies(&self, view: &dyn CacheView) -> bool {
        self.dense_fits(view) && self.dense.share > 1
    }

    /// Whether the file is one the dense-region rule is for (it fits the
    /// cache twice over). In such a file, the kernel's context readahead
    /// is not used even once the dense rule has turned itself off: both
    /// read ahead on the cache's density, and the dense rule's evidence
    /// said that does not pay here.
    fn dense_fits(&self, view: &dyn CacheView) -> bool {
        view.capacity_pages()
            .is_some_and(|c| view.file_pages() <= c / DENSE_CACHE_SHARE)
    }

    /// What ahead reads where none of its own rules speaks for a miss: in
    /// a file the dense rule is for, the rest of a dense region; else the
    /// kernel's context readahead ([`Ahead::context`]); else the request as
    /// it is.
    fn fallback(&mut self, req: Request, view: &dyn CacheView) -> Window {
        if !self.dense_fits(view) {
            if let Some(w) = self.current.and_then(|slot| self.context(slot, req, view)) {
                return w;
            }
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
    fn context(&mut self, slot: usize, req: Request, view: &dyn CacheView) -> Option<Window> {
        if !self.context || req.index == 0 || self.streams[slot].direction != Direction::Unknown {
            return None;
        }
        let (history, from_start) = match super::prev_miss(view, req.index - 1, self.max) {
            super::PrevMiss::At(miss) => (req.index - 1 - miss, false),
            super::PrevMiss::FromStart => (req.index, true),
            super::PrevMiss::NotWithin => (self.max, false),
        };
        if history <= req.count {
            return None;
        }
        let history = if from_start { history * 2 } else { history };
        let size = (history + req.count).min(self.max).max(req.count);
        // One window, no marker, and the ramp starts afresh if the reader
        // comes to its end: a stream the table lost is taken back on its
        // history, but a random request that lands after cached pages
        // (the pages of a dense region, another stream's) costs one window.
        let s = &mut self.streams[slot];
        s.direction = Direction::Forward;
        s.size = 0;
        let w = Window::forward(req.index, size, 0);
        Some(self.record(slot, w, req))
    }

    /// A random miss: exactly the request, unless it falls in a dense
    /// region of a file the cache can hold, whose absent pages are then
    /// read with it in one window ([`DENSE_REGION`]).
    fn dense_or_as_is(&mut self, req: Request, view: &dyn CacheView) -> Window {
        let as_is = Window::forward(req.index, req.count, 0);
        if !self.dense_applies(view) {
            return as_is;
        }
        let file = view.file_pages();
        let region = DENSE_REGION.min(self.max.max(MIN_WINDOW));
        let start = req.index / region * region;
        let end = (start + region).min(file).max(req.end());
        let size = end - start;
        let present = (start..end).filter(|&p| view.is_present(p)).count() as u64;
        if present * self.dense.share < size {
            return as_is;
        }
        // The marker goes on an absent page past the request, nearest the
        // middle: whether the reader comes to it says whether such windows
        // pay.
        let absent = |p: &u64| !view.is_present(*p) && (*p < req.index || *p >= req.end());
        let marker = (start + size / 2..end)
            .find(absent)
            .or_else(|| (start..start + size / 2).rev().find(absent));
        match marker {
            Some(m) => {
                self.dense.issued(m);
                Window::forward(start, size, end - m)
            }
            None => as_is,
        }
    }

    fn on_marker(&mut self, req: Request, view: &dyn CacheView) -> Option<Window> {
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
            // is known to go another way (backwards, strided): then the
            // marker is a leftover of a window it has moved on from.
            if let Some(c) = self.current {
                if matches!(
                    self.streams[c].direction,
                    Direction::Backward | Direction::Strided { .. }
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
        let max = self.effective_max(&s);
        let mut pages = next_window(s.size.max(1), max);
        if s.boost {
            pages = next_window(pages, max);
        }
        let pages = s.shown(pages);
        let st = &mut self.streams[slot];
        st.boost = false;
        st.size = pages;
        st.last_used = self.clock;
        let (direction, reach) = self.reading_direction(slot, view)?;
        let w = Self::following(direction, &prev, pages, reach)?;
        Some(self.record(slot, w, req))
    }

    /// Page `index` was evicted before use: if it is one of the columns a
    /// sweep reads ahead, that sweep (and the ones after it) read one column
    /// fewer.
    fn sweep_lost(&mut self, index: u64) {
        for s in self.streams.iter_mut().filter(|s| s.live) {
            let (Some(w), Direction::Strided { run, period }) = (&mut s.sweep, s.direction) else {
                continue;
            };
            if w.shrunk || index < w.base {
                continue;
            }
            let column = (index - w.base) % period;
            let first = s.origin - w.base;
            if column >= first && column < first + run + w.cols * w.step {
                w.shrunk = true;
                w.cap = w.cols.saturating_sub(1);
            }
        }
    }

    fn stream_owning(&self, index: u64) -> Option<usize> {
        self.streams
            .iter()
            .position(|s| s.live && s.owns(index).is_some())
    }
}

impl Policy for Ahead {
    fn name(&self) -> &'static str {
        "ahead"
    }

    fn max_pages(&self) -> u64 {
        self.max
    }

    fn begin(&mut self, req: Request) {
        self.clock += 1;
        self.credit(req);
        let previous = self.current;
        let found = self.find(req);
        let continues = matches!(
            found,
            Some((
                _,
                Match::Forward | Match::Backward | Match::Stride | Match::Jitter
            ))
        );
        if !continues {
            if let Some(slot) = self.next_sweep(req) {
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
                let s = &mut self.streams[slot];
                match m {
                    Match::Forward => {
                        if s.direction == Direction::Unknown {
                            s.direction = Direction::Forward;
                        }
                        if previous != Some(slot) {
                            s.interleaved = true;
                        }
                    }
                    Match::Backward => {
                        if s.direction == Direction::Unknown {
                            s.direction = Direction::Backward;
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
                            s.direction = Direction::Strided {
                                run: req.count,
                                period: s.period,
                            };
                        }
                    }
                    Match::Jitter => {
                        // The gap moved by a page or two: not a stride to
                        // predict page by page, now or later. The period
                        // follows the latest gap, so a slow drift stays
                        // matched.
                        s.period = req.index - s.last.index;
                        s.confirmations = 0;
                        if !s.jittered {
                            // What failed was the page-exact prediction;
                            // the irregular rule is judged on its own
                            // windows, and soon.
                            s.jittered = true;
                            s.held = false;
                            s.ledger = Ledger::PROBATION;
                        }
                        if req.count <= self.max {
                            s.direction = Direction::Irregular {
                                run: req.count,
                                period: s.period,
                            };
                        }
                    }
                    Match::StrideCandidate(period) => {
                        s.period = period;
                        s.confirmations = 1;
                        s.direction = Direction::Unknown;
                    }
                    Match::InsideWindow => {}
                }
                if s.held {
                    // Re-armed only by requests that continue the stream
                    // exactly as its pattern predicts (a gap that moved
                    // is the evidence that held it).
                    let exact = matches!(m, Match::Forward | Match::Backward | Match::Stride);
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

    fn describe(&self) -> Vec<String> {
        let mut live: Vec<&Stream> = self.streams.iter().filter(|s| s.live).collect();
        live.sort_by_key(|s| std::cmp::Reverse(s.last_used));
        let mut out: Vec<String> = live
            .iter()
            .map(|s| {
                let dir = match s.direction {
                    Direction::Unknown => "unknown".to_string(),
                    Direction::Forward => "forward".to_string(),
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
        self.streams.iter().any(|s| {
            s.live
                && [s.window, s.previous]
                    .into_iter()
                    .flatten()
                    .any(|i| i.used < i.speculative)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ra::tests_support::Sim;
    use crate::ra::PolicyKind;
    use crate::testdata::column_order;

    fn sim(max: u64) -> Sim {
        Sim::new(PolicyKind::Ahead, max, 100_000)
    }

    /// The dense-region rule through `drive`, on a table that knows its
    /// capacity.
    fn dense_table(file: u64, capacity: u64) -> crate::ra::SparseTable {
        let mut t = crate::ra::SparseTable::new(file);
        t.capacity = Some(capacity);
        t
    }

    /// Random single pages: every other page of region 128..256, in an
    /// order no stream follows, then one page between them (the region is
    /// half cached when it is asked for); the windows the policy decided.
    fn every_other_page_at_random(capacity: u64) -> crate::ra::SparseTable {
        let mut p = Ahead::new(RaConfig::with_max_pages(128));
        let mut t = dense_table(10_000, capacity);
        let mut order: Vec<u64> = (128..256).step_by(2).collect();
        fastrand::Rng::with_seed(5).shuffle(&mut order);
        order.push(129);
        for &i in &order {
            crate::ra::drive(&mut p, &mut t, Request::new(i, 1));
        }
        t
    }

    #[test]
    fn a_random_miss_in_a_half_cached_region_reads_the_rest() {
        let t = every_other_page_at_random(100_000);
        assert!(
            t.windows.iter().any(|w| w.start == 128 && w.size == 128),
            "no dense window: {:?}",
            t.windows
        );
        assert!((128..256).all(|i| t.present.contains(&i)));
    }

    #[test]
    fn a_file_larger_than_half_the_cache_keeps_random_reads_as_they_are() {
        let t = every_other_page_at_random(10_000);
        assert!(
            !t.windows.iter().any(|w| w.start == 128 && w.size == 128),
            "{:?}",
            t.windows
        );
    }

    #[test]
    fn dense_windows_whose_pages_go_unread_turn_the_rule_off() {
        let mut d = Dense::new();
        for page in 0..(DENSE_MARKERS as u64 + 8 * 4) {
            d.issued(page * 1000);
        }
        assert_eq!(
            d.share, 1,
            "the rule should be off after markers aged out unread"
        );
        let mut d = Dense::new();
        for page in 0..4 {
            d.issued(page);
            assert!(d.hit(page));
        }
        assert_eq!(
            d.share,
            DENSE_SHARE_START * 4,
            "two net hits double the share, twice"
        );
    }

    /// Single pages walking up a file with gaps of 20 or 21 pages in the
    /// order sqlite3 takes when it fetches every 200th row of 400-byte
    /// rows: page-exact stride predictions land a page off half the time.
    fn rowid_walk(s: &mut Sim, from: u64, rows: u64) -> u64 {
        let rows_per_page = 9.5f64;
        let mut read = 0;
        for i in 0..rows {
            let page = from + ((i * 200) as f64 / rows_per_page) as u64;
            s.read(page, 1);
            read += 1;
        }
        read
    }

    #[test]
    fn regression_sqlite_in_list_a_stride_off_by_a_page_stops_speculating() {
        for max in [32, 512] {
            let wasted = |rows: u64| {
                let mut s = Sim::new(PolicyKind::Ahead, max, 200_000);
                let wanted = rowid_walk(&mut s, 100, rows);
                s.pages_read() - wanted
            };
            let (short, long) = (wasted(2000), wasted(6000));
            // The waste is paid once, while the rules learn, and does not
            // grow with the walk: a few windows' worth, not one per slip.
            let bound = 8 * crate::ra::accuracy::EVIDENCE_PAGES;
            assert!(short <= bound, "max {max}: {short} pages nobody asked for");
            assert!(
                long <= short + 16,
                "max {max}: waste grew from {short} to {long}"
            );
        }
    }

    #[test]
    fn a_held_file_rearms_for_a_clean_stride() {
        let mut s = sim(64);
        rowid_walk(&mut s, 100, 2000);
        let before = s.demand_ios();
        // Then a clean stride elsewhere in the file: read 1, skip 31.
        for k in 0..300u64 {
            s.read(60_000 + k * 32, 1);
        }
        let demand = s.demand_ios() - before;
        assert!(
            demand <= 3 + crate::ra::accuracy::REARM_RUN as u64 + 2,
            "a clean stride after a held one waited {demand} times"
        );
    }

    #[test]
    fn an_irregular_stride_with_short_gaps_is_read_through() {
        let mut s = sim(64);
        let mut rng = fastrand::Rng::with_seed(3);
        let mut at = 10_000u64;
        let mut wanted = 0;
        for _ in 0..600 {
            s.read(at, 1);
            wanted += 1;
            at += 3 + rng.u64(0..=1);
        }
        assert!(
            s.demand_ios() <= 8,
            "demand I/Os: {}, windows {:?}",
            s.demand_ios(),
            s.first_windows(12)
        );
        // Reading through costs the gaps, and no more.
        assert!(s.pages_read() <= at - 10_000 + 64, "{}", s.pages_read());
        assert!(wanted > 0);
    }

    #[test]
    fn an_irregular_stride_with_long_gaps_reads_only_what_is_asked() {
        let mut s = sim(64);
        let mut rng = fastrand::Rng::with_seed(4);
        let mut at = 10_000u64;
        let mut wanted = 0;
        for _ in 0..600 {
            s.read(at, 1);
            wanted += 1;
            at += 40 + rng.u64(0..=2);
        }
        let wasted = s.pages_read() - wanted;
        assert!(
            wasted <= 3 * crate::ra::accuracy::EVIDENCE_PAGES,
            "{wasted} wasted"
        );
    }

    #[test]
    fn sequential_matches_the_kernel_ramp() {
        let mut s = sim(32);
        for i in 0..200 {
            s.read(i, 1);
        }
        let w: Vec<(u64, u64, u64)> = s.first_windows(5);
        assert_eq!(
            w,
            vec![
                (0, 4, 3),
                (4, 8, 8),
                (12, 16, 16),
                (28, 32, 32),
                (60, 32, 32)
            ]
        );
        assert_eq!(s.demand_ios(), 0);
    }

    #[test]
    fn interleaved_streams_each_keep_a_window() {
        let mut s = sim(64);
        let bases = [1000u64, 20_000, 40_000, 60_000];
        for step in 0..400 {
            for b in bases {
                s.read(b + step, 1);
            }
        }
        // After ramp-up, every window is full size and no reader waits on a
        // demand read beyond the first two of each stream.
        assert!(
            s.demand_ios() <= 2 * bases.len() as u64,
            "demand I/Os: {}",
            s.demand_ios()
        );
        let full = s.windows().iter().filter(|w| w.size == 64).count();
        assert!(full > 20, "full windows: {full}");
    }

    #[test]
    fn backward_reads_are_read_ahead_downwards() {
        let mut s = sim(64);
        let mut at = 50_000u64;
        for _ in 0..500 {
            at -= 4;
            s.read(at, 4);
        }
        assert!(s
            .windows()
            .iter()
            .any(|w| w.shape == Shape::Backward && w.size >= 64));
        // Only the first two requests missed.
        assert!(s.demand_ios() <= 2, "demand I/Os: {}", s.demand_ios());
        for w in s.windows() {
            assert!(w.marker_page().is_none_or(|m| w.contains(m)));
        }
    }

    #[test]
    fn stride_is_confirmed_twice_then_read_as_runs() {
        let mut s = sim(64);
        // read 1 page, skip 31 (a gap wider than MERGE_GAP)
        for k in 0..300u64 {
            s.read(10_000 + k * 32, 1);
        }
        let strided: Vec<&Window> = s
            .windows()
            .iter()
            .filter(|w| matches!(w.shape, Shape::Strided { run: 1, period: 32 }))
            .collect();
        assert!(!strided.is_empty());
        // Nothing between the runs was read.
        for p in 10_000..19_600u64 {
            if (p - 10_000) % 32 != 0 {
                assert!(!s.cache.present[p as usize], "gap page {p} was read");
            }
        }
        assert!(s.demand_ios() <= 3, "demand I/Os: {}", s.demand_ios());
    }

    #[test]
    fn a_short_stride_gap_is_read_through() {
        let mut s = sim(64);
        // read 1 page, skip 3: cheaper to read the gaps than to skip them
        for k in 0..300u64 {
            s.read(10_000 + k * 4, 1);
        }
        assert!(s
            .windows()
            .iter()
            .skip(4)
            .all(|w| w.shape == Shape::Forward));
        assert!(s.windows().iter().all(|w| w.pages() <= 64));
        // After detection every page of the span is read, in few demand I/Os.
        let missing: Vec<u64> = (10_100..11_100u64)
            .filter(|&p| !s.cache.present[p as usize])
            .collect();
        assert!(
            missing.is_empty(),
            "{:?} {:?}",
            &missing[..missing.len().min(10)],
            s.first_windows(12)
        );
        assert!(s.demand_ios() <= 3, "demand I/Os: {}", s.demand_ios());
    }

    #[test]
    fn a_short_gap_that_would_multiply_the_bytes_is_not_read_through() {
        let mut s = sim(64);
        // read 1 page, skip 16: within MERGE_GAP, but 17 times the bytes
        for k in 0..300u64 {
            s.read(10_000 + k * 17, 1);
        }
        assert!(s
            .windows()
            .iter()
            .any(|w| matches!(w.shape, Shape::Strided { run: 1, period: 17 })));
        for p in 10_000..15_000u64 {
            if (p - 10_000) % 17 != 0 {
                assert!(!s.cache.present[p as usize], "gap page {p} was read");
            }
        }
    }

    /// iozone's stride read over `records` records of `run` pages: record
    /// `r + 17` after `r`, each pass starting one record above the last.
    /// Returns the number of windows issued during each pass.
    fn iozone_stride(s: &mut Sim, run: u64, records: u64) -> Vec<usize> {
        passes(records)
            .iter()
            .map(|pass| {
                let before = s.windows().len();
                for &r in pass {
                    s.read(r * run, run);
                }
                s.windows().len() - before
            })
            .collect()
    }

    /// [`column_order`] over `records` records, rows of 17, cut into its
    /// passes (a pass ends where the order goes back up the file).
    fn passes(records: u64) -> Vec<Vec<u64>> {
        let mut out: Vec<Vec<u64>> = Vec::new();
        for r in column_order(records, 17) {
            match out.last_mut() {
                Some(pass) if pass.last().is_some_and(|&l| r > l) => pass.push(r),
                _ => out.push(vec![r]),
            }
        }
        out
    }

    #[test]
    fn column_sweeps_read_the_next_columns_with_each_run() {
        // 100 rows of 17 records of 4 pages; the cache holds 2200 pages, so
        // three quarters of it give each of the 100 runs of a sweep 16
        // pages: the sweep's own column and 3 more.
        let mut s = Sim::new(PolicyKind::Ahead, 64, 6800);
        s.cache.capacity = Some(2200);
        let per_pass = iozone_stride(&mut s, 4, 1700);
        assert!(
            s.windows().iter().any(|w| w.shape
                == Shape::Strided {
                    run: 16,
                    period: 68
                }),
            "{:?}",
            &s.windows()[..s.windows().len().min(12)]
        );
        // Passes 1, 5, 9 and 13 (counting from 0) read columns 1-4, 5-8,
        // 9-12 and 13-16 with a window every few rows; the passes between
        // find theirs cached but for a few runs of the first row (which
        // the first, forward, window covered differently).
        for (pass, &n) in per_pass.iter().enumerate().take(17) {
            if pass > 1 && (pass - 1) % 4 != 0 {
                assert!(n <= 4, "pass {pass} issued {n} windows: {per_pass:?}");
            } else {
                assert!(n >= 10, "pass {pass} issued {n} windows: {per_pass:?}");
            }
        }
        // Nothing is read twice (the table panics on that) and nothing
        // outside the records: every page read is a page of the file.
        assert!(s.pages_read() <= 1700 * 4);
        // The marker of the first (forward) window, hit by a later pass,
        // does not turn the strided reader into a forward one: after that
        // window, no forward window reads more than a request.
        let forward: Vec<&Window> = s
            .windows()
            .iter()
            .skip(1)
            .filter(|w| w.shape == Shape::Forward && w.size > 4)
            .collect();
        assert!(forward.is_empty(), "{forward:?}");
    }

    #[test]
    fn a_small_maximum_still_reads_one_more_column_per_run() {
        // Max 8 pages, runs of 4: two widened runs do not fit a window, one
        // run of two columns does.
        let mut s = Sim::new(PolicyKind::Ahead, 8, 6800);
        s.cache.capacity = Some(2200);
        iozone_stride(&mut s, 4, 1700);
        assert!(s
            .windows()
            .iter()
            .any(|w| w.shape == Shape::Strided { run: 8, period: 68 }));
        assert!(s.windows().iter().all(|w| w.pages() <= 8));
    }

    #[test]
    fn sweeps_read_only_their_runs_when_the_cache_size_is_unknown() {
        let mut s = Sim::new(PolicyKind::Ahead, 64, 6800);
        let per_pass = iozone_stride(&mut s, 4, 1700);
        assert!(s
            .windows()
            .iter()
            .all(|w| !matches!(w.shape, Shape::Strided { run, .. } if run > 4)));
        // Every pass reads its own column.
        assert!(per_pass.iter().take(16).all(|&n| n > 0), "{per_pass:?}");
    }

    #[test]
    fn a_sweep_that_finds_its_columns_evicted_reads_one_fewer() {
        let mut s = Sim::new(PolicyKind::Ahead, 64, 6800);
        s.cache.capacity = Some(2200);
        let passes = passes(1700);
        // Pass 0, then pass 1 which reads columns 1-4 with each run.
        for &r in passes[..2].concat().iter() {
            s.read(r * 4, 4);
        }
        // Everything read ahead and not used yet is lost.
        assert!(s.evict_unused(0..6800) > 0);
        let before = s.windows().len();
        for &r in &passes[2] {
            s.read(r * 4, 4);
        }
        let runs: Vec<u64> = s.windows()[before..]
            .iter()
            .filter_map(|w| match w.shape {
                Shape::Strided { run, .. } => Some(run),
                _ => None,
            })
            .collect();
        // Column 2 is read again, with 2 more columns instead of 3.
        assert!(!runs.is_empty());
        assert!(runs.iter().all(|&r| r == 12), "{runs:?}");
    }

    #[test]
    fn random_reads_read_only_the_request() {
        let mut s = sim(64);
        let mut rng = 12345u64;
        for _ in 0..2000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let idx = (rng >> 33) % 99_000 + 1;
            s.read(idx, 2);
        }
        assert!(s.pages_read() <= 2 * 2000, "read {} pages", s.pages_read());
    }

    #[test]
    fn thrash_caps_the_window_and_rereads_lost_pages() {
        let mut s = sim(256);
        for i in 0..300 {
            s.read(i, 1);
        }
        // Windows so far (max 256 ramps 4, 16, 32, ...): ..., (116, 128)
        // issued at page 52, (244, 256) issued at page 116, (500, 256)
        // issued at page 244. Evict, unused, everything readahead brought in
        // past the reader.
        let evicted = s.evict_unused(300..100_000);
        assert!(evicted > 0);
        s.read(300, 1);
        let last = *s.windows().last().unwrap();
        assert_eq!(last.start, 300, "lost pages are read again at once");
        // 184 pages survived (from 116, where the lost page's window was
        // issued, to 300): the cap is 3/4 of that, 138. Two whole windows
        // were wasted,
        // halving the stream's 256 pages twice, to 64.
        assert_eq!(last.size, 64, "{last:?}");
        // The cap holds for the next windows.
        for i in 301..3000 {
            s.read(i, 1);
        }
        let after: Vec<u64> = s.windows().iter().rev().take(5).map(|w| w.size).collect();
        assert!(
            after.iter().all(|&n| n <= 184 * 3 / 4),
            "{last:?} then {after:?}"
        );
    }

    #[test]
    fn a_miss_always_reads_the_whole_request_in_one_io() {
        let mut s = sim(32);
        s.read(5000, 100);
        // One window, the request itself (a 100-page request is larger than
        // the 32-page maximum, and nothing predicts more), and no demand
        // read: one I/O.
        assert_eq!(s.demand_ios(), 0);
        assert_eq!(s.first_windows(2), vec![(5000, 100, 0)]);
    }
}
