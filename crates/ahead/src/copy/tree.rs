//! Recursive copies (`ahead copy -r`): a directory tree, file by file,
//! through [`copy`](super::copy) with the same options.
//!
//! Each file is as safe as a single copy (temporary name, rename, journal
//! for `--resume`); the tree as a whole is not atomic: an interrupted copy
//! leaves the files finished so far under their names. With `resume`, the
//! file that was cut short continues from its journal; files already
//! finished are copied again (there is no journal of the tree). Symbolic
//! links are recreated, not followed; FIFOs, sockets and device nodes
//! inside the tree are skipped and listed.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{copy, refused, CopyOptions, Progress};
use crate::{Error, Result};

/// What a recursive copy did: sums over its files.
#[derive(Clone, Debug, Default)]
pub struct TreeReport {
    /// The directory created (or copied into).
    pub dst: PathBuf,
    /// Regular files copied.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symbolic links recreated.
    pub symlinks: u64,
    /// Entries skipped (FIFOs, sockets, device nodes), by path.
    pub skipped: Vec<PathBuf>,
    /// Sum of the files' sizes.
    pub bytes: u64,
    /// Bytes read and written.
    pub data_bytes: u64,
    /// Bytes left as holes.
    pub holes_bytes: u64,
    /// Bytes resumed files did not copy again.
    pub resumed_bytes: u64,
    /// Source pages cached before/after, summed over files that showed them.
    pub src_cached_before: u64,
    /// Source pages cached after.
    pub src_cached_after: u64,
    /// Destination pages cached after.
    pub dst_cached_after: u64,
    /// Files whose residency could not be seen.
    pub unknown_residency: u64,
    /// Files verified (with `verify`).
    pub verified: u64,
    /// Wall time.
    pub elapsed: Duration,
}

fn walk_size(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => walk_size(&e.path()),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

/// Copies the directory `src` to `dst`: into `dst/NAME` when `dst` is an
/// existing directory, else to `dst` itself (created).
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<TreeReport> {
    let started = Instant::now();
    let meta = fs::metadata(src).map_err(|e| Error::io("open", src, None, e))?;
    if !meta.is_dir() {
        return Err(refused(src, "is not a directory"));
    }
    let target = match fs::metadata(dst) {
        Ok(m) if m.is_dir() => {
            let name = src
                .canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_owned()))
                .ok_or_else(|| refused(src, "has no name to copy into a directory"))?;
            dst.join(name)
        }
        Ok(_) => return Err(refused(dst, "exists and is not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => dst.to_path_buf(),
        Err(e) => return Err(Error::io("stat", dst, None, e)),
    };
    // Refuse to copy a tree into itself (it would never end).
    let src_abs = src
        .canonicalize()
        .map_err(|e| Error::io("open", src, None, e))?;
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let parent_abs = parent
        .canonicalize()
        .map_err(|e| Error::io("open destination directory", parent, None, e))?;
    if parent_abs.starts_with(&src_abs) {
        return Err(refused(&target, "is inside the source directory"));
    }
    let total = walk_size(src);
    let base = AtomicU64::new(0);
    let mut report = TreeReport {
        dst: target.clone(),
        ..TreeReport::default()
    };
    copy_dir(
        src,
        &target,
        meta.mode(),
        opts,
        progress,
        total,
        &base,
        &mut report,
    )?;
    report.elapsed = started.elapsed();
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn copy_dir(
    src: &Path,
    dst: &Path,
    mode: u32,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
    total: u64,
    base: &AtomicU64,
    report: &mut TreeReport,
) -> Result<()> {
    match fs::DirBuilder::new()
        .mode((mode & 0o7777) | 0o700)
        .create(dst)
    {
        Ok(()) => report.dirs += 1,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dst.is_dir() => {}
        Err(e) => return Err(Error::io("create directory", dst, None, e)),
    }
    let mut entries: Vec<_> = fs::read_dir(src)
        .map_err(|e| Error::io("read directory", src, None, e))?
        .collect::<io::Result<_>>()
        .map_err(|e| Error::io("read directory", src, None, e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let from = e.path();
        let to = dst.join(e.file_name());
        let meta =
            fs::symlink_metadata(&from).map_err(|err| Error::io("stat", &from, None, err))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let link =
                fs::read_link(&from).map_err(|err| Error::io("readlink", &from, None, err))?;
            let _ = fs::remove_file(&to);
            std::os::unix::fs::symlink(&link, &to)
                .map_err(|err| Error::io("symlink", &to, None, err))?;
            report.symlinks += 1;
        } else if ft.is_dir() {
            copy_dir(&from, &to, meta.mode(), opts, progress, total, base, report)?;
        } else if ft.is_file() {
            let done_before = base.load(Ordering::Relaxed);
            let on = |p: Progress| {
                progress(Progress {
                    done: done_before + p.done,
                    total: Some(total),
                })
            };
            let r = copy(&from, &to, opts, &on)?;
            base.fetch_add(r.bytes, Ordering::Relaxed);
            report.files += 1;
            report.bytes += r.bytes;
            report.data_bytes += r.data_bytes;
            report.holes_bytes += r.holes_bytes;
            report.resumed_bytes += r.resumed_bytes;
            match (r.src_cached_before, r.src_cached_after, r.dst_cached_after) {
                (Some(b), Some(a), Some(d)) => {
                    report.src_cached_before += b;
                    report.src_cached_after += a;
                    report.dst_cached_after += d;
                }
                _ => report.unknown_residency += 1,
            }
            if r.checksum.is_some() {
                report.verified += 1;
            }
        } else {
            report.skipped.push(from);
        }
    }
    // The directory's own mode, now that its entries are in (a read-only
    // source directory would otherwise refuse them).
    let _ = fs::set_permissions(dst, fs::Permissions::from_mode(mode & 0o7777));
    if opts.sync {
        if let Ok(d) = fs::File::open(dst) {
            d.sync_all().map_err(|e| Error::io("fsync", dst, None, e))?;
        }
    }
    Ok(())
}
