//! The `remote` scenario: `ahead bench remote`'s patterns on one object,
//! each on a fresh cache, with the engine settings that benchmark gives
//! ahead (a 256 MiB cache, 64 MiB windows, GETs of at most 4 MiB, 64 in
//! flight). With `--device s3` it predicts the benchmark's `ahead` rows.
//!
//! The benchmark's `many-objects` and `copy` patterns have no counterpart
//! here: a simulated reader reads one file, and a copy is not read
//! through the cache.

use super::{per_policy, result, setup, Scenario, SimError, SimOptions, SimResult, PAGE};
use crate::engine::{EngineConfig, Op, ReaderSpec, Simulator};
use ahead::ra::RaConfig;
use ahead::units::{KIB, MIB};

/// The largest GET `ahead bench remote` lets the engine send.
const MAX_IO: u64 = 4 * MIB;

/// A pattern of the benchmark: its name, its reads (offset, length), and
/// how many of them are in flight at once.
struct Pattern(&'static str, Vec<(u64, u64)>, usize);

/// The patterns, as the benchmark names them.
fn patterns(file: u64, seed: u64) -> Vec<Pattern> {
    let seq = |bs: u64| (0..file / bs).map(|i| (i * bs, bs)).collect::<Vec<_>>();
    let mut rng = fastrand::Rng::with_seed(seed);
    let k64 = 64 * KIB;
    let part = file / 8;
    vec![
        Pattern("seq", seq(MIB), 1),
        Pattern("seq-64k", seq(k64), 1),
        Pattern("reverse", seq(k64).into_iter().rev().collect(), 1),
        Pattern(
            "stride",
            (0..file / (256 * KIB))
                .map(|i| (i * 256 * KIB, k64))
                .collect(),
            1,
        ),
        Pattern(
            "random-4k",
            (0..4096)
                .map(|_| (rng.u64(0..file / 4096) * 4096, 4096))
                .collect(),
            1,
        ),
        Pattern(
            "random-64k",
            (0..8192)
                .map(|_| (rng.u64(0..file / k64) * k64, k64))
                .collect(),
            64,
        ),
        Pattern(
            "interleaved-8",
            (0..part / k64)
                .flat_map(|i| (0..8).map(move |s| (s * part + i * k64, k64)))
                .collect(),
            1,
        ),
    ]
}

pub(super) fn remote(sc: &Scenario, o: &SimOptions) -> Result<Vec<SimResult>, SimError> {
    let s = setup(sc, o)?;
    let pages = s.file.div_ceil(PAGE);
    let all = patterns(s.file, o.seed);
    Ok(per_policy(o, |policy| {
        all.iter()
            .map(|Pattern(name, reads, depth)| {
                let mut ra = RaConfig::with_max_pages(s.max_ra_pages);
                ra.context_readahead = o.context_readahead;
                let mut e = Simulator::new(
                    EngineConfig {
                        page_size: PAGE,
                        memory_pages: s.memory / PAGE,
                        policy,
                        ra,
                        max_io_pages: MAX_IO / PAGE,
                        bucket: 0.0,
                        large_folios: false,
                    },
                    &[pages],
                    o.device.build(),
                );
                let stats = e.run_phase(vec![ReaderSpec {
                    file: 0,
                    start: 0.0,
                    interval: 0.0,
                    depth: *depth,
                    ops: Box::new(reads.clone().into_iter().map(Op::from)),
                    page_faults: false,
                }]);
                let record = mean_len(reads);
                result(sc.name(), name, policy, o.device, record, &stats)
            })
            .collect()
    }))
}

/// The mean length of `reads`, bytes.
fn mean_len(reads: &[(u64, u64)]) -> f64 {
    reads.iter().map(|r| r.1 as f64).sum::<f64>() / reads.len().max(1) as f64
}
