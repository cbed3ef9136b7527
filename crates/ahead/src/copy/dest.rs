//! Writing the destination: the writer, zeroes as holes, the temporary
//! file's guard, and `--preserve`.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::AtFlags;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::journal::{Journal, StateDir};
use super::place;
use super::{
    aligned, bump, io_err, open_direct, CacheMode, CopyOptions, FlagProbe, Used, WRITE_WINDOWS,
    ZERO_BLOCK,
};
use crate::{residency, sys, Error, Result};

/// Writes the destination, keeping it out of the cache unless `Keep`.
pub(super) struct DstWriter<'a> {
    pub(super) file: &'a File,
    pub(super) path: &'a Path,
    pub(super) mode: CacheMode,
    pub(super) dontcache: FlagProbe,
    pub(super) direct: Option<(File, usize)>,
    pub(super) direct_ok: AtomicBool,
    /// A regular file written with O_DIRECT: its data may be allocated
    /// before the copy (see [`DstWriter::preallocate`]).
    pub(super) may_preallocate: bool,
    /// The allocation was made: runs of zeroes left unwritten are noted, to
    /// be punched out once every write is done.
    pub(super) preallocated: AtomicBool,
    pub(super) zero_runs: std::sync::Mutex<Vec<(u64, u64)>>,
    pub(super) used: Used,
    /// The crate's own tests only: a write fault to inject.
    #[cfg(test)]
    pub(super) fault: Option<crate::io::fault::WriteFault>,
}

impl<'a> DstWriter<'a> {
    pub(super) fn new(file: &'a File, path: &'a Path, opts: &CopyOptions) -> Self {
        let direct = if opts.direct && opts.cache != CacheMode::Keep {
            open_direct(file, true)
        } else {
            None
        };
        DstWriter {
            file,
            path,
            mode: opts.cache,
            dontcache: FlagProbe::new(opts.dontcache),
            direct_ok: AtomicBool::new(direct.is_some()),
            may_preallocate: direct.is_some() && file.metadata().is_ok_and(|m| m.is_file()),
            preallocated: AtomicBool::new(false),
            zero_runs: std::sync::Mutex::new(Vec::new()),
            direct,
            used: Used::default(),
            #[cfg(test)]
            fault: opts.write_fault,
        }
    }

    pub(super) fn write_all_at(
        &self,
        buf: &[u8],
        offset: u64,
        windows: &mut VecDeque<(u64, u64)>,
    ) -> Result<()> {
        #[cfg(test)]
        {
            use crate::io::fault::WriteFault;
            let covers = |at: u64| (offset..offset + buf.len() as u64).contains(&at);
            match self.fault {
                Some(WriteFault::Corrupt(at)) if covers(at) => {
                    let mut bad = buf.to_vec();
                    bad[(at - offset) as usize] ^= 0xff;
                    return self.write_clean(&bad, offset, windows);
                }
                Some(WriteFault::Fail(at, errno)) if covers(at) => {
                    let e = io::Error::from_raw_os_error(errno);
                    return Err(Error::io("write", self.path, Some(offset), e));
                }
                _ => {}
            }
        }
        self.write_clean(buf, offset, windows)
    }

    pub(super) fn write_clean(
        &self,
        buf: &[u8],
        offset: u64,
        windows: &mut VecDeque<(u64, u64)>,
    ) -> Result<()> {
        if self.mode == CacheMode::Keep {
            bump(&self.used.buffered);
            return self.put(self.file, buf, offset, 0);
        }
        // Aligned pieces go around the page cache altogether.
        if let Some((direct, align)) = &self.direct {
            if self.direct_ok.load(Ordering::Relaxed) && aligned(buf, offset, *align) {
                match self.put(direct, buf, offset, 0) {
                    Ok(()) => {
                        bump(&self.used.direct);
                        return Ok(());
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.direct_ok.store(false, Ordering::Relaxed);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let flagged = || self.put(self.file, buf, offset, sys::RWF_DONTCACHE);
        if let Some(r) = self.dontcache.attempt(flagged) {
            if r.is_ok() {
                bump(&self.used.dontcache);
            }
            return r;
        }
        bump(&self.used.windows);
        self.put(self.file, buf, offset, 0)?;
        let len = buf.len() as u64;
        sys::sync_range(self.file, offset, len, false).map_err(io_err(
            "sync_file_range",
            self.path,
            Some(offset),
        ))?;
        windows.push_back((offset, len));
        if windows.len() > WRITE_WINDOWS {
            let (o, n) = windows.pop_front().expect("non-empty");
            self.drop_window(o, n)?;
        }
        Ok(())
    }

    pub(super) fn drop_window(&self, offset: u64, len: u64) -> Result<()> {
        sys::sync_range(self.file, offset, len, true).map_err(io_err(
            "sync_file_range",
            self.path,
            Some(offset),
        ))?;
        let _ = crate::residency::evict(self.file, offset, len);
        Ok(())
    }

    pub(super) fn drain(&self, windows: &mut VecDeque<(u64, u64)>) -> Result<()> {
        while let Some((o, n)) = windows.pop_front() {
            self.drop_window(o, n)?;
        }
        Ok(())
    }

    /// Allocates the source's data `extents` in the destination before a
    /// copy with O_DIRECT writes. ext4 runs an O_DIRECT write that
    /// allocates blocks under the inode's lock held exclusively, so the
    /// depth's writes into a new file go one at a time; writes into blocks
    /// allocated (unwritten) beforehand take it shared and overlap (fio,
    /// four 512 MiB O_DIRECT writers here: 0.76 s into a preallocated file
    /// against 0.94–1.06 s). One call per extent, before any write: a
    /// fallocate during the writes would wait for all of them. Holes of the
    /// source stay holes; runs of zeroes inside its data, which the copy
    /// does not write, are punched out afterwards
    /// ([`DstWriter::punch_zero_runs`]). Best effort: a file system that
    /// refuses leaves the writes to allocate as they go.
    ///
    /// Only where all of the extents fit in the file system's free space
    /// twice over: a source whose data is mostly runs of zeroes (a disk
    /// image) may fit where its extents would not, and an allocation that
    /// failed half-way is given back.
    pub(super) fn preallocate(&self, extents: &[(u64, u64)]) {
        if !self.may_preallocate {
            return;
        }
        use rustix::fs::FallocateFlags;
        let total: u64 = extents.iter().map(|&(_, n)| n).sum();
        let free = rustix::fs::fstatvfs(self.file)
            .map(|v| v.f_bavail.saturating_mul(v.f_frsize))
            .unwrap_or(0);
        if total == 0 || total > free / 2 {
            return;
        }
        for (k, &(off, len)) in extents.iter().enumerate() {
            if rustix::fs::fallocate(self.file, FallocateFlags::KEEP_SIZE, off, len).is_err() {
                let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
                for &(o, n) in &extents[..=k] {
                    let _ = rustix::fs::fallocate(self.file, mode, o, n);
                }
                self.preallocated.store(false, Ordering::Relaxed);
                return;
            }
            self.preallocated.store(true, Ordering::Relaxed);
        }
    }

    /// A run of zeroes left unwritten in a regular file.
    pub(super) fn note_zero_run(&self, offset: u64, len: u64) {
        if self.preallocated.load(Ordering::Relaxed) {
            self.zero_runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((offset, len));
        }
    }

    /// Frees the blocks preallocated under runs of zeroes the copy did not
    /// write, so the copy is as sparse as without preallocation (they read
    /// as zeroes either way; a file system that cannot punch keeps them
    /// allocated).
    pub(super) fn punch_zero_runs(&self) {
        use rustix::fs::FallocateFlags;
        let mut runs =
            std::mem::take(&mut *self.zero_runs.lock().unwrap_or_else(|p| p.into_inner()));
        runs.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (off, len) in runs {
            match merged.last_mut() {
                Some((o, l)) if *o + *l == off => *l += len,
                _ => merged.push((off, len)),
            }
        }
        for (off, len) in merged {
            let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            if rustix::fs::fallocate(self.file, mode, off, len).is_err() {
                return;
            }
        }
    }

    pub(super) fn put(&self, file: &File, buf: &[u8], offset: u64, flags: i32) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            match sys::pwrite_flags(file, &buf[done..], at, flags) {
                Ok(0) => {
                    return Err(Error::io(
                        "write",
                        self.path,
                        Some(at),
                        io::Error::from(io::ErrorKind::WriteZero),
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("write", self.path, Some(at), e)),
            }
        }
        Ok(())
    }

    /// Makes a range read as zeroes: ZERO_RANGE keeps a block device's
    /// blocks, PUNCH_HOLE frees a regular file's (a chunk redone on
    /// resume); where fallocate cannot, zeroes are written.
    pub(super) fn make_zero(
        &self,
        how: Zeroing,
        offset: u64,
        len: u64,
        zeroes: &[u8],
        windows: &mut VecDeque<(u64, u64)>,
    ) -> Result<()> {
        use rustix::fs::FallocateFlags;
        let mode = match how {
            Zeroing::Range => FallocateFlags::ZERO_RANGE,
            Zeroing::Hole => FallocateFlags::PUNCH_HOLE,
        };
        if rustix::fs::fallocate(self.file, mode | FallocateFlags::KEEP_SIZE, offset, len).is_ok() {
            return Ok(());
        }
        let mut at = offset;
        while at < offset + len {
            let n = (offset + len - at).min(zeroes.len() as u64);
            self.write_all_at(&zeroes[..n as usize], at, windows)?;
            at += n;
        }
        Ok(())
    }
}

/// How [`DstWriter::make_zero`] asks the file system for zeroes.
#[derive(Clone, Copy)]
pub(super) enum Zeroing {
    /// Zeroed blocks stay allocated (a block device).
    Range,
    /// Blocks are deallocated (a regular file).
    Hole,
}

pub(super) fn cached_pages(file: &File) -> Option<u64> {
    residency::of_range(file, 0, u64::MAX)
        .ok()
        .and_then(|s| s.known().map(|r| r.cached))
}

/// The temporary file of a copy into a directory, removed with its
/// journal unless the copy completes (or the process is killed: then both
/// stay, for `--resume`).
pub(super) struct TmpGuard<'a> {
    pub(super) dir: &'a OwnedFd,
    pub(super) name: Vec<u8>,
    pub(super) journal: Option<Journal>,
    pub(super) state: Option<&'a StateDir>,
    pub(super) armed: bool,
    /// A journal header was written: `--resume` can continue this copy.
    pub(super) resumable: bool,
    /// The copy's cancel flag: an interrupted copy that can be resumed keeps
    /// its temporary file and journal.
    pub(super) cancel: Option<std::sync::Arc<AtomicBool>>,
}

impl TmpGuard<'_> {
    pub(super) fn finish(mut self) {
        self.armed = false;
        if let (Some(j), Some(st)) = (self.journal.take(), self.state) {
            j.remove(st);
        }
    }
}

impl Drop for TmpGuard<'_> {
    fn drop(&mut self) {
        let interrupted = self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed));
        if self.armed && !(interrupted && self.resumable) {
            let _ = rustix::fs::unlinkat(self.dir, place::os(&self.name), AtFlags::empty());
            if let (Some(j), Some(st)) = (self.journal.take(), self.state) {
                j.remove(st);
            }
        }
    }
}

/// `cp -p` for one file: the source's mode (setuid, setgid and sticky only
/// when the caller owns the source) and its access and modification times.
pub(super) fn preserve(dst: &File, src: &fs::Metadata) -> io::Result<()> {
    use rustix::fs::{Timespec, Timestamps};
    rustix::fs::fchmod(
        dst,
        rustix::fs::Mode::from_raw_mode(place::copy_mode(src, true)),
    )?;
    let ts = |s: i64, ns: i64| Timespec {
        tv_sec: s,
        tv_nsec: ns as _,
    };
    rustix::fs::futimens(
        dst,
        &Timestamps {
            last_access: ts(src.atime(), src.atime_nsec()),
            last_modification: ts(src.mtime(), src.mtime_nsec()),
        },
    )?;
    Ok(())
}

/// Writes `buf` (file bytes at `offset`), leaving 64 KiB blocks of zeroes
/// as holes (zeroed on a block device). Returns the bytes written.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_sparse(
    writer: &DstWriter<'_>,
    buf: &[u8],
    offset: u64,
    sparse: bool,
    block_dst: bool,
    zeroes: &[u8],
    windows: &mut VecDeque<(u64, u64)>,
    holes: &AtomicU64,
) -> Result<u64> {
    if !sparse {
        writer.write_all_at(buf, offset, windows)?;
        return Ok(buf.len() as u64);
    }
    let mut written = 0;
    let mut i = 0;
    let len = buf.len();
    while i < len {
        // Blocks are aligned to the file offset.
        let block_end = |at: usize| {
            let abs = offset + at as u64;
            (((abs / ZERO_BLOCK) + 1) * ZERO_BLOCK - offset).min(len as u64) as usize
        };
        let end = block_end(i);
        let zero = is_zero(&buf[i..end]);
        let mut j = end;
        while j < len {
            let e = block_end(j);
            if is_zero(&buf[j..e]) != zero {
                break;
            }
            j = e;
        }
        let at = offset + i as u64;
        if zero {
            holes.fetch_add((j - i) as u64, Ordering::Relaxed);
            if block_dst {
                writer.make_zero(Zeroing::Range, at, (j - i) as u64, zeroes, windows)?;
            } else {
                writer.note_zero_run(at, (j - i) as u64);
            }
        } else {
            writer.write_all_at(&buf[i..j], at, windows)?;
            written += (j - i) as u64;
        }
        i = j;
    }
    Ok(written)
}

pub(super) fn is_zero(b: &[u8]) -> bool {
    // 16 bytes at a time (unaligned loads), stopping at the first that
    // is not zero.
    let mut words = b.chunks_exact(16);
    words
        .by_ref()
        .all(|w| w.iter().fold(0u8, |acc, &x| acc | x) == 0)
        && words.remainder().iter().all(|&x| x == 0)
}
