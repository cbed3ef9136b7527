//! Engines made and dropped as a program does: what an idle engine costs,
//! and engines dropped while their readahead is in flight. Alone in its test
//! binary: it counts panics on every thread with a process-wide hook, and
//! reads the process's resident set.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ahead::{testdata, Engine, EngineConfig};

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn engines_cost_what_they_cache_and_survive_being_dropped_mid_readahead() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        prev(info);
    }));
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let path = dir.path().join("f");
    testdata::write_file(&path, 64 << 20).unwrap();

    // An idle engine with the default 256 MiB budget: address space, not
    // resident memory (it was 258 MiB, the arena zeroed up front).
    let before = resident_kib();
    let started = Instant::now();
    let engine = Engine::new(EngineConfig::default()).unwrap();
    let ready = started.elapsed();
    let idle = resident_kib().saturating_sub(before);
    eprintln!("idle engine: +{idle} KiB resident, ready in {ready:?}");
    assert!(idle < 16 << 10, "an idle engine added {idle} KiB");
    // Reading 64 MiB through it costs about 64 MiB, not the budget.
    let file = engine.open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for off in (0..64u64 << 20).step_by(1 << 20) {
        let n = file.read_at(&mut buf, off).unwrap();
        assert_eq!(testdata::first_mismatch(&buf[..n], off), None);
    }
    let used = resident_kib().saturating_sub(before);
    eprintln!("after reading 64 MiB: +{used} KiB resident");
    assert!(used < 104 << 10, "{used} KiB after reading 64 MiB");
    drop(file);
    drop(engine);

    // Dropped while readahead is in flight: the last reference to the
    // engine then dies in a completion, on the backend's own thread.
    for backend in testdata::real_backends() {
        let started = Instant::now();
        for _ in 0..200 {
            let engine = Engine::new(EngineConfig::default().with_backend(backend)).unwrap();
            let file = engine.open(&path).unwrap();
            let mut b = [0u8; 4096];
            file.read_at(&mut b, 0).unwrap();
            drop(file);
            drop(engine);
        }
        eprintln!(
            "200 engines ({backend:?}) dropped mid-readahead in {:?}",
            started.elapsed()
        );
    }
    // Detached completion threads finish on their own.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a thread panicked");
}
