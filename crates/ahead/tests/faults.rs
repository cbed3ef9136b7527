//! The engine under injected faults (`io::fault` around the real
//! backends): errors fail exactly the reads that need the failing page and
//! name it, failed readahead is never reported to a reader that did not ask
//! for it, the cache is not poisoned, pins are never leaked, short reads are
//! reported and never padded, and a reader that gives up leaves nothing
//! behind.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ahead::io::fault::{Fault, FaultKind, FaultPath, Rule};
use ahead::io::{self, BackendKind};
use ahead::{testdata, Engine, EngineConfig};

const PAGE: u64 = 4096;

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(testdata::scratch_root()).unwrap()
}

fn gen(dir: &Path, size: u64) -> PathBuf {
    let p = dir.join("f");
    testdata::write_file(&p, size).unwrap();
    p
}

/// A small engine (2 MiB cache, 256 KiB windows) over each real backend,
/// wrapped in a fault injector.
fn engines() -> Vec<(String, Engine, Arc<Fault>)> {
    let mut v = Vec::new();
    for kind in [BackendKind::Pool, BackendKind::Uring] {
        let inner = match io::new_backend(kind, 16) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("SKIP {kind:?}: {e}");
                continue;
            }
        };
        let fault = Fault::new(inner, 42);
        let engine = Engine::with_backend(
            EngineConfig::default()
                .with_cache_bytes(2 << 20)
                .with_max_readahead(256 << 10)
                .with_max_io(64 << 10)
                .with_depth(16),
            fault.clone(),
        )
        .unwrap();
        v.push((format!("{kind:?}"), engine, fault));
    }
    v
}

#[test]
fn an_eio_on_one_page_fails_exactly_the_reads_that_need_it_and_does_not_poison_the_cache() {
    let dir = scratch();
    let path = gen(dir.path(), 4 << 20);
    let bad = 100 * PAGE;
    for (name, engine, fault) in engines() {
        fault.add(Rule::error(bad..bad + PAGE, libc::EIO));
        let file = engine.open(&path).unwrap();
        let mut buf = vec![0u8; PAGE as usize];
        for page in 0..(4 << 20) / PAGE {
            let off = page * PAGE;
            match file.read_at(&mut buf, off) {
                Ok(n) => {
                    assert_ne!(off, bad, "{name}: the failing page was read");
                    assert_eq!(n, PAGE as usize);
                    assert_eq!(testdata::first_mismatch(&buf, off), None, "{name} at {off}");
                }
                Err(e) => {
                    assert_eq!(off, bad, "{name}: page at {off} failed: {e}");
                    let msg = e.to_string();
                    assert!(msg.contains(&path.display().to_string()), "{msg}");
                    assert!(msg.contains(&format!("offset {bad}")), "{msg}");
                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                }
            }
        }
        // A read that spans the page fails too; one that stops short of it
        // does not.
        let mut big = vec![0u8; 64 << 10];
        assert!(file.read_at(&mut big, bad - 8192).is_err(), "{name}");
        let n = file.read_at(&mut big[..8192], bad - 8192).unwrap();
        assert_eq!(n, 8192);
        // The fault goes away: so does the error.
        fault.clear();
        let n = file.read_at(&mut buf, bad).unwrap();
        assert_eq!(n, PAGE as usize);
        assert_eq!(testdata::first_mismatch(&buf, bad), None, "{name}");
        assert_eq!(engine.pinned_frames(), 0, "{name}");
    }
}

#[test]
fn failed_readahead_is_never_reported_to_a_reader_that_did_not_ask_for_it() {
    let dir = scratch();
    let path = gen(dir.path(), 8 << 20);
    for (name, engine, fault) in engines() {
        // Every read handed to the backend fails: readahead, all of it.
        fault.add(Rule::error(0..u64::MAX, libc::EIO).on(FaultPath::Backend));
        let file = engine.open(&path).unwrap();
        let mut buf = vec![0u8; 16 << 10];
        for off in (0..8u64 << 20).step_by(16 << 10) {
            let n = file
                .read_at(&mut buf, off)
                .unwrap_or_else(|e| panic!("{name}: a reader got readahead's error: {e}"));
            assert_eq!(testdata::first_mismatch(&buf[..n], off), None);
        }
        assert!(fault.injected() > 0, "{name}: no readahead was tried");
        // And backwards, where the policy reads ahead below the reader.
        for off in (0..(8u64 << 20) / (16 << 10)).rev().map(|i| i * (16 << 10)) {
            let n = file.read_at(&mut buf, off).unwrap();
            assert_eq!(testdata::first_mismatch(&buf[..n], off), None);
        }
    }
}

#[test]
fn every_error_path_of_read_pages_leaves_the_pin_count_at_zero() {
    let dir = scratch();
    let path = gen(dir.path(), 4 << 20);
    for (name, engine, fault) in engines() {
        let file = engine.open(&path).unwrap();
        // The 50th page of each 64-page piece fails: read_pages has pinned
        // the pages before it when it meets the failure.
        for k in 0..16u64 {
            let bad = (k * 64 + 50) * PAGE;
            fault.add(Rule::error(bad..bad + PAGE, libc::EIO));
        }
        // Far more failures than the 512-frame budget: leaked pins would
        // leave no frame for the reads below.
        for round in 0..40 {
            for k in 0..16u64 {
                let r = file.read_pages(k * 64 * PAGE, 64 * PAGE as usize);
                assert!(r.is_err(), "{name} round {round}");
                // Checked at once: a leak would otherwise soon leave the
                // next read waiting for a frame forever.
                assert_eq!(engine.pinned_frames(), 0, "{name} round {round}");
            }
        }
        fault.clear();
        let started = Instant::now();
        let pages = file.read_pages(0, 1 << 20).unwrap();
        assert_eq!(pages.len(), 1 << 20);
        assert_eq!(testdata::first_mismatch(&pages.to_vec(), 0), None);
        drop(pages);
        assert_eq!(engine.pinned_frames(), 0);
        assert!(started.elapsed() < Duration::from_secs(10), "{name}");
    }
}

#[test]
fn short_reads_from_the_device_are_reported_never_padded() {
    let dir = scratch();
    let path = gen(dir.path(), 1 << 20);
    for (name, engine, fault) in engines() {
        let cut = 300 * 1024; // the device "ends" here
        fault.add(Rule {
            range: cut..1 << 20,
            kind: FaultKind::Short,
            path: FaultPath::Both,
            probability: 1.0,
            times: None,
        });
        let file = engine.open(&path).unwrap();
        let mut buf = vec![0xAAu8; 1 << 20];
        let mut at = 0u64;
        while at < 1 << 20 {
            let n = file.read_at(&mut buf[at as usize..], at).unwrap();
            assert_eq!(
                testdata::first_mismatch(&buf[at as usize..at as usize + n], at),
                None,
                "{name}: wrong bytes returned as data"
            );
            if n == 0 {
                break;
            }
            at += n as u64;
        }
        // The reader sees the file end where the device said it did, and
        // nothing after it was made up.
        assert_eq!(at, cut, "{name}");
        assert!(
            buf[cut as usize..].iter().all(|&b| b == 0xAA),
            "{name}: padded"
        );
    }
}

/// Polls `f` once with a waker that does nothing.
fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_reader_that_gives_up_leaves_its_reads_to_complete_and_frees_everything() {
    let dir = scratch();
    let path = gen(dir.path(), 4 << 20);
    for (name, engine, fault) in engines() {
        // Backend reads are slow: the futures below give up first.
        fault.add(Rule {
            range: 0..u64::MAX,
            kind: FaultKind::Delay(Duration::from_millis(50)),
            path: FaultPath::Backend,
            probability: 1.0,
            times: None,
        });
        let file = engine.open(&path).unwrap();
        for k in 0..8u64 {
            let mut buf = vec![0u8; 64 << 10];
            let off = k * (512 << 10);
            let mut fut = pin!(file.read_at_async(&mut buf, off));
            assert!(poll_once(fut.as_mut()).is_pending(), "{name}");
            // dropped here, its reads in flight
        }
        // Once they complete, nothing is pinned or in flight, and every
        // page reads correctly.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(engine.pinned_frames(), 0, "{name}");
        fault.clear();
        let mut buf = vec![0u8; 64 << 10];
        for k in 0..8u64 {
            let off = k * (512 << 10);
            let n = file.read_at(&mut buf, off).unwrap();
            assert_eq!(testdata::first_mismatch(&buf[..n], off), None, "{name}");
        }
        // Dropping the engine and file now, with nothing in flight, is clean.
        drop(file);
        drop(engine);
    }
}
