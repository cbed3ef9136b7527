//! The stream table: what a stream is, how a request is matched to one
//! (forward, backward, one period on, a period give or take a page or two,
//! inside its window, or a stride candidate), and how a slot is taken for
//! a new stream.

use super::*;

/// The largest stride period recognised, in pages (16 MiB of 4 KiB pages).
/// Wider gaps are better served as random reads: a window would span more
/// than the device can read sequentially faster than it can seek.
pub(crate) const MAX_STRIDE_PERIOD: u64 = 4096;

/// Stride confirmations needed before a strided window is issued: the gap
/// seen twice.
pub(crate) const STRIDE_CONFIRMATIONS: u32 = 2;

/// A gap that differs from a stream's period by at most this many pages
/// (and at most a quarter of the period) continues the stream as an
/// *irregular* stride: B-tree leaves, variable-length records, rows fetched
/// in rowid order (sqlite3 visiting every 200th row of 400-byte rows steps
/// 20 or 21 pages). Such a stream cannot be predicted page by page; its
/// windows read through the whole span where the gaps are cheaper to read
/// than to skip (what the device charges, [`crate::ra::DeviceCost`]), and nothing beyond the request where
/// they are not.
pub(crate) const STRIDE_JITTER: u64 = 2;

/// The longest row a backward scan may read forward, in pages: 32
/// (128 KiB, 32 reads of 4 KiB). A database row with its overflow pages,
/// a record a reader of a file's end takes forward once found: a few pages
/// each. A longer forward run that then jumps below its start is a forward
/// reader that went back, not a row.
pub(crate) const ROW_MAX: u64 = 32;

/// Pages a row may lie below the one read before it, short of touching it:
/// 2, as a stride's gap may move ([`STRIDE_JITTER`]) — a row's pages need
/// not be the next ones down (a free page, a page of another table).
pub(crate) const ROW_SLACK: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
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
pub(super) struct Stream {
    pub(super) live: bool,
    pub(super) last_used: u64,
    pub(super) direction: Direction,
    pub(super) last: Request,
    /// Candidate stride period and how many times it was seen.
    pub(super) period: u64,
    pub(super) confirmations: u32,
    /// First page of the stream's first request.
    pub(super) origin: u64,
    /// Set when this strided stream is one sweep of several.
    pub(super) sweep: Option<Sweep>,
    /// Current window size, in pages read.
    pub(super) size: u64,
    /// Thrash cap on the window, in pages read.
    pub(super) cap: u64,
    /// Ramp once more on the next window (a late prefetch was seen).
    pub(super) boost: bool,
    /// Start of the last window whose eviction already shrank the stream:
    /// waste shrinks a stream once per window, not once per page.
    pub(super) shrunk_for: Option<u64>,
    /// The last two windows issued, with the reader's page when each was
    /// and what of them was used.
    pub(super) window: Option<Issued>,
    pub(super) previous: Option<Issued>,
    /// The record of this stream's settled windows.
    pub(super) ledger: Ledger,
    /// Speculation stopped ([`crate::ra::accuracy`]): requests are read as
    /// they are until `rearm` reaches [`REARM_RUN`].
    pub(super) held: bool,
    /// Exact continuations in a row while held.
    pub(super) rearm: u32,
    /// A gap of this stream has moved ([`Match::Jitter`], or between
    /// requests inside a forward window of it): it stays an irregular
    /// stride, never predicted page by page again.
    pub(super) jittered: bool,
    /// Pages its requests asked for. A stream by ahead's own rules reads
    /// ahead no more than this in one window ([`Stream::shown`]).
    pub(super) seen: u64,
    /// Forward, but continued after other streams' requests.
    pub(super) interleaved: bool,
    /// Rows read forward one below the other (`order by id desc` over rows
    /// of a few pages): the present row's first page and the page past
    /// its end (where the row read before began), and how many rows below
    /// one another were seen. The second makes the stream backward.
    pub(super) row: Option<(u64, u64)>,
    pub(super) rows: u32,
}

impl Stream {
    pub(super) const EMPTY: Stream = Stream {
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
        row: None,
        rows: 0,
    };

    /// The stream's present row, `(first page, page past its end)`: the
    /// row its rows began, else a forward stream's run so far, or a
    /// backward stream's last request.
    pub(super) fn present_row(&self) -> Option<(u64, u64)> {
        match (self.row, self.direction) {
            (Some(r), Direction::Forward | Direction::Backward) => Some(r),
            (None, Direction::Forward) => Some((self.origin, self.last.end())),
            (None, Direction::Backward) => Some((self.last.index, self.last.end())),
            _ => None,
        }
    }

    /// How `req` continues this stream as rows read one below the other,
    /// each in any order (`order by id desc` over rows of a few pages):
    /// the next row down ([`Match::RowBelow`]: it begins below the present
    /// row, within the row's length and [`ROW_SLACK`] of it), or the
    /// present row of a backward stream read on forward
    /// ([`Match::WithinRow`]). A forward stream's run is a row if it is 2
    /// to [`ROW_MAX`] pages; after that first row below, a row is 1 to
    /// [`ROW_MAX`] pages.
    pub(super) fn row_match(&self, req: Request) -> Option<Match> {
        let (start, end) = self.present_row()?;
        let backward = self.direction == Direction::Backward;
        if backward && req.index == self.last.end() && req.index > start && req.end() <= end {
            return Some(Match::WithinRow);
        }
        let len = end.saturating_sub(start);
        // A row may be one page once the stream is known to go down by
        // rows (rows read in any order: a row's last page read first is a
        // row of one below the run read before it).
        let least = if backward || self.row.is_some() { 1 } else { 2 };
        if !(least..=ROW_MAX).contains(&len) || req.end() > start {
            return None;
        }
        (start - req.index <= len + ROW_SLACK).then_some(Match::RowBelow)
    }

    pub(super) fn owns(&self, index: u64) -> Option<u64> {
        self.owning_window(index).map(|(_, issued_at)| issued_at)
    }

    pub(super) fn owning_window(&self, index: u64) -> Option<(Window, u64)> {
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
    pub(super) fn speculates_beyond_the_kernel(&self) -> bool {
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
    /// and a short one meets [`crate::ra::accuracy::ACCURACY_FLOOR`] even at its
    /// end. (h5py reading a column of 64 chunks, a stride of 8 pages every 512,
    /// ended 0.46 accurate under `ahead run` without it: its last windows ran
    /// 32 runs past the column.) A long stream reaches the maximum window as
    /// before.
    ///
    /// Where the device's latency is known and long ([`DeviceCost`]'s
    /// `latency_pages`: an object store), the cut is never below that
    /// latency's worth of pages (`floor`): a smaller window leaves its
    /// reader waiting one round trip for every window until its requests
    /// have added up to it, and a stream that stops then has lost at most
    /// one round trip's worth of bytes. Through `ahead mount` on the `s3`
    /// profile (30 ms, 2.7 MB a connection passes meanwhile), eight
    /// interleaved readers waited three rounds of eight round trips before
    /// their windows ran ahead of them, a backward reader and a strided one
    /// ramped for 240 ms before their 64 GETs were in flight.
    ///
    /// [`DeviceCost`]: crate::ra::DeviceCost
    pub(super) fn shown(&self, pages: u64, floor: u64) -> u64 {
        if self.speculates_beyond_the_kernel() && self.sweep.is_none() {
            pages.min(self.seen.max(floor).max(1))
        } else {
            pages
        }
    }

    /// The window after a late hit ([`Stream::boost`]): one more step of
    /// the ramp, beyond the kernel's, and only as far as the stream has
    /// shown ([`Stream::seen`], or the device's latency floor, as
    /// [`Stream::shown`] cuts). The boost is ahead's own speculation on a
    /// forward stream too: where every read is late (a fast reader), it
    /// ramped ×16 a window where the kernel ramps ×4, and forward runs of
    /// 8–172 pages far apart, read with 2–8 MiB windows, read 1.5× the
    /// kernel's bytes at 0.7× its speed (`debugfs cat` in an ext4 image
    /// on a disk whose `read_ahead_kb` is 8 MiB: `gen-130-10` in the
    /// simulator's corpus). A long stream still reaches the maximum a
    /// window sooner.
    pub(super) fn boosted(&self, pages: u64, max: u64, floor: u64) -> u64 {
        next_window(pages, max).min(pages.max(self.seen.max(floor)))
    }

    /// Held, and shaped by one of ahead's own rules: it reads exactly what
    /// is asked.
    pub(super) fn holding(&self) -> bool {
        self.held && self.speculates_beyond_the_kernel()
    }

    /// Its requests showed a stride of `run` pages, seen
    /// [`STRIDE_CONFIRMATIONS`] times: it reads by the strided rule from
    /// now on. A forward stream's windows so far were the forward rule's
    /// (the kernel's, unless the stream was interleaved): they leave it
    /// unjudged by the stride, whose record starts empty as a new
    /// stream's would; the windows of an interleaved one are settled in
    /// the file's record, `file`.
    pub(super) fn turn_strided(&mut self, run: u64, file: &mut Ledger) {
        let mut left = [None, None];
        if self.direction == Direction::Forward {
            let windows = [self.window.take(), self.previous.take()];
            if self.interleaved {
                left = windows;
            }
            self.ledger = Ledger::EMPTY;
            self.size = 0;
        }
        self.direction = Direction::Strided {
            run,
            period: self.period,
        };
        for issued in left.into_iter().flatten() {
            file.settle(issued.speculative, issued.used);
        }
    }

    /// `req` came about one period after the last request, not exactly
    /// ([`Match::Jitter`]): not a stride to predict page by page, now or
    /// later. The period follows the latest gap, so a slow drift stays
    /// matched; a run larger than `max` is read whole, as it is asked.
    pub(super) fn jitter(&mut self, req: Request, max: u64) {
        self.period = req.index - self.last.index;
        self.confirmations = 0;
        if !self.jittered {
            // What failed was the page-exact prediction; the irregular
            // rule is judged on its own windows, and soon.
            self.jittered = true;
            self.held = false;
            self.ledger = Ledger::PROBATION;
        }
        if req.count <= max {
            self.direction = Direction::Irregular {
                run: req.count,
                period: self.period,
            };
        }
    }

    /// `req` fell inside one of the stream's windows. A forward window
    /// that holds its reader's gaps (the kernel's context readahead, a
    /// file's first window) still shows them: the same gap between
    /// requests of one size is a stride's evidence, and the stream turns
    /// strided where its reader leaves the window ([`StreamTable::find`])
    /// instead of learning the stride again from misses there (two round
    /// trips on a store). A gap that moves by a page or two is an
    /// irregular reader's: no evidence, then or later.
    pub(super) fn gap_inside_window(&mut self, req: Request) {
        let gap = req.index.saturating_sub(self.last.index);
        if self.direction != Direction::Forward
            || req.count != self.last.count
            || gap <= self.last.count
            || gap > MAX_STRIDE_PERIOD
        {
            return;
        }
        if gap == self.period {
            self.confirmations += 1;
        } else if self.period > 0 && gap.abs_diff(self.period) <= STRIDE_JITTER.min(self.period / 4)
        {
            self.jittered = true;
        } else {
            self.period = gap;
            self.confirmations = 1;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Match {
    Forward,
    Backward,
    Stride,
    /// About one period after the stream's last request
    /// ([`STRIDE_JITTER`]), not exactly.
    Jitter,
    StrideCandidate(u64),
    InsideWindow,
    /// The first page of a row just below the stream's present row
    /// ([`Stream::row_match`]).
    RowBelow,
    /// The present row of a backward stream of rows, read on forward.
    WithinRow,
}

impl Match {
    /// Whether the request continues the stream as its pattern goes (not
    /// a gap inside its window, nor a stride still to be confirmed).
    pub(super) fn continues(self) -> bool {
        matches!(
            self,
            Match::Forward
                | Match::Backward
                | Match::Stride
                | Match::Jitter
                | Match::RowBelow
                | Match::WithinRow
        )
    }
}

impl Stream {
    /// How `req` continues this stream, if it does ([`Match`]).
    pub(super) fn matches(&self, req: Request) -> Option<Match> {
        if !self.live {
            return None;
        }
        let last_end = self.last.end();
        let forwardish = matches!(self.direction, Direction::Forward | Direction::Unknown);
        if forwardish
            && (req.index == last_end || req.index + 1 == last_end)
            && req.index >= self.last.index
        {
            return Some(Match::Forward);
        }
        let backwardish = matches!(self.direction, Direction::Backward | Direction::Unknown);
        if backwardish
            && req.index < self.last.index
            && (req.end() == self.last.index || req.end() == self.last.index + 1)
        {
            return Some(Match::Backward);
        }
        if let Some(m) = self.row_match(req) {
            return Some(m);
        }
        // A forward stream's gaps, seen inside its own window, are
        // evidence only: it becomes a stride where its reader leaves
        // the window, the same gap seen at least twice before and
        // none moved by a page or two (never an irregular one: that
        // is learnt from requests of its own).
        let forward = self.direction == Direction::Forward;
        let evidence_only = forward
            && (self.owns(req.index).is_some()
                || self.jittered
                || self.confirmations < STRIDE_CONFIRMATIONS);
        if self.period > 0
            && req.index == self.last.index + self.period
            && req.count == self.last.count
            && !evidence_only
        {
            return Some(Match::Stride);
        }
        let jitter = STRIDE_JITTER.min(self.period / 4);
        if jitter > 0
            && !forward
            && req.count == self.last.count
            && req.index > last_end
            && req.index.abs_diff(self.last.index + self.period) <= jitter
        {
            return Some(Match::Jitter);
        }
        if self.owns(req.index).is_some() {
            return Some(Match::InsideWindow);
        }
        // A stream that has seen one request may turn out strided,
        // even the one at page 0 that was taken for a whole-file read.
        let one_request = self.direction == Direction::Unknown
            || (self.direction == Direction::Forward && self.last.index == self.origin);
        if one_request
            && req.index > last_end
            && req.count == self.last.count
            && req.index - self.last.index <= MAX_STRIDE_PERIOD
        {
            return Some(Match::StrideCandidate(req.index - self.last.index));
        }
        None
    }
}

/// The best of the matches `(slot, match, the stream's last use)`: one
/// that continues its stream over one inside a window over a stride
/// candidate, and the stream used last among equals (the first of them
/// in slot order).
fn best(matches: impl Iterator<Item = (usize, Match, u64)>) -> Option<(usize, Match)> {
    let rank = |m: Match| match m {
        m if m.continues() => 0,
        Match::InsideWindow => 1,
        _ => 2,
    };
    let mut best: Option<(usize, Match, u64)> = None;
    for (slot, m, used) in matches {
        let better = match best {
            None => true,
            Some((_, bm, bused)) => rank(m) < rank(bm) || (rank(m) == rank(bm) && used > bused),
        };
        if better {
            best = Some((slot, m, used));
        }
    }
    best.map(|(slot, m, _)| (slot, m))
}

impl StreamTable {
    /// The stream `req` continues, and how: the best match
    /// ([`best`]) among the streams whose bounds admit it
    /// ([`super::slots`]). Debug builds check it against every stream.
    pub(super) fn find(&mut self, req: Request) -> Option<(usize, Match)> {
        self.streams.refresh();
        let streams = &self.streams;
        let with = |slot: usize| {
            let s = &streams[slot];
            s.matches(req).map(|m| (slot, m, s.last_used))
        };
        let found = best(streams.admitting(req).filter_map(with));
        debug_assert_eq!(
            found,
            best((0..streams.len()).filter_map(with)),
            "a stream's bounds left out a match of {req:?}"
        );
        found
    }

    pub(super) fn new_stream(&mut self, req: Request) -> usize {
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

    pub(super) fn stream_owning(&self, index: u64) -> Option<usize> {
        self.streams
            .iter()
            .position(|s| s.live && s.owns(index).is_some())
    }
}
