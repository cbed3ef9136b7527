//! Opening a copy's source and finding its destination safely when other
//! users can write the directories involved (ahead is run as root in /tmp,
//! in shared project trees, in backup targets).
//!
//! The rules, those of cp and rsync at their most careful:
//! * A source is opened once. Everything after works on that descriptor:
//!   its type and size come from fstat(2), the O_DIRECT descriptor is a
//!   second open of the same file through `/proc/self/fd` (never the path
//!   again), and it is opened non-blocking so a FIFO swapped in cannot hang
//!   the copy. Files that report a size they do not have (procfs, sysfs),
//!   and empty ones, are streamed to their end as cat would.
//! * A destination is a name in a directory that is open: its temporary
//!   file is made there with O_CREAT|O_EXCL|O_NOFOLLOW under an
//!   unpredictable name (a link or file planted in advance is never used),
//!   and renamed onto the name with renameat(2), which replaces whatever is
//!   at the name — a link included — and follows nothing.
//! * The one link followed at a destination is the command line's own last
//!   component, and only when the link belongs to the caller or to root
//!   (the kernel's `fs.protected_symlinks` rule): `/dev/disk/by-id/…` names
//!   a disk, while a link another user planted at `/tmp/out.img` is
//!   replaced by the copy, not written through.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::refused;
use crate::{sys, Error, Result};

/// What kind of source a copy has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SrcKind {
    /// A regular file of this size.
    Regular(u64),
    /// A block device of this size.
    Block(u64),
    /// Read to its end, in order: a pipe, a character device, a socket, a
    /// file whose size cannot be trusted.
    Stream,
}

/// An open source.
pub(super) struct Source {
    pub path: PathBuf,
    pub kind: SrcKind,
    pub origin: Origin,
}

/// Where a source's bytes come from.
pub(super) enum Origin {
    /// A file, block device or stream, open, as fstat(2) found it.
    Local { file: File, meta: fs::Metadata },
    /// An object in a store, read by ranged GETs held to the version (the
    /// ETag) it had when it was opened.
    #[cfg(feature = "remote")]
    Object(std::sync::Arc<crate::remote::ObjectSource>),
}

fn io_err<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(rustix::io::Errno) -> Error + 'p {
    move |e| Error::io(op, path, None, e.into())
}

impl Source {
    /// Opens the source named on the command line (a link there is
    /// followed, as cp follows it).
    pub fn open(path: &Path, resume: bool) -> Result<Source> {
        let fd =
            rustix::fs::open(path, read_flags(), Mode::empty()).map_err(io_err("open", path))?;
        Source::from_fd(fd, path.to_path_buf(), resume)
    }

    /// A source already opened (non-blocking) by name in a directory.
    pub fn from_fd(fd: OwnedFd, path: PathBuf, resume: bool) -> Result<Source> {
        let meta = File::from(
            fd.try_clone()
                .map_err(|e| Error::io("dup", &path, None, e))?,
        )
        .metadata()
        .map_err(|e| Error::io("stat", &path, None, e))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            return Err(refused(
                &path,
                "is a directory (use -r to copy a directory tree)",
            ));
        }
        let stream_type = !(ft.is_file() || ft.is_block_device());
        let synthetic = ft.is_file() && sys::size_is_synthetic(&fd);
        if resume && (stream_type || synthetic) {
            return Err(refused(
                &path,
                "is a pipe or other stream: it cannot be resumed",
            ));
        }
        let fd = if ft.is_fifo() {
            // Opened non-blocking, a FIFO with no writer yet would read as
            // empty: open the same FIFO again, waiting for a writer as cat
            // does.
            sys::reopen(&fd, OFlags::RDONLY).map_err(|e| Error::io("open", &path, None, e))?
        } else {
            let flags = rustix::fs::fcntl_getfl(&fd).map_err(io_err("fcntl", &path))?;
            rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)
                .map_err(io_err("fcntl", &path))?;
            fd
        };
        let file = File::from(fd);
        let kind = if ft.is_block_device() {
            SrcKind::Block(
                rustix::fs::seek(&file, rustix::fs::SeekFrom::End(0))
                    .map_err(io_err("seek", &path))?,
            )
        } else if ft.is_file() && !synthetic && meta.len() > 0 {
            SrcKind::Regular(meta.len())
        } else {
            SrcKind::Stream
        };
        Ok(Source {
            path,
            kind,
            origin: Origin::Local { file, meta },
        })
    }

    /// An object, opened (its size and ETag taken): `path` is its URL.
    #[cfg(feature = "remote")]
    pub fn object(object: std::sync::Arc<crate::remote::ObjectSource>, size: u64) -> Source {
        Source {
            path: PathBuf::from(object.url()),
            kind: SrcKind::Regular(size),
            origin: Origin::Object(object),
        }
    }

    /// The open file and what fstat(2) said of it; `None` for an object.
    pub fn local(&self) -> Option<(&File, &fs::Metadata)> {
        match &self.origin {
            Origin::Local { file, meta } => Some((file, meta)),
            #[cfg(feature = "remote")]
            Origin::Object(_) => None,
        }
    }

    /// The size, where it can be trusted.
    pub fn size(&self) -> Option<u64> {
        match self.kind {
            SrcKind::Regular(n) | SrcKind::Block(n) => Some(n),
            SrcKind::Stream => None,
        }
    }
}

/// Flags every source is opened with: no blocking on a FIFO, no
/// controlling terminal from a tty.
pub(super) fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

/// Where a copy goes.
pub(super) enum Target {
    /// A name in an open directory: written as a temporary file there and
    /// renamed onto the name.
    InDir {
        dir: OwnedFd,
        name: OsString,
        /// The destination's path, for messages and reports.
        path: PathBuf,
    },
    /// A block device, written in place.
    Block { file: File, path: PathBuf },
}

/// Whether following the link `meta` describes is safe for the caller:
/// the link is the caller's or root's.
fn trusted_link(meta: &fs::Metadata) -> bool {
    let euid = rustix::process::geteuid().as_raw();
    meta.uid() == euid || meta.uid() == 0
}

/// What the command line's destination is (`None`: nothing there yet),
/// its last component followed only when it is a trusted link.
pub(super) fn dst_meta(dst: &Path) -> Result<Option<fs::Metadata>> {
    match fs::symlink_metadata(dst) {
        Ok(m) if m.file_type().is_symlink() && trusted_link(&m) => Ok(fs::metadata(dst).ok()),
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat", dst, None, e)),
    }
}

/// Resolves the command line's destination for `src`: a file, a directory
/// to copy into, or a block device.
pub(super) fn resolve(src: &Source, dst: &Path) -> Result<Target> {
    if let Some(m) = &dst_meta(dst)? {
        if m.is_dir() {
            let name = src
                .path
                .file_name()
                .ok_or_else(|| refused(&src.path, "has no file name to copy into a directory"))?;
            let dir = open_dir(dst)?;
            return in_dir(src, dir, name.to_owned(), dst.join(name), true);
        }
        if m.file_type().is_block_device() {
            return open_block(src, dst, m);
        }
    }
    let name = dst
        .file_name()
        .ok_or_else(|| refused(dst, "has no file name"))?;
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = open_dir(parent)?;
    in_dir(src, dir, name.to_owned(), dst.to_path_buf(), false)
}

fn open_dir(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err("open destination directory", path))
}

/// The destination `name` in the open directory `dir`. What is there now
/// is looked at without following a link: the same file as the source is
/// refused, a directory is refused, a block device is written in place
/// only when `devices` (the command line named it, not a tree), anything
/// else (a file, a link, a device node in a tree) is replaced.
pub(super) fn in_dir(
    src: &Source,
    dir: OwnedFd,
    name: OsString,
    path: PathBuf,
    devices: bool,
) -> Result<Target> {
    match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
            use rustix::fs::FileType as T;
            let same = src
                .local()
                .is_some_and(|(_, m)| (st.st_dev, st.st_ino) == (m.dev(), m.ino()));
            if same && ft != T::Symlink {
                return Err(refused(&path, "source and destination are the same file"));
            }
            match ft {
                T::Directory => return Err(refused(&path, "is a directory")),
                T::BlockDevice if devices => {
                    let m = fs::symlink_metadata(&path)
                        .map_err(|e| Error::io("stat", &path, None, e))?;
                    return open_block(src, &path, &m);
                }
                T::Fifo | T::Socket | T::CharacterDevice if devices => {
                    return Err(refused(
                        &path,
                        "the destination must be a regular file or a block device",
                    ))
                }
                _ => {}
            }
        }
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(Error::io("stat", &path, None, e.into())),
    }
    Ok(Target::InDir { dir, name, path })
}

/// Opens a block device destination in place: exclusively (O_EXCL on a
/// block device fails with EBUSY while it is mounted or held), checked to
/// be the device that was looked at, and not the source's disk.
fn open_block(src: &Source, path: &Path, seen: &fs::Metadata) -> Result<Target> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::EXCL | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        if e == rustix::io::Errno::BUSY {
            refused(path, "the device is mounted or in use")
        } else {
            Error::io("open", path, None, e.into())
        }
    })?;
    let file = File::from(fd);
    let m = file
        .metadata()
        .map_err(|e| Error::io("stat", path, None, e))?;
    if !m.file_type().is_block_device() || m.rdev() != seen.rdev() {
        return Err(refused(path, "changed while it was being opened"));
    }
    let src_disk = src
        .local()
        .filter(|(_, sm)| sm.file_type().is_block_device());
    if src_disk.is_some_and(|(_, sm)| same_disk(sm.rdev(), m.rdev())) {
        return Err(refused(
            path,
            "source and destination are the same disk (or one is a partition of the other)",
        ));
    }
    Ok(Target::Block {
        file,
        path: path.to_path_buf(),
    })
}

/// Whether two block devices overlap: the same device, or a partition and
/// its whole disk (sysfs puts a partition's directory inside its disk's).
pub(crate) fn same_disk(a: u64, b: u64) -> bool {
    if a == b {
        return true;
    }
    let place = |d: u64| {
        fs::canonicalize(format!(
            "/sys/dev/block/{}:{}",
            rustix::fs::major(d),
            rustix::fs::minor(d)
        ))
        .ok()
    };
    match (place(a), place(b)) {
        (Some(x), Some(y)) => x.starts_with(&y) || y.starts_with(&x),
        _ => false,
    }
}

/// Makes the temporary file `name` in `dir`: new (O_EXCL), never through a
/// link, with `mode` (the umask applies).
pub(super) fn create_tmp(dir: impl AsFd, name: &OsStr, mode: u32) -> std::io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    Ok(File::from(fd))
}

/// Opens an existing temporary file to resume it: only a regular file of
/// the caller's with one link, never through a link.
pub(super) fn open_tmp(dir: impl AsFd, name: &OsStr) -> std::io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let euid = rustix::process::geteuid().as_raw();
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
        || st.st_uid != euid
        || st.st_nlink != 1
    {
        return Err(std::io::Error::other("not a temporary file of this user's"));
    }
    Ok(File::from(fd))
}

/// The bytes of a name.
pub(super) fn bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

/// A name from bytes.
pub(super) fn os(name: &[u8]) -> &OsStr {
    OsStr::from_bytes(name)
}

/// The mode a copy gets (before the umask): a regular file's permission
/// bits, without setuid, setgid and sticky unless `preserve` and the caller
/// owns the source; a device or a stream 0600, or the source's own bits
/// when they are tighter (cp's rules).
pub(super) fn copy_mode(meta: &fs::Metadata, preserve: bool) -> u32 {
    let euid = rustix::process::geteuid().as_raw();
    if meta.is_file() {
        let special = if preserve && meta.uid() == euid {
            meta.mode() & 0o7000
        } else {
            0
        };
        (meta.mode() & 0o777) | special
    } else {
        meta.mode() & 0o600
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_its_own_disk_and_unrelated_devices_are_not() {
        assert!(same_disk(7 << 8, 7 << 8));
        // Whatever this machine's disk is: a partition and its disk
        // overlap; two loop devices do not.
        let Ok(st) = fs::metadata("/") else { return };
        let dev = st.dev();
        let part = format!(
            "/sys/dev/block/{}:{}/partition",
            rustix::fs::major(dev),
            rustix::fs::minor(dev)
        );
        if Path::new(&part).exists() {
            let disk = fs::canonicalize(format!(
                "/sys/dev/block/{}:{}/..",
                rustix::fs::major(dev),
                rustix::fs::minor(dev)
            ))
            .unwrap();
            let devno = fs::read_to_string(disk.join("dev")).unwrap();
            let (ma, mi) = devno.trim().split_once(':').unwrap();
            let whole = rustix::fs::makedev(ma.parse().unwrap(), mi.parse().unwrap());
            assert!(same_disk(dev, whole));
            assert!(same_disk(whole, dev));
        } else {
            eprintln!("SKIP partition half: / is not on a partition here");
        }
        assert!(!same_disk(
            rustix::fs::makedev(7, 0),
            rustix::fs::makedev(7, 1)
        ));
    }
}
