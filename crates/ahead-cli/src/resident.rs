//! `ahead stat`, `ahead evict`, `ahead warm`: the kernel page cache's view
//! of files (what vmtouch and fincore show), and changing it.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use ahead::residency::{self, MapPart, Residency, Seen};
use ahead::units::{format_size, parse_size};
use ahead::walk::Entry;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

/// Paths and how to walk them, shared by the three commands.
#[derive(Args, Debug)]
pub struct Paths {
    /// Files (or, with -R, directories).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Walk directories recursively (symbolic links are not followed;
    /// FIFOs, sockets and device nodes found in them are not opened).
    #[arg(short = 'R', long)]
    recursive: bool,
    /// With -R, also take the block devices found in directories (a block
    /// device named on the command line is always taken).
    #[arg(long)]
    devices: bool,
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

/// Runs `work` on every file `paths` names (walking directories with -R),
/// opened once, and `show` on what it returned; a path that is not a file,
/// or whose `work` fails, is reported on stderr and the others go on.
/// Whether every path went well.
///
/// Directories are walked through descriptors (openat(2) with O_NOFOLLOW):
/// an entry swapped for a link while the walk runs is not followed, and
/// what is opened is checked with fstat(2) on its descriptor. Files are
/// opened non-blocking, so a FIFO swapped in for a file cannot hang the
/// walk; FIFOs, sockets and character devices in a tree are never opened,
/// block devices only with `--devices`.
fn each_file<T>(
    paths: &Paths,
    mut work: impl FnMut(&fs::File) -> io::Result<T>,
    mut show: impl FnMut(&Path, T),
) -> bool {
    let ok = std::cell::Cell::new(true);
    let fail = |what: String| {
        eprintln!("ahead: {what}");
        ok.set(false);
    };
    let mut visit = |path: &Path, f: fs::File| match work(&f) {
        Ok(v) => show(path, v),
        Err(e) => fail(format!("{}: {e}", path.display())),
    };
    for path in &paths.paths {
        // Looked at before it is opened: a FIFO or a terminal named here
        // is reported, not opened.
        let ft = match fs::metadata(path) {
            Ok(m) => m.file_type(),
            Err(e) => {
                fail(format!("{}: {e}", path.display()));
                continue;
            }
        };
        if !(ft.is_dir() || ft.is_file() || ft.is_block_device()) {
            fail(format!(
                "{}: not a regular file (page-cache residency is kept for files and block devices)",
                path.display()
            ));
            continue;
        }
        if ft.is_dir() && !paths.recursive {
            fail(format!("{}: is a directory (use -R)", path.display()));
            continue;
        }
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                fail(format!("{}: {}", path.display(), io::Error::from(e)));
                continue;
            }
        };
        match opened_kind(&fd) {
            Some(FileType::Directory) => walk(&fd, path, paths.devices, &mut visit, &fail),
            Some(FileType::RegularFile | FileType::BlockDevice) => visit(path, fs::File::from(fd)),
            _ => fail(format!(
                "{}: changed while it was being opened",
                path.display()
            )),
        }
    }
    ok.get()
}

fn opened_kind(fd: &OwnedFd) -> Option<FileType> {
    rustix::fs::fstat(fd)
        .ok()
        .map(|st| FileType::from_raw_mode(st.st_mode))
}

/// Visits the files of the open directory `dir` (sorted by name) and walks
/// its subdirectories, never through a link ([`ahead::walk`]).
fn walk(
    dir: &OwnedFd,
    path: &Path,
    devices: bool,
    visit: &mut dyn FnMut(&Path, fs::File),
    fail: &dyn Fn(String),
) {
    let names = match ahead::walk::names(dir) {
        Ok(n) => n,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    // Links are not followed; FIFOs, sockets, character devices (and block
    // devices without --devices) are not opened.
    let open = |ft| match ft {
        FileType::Directory => Some(ahead::walk::dir_flags()),
        FileType::RegularFile => Some(OFlags::RDONLY | OFlags::NONBLOCK),
        FileType::BlockDevice if devices => Some(OFlags::RDONLY | OFlags::NONBLOCK),
        _ => None,
    };
    for name in names {
        let p = path.join(&name);
        match ahead::walk::open_entry(dir, &name, open) {
            Ok(Entry::Open(fd, FileType::Directory)) => walk(&fd, &p, devices, visit, fail),
            Ok(Entry::Open(fd, _)) => visit(&p, fs::File::from(fd)),
            // Links, what is not opened, and what changed or went meanwhile.
            Ok(Entry::Link | Entry::Skipped(_) | Entry::Gone) => {}
            Err(e) => fail(format!("{}: {e}", p.display())),
        }
    }
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

/// Marks per line of a printed page map, and lines at most.
const MAP_WIDTH: u64 = 64;
const MAP_LINES: u64 = 32;
/// Cached runs listed in JSON at most (a map of alternating pages of a
/// 15 TiB file has two billion): the rest are counted, not listed.
const MAX_RUNS: usize = 1 << 20;

/// A file's page map, summarised while it is read a window at a time: the
/// printed buckets and the list of cached runs, in memory that does not
/// grow with the file.
struct MapSummary {
    /// Pages per mark.
    per: u64,
    /// Per mark: (cached pages, pages).
    buckets: Vec<(u64, u64)>,
    /// Cached runs `[first page, pages]`, at most [`MAX_RUNS`].
    runs: Vec<[u64; 2]>,
    /// Whether runs were left out.
    runs_cut: bool,
    /// A cached run that the next window may extend.
    open: Option<[u64; 2]>,
}

impl MapSummary {
    fn new(pages: u64) -> MapSummary {
        let per = pages.div_ceil(MAP_WIDTH * MAP_LINES).max(1);
        MapSummary {
            per,
            buckets: vec![(0, 0); pages.div_ceil(per) as usize],
            runs: Vec::new(),
            runs_cut: false,
            open: None,
        }
    }

    /// The summary of `f`'s `pages` pages; `None` where the kernel would
    /// not show them.
    fn of_file(f: &fs::File, pages: u64) -> io::Result<Option<MapSummary>> {
        let mut m = MapSummary::new(pages);
        let seen = residency::each_map_part(f, 0, u64::MAX, |first, part| {
            match part {
                MapPart::Same(cached, pages) => m.add_same(first, pages, cached),
                MapPart::Each(w) => m.add(first, w),
            }
            Ok(())
        })?;
        Ok(seen.then(|| m.finish()))
    }

    /// Takes in the map of pages `first..first + window.len()`.
    fn add(&mut self, first: u64, window: &[bool]) {
        for (i, &cached) in window.iter().enumerate() {
            let page = first + i as u64;
            if let Some(b) = self.buckets.get_mut((page / self.per) as usize) {
                b.1 += 1;
                b.0 += u64::from(cached);
            }
            match (&mut self.open, cached) {
                (Some(run), true) => run[1] += 1,
                (None, true) => self.open = Some([page, 1]),
                (Some(_), false) => self.close(),
                (None, false) => {}
            }
        }
    }

    /// Takes in `pages` pages from `first`, all cached or none: one step
    /// per mark they cover, whatever their number.
    fn add_same(&mut self, first: u64, pages: u64, cached: bool) {
        let end = first + pages;
        let mut at = first;
        while at < end {
            let bucket = at / self.per;
            let upto = ((bucket + 1) * self.per).min(end);
            if let Some(b) = self.buckets.get_mut(bucket as usize) {
                b.1 += upto - at;
                if cached {
                    b.0 += upto - at;
                }
            }
            at = upto;
        }
        match (&mut self.open, cached) {
            (Some(run), true) => run[1] += pages,
            (None, true) => self.open = Some([first, pages]),
            (Some(_), false) => self.close(),
            (None, false) => {}
        }
    }

    fn close(&mut self) {
        if let Some(run) = self.open.take() {
            if self.runs.len() < MAX_RUNS {
                self.runs.push(run);
            } else {
                self.runs_cut = true;
            }
        }
    }

    fn finish(mut self) -> MapSummary {
        self.close();
        self
    }
}

/// A printed page map: each mark stands for `per` pages; `O` all of them
/// cached, `o` some, `.` none.
fn map_text(map: &MapSummary) -> String {
    let mut out = format!(
        "each mark = {} page(s) of {}: O all cached, o some, . none\n",
        map.per,
        format_size(residency::page_size())
    );
    for (i, &(cached, pages)) in map.buckets.iter().enumerate() {
        if i > 0 && (i as u64).is_multiple_of(MAP_WIDTH) {
            out.push('\n');
        }
        out.push(if cached == pages {
            'O'
        } else if cached > 0 {
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
    if args.map && (args.paths.paths.len() != 1 || args.paths.recursive) {
        bail!("--map takes exactly one file");
    }
    let mut total = Total::default();
    let mut rows = Vec::new();
    let mut header = !args.paths.json;
    let ok = each_file(
        &args.paths,
        |f| {
            let size = size_of(f)?;
            let seen = residency::of_range(f, 0, u64::MAX)?;
            let map = if args.map {
                MapSummary::of_file(f, seen.pages())?
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
                    row["cached_runs"] = json!(map.runs);
                    if map.runs_cut {
                        row["cached_runs_truncated"] = json!(true);
                    }
                }
                rows.push(row);
            } else {
                if std::mem::take(&mut header) {
                    outln!("{STAT_HEADER}");
                }
                outln!("{}", stat_line(path, size, &seen));
                if let Seen::Unknown { why, .. } = &seen {
                    eprintln!("ahead: {}: residency unknown: {why}", path.display());
                }
                if let Some(map) = &map {
                    out!("{}", map_text(map));
                } else if args.map {
                    outln!("(no page map: the kernel would not show this file's pages)");
                }
            }
        },
    );
    if args.paths.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"files": rows, "total": total.json()}))?
        );
    } else if total.files > 1 {
        let unknown = if total.unknown > 0 {
            format!(" ({} file(s) unknown, not counted)", total.unknown)
        } else {
            String::new()
        };
        outln!(
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
    let mut rows = Vec::new();
    let ok = each_file(
        &args.paths,
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
                outln!(
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
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({ "files": rows }))?
        );
    }
    Ok(ok)
}

/// Runs `ahead warm`: reads the uncached parts of every file (or of
/// `--range`) into the page cache.
pub fn warm(args: WarmArgs) -> Result<bool> {
    let (start, end) = args.range.unwrap_or((0, u64::MAX));
    let mut rows = Vec::new();
    let ok = each_file(
        &args.paths,
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
                outln!(
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
        outln!(
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
    fn a_map_read_in_windows_gives_the_runs_of_the_whole() {
        let map: Vec<bool> = (0..1000).map(|i| (i / 7) % 3 != 0).collect();
        let mut m = MapSummary::new(1000);
        for (k, w) in map.chunks(64).enumerate() {
            m.add(k as u64 * 64, w);
        }
        let m = m.finish();
        let want: Vec<[u64; 2]> = residency::runs(&map, true)
            .into_iter()
            .map(|(s, n)| [s, n])
            .collect();
        assert_eq!(m.runs, want);
        assert_eq!(m.buckets.iter().map(|b| b.1).sum::<u64>(), 1000);
        assert_eq!(
            m.buckets.iter().map(|b| b.0).sum::<u64>(),
            map.iter().filter(|&&c| c).count() as u64
        );
    }

    #[test]
    fn a_map_marks_full_partial_and_empty_buckets() {
        let summary = |map: &[bool]| {
            let mut m = MapSummary::new(map.len() as u64);
            m.add(0, map);
            m.finish()
        };
        let map = [true, true, true, false, false, false];
        // 6 pages fit one line at one page per mark.
        assert!(map_text(&summary(&map)).ends_with("OOO...\n"));
        let big: Vec<bool> = (0..64 * 32 * 2).map(|i| i % 2 == 0).collect();
        let text = map_text(&summary(&big));
        assert!(text.starts_with("each mark = 2 page(s)"));
        assert!(text.lines().skip(1).all(|l| l.chars().all(|c| c == 'o')));
        assert_eq!(text.lines().count(), 1 + 32);
    }
}
