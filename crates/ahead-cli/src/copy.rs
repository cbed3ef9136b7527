//! `ahead copy SRC DST`: the library's copy engine with a progress bar, a
//! JSON summary and exit codes that say what happened.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ahead::copy::{CacheMode, CopyOptions, CopyReport, Progress, Totals};
use ahead::units::{format_size, parse_size};
use anyhow::Result;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

/// Exit status of a copy whose verification found different checksums.
pub const EXIT_MISMATCH: u8 = 3;
/// Exit status of a copy refused to protect data (same file, mounted
/// device, directory, a stream with --resume, a changed source).
pub const EXIT_REFUSED: u8 = 4;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Cache {
    /// Leave the page cache as it was (source pages cached before stay,
    /// nothing new stays).
    Neutral,
    /// An ordinary copy: the kernel keeps what it caches.
    Keep,
    /// Drop every page the copy touched.
    Drop,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum ProgressKind {
    /// A bar (bytes, rate, ETA) when stderr is a terminal, nothing otherwise.
    Auto,
    /// What `auto` becomes on a terminal (indicatif draws only there).
    #[value(skip)]
    Bar,
    /// JSON lines on stderr, twice a second.
    Json,
    /// Nothing.
    None,
}

/// Arguments of `ahead copy`.
#[derive(Args, Debug)]
pub struct CopyArgs {
    /// Source: a file, a block device, a pipe (copied as a stream), or an
    /// object (s3://bucket/key, http(s)://…: a parallel ranged download).
    src: PathBuf,
    /// Destination: a file (replaced atomically), a directory to copy into,
    /// a block device (written in place; refused while mounted), or an
    /// object (s3://bucket/key: a multipart upload of a regular file).
    dst: PathBuf,
    /// Copy a directory tree (files, directories, symbolic links).
    #[arg(short = 'r', long)]
    recursive: bool,
    /// What the copy does to the kernel's page cache.
    #[arg(long, value_enum, default_value = "neutral")]
    cache: Cache,
    /// Do not fsync the destination at the end.
    #[arg(long)]
    no_sync: bool,
    /// Continue an interrupted copy from its journal.
    #[arg(long)]
    resume: bool,
    /// Read both sides back and compare BLAKE3 checksums.
    #[arg(long)]
    verify: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// Progress display.
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressKind,
    /// Bytes per chunk, 64 KiB to 256 MiB (default: the device's largest
    /// request, 1–8 MiB).
    #[arg(long, value_parser = parse_chunk)]
    chunk: Option<u64>,
    /// Chunks in flight (1 to 256; default 4, and 16 to or from an object,
    /// whose requests wait on the network: see docs/remote.md).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    depth: Option<u16>,
    /// Keep the source's mode and times, as cp -p (setuid, setgid and
    /// sticky only when the caller owns the source). Without it the copy
    /// gets the source's permission bits less the umask.
    #[arg(long)]
    preserve: bool,
    /// Write runs of zeroes instead of leaving holes.
    #[arg(long)]
    no_sparse: bool,
    /// Do not try a reflink (FICLONE) first.
    #[arg(long)]
    no_reflink: bool,
    /// Do not use RWF_DONTCACHE (use the residency/window fallbacks).
    #[arg(long)]
    no_dontcache: bool,
    /// Do not use O_DIRECT for uncached reads and aligned writes.
    #[arg(long)]
    no_direct: bool,
    /// At most this many bytes per second (e.g. 50m; not 0).
    #[arg(long, value_parser = parse_rate)]
    bwlimit: Option<u64>,
}

impl CopyArgs {
    fn options(&self) -> CopyOptions {
        let mut o = CopyOptions::default();
        o.cache = match self.cache {
            Cache::Neutral => CacheMode::Neutral,
            Cache::Keep => CacheMode::Keep,
            Cache::Drop => CacheMode::Drop,
        };
        o.sync = !self.no_sync;
        o.verify = self.verify;
        o.resume = self.resume;
        o.chunk = self.chunk;
        let remote = as_url(&self.src).is_some() || as_url(&self.dst).is_some();
        o.depth = self.depth.map_or(if remote { 16 } else { 4 }, usize::from);
        o.sparse = !self.no_sparse;
        o.reflink = !self.no_reflink;
        o.dontcache = !self.no_dontcache;
        o.direct = !self.no_direct;
        o.bwlimit = self.bwlimit;
        o.preserve = self.preserve;
        o
    }
}

fn parse_chunk(s: &str) -> Result<u64, String> {
    let n = parse_size(s).map_err(|e| e.to_string())?;
    let max = ahead::copy::MAX_CHUNK_BYTES;
    if !(64 << 10..=max).contains(&n) {
        return Err(format!("must be from 64k to {}", format_size(max)));
    }
    Ok(n)
}

fn parse_rate(s: &str) -> Result<u64, String> {
    match parse_size(s).map_err(|e| e.to_string())? {
        0 => Err("0 bytes per second would never finish".into()),
        n => Ok(n),
    }
}

fn mb_s(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 / s / 1e6
    } else {
        0.0
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// The fields a file copy and a tree copy report alike.
fn totals(dst: &std::path::Path, t: &Totals) -> serde_json::Value {
    json!({
        "dst": dst,
        "bytes": t.bytes,
        "data_bytes": t.data_bytes,
        "holes_bytes": t.holes_bytes,
        "resumed_bytes": t.resumed_bytes,
        "elapsed_s": t.elapsed.as_secs_f64(),
        "mb_s": mb_s(t.bytes, t.elapsed),
        "src_cached_pages_before": t.src_cached_before,
        "src_cached_pages_after": t.src_cached_after,
        "dst_cached_pages_after": t.dst_cached_after,
    })
}

/// The JSON summary of a copy (documented in the README).
pub fn summary(r: &CopyReport) -> serde_json::Value {
    let base = totals(&r.dst, &r.totals);
    crate::with(
        base,
        json!({
            "checksum": r.checksum,
            "method": r.method,
            "read_path": r.read_path,
            "write_path": r.write_path,
            "resumable": r.resumable,
            "resume_rejected_chunks": r.resume_rejected_chunks,
        }),
    )
}

/// Runs `ahead copy`.
pub fn run(args: CopyArgs) -> Result<ExitCode> {
    let mut opts = args.options();
    // SIGINT, SIGTERM and SIGHUP stop the copy between chunks, so that the
    // temporary file is removed (or, when the copy can be resumed, kept with
    // its journal) instead of being left behind half-written.
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, cancel.clone())
            .map_err(|e| anyhow::anyhow!("cannot install a signal handler: {e}"))?;
    }
    opts.cancel = Some(cancel);
    let kind = match args.progress {
        ProgressKind::Auto if std::io::stderr().is_terminal() => ProgressKind::Bar,
        ProgressKind::Auto => ProgressKind::None,
        k => k,
    };
    let bar = (kind == ProgressKind::Bar).then(|| {
        let b = ProgressBar::no_length();
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            )
            .expect("valid template"),
        );
        b
    });
    let started = Instant::now();
    let last_line = Mutex::new(Instant::now() - Duration::from_secs(1));
    let on_progress = |p: Progress| match kind {
        ProgressKind::Bar => {
            if let Some(b) = &bar {
                if let Some(t) = p.total {
                    b.set_length(t);
                }
                b.set_position(p.done);
            }
        }
        ProgressKind::Json => {
            let mut last = last_line.lock().expect("progress lock");
            let done = p.total.is_some_and(|t| p.done >= t);
            if last.elapsed() >= Duration::from_millis(500) || done {
                *last = Instant::now();
                let e = started.elapsed();
                eprintln!(
                    "{}",
                    json!({
                        "progress": true,
                        "done": p.done,
                        "total": p.total,
                        "elapsed_s": e.as_secs_f64(),
                        "mb_s": mb_s(p.done, e),
                    })
                );
            }
        }
        _ => {}
    };
    let (src_url, dst_url) = (as_url(&args.src), as_url(&args.dst));
    if src_url.is_some() || dst_url.is_some() {
        let result = match (src_url, dst_url) {
            (Some(_), Some(_)) => {
                anyhow::bail!(
                    "copying from one object to another is not supported: download, then upload"
                )
            }
            _ if args.recursive => {
                anyhow::bail!("-r copies local trees; objects are copied one at a time")
            }
            (Some(u), None) => ahead::copy::download(u, &args.dst, &opts, &on_progress),
            (None, Some(u)) => ahead::copy::upload(&args.src, u, &opts, &on_progress),
            (None, None) => unreachable!("one of them is a URL"),
        };
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        return match result {
            Ok(r) => report(&r, args.json),
            Err(e) => Ok(fail(e)),
        };
    }
    let tree = args.recursive && args.src.is_dir();
    if tree {
        let result = ahead::copy::copy_tree(&args.src, &args.dst, &opts, &on_progress);
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        return match result {
            Ok(r) => {
                print_tree(&r, args.json)?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => Ok(fail(e)),
        };
    }
    let result = ahead::copy::copy(&args.src, &args.dst, &opts, &on_progress);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    match result {
        Ok(r) => report(&r, args.json),
        Err(e) => Ok(fail(e)),
    }
}

/// `p` as a URL, where it is one.
fn as_url(p: &std::path::Path) -> Option<&str> {
    p.to_str().filter(|s| ahead::remote::is_url(s))
}

/// Prints a finished copy's report (as JSON with `as_json`).
fn report(report: &CopyReport, as_json: bool) -> Result<ExitCode> {
    let mut out = String::new();
    if as_json {
        out = serde_json::to_string_pretty(&summary(report))? + "\n";
    } else {
        use std::fmt::Write as _;
        writeln!(
            out,
            "copied {} to {} in {:.2} s ({:.1} MB/s): {} data, {} holes{}",
            format_size(report.totals.bytes),
            report.dst.display(),
            report.totals.elapsed.as_secs_f64(),
            mb_s(report.totals.bytes, report.totals.elapsed),
            format_size(report.totals.data_bytes),
            format_size(report.totals.holes_bytes),
            if report.totals.resumed_bytes > 0 {
                format!(
                    ", {} already done (resumed)",
                    format_size(report.totals.resumed_bytes)
                )
            } else {
                String::new()
            }
        )?;
        writeln!(
            out,
            "page cache: source {} -> {} pages, destination {} pages ({}, reads {}, writes {})",
            opt(report.totals.src_cached_before),
            opt(report.totals.src_cached_after),
            opt(report.totals.dst_cached_after),
            report.method,
            report.read_path,
            report.write_path
        )?;
        if let Some(sum) = &report.checksum {
            writeln!(out, "verified: {sum}")?;
        }
        if report.resume_rejected_chunks > 0 {
            writeln!(
                out,
                "resume: {} chunk(s) no longer held what the journal recorded; copied again",
                report.resume_rejected_chunks
            )?;
        }
    }
    // The copy is done whatever happens to stdout (a closed pipe included).
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(ExitCode::SUCCESS)
}

/// Prints a library error as one line and picks the exit status.
fn fail(e: ahead::Error) -> ExitCode {
    eprintln!("ahead: {e}");
    ExitCode::from(exit_status(&e))
}

/// The exit status of a copy that failed with `e`.
fn exit_status(e: &ahead::Error) -> u8 {
    match e {
        ahead::Error::Mismatch { .. } => EXIT_MISMATCH,
        ahead::Error::Refused { .. } => EXIT_REFUSED,
        // 128 + SIGINT, as a shell reports a program it interrupted.
        ahead::Error::Io { source, .. } if source.kind() == std::io::ErrorKind::Interrupted => 130,
        _ => 1,
    }
}

fn print_tree(r: &ahead::copy::TreeReport, as_json: bool) -> Result<()> {
    let out = if as_json {
        let base = totals(&r.dst, &r.totals);
        serde_json::to_string_pretty(&crate::with(
            base,
            json!({
                "files": r.files,
                "dirs": r.dirs,
                "symlinks": r.symlinks,
                "skipped": r.skipped,
                "unknown_residency_files": r.unknown_residency,
                "verified_files": r.verified,
            }),
        ))? + "\n"
    } else {
        let mut s = format!(
            "copied {} file(s), {} director(ies), {} link(s): {} in {:.2} s ({:.1} MB/s) to {}\n\
             page cache: source {} -> {} pages, destination {} pages{}\n",
            r.files,
            r.dirs,
            r.symlinks,
            format_size(r.totals.bytes),
            r.totals.elapsed.as_secs_f64(),
            mb_s(r.totals.bytes, r.totals.elapsed),
            r.dst.display(),
            opt(r.totals.src_cached_before),
            opt(r.totals.src_cached_after),
            opt(r.totals.dst_cached_after),
            if r.unknown_residency > 0 {
                format!(" ({} file(s) not visible)", r.unknown_residency)
            } else {
                String::new()
            }
        );
        if r.verified > 0 {
            s += &format!("verified: {} file(s), BLAKE3 equal\n", r.verified);
        }
        for p in &r.skipped {
            s += &format!("skipped (not a file, directory or link): {}\n", p.display());
        }
        s
    };
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_verification_and_a_refusal_have_their_own_exit_status() {
        let mismatch = ahead::Error::Mismatch {
            path: "d".into(),
            src: "blake3:a".into(),
            dst: "blake3:b".into(),
        };
        assert_eq!(exit_status(&mismatch), 3);
        let refused = ahead::Error::Refused {
            path: "d".into(),
            why: "same file".into(),
        };
        assert_eq!(exit_status(&refused), 4);
        let io = ahead::Error::io(
            "read",
            std::path::Path::new("s"),
            None,
            std::io::Error::from_raw_os_error(libc::EIO),
        );
        assert_eq!(exit_status(&io), 1);
    }
}
