//! `ahead cat`: streams files to standard output through the engine.
//! Streams — `-` (standard input), FIFOs, character devices, sockets —
//! have no offsets for the engine to read ahead of: they are copied as cat
//! copies them.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::read::EngineArgs;

/// Arguments of `ahead cat`.
#[derive(Args, Debug)]
pub struct CatArgs {
    /// Files to print, in order (`-`: standard input; `s3://bucket/key`
    /// and `http(s)://…`: objects in a store, with the AWS_* environment).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// How regular files are read: direct (ahead's cache), buffered (the
    /// kernel's, cached data served without blocking) or uncached (leaves
    /// the kernel's cache as it was).
    #[arg(long, default_value = "direct")]
    mode: ahead::Mode,
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
    let mut warned_blind = false;
    let opts = ahead::OpenOptions::new().mode(args.mode);
    for path in &args.files {
        match copy(&engine, &opts, path, &mut out, &mut warned_blind) {
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

fn copy(
    engine: &ahead::Engine,
    opts: &ahead::OpenOptions,
    path: &PathBuf,
    out: &mut impl Write,
    warned_blind: &mut bool,
) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if path.as_os_str() == "-" {
        return stream(&mut io::stdin().lock(), out);
    }
    if let Some(url) = path.to_str().filter(|s| ahead::remote::is_url(s)) {
        let file = engine.open_url(url)?;
        return copy_out(&file, out);
    }
    let ft = std::fs::metadata(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?
        .file_type();
    if ft.is_fifo() || ft.is_char_device() || ft.is_socket() {
        // Opening a FIFO waits for a writer, as cat's open does.
        let mut f = std::fs::File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        return stream(&mut f, out)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())));
    }
    let file = engine.open_with(path, opts)?;
    if opts.mode == ahead::Mode::Direct && !file.is_direct() {
        crate::read::warn_not_direct(path);
    }
    if file.residency_blind() && !*warned_blind {
        *warned_blind = true;
        eprintln!(
            "ahead: warning: {}: no RWF_DONTCACHE here and residency cannot be seen (the file \
             is neither yours nor writable by you): --mode uncached cannot tell which pages \
             it brought in, and drops none",
            path.display()
        );
    }
    copy_out(&file, out)
}

/// Writes a file (or object) through its reader.
fn copy_out(file: &ahead::File, out: &mut impl Write) -> io::Result<()> {
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

/// Copies a stream to its end.
fn stream(from: &mut impl io::Read, out: &mut impl Write) -> io::Result<()> {
    io::copy(from, out).map(|_| ())
}
