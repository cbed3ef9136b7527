//! Strided streams: the window of a read-N-skip-M reader, when its gaps
//! are read through rather than skipped (from what the device charges),
//! how a window is judged against its runs, and sweeps (a table read
//! column by column).

use super::*;

/// Gaps of a stride up to this many pages (64 KiB) are read through: the
/// window covers the whole span in one read. Skipping a gap costs one more
/// device request; reading it costs its bytes. Measured on the virtio disk
/// this was built on (`ahead bench`, stride 4 KiB read / 12 KiB skipped):
/// reading only the runs gave 76 MB/s of requested data against 32 MB/s for
/// the kernel, reading through the gaps several times more. This is the
/// rule where the device's costs are unknown; where they are known
/// ([`crate::ra::DeviceCost`], as the simulator's models tell them) they
/// decide instead: on the disk model, whose track buffer serves a request
/// a short gap on at once, no gap is read through.
pub(crate) const MERGE_GAP: u64 = 16;

/// ...and only while reading through at most quadruples the bytes read
/// (period ≤ 4 × run). A 4 KiB record every 68 KiB is within
/// [`MERGE_GAP`] but would read 17 times what is wanted; in the simulator's
/// iozone stride test at 4 KiB records that filled the cache with gap pages
/// evicted unused (94% of the readahead wasted, 3.8 MB/s against 4.4 for
/// reading the records alone).
pub(crate) const MAX_READ_THROUGH: u64 = 4;

/// [`MAX_READ_THROUGH`] for `ahead run`'s hints: two, a gap no wider than
/// the run. There a gap's pages are charged to the file's speculation
/// budget and earn nothing (no reader takes them), and `--stats` counts
/// them unread in the file's `accuracy`; a window read through at most
/// twice its runs keeps both at one page used for each page wasted. At
/// four, `zipfile` taking every 10th member of ~4 KiB (an irregular stride
/// of 2 pages in 10) hinted 32 pages and read 6 of them, 1.09-1.18x plain.
/// (Buffered mode hints a stride as Direct mode reads it,
/// [`crate::ra::RaConfig::hint_gaps_as_reads`].)
pub(crate) const HINT_MAX_READ_THROUGH: u64 = 2;

/// Most runs in a strided window that does not read through its gaps:
/// each run is a device request of its own, and 32 is as many as a SATA
/// SSD serves at once (NCQ); more only queue behind the reader's other
/// reads (on a disk, one at a time) and are wasted when the stream stops.
/// A window of the maximum size in single-page runs was 512 requests; on
/// the hdd model, a stride mixed with a scan ran at half `ondemand`'s
/// speed with it (the generated-pattern test, `tests/families.rs` of
/// ahead-sim).
pub(crate) const STRIDE_MAX_RUNS: u64 = 32;

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
pub(super) fn read_through(run: u64, period: u64, through: Through, ratio: u64) -> bool {
    let cheap = match through {
        Through::Never => false,
        Through::Cost(pages) => period <= pages,
        Through::Gap(pages) => period.saturating_sub(run) <= pages,
    };
    cheap && period <= ratio * run
}

/// When stride gaps are read through ([`read_through`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Through {
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
/// [`DeviceCost::request_pages`]: crate::ra::DeviceCost::request_pages
/// [`DeviceCost::latency_pages`]: crate::ra::DeviceCost::latency_pages
pub(super) const THROUGH_MARGIN: u64 = 2;

/// How far a stream's windows may reach on this device: which stride gaps
/// they read through, and the most runs a strided window that skips its
/// gaps may hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reach {
    pub(super) through: Through,
    /// For an irregular stride, whose alternative is not runs read ahead
    /// but requests waited for: gaps cheaper to read than a request's
    /// latency ([`crate::ra::DeviceCost::latency_pages`]).
    pub(super) irregular: Through,
    pub(super) max_runs: u64,
    /// Reading through at most multiplies a window's pages by this:
    /// [`MAX_READ_THROUGH`], or [`HINT_MAX_READ_THROUGH`] for hints.
    pub(super) ratio: u64,
}

/// The widest gap, in pages, that a strided or irregular stream reads
/// through on this device rather than skip ([`Reach::of`]): the file's
/// speculation budget credits such a gap below a page the reader then
/// takes ([`crate::ra::budget::Budget::credit`]).
pub(crate) fn widest_gap_read_through(view: &dyn CacheView) -> u64 {
    view.device_cost().map_or(MERGE_GAP, |c| {
        (c.request_pages / THROUGH_MARGIN)
            .max(c.latency_pages / (2 * THROUGH_MARGIN))
            .max(MERGE_GAP)
    })
}

impl Reach {
    /// From what the engine knows of its device: [`MERGE_GAP`] and
    /// [`STRIDE_MAX_RUNS`] where it knows nothing; runs for twice the
    /// requests the device serves at once (one window being read while the
    /// next is issued) where it knows that; reading through at most `ratio`
    /// times the runs ([`crate::ra::RaConfig::read_through_ratio`]).
    pub(super) fn of(view: &dyn CacheView, ratio: u64) -> Reach {
        let cost = view.device_cost();
        Reach {
            through: cost.map_or(Through::Gap(MERGE_GAP), |c| {
                Through::Cost(c.request_pages / THROUGH_MARGIN)
            }),
            irregular: cost.map_or(Through::Gap(MERGE_GAP), |c| {
                Through::Gap(c.latency_pages / (2 * THROUGH_MARGIN))
            }),
            // A source that serves more requests at once than a disk (an
            // object store: the engine's requests in flight) may have as
            // many runs in a window.
            max_runs: cost.map_or(STRIDE_MAX_RUNS, |c| {
                (2 * c.parallelism).clamp(1, STRIDE_MAX_RUNS.max(c.parallelism))
            }),
            ratio,
        }
    }
}

/// A strided window of `runs` runs from `start`, or, if the gap is cheaper
/// to read through than to skip ([`read_through`]), a forward window of
/// whole periods (so that consecutive windows tile the file) reading no
/// more pages than the `runs * run` it was granted. A window that skips its
/// gaps holds at most `reach.max_runs` runs.
pub(super) fn strided_window(
    start: u64,
    run: u64,
    period: u64,
    runs: u64,
    async_runs: u64,
    reach: Reach,
) -> Window {
    let granted = runs * run;
    if read_through(run, period, reach.through, reach.ratio) && granted >= period {
        // Whole periods and a run, within what was granted: the window
        // ends with a run, as a strided window does. Whole periods from a
        // run's start end with a gap, and a window of one period from the
        // request was the request's run and the gap after it: where the
        // request's run was read, the gap alone was hinted (fio's
        // `rw=read:64k` over 128 KiB reads: every job's 32 hinted pages
        // were gaps, none read).
        let periods = (granted - run) / period;
        let size = periods * period + run;
        // The marker on a run after the request's (none if there is none).
        let async_size = (async_runs * run).div_ceil(period) * period;
        return Window::forward(start, size, async_size.min(size - run));
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
/// take, by which the window is judged ([`crate::ra::accuracy`]): the runs of a
/// stride, not the gaps a window reads through because that is cheaper than
/// skipping them, nor the further columns a sweep reads for later sweeps
/// (those are judged by eviction, [`Sweep`]); for an irregular stride, the
/// share of the span its run is of its period.
pub(super) fn expected_pages(direction: Direction, window: &Window) -> u64 {
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

/// A strided reader that, at the end of its sweep, starts the next sweep a
/// little above where the last one began: the columns of a row-major table
/// read one after the other, or iozone's stride test (record `r` is read in
/// pass `r mod 17`, after its first pass wraps to record 1). Its windows
/// also read the next columns of every run, as many as
/// [`SWEEP_CACHE_SHARE`] of the cache can hold until the sweeps that want
/// them arrive, so that those sweeps find them cached: one visit of the
/// disk head per run for several sweeps instead of one per sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sweep {
    /// First page of the first sweep (column 0).
    pub(super) base: u64,
    /// Distance between the first pages of consecutive sweeps (at most a
    /// run: columns are adjacent or overlap).
    pub(super) step: u64,
    /// Pages from the first to the last run of the previous sweep.
    pub(super) span: u64,
    /// Columns read ahead with each run by the latest window.
    pub(super) cols: u64,
    /// Most columns to read ahead: one fewer after every sweep that finds
    /// columns read ahead for it evicted.
    pub(super) cap: u64,
    /// This sweep has lowered `cap` already (once per sweep).
    pub(super) shrunk: bool,
}

/// Share of the cache that the columns of a sweep, with those read ahead
/// for later sweeps, may fill: three quarters (numerator, denominator),
/// leaving a quarter to everything else the cache holds. If that proves too
/// much, columns are evicted before their sweep comes, and each sweep that
/// finds that reads one column fewer from then on: a few pages lost (to pages
/// that were cached when the window passed, so not read again, and aged out
/// before their sweep) cost one column, not half of them.
pub(super) const SWEEP_CACHE_SHARE: (u64, u64) = (3, 4);

impl StreamTable {
    /// If `req` starts the next sweep of a strided stream (the same run,
    /// at most one run above where that stream's sweep began, after it went
    /// further), turns that stream into the new sweep and returns its slot.
    pub(super) fn next_sweep(&mut self, req: Request) -> Option<usize> {
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

    /// Readers interleaved on one handle look like a stride that wraps:
    /// one request from each, a period apart, then the next one from each,
    /// right after the first. If `req` continues the first run of a
    /// strided stream that has not swept yet, and the rows it visited are
    /// fewer than the table has streams, the stream is split into one
    /// forward stream per row, each continuing its row's run, and this
    /// returns true. Taken for a column sweep instead, eight such readers
    /// of a 128 MiB object got windows of a few rows at a time, each asked
    /// for when the reader reached it: 42 MB/s against `ondemand`'s 91 in
    /// the simulator's s3 model, where eight forward streams of a 256 MiB
    /// object (a period too wide for a stride) read 151. A table read
    /// column by column has more rows than that and still sweeps.
    pub(super) fn split_rows(&mut self, req: Request) -> bool {
        let rows_of = |s: &Stream| match s.direction {
            Direction::Strided { run, period }
                if s.live
                    && s.sweep.is_none()
                    && req.count == run
                    && req.index == s.origin + run
                    && s.last.index > s.origin =>
            {
                Some((run, period, (s.last.index - s.origin) / period + 1))
            }
            _ => None,
        };
        let Some((slot, (run, period, rows))) = self
            .streams
            .iter()
            .enumerate()
            .find_map(|(i, s)| rows_of(s).map(|r| (i, r)))
        else {
            return false;
        };
        if rows >= self.streams.len() as u64 {
            return false;
        }
        let old = self.streams[slot];
        self.settle_all(slot);
        self.streams[slot].live = false;
        self.split.clear();
        for row in 0..rows {
            let s = self.new_stream(Request::new(old.origin + row * period, run));
            self.streams[s].direction = Direction::Forward;
            // Row 0 is the one `req` continues: its window comes with it.
            if row > 0 {
                self.split.push(s);
            }
        }
        // Taken from the end: row 1, the next to be read, first.
        self.split.reverse();
        true
    }

    /// How many further columns the windows of a sweep read with each run:
    /// what is left of the period, what [`SWEEP_CACHE_SHARE`] of the cache
    /// holds for every run of a sweep (as far as the last sweep went),
    /// widened, what keeps a widened run within half the maximum window (or
    /// within the whole of it, if half leaves no room), and the cap that
    /// lost columns left.
    pub(super) fn sweep_columns(&self, s: &Stream, view: &dyn CacheView) -> u64 {
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

    /// Page `index` was evicted before use: if it is one of the columns a
    /// sweep reads ahead, that sweep (and the ones after it) read one column
    /// fewer.
    pub(super) fn sweep_lost(&mut self, index: u64) {
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

    /// The direction windows of stream `slot` are shaped by: its own, with
    /// the runs of a sweep widened to the columns read ahead, and an
    /// irregular stride read through as a forward stream; and the longest
    /// stride gap its windows may read through (none for a sweep: its runs
    /// are sized to the cache). `None`: the stream reads nothing beyond
    /// the request (an irregular stride whose gaps cost more to read than
    /// to skip).
    pub(super) fn reading_direction(
        &mut self,
        slot: usize,
        view: &dyn CacheView,
    ) -> Option<(Direction, Reach)> {
        let s = self.streams[slot];
        let reach = Reach::of(view, self.read_through_ratio);
        let cols = self.sweep_columns(&s, view);
        match (s.direction, &mut self.streams[slot].sweep) {
            (Direction::Strided { run, period }, Some(w)) => {
                w.cols = cols;
                let run = run + cols * w.step;
                let sweep = Reach {
                    through: Through::Never,
                    irregular: Through::Never,
                    max_runs: STRIDE_MAX_RUNS,
                    ratio: reach.ratio,
                };
                Some((Direction::Strided { run, period }, sweep))
            }
            (Direction::Irregular { run, period }, _) => {
                read_through(run, period, reach.irregular, reach.ratio)
                    .then_some((Direction::Forward, reach))
            }
            (d, _) => Some((d, reach)),
        }
    }
}
