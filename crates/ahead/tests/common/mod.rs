//! Helpers shared by the library's integration tests.

use ahead::io::BackendKind;
use ahead::{Engine, EngineConfig};

/// A small engine: a 4 MiB cache, 256 KiB windows in 64 KiB reads, 16 in
/// flight, so that eviction and the demand reserve are exercised by files
/// of a few MiB.
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
