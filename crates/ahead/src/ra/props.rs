//! Property tests of the invariants every policy must hold.

use super::tests_support::Sim;
use super::PolicyKind;
use proptest::prelude::*;

const FILE_PAGES: usize = 1 << 18;

#[derive(Clone, Debug)]
enum Op {
    Read(u64, u64),
    Evict(u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..FILE_PAGES as u64 + 100, 1u64..300).prop_map(|(i, n)| Op::Read(i, n)),
        1 => (0..FILE_PAGES as u64, 1u64..2000).prop_map(|(i, n)| Op::Evict(i, n)),
    ]
}

/// A reader pattern: sequential, backward or strided runs from random
/// places, so that the stateful paths are exercised, not only random reads.
fn patterned() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        (0..FILE_PAGES as u64, 1u64..64, -3i64..20, 1usize..80),
        1..8,
    )
    .prop_map(|runs| {
        let mut ops = Vec::new();
        for (start, count, step_mult, n) in runs {
            let mut at = start as i64;
            for _ in 0..n {
                if at >= 0 {
                    ops.push(Op::Read(at as u64, count));
                }
                at += step_mult * count as i64;
            }
            ops.push(Op::Evict(start, 500));
        }
        ops
    })
}

/// A table read column by column: `passes` sweeps over `rows` rows of
/// `period` pages, sweep `p` reading `run` pages at `p * run` of every row
/// (iozone's stride read), an eviction now and then.
fn sweeps() -> impl Strategy<Value = Vec<Op>> {
    (
        0..FILE_PAGES as u64 / 2,
        1u64..16,
        2u64..20,
        5u64..60,
        1u64..6,
    )
        .prop_map(|(base, run, columns, rows, passes)| {
            let period = run * columns;
            let mut ops = Vec::new();
            for p in 0..passes.min(columns) {
                for r in 0..rows {
                    ops.push(Op::Read(base + r * period + p * run, run));
                }
                if p % 2 == 1 {
                    ops.push(Op::Evict(base + period, period * rows / 2));
                }
            }
            ops
        })
}

fn run(kind: PolicyKind, max: u64, ops: &[Op]) -> Sim {
    run_with(kind, max, ops, None)
}

fn run_with(kind: PolicyKind, max: u64, ops: &[Op], capacity: Option<u64>) -> Sim {
    // `Sim` checks, at every decision, that the window is non-empty, holds at
    // most max pages (or the request), keeps its marker inside, holds the
    // missing page on a miss; and at every submission, that the window is
    // inside the file. Here, after every read: every page it asked for (up to
    // the end of the file) is present — `ra::drive` read what the request
    // needs, whatever the policy decided (Bhattacharya's AIO readahead patch's
    // rule).
    let mut sim = Sim::new(kind, max, FILE_PAGES);
    sim.cache.capacity = capacity;
    for op in ops {
        match *op {
            Op::Read(i, n) => {
                sim.read(i, n);
                let end = (i + n).min(FILE_PAGES as u64);
                if let Some(p) = (i..end).find(|&p| !sim.cache.present[p as usize]) {
                    panic!("{kind}: page {p} of a read of {n} at {i} is absent after it");
                }
            }
            Op::Evict(i, n) => {
                let end = (i + n).min(FILE_PAGES as u64);
                sim.evict_unused(i..end);
            }
        }
    }
    sim
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_for_arbitrary_requests(
        ops in prop::collection::vec(op(), 1..200),
        max in prop::sample::select(vec![1u64, 4, 32, 256]),
    ) {
        for kind in PolicyKind::ALL {
            // Every request is served: `run` checks after each read that no
            // page it asked for is absent.
            run(kind, max, &ops);
        }
    }

    #[test]
    fn invariants_hold_for_patterned_readers(
        ops in patterned(),
        max in prop::sample::select(vec![8u64, 32, 256]),
    ) {
        for kind in PolicyKind::ALL {
            run(kind, max, &ops);
        }
    }

    #[test]
    fn invariants_hold_for_column_sweeps(
        ops in sweeps(),
        max in prop::sample::select(vec![8u64, 32, 256]),
        capacity in prop::option::of(16u64..200_000),
    ) {
        for kind in PolicyKind::ALL {
            run_with(kind, max, &ops, capacity);
        }
    }

    #[test]
    fn random_reads_never_read_beyond_the_request(
        reqs in prop::collection::btree_map(1u64..250, (0u64..512, 1u64..64), 1..60),
        max in prop::sample::select(vec![4u64, 32, 256]),
        order in any::<u64>(),
    ) {
        // Requests in distinct 1024-page slots (never page 0, never next to
        // each other), visited in a shuffled order: nothing to predict.
        let mut list: Vec<(u64, u64)> = reqs
            .iter()
            .map(|(slot, (off, n))| (slot * 1024 + off, *n))
            .collect();
        let len = list.len();
        for i in 0..len {
            let j = ((order.rotate_left(i as u32 * 7) ^ i as u64) % len as u64) as usize;
            list.swap(i, j);
        }
        for kind in PolicyKind::ALL {
            // The kernel's policies treat a request larger than the maximum
            // as a stream: legacy splits it into maximum-sized steps, the
            // second of which looks sequential; on-demand puts the marker
            // inside it to pipeline the next window (the `readit` merge).
            // They are held to requests that fit; `ahead` to any request.
            let fit = |n: u64| if kind == PolicyKind::Ahead { n } else { n.min(max) };
            let wanted: u64 = list.iter().map(|&(_, n)| fit(n)).sum();
            let ops: Vec<Op> = list.iter().map(|&(i, n)| Op::Read(i, fit(n))).collect();
            let sim = run(kind, max, &ops);
            prop_assert_eq!(sim.pages_read(), wanted, "{} read beyond the requests", kind);
        }
    }
}

/// Feeds `requests` seeded random requests to a policy through `Sim`:
/// readers that come and go with forward, backward, strided and random
/// streams interleaved on one file, and evictions of random ranges (so the
/// policy keeps being consulted). `Sim` checks every decision with
/// `check_window` and every submission against the file; here, every page
/// a read asked for must be present after it. Returns pages read.
fn fuzz(kind: PolicyKind, seed: u64, requests: u64) -> u64 {
    const PAGES: usize = 1 << 16;
    let mut rng = fastrand::Rng::with_seed(seed);
    let max = [1u64, 4, 32, 256][rng.usize(..4)];
    let mut sim = Sim::new(kind, max, PAGES);
    if rng.bool() {
        sim.cache.capacity = Some(rng.u64(16..4096));
    }
    // Up to 8 streams: (next page, request pages, step in pages).
    let mut streams: Vec<(i64, u64, i64)> = Vec::new();
    for _ in 0..requests {
        if streams.is_empty() || rng.u32(..64) == 0 {
            let n = rng.u64(1..=64);
            let step = match rng.u32(..4) {
                0 => n as i64,
                1 => -(n as i64),
                2 => n as i64 * rng.i64(2..20),
                _ => 0, // random
            };
            if streams.len() == 8 {
                streams.swap_remove(rng.usize(..8));
            }
            streams.push((rng.i64(0..PAGES as i64), n, step));
        }
        let k = rng.usize(..streams.len());
        let (at, n, step) = streams[k];
        let at = if step == 0 {
            rng.i64(0..PAGES as i64 + 64)
        } else {
            at
        };
        if at < 0 || at >= PAGES as i64 + 64 {
            streams.swap_remove(k);
            continue;
        }
        let i = at as u64;
        sim.read(i, n);
        let end = (i + n).min(PAGES as u64);
        if let Some(p) = (i..end).find(|&p| !sim.cache.present[p as usize]) {
            panic!("{kind} seed {seed}: page {p} of a read of {n} at {i} is absent");
        }
        streams[k].0 = at + step;
        if rng.u32(..16) == 0 {
            let from = rng.u64(..PAGES as u64);
            let to = (from + rng.u64(1..8192)).min(PAGES as u64);
            sim.evict_unused(from..to);
        }
    }
    sim.pages_read()
}

#[test]
fn policies_hold_their_invariants_over_a_quarter_million_random_requests_each() {
    // The suite's share; `fuzz_policies` (ignored) runs millions.
    for kind in PolicyKind::ALL {
        for seed in 0..5 {
            assert!(fuzz(kind, seed, 50_000) > 0);
        }
    }
}

#[test]
#[ignore = "minutes: cargo test --release -p ahead fuzz_policies -- --ignored"]
fn fuzz_policies() {
    for kind in PolicyKind::ALL {
        for seed in 0..100 {
            fuzz(kind, 1000 + seed, 100_000);
        }
    }
}

/// Requests anywhere in files of up to 2^64 - 1 pages, many at their very
/// end, driven through `drive` over a sparse table: no overflow, every
/// window inside the file, non-empty, at most the maximum (or the request),
/// its marker inside, and every page a read asked for present after it.
#[test]
fn requests_at_the_end_of_the_largest_files_drive_without_overflow() {
    use super::{drive, new_policy, RaConfig, Request, SparseTable};
    let mut rng = fastrand::Rng::with_seed(7);
    for kind in PolicyKind::ALL {
        for max in [1u64, 32, 256] {
            let mut policy = new_policy(kind, RaConfig::with_max_pages(max));
            let pages = [u64::MAX, u64::MAX / 4096, rng.u64(1..)][rng.usize(..3)];
            let mut table = SparseTable::new(pages);
            let mut at = pages.saturating_sub(4096);
            for _ in 0..5_000 {
                let n = rng.u64(1..=512);
                let index = match rng.u32(..4) {
                    0 => pages.saturating_sub(rng.u64(1..1024)),
                    1 => rng.u64(..pages),
                    2 => at,
                    _ => pages - 1,
                };
                at = index.saturating_add(n).min(pages - 1);
                if table.present.len() > 200_000 {
                    table.present.clear();
                    table.marked.clear();
                }
                drive(&mut *policy, &mut table, Request::new(index, n));
                for w in table.windows.drain(..) {
                    assert!(
                        w.size > 0 && w.end() <= pages,
                        "{kind}: {w:?} outside the file"
                    );
                    assert!(w.pages() <= max.max(n), "{kind}: {w:?} too large");
                    if let Some(m) = w.marker_page() {
                        assert!(w.contains(m), "{kind}: marker {m} outside {w:?}");
                    }
                }
                // Past MAX_PAGES is past the end, as far as drive goes.
                let end = index.saturating_add(n).min(pages).min(super::MAX_PAGES);
                if let Some(p) = (index..end).find(|p| !table.present.contains(p)) {
                    panic!("{kind} max {max}: page {p} of {n} at {index} absent");
                }
            }
        }
    }
}
