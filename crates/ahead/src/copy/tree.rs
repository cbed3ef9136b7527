//! Recursive copies (`ahead copy -r`): a directory tree, file by file,
//! through [`copy`](super::copy) with the same options.
//!
//! Each file is as safe as a single copy (temporary name, rename, journal
//! for `--resume`); the tree as a whole is not atomic: an interrupted copy
//! leaves the files finished so far under their names. With `resume`, the
//! file that was cut short continues from its journal; files already
//! finished are copied again (there is no journal of the tree). Symbolic
//! links are recreated, not followed; FIFOs, sockets and device nodes
//! inside the tree are skipped and listed, never opened.
//!
//! Both trees are walked through directory descriptors (openat(2) with
//! O_NOFOLLOW), so an entry swapped for a link during the walk is never
//! followed: in the source, what is opened is checked with fstat(2) on the
//! descriptor (a file turned into a link is copied as the link; one turned
//! into a FIFO is skipped, not waited on); in the destination, a link where
//! a directory goes is replaced by the directory, one where a file goes is
//! replaced by the file, and nothing is written or chmod'ed through one.
//! Directories the copy makes get the source's permission bits less the
//! umask (setgid and sticky dropped, as cp does without -p); directories
//! that were there keep their mode.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::place::{self, Source};
use super::{check_options, copy_to, refused, CopyOptions, Progress};
use crate::walk::{self, Entry};
use crate::{sys, Error, Result};

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
    /// The files' totals summed (page-cache counts over the files that
    /// showed them, 0 where none did), and the tree's wall time.
    pub totals: super::Totals,
    /// Files whose residency could not be seen.
    pub unknown_residency: u64,
    /// Files verified (with `verify`).
    pub verified: u64,
}

/// Copies the directory `src` to `dst`: into `dst/NAME` when `dst` is an
/// existing directory, else to `dst` itself (created).
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<TreeReport> {
    check_options(opts)?;
    let started = Instant::now();
    let src_fd = rustix::fs::open(src, dir_flags(), Mode::empty()).map_err(|e| {
        if e == rustix::io::Errno::NOTDIR {
            refused(src, "is not a directory")
        } else {
            Error::io("open", src, None, e.into())
        }
    })?;
    let src_mode = rustix::fs::fstat(&src_fd)
        .map_err(|e| Error::io("stat", src, None, e.into()))?
        .st_mode;
    let into = match place::dst_meta(dst)? {
        Some(m) if m.is_dir() => true,
        Some(m) if m.file_type().is_symlink() => false, // replaced below
        Some(_) => return Err(refused(dst, "exists and is not a directory")),
        None => false,
    };
    let (parent, name, target) = if into {
        let name = src
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_owned()))
            .ok_or_else(|| refused(src, "has no name to copy into a directory"))?;
        (dst.to_path_buf(), name.clone(), dst.join(name))
    } else {
        let name = dst
            .file_name()
            .ok_or_else(|| refused(dst, "has no file name"))?
            .to_owned();
        let parent = dst
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        (parent, name, dst.to_path_buf())
    };
    // Refuse to copy a tree into itself (it would never end).
    let src_abs = src
        .canonicalize()
        .map_err(|e| Error::io("open", src, None, e))?;
    let parent_abs = parent
        .canonicalize()
        .map_err(|e| Error::io("open destination directory", &parent, None, e))?;
    if parent_abs.starts_with(&src_abs) {
        return Err(refused(&target, "is inside the source directory"));
    }
    let parent_fd = rustix::fs::open(&parent, dir_flags(), Mode::empty())
        .map_err(|e| Error::io("open destination directory", &parent, None, e.into()))?;
    let total = walk::regular_bytes(&src_fd);
    let mut walk = Walk {
        opts,
        progress,
        total,
        base: AtomicU64::new(0),
        umask: sys::umask(),
        report: TreeReport {
            dst: target.clone(),
            totals: super::Totals {
                src_cached_before: Some(0),
                src_cached_after: Some(0),
                dst_cached_after: Some(0),
                ..Default::default()
            },
            ..TreeReport::default()
        },
    };
    let (dst_fd, created) = walk.ensure_dir(&parent_fd, &name, &target)?;
    walk.copy_dir(&src_fd, src, &dst_fd, &target, created.then_some(src_mode))?;
    let mut report = walk.report;
    report.totals.elapsed = started.elapsed();
    Ok(report)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// One tree copy's settings and running totals.
struct Walk<'a> {
    opts: &'a CopyOptions,
    progress: &'a (dyn Fn(Progress) + Sync),
    total: u64,
    base: AtomicU64,
    umask: u32,
    report: TreeReport,
}

impl Walk<'_> {
    /// Opens the directory `name` in `parent`, making it (mode 0700 until
    /// its entries are in) if it is not there; a link there is replaced by
    /// the directory, never followed. Whether it was made.
    fn ensure_dir(
        &mut self,
        parent: &OwnedFd,
        name: &OsStr,
        path: &Path,
    ) -> Result<(OwnedFd, bool)> {
        let mut created = self.mkdir(parent, name, path)?;
        let flags = dir_flags() | OFlags::NOFOLLOW;
        let fd = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) if !created => {
                let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::io("stat", path, None, e.into()))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                    return Err(refused(path, "exists and is not a directory"));
                }
                rustix::fs::unlinkat(parent, name, AtFlags::empty())
                    .map_err(|e| Error::io("remove the link", path, None, e.into()))?;
                created = self.mkdir(parent, name, path)?;
                rustix::fs::openat(parent, name, flags, Mode::empty())
                    .map_err(|e| Error::io("open", path, None, e.into()))?
            }
            Err(e) => return Err(Error::io("open", path, None, e.into())),
        };
        Ok((fd, created))
    }

    fn mkdir(&mut self, parent: &OwnedFd, name: &OsStr, path: &Path) -> Result<bool> {
        match rustix::fs::mkdirat(parent, name, Mode::RWXU) {
            Ok(()) => {
                self.report.dirs += 1;
                Ok(true)
            }
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(Error::io("create directory", path, None, e.into())),
        }
    }

    /// Copies the entries of the open directory `src` into the open
    /// directory `dst`; `made_with` is the source directory's mode when the
    /// copy made `dst` (it gets that mode once its entries are in).
    fn copy_dir(
        &mut self,
        src: &OwnedFd,
        src_path: &Path,
        dst: &OwnedFd,
        dst_path: &Path,
        made_with: Option<u32>,
    ) -> Result<()> {
        let names = walk::names(src).map_err(|e| Error::io("read directory", src_path, None, e))?;
        let open = |ft| match ft {
            FileType::Directory => Some(walk::dir_flags()),
            FileType::RegularFile => Some(place::read_flags()),
            // FIFOs, sockets and devices are listed, never opened.
            _ => None,
        };
        for name in names {
            let from = src_path.join(&name);
            let to = dst_path.join(&name);
            let entry = walk::open_entry(src, &name, open)
                .map_err(|e| Error::io("open", &from, None, e))?;
            match entry {
                Entry::Link => self.link(src, dst, &name, &from, &to)?,
                Entry::Open(sub, FileType::Directory) => {
                    let mode = rustix::fs::fstat(&sub)
                        .map_err(|e| Error::io("stat", &from, None, e.into()))?
                        .st_mode;
                    let (sub_dst, created) = self.ensure_dir(dst, &name, &to)?;
                    self.copy_dir(&sub, &from, &sub_dst, &to, created.then_some(mode))?;
                }
                Entry::Open(fd, _) => self.file(fd, dst, &name, from, to)?,
                Entry::Skipped(_) => self.report.skipped.push(from),
                Entry::Gone => {}
            }
        }
        if let Some(mode) = made_with {
            let mode = if self.opts.preserve && self.owns(src) {
                mode & 0o7777
            } else {
                mode & 0o777 & !self.umask
            };
            rustix::fs::fchmod(dst, Mode::from_raw_mode(mode))
                .map_err(|e| Error::io("chmod", dst_path, None, e.into()))?;
        }
        if self.opts.sync {
            rustix::fs::fsync(dst).map_err(|e| Error::io("fsync", dst_path, None, e.into()))?;
        }
        Ok(())
    }

    fn owns(&self, fd: impl AsFd) -> bool {
        rustix::fs::fstat(fd).is_ok_and(|st| st.st_uid == rustix::process::geteuid().as_raw())
    }

    /// Copies the regular file `name`, opened (by the walk) without
    /// following a link and checked on its descriptor.
    fn file(
        &mut self,
        fd: OwnedFd,
        dst: &OwnedFd,
        name: &OsStr,
        from: PathBuf,
        to: PathBuf,
    ) -> Result<()> {
        let source = Source::from_fd(fd, from, self.opts.resume)?;
        let dir = dst
            .try_clone()
            .map_err(|e| Error::io("dup", &to, None, e))?;
        let target = place::in_dir(&source, dir, name.to_owned(), to, false)?;
        let done_before = self.base.load(Ordering::Relaxed);
        let (progress, total) = (self.progress, self.total);
        let on = |p: Progress| {
            progress(Progress {
                done: done_before + p.done,
                total: Some(total),
            })
        };
        let r = copy_to(source, target, self.opts, &on)?;
        self.base.fetch_add(r.totals.bytes, Ordering::Relaxed);
        let report = &mut self.report;
        report.files += 1;
        if !report.totals.add(&r.totals) {
            report.unknown_residency += 1;
        }
        if r.checksum.is_some() {
            report.verified += 1;
        }
        Ok(())
    }

    /// Recreates the link `name`: made under a new name beside it and
    /// renamed onto it, replacing (never following) what is there.
    fn link(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &OsStr,
        from: &Path,
        to: &Path,
    ) -> Result<()> {
        let target = match rustix::fs::readlinkat(src, name, Vec::new()) {
            Ok(t) => t,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            // Swapped for something else meanwhile.
            Err(rustix::io::Errno::INVAL) => {
                self.report.skipped.push(from.to_path_buf());
                return Ok(());
            }
            Err(e) => return Err(Error::io("readlink", from, None, e.into())),
        };
        let token = sys::random_token().map_err(|e| Error::io("getrandom", to, None, e))?;
        let mut tmp = b".".to_vec();
        tmp.extend_from_slice(&token.as_bytes()[..16]);
        tmp.extend_from_slice(b".ahead-link");
        let tmp = OsStr::from_bytes(&tmp);
        rustix::fs::symlinkat(target.as_c_str(), dst, tmp)
            .map_err(|e| Error::io("symlink", to, None, e.into()))?;
        if let Err(e) = rustix::fs::renameat(dst, tmp, dst, name) {
            let _ = rustix::fs::unlinkat(dst, tmp, AtFlags::empty());
            return Err(Error::io("rename into place", to, None, e.into()));
        }
        self.report.symlinks += 1;
        Ok(())
    }
}
