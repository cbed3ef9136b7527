//! Readahead policies: pure decisions about what to read next.
//!
//! # The idea
//!
//! A reader asks for pages; a cache holds some of them. Readahead guesses
//! which pages the reader will want soon and asks the device for them early,
//! in large I/Os, so that the reader finds them already cached (or already on
//! their way) instead of waiting for one small read after another.
//!
//! Following Fengguang Wu's on-demand readahead (the RFC and the commit of
//! docs/references.md), a policy is consulted only at two moments, its
//! *triggers*:
//!
//! * [`Trigger::Miss`] — the reader needs a page that is not in the cache:
//!   a synchronous readahead, since the reader will wait for it anyway;
//! * [`Trigger::MarkerHit`] — the reader touched the page carrying the
//!   *lookahead marker* that an earlier window left behind: an asynchronous
//!   readahead, issued while the rest of that window is still unread, so the
//!   next window arrives before it is needed (pipelining).
//!
//! A decision is a [`Window`] `{ start, size, async_size }`: read `size`
//! pages from `start`, and put the marker on page `start + size - async_size`
//! so that the next decision happens when the reader has `async_size` pages
//! of this window left. Pages already cached are not read again. The window
//! of a sequential stream ramps up (×4 while small, then ×2) to the maximum.
//!
//! The baseline [`legacy`] policy is the current/ahead two-window algorithm
//! of Linux 2.6.0–2.6.22, which instead inspects every request
//! ([`Calls::EveryRequest`]).
//!
//! # Three policies
//!
//! * [`ondemand`] — the algorithm of the on-demand RFC and commit
//!   (docs/references.md) with the refinements mainline Linux
//!   has today (context readahead, oversize reads, the "merge the next
//!   window" rule).
//! * [`legacy`] — the two-window algorithm that on-demand replaced.
//! * [`ahead`] — ours: a table of streams per file, so that
//!   interleaved readers each keep a window; backward and strided patterns;
//!   thrash and lateness feedback; every speculative window held to
//!   account ([`accuracy`]), so that where its predictions do not come
//!   true it reads as the kernel would; and all of them together bound by
//!   one speculation budget per file ([`budget`]): pages read ahead and
//!   not used never exceed a named multiple of those used plus a small
//!   credit, whatever the rule.
//!
//! # How an engine consults a policy
//!
//! Engines (the simulator, the Direct-mode file engine) never call the policy
//! ad hoc: they call [`drive`] once per request, with their cache as a
//! [`PageTable`]. `drive` walks the request's pages, calls the policy at the
//! triggers, submits the windows, and reads whatever the request still needs in
//! one demand I/O (Bhattacharya's AIO readahead patch: a request is always read
//! whole). One code path means the simulator measures exactly what the engine
//! runs.
//!
//! # Invariants (checked by property tests)
//!
//! * A window lies inside the file and is never empty.
//! * A window never holds more pages than the maximum, except a window made
//!   for a request larger than the maximum, which holds just that request
//!   (Bhattacharya's AIO readahead patch: an oversize request is
//!   read whole, in one I/O).
//! * The marker, if any, lies inside the window.
//! * A purely random pattern never reads beyond the requested pages.
//! * Policies do no I/O, read no clock and allocate nothing per decision.

pub mod accuracy;
pub mod ahead;
pub mod budget;
mod drive;
pub mod hints;
pub mod learn;
pub mod legacy;
pub mod ondemand;
pub mod tune;
pub use drive::{drive, Lookup, PageTable};
mod pageset;
mod sparse;
#[cfg(test)]
pub(crate) use sparse::SparseTable;

use std::fmt;
use std::str::FromStr;

/// The kernel's default maximum readahead: 128 KiB (`VM_READAHEAD_PAGES`,
/// include/linux/mm.h), i.e. 32 pages of 4 KiB.
pub const DEFAULT_MAX_PAGES: u64 = 32;

/// A read request in pages: `count` pages from `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// First page.
    pub index: u64,
    /// Number of pages (at least one for a real request).
    pub count: u64,
}

impl Request {
    /// A request of `count` pages from `index`.
    pub fn new(index: u64, count: u64) -> Request {
        Request { index, count }
    }

    /// One past the last page.
    pub fn end(&self) -> u64 {
        self.index + self.count
    }
}

/// Why a policy is consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The page at the request's index is not cached (synchronous readahead).
    Miss,
    /// The page at the request's index carries the lookahead marker
    /// (asynchronous readahead).
    MarkerHit,
    /// Policies with [`Calls::EveryRequest`] are called at the start of
    /// every request, whatever the cache holds.
    Request,
}

/// The layout of a window's pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Every page of `[start, start + size)`; the reader moves upwards, so
    /// the marker sits `async_size` pages before the end.
    Forward,
    /// Every page of `[start, start + size)`; the reader moves downwards, so
    /// the marker sits `async_size` pages above the start (at
    /// `start + async_size - 1`).
    Backward,
    /// Only the first `run` pages of every `period` pages from `start`: the
    /// pages a read-N-skip-M reader will want. `size` is the span, from
    /// `start` to the end of the last run.
    Strided {
        /// Pages read in each period.
        run: u64,
        /// Distance in pages between the starts of consecutive runs.
        period: u64,
    },
}

/// A readahead decision: which pages to read, and where to leave the marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First page of the window (its lowest index).
    pub start: u64,
    /// Span of the window in pages.
    pub size: u64,
    /// How many pages of the window, counted in the reader's direction from
    /// its far end, remain when the reader reaches the marker. Zero: no
    /// marker.
    pub async_size: u64,
    /// Which pages of the span are read.
    pub shape: Shape,
}

impl Window {
    /// A forward window.
    pub fn forward(start: u64, size: u64, async_size: u64) -> Window {
        Window {
            start,
            size,
            async_size,
            shape: Shape::Forward,
        }
    }

    /// One past the last page of the span.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }

    /// The page that carries the lookahead marker, if any.
    pub fn marker_page(&self) -> Option<u64> {
        if self.async_size == 0 || self.size == 0 {
            return None;
        }
        let async_size = self.async_size.min(self.size);
        match self.shape {
            Shape::Forward => Some(self.start + self.size - async_size),
            Shape::Backward => Some(self.start + async_size - 1),
            Shape::Strided { period, .. } => {
                // The first page of the run in which the last `async_size`
                // pages of span begin.
                let offset = self.size - async_size;
                Some(self.start + offset / period * period)
            }
        }
    }

    /// Whether page `index` is one of the pages this window reads.
    pub fn contains(&self, index: u64) -> bool {
        if index < self.start || index >= self.end() {
            return false;
        }
        match self.shape {
            Shape::Forward | Shape::Backward => true,
            Shape::Strided { run, period } => (index - self.start) % period < run,
        }
    }

    /// Number of pages this window reads.
    pub fn pages(&self) -> u64 {
        match self.shape {
            Shape::Forward | Shape::Backward => self.size,
            Shape::Strided { run, period } => {
                let full = self.size / period;
                full * run + (self.size % period).min(run)
            }
        }
    }

    /// The contiguous runs of pages this window reads, lowest first, as
    /// `(start, count)`. Calls `f` once per run; allocates nothing.
    pub fn for_each_run(&self, mut f: impl FnMut(u64, u64)) {
        match self.shape {
            Shape::Forward | Shape::Backward => f(self.start, self.size),
            Shape::Strided { run, period } => {
                let mut at = self.start;
                while at < self.end() {
                    f(at, run.min(self.end() - at));
                    at += period;
                }
            }
        }
    }

    /// This window cut to the first `file_pages` pages; `None` if nothing of
    /// it is left. The marker moves with the cut so that it stays inside.
    pub fn clip(mut self, file_pages: u64) -> Option<Window> {
        if self.size == 0 || self.start >= file_pages {
            return None;
        }
        if self.end() > file_pages {
            let cut = self.end() - file_pages;
            self.size -= cut;
            if let Shape::Strided { run, period } = self.shape {
                // Do not end in the middle of a gap.
                let tail = self.size % period;
                if tail > run {
                    self.size -= tail - run;
                }
            }
            self.async_size = self.async_size.min(self.size);
        }
        Some(self)
    }
}

/// What an evicted page left behind (the kernel's shadow entry, see
/// mm/workingset.c), so that "evicted before use" is detectable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shadow {
    /// The page was brought in by readahead and evicted before any reader
    /// used it: readahead thrashing.
    pub evicted_unused: bool,
}

/// The largest file [`drive`] serves, in pages: 2^56 pages are 2^65 bytes
/// at the smallest page (512 bytes), more than any `u64` byte offset
/// reaches, and leave the policies' window arithmetic (request sizes times a
/// small factor, plus the maximum window) far from overflowing. Pages past
/// it are treated as past the end of the file.
pub const MAX_PAGES: u64 = 1 << 56;
/// The largest maximum window a policy takes (larger settings are cut to
/// it): 2^32 pages, 2 TiB at 512-byte pages.
pub const MAX_WINDOW_PAGES: u64 = 1 << 32;

/// A read-only view of the cache, for policies.
pub trait CacheView {
    /// Size of the file in pages; windows never go past it.
    fn file_pages(&self) -> u64;
    /// Whether page `index` is cached or being read.
    fn is_present(&self, index: u64) -> bool;
    /// The end of the run of pages from `from` up that are all present, or
    /// all absent, as `from` is: the first page of `[from, to)` whose
    /// presence differs from `from`'s, or `to`. A view that keeps pages in
    /// runs or chunks answers without asking page by page, which a policy
    /// walking a window of a thousand pages would.
    fn presence_up(&self, from: u64, to: u64) -> u64 {
        if from >= to {
            return from;
        }
        let here = self.is_present(from);
        (from + 1..to)
            .find(|&p| self.is_present(p) != here)
            .unwrap_or(to)
    }
    /// The start of the run of pages from `from` down to `lo` that are all
    /// present, or all absent, as `from` is: the lowest page `q` of
    /// `[lo, from]` with `[q, from]` all as `from`.
    fn presence_down(&self, lo: u64, from: u64) -> u64 {
        if from < lo {
            return from;
        }
        let here = self.is_present(from);
        (lo..from)
            .rev()
            .find(|&p| self.is_present(p) != here)
            .map_or(lo, |p| p + 1)
    }
    /// The shadow left by page `index` if it was evicted.
    fn shadow(&self, _index: u64) -> Option<Shadow> {
        None
    }
    /// The marked large folio the request being decided hit: (first page, order).
    fn marked_folio(&self) -> Option<(u64, u32)> {
        None
    }
    /// How many pages the cache can hold in all (shared by every file it
    /// caches), if the engine knows: a policy that reads ahead for a reader
    /// who will come back later sizes that to the cache. `None`: unknown.
    fn capacity_pages(&self) -> Option<u64> {
        None
    }
    /// What the device charges, if the engine knows ([`DeviceCost`]).
    /// `None`: unknown, and the policies use their measured defaults
    /// (`MERGE_GAP`, `STRIDE_MAX_RUNS`).
    fn device_cost(&self) -> Option<DeviceCost> {
        None
    }
}

/// What a device charges for a read, as a policy weighs speculation:
/// times expressed in pages the device could transfer meanwhile, so that
/// they compare with the pages a window reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCost {
    /// How long one more request holds the device beyond its bytes: an
    /// IOPS cap's share of a bandwidth cap (a cloud volume's 200 MiB/s ÷
    /// 5000 IOPS: 10 pages), a queue's latency ÷ its depth. A stride whose
    /// period costs less than this is cheaper read through than as runs.
    pub request_pages: u64,
    /// How long a reader waits for a request nobody read ahead for (its
    /// latency, or the IOPS cap's interval if longer). A gap that costs
    /// less than this to read is cheaper read through than waited for.
    pub latency_pages: u64,
    /// How many requests it serves at once to good effect (its queue, or
    /// what an IOPS cap lets one reader keep in flight): a strided
    /// window's runs are requests of their own, and more than this only
    /// wait.
    pub parallelism: u64,
}

impl DeviceCost {
    /// What an object store charges (the engine's objects and the
    /// simulator's store both take it from here), from the published
    /// figures `bench remote`'s `s3` profile uses (AWS: 30 ms to the first
    /// byte, 90 MB/s per connection; 250 MB/s in all), with `parallelism`
    /// requests in flight: latency 30 ms × 90 MB/s ≈ 2.7 MB; one more
    /// request, 250 MB/s ÷ (64 ÷ 30 ms) ≈ 117 KB (128 KiB).
    pub fn object_store(page_size: u64, parallelism: u64) -> DeviceCost {
        let page = page_size.max(1);
        DeviceCost {
            request_pages: (128 << 10) / page,
            latency_pages: (2700 << 10) / page,
            parallelism,
        }
    }
}

/// Facts that engines report to policies after the fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feedback {
    /// A reader had to wait for page `index`, which readahead had already
    /// asked for: the prefetch was late.
    LateHit {
        /// The page waited for.
        index: u64,
    },
    /// Page `index`, brought in by readahead, was evicted before any reader
    /// used it: readahead waste or thrashing.
    EvictedUnused {
        /// The evicted page.
        index: u64,
    },
    /// After readahead, the request still found page `index` missing, so it
    /// is read on demand (`handle_ra_miss` in the legacy kernel).
    DemandMiss {
        /// The missing page.
        index: u64,
    },
}

/// When a policy wants to be consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// On misses and marker hits only (on-demand readahead).
    OnDemand,
    /// At the start of every request (the legacy algorithm).
    EveryRequest,
}

/// How the pages a request still lacks after readahead are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemandFill {
    /// Each contiguous run of missing pages in one I/O (Bhattacharya's AIO
    /// readahead patch).
    WholeRun,
    /// One page at a time, as 2.6.20's `do_generic_mapping_read` did through
    /// `readpage` for pages readahead did not bring in.
    PageAtATime,
}

/// A readahead policy: pure decision logic.
pub trait Policy: Send {
    /// Short name (`ondemand`, `legacy`, `ahead`).
    fn name(&self) -> &'static str;
    /// The maximum window in pages.
    fn max_pages(&self) -> u64;
    /// The engine changed the maximum window (its tuner found the device
    /// reads faster with larger windows, [`tune::WindowTuner`]): windows
    /// decided from now on reach `pages`, streams ramping to it as before.
    /// Policies without a maximum ignore it.
    fn set_max_pages(&mut self, _pages: u64) {}
    /// When [`drive`] calls [`Policy::decide`].
    fn calls(&self) -> Calls {
        Calls::OnDemand
    }
    /// How [`drive`] reads pages a request lacks after readahead.
    fn demand_fill(&self) -> DemandFill {
        DemandFill::WholeRun
    }
    /// Called at the start of every request, before any decision.
    fn begin(&mut self, _req: Request) {}
    /// Whether the request just begun continued a stream the policy
    /// follows (forward, backward, strided), rather than starting one or
    /// landing inside one's window: only such requests show that a
    /// pattern foreseen holds ([`budget::HINT_EVIDENCE_PAGES`]). Policies
    /// of one state per file: always.
    fn continues_stream(&self) -> bool {
        true
    }
    /// The decision: given the request from the trigger page on, what to
    /// read. `None`: nothing beyond what the request needs.
    fn decide(&mut self, req: Request, trigger: Trigger, view: &dyn CacheView) -> Option<Window>;
    /// What became of the window `decide` returned last: the file's
    /// speculation budget ([`budget`]) may cut it (`admitted` is then the
    /// window read) or refuse it (`None`). The policy's record of its
    /// windows follows what was read.
    fn admitted(&mut self, _decided: Window, _admitted: Option<Window>) {}
    /// Further windows the last request showed the need of, for streams
    /// other than its own (readers interleaved on one handle, found all at
    /// once): [`drive`] asks after each decision until `None`, and each is
    /// followed by [`Policy::admitted`] as a decided window is.
    fn more(&mut self, _view: &dyn CacheView) -> Option<Window> {
        None
    }
    /// Called when a request has been served.
    fn finish(&mut self, _req: Request) {}
    /// The engine did not read `window`, decided for the request now
    /// being served, because the kernel under it reads that window by
    /// itself (hints: a forward stream's window on a sequential read).
    /// What it charged the file's speculation budget is given back, so
    /// that pages nobody hinted neither spend nor earn; the policy's own
    /// record keeps it as read.
    fn left_to_kernel(&mut self, _window: Window) {}
    /// Facts observed by the engine.
    fn feedback(&mut self, _event: Feedback) {}
    /// Whether speculative pages are out whose use the policy is counting
    /// ([`accuracy`]). An engine that skips [`Policy::begin`] for requests
    /// it serves from its cache without a marker (Buffered mode's hints)
    /// must not skip it while this is true, or the policy sees its
    /// readahead go unread.
    fn outstanding(&self) -> bool {
        false
    }
    /// The policy's view of the streams it tracks, one line each (for
    /// reports such as `ahead run --stats`); empty for policies that keep
    /// one state per file.
    fn describe(&self) -> Vec<String> {
        Vec::new()
    }
    /// For an engine that hints: a strided window is hinted whole, gaps
    /// included, while its period is at most this many times its run
    /// ([`RaConfig::read_through_ratio`]; the kernel's own policies never
    /// decide one).
    fn read_through_ratio(&self) -> u64 {
        ahead::HINT_MAX_READ_THROUGH
    }
}

/// Which policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PolicyKind {
    /// The current/ahead two-window baseline of Linux 2.6.0–2.6.22.
    Legacy,
    /// The kernel's on-demand readahead.
    OnDemand,
    /// ahead's stream-table policy.
    Ahead,
}

impl PolicyKind {
    /// All policies, baseline first.
    pub const ALL: [PolicyKind; 3] = [PolicyKind::Legacy, PolicyKind::OnDemand, PolicyKind::Ahead];

    /// The policy's name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Legacy => "legacy",
            PolicyKind::OnDemand => "ondemand",
            PolicyKind::Ahead => "ahead",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = crate::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "legacy" => Ok(PolicyKind::Legacy),
            "ondemand" | "on-demand" => Ok(PolicyKind::OnDemand),
            "ahead" => Ok(PolicyKind::Ahead),
            _ => Err(crate::ParseError::new(
                "readahead policy",
                s,
                "legacy, ondemand or ahead",
            )),
        }
    }
}

/// Policy parameters: [`RaConfig::with_max_pages`], then set fields (the
/// struct is `#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RaConfig {
    /// Maximum window in pages (the kernel's `ra_pages`).
    pub max_pages: u64,
    /// Streams tracked per file by the `ahead` policy.
    pub streams: usize,
    /// Context readahead in the `ondemand` policy (on by default, as in Linux
    /// since 2.6.31). Off, `ondemand` is the algorithm of the on-demand RFC's
    /// benchmarks (Linux 2.6.21-rc7-mm1), which read a non-sequential miss as
    /// is. The `ahead` policy falls back to the same rule where its own are
    /// silent; engines that only send hints to a kernel that reads ahead by
    /// itself (Buffered mode, `ahead run`) turn it off, as the kernel under
    /// them applies it anyway, and a hint of it only costs.
    pub context_readahead: bool,
    /// A strided window whose gaps are at most this many pages is read
    /// whole, gaps included, by the engine (hints: one large read costs
    /// less than a request per run, `GAP_MAX`); 0, by the engines
    /// that read only a strided window's runs. The file's speculation
    /// budget charges what the engine reads ([`budget`]).
    pub read_through_gap: u64,
    /// The engine only sends hints to a kernel that reads ahead by itself
    /// (Buffered mode, `ahead run`): the kernel's readahead is the floor
    /// under them, and every page hinted is charged to the file's
    /// speculation budget ([`budget`]). Off, the engine reads what the
    /// policy decides, and what `ondemand` would read is the floor.
    pub hints: bool,
    /// For hints: a stride's gaps are hinted as an engine that reads
    /// reads them, up to `MAX_READ_THROUGH` times its runs, and a
    /// gap so hinted earns below the page a request takes, as a gap read
    /// through does ([`budget::Budget::gap_credit`]). On for Buffered
    /// mode, where the kernel reads a hinted span in one request, as
    /// Direct mode reads a window; off for `ahead run`, whose `--stats`
    /// counts a hinted gap unread in the file's accuracy, and which hints
    /// a gap only where it is no wider than the runs
    /// (`HINT_MAX_READ_THROUGH`), its gaps earning nothing.
    pub hint_gaps_as_reads: bool,
    /// The program advised `POSIX_FADV_RANDOM` on the file (the kernel's
    /// `FMODE_RANDOM`): `ondemand` reads each miss as asked and nothing
    /// ahead of it, as `page_cache_sync_ra` does for such a file. The
    /// simulator sets it from a trace's `# advice ID random` line.
    pub random_advice: bool,
    /// The kernel reads ahead in large folios (ext4 on 6.18): `ondemand`
    /// keeps a folio order, and ends a window read on a mark where it
    /// aligns ([`CacheView::marked_folio`]; `sim replay --large-folios`).
    pub large_folios: bool,
}

impl RaConfig {
    /// How many times its runs a stride may read through: the period over
    /// the run at most this (`MAX_READ_THROUGH`, 4, or for hints that are
    /// not read as reads, `HINT_MAX_READ_THROUGH`, 2).
    pub fn read_through_ratio(&self) -> u64 {
        if self.hints && !self.hint_gaps_as_reads {
            ahead::HINT_MAX_READ_THROUGH
        } else {
            ahead::MAX_READ_THROUGH
        }
    }

    /// Defaults with a given maximum window.
    pub fn with_max_pages(max_pages: u64) -> RaConfig {
        RaConfig {
            max_pages: max_pages.max(1),
            ..RaConfig::default()
        }
    }
}

impl Default for RaConfig {
    fn default() -> Self {
        RaConfig {
            max_pages: DEFAULT_MAX_PAGES,
            streams: ahead::DEFAULT_STREAMS,
            context_readahead: true,
            read_through_gap: 0,
            hints: false,
            hint_gaps_as_reads: false,
            random_advice: false,
            large_folios: false,
        }
    }
}

/// Builds a policy.
pub fn new_policy(kind: PolicyKind, mut config: RaConfig) -> Box<dyn Policy> {
    config.max_pages = config.max_pages.min(MAX_WINDOW_PAGES);
    match kind {
        PolicyKind::Legacy => Box::new(legacy::Legacy::new(config)),
        PolicyKind::OnDemand => Box::new(ondemand::OnDemand::new(config)),
        PolicyKind::Ahead => Box::new(budget::Budgeted::new(
            ahead::StreamTable::new(config),
            &config,
        )),
    }
}

/// The kernel's initial window: the request rounded up to a power of two,
/// ×4 if that is at most max/32, ×2 if at most max/4, else the maximum
/// (`get_init_ra_size`, mm/readahead.c, unchanged since 2.6.0).
pub(crate) fn init_window(request_pages: u64, max: u64) -> u64 {
    let rounded = request_pages.max(1).next_power_of_two();
    if rounded <= max / 32 {
        rounded * 4
    } else if rounded <= max / 4 {
        rounded * 2
    } else {
        max
    }
}

/// The kernel's ramp-up: ×4 below max/16, ×2 up to max/2, then the maximum
/// (`get_next_ra_size`, mm/readahead.c in Linux 5.x–6.x).
pub(crate) fn next_window(current: u64, max: u64) -> u64 {
    let current = current.max(1);
    if current < max / 16 {
        (4 * current).min(max)
    } else if current <= max / 2 {
        (2 * current).min(max)
    } else {
        max
    }
}

/// The first missing page at or below `index`, scanning at most `scan`
/// pages (`page_cache_prev_miss`); see [`PrevMiss`].
pub(crate) fn prev_miss(view: &dyn CacheView, index: u64, scan: u64) -> PrevMiss {
    let mut at = index;
    for _ in 0..scan {
        if !view.is_present(at) {
            return PrevMiss::At(at);
        }
        if at == 0 {
            return PrevMiss::FromStart;
        }
        at -= 1;
    }
    PrevMiss::NotWithin
}

/// Result of [`prev_miss`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrevMiss {
    /// The first missing page found.
    At(u64),
    /// Every page from the scan start down to page 0 is present.
    FromStart,
    /// No missing page within the scanned range.
    NotWithin,
}

/// The first missing page at or above `index`, scanning at most `scan` pages
/// (`page_cache_next_miss`); `index + scan` if none.
pub(crate) fn next_miss(view: &dyn CacheView, index: u64, scan: u64) -> u64 {
    let end = index.saturating_add(scan).min(view.file_pages());
    (index..end)
        .find(|&i| !view.is_present(i))
        .unwrap_or(index + scan)
}

#[cfg(test)]
mod props;
#[cfg(test)]
pub(crate) mod tests_support;
