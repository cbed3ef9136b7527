//! Helpers shared by the library's integration tests.

use ahead::io::BackendKind;
use ahead::{testdata, Engine, EngineConfig, File};

/// A small engine: a 4 MiB cache, 256 KiB windows in 64 KiB reads, 16 in
/// flight, so that eviction and the demand reserve are exercised by files
/// of a few MiB.
#[allow(dead_code)] // not every test file uses it
pub fn small_engine(backend: BackendKind) -> Engine {
    Engine::new(
        EngineConfig::default()
            .with_cache_bytes(4 << 20)
            .with_max_readahead(256 << 10)
            .with_max_io(64 << 10)
            .with_backend(backend)
            .with_depth(16),
    )
    .unwrap()
}

/// Reads the whole file in 256 KiB reads, checking every byte against
/// the generated data shifted by `shift`.
#[allow(dead_code)] // not every test file reads whole files
pub fn read_all(file: &File, shift: u64) {
    let mut buf = vec![0u8; 256 << 10];
    let mut at = 0;
    while at < file.len() {
        let n = file.read_at(&mut buf, at).unwrap();
        assert!(n > 0);
        assert_eq!(
            testdata::first_mismatch(&buf[..n], at + shift),
            None,
            "at {at}"
        );
        at += n as u64;
    }
}
