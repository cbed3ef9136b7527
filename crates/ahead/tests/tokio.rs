//! `File::read_at_async` under tokio, on both runtime flavours: many tasks
//! at once, some on the same pages (so one waits on another's read), odd
//! sizes, a cache smaller than the file; every byte checked.

use std::sync::Arc;

use ahead::io::BackendKind;
use ahead::testdata;

const SIZE: u64 = 12 << 20;

mod common;
use common::small_engine as engine;

async fn read_range(file: Arc<ahead::File>, start: u64, end: u64, bs: usize) -> u64 {
    let mut buf = vec![0u8; bs];
    let mut at = start;
    while at < end {
        let want = ((end - at) as usize).min(bs);
        let n = file.read_at_async(&mut buf[..want], at).await.unwrap();
        assert!(n > 0, "no progress at {at}");
        assert_eq!(testdata::first_mismatch(&buf[..n], at), None, "at {at}");
        at += n as u64;
    }
    at - start
}

async fn many_tasks(backend: BackendKind) {
    let dir = tempfile::tempdir_in(testdata::scratch_root()).unwrap();
    let path = dir.path().join("f");
    testdata::write_file(&path, SIZE).unwrap();
    let engine = engine(backend);
    let file = Arc::new(engine.open(&path).unwrap());
    let mut tasks = Vec::new();
    // Eight tasks on their own eighths, with odd request sizes...
    for t in 0..8u64 {
        let (s, e) = (t * SIZE / 8, (t + 1) * SIZE / 8);
        tasks.push(tokio::spawn(read_range(
            file.clone(),
            s,
            e,
            4096 * (t as usize + 1) + 17,
        )));
    }
    // ...and three more all on the same first MiB.
    for _ in 0..3 {
        tasks.push(tokio::spawn(read_range(file.clone(), 0, 1 << 20, 65_536)));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, SIZE + 3 * (1 << 20));
    // Past the end: 0 bytes, not an error.
    let mut buf = [0u8; 10];
    assert_eq!(file.read_at_async(&mut buf, SIZE + 5).await.unwrap(), 0);
}

#[test]
fn current_thread_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for b in testdata::real_backends() {
        rt.block_on(many_tasks(b));
    }
}

#[test]
fn multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    for b in testdata::real_backends() {
        rt.block_on(many_tasks(b));
    }
}
