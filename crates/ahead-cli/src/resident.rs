//! `ahead stat`, `ahead evict`, `ahead warm`: the kernel page cache's view
//! of files (what vmtouch and fincore show), and changing it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ahead::residency::{self, Residency, Seen};
use ahead::units::{format_size, parse_size};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

/// Paths and how to walk them, shared by the three commands.
#[derive(Args, Debug)]
pub struct Paths {
    /// Files (or, with -R, directories).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Walk directories recursively (symbolic links are not followed).
    #[arg(short = 'R', long)]
    recursive: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `ahead stat`.
#[derive(Args, Debug)]
pub struct StatArgs {
    #[command(flatten)]
    paths: Paths,
    /// Also print a map of which pages are cached (one file only).
    #[arg(long)]
    map: bool,
}

/// Arguments of `ahead evict`.
#[derive(Args, Debug)]
pub struct EvictArgs {
    #[command(flatten)]
    paths: Paths,
}

/// Arguments of `ahead warm`.
#[derive(Args, Debug)]
pub struct WarmArgs {
    #[command(flatten)]
    paths: Paths,
    /// Only this byte range: `A-B` (B exclusive), `A-` (to the end); sizes
    /// take units (`64m-1g`).
    #[arg(long, value_parser = parse_range)]
    range: Option<(u64, u64)>,
}

fn parse_range(s: &str) -> std::result::Result<(u64, u64), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("invalid range '{s}': expected A-B or A-"))?;
    let start = if a.is_empty() {
        0
    } else {
        parse_size(a).map_err(|e| e.to_string())?
    };
    let end = if b.is_empty() {
        u64::MAX
    } else {
        parse_size(b).map_err(|e| e.to_string())?
    };
    if end <= start {
        return Err(format!(
            "invalid range '{s}': the end must be past the start"
        ));
    }
    Ok((start, end))
}

/// Every regular file named by `paths` (walking directories with -R), and
/// one error line per path that is not one. Block devices are allowed too.
fn expand(paths: &Paths) -> (Vec<PathBuf>, Vec<String>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for p in &paths.paths {
        walk(p, paths.recursive, true, &mut files, &mut errors);
    }
    (files, errors)
}

fn walk(
    path: &Path,
    recursive: bool,
    top: bool,
    files: &mut Vec<PathBuf>,
    errors: &mut Vec<String>,
) {
    let meta = if top {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    };
    let meta = match meta {
        Ok(m) => m,
        Err(e) => {
            errors.push(format!("{}: {e}", path.display()));
            return;
        }
    };
    use std::os::unix::fs::FileTypeExt;
    let ft = meta.file_type();
    if ft.is_dir() {
        if !recursive {
            errors.push(format!("{}: is a directory (use -R)", path.display()));
            return;
        }
        let entries = match fs::read_dir(path) {
            Ok(rd) => rd,
            Err(e) => {
                errors.push(format!("{}: {e}", path.display()));
                return;
            }
        };
        let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        for n in names {
            walk(&n, recursive, false, files, errors);
        }
    } else if ft.is_file() || ft.is_block_device() {
        files.push(path.to_path_buf());
    } else if top {
        errors.push(format!(
            "{}: not a regular file (page-cache residency is kept for files and block devices)",
            path.display()
        ));
    }
}

/// Reports the paths that are not files, then runs `work` on each file,
/// opened, and `show` on what it returned; a file whose `work` fails is
/// reported on stderr and the others go on. Whether every path went well.
fn each_file<T>(
    files: &[PathBuf],
    errors: &[String],
    mut work: impl FnMut(&fs::File) -> io::Result<T>,
    mut show: impl FnMut(&Path, T),
) -> bool {
    for e in errors {
        eprintln!("ahead: {e}");
    }
    let mut ok = errors.is_empty();
    for path in files {
        match open(path).and_then(|f| work(&f)) {
            Ok(v) => show(path, v),
            Err(e) => {
                eprintln!("ahead: {}: {e}", path.display());
                ok = false;
            }
        }
    }
    ok
}

fn open(path: &Path) -> io::Result<fs::File> {
    let f = fs::File::open(path)?;
    Ok(f)
}

fn size_of(f: &fs::File) -> io::Result<u64> {
    use std::io::Seek;
    let meta = f.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    let mut f = f;
    f.seek(io::SeekFrom::End(0))
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn seen_json(seen: &Seen) -> Value {
    match seen {
        Seen::Known(r) => json!({
            "pages": r.pages,
            "cached": r.cached,
            "cached_bytes": r.cached * residency::page_size(),
            "dirty": r.dirty,
            "writeback": r.writeback,
            "evicted": r.evicted,
            "recently_evicted": r.recently_evicted,
            "source": r.source.name(),
        }),
        Seen::Unknown { pages, why } => json!({
            "pages": pages,
            "cached": Value::Null,
            "unknown": why,
        }),
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// Sums of the known files.
#[derive(Default)]
struct Total {
    files: u64,
    unknown: u64,
    size: u64,
    pages: u64,
    cached: u64,
    dirty: u64,
    writeback: u64,
    evicted: u64,
    recently_evicted: u64,
}

impl Total {
    fn add(&mut self, size: u64, seen: &Seen) {
        self.files += 1;
        self.size += size;
        self.pages += seen.pages();
        match seen {
            Seen::Known(r) => {
                self.cached += r.cached;
                self.dirty += r.dirty.unwrap_or(0);
                self.writeback += r.writeback.unwrap_or(0);
                self.evicted += r.evicted.unwrap_or(0);
                self.recently_evicted += r.recently_evicted.unwrap_or(0);
            }
            Seen::Unknown { .. } => self.unknown += 1,
        }
    }

    fn json(&self) -> Value {
        json!({
            "files": self.files,
            "unknown_files": self.unknown,
            "size": self.size,
            "pages": self.pages,
            "cached": self.cached,
            "cached_bytes": self.cached * residency::page_size(),
            "dirty": self.dirty,
            "writeback": self.writeback,
            "evicted": self.evicted,
            "recently_evicted": self.recently_evicted,
        })
    }
}

const STAT_HEADER: &str =
    "  CACHED        %      PAGES    DIRTY   WBACK  EVICTED  RECENT       SIZE  FILE";

fn stat_line(path: &Path, size: u64, seen: &Seen) -> String {
    match seen {
        Seen::Known(r) => format!(
            "{:>8} {:>7.1}% {:>9} {:>8} {:>7} {:>8} {:>7} {:>10}  {}",
            r.cached,
            pct(r.cached, r.pages),
            r.pages,
            opt(r.dirty),
            opt(r.writeback),
            opt(r.evicted),
            opt(r.recently_evicted),
            format_size(size),
            path.display()
        ),
        Seen::Unknown { pages, .. } => format!(
            "{:>8} {:>8} {:>9} {:>8} {:>7} {:>8} {:>7} {:>10}  {}",
            "unknown",
            "",
            pages,
            "-",
            "-",
            "-",
            "-",
            format_size(size),
            path.display()
        ),
    }
}

/// A page map of one file: each mark stands for `per` pages; `O` all of
/// them cached, `o` some, `.` none.
fn map_text(map: &[bool]) -> String {
    const WIDTH: usize = 64;
    const MAX_LINES: usize = 32;
    let per = map.len().div_ceil(WIDTH * MAX_LINES).max(1);
    let mut out = format!(
        "each mark = {per} page(s) of {}: O all cached, o some, . none\n",
        format_size(residency::page_size())
    );
    for (i, bucket) in map.chunks(per).enumerate() {
        if i > 0 && i % WIDTH == 0 {
            out.push('\n');
        }
        let n = bucket.iter().filter(|&&c| c).count();
        out.push(if n == bucket.len() {
            'O'
        } else if n > 0 {
            'o'
        } else {
            '.'
        });
    }
    out.push('\n');
    out
}

/// Runs `ahead stat`. Paths that cannot be read are reported and make the
/// exit status non-zero; unknown residency does not (it is an answer).
pub fn stat(args: StatArgs) -> Result<bool> {
    let (files, errors) = expand(&args.paths);
    if args.map && files.len() != 1 {
        bail!("--map takes exactly one file ({} given)", files.len());
    }
    let mut total = Total::default();
    let mut rows = Vec::new();
    if !args.paths.json && !files.is_empty() {
        println!("{STAT_HEADER}");
    }
    let ok = each_file(
        &files,
        &errors,
        |f| {
            let size = size_of(f)?;
            let seen = residency::of_range(f, 0, u64::MAX)?;
            let map = if args.map {
                residency::page_map(f, 0, u64::MAX)?
            } else {
                None
            };
            Ok((size, seen, map))
        },
        |path, (size, seen, map)| {
            total.add(size, &seen);
            if args.paths.json {
                let mut row = crate::with(json!({"path": path, "size": size}), seen_json(&seen));
                if let Some(map) = &map {
                    let runs: Vec<[u64; 2]> = residency::runs(map, true)
                        .into_iter()
                        .map(|(s, n)| [s, n])
                        .collect();
                    row["cached_runs"] = json!(runs);
                }
                rows.push(row);
            } else {
                println!("{}", stat_line(path, size, &seen));
                if let Seen::Unknown { why, .. } = &seen {
                    eprintln!("ahead: {}: residency unknown: {why}", path.display());
                }
                if let Some(map) = &map {
                    print!("{}", map_text(map));
                } else if args.map {
                    println!("(no page map: the kernel would not show this file's pages)");
                }
            }
        },
    );
    if args.paths.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"files": rows, "total": total.json()}))?
        );
    } else if files.len() > 1 {
        let unknown = if total.unknown > 0 {
            format!(" ({} file(s) unknown, not counted)", total.unknown)
        } else {
            String::new()
        };
        println!(
            "{:>8} {:>7.1}% {:>9} {:>8} {:>7} {:>8} {:>7} {:>10}  total, {} files{unknown}",
            total.cached,
            pct(total.cached, total.pages),
            total.pages,
            total.dirty,
            total.writeback,
            total.evicted,
            total.recently_evicted,
            format_size(total.size),
            total.files
        );
    }
    Ok(ok)
}

fn cached_of(seen: &Seen) -> Option<u64> {
    seen.known().map(|r: &Residency| r.cached)
}

fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// Runs `ahead evict`: DONTNEED on every file, cached pages before and after.
pub fn evict(args: EvictArgs) -> Result<bool> {
    let (files, errors) = expand(&args.paths);
    let mut rows = Vec::new();
    let ok = each_file(
        &files,
        &errors,
        |f| {
            let before = residency::of_range(f, 0, u64::MAX)?;
            residency::evict(f, 0, 0)?;
            let after = residency::of_range(f, 0, u64::MAX)?;
            Ok((before, after))
        },
        |path, (before, after)| {
            let (b, a) = (cached_of(&before), cached_of(&after));
            if args.paths.json {
                rows.push(json!({
                    "path": path,
                    "pages": before.pages(),
                    "cached_before": b,
                    "cached_after": a,
                }));
            } else {
                let left = match after.known() {
                    Some(r) if r.cached > 0 => format!(
                        " ({} still cached: dirty, mapped or locked pages stay)",
                        r.cached
                    ),
                    _ => String::new(),
                };
                println!(
                    "{}: {} -> {} cached pages of {}{left}",
                    path.display(),
                    show(b),
                    show(a),
                    before.pages()
                );
            }
        },
    );
    if args.paths.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "files": rows }))?
        );
    }
    Ok(ok)
}

/// Runs `ahead warm`: reads the uncached parts of every file (or of
/// `--range`) into the page cache.
pub fn warm(args: WarmArgs) -> Result<bool> {
    let (files, errors) = expand(&args.paths);
    let (start, end) = args.range.unwrap_or((0, u64::MAX));
    let mut rows = Vec::new();
    let ok = each_file(
        &files,
        &errors,
        |f| {
            let size = size_of(f)?;
            if args.range.is_some() && start >= size {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("range starts at {start}, past the end of the file ({size} bytes)"),
                ));
            }
            let before = residency::of_range(f, start, end - start)?;
            let report = residency::warm(f, start, end - start)?;
            let after = residency::of_range(f, start, end - start)?;
            Ok((before, report, after))
        },
        |path, (before, report, after)| {
            let secs = report.elapsed.as_secs_f64();
            let mb_s = if secs > 0.0 {
                report.bytes_read as f64 / secs / 1e6
            } else {
                0.0
            };
            if args.paths.json {
                rows.push(json!({
                    "path": path,
                    "pages": before.pages(),
                    "cached_before": cached_of(&before),
                    "cached_after": cached_of(&after),
                    "bytes_read": report.bytes_read,
                    "reads": report.reads,
                    "map_seen": report.map_seen,
                    "elapsed_s": secs,
                    "mb_s": mb_s,
                }));
            } else {
                println!(
                "{}: read {} in {} request(s), {:.3} s ({:.1} MB/s); cached pages {} -> {} of {}{}",
                path.display(),
                format_size(report.bytes_read),
                report.reads,
                secs,
                mb_s,
                show(cached_of(&before)),
                show(cached_of(&after)),
                before.pages(),
                if report.map_seen {
                    ""
                } else {
                    " (page map not visible: read the whole range)"
                }
            );
            }
        },
    );
    if args.paths.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "files": rows }))?
        );
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("0-4k"), Ok((0, 4096)));
        assert_eq!(parse_range("1m-"), Ok((1 << 20, u64::MAX)));
        assert_eq!(parse_range("-8k"), Ok((0, 8192)));
        assert!(parse_range("8k-4k").is_err());
        assert!(parse_range("4k").is_err());
        assert!(parse_range("x-4k").is_err());
    }

    #[test]
    fn a_map_marks_full_partial_and_empty_buckets() {
        let map = [true, true, true, false, false, false];
        // 6 pages fit one line at one page per mark.
        assert!(map_text(&map).ends_with("OOO...\n"));
        let big: Vec<bool> = (0..64 * 32 * 2).map(|i| i % 2 == 0).collect();
        let text = map_text(&big);
        assert!(text.starts_with("each mark = 2 page(s)"));
        assert!(text.lines().skip(1).all(|l| l.chars().all(|c| c == 'o')));
        assert_eq!(text.lines().count(), 1 + 32);
    }
}
