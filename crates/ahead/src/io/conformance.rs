//! One conformance suite for every way of reading: the blocking path, the
//! thread pool and io_uring must agree on full reads, reads that reach the
//! end of the file, reads past it, errors, and many reads in flight.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;

use super::*;
use crate::testdata;

/// How one read is carried out, for each way under test.
type Reader = dyn Fn(ReadOp) -> (ReadOp, io::Result<usize>);

fn via_backend(b: Arc<dyn Backend>) -> Box<Reader> {
    Box::new(move |op| {
        let (tx, rx) = mpsc::channel();
        b.submit(
            op,
            Box::new(move |op, r| {
                tx.send((op, r)).unwrap();
            }),
        );
        rx.recv().unwrap()
    })
}

fn blocking() -> Box<Reader> {
    Box::new(|mut op| {
        let r = read_blocking(&mut op);
        (op, r)
    })
}

/// A way of reading: its name, how it reads one op, and its backend (none
/// for the blocking path).
type Way = (&'static str, Box<Reader>, Option<Arc<dyn Backend>>);

/// Every way, named; io_uring is skipped, loudly, where the kernel lacks it.
fn ways() -> Vec<Way> {
    let mut v: Vec<Way> = vec![("blocking", blocking(), None)];
    let pool: Arc<dyn Backend> = Arc::new(pool::Pool::new(4));
    v.push(("pool", via_backend(pool.clone()), Some(pool)));
    // Objects' backend: a descriptor cannot start its own reads, so these
    // go through its pool (the objects' own starts are tests/remote.rs's).
    let requests: Arc<dyn Backend> = Arc::new(super::Requests::new(4));
    v.push(("requests", via_backend(requests.clone()), Some(requests)));
    match uring::Uring::new(4) {
        Ok(u) => {
            let u: Arc<dyn Backend> = Arc::new(u);
            v.push(("uring", via_backend(u.clone()), Some(u)));
        }
        Err(e) => eprintln!("SKIP io_uring conformance: io_uring unavailable here: {e}"),
    }
    v
}

fn file(dir: &Path, name: &str, size: u64) -> Arc<OwnedFd> {
    let p = dir.join(name);
    testdata::write_file(&p, size).unwrap();
    Arc::new(crate::testdata::open_read(&p, true).unwrap())
}

fn owned(fd: &Arc<OwnedFd>, offset: u64, len: usize) -> ReadOp {
    ReadOp {
        source: fd.clone(),
        offset,
        len,
        buf: IoBuf::Owned(AlignedBuf::new(len, 4096)),
        flags: 0,
        known_miss: false,
    }
}

fn bytes(op: &ReadOp, n: usize) -> Vec<u8> {
    match &op.buf {
        IoBuf::Owned(b) => b.as_slice()[..n].to_vec(),
        IoBuf::Frames(FrameBuf { arena, frames }) => {
            let mut v = Vec::new();
            for &f in frames {
                // SAFETY: the read is complete and nothing else uses the arena.
                v.extend_from_slice(unsafe { arena.frame(f, arena.frame_size()) });
            }
            v.truncate(n);
            v
        }
    }
}

#[test]
fn full_reads_return_every_byte() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let fd = file(dir.path(), "f", 1 << 20);
    for (name, read, _) in ways() {
        for (offset, len) in [(0u64, 4096usize), (4096, 65536), (1 << 19, 1 << 19)] {
            let (op, r) = read(owned(&fd, offset, len));
            let n = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(n, len, "{name}");
            assert_eq!(
                testdata::first_mismatch(&bytes(&op, n), offset),
                None,
                "{name}"
            );
        }
    }
}

#[test]
fn reads_into_frames_fill_them_in_order() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let fd = file(dir.path(), "f", 1 << 20);
    for (name, read, _) in ways() {
        let arena = Arena::new(8, 4096).unwrap();
        let op = ReadOp {
            source: fd.clone(),
            offset: 8192,
            len: 5 * 4096,
            buf: IoBuf::Frames(FrameBuf::new(arena.clone(), vec![6, 1, 3, 0, 7])),
            flags: 0,
            known_miss: false,
        };
        let (op, r) = read(op);
        assert_eq!(r.unwrap(), 5 * 4096, "{name}");
        assert_eq!(
            testdata::first_mismatch(&bytes(&op, 5 * 4096), 8192),
            None,
            "{name}"
        );
    }
}

#[test]
fn reads_into_a_registered_arena_fill_the_same_bytes() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let fd = file(dir.path(), "f", 32 << 20);
    let ring = match uring::Uring::new(4) {
        Ok(u) => Arc::new(u),
        Err(e) => return eprintln!("SKIP registered buffers: io_uring unavailable here: {e}"),
    };
    // Two regions and a little more.
    let frames = (2 * uring::REGION + 3 * 4096) / 4096;
    let arena = Arena::new(frames, 4096).unwrap();
    if !ring.attach(&arena) {
        return eprintln!("SKIP registered buffers: the kernel refused a buffer table");
    }
    let other = Arena::new(8, 4096).unwrap();
    assert!(!ring.attach(&other), "one arena per ring");
    let r = uring::REGION as u32 / 4096;
    let backend: Arc<dyn Backend> = ring.clone();
    let read = via_backend(backend);
    // (frames, whether the read can be a fixed one where READV_FIXED exists)
    let cases: Vec<(Vec<u32>, &str)> = vec![
        ((0..16).collect(), "contiguous: READ_FIXED"),
        (vec![6, 1, 3, 0, 7], "scattered in one region: READV_FIXED"),
        ((r - 2..r + 2).collect(), "across two regions: READV"),
        ((2 * r..2 * r + 3).collect(), "the last, short region"),
    ];
    for (k, (list, what)) in cases.into_iter().enumerate() {
        let offset = k as u64 * (1 << 20);
        let len = list.len() * 4096;
        let before = ring.fixed_reads();
        let op = ReadOp {
            source: fd.clone(),
            offset,
            len,
            buf: IoBuf::Frames(FrameBuf::new(arena.clone(), list)),
            flags: 0,
            known_miss: false,
        };
        let (op, res) = read(op);
        assert_eq!(res.unwrap(), len, "{what}");
        assert_eq!(
            testdata::first_mismatch(&bytes(&op, len), offset),
            None,
            "{what}"
        );
        let fixed = ring.fixed_reads() - before;
        match k {
            0 | 3 => assert_eq!(fixed, 1, "{what}"),
            2 => assert_eq!(fixed, 0, "{what}"),
            _ => assert_eq!(fixed, u64::from(ring.readv_fixed()), "{what}"),
        }
    }
    // Reaching the end: the continuation that finds it goes fixed too.
    let before = ring.fixed_reads();
    let op = ReadOp {
        source: fd.clone(),
        offset: (32 << 20) - 4096,
        len: 4 * 4096,
        buf: IoBuf::Frames(FrameBuf::new(arena.clone(), (8..12).collect())),
        flags: 0,
        known_miss: false,
    };
    let (op, res) = read(op);
    assert_eq!(res.unwrap(), 4096);
    assert_eq!(
        testdata::first_mismatch(&bytes(&op, 4096), (32 << 20) - 4096),
        None
    );
    assert_eq!(
        ring.fixed_reads() - before,
        2,
        "the read and its continuation"
    );
    // Owned buffers never go fixed.
    let before = ring.fixed_reads();
    let (op, res) = read(owned(&fd, 4096, 8192));
    assert_eq!(res.unwrap(), 8192);
    assert_eq!(testdata::first_mismatch(&bytes(&op, 8192), 4096), None);
    assert_eq!(ring.fixed_reads(), before);
}

#[test]
fn a_read_reaching_the_end_is_short_and_exact() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    for size in [1u64, 4095, 4097, 10_000, 65_536 + 513] {
        let fd = file(dir.path(), &format!("f{size}"), size);
        for (name, read, _) in ways() {
            let (op, r) = read(owned(&fd, 0, 128 << 10));
            let n = r.unwrap_or_else(|e| panic!("{name} size {size}: {e}"));
            assert_eq!(n as u64, size, "{name}");
            assert_eq!(testdata::first_mismatch(&bytes(&op, n), 0), None, "{name}");
            // From the last whole page: the tail only.
            let last = size / 4096 * 4096;
            let (op, r) = read(owned(&fd, last, 8192));
            let n = r.unwrap();
            assert_eq!(n as u64, size - last, "{name} size {size}");
            assert_eq!(
                testdata::first_mismatch(&bytes(&op, n), last),
                None,
                "{name}"
            );
        }
    }
}

#[test]
fn a_read_past_the_end_returns_zero() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let fd = file(dir.path(), "f", 8192);
    for (name, read, _) in ways() {
        let (_, r) = read(owned(&fd, 1 << 20, 4096));
        assert_eq!(r.unwrap(), 0, "{name}");
    }
}

#[test]
fn errors_come_back_unchanged() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let p = dir.path().join("w");
    std::fs::write(&p, [1u8; 4096]).unwrap();
    // Opened for writing only: reads fail with EBADF.
    let fd: Arc<OwnedFd> = Arc::new(
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .into(),
    );
    for (name, read, _) in ways() {
        let (_, r) = read(owned(&fd, 0, 4096));
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EBADF), "{name}");
    }
    // An unaligned offset under O_DIRECT: EINVAL, from every way alike.
    let fd = file(dir.path(), "f", 65536);
    for (name, read, _) in ways() {
        let (_, r) = read(owned(&fd, 100, 4096));
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINVAL), "{name}");
    }
}

#[test]
fn more_reads_than_depth_all_complete() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let fd = file(dir.path(), "f", 4 << 20);
    for (name, _, backend) in ways() {
        let Some(backend) = backend else { continue };
        let (tx, rx) = mpsc::channel();
        let count = 200u64;
        for i in 0..count {
            let tx = tx.clone();
            let offset = (i * 7919 % 1024) * 4096;
            backend.submit(
                owned(&fd, offset, 4096),
                Box::new(move |op, r| tx.send((offset, bytes(&op, 4096), r)).unwrap()),
            );
        }
        drop(tx);
        let mut seen = 0;
        for (offset, data, r) in rx {
            assert_eq!(r.unwrap(), 4096, "{name}");
            assert_eq!(testdata::first_mismatch(&data, offset), None, "{name}");
            seen += 1;
        }
        assert_eq!(seen, count, "{name}");
    }
}

#[test]
fn a_panicking_completion_does_not_stop_the_backend() {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let fd = file(dir.path(), "f", 1 << 20);
    for (name, _, backend) in ways() {
        let Some(b) = backend else { continue };
        // More panics than the backend's depth: each must free its slot.
        // Submitted from another thread: a dead backend blocks `submit`,
        // and the timeout below must still fire.
        let (tx, rx) = mpsc::channel();
        let fd2 = fd.clone();
        std::thread::spawn(move || {
            for k in 0..(b.depth() as u64 * 2 + 1) {
                b.submit(
                    owned(&fd2, k * 4096, 4096),
                    Box::new(|_, _| panic!("a completion that panics (expected in this test)")),
                );
            }
            b.submit(
                owned(&fd2, 8192, 4096),
                Box::new(move |op, r| tx.send((op, r)).unwrap()),
            );
        });
        let (op, r) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{name}: no completion after panicking ones"));
        assert_eq!(r.unwrap(), 4096, "{name}");
        assert_eq!(testdata::first_mismatch(&bytes(&op, 4096), 8192), None);
    }
}

/// A source without a descriptor, as an object in a store is: generated
/// bytes of a given size, read by [`ReadSource::read_at`] (what a ranged
/// request would do), each call counted.
struct NoFdSource {
    size: u64,
    calls: std::sync::atomic::AtomicU64,
}

impl ReadSource for NoFdSource {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn read_at(&self, buf: &mut [u8], offset: u64, _flags: i32) -> io::Result<usize> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = (self.size.saturating_sub(offset) as usize).min(buf.len());
        testdata::fill(&mut buf[..n], offset);
        Ok(n)
    }

    fn version(&self) -> io::Result<super::Version> {
        Ok(super::Version {
            size: self.size,
            tag: 0,
        })
    }
}

#[test]
fn a_source_without_a_descriptor_is_read_by_every_way_with_the_same_semantics() {
    let source = Arc::new(NoFdSource {
        size: 1 << 20,
        calls: std::sync::atomic::AtomicU64::new(0),
    });
    for (name, read, _) in ways() {
        let before = source.calls.load(std::sync::atomic::Ordering::Relaxed);
        // Whole, into one buffer.
        let (op, r) = read(ReadOp {
            source: source.clone(),
            offset: 4096,
            len: 64 << 10,
            buf: IoBuf::Owned(AlignedBuf::new(64 << 10, 4096)),
            flags: 0,
            known_miss: false,
        });
        assert_eq!(r.unwrap(), 64 << 10, "{name}");
        assert_eq!(
            testdata::first_mismatch(&bytes(&op, 64 << 10), 4096),
            None,
            "{name}"
        );
        // Reaching the end: short and exact.
        let (op, r) = read(ReadOp {
            source: source.clone(),
            offset: (1 << 20) - 1000,
            len: 8192,
            buf: IoBuf::Owned(AlignedBuf::new(8192, 4096)),
            flags: 0,
            known_miss: false,
        });
        assert_eq!(r.unwrap(), 1000, "{name}");
        assert_eq!(
            testdata::first_mismatch(&bytes(&op, 1000), (1 << 20) - 1000),
            None,
            "{name}"
        );
        // Past the end: nothing.
        let (_, r) = read(ReadOp {
            source: source.clone(),
            offset: 2 << 20,
            len: 4096,
            buf: IoBuf::Owned(AlignedBuf::new(4096, 4096)),
            flags: 0,
            known_miss: false,
        });
        assert_eq!(r.unwrap(), 0, "{name}");
        let calls = source.calls.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(calls >= 3, "{name}: the source read itself {calls} times");
    }
}
