//! Tests of the speculation budget: its ranges, cuts, floor and gap
//! credit, and the bound under arbitrary request sequences.

use super::*;
use crate::ra::tests_support::VecCache;
use crate::ra::Policy;

fn cfg(read_through_gap: u64) -> RaConfig {
    RaConfig {
        read_through_gap,
        ..RaConfig::default()
    }
}

fn view(pages: usize) -> VecCache {
    VecCache::new(pages)
}

#[test]
fn ranges_merge_split_and_credit_each_page_once() {
    let mut b = Ranges::default();
    for p in [5, 6, 7, 9, 8, 20] {
        b.add(p);
    }
    assert_eq!(b.0.len(), 2, "{:?}", b.0);
    assert_eq!(b.take(6, 8), 2);
    assert_eq!(b.take(6, 8), 0, "a page is earned once");
    assert!(b.has(5) && b.has(8) && b.has(9) && !b.has(6) && b.has(20));
    assert_eq!(b.take(9, 5), 0, "an empty span takes nothing");
    assert_eq!(b.take(0, 100), 4);
    assert!(b.is_empty());
}

/// A backward scan of 8 KiB rows under `ahead run` hinted a third less
/// once the range map was full: it forgot the lowest ranges, the next
/// ones a backward reader takes.
#[test]
fn a_full_range_map_forgets_what_lies_farthest_from_the_reader() {
    let mut b = Ranges::default();
    let n = MAX_RANGES as u64 + 100;
    // Single pages walking down, as a backward reader's fragmented
    // windows leave them.
    for k in (0..n).rev() {
        b.add(2 * k);
    }
    assert_eq!(b.0.len(), MAX_RANGES);
    assert!(
        b.has(0) && b.has(2),
        "the pages next to the reader are kept"
    );
    assert!(!b.has(2 * (n - 1)), "the farthest are forgotten");
    // And walking up, the other way.
    let mut b = Ranges::default();
    for k in 0..n {
        b.add(2 * k);
    }
    assert!(b.has(2 * (n - 1)) && !b.has(0));
}

#[test]
fn a_short_gap_between_pages_used_is_credited_with_them() {
    let mut b = Ranges::default();
    for p in 100..140 {
        b.add(p);
    }
    // Read 1, skip 3, through the span: each gap lies between the last
    // page taken and this one.
    let used: u64 = (0..10)
        .map(|k| b.take_with_gap(Request::new(100 + 4 * k, 1), 16, 100 + 4 * k - 3))
        .sum();
    assert_eq!(used, 37, "all but the gap after the last page");
    // A page taken far above the last leaves the gap between alone.
    let mut b = Ranges::default();
    for p in 100..200 {
        b.add(p);
    }
    let used = b.take_with_gap(Request::new(100, 1), 16, 0)
        + b.take_with_gap(Request::new(150, 1), 16, 101);
    assert_eq!(used, 2);
    // So does a first page taken inside a span: the pages below it lie
    // between no two pages the reader took.
    let mut b = Budget::new(&cfg(0));
    let v = view(1000);
    let w = Window::forward(100, 40, 0);
    b.admit(Some(w), None, Request::new(99, 1), &v);
    b.credit(Request::new(110, 1));
    assert_eq!(b.used(), 1);
    b.credit(Request::new(114, 1));
    assert_eq!(b.used(), 5, "the gap between two pages taken");
}

#[test]
fn a_window_is_cut_to_what_is_left_in_the_readers_direction() {
    let v = view(10_000);
    let mut b = Budget::new(&cfg(0));
    let w = Window {
        start: 4000,
        size: 1001,
        async_size: 500,
        shape: Shape::Backward,
    };
    let got = b.admit(Some(w), None, Request::new(5000, 1), &v).unwrap();
    assert_eq!(got.end(), 5001, "the pages nearest the reader are kept");
    assert_eq!(got.size, CREDIT_PAGES + 1);
    assert_eq!(b.left(), 0);
    assert!(b.holds());
    // Nothing more may be speculated on until some of it is used.
    let next = Window::forward(7000, 100, 50);
    assert_eq!(b.admit(Some(next), None, Request::new(6990, 1), &v), None);
    // A reader that takes what was read ahead earns twice its pages.
    b.credit(Request::new(4990, 10));
    assert_eq!(b.used(), 10);
    assert_eq!(b.left(), 20);
    assert!(b.holds());
}

#[test]
fn the_kernels_window_is_free_and_read_when_the_budget_is_spent() {
    let v = view(100_000);
    let mut b = Budget::new(&cfg(0));
    // Spend the budget.
    let w = Window::forward(50_000, 1000, 0);
    b.admit(Some(w), None, Request::new(50_000, 1), &v);
    assert_eq!(b.left(), 0);
    // A window that the kernel's would cover is read whole, uncharged.
    let req = Request::new(0, 4);
    let kernel = Window::forward(0, 32, 28);
    let ours = Window::forward(0, 16, 12);
    assert_eq!(b.admit(Some(ours), Some(kernel), req, &v), Some(ours));
    assert_eq!(b.charged(), CREDIT_PAGES);
    assert_eq!(b.floor(), 12);
    // One that reads elsewhere gives way to the kernel's.
    let back = Window {
        start: 100,
        size: 200,
        async_size: 100,
        shape: Shape::Backward,
    };
    let req = Request::new(296, 4);
    let kernel = Window::forward(296, 16, 12);
    assert_eq!(b.admit(Some(back), Some(kernel), req, &v), Some(kernel));
    assert_eq!(b.charged(), CREDIT_PAGES);
    assert!(b.holds());
}

/// The floor through the policy: a sequential reader in a file whose
/// budget went to waste still gets the kernel's windows, all of them.
#[test]
fn a_sequential_reader_keeps_the_kernels_windows_with_an_empty_budget() {
    use crate::ra::{ahead::StreamTable, drive, ondemand::OnDemand, SparseTable};
    let config = RaConfig::with_max_pages(64);
    let run = |policy: &mut dyn Policy| {
        let mut t = SparseTable::new(1 << 20);
        // Random reads far apart, then a scan.
        for k in 0..200u64 {
            drive(policy, &mut t, Request::new(500_000 + k * 997 % 100_000, 1));
        }
        t.windows.clear();
        for k in 0..4096u64 {
            drive(policy, &mut t, Request::new(10_000 + k, 1));
        }
        t.windows.iter().map(|w| w.pages()).sum::<u64>()
    };
    let mut ours = Budgeted::new(StreamTable::new(config), &config);
    let mut kernel = OnDemand::new(config);
    assert!(run(&mut ours) >= run(&mut kernel));
    assert!(ours.budget().holds());
}

#[test]
fn the_gaps_of_a_stride_read_whole_are_charged() {
    let v = view(10_000);
    let w = Window {
        start: 100,
        size: 3 * 40 + 2,
        async_size: 0,
        shape: Shape::Strided { run: 2, period: 3 },
    };
    let req = Request::new(100, 1);
    let short = Window {
        size: 3 * 20 + 2,
        ..w
    };
    let mut runs_only = Budget::new(&cfg(0));
    let a = runs_only.admit(Some(short), None, req, &v).unwrap();
    assert_eq!(runs_only.charged(), 41, "its runs beyond the request");
    assert_eq!(a, short);
    let mut whole = Budget::new(&cfg(2));
    whole.admit(Some(short), None, req, &v).unwrap();
    assert_eq!(whole.charged(), 61, "its runs and gaps beyond the request");
    let mut whole = Budget::new(&cfg(2));
    let b = whole.admit(Some(w), None, req, &v).unwrap();
    let charged = whole.charged();
    assert!(
        charged <= CREDIT_PAGES && charged > CREDIT_PAGES - 3,
        "gaps and runs: {charged}"
    );
    assert!(b.size < w.size && b.size > CREDIT_PAGES / 3, "{b:?}");
}

/// A page table that counts, independently of the budget, the pages
/// read ahead and how many of them a later request took.
struct Counting {
    table: crate::ra::SparseTable,
    unused: std::collections::HashSet<u64>,
    read_ahead: u64,
    taken: u64,
    /// The request being served: its own pages are not read ahead.
    current: Request,
    /// Strided windows with gaps up to this (and periods up to `ratio`
    /// times their runs) are read whole.
    gap: u64,
    ratio: u64,
    /// What the device charges, if the engine knows (a far store's round
    /// trip lets windows run past what a stream has shown, and rows split
    /// from interleaved readers get windows of their own at once).
    device: Option<crate::ra::DeviceCost>,
}

impl CacheView for Counting {
    fn file_pages(&self) -> u64 {
        self.table.file_pages()
    }
    fn is_present(&self, index: u64) -> bool {
        self.table.is_present(index)
    }
    fn device_cost(&self) -> Option<crate::ra::DeviceCost> {
        self.device
    }
}

impl crate::ra::PageTable for Counting {
    fn lookup(&self, index: u64) -> crate::ra::Lookup {
        self.table.lookup(index)
    }
    fn clear_marker(&mut self, index: u64) {
        self.table.clear_marker(index)
    }
    fn submit_readahead(&mut self, w: &Window) {
        // An engine that reads a strided window whole, gaps included,
        // where the hints' rule says so.
        let whole = matches!(w.shape, Shape::Strided { run, period }
            if crate::ra::hints::hinted_whole(run, period, self.gap, self.ratio));
        let w = &if whole {
            Window {
                shape: Shape::Forward,
                ..*w
            }
        } else {
            *w
        };
        w.for_each_run(|s, n| {
            for p in s..s + n {
                let own = p >= self.current.index && p < self.current.end();
                if !own && !self.table.present.contains(&p) {
                    self.read_ahead += 1;
                    self.unused.insert(p);
                }
            }
        });
        self.table.submit_readahead(w);
    }
    fn submit_demand(&mut self, index: u64, count: u64) {
        self.table.submit_demand(index, count)
    }
}

/// Requests of every shape the policy knows: runs forward, backward,
/// strided with jitter, at random; and readers interleaved on one handle
/// (`rows` of them, each going forward, one request from each in turn).
fn requests() -> impl proptest::strategy::Strategy<Value = Vec<(u64, u64)>> {
    use proptest::prelude::*;
    prop::collection::vec(
        (
            0u64..60_000,
            1u64..40,
            -40i64..60,
            0u64..3,
            1usize..60,
            1u64..10,
        ),
        1..10,
    )
    .prop_map(|runs| {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (start, count, step, jitter, n, rows) in runs {
            if rows > 1 {
                // Rows at most MAX_STRIDE_PERIOD apart, as the stride
                // rule that finds them first needs.
                let spacing = (60_000 / rows).min(4096);
                for k in 0..n as u64 {
                    for r in 0..rows {
                        out.push((start % spacing + r * spacing + k * count, count));
                    }
                }
                continue;
            }
            let mut at = start as i64;
            for k in 0..n {
                let index = at.max(0) as u64 + (k as u64 % (jitter + 1));
                out.push((index, count));
                at += step;
            }
        }
        out
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// The budget's inequality after every request, and the same
    /// bound counted from outside: pages read ahead that no request
    /// took are at most `k` (plus the gap credit) times those taken,
    /// plus `c`.
    #[test]
    fn speculation_never_exceeds_the_budget(reqs in requests(), max in 4u64..512, gap in 0u64..20, hints: bool, gaps_as_reads: bool, far: bool) {
        use crate::ra::{ahead::StreamTable, drive, RaConfig};
        let config = RaConfig {
            read_through_gap: gap,
            hints,
            hint_gaps_as_reads: hints && gaps_as_reads,
            ..RaConfig::with_max_pages(max)
        };
        let mut policy = Budgeted::new(StreamTable::new(config), &config);
        let mut t = Counting {
            table: crate::ra::SparseTable::new(70_000),
            unused: Default::default(),
            read_ahead: 0,
            taken: 0,
            current: Request::new(0, 0),
            gap,
            ratio: config.read_through_ratio(),
            device: far.then(|| crate::ra::DeviceCost::object_store(4096, 64)),
        };
        for (index, count) in reqs {
            for p in index..index + count {
                if t.unused.remove(&p) {
                    t.taken += 1;
                }
            }
            let req = Request::new(index, count);
            t.current = req;
            drive(&mut policy, &mut t, req);
            let b = policy.budget();
            proptest::prop_assert!(b.holds(), "{:?}", b);
            let (num, den) = WASTE_PER_USE;
            let wasted = t.read_ahead - t.taken;
            // The gap credit gives each request that takes a page at
            // most `g` pages below it, so the budget's `used` is at
            // most (1 + g) pages taken, and what it bounds,
            // `charged − used ≤ k·used + c`, gives
            // `read ahead − taken ≤ (k(1 + g) + g)·taken + c`.
            let g = b.gap_credit();
            // Pages on the kernel's floor are read as `ondemand` would
            // read them, outside the budget (and earn).
            let bound = (num.div_ceil(den) * (1 + g) + g) * t.taken + b.credit_pages() + b.floor();
            proptest::prop_assert!(
                wasted <= bound,
                "read ahead {} taken {} (budget {:?})", t.read_ahead, t.taken, b
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// The hints' bound as `ahead run --stats` counts it, after every
    /// request of arbitrary sequences (`hints_within_their_bound`).
    #[test]
    fn hinted_pages_unread_are_within_the_hints_bound(reqs in requests(), max in 4u64..512) {
        if let Err(e) = hints_within_their_bound(&reqs, max) {
            proptest::prop_assert!(false, "{}", e);
        }
    }
}

/// Feeds `reqs` (page, count) to a [`Hinter`](crate::ra::hints::Hinter)
/// for windows of up to `max` pages as the preload feeds it (sequential
/// where a request begins at the previous one's end, cached where every
/// page of it was hinted), counting what `ahead run --stats` counts;
/// after every request, hinted pages must be at most the larger of `1 + k`
/// times those taken and `c`. So every file that hinted more than `c`
/// pages has an accuracy of one half or more.
fn hints_within_their_bound(reqs: &[(u64, u64)], max: u64) -> Result<(), String> {
    use crate::ra::{hints, new_policy, PolicyKind};
    let page = 4096;
    let policy = new_policy(PolicyKind::Ahead, hints::config(max * page, page));
    let mut h = hints::Hinter::new(policy, 70_000 * page, page);
    let mut unread = hints::Unread::default();
    let (mut sent, mut read, mut last_end) = (0u64, 0u64, u64::MAX);
    let mut out = Vec::new();
    let (num, den) = WASTE_PER_USE;
    for &(index, count) in reqs {
        let (at, len) = (index * page, count * page);
        let (taken, cached) = unread.read(index, index + count);
        read += taken;
        out.clear();
        sent += h.request(at, len, cached, at == last_end, &mut out);
        last_end = at + len;
        for &(s, n) in &out {
            unread.hinted(s / page, (s + n) / page, usize::MAX);
        }
        if sent * den > (read * (num + den)).max(HINT_CREDIT_PAGES * den) {
            return Err(format!("hinted {sent}, read {read}: {:?}", h.describe()));
        }
    }
    Ok(())
}

/// Hints start with nothing to spend: the pages the policy foresaw must
/// first be read by the program unaided, as the hints' bound would have
/// them read; then the credit is small.
#[test]
fn hints_wait_for_the_reads_to_bear_the_policy_out() {
    let v = view(10_000);
    let config = crate::ra::hints::config(DEFAULT_MAX_PAGES * 4096, 4096);
    let window = |start, size| Window {
        start,
        size,
        async_size: 0,
        shape: Shape::Forward,
    };
    // A policy foreseeing 32 pages at a time of which the program reads
    // 8: however many it reads, no hint.
    let mut poor = Budget::new(&config);
    for k in 0..20 {
        let at = 1000 + 100 * k;
        assert_eq!(
            poor.admit(Some(window(at + 1, 32)), None, Request::new(at, 1), &v),
            None
        );
        for p in at + 1..at + 9 {
            poor.credit(Request::new(p, 1));
        }
    }
    assert_eq!((poor.foreseen(), poor.foreseen_used()), (640, 160));
    assert_eq!((poor.charged(), poor.credit_pages()), (0, 0));

    // One foreseeing 8 pages at a time, all of which the program reads.
    let mut b = Budget::new(&config);
    assert_eq!(
        b.admit(Some(window(101, 8)), None, Request::new(100, 1), &v),
        None
    );
    assert_eq!(b.charged(), 0, "nothing hinted without evidence");
    for p in 101..109 {
        b.credit(Request::new(p, 1));
    }
    assert_eq!(b.foreseen_used(), 8, "not yet enough");
    assert_eq!(
        b.admit(Some(window(109, 8)), None, Request::new(108, 1), &v),
        None
    );
    // Seven of them: one unread of 15 read is within the bound, but 16
    // are asked.
    for p in 109..116 {
        b.credit(Request::new(p, 1));
    }
    assert_eq!(b.credit_pages(), 0);
    b.credit(Request::new(116, 1));
    assert_eq!(b.foreseen_used(), HINT_EVIDENCE_PAGES);
    let w = b
        .admit(Some(window(300, 64)), None, Request::new(299, 1), &v)
        .unwrap();
    assert_eq!(w.pages(), HINT_CREDIT_PAGES, "the credit, and no more");
    // Eight of them used: still within `c`, nothing more to hint.
    for p in 300..308 {
        b.credit(Request::new(p, 1));
    }
    assert_eq!(b.used(), 8);
    assert_eq!(b.left(), 0);
    assert!(b.holds());
    // Twenty used: (1 + k)·20 = 40 may be hinted in all, 8 more.
    for p in 308..320 {
        b.credit(Request::new(p, 1));
    }
    assert_eq!(b.left(), 8);
    let w = b
        .admit(Some(window(332, 64)), None, Request::new(319, 1), &v)
        .unwrap();
    assert_eq!(w.pages(), 8);
    // All 40 used: 80 in all, 40 more; half of what was hinted is read
    // whenever more than `c` was hinted.
    for p in (320..332).chain(332..340) {
        b.credit(Request::new(p, 1));
    }
    assert_eq!(b.used(), 40);
    assert_eq!(b.left(), 40, "(1 + k)·40 − 40, not k·40 + c");
    assert!(b.holds());
}

/// A window that the engine leaves to the kernel (hints: a forward
/// stream's, on a sequential read) is given back whole: neither spent nor,
/// read, earned. Only what the request now served charged is given back.
#[test]
fn a_window_left_to_the_kernel_is_given_back() {
    let v = view(10_000);
    let mut b = Budget::new(&cfg(0));
    let first = Window::forward(100, 16, 0);
    b.credit(Request::new(99, 1));
    b.admit(Some(first), None, Request::new(99, 1), &v).unwrap();
    assert_eq!(b.charged(), 16);
    // The next request: its window is left to the kernel, the first's
    // pages stay charged.
    b.credit(Request::new(50, 1));
    let second = Window::forward(60, 40, 0);
    let overlapping = Window::forward(90, 40, 0);
    b.admit(Some(second), None, Request::new(50, 1), &v)
        .unwrap();
    assert_eq!(b.charged(), 56);
    b.refund(overlapping);
    assert_eq!(b.charged(), 16 + 30, "60..90 given back, 100..116 kept");
    b.refund(second);
    assert_eq!(b.charged(), 16);
    // Read, the pages given back earn nothing.
    b.credit(Request::new(60, 40));
    assert_eq!(b.used(), 0);
    b.credit(Request::new(100, 16));
    assert_eq!(b.used(), 16);
    assert!(b.holds());
}

#[test]
fn a_far_source_gets_a_credit_of_round_trips_that_never_shrinks() {
    let config = cfg(0);
    let mut b = Budget::new(&config);
    let base = b.credit_pages();
    let far = crate::ra::DeviceCost::object_store(4096, 64);
    let mut v = view(100_000);
    let w = |start| Some(Window::forward(start, 8, 0));
    // A disk: the credit stays.
    b.admit(w(10), None, Request::new(0, 1), &v);
    assert_eq!(b.credit_pages(), base);
    // A store whose round trip is worth 675 pages: eight of them.
    v.device = Some(far);
    b.admit(w(100), None, Request::new(90, 1), &v);
    assert_eq!(b.credit_pages(), FAR_CREDIT_ROUND_TRIPS * far.latency_pages);
    assert!(b.credit_pages() > base);
    // The store measured nearer later: what was admitted stays bounded.
    v.device = Some(crate::ra::DeviceCost {
        latency_pages: 40,
        ..far
    });
    b.admit(w(200), None, Request::new(190, 1), &v);
    assert_eq!(b.credit_pages(), FAR_CREDIT_ROUND_TRIPS * far.latency_pages);
    assert!(b.holds());
    // Hints have their own credit, far or not.
    let hints = RaConfig {
        hints: true,
        ..config
    };
    let mut h = Budget::new(&hints);
    v.device = Some(far);
    h.admit(w(10), None, Request::new(0, 1), &v);
    assert_eq!(h.credit, HINT_CREDIT_PAGES);
}
