//! Cached 16 KiB random reads: plain `pread` against a Buffered file's
//! `read_at` (the RWF_NOWAIT probe, its counters and the hint bookkeeping)
//! and a Direct file's `read_at` (ahead's own cache), on a 64 MiB file held
//! in the kernel's cache (and in ahead's for Direct).
//!
//! Target (issue "Buffered and Uncached modes"): Buffered at least 0.95× the
//! throughput of pread. `preadv2-nowait` is the probe's system call alone,
//! to tell the kernel's cost of the flag from ahead's own. `cargo bench -p ahead-bench --bench cached_read`
//! prints the time per read of each in the same run.
//!
//! `cached-4k-threads`: the time per read of one thread, and of two threads
//! sharing one Direct `File`, cached 4 KiB random reads, with the
//! lock-free hit path (`ahead-direct-N`) and without it
//! (`ahead-direct-locked-N`, `EngineConfig::lock_free_hits` off). Target
//! (issue "Efficiency"): two threads read at least 1.7× as many per second
//! as one on 2 cores, so the two-thread time per read at most 0.59× the
//! one's. With every hit taking the cache's lock and the policy's, two
//! threads were bimodal (2026-11-23, six runs): one thread 0.69–0.76 µs,
//! two either 0.60–0.65 µs (1.2× one thread) or 1.02–1.17 µs (0.7×).
//! docs/bench.md has the figures with the hit path.

use std::os::unix::fs::FileExt;

use ahead::{Engine, EngineConfig, Mode, OpenOptions};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

const BS: u64 = 16 << 10;
const SIZE: u64 = 64 << 20;

fn cached_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(ahead::testdata::scratch_root()).unwrap();
    let path = dir.path().join("f");
    ahead::testdata::write_file(&path, SIZE).unwrap();
    let plain = std::fs::File::open(&path).unwrap();
    let engine = Engine::new(EngineConfig::default()).unwrap();
    let buffered = engine
        .open_with(&path, &OpenOptions::new().mode(Mode::Buffered))
        .unwrap();
    let direct = engine.open(&path).unwrap();
    let mut buf = vec![0u8; BS as usize];
    // Warm both caches.
    for b in 0..SIZE / BS {
        plain.read_at(&mut buf, b * BS).unwrap();
        direct.read_at(&mut buf, b * BS).unwrap();
    }
    let mut g = c.benchmark_group("cached-16k-random");
    g.throughput(Throughput::Bytes(BS));
    let mut rng = fastrand::Rng::with_seed(1);
    g.bench_function("pread", |b| {
        b.iter(|| {
            let off = rng.u64(0..SIZE / BS) * BS;
            black_box(plain.read_at(&mut buf, off).unwrap())
        })
    });
    // The probe's system call alone, to tell the kernel's cost of
    // RWF_NOWAIT from ahead's own.
    g.bench_function("preadv2-nowait", |b| {
        b.iter(|| {
            let off = rng.u64(0..SIZE / BS) * BS;
            let iov = &mut [std::io::IoSliceMut::new(&mut buf)];
            black_box(
                rustix::io::preadv2(&plain, iov, off, rustix::io::ReadWriteFlags::NOWAIT).unwrap(),
            )
        })
    });
    g.bench_function("ahead-buffered", |b| {
        b.iter(|| {
            let off = rng.u64(0..SIZE / BS) * BS;
            black_box(buffered.read_at(&mut buf, off).unwrap())
        })
    });
    g.bench_function("ahead-direct", |b| {
        b.iter(|| {
            let off = rng.u64(0..SIZE / BS) * BS;
            black_box(direct.read_at(&mut buf, off).unwrap())
        })
    });
    g.finish();
    let locked_engine = Engine::new(EngineConfig::default().with_lock_free_hits(false)).unwrap();
    let locked = locked_engine.open(&path).unwrap();
    for b in 0..SIZE / BS {
        locked.read_at(&mut buf, b * BS).unwrap();
        direct.read_at(&mut buf, b * BS).unwrap();
    }
    let mut g = c.benchmark_group("cached-4k-threads");
    const SMALL: u64 = 4 << 10;
    for (name, file, threads) in [
        ("ahead-direct", &direct, 1u64),
        ("ahead-direct", &direct, 2),
        ("ahead-direct-locked", &locked, 1),
        ("ahead-direct-locked", &locked, 2),
    ] {
        g.bench_function(format!("{name}-{threads}"), |b| {
            b.iter_custom(|iters| {
                let per = iters.div_ceil(threads);
                let start = std::time::Instant::now();
                std::thread::scope(|sc| {
                    for t in 0..threads {
                        let f = file.clone();
                        sc.spawn(move || {
                            let mut rng = fastrand::Rng::with_seed(t + 7);
                            let mut b = vec![0u8; SMALL as usize];
                            for _ in 0..per {
                                let off = rng.u64(0..SIZE / SMALL) * SMALL;
                                black_box(f.read_at(&mut b, off).unwrap());
                            }
                        });
                    }
                });
                // `iters` reads in all, shared by the threads: the wall
                // time for them (criterion divides by `iters`).
                start.elapsed()
            })
        });
    }
    g.finish();
    let s = buffered.stats();
    eprintln!(
        "ahead-buffered: {} of {} reads served by a probe that hit, {} by a plain pread",
        s.nowait_hits, s.requests, s.plain_reads
    );
}

criterion_group!(benches, cached_reads);
criterion_main!(benches);
