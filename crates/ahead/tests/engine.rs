//! The Direct-mode engine on real files: every pattern, every backend and
//! policy, generated contents checked byte for byte.

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahead::io::BackendKind;
use ahead::ra::PolicyKind;
use ahead::{testdata, Advice, Engine, EngineConfig, Error};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(testdata::scratch_root()).unwrap()
}

fn gen(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    testdata::write_file(&p, size).unwrap();
    p
}

/// A small engine: a 2 MiB cache with 256 KiB windows, so that eviction,
/// shadows and the demand reserve are exercised by files of a few MiB.
fn small(backend: BackendKind, policy: PolicyKind) -> Engine {
    Engine::new(
        EngineConfig::default()
            .with_cache_bytes(2 << 20)
            .with_max_readahead(256 << 10)
            .with_max_io(64 << 10)
            .with_backend(backend)
            .with_policy(policy)
            .with_depth(16),
    )
    .unwrap()
}

fn engines() -> Vec<(String, Engine)> {
    let mut v = Vec::new();
    for backend in [BackendKind::Pool, BackendKind::Uring] {
        if backend == BackendKind::Uring && ahead::io::Uring::new(1).is_err() {
            eprintln!("SKIP io_uring engine tests: io_uring unavailable");
            continue;
        }
        for policy in PolicyKind::ALL {
            v.push((
                format!("{backend:?}/{}", policy.name()),
                small(backend, policy),
            ));
        }
    }
    v
}

/// The (offset, len) requests of a pattern over `size` bytes.
fn pattern(name: &str, size: u64, bs: u64) -> Vec<(u64, u64)> {
    let blocks = size.div_ceil(bs);
    match name {
        "seq" => (0..blocks).map(|b| (b * bs, bs)).collect(),
        "reverse" => (0..blocks).rev().map(|b| (b * bs, bs)).collect(),
        "stride" => (0..blocks).step_by(4).map(|b| (b * bs, bs)).collect(),
        "columns" => testdata::column_order(blocks, 17)
            .map(|b| (b * bs, bs))
            .collect(),
        "random" => {
            let mut rng = fastrand::Rng::with_seed(7);
            (0..blocks).map(|_| (rng.u64(0..blocks) * bs, bs)).collect()
        }
        "odd" => {
            // Unaligned offsets and lengths, some crossing the end.
            let mut rng = fastrand::Rng::with_seed(11);
            (0..300)
                .map(|_| (rng.u64(0..size + 5000), rng.u64(1..200_000)))
                .collect()
        }
        _ => unreachable!(),
    }
}

fn check_read(name: &str, got: &[u8], n: usize, offset: u64, len: u64, size: u64) {
    let want = len.min(size.saturating_sub(offset)) as usize;
    assert_eq!(
        n, want,
        "{name}: length of read at {offset}+{len} (size {size})"
    );
    assert_eq!(
        testdata::first_mismatch(&got[..n], offset),
        None,
        "{name}: wrong byte in read at {offset}+{len}"
    );
}

#[test]
fn every_pattern_returns_every_byte() {
    let dir = scratch();
    let size = (6 << 20) + 1234;
    let path = gen(dir.path(), "f", size);
    for (name, engine) in engines() {
        let f = engine.open(&path).unwrap();
        assert!(f.is_direct(), "{name}: scratch dir supports O_DIRECT");
        for pat in ["seq", "reverse", "stride", "columns", "random", "odd"] {
            for bs in [4096u64, 65536] {
                for (offset, len) in pattern(pat, size, bs) {
                    let mut buf = vec![0u8; len as usize];
                    let n = f.read_at(&mut buf, offset).unwrap();
                    check_read(&format!("{name} {pat} bs={bs}"), &buf, n, offset, len, size);
                }
            }
        }
        let s = engine.stats();
        assert!(s.device_reads > 0 && s.hits > 0, "{name}: {s:?}");
        // 24 MiB of pattern reads through a 2 MiB cache must evict.
        assert!(
            s.readahead_pages > 0 && s.readahead_used > 0,
            "{name}: {s:?}"
        );
    }
}

#[test]
fn column_sweeps_find_their_columns_read_ahead() {
    // 4 MiB as 60 rows of 17 blocks of 4 KiB, read column by column through
    // a 2 MiB cache: the ahead policy reads the next columns with each run
    // (as many as 3/4 of the cache holds for every row), so most passes
    // find their blocks cached; the kernel's policies read them pass by
    // pass.
    let dir = scratch();
    let size = 4 << 20;
    let path = gen(dir.path(), "f", size);
    let blocks = size / 4096;
    let mut reads = Vec::new();
    for policy in [PolicyKind::Ahead, PolicyKind::Legacy] {
        let engine = small(BackendKind::Pool, policy);
        let f = engine.open(&path).unwrap();
        let mut buf = vec![0u8; 4096];
        for b in testdata::column_order(blocks, 17) {
            let n = f.read_at(&mut buf, b * 4096).unwrap();
            check_read(policy.name(), &buf, n, b * 4096, 4096, size);
        }
        let s = engine.stats();
        assert_eq!(s.requests, blocks, "{s:?}");
        reads.push((policy, s.device_reads, s.hits));
    }
    let (_, ahead_reads, ahead_hits) = reads[0];
    let (_, legacy_reads, _) = reads[1];
    // At least 2.5 times fewer: the file's speculation budget holds the
    // columns read ahead for later passes to what earlier passes used
    // (`ra::budget`): 342 device reads against 1,022 when it came in.
    assert!(
        ahead_reads * 5 < legacy_reads * 2,
        "device reads: {reads:?} for {blocks} requests"
    );
    assert!(ahead_hits * 2 > blocks, "{reads:?}");
}

/// Completes every read inside `submit`, so that a run of requests meets
/// the same cache states each time (no read finishes early or late).
struct Inline;

impl ahead::io::Backend for Inline {
    fn name(&self) -> &'static str {
        "inline"
    }
    fn depth(&self) -> usize {
        1
    }
    fn submit(&self, mut op: ahead::io::ReadOp, done: ahead::io::Completion) {
        let r = ahead::io::read_blocking(&mut op);
        done(op, r);
    }
}

#[test]
fn the_lock_free_hit_path_leaves_the_policy_deciding_as_the_locked_path_does() {
    // One reader, every pattern the ahead policy detects from hits
    // (strides, column sweeps) and some it does not, through a cache
    // small enough to evict: with the hit path on, the policy sees the
    // hits later but in the same order, so it must ask for exactly the
    // same device reads, and every counter must come out the same. Copies
    // (`read_at`) and lent pages (`read_pages`) both.
    let dir = scratch();
    let size = 6 << 20;
    let path = gen(dir.path(), "f", size);
    let mut reqs = Vec::new();
    for pat in [
        "seq", "columns", "stride", "reverse", "random", "columns", "seq",
    ] {
        reqs.extend(pattern(pat, size, 4096));
    }
    // The first MiB (half the cache) three times: the last two passes can
    // take the hit path.
    for _ in 0..3 {
        reqs.extend((0..256).map(|b| (b * 4096, 4096)));
    }
    // A stride of 2-page runs read twice (the second pass hits).
    for _ in 0..2 {
        reqs.extend((0..size / 4096).step_by(5).map(|b| (b * 4096, 8192)));
    }
    for policy in [PolicyKind::Ahead, PolicyKind::OnDemand] {
        let mut runs = Vec::new();
        for hits in [false, true] {
            let engine = Engine::with_backend(
                EngineConfig::default()
                    .with_cache_bytes(2 << 20)
                    .with_max_readahead(256 << 10)
                    .with_max_io(64 << 10)
                    .with_policy(policy)
                    .with_lock_free_hits(hits),
                Arc::new(Inline),
            )
            .unwrap();
            let f = engine.open(&path).unwrap();
            let mut buf = vec![0u8; 8192];
            for (k, &(offset, len)) in reqs.iter().enumerate() {
                // Every third request lends its pages instead of copying.
                let n = if k % 3 == 0 {
                    let pages = f.read_pages(offset, len as usize).unwrap();
                    buf[..pages.len()].copy_from_slice(&pages.to_vec());
                    pages.len()
                } else {
                    f.read_at(&mut buf[..len as usize], offset).unwrap()
                };
                check_read(policy.name(), &buf, n, offset, len, size);
            }
            runs.push(engine.stats());
        }
        assert!(runs[0].hits > 1000, "{policy}: {:?}", runs[0]);
        assert_eq!(runs[0].lock_free_hits, 0, "{policy}: {:?}", runs[0]);
        assert!(runs[1].lock_free_hits >= 400, "{policy}: {:?}", runs[1]);
        runs[1].lock_free_hits = 0;
        assert_eq!(runs[0], runs[1], "{policy}: locked, then lock-free hits");
    }
}

#[test]
fn lock_free_hits_racing_refreshes_and_eviction_return_the_right_bytes() {
    // Two readers hit a file's cached pages without the lock while a third
    // thread keeps touching the file and refreshing it (every cached page
    // dropped, frames orphaned or freed and reused) and a fourth reads
    // another file through the same small cache (eviction). The bytes never
    // change, so any stale or reused frame a reader kept would show as a
    // wrong byte.
    let dir = scratch();
    let size = 1u64 << 20;
    let path = gen(dir.path(), "hot", size);
    let other = gen(dir.path(), "cold", 4 << 20);
    for backend in [BackendKind::Pool, BackendKind::Uring] {
        if backend == BackendKind::Uring && ahead::io::Uring::new(1).is_err() {
            eprintln!("SKIP io_uring: unavailable");
            continue;
        }
        let engine = small(backend, PolicyKind::Ahead);
        let hot = engine.open(&path).unwrap();
        let cold = engine.open(&other).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut refreshes = 0u32;
        std::thread::scope(|s| {
            let readers: Vec<_> = (0..2u64)
                .map(|t| {
                    let (hot, stop) = (&hot, &stop);
                    s.spawn(move || {
                        let mut rng = fastrand::Rng::with_seed(t);
                        let mut buf = vec![0u8; 8192];
                        let mut reads = 0u64;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            let off = rng.u64(0..size / 4096) * 4096;
                            let len = rng.u64(1..=8192).min(size - off);
                            let n = hot.read_at(&mut buf[..len as usize], off).unwrap();
                            check_read("hot", &buf, n, off, len, size);
                            reads += 1;
                        }
                        reads
                    })
                })
                .collect();
            let evictor = s.spawn(|| {
                let mut buf = vec![0u8; 65536];
                let mut off = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let n = cold.read_at(&mut buf, off).unwrap();
                    check_read("cold", &buf, n, off, 65536, 4 << 20);
                    off = (off + 65536) % (4 << 20);
                }
            });
            let start = std::time::Instant::now();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            while start.elapsed() < std::time::Duration::from_millis(1500) {
                let t = std::time::SystemTime::UNIX_EPOCH
                    + std::time::Duration::from_secs(1_000_000 + refreshes as u64);
                f.set_modified(t).unwrap();
                if hot.refresh().unwrap().changed {
                    refreshes += 1;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
            evictor.join().unwrap();
            assert!(reads > 1000, "{backend:?}: {reads} reads");
        });
        let s = hot.stats();
        assert!(refreshes > 100, "{backend:?}: {refreshes} refreshes");
        assert!(s.lock_free_hits > 0, "{backend:?}: {s:?}");
        assert_eq!(engine.pinned_frames(), 0, "{backend:?}");
    }
}

#[test]
fn odd_sizes_read_whole() {
    let dir = scratch();
    for size in [0u64, 1, 4095, 4096, 4097, 65_537, (1 << 20) + 3] {
        let path = gen(dir.path(), &format!("s{size}"), size);
        for (name, engine) in engines() {
            let f = engine.open(&path).unwrap();
            let mut all = Vec::new();
            f.reader().read_to_end(&mut all).unwrap();
            assert_eq!(all.len() as u64, size, "{name}");
            assert_eq!(testdata::first_mismatch(&all, 0), None, "{name}");
            let mut buf = [0u8; 10];
            assert_eq!(f.read_at(&mut buf, size).unwrap(), 0, "{name}: at the end");
            assert_eq!(
                f.read_at(&mut buf, size + 100_000).unwrap(),
                0,
                "{name}: past the end"
            );
        }
    }
}

#[test]
fn eight_threads_on_one_file_get_their_bytes() {
    let dir = scratch();
    let size = 8 << 20;
    let path = gen(dir.path(), "f", size);
    for (name, engine) in engines() {
        let f = engine.open(&path).unwrap();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let f = f.clone();
                let name = &name;
                s.spawn(move || {
                    // Thread t reads its own eighth, forward.
                    let start = t * size / 8;
                    let mut buf = vec![0u8; 4096];
                    for off in (start..start + size / 8).step_by(4096) {
                        let n = f.read_at(&mut buf, off).unwrap();
                        check_read(name, &buf, n, off, 4096, size);
                    }
                });
            }
        });
    }
}

#[test]
fn read_many_zero_copy_and_async_agree_with_read_at() {
    let dir = scratch();
    let size = 3 << 20;
    let path = gen(dir.path(), "f", size);
    for (name, engine) in engines() {
        let f = engine.open(&path).unwrap();
        let mut rng = fastrand::Rng::with_seed(3);
        let offsets: Vec<u64> = (0..64).map(|_| rng.u64(0..size)).collect();
        let mut bufs: Vec<Vec<u8>> = (0..64).map(|i| vec![0u8; 1000 + i * 1000]).collect();
        let mut reqs: Vec<(u64, &mut [u8])> = offsets
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&o, b)| (o, b.as_mut_slice()))
            .collect();
        let results = f.read_many(&mut reqs);
        for ((o, b), r) in reqs.iter().zip(results) {
            check_read(&name, b, r.unwrap(), *o, b.len() as u64, size);
        }
        for &o in &offsets {
            let pages = f.read_pages(o, 16384).unwrap();
            let v = pages.to_vec();
            check_read(&name, &v, pages.len(), o, 16384, size);
            let mut buf = vec![0u8; 16384];
            let n = ahead::block_on(f.read_at_async(&mut buf, o)).unwrap();
            check_read(&name, &buf, n, o, 16384, size);
        }
    }
}

#[test]
fn reader_reads_seeks_and_buffers() {
    let dir = scratch();
    let size = 1_000_003;
    let path = gen(dir.path(), "f", size);
    let engine = small(BackendKind::Auto, PolicyKind::Ahead);
    let f = engine.open(&path).unwrap();
    let mut r = f.reader();
    let mut head = [0u8; 10];
    r.read_exact(&mut head).unwrap();
    assert_eq!(testdata::first_mismatch(&head, 0), None);
    assert_eq!(r.seek(SeekFrom::End(-3)).unwrap(), size - 3);
    let mut tail = Vec::new();
    r.read_to_end(&mut tail).unwrap();
    assert_eq!(tail.len(), 3);
    assert_eq!(testdata::first_mismatch(&tail, size - 3), None);
    r.seek(SeekFrom::Start(500_000)).unwrap();
    let line = r.fill_buf().unwrap().to_vec();
    assert!(!line.is_empty());
    assert_eq!(testdata::first_mismatch(&line, 500_000), None);
    assert!(r.seek(SeekFrom::Current(-1_000_000)).is_err());
}

#[test]
fn hints_and_prefetch_keep_bytes_right_and_prefetch_reads_ahead() {
    let dir = scratch();
    let size = 4 << 20;
    let path = gen(dir.path(), "f", size);
    let engine = small(BackendKind::Auto, PolicyKind::Ahead);
    let f = engine.open(&path).unwrap();
    f.prefetch(&[(1 << 20, 128 << 10)]);
    let mut buf = vec![0u8; 4096];
    let n = f.read_at(&mut buf, (1 << 20) + 8192).unwrap();
    check_read("prefetch", &buf, n, (1 << 20) + 8192, 4096, size);
    let s = f.stats();
    assert_eq!(s.readahead_pages, 32, "{s:?}");
    assert_eq!(
        s.misses, 0,
        "the prefetched page needed no demand read: {s:?}"
    );
    f.advise(0, size, Advice::Random);
    let before = f.stats().device_bytes;
    let n = f.read_at(&mut buf, 3 << 20).unwrap();
    check_read("random", &buf, n, 3 << 20, 4096, size);
    assert_eq!(
        f.stats().device_bytes - before,
        4096,
        "random advice reads exactly the request"
    );
    for adv in [Advice::Sequential, Advice::Reverse] {
        f.advise(0, size, adv);
        for off in [2 << 20, (2 << 20) - 4096] {
            let n = f.read_at(&mut buf, off).unwrap();
            check_read("hint", &buf, n, off, 4096, size);
        }
    }
}

#[test]
fn a_file_that_shrinks_gives_short_reads_not_stale_bytes() {
    let dir = scratch();
    let size = 2 << 20;
    let path = gen(dir.path(), "f", size);
    for (name, engine) in engines() {
        testdata::write_file(&path, size).unwrap();
        let f = engine.open(&path).unwrap();
        let mut buf = vec![0u8; 4096];
        f.read_at(&mut buf, 0).unwrap();
        let new_size = 100_000;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(new_size)
            .unwrap();
        let mut big = vec![0u8; 1 << 20];
        let n = f.read_at(&mut big, 1 << 20).unwrap();
        assert_eq!(n, 0, "{name}: nothing past the new end");
        // Pages up to the new end read fine; the read stops there.
        let mut tail = vec![0u8; 200_000];
        let n = f.read_at(&mut tail, 90_000).unwrap();
        assert_eq!(n as u64, new_size - 90_000, "{name}");
        assert_eq!(testdata::first_mismatch(&tail[..n], 90_000), None, "{name}");
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = scratch();
    let engine = small(BackendKind::Auto, PolicyKind::Ahead);
    let missing = dir.path().join("missing");
    let e = engine.open(&missing).err().unwrap();
    assert!(
        e.to_string().contains("missing") && e.raw_os_error() == Some(libc_enoent()),
        "{e}"
    );
    let e = engine.open(dir.path()).err().unwrap();
    assert!(e.to_string().contains("is a directory"), "{e}");
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let e = engine.open(&fifo).err().unwrap();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = Engine::new(
        EngineConfig::default()
            .with_cache_bytes(1 << 20)
            .with_max_readahead(4 << 20),
    )
    .err()
    .unwrap();
    assert!(
        matches!(e, Error::Invalid { what: "engine", .. }) && e.to_string().contains("too small"),
        "{e}"
    );
}

#[test]
fn tmpfs_falls_back_to_buffered_or_refuses_when_direct_is_required() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || testdata::supports_direct(shm) {
        eprintln!("SKIP: no tmpfs without O_DIRECT at /dev/shm here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let path = gen(dir.path(), "f", 100_000);
    let engine = small(BackendKind::Auto, PolicyKind::Ahead);
    let f = engine.open(&path).unwrap();
    assert!(!f.is_direct());
    let mut buf = vec![0u8; 100_000];
    let n = f.read_at(&mut buf, 0).unwrap();
    check_read("tmpfs", &buf, n, 0, 100_000, 100_000);
    let strict = Engine::new(
        EngineConfig::default()
            .with_require_direct(true)
            .with_cache_bytes(2 << 20)
            .with_max_readahead(256 << 10),
    )
    .unwrap();
    let e = strict.open(&path).err().unwrap();
    assert!(e.to_string().contains("O_DIRECT"), "{e}");
}

fn libc_enoent() -> i32 {
    2
}

#[test]
fn offsets_near_u64_max_are_the_end_of_the_file_not_an_overflow() {
    let dir = scratch();
    let path = gen(dir.path(), "f", 1 << 20);
    for (name, engine) in engines() {
        let file = engine.open(&path).unwrap();
        let mut buf = vec![0u8; 8192];
        for off in [
            u64::MAX,
            u64::MAX - 1,
            u64::MAX - 4096,
            1 << 63,
            (1 << 20) + 1,
        ] {
            assert_eq!(file.read_at(&mut buf, off).unwrap(), 0, "{name} {off}");
            assert!(
                file.read_pages(off, 8192).unwrap().is_empty(),
                "{name} {off}"
            );
            let r = file.read_many(&mut [(off, &mut buf[..])]);
            assert_eq!(*r[0].as_ref().unwrap(), 0, "{name} {off}");
            file.prefetch(&[(off, u64::MAX)]);
            file.advise(off, u64::MAX, Advice::Sequential);
        }
        // And the file still reads.
        let n = file.read_at(&mut buf, 4096).unwrap();
        assert_eq!(testdata::first_mismatch(&buf[..n], 4096), None, "{name}");
    }
}

#[test]
fn a_file_changed_outside_the_engine_reads_as_it_is_after_refresh() {
    let dir = scratch();
    let path = gen(dir.path(), "f", 1 << 20);
    // The same size, other bytes: what `testdata` makes at offset + 7.
    let other = |len: usize| {
        let mut v = vec![0u8; len];
        testdata::fill(&mut v, 7);
        v
    };
    for (name, engine) in engines() {
        testdata::write_file(&path, 1 << 20).unwrap();
        let file = engine.open(&path).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), 1 << 20);
        assert!(!file.refresh().unwrap().changed, "{name}");
        assert!(
            buf != other(1 << 20),
            "the new bytes must differ from the old"
        );

        std::fs::write(&path, other(1 << 20)).unwrap();
        let r = file.refresh().unwrap();
        assert!(r.changed && r.dropped_pages > 0, "{name}: {r:?}");
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), 1 << 20);
        assert!(buf == other(1 << 20), "{name}: stale pages after refresh");

        // Shrunk: the new end, and nothing past it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100_000)
            .unwrap();
        let r = file.refresh().unwrap();
        assert_eq!((r.changed, r.size), (true, 100_000), "{name}");
        assert_eq!(file.len(), 100_000);
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), 100_000, "{name}");
        assert!(buf[..100_000] == other(100_000)[..], "{name}");
        assert_eq!(file.read_at(&mut buf, 200_000).unwrap(), 0, "{name}");

        // Grown again: the new bytes are read.
        std::fs::write(&path, other(3 << 20)).unwrap();
        assert_eq!(file.refresh().unwrap().size, 3 << 20, "{name}");
        let mut big = vec![0u8; 3 << 20];
        let mut at = 0;
        while at < big.len() {
            let n = file.read_at(&mut big[at..], at as u64).unwrap();
            assert!(n > 0, "{name}: early end at {at}");
            at += n;
        }
        assert!(big == other(3 << 20), "{name}: wrong bytes after growth");
        assert_eq!(engine.pinned_frames(), 0);
    }
}

#[test]
fn a_file_over_4_gib_reads_right_near_its_end() {
    let dir = scratch();
    let path = dir.path().join("big");
    let size: u64 = (5 << 30) + 12345;
    let f = std::fs::File::create(&path).unwrap();
    if let Err(e) = f.set_len(size) {
        eprintln!("SKIP: no 5 GiB sparse file here: {e}");
        return;
    }
    // Generated bytes in the last MiB (past 4 GiB, where 32-bit offsets
    // would wrap); a hole before it.
    let tail = 1 << 20;
    let mut data = vec![0u8; tail as usize];
    testdata::fill(&mut data, size - tail);
    use std::os::unix::fs::FileExt;
    f.write_all_at(&data, size - tail).unwrap();
    drop(f);
    for (name, engine) in engines() {
        let file = engine.open(&path).unwrap();
        assert_eq!(file.len(), size);
        let mut buf = vec![0u8; 256 << 10];
        let n = file.read_at(&mut buf, size - 100_000).unwrap();
        assert_eq!(n, 100_000, "{name}");
        assert_eq!(
            testdata::first_mismatch(&buf[..n], size - 100_000),
            None,
            "{name}"
        );
        let n = file.read_at(&mut buf, size - tail - 4096).unwrap();
        assert!(
            buf[..4096].iter().all(|&b| b == 0),
            "{name}: the hole is not zero"
        );
        assert_eq!(testdata::first_mismatch(&buf[4096..n], size - tail), None);
        assert_eq!(file.read_at(&mut buf, size).unwrap(), 0);
    }
}

/// The engine learns what its device charges from a file's reads: small
/// reads one at a time (latency), then many at once (their rate), then
/// large ones (bandwidth); until it has all three it knows nothing. Prints
/// what it learned: run under `steady` with `LEARN_SCALE=10` (seconds of
/// each phase, past the throttle's first burst) to compare with a cap's
/// figures.
#[test]
fn the_engine_learns_its_devices_costs_from_a_files_reads() {
    let scale: u64 = std::env::var("LEARN_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let dir = scratch();
    let path = gen(dir.path(), "learn", (32 + 64 * scale) << 20);
    let engine = Engine::new(
        EngineConfig::default()
            .with_cache_bytes(32 << 20)
            .with_depth(16),
    )
    .unwrap();
    assert_eq!(engine.device_cost(), None, "nothing read yet");
    let f = engine.open(&path).unwrap();
    if !f.is_direct() {
        eprintln!("SKIP the device's costs: O_DIRECT refused here");
        return;
    }
    // Random 4 KiB reads, one at a time, over the whole file (which is
    // three times the cache and more: few of them hit it).
    let pages = (32 + 64 * scale) << 8;
    f.advise(0, u64::MAX, Advice::Random);
    let mut buf = vec![0u8; 4096];
    let mut x = 12345u64;
    for _ in 0..400 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let page = (x >> 33) % pages;
        f.read_at(&mut buf, page * 4096).unwrap();
    }
    assert!(engine.device_cost().is_none(), "small reads alone");
    // Then 16 threads of them at once, for long enough that the rates'
    // intervals (a throttle's slices) are seen a few times: at least 200
    // reads each and 1.2 s.
    let phase = std::time::Duration::from_millis(1200);
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let f = &f;
            s.spawn(move || {
                let mut buf = vec![0u8; 4096];
                let mut k = 0;
                while k < 200 * scale || start.elapsed() < phase {
                    let page = (t * 7919 + k * 104729) % pages;
                    f.read_at(&mut buf, page * 4096).unwrap();
                    k += 1;
                }
            });
        }
    });
    // Then 1 MiB reads of the rest, forward, as many times over as fit in
    // 1.2 s (the cache holds a third of it: each pass reads it again).
    f.advise(0, u64::MAX, Advice::Normal);
    let mut big = vec![0u8; 1 << 20];
    let start = std::time::Instant::now();
    while start.elapsed() < phase {
        for mb in 32..32 + 64 * scale {
            f.read_at(&mut big, mb << 20).unwrap();
        }
    }
    let c = engine.device_cost().expect("learned after all three");
    eprintln!("learned: {c:?}");
    assert!(
        c.request_pages >= 1 && c.latency_pages >= 1 && c.parallelism >= 2,
        "{c:?}"
    );
}

/// Reads `f` (of `size` bytes) from start to end in `bs`-byte requests,
/// checking every byte.
fn read_forward_checked(name: &str, f: &ahead::File, size: u64, bs: usize) {
    let mut buf = vec![0u8; bs];
    let mut offset = 0;
    while offset < size {
        let n = f.read_at(&mut buf, offset).unwrap();
        check_read(name, &buf, n, offset, bs as u64, size);
        offset += n as u64;
    }
}

/// Mappings the kernel would back with transparent huge pages
/// (`THPeligible: 1` in smaps).
fn thp_eligible_mappings() -> usize {
    std::fs::read_to_string("/proc/self/smaps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("THPeligible:") && l.ends_with('1'))
        .count()
}

#[test]
fn a_cache_in_huge_pages_reads_every_byte_and_asks_the_kernel_for_them() {
    // The cache's memory in huge pages: the same bytes through io_uring's
    // registered buffers and through the pool, forward and at random, in a
    // cache smaller than the file (frames reused); and where the kernel
    // gives huge pages only on request, the engine's arena is the mapping
    // that asked.
    let dir = scratch();
    let size = 24u64 << 20;
    let path = gen(dir.path(), "f", size);
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    for backend in [BackendKind::Uring, BackendKind::Pool] {
        if backend == BackendKind::Uring && ahead::io::Uring::new(1).is_err() {
            eprintln!("SKIP io_uring: unavailable");
            continue;
        }
        let make = || {
            Engine::new(
                EngineConfig::default()
                    .with_cache_bytes(8 << 20)
                    .with_max_readahead(1 << 20)
                    .with_backend(backend)
                    .with_huge_pages(ahead::io::HugePages::On),
            )
            .unwrap()
        };
        let engine = if mode.contains("[madvise]") {
            // Other tests of this process map and unmap their caches
            // meanwhile, so a count can fall by itself: an engine whose
            // arena asked for huge pages raises it in one of a few tries.
            let mut made = None;
            for _ in 0..5 {
                let before = thp_eligible_mappings();
                let engine = make();
                if thp_eligible_mappings() > before {
                    made = Some(engine);
                    break;
                }
            }
            made.unwrap_or_else(|| panic!("{backend:?}: no mapping asked for huge pages"))
        } else {
            eprintln!("SKIP the huge-page advice check: THP is {}", mode.trim());
            make()
        };
        let f = engine.open(&path).unwrap();
        read_forward_checked("huge seq", &f, size, 128 << 10);
        let mut buf = vec![0u8; 16384];
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..500 {
            let (off, len) = (rng.u64(0..size), rng.u64(1..=16384));
            let n = f.read_at(&mut buf[..len as usize], off).unwrap();
            check_read("huge random", &buf, n, off, len, size);
        }
        let s = engine.stats();
        if backend == BackendKind::Uring {
            assert!(engine.fixed_reads() > 0, "{backend:?}: no registered reads");
        }
        assert!(s.device_bytes >= size, "{backend:?}: {s:?}");
    }
}

#[test]
fn a_file_read_after_another_was_closed_still_reads_into_registered_buffers() {
    // A long-running engine reads file after file. The frames a closed
    // file gave back must come out again as runs inside one registered
    // region, or every later read goes out as a plain READV whose pages the
    // kernel pins one by one (they came back in the closed file's page-table
    // order once, and not one read of the next file was a fixed read).
    if ahead::io::Uring::new(1).is_err() {
        eprintln!("SKIP io_uring: unavailable");
        return;
    }
    let dir = scratch();
    let size = 24u64 << 20;
    let (a, b) = (gen(dir.path(), "a", size), gen(dir.path(), "b", size));
    let engine = Engine::new(
        EngineConfig::default()
            .with_cache_bytes(32 << 20)
            .with_max_readahead(1 << 20)
            .with_backend(BackendKind::Uring)
            .with_huge_pages(ahead::io::HugePages::Off),
    )
    .unwrap();
    let f = engine.open(&a).unwrap();
    read_forward_checked("first file", &f, size, 128 << 10);
    drop(f);
    let (reads, fixed) = (engine.stats().device_reads, engine.fixed_reads());
    assert!(fixed > 0, "no registered reads at all: {fixed} of {reads}");
    let f = engine.open(&b).unwrap();
    read_forward_checked("second file", &f, size, 128 << 10);
    let (reads, fixed) = (
        engine.stats().device_reads - reads,
        engine.fixed_reads() - fixed,
    );
    assert!(reads > 0);
    // All of them but a read that straddles two regions now and then.
    assert!(
        fixed * 10 >= reads * 9,
        "{fixed} of the second file's {reads} device reads were fixed reads"
    );
}

#[test]
fn a_file_opened_again_reads_its_kept_pages_and_a_changed_one_reads_the_device() {
    // The kernel serves a file opened again from its cache; so does the
    // engine now, for a regular file at the same version, and never for
    // one changed while it was closed.
    let dir = scratch();
    let size = 3u64 << 20;
    let path = gen(dir.path(), "f", size);
    let engine = Engine::new(
        EngineConfig::default()
            .with_cache_bytes(16 << 20)
            .with_max_readahead(1 << 20),
    )
    .unwrap();
    let reads = || engine.stats().device_reads;
    let f = engine.open(&path).unwrap();
    read_forward_checked("first open", &f, size, 64 << 10);
    drop(f);
    let before = reads();
    assert!(before > 0);
    // Twice more: all from the cache, through a new handle each time.
    for round in 0..2 {
        let f = engine.open(&path).unwrap();
        read_forward_checked("opened again", &f, size, 64 << 10);
        assert_eq!(reads(), before, "round {round}: the device was read again");
        assert_eq!(f.stats().device_reads, 0, "round {round}");
    }
    // Two handles at once: each reads the right bytes; the later close
    // replaces what the earlier kept.
    let (a, b) = (engine.open(&path).unwrap(), engine.open(&path).unwrap());
    read_forward_checked("handle a", &a, size, 1 << 20);
    read_forward_checked("handle b", &b, size, 1 << 20);
    drop(a);
    drop(b);
    // Dropped on request: the next open reads the device.
    assert!(engine.evict(&path).unwrap() > 0);
    assert_eq!(engine.evict(&path).unwrap(), 0);
    let before = reads();
    let f = engine.open(&path).unwrap();
    read_forward_checked("after evict", &f, size, 64 << 10);
    drop(f);
    assert!(reads() > before, "evict kept the pages");
    // Rewritten while closed, at the same size: the new bytes, from the
    // device.
    std::fs::write(&path, vec![0xa5u8; size as usize]).unwrap();
    let before = reads();
    let f = engine.open(&path).unwrap();
    let mut buf = vec![0u8; size as usize];
    let mut at = 0;
    while at < size {
        let n = f.read_at(&mut buf[at as usize..], at).unwrap();
        assert!(n > 0);
        at += n as u64;
    }
    assert!(buf.iter().all(|&x| x == 0xa5), "old bytes after a rewrite");
    assert!(reads() > before);
    drop(f);
    // Replaced by another file under the same name: a new inode.
    let other = gen(dir.path(), "g", size);
    std::fs::rename(&other, &path).unwrap();
    let f = engine.open(&path).unwrap();
    read_forward_checked("replaced", &f, size, 64 << 10);
}

#[test]
fn auto_huge_pages_follow_the_probe_and_read_every_byte() {
    // The default: at its first read the engine touches one huge page and
    // 2 MiB of small ones, keeps huge pages only if the huge one was
    // clearly the cheaper, and gives them up at the first later huge page
    // that costs more than the small ones did. Whatever it chose, the
    // bytes are the file's.
    let dir = scratch();
    let size = 12u64 << 20;
    let path = gen(dir.path(), "f", size);
    let engine = Engine::new(EngineConfig::default().with_cache_bytes(32 << 20)).unwrap();
    let before = engine.huge_pages();
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let on_request = thp.contains("[always]") || thp.contains("[madvise]");
    assert_eq!(
        (before.huge, before.probe_ns),
        (on_request, None),
        "{before:?}"
    );
    let f = engine.open(&path).unwrap();
    read_forward_checked("auto", &f, size, 1 << 20);
    let c = engine.huge_pages();
    eprintln!("after reading 12 MiB: {c:?}");
    if !on_request {
        eprintln!("SKIP the probe's checks: THP is {:?}", thp.trim());
        assert_eq!((c.huge, c.probe_ns), (false, None), "{c:?}");
        return;
    }
    let (big, small) = c.probe_ns.expect("the first read probes");
    if big * 4 > small * 3 {
        // Dear at the probe: small pages from its end on.
        assert_eq!((c.huge, c.gave_up_at), (false, Some(4 << 20)), "{c:?}");
    } else if let Some(at) = c.gave_up_at {
        // Given up later, past the probe, at the end of a huge page the
        // reads needed (12 MiB of file in a 32 MiB cache).
        assert!(!c.huge && at > 4 << 20 && at <= 16 << 20, "{c:?}");
    } else {
        assert!(c.huge, "{c:?}");
    }
    // Below the probe's size, or asked not to: no probe, no huge pages.
    for config in [
        EngineConfig::default().with_cache_bytes(12 << 20),
        EngineConfig::default().with_huge_pages(ahead::io::HugePages::Off),
    ] {
        let c = Engine::new(config).unwrap().huge_pages();
        assert_eq!((c.huge, c.probe_ns), (false, None), "{c:?}");
    }
}

#[test]
fn a_scan_of_a_file_larger_than_the_cache_recycles_its_trail_and_keeps_other_files() {
    // A 32 MiB cache with 512 KiB windows: the ring is 2 MiB, and a scan
    // keeps the first half of the cache's worth it reads. A file of 4 MiB
    // read first stays cached while a 128 MiB file is scanned, forward in
    // one engine and backward in another; each scan holds its first 16
    // MiB, the ring and its windows, not the cache. A region of half the
    // cache read once is kept to be read again, and a file that fits is
    // kept whole.
    let dir = scratch();
    let kept = gen(dir.path(), "kept", 4 << 20);
    let big_size = 128u64 << 20;
    let big = gen(dir.path(), "big", big_size);
    let fits_size = 24u64 << 20;
    let fits = gen(dir.path(), "fits", fits_size);
    let bs = 64u64 << 10;
    let blocks = big_size / bs;
    for backend in [BackendKind::Uring, BackendKind::Pool] {
        if backend == BackendKind::Uring && ahead::io::Uring::new(1).is_err() {
            eprintln!("SKIP io_uring: unavailable");
            continue;
        }
        let config = EngineConfig::default()
            .with_cache_bytes(32 << 20)
            .with_max_readahead(512 << 10)
            .with_backend(backend)
            .with_huge_pages(ahead::io::HugePages::Off);
        let forward: Vec<u64> = (0..blocks).collect();
        let backward: Vec<u64> = (0..blocks).rev().collect();
        for (way, order) in [("forward", forward), ("backward", backward)] {
            let engine = Engine::new(config.clone()).unwrap();
            let k = engine.open(&kept).unwrap();
            read_forward_checked("kept", &k, 4 << 20, 64 << 10);
            let b = engine.open(&big).unwrap();
            // A random reader's pages of the same file, read on demand:
            // the scan passes them and leaves them.
            b.advise(0, u64::MAX, Advice::Random);
            let mut page = vec![0u8; 4096];
            let randoms: Vec<u64> = (0..64)
                .map(|k| (k * 7919 + 13) % (big_size / 4096))
                .collect();
            for &p in &randoms {
                let n = b.read_at(&mut page, p * 4096).unwrap();
                check_read("random", &page, n, p * 4096, 4096, big_size);
            }
            b.advise(0, u64::MAX, Advice::Normal);
            // The kept file, the random pages, half the cache, the ring
            // and two windows each side of the reader: 26.25 MiB. Without
            // the ring the scan fills the cache (32 MiB).
            let bound = (4u64 << 20) + (64 << 12) + (16 << 20) + (2 << 20) + (4 << 20);
            let mut most = 0;
            let mut buf = vec![0u8; bs as usize];
            for i in order {
                let n = b.read_at(&mut buf, i * bs).unwrap();
                check_read(way, &buf, n, i * bs, bs, big_size);
                most = most.max(engine.cached_bytes());
            }
            let sb = b.stats();
            assert!(
                most <= bound,
                "{backend:?} {way}: the scan held {most} bytes of the cache (bound {bound}); {sb:?}"
            );
            assert!(
                sb.recycled > 0,
                "{backend:?} {way}: nothing recycled: {sb:?}"
            );
            // Nothing of the kept file was evicted: read again, all hits.
            let before = k.stats();
            read_forward_checked("kept again", &k, 4 << 20, 64 << 10);
            assert_eq!(
                k.stats().device_bytes,
                before.device_bytes,
                "{backend:?} {way}: the kept file was read again from the device"
            );
            let before = b.stats();
            for &p in &randoms {
                let n = b.read_at(&mut page, p * 4096).unwrap();
                check_read("random again", &page, n, p * 4096, 4096, big_size);
            }
            assert_eq!(
                b.stats().device_bytes,
                before.device_bytes,
                "{backend:?} {way}: the random reader's pages were taken by the scan"
            );
        }
        // A file that fits is kept whole: a second read is all hits.
        let engine = Engine::new(config.clone()).unwrap();
        let f = engine.open(&fits).unwrap();
        read_forward_checked("fits", &f, fits_size, 64 << 10);
        let first = f.stats();
        read_forward_checked("fits again", &f, fits_size, 64 << 10);
        let second = f.stats();
        assert_eq!(first.recycled, 0, "{backend:?}: {first:?}");
        assert_eq!(
            second.device_bytes, first.device_bytes,
            "{backend:?}: a file that fits was read twice from the device"
        );
        // A hot region of a large file, half the cache, read once and then
        // at random: every read a hit.
        let b = engine.open(&big).unwrap();
        let region = 16u64 << 20;
        read_forward_checked("region", &b, region, 64 << 10);
        let warm = b.stats();
        let mut rng = fastrand::Rng::with_seed(3);
        let mut small = vec![0u8; 4096];
        for _ in 0..2000 {
            let off = rng.u64(0..region / 4096) * 4096;
            let n = b.read_at(&mut small, off).unwrap();
            check_read("region", &small, n, off, 4096, big_size);
        }
        assert_eq!(
            b.stats().device_bytes,
            warm.device_bytes,
            "{backend:?}: the region read once was not kept: {:?}",
            b.stats()
        );
    }
}

#[test]
fn the_window_grows_where_reads_in_flight_pay_and_stays_for_a_reader_slower_than_the_device() {
    // The tuner on a real engine and file. A device that takes 2 ms over
    // any read and serves 32 at once (the pool's threads, each delayed;
    // a 2 MiB window is 16 reads of 128 KiB):
    // twice the window keeps twice the reads in flight and reads twice as
    // fast, so each doubling is kept up to the ceiling (a sixteenth of the
    // 32 MiB cache: 2 MiB, eight times the 256 KiB start). The same file
    // on the device as it is, read by a program slower than the device:
    // its reads never wait for readahead, and no doubling is tried.
    use ahead::io::fault::{Fault, FaultKind, FaultPath, Rule};
    let dir = scratch();
    let size = 320u64 << 20;
    let path = gen(dir.path(), "f", size);
    let config = EngineConfig::default()
        .with_cache_bytes(32 << 20)
        .with_max_readahead(256 << 10)
        .with_readahead_tuning(true)
        .with_max_io(128 << 10)
        .with_backend(BackendKind::Pool)
        .with_depth(64)
        .with_huge_pages(ahead::io::HugePages::Off);

    let fault = Fault::new(ahead::io::new_backend(BackendKind::Pool, 64).unwrap(), 7);
    fault.add(Rule {
        range: 0..u64::MAX,
        kind: FaultKind::Delay(std::time::Duration::from_millis(2)),
        path: FaultPath::Backend,
        probability: 1.0,
        times: None,
    });
    let engine = Engine::with_backend(config.clone(), fault).unwrap();
    let f = engine.open(&path).unwrap();
    read_forward_checked("in flight", &f, size, 64 << 10);
    let t = engine.readahead_tuning().expect("tuned");
    let windows: Vec<(u64, bool)> = t.steps.iter().map(|s| (s.window >> 10, s.kept)).collect();
    assert_eq!(
        windows,
        [
            (256, true),
            (256, true),
            (512, true),
            (1024, true),
            (2048, true)
        ],
        "{t:?}"
    );
    assert!(
        t.settled && t.window == 2 << 20 && t.ceiling == 2 << 20,
        "{t:?}"
    );
    assert_eq!(engine.readahead_window(), 2 << 20);
    // Reads in flight paid: the last window read well above the first.
    // (Each doubling by more than 1.1x the one before, as this once asked,
    // is a figure of the machine's speed at that moment: CI on a clean
    // clone saw 1.085x for the last, with every doubling kept.)
    let (first, last) = (&t.steps[0], t.steps.last().unwrap());
    assert!(last.bytes_per_sec > 1.5 * first.bytes_per_sec, "{t:?}");

    // 64 KiB every 0.6 ms (109 MB/s), kept to the clock: a late read
    // (the machine busy with other tests) is made up by the next.
    let engine = Engine::new(config).unwrap();
    let f = engine.open(&path).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let began = std::time::Instant::now();
    let mut offset = 0;
    for k in 1.. {
        if offset >= 128 << 20 {
            break;
        }
        let n = f.read_at(&mut buf, offset).unwrap();
        check_read("slow reader", &buf, n, offset, 64 << 10, size);
        offset += n as u64;
        let due = std::time::Duration::from_micros(600 * k);
        if let Some(wait) = due.checked_sub(began.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let t = engine.readahead_tuning().expect("tuned");
    let windows: Vec<(u64, bool)> = t.steps.iter().map(|s| (s.window >> 10, s.kept)).collect();
    // It never waited for readahead: no doubling was tried.
    assert_eq!(windows, [(256, true), (256, true)], "{t:?}");
    assert!(t.steps.iter().all(|s| s.late < 0.5), "{t:?}");
    assert!(t.settled && t.window == 256 << 10, "{t:?}");
}
