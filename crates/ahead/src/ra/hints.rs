//! Readahead for a cache ahead does not hold: a policy that sees a file's
//! requests and answers with the byte runs to hint to the kernel
//! (`POSIX_FADV_WILLNEED`). The Buffered mode and the `ahead run` preload
//! both use it.
//!
//! The policy is consulted as the kernel's on-demand readahead is: at
//! misses and at lookahead markers. Which pages are "cached" is this
//! table's own record of what was read or hinted, not the kernel's (a hint
//! for a page the kernel still holds costs a lookup, not a read). A request
//! that starts where the previous one ended is a plain forward stream that
//! the kernel's own readahead follows: the policy learns from it but no
//! hint is sent.

use super::{sparse::SparseTable, Policy, RaConfig, Request, Shape};

pub mod trial;

/// `ahead run`'s preload: what it hands a file's [`Hinter`] and how large
/// its windows are. The preload (crates/ahead-preload and crates/ahead-shim)
/// decides by these, and the simulator models it by the same numbers
/// (`ahead sim replay --policy run`).
pub mod preload {
    /// The policy's largest window: 2 MiB, past the kernel's 128 KiB default
    /// (read_ahead_kb) and as large as the windows Direct mode reads, so
    /// that a backward stream keeps several device reads in flight.
    pub const MAX_WINDOW: u64 = 2 << 20;

    /// The kernel's default readahead window, 128 KiB (`VM_READAHEAD_PAGES`,
    /// what `read_ahead_kb` starts at): the kernel's first window reads a
    /// file of at most this size in one go, so the preload passes over
    /// every read of it.
    pub const SMALL_FILE: u64 = 128 << 10;

    /// Pages of a file the preload looks at before it takes the file for
    /// cached, and passes its reads on to the kernel alone: its first, its
    /// last and 14 evenly between, one cachestat(2) of a page each. One of
    /// the whole file costs the kernel a walk of every page it holds or
    /// holds the shadow of (a page evicted that it remembers): 2.2 ms for
    /// a 256 MiB file of which 7,663 pages were cached and 40,080 evicted,
    /// 0.2 ms for a 17 MB sqlite3 database cached in 4 KiB folios (this
    /// machine, 2026-11-29), at the first read of every such file. A file
    /// with holes between the probes reads as it would without ahead until
    /// a recheck ([`CACHED_RECHECK`]) finds one.
    pub const CACHED_PROBES: u64 = 16;

    /// A file taken for cached is looked at again every this many reads,
    /// where the read is (a cached 4 KiB read costs about 1 µs, the look
    /// about as much): a file that lost pages becomes an ordinary one.
    pub const CACHED_RECHECK: u32 = 64;

    /// Reads in a row that continue the last one and are still sent to the
    /// policy: 8 (32 KiB of 4 KiB reads), more than a row of pages read
    /// forward inside a backward scan. Passing every continuation over left
    /// a backward scan of 38,508 rows of 8,145 bytes (`order by id desc`)
    /// with no hint at all (its windows 46% used, as the helper saw them:
    /// 0.99x plain, 6.2 s, where the simulator puts it at 0.15x).
    pub const FORWARD_RUN: u32 = 8;

    /// Reads of a descriptor that are not forward, passed on before the
    /// core is loaded: the core is loaded at the ninth. The shim, which
    /// links nothing of this crate, has its own copy (`fds::HOLD`), and its
    /// test checks that the two agree.
    pub const SHIM_HOLD: u8 = 8;

    /// Reads of a descriptor that are not forward and that look scattered
    /// (below), passed on before the core is loaded: at the 65th it is
    /// loaded whatever they look like. The core costs a process about
    /// 0.7 ms (its `dlopen`, the helper thread's start, its first reads;
    /// docs/never-worse.md, "The launcher before its C library"), which
    /// a program that jumps at random through a cold file never wins
    /// back: there is no stream to read ahead of. Held, such a program of
    /// a few milliseconds reads as it would without ahead; one of many
    /// more reads has the core from its 65th (a few milliseconds of cold
    /// 4 KiB reads on the steady device).
    pub const SHIM_HOLD_SCATTERED: u8 = 64;

    /// Of the last eight steps between held reads, how many must continue
    /// ([`shim_continues`]) where the read before ended (a forward run's
    /// jump ahead) or one of the two held reads before (a step back, two
    /// streams taking turns) for the core to load at the ninth read or
    /// later: 6. A backward scan, `tail`, a
    /// walk through rows in key order, a stride and two interleaved
    /// streams continue at nearly every step; reads at random in a file of
    /// more than 64 times [`SHIM_NEAR`] continue one of the three with a
    /// chance of about 1 in 13 (3/64 forward, 2/64 back), and six of eight
    /// with about 1 in 180,000 at each look.
    pub const SHIM_ORDERED: u32 = 6;

    /// How far from an earlier read a held read may begin and still
    /// continue it: the larger of 256 KiB (a sqlite3 walk through 2.7 KB
    /// rows in key order, one row in 27, steps 110 KB) and 1/64 of the
    /// file ([`shim_near`]).
    pub const SHIM_NEAR: u64 = 256 << 10;

    /// [`SHIM_NEAR`] for a file of `size` bytes.
    pub fn shim_near(size: u64) -> u64 {
        SHIM_NEAR.max(size / 64)
    }

    /// Whether a read of `len` bytes at `at` continues the read `prev`
    /// (offset, length): it begins at most `near` bytes past that read's
    /// end, or ends at most `near` bytes before its start.
    pub fn shim_continues(prev: (u64, u64), at: u64, len: u64, near: u64) -> bool {
        let end = prev.0.saturating_add(prev.1);
        let last = at.saturating_add(len);
        (at >= end && at - end <= near) || (last <= prev.0 && prev.0 - last <= near)
    }

    /// Whether the shim passes on a descriptor's next read that is not
    /// forward without the core, `held` such reads having been passed on
    /// and `steps` saying, a bit each, which of the last eight steps
    /// between them continued one of the two reads before.
    pub fn shim_holds(held: u8, steps: u8) -> bool {
        held < SHIM_HOLD || (held < SHIM_HOLD_SCATTERED && steps.count_ones() < SHIM_ORDERED)
    }

    /// Reads in a row near the front of a dense forward sweep before the
    /// preload passes them over ([`Sweep`]): 32, four times
    /// [`FORWARD_RUN`].
    pub const SWEEP_RUN: u32 = 32;

    /// How far behind the sweep's front (the furthest byte read) a read
    /// may begin and still be near it: 32 KiB, 8 pages, more than a row's
    /// overflow pages read after its leaf.
    pub const SWEEP_BEHIND: u64 = 32 << 10;

    /// How far past the front a read may begin and still be near it.
    pub const SWEEP_AHEAD: u64 = 32 << 10;

    /// Reads in a row that the helper found nothing to hint for and that
    /// took no hinted page, after which the preload sends it only
    /// [`MUTE_LOOK`] reads of every [`MUTE_CYCLE`]: 512. (Reads that take
    /// hinted pages are the hints at work: a backward scan hints a window
    /// of up to 512 pages at once, and its next 511 reads hint nothing.)
    ///
    /// A sqlite3 join by rowid into a `WITHOUT ROWID` table of 4,742 B rows
    /// (generator seed 68, case 5) made 211,855 reads, random, and the
    /// helper ran the policy on each for 9 hints of 32 pages in all (none
    /// read): 0.37–0.50 s of the helper's CPU beside a program of 2.1 s,
    /// on two cores, and 1.18× plain. The kernel's `ondemand` is consulted
    /// at misses only and does nothing for random reads; the helper sees
    /// every read, so it must stop looking where looking finds nothing.
    pub const MUTE_AFTER: u32 = 512;

    /// While muted, reads come in cycles of this many ...
    pub const MUTE_CYCLE: u32 = 512;

    /// ... of which the last this many are sent, for the policy to look
    /// again: a stream that starts while muted is seen within a cycle
    /// (at 4 KiB reads, 2 MiB), and one hint ends the muting.
    pub const MUTE_LOOK: u32 = 64;

    /// Whether the `nth` read (counted from 0 by the caller while muted)
    /// is passed over, the helper having found nothing to hint for the
    /// last `idle` reads it was sent.
    pub fn muted(idle: u32, nth: u32) -> bool {
        idle >= MUTE_AFTER && nth % MUTE_CYCLE < MUTE_CYCLE - MUTE_LOOK
    }

    /// One descriptor's reads as a forward sweep: a run of reads that each
    /// begin near the furthest byte read so far, behind it or ahead of it
    /// by a few pages, and that together read most of what they pass.
    ///
    /// Such a run is the kernel's to follow. A `WITHOUT ROWID` table of
    /// 3,394 B rows scanned by sqlite3 reads each leaf, then the overflow
    /// pages of its rows, which lie just before it: no read continues the
    /// one before, so the rule that passes a continuation passed none of
    /// its 105,186 reads, and the helper ran the policy on each (about
    /// 3,300 instructions a read, the program's own instructions doubled),
    /// while the kernel's readahead, whose window every read stayed inside,
    /// already read it at the device's pace (generator seed 67, case 7).
    ///
    /// What it does not take: a backward scan (each read falls further
    /// behind the front: at most a few reads near it), three or more
    /// interleaved streams of one descriptor (two reads in a row far from
    /// the front), and a forward sweep with gaps, which the kernel does not
    /// read ahead of (the reads pass over more than an eighth of what they
    /// skip). Of two interleaved forward streams, the one whose reads keep
    /// the front is left to the kernel, whose readahead follows
    /// interleaved forward streams by their lookahead markers.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Sweep {
        /// The lowest byte of the run.
        pub start: u64,
        /// The furthest byte read in the run.
        pub front: u64,
        /// Bytes the run's reads asked for.
        pub bytes: u64,
        /// Reads in the run (0: none yet).
        pub reads: u32,
        /// The last read was elsewhere: one such read (a b-tree's interior
        /// page, every 72 reads in that scan) leaves the run as it was; a
        /// second in a row ends it.
        pub away: bool,
    }

    impl Sweep {
        /// A read of `len` bytes at `offset`: whether it continues a dense
        /// forward sweep of at least [`SWEEP_RUN`] reads.
        pub fn read(&mut self, offset: u64, len: u64) -> bool {
            let end = offset.saturating_add(len);
            let near = self.reads > 0
                && offset.saturating_add(SWEEP_BEHIND) >= self.front
                && offset <= self.front.saturating_add(SWEEP_AHEAD);
            if !near {
                if self.reads > 0 && !self.away {
                    self.away = true;
                    return false;
                }
                *self = Sweep {
                    start: offset,
                    front: end,
                    bytes: len,
                    reads: 1,
                    away: false,
                };
                return false;
            }
            self.away = false;
            self.start = self.start.min(offset);
            self.front = self.front.max(end);
            self.bytes = self.bytes.saturating_add(len);
            self.reads = self.reads.saturating_add(1);
            let span = self.front - self.start;
            self.reads >= SWEEP_RUN && self.bytes.saturating_mul(8) >= span.saturating_mul(7)
        }
    }
}

/// Most pages the table remembers; past it the table starts afresh (the
/// policy then sees a cold file and re-learns its streams).
pub(crate) const TABLE_PAGES: usize = 1 << 16;
/// A strided window whose gaps are at most this many bytes is hinted whole,
/// gaps included, as Direct mode reads it: one large read costs the device
/// less than a request per run (a 4 KiB read every 16 KiB, one hint per
/// run, ran at 63 MB/s cold on the development disk; the whole span at
/// several times that).
pub(crate) const GAP_MAX: u64 = 64 << 10;

/// Whether a strided window of `run` pages every `period` is hinted whole,
/// gaps included: its gaps are at most `gap_max` pages ([`GAP_MAX`]) and
/// its period at most `ratio` times its runs
/// ([`RaConfig::read_through_ratio`]: for `ahead run`, gaps no wider than
/// the runs, so that at least half of what it hints is what the reader is
/// expected to take). The file's speculation budget charges what this
/// says is read ([`RaConfig::read_through_gap`]).
pub(crate) fn hinted_whole(run: u64, period: u64, gap_max: u64, ratio: u64) -> bool {
    period.saturating_sub(run) <= gap_max && period <= ratio * run.max(1)
}

/// The policy configuration for hints of windows up to `max_bytes`, in
/// pages of `page` bytes: no context readahead (the kernel under the hints
/// applies its own, and a hint of it only costs), and strided windows
/// whose gaps are at most `GAP_MAX` hinted whole, as the file's
/// speculation budget is told ([`RaConfig::read_through_gap`]).
pub fn config(max_bytes: u64, page: u64) -> RaConfig {
    let page = page.max(1);
    RaConfig {
        context_readahead: false,
        read_through_gap: GAP_MAX / page,
        hints: true,
        ..RaConfig::with_max_pages((max_bytes / page).max(1))
    }
}

/// A file's hinted pages not yet read, as `ahead run --stats` counts its
/// hints' accuracy: a read takes each hinted page once. The preload's
/// helper keeps one per file, and the tests of the hints' bound count with
/// it too.
#[derive(Debug, Default)]
pub struct Unread(super::pageset::PageSet);

impl Unread {
    /// Whether no hinted page is waiting to be read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A read of pages `first..end`: how many of them were hinted and not
    /// read before, and whether every one of them was.
    pub fn read(&mut self, first: u64, end: u64) -> (u64, bool) {
        let mut taken = 0;
        for p in first..end {
            taken += u64::from(self.0.remove(&p));
        }
        (taken, taken == end.saturating_sub(first))
    }

    /// Pages `first..end` were hinted. Past `max` pages waiting, no more
    /// are remembered (their reads then go uncounted).
    pub fn hinted(&mut self, first: u64, end: u64, max: usize) {
        if self.0.len() < max {
            self.0.extend(first..end);
        }
    }
}

/// One file's readahead policy and the pages it has seen.
pub struct Hinter {
    policy: Box<dyn Policy>,
    table: SparseTable,
    page: u64,
    /// The policy's [`Policy::read_through_ratio`].
    read_through_ratio: u64,
}

impl Hinter {
    /// A hinter for a file of `size` bytes read in pages of `page` bytes
    /// (the kernel's page: fadvise works in it).
    pub fn new(policy: Box<dyn Policy>, size: u64, page: u64) -> Hinter {
        let page = page.max(1);
        // No capacity: the policy's dense-region rule stays off for hints.
        // It learns whether its windows pay from lookahead markers, and
        // counts a hit as it comes but a miss only when the window ages
        // out, so early on it can only grow bolder. On cold random 64 KiB
        // reads of a quarter of a 1 GiB file it hinted 62 MiB the reader
        // never asked for: 179–186 MB/s against 213–215 with the rule off
        // (steady, 3 runs each). The real sqlite3 range scan gained
        // nothing from it either (0.98× plain).
        let table = SparseTable::new(size.div_ceil(page));
        Hinter {
            read_through_ratio: policy.read_through_ratio(),
            policy,
            table,
            page,
        }
    }

    /// The file's size changed: the table starts afresh.
    pub fn set_size(&mut self, size: u64) {
        self.table.pages = size.div_ceil(self.page);
        self.table.present.clear();
        self.table.marked.clear();
    }

    /// Whether a request the caller knows to be cached matters to the
    /// policy: a lookahead marker is out (it may land on one), or hinted
    /// pages are out whose use the policy counts ([`Policy::outstanding`]:
    /// without those requests it would see its hints go unread).
    pub fn wants_cached_requests(&self) -> bool {
        !self.table.marked.is_empty() || self.policy.outstanding()
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// The policy's view of its streams ([`Policy::describe`]).
    pub fn describe(&self) -> Vec<String> {
        self.policy.describe()
    }

    /// Feeds one request of `len` bytes at `offset`. `cached` says the
    /// caller knows every byte of it was in the kernel's cache (then only a
    /// marker on it is news); `sequential` says it began where the previous
    /// request on the stream ended (the kernel follows that itself, so no
    /// hint is sent). Appends the byte runs to hint, less the request's
    /// own pages (the caller reads those itself), to `out`; returns how
    /// many pages they cover.
    pub fn request(
        &mut self,
        offset: u64,
        len: u64,
        cached: bool,
        sequential: bool,
        out: &mut Vec<(u64, u64)>,
    ) -> u64 {
        let page = self.page;
        let end = offset.saturating_add(len);
        let first = offset / page;
        let count = end.div_ceil(page) - first;
        if cached && !(first..first + count).any(|p| self.table.marked.contains(&p)) {
            if self.policy.outstanding() {
                // What `drive` does for a request of cached, unmarked
                // pages: the policy sees it (and credits its windows).
                let req = Request::new(first, count.max(1));
                self.policy.begin(req);
                self.policy.finish(req);
            }
            return 0;
        }
        if self.table.present.len() > TABLE_PAGES {
            self.table.present.clear();
            self.table.marked.clear();
        }
        super::drive(
            &mut *self.policy,
            &mut self.table,
            Request::new(first, count.max(1)),
        );
        let mut windows = std::mem::take(&mut self.table.windows);
        let fresh = std::mem::take(&mut self.table.fresh);
        if sequential {
            // The kernel follows a forward stream itself, but not a
            // backward or strided window that a forward read decided: a
            // backward scan of rows read forward (sqlite3's leaf and
            // overflow pages) meets its lookahead marker on a forward
            // read. Dropped, that window was taken for read all the same,
            // and never hinted: 36% of such a scan went unhinted. What the
            // kernel reads by itself is given back to the file's budget:
            // charged, a forward stream read as the kernel reads it earned
            // credit that irregular jumps then spent on hints nobody read
            // (h5py every 56th row of 16x1024 chunks: 9,290 pages charged,
            // 350 hinted, 85 of those read).
            for w in windows.iter().filter(|w| w.shape == Shape::Forward) {
                self.policy.left_to_kernel(*w);
            }
            windows.retain(|w| w.shape != Shape::Forward);
            if windows.is_empty() {
                return 0;
            }
        }
        let gap_max = GAP_MAX / page;
        let (req_first, req_end) = (first, first + count);
        let before = out.len();
        // A page is hinted if this request's windows fetch it: made present
        // by them now, or a gap of a stride read whole that nothing read
        // before. Pages read or hinted before are not hinted again (a
        // sqlite3 join under `ahead run` hinted 2,758 pages of which 250
        // were new; each old one cost the kernel a lookup and counted as
        // "hinted" in --stats).
        let table = &self.table;
        let fetched = |p: u64| fresh.contains(&p) || !table.present.contains(&p);
        let mut hint = |start: u64, n: u64| {
            let mut p = start;
            while p < start + n {
                let wanted = |p: u64| (p < req_first || p >= req_end) && fetched(p);
                if !wanted(p) {
                    p += 1;
                    continue;
                }
                let from = p;
                while p < start + n && wanted(p) {
                    p += 1;
                }
                out.push((from, p - from));
            }
        };
        for w in windows {
            match w.shape {
                Shape::Strided { run, period }
                    if !hinted_whole(run, period, gap_max, self.read_through_ratio) =>
                {
                    w.for_each_run(&mut hint)
                }
                _ => hint(w.start, w.size),
            }
        }
        // Two windows of one request may overlap (streams of one stride
        // found twice): each page is hinted, and counted, once.
        out[before..].sort_unstable();
        let mut merged = before;
        for i in before..out.len() {
            let (s, n) = out[i];
            if merged > before && out[merged - 1].0 + out[merged - 1].1 >= s {
                let last = &mut out[merged - 1];
                last.1 = last.1.max(s + n - last.0);
            } else {
                out[merged] = (s, n);
                merged += 1;
            }
        }
        out.truncate(merged);
        let mut pages = 0;
        for r in &mut out[before..] {
            pages += r.1;
            *r = (r.0 * page, r.1 * page);
        }
        pages
    }
}

#[cfg(test)]
mod tests;
