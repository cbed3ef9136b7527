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
    // `Sim` checks, at every decision, that the window is non-empty, holds
    // at most max pages (or the request), keeps its marker inside, holds the
    // missing page on a miss; and at every submission, that the window is
    // inside the file. Here, after every read: every page it asked for (up
    // to the end of the file) is present — `ra::drive` read what the
    // request needs, whatever the policy decided (seed 001's rule).
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
