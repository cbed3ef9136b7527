//! Tests of the `ahead` policy.

use super::dense::{DENSE_MARKERS, DENSE_SHARE_START};
use super::stride::STRIDE_MAX_RUNS;
use super::*;
use crate::ra::tests_support::Sim;
use crate::ra::PolicyKind;
use crate::testdata::column_order;

mod stride;

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
    let mut p = StreamTable::new(RaConfig::with_max_pages(128));
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

/// Single pages from page 10,000 up, `steps` of them, each `gap` pages plus
/// up to `jitter` more after the last; returns the page after the last.
fn jittered_walk(s: &mut Sim, gap: u64, jitter: u64, seed: u64, steps: usize) -> u64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut at = 10_000u64;
    for _ in 0..steps {
        s.read(at, 1);
        at += gap + rng.u64(0..=jitter);
    }
    at
}

#[test]
fn an_irregular_stride_with_short_gaps_is_read_through() {
    let mut s = sim(64);
    let end = jittered_walk(&mut s, 3, 1, 3, 600);
    assert!(
        s.demand_ios() <= 8,
        "demand I/Os: {}, windows {:?}",
        s.demand_ios(),
        s.first_windows(12)
    );
    // Reading through costs the gaps, and no more.
    assert!(s.pages_read() <= end - 10_000 + 64, "{}", s.pages_read());
}

#[test]
fn an_irregular_stride_with_long_gaps_reads_only_what_is_asked() {
    let mut s = sim(64);
    jittered_walk(&mut s, 40, 2, 4, 600);
    let wasted = s.pages_read() - 600;
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
fn interleaved_streams_share_what_readahead_may_hold() {
    // Eight streams in a cache whose readahead may hold 1024 pages: each
    // keeps two windows and the pages it has read (SHARE_WINDOWS, three),
    // so none grows past 1024 / 24 = 42 pages, however large the policy's
    // maximum (256). Eight interleaved streams reading an object with 64
    // MiB windows in a 256 MiB cache fetched 2.45 times what they used
    // with no share, 1.06 with two windows each; with two, their next
    // windows were still evicted before use in one run in three.
    let mut s = sim(256);
    s.cache.capacity = Some(1024);
    let share = 1024 / (super::SHARE_WINDOWS * 8);
    assert_eq!(share, 42);
    let bases: Vec<u64> = (0..8).map(|i| 1000 + i * 10_000).collect();
    for step in 0..2000 {
        for &b in &bases {
            s.read(b + step, 1);
        }
    }
    let largest = s.windows().iter().map(|w| w.size).max().unwrap();
    assert!(largest <= share, "largest window {largest}");
    // And they still read ahead at that size.
    let full = s.windows().iter().filter(|w| w.size == share).count();
    assert!(full > 100, "windows of {share} pages: {full}");
    // One stream alone may use a third of it.
    let mut one = sim(1024);
    one.cache.capacity = Some(1024);
    for i in 0..20_000 {
        one.read(1000 + i, 1);
    }
    let largest = one.windows().iter().map(|w| w.size).max().unwrap();
    assert_eq!(largest, 1024 / super::SHARE_WINDOWS);
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
    // Without the file's speculation budget, passes 1, 5, 9 and 13
    // (counting from 0) read columns 1-4, 5-8, 9-12 and 13-16 with a
    // window every few rows. Under it, the columns read for later passes
    // may hold no more pages unread than the sweeps have used
    // (`ra::budget`): early sweeps read fewer columns ahead, and about
    // half of the passes find their column read by an earlier one.
    let idle = per_pass[2..18].iter().filter(|&&n| n <= 4).count();
    assert!(
        idle >= 8,
        "passes that found their column read: {per_pass:?}"
    );
    assert!(per_pass[1] >= 10, "{per_pass:?}");
    // Nothing is read twice (the table panics on that) and nothing
    // outside the records: every page read is a page of the file.
    assert!(s.pages_read() <= 1700 * 4);
    // The marker of the first (forward) window, hit by a later pass, is
    // the kernel's: the floor ramps on from it as the kernel would
    // (`ra::budget`), through the file's first rows, whose records later
    // passes read. It does not turn the strided reader into a forward
    // one: no forward window reads more than a request past the first
    // two maximum windows, and the sweeps go on after the last one.
    let windows = s.windows();
    let forward: Vec<(usize, &Window)> = windows
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, w)| w.shape == Shape::Forward && w.size > 4)
        .collect();
    assert!(
        forward.iter().all(|(_, w)| w.end() <= 2 * 64 + 8),
        "{forward:?}"
    );
    let last_forward = forward.last().map_or(0, |&(i, _)| i);
    assert!(
        windows[last_forward..]
            .iter()
            .any(|w| matches!(w.shape, Shape::Strided { .. })),
        "{forward:?}"
    );
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

#[test]
fn readers_interleaved_on_one_handle_become_forward_streams() {
    // Eight readers of 16 MiB parts of one file, 64 KiB from each in turn
    // (mountpoint-s3 #1886's job): a period of exactly 4096 pages, which
    // the stride rule accepts. Once the first requests wrap, each part is
    // a forward stream of its own, ramped to the maximum, and no request
    // after the first two rounds is read on its own.
    let mut s = Sim::new(PolicyKind::Ahead, 1024, 8 * 4096);
    s.cache.capacity = Some(60_000);
    let mut alone_late = 0;
    for k in 0..256u64 {
        for row in 0..8u64 {
            let req = row * 4096 + k * 16;
            let before = s.windows().len();
            s.read(req, 16);
            let only_request = s.windows()[before..]
                .iter()
                .any(|w| w.start == req && w.size == 16 && w.async_size == 0);
            if k >= 2 && only_request {
                alone_late += 1;
            }
        }
    }
    assert_eq!(alone_late, 0);
    assert_eq!(s.demand_ios(), 0);
    for row in 0..8u64 {
        let (lo, hi) = (row * 4096, (row + 1) * 4096);
        let largest = s
            .windows()
            .iter()
            .filter(|w| w.start >= lo && w.start < hi && w.shape == Shape::Forward)
            .map(|w| w.size)
            .max()
            .unwrap_or(0);
        assert_eq!(largest, 1024, "row {row}");
    }
}

/// The largest backward window a reader of 16 pages at a time got in its
/// first `requests` requests, on a device of `cost`.
fn early_backward_window(cost: Option<crate::ra::DeviceCost>, requests: u64) -> u64 {
    let mut s = sim(4096);
    s.cache.device = cost;
    for k in 1..=requests {
        s.read(60_000 - k * 16, 16);
    }
    s.windows()
        .iter()
        .filter(|w| w.shape == Shape::Backward)
        .map(|w| w.size)
        .max()
        .unwrap_or(0)
}

#[test]
fn a_far_store_reads_a_round_trip_ahead_before_the_stream_has_shown_as_much() {
    // Ten requests of 16 pages: a stream of ahead's own rules reads ahead
    // no more than it has been asked for (160 pages)...
    assert!(early_backward_window(None, 10) <= 160);
    // ...nor where a round trip is worth less than the kernel's window
    // (the simulator's ssd: 9 pages)...
    let ssd = crate::ra::DeviceCost {
        request_pages: 0,
        latency_pages: 9,
        parallelism: 32,
    };
    assert!(early_backward_window(Some(ssd), 10) <= 160);
    // ...but on an object store (a round trip is 2.7 MB, 675 pages) its
    // windows ramp as the kernel's do, ×4 then ×2 (64, 256, 512), past
    // what it has shown: a window cut to that would make the reader wait
    // one round trip for each.
    let store = crate::ra::DeviceCost::object_store(4096, 64);
    assert_eq!(early_backward_window(Some(store), 10), 512);
    // A round trip's worth is the most it reads beyond what was shown
    // (640 pages asked for in 40 requests).
    assert!(early_backward_window(Some(store), 40) <= store.latency_pages);
}

/// Rows of the interleaved job whose second request found a window already
/// decided for it (before the request came), on a device of `cost`.
fn rows_read_ahead_in_round_two(cost: Option<crate::ra::DeviceCost>) -> Vec<u64> {
    let mut s = Sim::new(PolicyKind::Ahead, 4096, 8 * 4096);
    s.cache.capacity = Some(60_000);
    s.cache.device = cost;
    let mut ahead = Vec::new();
    for k in 0..4u64 {
        for row in 0..8u64 {
            let req = row * 4096 + k * 16;
            if k == 1 && s.windows().iter().any(|w| w.contains(req)) {
                ahead.push(row);
            }
            s.read(req, 16);
        }
    }
    ahead
}

#[test]
fn on_a_far_store_rows_split_from_interleaved_readers_get_their_windows_at_once() {
    // Eight readers of 16 MiB parts of an object on one handle: when the
    // first request of the second round shows the rows, every other row's
    // first window goes out with it, so that no row's second request
    // waits a round trip of its own...
    // (Row 0 is read ahead either way: a first read at 0 is taken as the
    // start of a whole-file read.)
    let store = crate::ra::DeviceCost::object_store(4096, 64);
    assert_eq!(
        rows_read_ahead_in_round_two(Some(store)),
        (0..8).collect::<Vec<_>>()
    );
    // ...where a round trip costs little, each row's window waits for its
    // request, as before.
    assert_eq!(rows_read_ahead_in_round_two(None), vec![0]);
}

#[test]
fn a_scan_between_random_single_reads_ramps_as_the_kernels_does() {
    // The kernel reads a random request as it is and leaves the file's
    // readahead state alone, so a scan between such requests ramps as if
    // alone. ahead took it for a stream interleaved with another, and cut
    // each of its windows to the pages it had asked for so far (21 pages
    // after 7 requests of 3), a slower ramp than the kernel's.
    let mut s = sim(512);
    let mut rng = fastrand::Rng::with_seed(3);
    let mut asked = 0;
    let mut largest_over_asked = 0u64;
    for k in 0..60u64 {
        s.read(rng.u64(0..8000), 1);
        let before = s.windows().len();
        s.read(8192 + 3 * k, 3);
        asked += 3;
        for w in &s.windows()[before..] {
            if w.start >= 8192 {
                largest_over_asked = largest_over_asked.max(w.size.saturating_sub(asked));
            }
        }
    }
    assert!(
        largest_over_asked > 0,
        "every window of the scan was cut to what it had asked for"
    );
}

#[test]
fn a_late_reader_ramps_past_the_kernel_only_as_far_as_it_has_read() {
    // A reader late at every window (each of its windows' pages still in
    // flight when asked for), with windows of up to 8 MiB: after every
    // request the policy hears of a late hit. Each window may be the
    // kernel's next step, or larger only up to the pages the stream has
    // asked for; without that cap it ramped ×16 a window and read 1,024
    // pages ahead of a run of 172.
    let max = 2048;
    let mut p = StreamTable::new(RaConfig::with_max_pages(max));
    let mut t = crate::ra::SparseTable::new(1 << 20);
    let (mut asked, mut last) = (0u64, 0u64);
    for i in 0..172 {
        crate::ra::drive(&mut p, &mut t, Request::new(i, 1));
        asked += 1;
        for w in std::mem::take(&mut t.windows) {
            if last > 0 {
                let kernel = crate::ra::next_window(last, max);
                assert!(
                    w.size <= kernel.max(asked),
                    "window {w:?} after {last} pages, {asked} asked"
                );
            }
            last = w.size;
        }
        p.feedback(Feedback::LateHit { index: i });
    }
    assert!(last > 0, "no window");
    // As much read ahead as the kernel's ramp reads for the same run.
    let mut k = crate::ra::ondemand::OnDemand::new(RaConfig::with_max_pages(max));
    let mut kt = crate::ra::SparseTable::new(1 << 20);
    for i in 0..172 {
        crate::ra::drive(&mut k, &mut kt, Request::new(i, 1));
    }
    let pages = |t: &crate::ra::SparseTable| t.present.len();
    assert!(
        pages(&t) <= pages(&kt),
        "{} pages read, the kernel's ramp {}",
        pages(&t),
        pages(&kt)
    );
}

#[test]
fn two_lone_pages_ahead_of_a_scan_do_not_hold_its_windows() {
    // sqlite3 scanning a table reads an interior page far ahead first,
    // another next to it midway, keeps both, and skips them when the scan
    // gets there. The two lone reads, one page apart, continue each other
    // but never read ahead: the scan continued after them is not
    // interleaved with another reader, and its windows ramp as the
    // kernel's do (they were held to the pages it had asked for, 470 of
    // the kernel's 1,024).
    let max = 1024;
    let mut order: Vec<u64> = (0..5).collect();
    order.push(516);
    order.extend(5..455);
    order.push(517);
    order.extend((455..516).chain(518..3000));
    let largest = |p: &mut dyn crate::ra::Policy| {
        let mut t = crate::ra::SparseTable::new(1 << 20);
        for &i in &order {
            crate::ra::drive(p, &mut t, Request::new(i, 1));
        }
        t.windows.iter().map(|w| w.size).max().unwrap()
    };
    let kernel = largest(&mut crate::ra::ondemand::OnDemand::new(
        RaConfig::with_max_pages(max),
    ));
    let ours = largest(&mut StreamTable::new(RaConfig::with_max_pages(max)));
    assert_eq!(kernel, max);
    assert_eq!(ours, kernel, "the scan's largest window");
}
