//! `ahead cat`: streams files to standard output through the engine.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::read::EngineArgs;

/// Arguments of `ahead cat`.
#[derive(Args, Debug)]
pub struct CatArgs {
    /// Files to print, in order.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Runs `ahead cat`. Like cat(1), a file that cannot be read is reported on
/// stderr and the others are still printed; the exit status says whether
/// all of them were.
pub fn run(args: CatArgs) -> Result<bool> {
    let engine = ahead::Engine::new(args.engine.config()?)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut ok = true;
    for path in &args.files {
        match copy(&engine, path, &mut out) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ok),
            Err(e) => {
                eprintln!("ahead: {e}");
                ok = false;
            }
        }
    }
    out.flush().or_else(|e| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    Ok(ok)
}

fn copy(engine: &ahead::Engine, path: &PathBuf, out: &mut impl Write) -> io::Result<()> {
    let file = engine.open(path)?;
    if !file.is_direct() {
        crate::read::warn_not_direct(path);
    }
    let mut reader = file.reader();
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        let n = chunk.len();
        out.write_all(chunk)?;
        reader.consume(n);
    }
}
