//! ahead under tokio: `File::read_at_async` returns a plain future (no
//! runtime of its own, no blocking thread), woken by the I/O backend when
//! its reads complete, so many reads proceed concurrently on one runtime.
//!
//! ```sh
//! cargo run --release -p ahead --example tokio -- FILE
//! cargo run --release -p ahead --example tokio       # a generated 256 MiB file
//! ```
//! Eight tasks each stream their own eighth of the file.

use std::sync::Arc;
use std::time::Instant;

use ahead::{Engine, EngineConfig};

const TASKS: u64 = 8;
const BS: usize = 128 << 10;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, generated) =
        ahead::testdata::file_for_example(std::env::args_os().nth(1), "tokio", 256 << 20)?;
    let engine = Engine::new(EngineConfig::default())?;
    let file = Arc::new(engine.open(&path)?);
    let share = file.len().div_ceil(TASKS);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let file = file.clone();
        tasks.push(tokio::spawn(async move {
            let (start, end) = (t * share, ((t + 1) * share).min(file.len()));
            let mut buf = vec![0u8; BS];
            let mut at = start;
            while at < end {
                let want = ((end - at) as usize).min(BS);
                let n = file.read_at_async(&mut buf[..want], at).await?;
                if n == 0 {
                    break;
                }
                if generated {
                    if let Some(bad) = ahead::testdata::first_mismatch(&buf[..n], at) {
                        return Err(format!("wrong byte at offset {bad}").into());
                    }
                }
                at += n as u64;
            }
            Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(at - start)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await?.map_err(|e| e.to_string())?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{TASKS} tokio tasks read {total} bytes in {:.3} s: {:.1} MB/s",
        secs,
        total as f64 / secs / 1e6
    );
    if generated {
        std::fs::remove_file(&path)?;
        println!("every byte checked");
    }
    Ok(())
}
