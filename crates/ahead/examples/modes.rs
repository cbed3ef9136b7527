//! The three modes on one file, side by side: Direct (ahead's cache),
//! Buffered (the kernel's, cached data served without blocking) and
//! Uncached (the kernel's cache left as it was). Each reads the file
//! backward in 16 KiB requests from tokio tasks through `read_owned`, whose
//! future owns its buffer and can be spawned.
//!
//! ```sh
//! cargo run --release -p ahead --example modes -- FILE
//! cargo run --release -p ahead --example modes       # a generated 64 MiB file
//! ```
//! It prints each mode's time and counters, and the file's residency in the
//! kernel's cache after each.

use std::time::Instant;

use ahead::{Engine, EngineConfig, Mode, OpenOptions};

const BS: usize = 16 << 10;

fn cached_pages(path: &std::path::Path) -> String {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return e.to_string(),
    };
    match ahead::residency::of_range(&f, 0, u64::MAX) {
        Ok(ahead::residency::Seen::Known(r)) => format!("{} pages cached", r.cached),
        Ok(ahead::residency::Seen::Unknown { why, .. }) => format!("residency unknown ({why})"),
        Err(e) => format!("residency unknown ({e})"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, generated) =
        ahead::testdata::file_for_example(std::env::args_os().nth(1), "modes", 64 << 20)?;
    let engine = Engine::new(EngineConfig::default())?;
    for mode in [Mode::Direct, Mode::Buffered, Mode::Uncached] {
        // Each mode starts cold.
        ahead::residency::evict(std::fs::File::open(&path)?, 0, 0)?;
        let file = engine.open_with(&path, &OpenOptions::new().mode(mode))?;
        let started = Instant::now();
        let blocks = file.len().div_ceil(BS as u64);
        let mut buf = vec![0u8; BS];
        for b in (0..blocks).rev() {
            let at = b * BS as u64;
            // Spawned: the future owns the file handle and the buffer.
            let (back, n) = tokio::spawn(file.read_owned(buf, at)).await?;
            let n = n?;
            if generated {
                if let Some(bad) = ahead::testdata::first_mismatch(&back[..n], at) {
                    return Err(format!("{mode}: wrong byte at offset {bad}").into());
                }
            }
            buf = back;
        }
        let s = file.stats();
        println!(
            "{mode:<9} {:.3} s; requests {}, probes {} (hits {}), plain reads {}, blocking reads {}, \
             hints {}, device reads {}; afterwards {}",
            started.elapsed().as_secs_f64(),
            s.requests,
            s.nowait_probes,
            s.nowait_hits,
            s.plain_reads,
            s.backend_reads,
            s.hints,
            s.device_reads,
            cached_pages(&path)
        );
    }
    if generated {
        std::fs::remove_file(&path)?;
    }
    Ok(())
}
