//! Streaming a file through ahead's Direct mode: `reader()` gives a
//! `Read + Seek + BufRead` stream whose sequential reads ahead's readahead
//! turns into large O_DIRECT reads ahead of the reader.
//!
//! ```sh
//! cargo run --release -p ahead --example stream -- FILE      # a file of yours
//! cargo run --release -p ahead --example stream              # a generated 256 MiB file
//! ```
//! Prints the bytes read, the rate, and the engine's counters.

use std::io::BufRead;
use std::time::Instant;

use ahead::{Engine, EngineConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, generated) =
        ahead::testdata::file_for_example(std::env::args_os().nth(1), "stream", 256 << 20)?;
    let engine = Engine::new(EngineConfig::default())?;
    let file = engine.open(&path)?;
    let mut reader = file.reader();
    let started = Instant::now();
    let mut total = 0u64;
    let mut wrong = None;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        if generated && wrong.is_none() {
            wrong = ahead::testdata::first_mismatch(chunk, total);
        }
        let n = chunk.len();
        total += n as u64;
        reader.consume(n);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "read {} bytes of {} in {:.3} s: {:.1} MB/s (direct: {})",
        total,
        path.display(),
        secs,
        total as f64 / secs / 1e6,
        file.is_direct()
    );
    for (name, value) in file.stats().fields() {
        println!("  {name:<20} {value}");
    }
    if generated {
        std::fs::remove_file(&path)?;
        if let Some(at) = wrong {
            return Err(format!("wrong byte at offset {at}").into());
        }
        println!("every byte checked");
    }
    Ok(())
}
