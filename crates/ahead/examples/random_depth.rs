//! Random reads at depth (the aio-stress case of Bhattacharya's
//! AIO readahead patch, docs/references.md): `read_many`
//! plans and issues a whole batch before waiting for any of it, so 64
//! requests of 64 KiB are in flight at once, each read whole in one I/O.
//!
//! ```sh
//! cargo run --release -p ahead --example random_depth -- FILE
//! cargo run --release -p ahead --example random_depth     # a generated 512 MiB file
//! ```

use std::time::Instant;

use ahead::{Advice, Engine, EngineConfig};

const BS: usize = 64 << 10;
const DEPTH: usize = 64;
const BATCHES: usize = 64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, generated) =
        ahead::testdata::file_for_example(std::env::args_os().nth(1), "random", 512 << 20)?;
    let engine = Engine::new(EngineConfig::default())?;
    let file = engine.open(&path)?;
    if file.len() < BS as u64 {
        return Err("the file is smaller than one 64 KiB request".into());
    }
    // Nothing to predict: say so, and readahead stays out of the way.
    file.advise(0, file.len(), Advice::Random);
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut bufs = vec![vec![0u8; BS]; DEPTH];
    let started = Instant::now();
    let mut total = 0u64;
    for _ in 0..BATCHES {
        let mut reqs: Vec<(u64, &mut [u8])> = bufs
            .iter_mut()
            .map(|b| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let slot = rng % (file.len() / BS as u64);
                (slot * BS as u64, b.as_mut_slice())
            })
            .collect();
        for (result, (offset, buf)) in file.read_many(&mut reqs).into_iter().zip(&reqs) {
            let n = result?;
            total += n as u64;
            if generated {
                if let Some(at) = ahead::testdata::first_mismatch(&buf[..n], *offset) {
                    return Err(format!("wrong byte at offset {at}").into());
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let stats = file.stats();
    println!(
        "{} random {} KiB reads at depth {DEPTH}: {:.1} MB/s, {} device reads averaging {} KiB",
        DEPTH * BATCHES,
        BS >> 10,
        total as f64 / secs / 1e6,
        stats.device_reads,
        stats.avg_io_bytes() >> 10
    );
    if generated {
        std::fs::remove_file(&path)?;
        println!("every byte checked");
    }
    Ok(())
}
