//! The three modes on real files: every mode returns the file's bytes
//! through every API, on ext4 and on tmpfs (no O_DIRECT, RWF_NOWAIT or
//! RWF_DONTCACHE there); Buffered probes the kernel's cache and stops
//! probing a file that never hits; Uncached leaves the cache as it was.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahead::io::BackendKind;
use ahead::{testdata, Engine, Error, Mode, OpenOptions};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(testdata::scratch_root()).unwrap()
}

fn gen(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    testdata::write_file(&p, size).unwrap();
    p
}

mod common;
use common::small_engine as engine;

const MODES: [Mode; 3] = [Mode::Direct, Mode::Buffered, Mode::Uncached];

fn open(e: &Engine, p: &Path, mode: Mode) -> ahead::File {
    e.open_with(p, &OpenOptions::new().mode(mode)).unwrap()
}

/// Checks every API of `f` against the generated contents of a file of
/// `size` bytes.
fn check_all_apis(f: &ahead::File, size: u64, what: &str) {
    let mut rng = fastrand::Rng::with_seed(size);
    // read_at: random spans, some crossing or past the end.
    for _ in 0..200 {
        let off = rng.u64(0..size + 10_000);
        let len = rng.usize(1..200_000);
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, off).unwrap();
        assert_eq!(
            n as u64,
            len.min(size.saturating_sub(off) as usize) as u64,
            "{what}"
        );
        assert_eq!(
            testdata::first_mismatch(&buf[..n], off),
            None,
            "{what} at {off}"
        );
    }
    // Backward 4 KiB reads.
    let mut at = size.saturating_sub(4096);
    loop {
        let mut buf = [0u8; 4096];
        let n = f.read_at(&mut buf, at).unwrap();
        assert_eq!(testdata::first_mismatch(&buf[..n], at), None, "{what}");
        if at == 0 {
            break;
        }
        at = at.saturating_sub(4096 * 3);
    }
    // read_many.
    let mut bufs: Vec<Vec<u8>> = (0..20).map(|i| vec![0u8; 1000 + i * 777]).collect();
    let offs: Vec<u64> = (0..20).map(|_| rng.u64(0..size)).collect();
    let mut reqs: Vec<(u64, &mut [u8])> = offs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&o, b)| (o, b.as_mut_slice()))
        .collect();
    let rs = f.read_many(&mut reqs);
    for ((o, b), r) in reqs.iter().zip(rs) {
        let n = r.unwrap();
        assert_eq!(n as u64, (b.len() as u64).min(size - o), "{what}");
        assert_eq!(testdata::first_mismatch(&b[..n], *o), None, "{what}");
    }
    // The async APIs, under a real executor.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..32u64 {
            let f = f.clone();
            let off = (i * 97_331) % size;
            tasks.push(tokio::spawn(async move {
                let (buf, r) = f.read_owned(vec![0u8; 20_000], off).await;
                (off, buf, r)
            }));
        }
        for t in tasks {
            let (off, buf, r) = t.await.unwrap();
            let n = r.unwrap();
            assert!(n > 0, "{what}");
            assert_eq!(testdata::first_mismatch(&buf[..n], off), None, "{what}");
        }
        let mut buf = vec![0u8; 5000];
        let n = f.read_at_async(&mut buf, 12_345).await.unwrap();
        assert_eq!(testdata::first_mismatch(&buf[..n], 12_345), None, "{what}");
    });
    // A reader.
    let mut r = f.reader();
    r.seek(SeekFrom::Start(size / 3)).unwrap();
    let mut all = Vec::new();
    r.read_to_end(&mut all).unwrap();
    assert_eq!(all.len() as u64, size - size / 3, "{what}");
    assert_eq!(testdata::first_mismatch(&all, size / 3), None, "{what}");
}

#[test]
fn every_mode_returns_the_files_bytes_through_every_api_on_every_backend() {
    let dir = scratch();
    let size = (3 << 20) + 777;
    let p = gen(dir.path(), "f", size);
    for backend in testdata::real_backends() {
        let e = engine(backend);
        for mode in MODES {
            let f = open(&e, &p, mode);
            assert_eq!(f.mode(), mode);
            check_all_apis(&f, size, &format!("{backend:?}/{mode}"));
        }
    }
}

#[test]
fn every_mode_works_on_tmpfs_which_lacks_direct_nowait_and_dontcache() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIP: no tmpfs at /dev/shm");
        return;
    };
    let size = (1 << 20) + 5;
    let p = gen(dir.path(), "f", size);
    let e = engine(BackendKind::Auto);
    for mode in MODES {
        let f = open(&e, &p, mode);
        assert!(!f.uses_nowait(), "tmpfs has no RWF_NOWAIT");
        assert!(!f.uses_dontcache(), "tmpfs has no RWF_DONTCACHE");
        check_all_apis(&f, size, &format!("tmpfs/{mode}"));
    }
}

#[test]
fn a_fifo_a_directory_and_a_missing_file_are_clear_errors_in_every_mode() {
    let dir = scratch();
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let e = engine(BackendKind::Auto);
    for mode in MODES {
        let o = OpenOptions::new().mode(mode);
        // The open of a FIFO without a writer must not block.
        match e.open_with(&fifo, &o) {
            Err(Error::Unsupported { why, .. }) => assert!(why.contains("random access"), "{why}"),
            other => panic!("{mode}: {other:?}"),
        }
        assert!(matches!(
            e.open_with(dir.path(), &o),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            e.open_with(dir.path().join("missing"), &o),
            Err(Error::Io { .. })
        ));
    }
}

#[test]
fn a_file_truncated_while_read_gives_short_reads_never_stale_bytes() {
    let dir = scratch();
    let size = 4 << 20;
    let p = gen(dir.path(), "f", size);
    let e = engine(BackendKind::Auto);
    for mode in [Mode::Buffered, Mode::Uncached] {
        testdata::write_file(&p, size).unwrap();
        let f = open(&e, &p, mode);
        let mut buf = vec![0u8; 1 << 20];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 1 << 20);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        assert_eq!(f.read_at(&mut buf, 2 << 20).unwrap(), 0, "{mode}");
        let n = f.read_at(&mut buf, (1 << 20) - 100).unwrap();
        assert_eq!(n, 100, "{mode}");
        assert_eq!(testdata::first_mismatch(&buf[..n], (1 << 20) - 100), None);
    }
}

/// A generated file of `size` bytes in a scratch directory, an engine,
/// and the file opened in Buffered mode; `None` (the test skipped, said)
/// where this kernel has no `RWF_NOWAIT` for Buffered mode's probes.
fn buffered_with_nowait(size: u64) -> Option<(tempfile::TempDir, PathBuf, Engine, ahead::File)> {
    let dir = scratch();
    let p = gen(dir.path(), "f", size);
    let e = engine(BackendKind::Auto);
    let f = open(&e, &p, Mode::Buffered);
    if !f.uses_nowait() {
        eprintln!("SKIP: no RWF_NOWAIT here: {:?}", ahead::features::nowait());
        return None;
    }
    Some((dir, p, e, f))
}

#[test]
fn buffered_probes_a_cached_file_and_stops_probing_a_file_that_never_hits() {
    let size = 64u64 << 20;
    let Some((_dir, p, e, f)) = buffered_with_nowait(size) else {
        return;
    };
    // Cold: evict, then 1,000 16 KiB reads at distinct random offsets (no
    // read finds what an earlier one cached).
    let fd = std::fs::File::open(&p).unwrap();
    ahead::residency::evict(&fd, 0, 0).unwrap();
    let mut rng = fastrand::Rng::with_seed(1);
    let mut slots: Vec<u64> = (0..size / 16384).collect();
    rng.shuffle(&mut slots);
    let mut buf = vec![0u8; 16 << 10];
    for &slot in &slots[..1000] {
        let off = slot * 16384;
        assert_eq!(f.read_at(&mut buf, off).unwrap(), buf.len());
        assert_eq!(testdata::first_mismatch(&buf, off), None);
    }
    let s = f.stats();
    assert_eq!(s.requests, 1000);
    assert_eq!(
        s.backend_reads + s.nowait_hits + s.plain_reads,
        1000,
        "{s:?}"
    );
    // Wasted probes are bounded by what the probes found. On a kernel whose
    // RWF_NOWAIT miss returns EAGAIN having started nothing, a cold probe
    // never hits and at most a fifth of the reads probe. Some kernels (seen
    // on 6.18.44) start the read on the miss, and a fast device can finish
    // it inside the call: such a probe hits, probing pays, and goes on. The
    // rule (a smoothed ratio stopping below 10%, one read in 32 probing
    // after) wastes at most about six probes per hit once the first 18
    // misses have stopped it; nine per hit, plus 200, is the bound.
    let misses = s.nowait_probes - s.nowait_hits;
    if s.nowait_hits > 0 {
        eprintln!(
            "note: {} of 1000 cold RWF_NOWAIT probes hit here (the kernel starts the read on a miss)",
            s.nowait_hits
        );
    }
    assert!(
        misses <= 200 + 9 * s.nowait_hits,
        "{misses} of 1000 cold reads probed in vain, {} hit: {s:?}",
        s.nowait_hits
    );
    // Cached now (a fresh handle: its ratio starts optimistic): a small
    // region read twice, the second time served on the caller's thread,
    // by a probe that hit or, once 64 probes in a row have hit, by a plain
    // pread. (Where a cold probe starts the read and finishes it, the first
    // round already hits, and the second is mostly plain reads.) A page
    // reclaimed between the rounds may send a read to the backend: at most
    // a tenth of them is allowed.
    let g = open(&e, &p, Mode::Buffered);
    let mut first = g.stats();
    for round in 0..2 {
        if round == 1 {
            first = g.stats();
        }
        for i in 0..100u64 {
            assert_eq!(g.read_at(&mut buf, i * 16384).unwrap(), buf.len());
            assert_eq!(testdata::first_mismatch(&buf, i * 16384), None);
        }
    }
    let s = g.stats();
    let inline = (s.nowait_hits + s.plain_reads) - (first.nowait_hits + first.plain_reads);
    assert_eq!(s.requests - first.requests, 100, "{s:?}");
    assert!(inline >= 90, "{inline} of 100 cached reads inline: {s:?}");
    assert!(s.backend_reads - first.backend_reads <= 10, "{s:?}");
}

#[test]
fn buffered_hints_follow_a_backward_reader_and_leave_forward_ones_to_the_kernel() {
    let dir = scratch();
    let size = 16u64 << 20;
    let p = gen(dir.path(), "f", size);
    let e = engine(BackendKind::Auto);
    // Cold: a cached file needs no hints (every probe hits, and the policy
    // is consulted only at misses and markers).
    ahead::residency::evict(std::fs::File::open(&p).unwrap(), 0, 0).unwrap();
    let back = open(&e, &p, Mode::Buffered);
    let mut buf = [0u8; 4096];
    for i in (0..size / 4096).rev() {
        back.read_at(&mut buf, i * 4096).unwrap();
        assert_eq!(testdata::first_mismatch(&buf, i * 4096), None);
    }
    let s = back.stats();
    assert!(s.hints > 0 && s.hinted_pages > 1000, "{s:?}");
    if back.uses_nowait() {
        // The hints ran ahead of the reader: most reads were served inline.
        assert!((s.nowait_hits + s.plain_reads) * 2 > s.requests, "{s:?}");
    }
    let fwd = open(&e, &p, Mode::Buffered);
    for i in 0..size / 4096 {
        fwd.read_at(&mut buf, i * 4096).unwrap();
    }
    assert_eq!(fwd.stats().hints, 0, "forward streams are the kernel's");
    let off = e
        .open_with(&p, &OpenOptions::new().mode(Mode::Buffered).hints(false))
        .unwrap();
    for i in (0..256).rev() {
        off.read_at(&mut buf, i * 4096).unwrap();
    }
    assert_eq!(off.stats().hints, 0, "hints(false) sends none");
}

#[test]
fn read_pages_is_refused_in_the_kernel_modes() {
    let dir = scratch();
    let p = gen(dir.path(), "f", 1 << 20);
    let e = engine(BackendKind::Auto);
    for mode in [Mode::Buffered, Mode::Uncached] {
        assert!(matches!(
            open(&e, &p, mode).read_pages(0, 4096),
            Err(Error::Unsupported { .. })
        ));
    }
    let _ = Arc::new(());
}

/// Pages of `p` in the kernel's cache over `[from, to)` bytes, by
/// cachestat (mincore if cachestat is missing).
fn cached_pages(p: &Path, from: u64, to: u64) -> u64 {
    let f = std::fs::File::open(p).unwrap();
    match ahead::residency::of_range(&f, from, to - from).unwrap() {
        ahead::residency::Seen::Known(r) => r.cached,
        ahead::residency::Seen::Unknown { why, .. } => panic!("residency unknown: {why}"),
    }
}

#[test]
fn uncached_leaves_the_kernel_cache_as_it_found_it() {
    let dir = scratch();
    let size = 64u64 << 20;
    let p = gen(dir.path(), "f", size);
    let half = size / 2;
    let pages = half / 4096;
    for (backend, dontcache) in testdata::real_backends()
        .into_iter()
        .flat_map(|b| [(b, true), (b, false)])
    {
        let e = engine(backend);
        // Some attempts: the kernel's proactive reclaim may take cached
        // pages of the first half while the test runs (docs/measuring.md).
        let mut last = String::new();
        let ok = (0..3).any(|_| {
            let fd = std::fs::File::open(&p).unwrap();
            ahead::residency::evict(&fd, 0, 0).unwrap();
            // Warmed with plain reads, as another program would: the
            // kernel's readahead caches the start of the second half too
            // and leaves lookahead markers, whose async readahead an
            // uncached read must not keep.
            let mut buf = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < half {
                at += std::os::unix::fs::FileExt::read_at(&fd, &mut buf, at).unwrap() as u64;
            }
            // Let that readahead finish before looking.
            let mut second_before = cached_pages(&p, half, size);
            for _ in 0..50 {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let now = cached_pages(&p, half, size);
                if now == second_before {
                    break;
                }
                second_before = now;
            }
            let f = e
                .open_with(
                    &p,
                    &OpenOptions::new().mode(Mode::Uncached).dontcache(dontcache),
                )
                .unwrap();
            assert!(dontcache || !f.uses_dontcache());
            let mut all = 0u64;
            while all < size {
                let n = f.read_at(&mut buf, all).unwrap();
                assert_eq!(testdata::first_mismatch(&buf[..n], all), None);
                all += n as u64;
            }
            let first = cached_pages(&p, 0, half);
            let second = cached_pages(&p, half, size);
            last = format!(
                "{backend:?} dontcache {}: first half {first}/{pages}, second half \
                 {second}/{pages} ({second_before} before)",
                f.uses_dontcache()
            );
            first * 1000 >= pages * 995 && second * 1000 <= pages * 5 + second_before * 1000
        });
        assert!(ok, "{last}");
        eprintln!("{last}");
    }
}

/// A file whose probes all hit is read with plain `pread`s, every 16th
/// read still probed; once its pages are gone, a probe within 16 reads
/// misses and ends that, and every byte read is right throughout.
#[test]
fn buffered_reads_a_file_its_probes_always_found_cached_without_probing_and_notices_eviction() {
    let size = 16u64 << 20;
    let Some((_dir, p, _e, f)) = buffered_with_nowait(size) else {
        return;
    };
    let fd = std::fs::File::open(&p).unwrap();
    ahead::residency::warm(&fd, 0, size).unwrap();
    let mut rng = fastrand::Rng::with_seed(3);
    let mut buf = vec![0u8; 16 << 10];
    let mut read = |n: usize| {
        for _ in 0..n {
            let off = rng.u64(0..size / 16384) * 16384;
            assert_eq!(f.read_at(&mut buf, off).unwrap(), buf.len());
            assert_eq!(testdata::first_mismatch(&buf, off), None);
        }
        f.stats()
    };
    let s = read(640);
    assert_eq!(s.requests, 640);
    assert_eq!(
        s.nowait_hits + s.backend_reads + s.plain_reads,
        640,
        "{s:?}"
    );
    assert_eq!(s.bytes, 640 * 16384);
    // The first 64 probe; of the rest, 15 in 16 are plain.
    assert!(s.plain_reads >= 500, "{s:?}");
    assert!(s.nowait_probes >= 64 + 30, "{s:?}");
    // Gone from the cache: a probe within 16 reads misses, and the reads
    // after it probe again. The file is evicted before each read, so that
    // what the kernel read ahead for the plain reads cannot make a probe
    // hit (on a CI machine two probes in a row once did).
    let before = s;
    for _ in 0..64 {
        ahead::residency::evict(&fd, 0, 0).unwrap();
        read(1);
    }
    let s = f.stats();
    let probes = s.nowait_probes - before.nowait_probes;
    let plain = s.plain_reads - before.plain_reads;
    if s.nowait_hits - before.nowait_hits == probes {
        // Some kernels start the read on a RWF_NOWAIT miss and a fast
        // device finishes it inside the call: every probe hit.
        eprintln!("note: every probe hit after the eviction here");
        return;
    }
    assert!(plain <= 15, "{plain} plain reads after the eviction: {s:?}");
    assert!(s.backend_reads > before.backend_reads, "{s:?}");
}
