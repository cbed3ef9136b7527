//! The copy engine behind `ahead copy`: parallel, sparse-aware, safe against
//! interruption, and by default neutral to the kernel's page cache.
//!
//! What "neutral" means (seed 003, libnbd's nbdcopy, taken further): after
//! the copy, the source's pages that were cached before still are, no new
//! source pages are, and the destination leaves nothing cached.
//! * Reads use `RWF_DONTCACHE` (Linux 6.14; pages the read brings in leave
//!   the cache once copied, pages already cached are left alone). Where the
//!   kernel or file system lacks it, each chunk's residency is looked at
//!   just before it is read (cachestat, then mincore for a partly cached
//!   chunk) and only the pages that were not cached are dropped afterwards —
//!   not one snapshot taken at open as nbdcopy does, which goes stale as
//!   other processes use the file. Where residency cannot be seen at all,
//!   the chunk is read with O_DIRECT, which neither adds nor drops pages.
//!   Chunks with nothing cached are read with O_DIRECT in any case. The
//!   source descriptor's kernel readahead is off (POSIX_FADV_RANDOM): each
//!   chunk is one read already, and pages read ahead past a chunk would
//!   outlive the copy.
//! * Writes use `RWF_DONTCACHE` too; else Linus's technique as nbdcopy
//!   uses it: start writeback of each chunk when written
//!   (sync_file_range), and once eight more chunks have been written wait
//!   for the old one and drop it. The last windows are drained at the end.
//!
//! Safety: a regular destination is written under a new, unpredictable
//! temporary name beside it (`.NAME.ahead-TOKEN.part`, made with
//! O_CREAT|O_EXCL|O_NOFOLLOW in the open destination directory) and renamed
//! onto NAME with renameat only when complete (after fsync unless asked
//! not to), so no interrupted copy leaves a destination that looks
//! complete, and no file or link another user planted is ever written
//! through. The source is opened once and everything after works on that
//! descriptor (see the `place` module for these rules). A journal in the
//! caller's private state directory (see the `journal` module) lists
//! finished chunks with their checksums and locks the destination against
//! a second copy; [`CopyOptions::resume`] continues from it, keeping only
//! chunks the temporary file still holds. An error removes the temporary
//! file and the journal; a process killed mid-copy leaves both, for
//! `--resume`.
//!
//! Speed: the source's data extents are found with SEEK_DATA/SEEK_HOLE;
//! chunks (default: the device's largest request, 1–8 MiB) are copied by
//! `depth` threads at once; runs of zeroes (64 KiB blocks) are not written
//! but left as holes (zeroed with fallocate on a block device). A reflink
//! (FICLONE) is tried first: it shares extents and touches no cache. With
//! [`CacheMode::Keep`], data moves with copy_file_range(2) inside the
//! kernel.

mod journal;
mod place;
mod tree;

pub use tree::{copy_tree, TreeReport};

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, OFlags};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::io::AlignedBuf;
use crate::{residency, sys, Error, Result};
use journal::{ChunkSum, Header, Journal, SourceId, StateDir};
use place::{Source, SrcKind, Target};

/// What the copy does to the kernel's page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Leave it as it was (the default; see the module docs).
    #[default]
    Neutral,
    /// An ordinary copy: whatever the kernel caches stays cached.
    Keep,
    /// Drop every page the copy touched, source and destination.
    Drop,
}

/// How to copy.
#[derive(Clone, Debug)]
pub struct CopyOptions {
    /// Page-cache behaviour.
    pub cache: CacheMode,
    /// fsync the destination (and its directory) before reporting success.
    pub sync: bool,
    /// Read both sides back and compare BLAKE3 checksums.
    pub verify: bool,
    /// Continue an interrupted copy from its journal.
    pub resume: bool,
    /// Bytes per chunk; `None`: tuned to the source's device.
    pub chunk: Option<u64>,
    /// Chunks in flight (threads).
    pub depth: usize,
    /// Leave runs of zeroes as holes.
    pub sparse: bool,
    /// Try a reflink first.
    pub reflink: bool,
    /// Use RWF_DONTCACHE where the kernel has it (else always the fallbacks).
    pub dontcache: bool,
    /// In the neutral and drop modes, use O_DIRECT for reads of chunks
    /// nothing of which is cached and for aligned writes.
    pub direct: bool,
    /// Bytes per second, at most (`None`: as fast as possible).
    pub bwlimit: Option<u64>,
    /// Keep the source's mode (setuid, setgid and sticky only when the
    /// caller owns the source) and times, as `cp -p`; otherwise the copy
    /// gets the source's permission bits less the umask, as cp gives.
    pub preserve: bool,
    /// Fault injection for the crate's own tests of `verify`.
    #[cfg(test)]
    pub(crate) corrupt_write_at: Option<u64>,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            cache: CacheMode::Neutral,
            sync: true,
            verify: false,
            resume: false,
            chunk: None,
            depth: 4,
            sparse: true,
            reflink: true,
            dontcache: true,
            direct: true,
            bwlimit: None,
            preserve: false,
            #[cfg(test)]
            corrupt_write_at: None,
        }
    }
}

/// Bytes done so far, for progress bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the source copied (or found to be holes) so far.
    pub done: u64,
    /// The source's size (`None` for a stream).
    pub total: Option<u64>,
}

/// What a copy did.
#[derive(Clone, Debug, Default)]
pub struct CopyReport {
    /// The destination actually written (after resolving a directory).
    pub dst: PathBuf,
    /// Size of the copy in bytes.
    pub bytes: u64,
    /// Bytes read from the source and written.
    pub data_bytes: u64,
    /// Bytes left as holes (holes of the source and runs of zeroes).
    pub holes_bytes: u64,
    /// Bytes a resumed copy did not have to copy again.
    pub resumed_bytes: u64,
    /// Wall time of the copy, verification included.
    pub elapsed: Duration,
    /// Source pages cached before and after (`None`: not visible).
    pub src_cached_before: Option<u64>,
    /// Source pages cached after.
    pub src_cached_after: Option<u64>,
    /// Destination pages cached after.
    pub dst_cached_after: Option<u64>,
    /// `blake3:HEX` of both sides, when verified (they are equal).
    pub checksum: Option<String>,
    /// How the data moved: `reflink`, `chunks`, `copy_file_range`, `stream`.
    pub method: &'static str,
    /// How reads went, joined by `+`: `direct` (O_DIRECT), `dontcache`,
    /// `residency` (per-chunk DONTNEED), `buffered`.
    pub read_path: String,
    /// How writes went: `direct`, `dontcache`, `windows`, `buffered`.
    pub write_path: String,
    /// Whether a journal was kept, so that `--resume` could continue an
    /// interrupted copy (not when the caller has no private state
    /// directory, nor for a block device destination).
    pub resumable: bool,
    /// Chunks the journal listed as done whose bytes no longer matched
    /// their checksum, copied again.
    pub resume_rejected_chunks: u64,
}

/// Zero detection granularity: runs of zeroes are found in blocks this size.
const ZERO_BLOCK: u64 = 64 << 10;
/// Windows of written data a writer keeps in flight before waiting for the
/// oldest and dropping it (nbdcopy's NR_WINDOWS).
const WRITE_WINDOWS: usize = 8;
/// Bounds on the tuned chunk size.
const MIN_CHUNK: u64 = 1 << 20;
const MAX_CHUNK: u64 = 8 << 20;

/// An I/O flag (RWF_DONTCACHE) probed by its first uses and shared by the
/// threads: until it has worked once, EOPNOTSUPP or EINVAL means "not on
/// this kernel or file system" and switches it off for the rest of the copy.
struct FlagProbe(AtomicU8);

impl FlagProbe {
    const UNTRIED: u8 = 0;
    const WORKS: u8 = 1;
    const MISSING: u8 = 2;

    fn new(enabled: bool) -> Self {
        FlagProbe(AtomicU8::new(if enabled {
            Self::UNTRIED
        } else {
            Self::MISSING
        }))
    }

    /// Runs `op`, which uses the flag, unless the flag is known to be
    /// missing. `None`: it is (or `op` just found out); use the fallback.
    fn attempt(&self, op: impl FnOnce() -> Result<()>) -> Option<Result<()>> {
        if self.0.load(Ordering::Relaxed) == Self::MISSING {
            return None;
        }
        match op() {
            Ok(()) => {
                self.0.store(Self::WORKS, Ordering::Relaxed);
                Some(Ok(()))
            }
            Err(e) if self.0.load(Ordering::Relaxed) == Self::UNTRIED && unsupported(&e) => {
                self.0.store(Self::MISSING, Ordering::Relaxed);
                None
            }
            Err(e) => Some(Err(e)),
        }
    }
}

fn io_err<'p>(
    op: &'static str,
    path: &'p Path,
    offset: Option<u64>,
) -> impl FnOnce(io::Error) -> Error + 'p {
    move |e| Error::io(op, path, offset, e)
}

fn refused(path: &Path, why: impl Into<String>) -> Error {
    Error::Refused {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// The source's device's largest request (queue/max_sectors_kb), clamped
/// to 1–8 MiB; 4 MiB when sysfs does not say.
fn tuned_chunk(meta: &fs::Metadata) -> u64 {
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    let read = |p: String| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok();
    let kb = read(format!("{base}/queue/max_sectors_kb"))
        .or_else(|| read(format!("{base}/../queue/max_sectors_kb")));
    kb.map_or(4 << 20, |kb| (kb << 10).clamp(MIN_CHUNK, MAX_CHUNK))
}

/// The source's data extents, `(offset, len)`, from SEEK_DATA/SEEK_HOLE;
/// the whole file where the file system cannot say.
fn data_extents(file: &File, size: u64) -> Vec<(u64, u64)> {
    use rustix::fs::{seek, SeekFrom};
    let mut out = Vec::new();
    let mut at = 0;
    while at < size {
        let start = match seek(file, SeekFrom::Data(at)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return vec![(0, size)],
        };
        if start >= size {
            break;
        }
        let end = match seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(size),
            Err(_) => size,
        };
        out.push((start, end - start));
        at = end;
    }
    out
}

/// One chunk of work: `[offset, offset + len)` of the file, with the parts
/// of it that hold data.
#[derive(Debug)]
struct Task {
    offset: u64,
    len: u64,
    data: Vec<(u64, u64)>,
}

fn plan(size: u64, chunk: u64, extents: &[(u64, u64)]) -> Vec<Task> {
    let mut tasks = Vec::new();
    let mut ext = extents.iter().peekable();
    let mut offset = 0;
    while offset < size {
        let end = (offset + chunk).min(size);
        let mut data = Vec::new();
        while let Some(&&(s, n)) = ext.peek() {
            if s >= end {
                break;
            }
            let (a, b) = (s.max(offset), (s + n).min(end));
            if a < b {
                data.push((a, b - a));
            }
            if s + n <= end {
                ext.next();
            } else {
                break;
            }
        }
        tasks.push(Task {
            offset,
            len: end - offset,
            data,
        });
        offset = end;
    }
    tasks
}

/// How many pieces went each way, to report which paths a copy used.
#[derive(Default)]
struct Used {
    direct: AtomicU64,
    dontcache: AtomicU64,
    residency: AtomicU64,
    windows: AtomicU64,
    buffered: AtomicU64,
}

impl Used {
    fn names(&self) -> String {
        let all = [
            ("direct", &self.direct),
            ("dontcache", &self.dontcache),
            ("residency", &self.residency),
            ("windows", &self.windows),
            ("buffered", &self.buffered),
        ];
        let used: Vec<&str> = all
            .iter()
            .filter(|(_, n)| n.load(Ordering::Relaxed) > 0)
            .map(|(name, _)| *name)
            .collect();
        if used.is_empty() {
            "none".into()
        } else {
            used.join("+")
        }
    }
}

fn bump(n: &AtomicU64) {
    n.fetch_add(1, Ordering::Relaxed);
}

/// A second descriptor of the same file (never the path again: see
/// `place`) opened with O_DIRECT, and the alignment it needs; `None` where
/// the file system refuses O_DIRECT.
fn open_direct(file: &File, write: bool) -> Option<(File, usize)> {
    let access = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    let f = File::from(sys::reopen(file, access | OFlags::DIRECT).ok()?);
    let (mem, off) = sys::dio_alignment(&f)?;
    Some((f, mem.max(off).max(512) as usize))
}

fn aligned(buf: &[u8], offset: u64, align: usize) -> bool {
    (buf.as_ptr() as usize) % align == 0 && offset % align as u64 == 0 && buf.len() % align == 0
}

/// Whether a flagged preadv2/pwritev2 failed because the flag is not
/// supported here (rather than for a real reason).
fn unsupported(e: &Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}

/// Reads from the source without disturbing its cached pages (or with the
/// behaviour of the other modes).
struct SrcReader<'a> {
    file: &'a File,
    path: &'a Path,
    mode: CacheMode,
    want_direct: bool,
    dontcache: FlagProbe,
    direct: OnceLock<Option<(File, usize)>>,
    used: Used,
}

impl<'a> SrcReader<'a> {
    fn new(file: &'a File, path: &'a Path, opts: &CopyOptions) -> Self {
        if opts.cache == CacheMode::Neutral {
            // Chunks are read whole, in one I/O each (seed 001's rule), so
            // the kernel's readahead adds nothing — and what it would read
            // past a chunk that another thread reads with O_DIRECT, or past
            // the last chunk read, would stay cached. Off, for this
            // descriptor only.
            let _ = sys::fadvise(file, 0, 0, rustix::fs::Advice::Random);
        }
        SrcReader {
            file,
            path,
            mode: opts.cache,
            want_direct: opts.direct,
            dontcache: FlagProbe::new(opts.dontcache),
            direct: OnceLock::new(),
            used: Used::default(),
        }
    }

    fn direct(&self) -> Option<&(File, usize)> {
        self.direct
            .get_or_init(|| open_direct(self.file, false))
            .as_ref()
    }

    /// Fills `buf` from `offset`; EOF before the end is an error (the source
    /// shrank under the copy).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self.mode {
            CacheMode::Keep => {
                bump(&self.used.buffered);
                self.fill(self.file, buf, offset, 0)
            }
            CacheMode::Drop => {
                bump(&self.used.buffered);
                self.fill(self.file, buf, offset, 0)?;
                let _ = sys::evict_range(self.file, offset, buf.len() as u64);
                Ok(())
            }
            CacheMode::Neutral => {
                // Nothing of it cached: O_DIRECT skips the page cache (no
                // page allocated, filled, copied and dropped).
                if self.want_direct
                    && sys::cachestat(self.file, offset, buf.len() as u64)
                        .is_ok_and(|st| st.cached == 0)
                    && self.read_direct(buf, offset)?
                {
                    return Ok(());
                }
                let flagged = || self.fill(self.file, buf, offset, sys::RWF_DONTCACHE);
                if let Some(r) = self.dontcache.attempt(flagged) {
                    if r.is_ok() {
                        bump(&self.used.dontcache);
                    }
                    return r;
                }
                self.read_keeping_residency(buf, offset)
            }
        }
    }

    /// The fallback: look at the chunk's residency now, read, drop only
    /// what was not cached before.
    fn read_keeping_residency(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        // (The descriptor's readahead is off, see `new`: otherwise pages past
        // the chunk would look to the next chunk like pages cached before.)
        let len = buf.len() as u64;
        let page = residency::page_size();
        let (first, end) = (offset / page, (offset + len).div_ceil(page));
        let pages = end - first;
        let cached = match sys::cachestat(self.file, first * page, pages * page) {
            Ok(st) => Some(st.cached),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => None,
            Err(_) => residency::page_map(self.file, first * page, pages * page)
                .ok()
                .flatten()
                .map(|m| m.iter().filter(|&&c| c).count() as u64),
        };
        let Some(cached) = cached else {
            // Residency cannot be seen: O_DIRECT neither adds nor drops.
            return self.read_unseen(buf, offset);
        };
        bump(&self.used.residency);
        if cached == 0 {
            self.fill(self.file, buf, offset, 0)?;
            let _ = sys::evict_range(self.file, offset, len);
            return Ok(());
        }
        if cached >= pages {
            return self.fill(self.file, buf, offset, 0);
        }
        let map = residency::page_map(self.file, first * page, pages * page).map_err(io_err(
            "mincore",
            self.path,
            Some(offset),
        ))?;
        let Some(map) = map else {
            return self.read_unseen(buf, offset);
        };
        self.fill(self.file, buf, offset, 0)?;
        for (s, n) in residency::runs(&map, false) {
            let _ = sys::evict_range(self.file, (first + s) * page, n * page);
        }
        Ok(())
    }

    fn read_unseen(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if self.read_direct(buf, offset)? {
            return Ok(());
        }
        // No O_DIRECT either: the one case where a neutral copy may leave
        // source pages behind.
        bump(&self.used.buffered);
        self.fill(self.file, buf, offset, 0)
    }

    /// Reads with O_DIRECT, through an aligned bounce buffer when `buf` or
    /// `offset` is not aligned. `false` when O_DIRECT is not available.
    fn read_direct(&self, buf: &mut [u8], offset: u64) -> Result<bool> {
        let Some((direct, align)) = self.direct() else {
            return Ok(false);
        };
        let align = *align;
        if aligned(buf, offset, align) {
            self.fill(direct, buf, offset, 0)?;
            bump(&self.used.direct);
            return Ok(true);
        }
        let a = align as u64;
        let start = offset / a * a;
        let end = (offset + buf.len() as u64).div_ceil(a) * a;
        let mut bounce = AlignedBuf::new((end - start) as usize, align);
        let want = (offset - start) as usize + buf.len();
        let mut got = 0;
        while got < want {
            let at = start + got as u64;
            match sys::pread_flags(direct, &mut bounce.as_mut_slice()[got..], at, 0) {
                Ok(0) => return Err(shrank(self.path, at)),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", self.path, Some(at), e)),
            }
        }
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce.as_slice()[skip..skip + buf.len()]);
        bump(&self.used.direct);
        Ok(true)
    }

    fn fill(&self, file: &File, buf: &mut [u8], offset: u64, flags: i32) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            match sys::pread_flags(file, &mut buf[done..], at, flags) {
                Ok(0) => return Err(shrank(self.path, at)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", self.path, Some(at), e)),
            }
        }
        Ok(())
    }
}

fn shrank(path: &Path, at: u64) -> Error {
    Error::io(
        "read",
        path,
        Some(at),
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the source ended early (truncated during the copy?)",
        ),
    )
}

/// Writes the destination, keeping it out of the cache unless `Keep`.
struct DstWriter<'a> {
    file: &'a File,
    path: &'a Path,
    mode: CacheMode,
    dontcache: FlagProbe,
    direct: Option<(File, usize)>,
    direct_ok: AtomicBool,
    used: Used,
    /// Tests of `--verify` only: flip the byte at this destination offset
    /// as it is written (see [`CopyOptions`]'s test field). Nothing outside
    /// the crate's own tests can set it: a library must not let an
    /// environment variable corrupt a program's copies.
    #[cfg(test)]
    corrupt_at: Option<u64>,
}

impl<'a> DstWriter<'a> {
    fn new(file: &'a File, path: &'a Path, opts: &CopyOptions) -> Self {
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
            direct,
            used: Used::default(),
            #[cfg(test)]
            corrupt_at: opts.corrupt_write_at,
        }
    }

    fn write_all_at(
        &self,
        buf: &[u8],
        offset: u64,
        windows: &mut VecDeque<(u64, u64)>,
    ) -> Result<()> {
        #[cfg(test)]
        if let Some(at) = self.corrupt_at {
            if (offset..offset + buf.len() as u64).contains(&at) {
                let mut bad = buf.to_vec();
                bad[(at - offset) as usize] ^= 0xff;
                return self.write_clean(&bad, offset, windows);
            }
        }
        self.write_clean(buf, offset, windows)
    }

    fn write_clean(
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

    fn drop_window(&self, offset: u64, len: u64) -> Result<()> {
        sys::sync_range(self.file, offset, len, true).map_err(io_err(
            "sync_file_range",
            self.path,
            Some(offset),
        ))?;
        let _ = sys::evict_range(self.file, offset, len);
        Ok(())
    }

    fn drain(&self, windows: &mut VecDeque<(u64, u64)>) -> Result<()> {
        while let Some((o, n)) = windows.pop_front() {
            self.drop_window(o, n)?;
        }
        Ok(())
    }

    fn put(&self, file: &File, buf: &[u8], offset: u64, flags: i32) -> Result<()> {
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
    fn make_zero(
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
enum Zeroing {
    /// Zeroed blocks stay allocated (a block device).
    Range,
    /// Blocks are deallocated (a regular file).
    Hole,
}

fn cached_pages(file: &File) -> Option<u64> {
    residency::of_range(file, 0, u64::MAX)
        .ok()
        .and_then(|s| s.known().map(|r| r.cached))
}

/// Largest chunk a copy accepts: each of `depth` threads holds one.
pub const MAX_CHUNK_BYTES: u64 = 256 << 20;
/// Most chunks in flight.
pub const MAX_DEPTH: usize = 256;
/// Most memory the chunk buffers of one copy may take together.
const MAX_BUFFERS: u64 = 4 << 30;

/// Checks the options a caller could get wrong: sizes out of range come
/// back as a clear error instead of an allocation that aborts or a loop
/// that never ends.
fn check_options(opts: &CopyOptions) -> Result<()> {
    let bad = |why: String| Err(Error::Invalid { what: "copy", why });
    if let Some(c) = opts.chunk {
        if !(ZERO_BLOCK..=MAX_CHUNK_BYTES).contains(&c) {
            return bad(format!(
                "chunk of {c} bytes: it must be from {} to {} bytes",
                ZERO_BLOCK, MAX_CHUNK_BYTES
            ));
        }
    }
    if opts.depth == 0 || opts.depth > MAX_DEPTH {
        return bad(format!(
            "depth {}: it must be from 1 to {MAX_DEPTH}",
            opts.depth
        ));
    }
    let chunk = opts.chunk.unwrap_or(MAX_CHUNK);
    if chunk.saturating_mul(opts.depth as u64) > MAX_BUFFERS {
        return bad(format!(
            "{} chunks of {chunk} bytes in flight would take more than {MAX_BUFFERS} bytes",
            opts.depth
        ));
    }
    if opts.bwlimit == Some(0) {
        return bad("a bandwidth limit of 0 would never finish".into());
    }
    Ok(())
}

/// The source's identity, as a journal records it.
fn source_id(meta: &fs::Metadata, kind: SrcKind, chunk: u64) -> Option<SourceId> {
    let size = match kind {
        SrcKind::Regular(n) | SrcKind::Block(n) => n,
        SrcKind::Stream => return None,
    };
    Some(SourceId {
        size,
        mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        ino: meta.ino(),
        dev: meta.dev(),
        block: matches!(kind, SrcKind::Block(_)),
        chunk,
    })
}

/// The temporary file of a copy into a directory, removed with its
/// journal unless the copy completes (or the process is killed: then both
/// stay, for `--resume`).
struct TmpGuard<'a> {
    dir: &'a OwnedFd,
    name: Vec<u8>,
    journal: Option<Journal>,
    state: Option<&'a StateDir>,
    armed: bool,
}

impl TmpGuard<'_> {
    fn finish(mut self) {
        self.armed = false;
        if let (Some(j), Some(st)) = (self.journal.take(), self.state) {
            j.remove(st);
        }
    }
}

impl Drop for TmpGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = rustix::fs::unlinkat(self.dir, place::os(&self.name), AtFlags::empty());
            if let (Some(j), Some(st)) = (self.journal.take(), self.state) {
                j.remove(st);
            }
        }
    }
}

/// Copies `src` to `dst` (a file, a block device, or a directory to copy
/// into). `progress` is called from the copying threads as chunks finish.
///
/// `src` is opened once (a link there is followed, as cp does); a regular
/// destination is written under a new unpredictable name beside it and
/// renamed onto `dst`, replacing whatever is there — a link is replaced, not
/// followed, unless it is `dst` itself and belongs to the caller or root
/// (see the `place` module for the rules).
pub fn copy(
    src: &Path,
    dst: &Path,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    check_options(opts)?;
    let source = Source::open(src, opts.resume)?;
    let target = place::resolve(&source, dst)?;
    copy_to(source, target, opts, progress)
}

/// Copies an open source to a resolved target.
fn copy_to(
    source: Source,
    target: Target,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CopyReport> {
    let started = Instant::now();
    let src = source.path.as_path();
    let src_file = &source.file;
    let src_meta = &source.meta;
    let size = source.size();
    let stream = size.is_none();
    if opts.resume && matches!(source.kind, SrcKind::Block(_)) && !opts.verify {
        return Err(refused(
            src,
            "a block device's contents can change with nothing to show it: resume its copy \
             only with --verify",
        ));
    }
    let chunk = opts
        .chunk
        .unwrap_or_else(|| tuned_chunk(src_meta))
        .clamp(ZERO_BLOCK, MAX_CHUNK_BYTES)
        .div_ceil(ZERO_BLOCK)
        * ZERO_BLOCK;
    let mut report = CopyReport {
        src_cached_before: if stream { None } else { cached_pages(src_file) },
        ..CopyReport::default()
    };

    // Open the destination.
    let state = match &target {
        Target::InDir { .. } => Some(StateDir::open()),
        Target::Block { .. } => None,
    };
    let state_dir = state.as_ref().and_then(|s| s.as_ref().ok());
    let mut done_chunks = HashMap::new();
    let (dst_file, dst_path, guard) = match &target {
        Target::Block { file, path } => {
            let dev_size = rustix::fs::seek(file, rustix::fs::SeekFrom::End(0))
                .map_err(|e| Error::io("seek", path, None, e.into()))?;
            if let Some(size) = size {
                if size > dev_size {
                    return Err(refused(
                        path,
                        format!("the device holds {dev_size} bytes, the source has {size}"),
                    ));
                }
            }
            let f = file.try_clone().map_err(io_err("dup", path, None))?;
            (f, path.clone(), None)
        }
        Target::InDir { dir, name, path } => {
            let dir_st =
                rustix::fs::fstat(dir).map_err(|e| Error::io("stat", path, None, e.into()))?;
            let dir_id = (dir_st.st_dev, dir_st.st_ino);
            let journal = match &state {
                Some(Ok(st)) => match Journal::lock(st, dir_id, place::bytes(name)) {
                    Ok(Some(j)) => Some(j),
                    Ok(None) => {
                        return Err(refused(
                            path,
                            "another ahead copy to this destination is under way",
                        ))
                    }
                    Err(e) => return Err(Error::io("open journal", st.path(), None, e)),
                },
                Some(Err(why)) if opts.resume => {
                    return Err(refused(
                        path,
                        format!("cannot resume: no private journal directory ({why})"),
                    ))
                }
                _ => None,
            };
            let src_id = source_id(src_meta, source.kind, chunk);
            let loaded = match &journal {
                Some(j) => j.load().map_err(io_err("read", j.path(), None))?,
                None => None,
            };
            let mut resumed = None;
            if let Some(l) = loaded {
                let ours = l.header.dir == dir_id && l.header.name == place::bytes(name);
                let old_tmp = place::open_tmp(dir, place::os(&l.header.tmp_name))
                    .ok()
                    .filter(|f| {
                        f.metadata()
                            .is_ok_and(|m| (m.dev(), m.ino()) == l.header.tmp)
                    });
                if opts.resume && ours && src_id.is_some() {
                    if Some(&l.header.src) != src_id.as_ref() {
                        return Err(refused(
                            path,
                            "the interrupted copy was of another source, or the source changed \
                             since (or another --chunk was used); run without --resume to start \
                             over",
                        ));
                    }
                    if let Some(f) = old_tmp {
                        resumed = Some((f, l.header.tmp_name, l.done));
                    }
                } else if ours && old_tmp.is_some() {
                    // A fresh copy clears away what an earlier one left.
                    let _ =
                        rustix::fs::unlinkat(dir, place::os(&l.header.tmp_name), AtFlags::empty());
                }
            }
            let (f, tmp_name) = match resumed {
                Some((f, tmp_name, done)) => {
                    done_chunks = done;
                    (f, tmp_name)
                }
                None => {
                    let token = sys::random_token().map_err(io_err("getrandom", path, None))?;
                    let tmp_name = journal::tmp_name(place::bytes(name), &token);
                    let tmp_path = path.with_file_name(place::os(&tmp_name));
                    let f = place::create_tmp(
                        dir,
                        place::os(&tmp_name),
                        place::copy_mode(src_meta, false) & 0o777,
                    )
                    .map_err(io_err("create", &tmp_path, None))?;
                    if let Some(j) = &journal {
                        let m = f.metadata().map_err(io_err("stat", &tmp_path, None))?;
                        let header = Header {
                            token,
                            dir: dir_id,
                            name: place::bytes(name).to_vec(),
                            tmp_name: tmp_name.clone(),
                            tmp: (m.dev(), m.ino()),
                            src: src_id.clone().unwrap_or(SourceId {
                                size: 0,
                                mtime_ns: 0,
                                ctime_ns: 0,
                                ino: 0,
                                dev: 0,
                                block: false,
                                chunk,
                            }),
                        };
                        j.start(&header).map_err(io_err("write", j.path(), None))?;
                    }
                    (f, tmp_name)
                }
            };
            let tmp_path = path.with_file_name(place::os(&tmp_name));
            let guard = TmpGuard {
                dir,
                name: tmp_name,
                journal,
                state: state_dir,
                armed: true,
            };
            if let Some(size) = size {
                f.set_len(size)
                    .map_err(io_err("truncate", &tmp_path, None))?;
            }
            (f, tmp_path, Some(guard))
        }
    };
    report.resumable = guard.as_ref().is_some_and(|g| g.journal.is_some());
    report.dst = match &target {
        Target::Block { path, .. } | Target::InDir { path, .. } => path.clone(),
    };
    let dst_write_path: &Path = &dst_path;
    let block_dst = matches!(target, Target::Block { .. });
    let journal = guard.as_ref().and_then(|g| g.journal.as_ref());

    let reader = SrcReader::new(src_file, src, opts);
    let writer = DstWriter::new(&dst_file, dst_write_path, opts);
    // Reads the destination back: resumed chunks are checked against their
    // journal lines; copy_file_range'd chunks are hashed from it.
    let readback = SrcReader::new(&dst_file, dst_write_path, opts);
    let mut src_sum = None;

    // Reflink: whole file, shares extents, no cache touched.
    let mut reflinked = false;
    if opts.reflink && !block_dst && !stream && src_meta.is_file() && done_chunks.is_empty() {
        reflinked = rustix::fs::ioctl_ficlone(&dst_file, src_file).is_ok();
    }

    if reflinked {
        report.method = "reflink";
        report.bytes = size.unwrap_or(0);
        progress(Progress {
            done: report.bytes,
            total: size,
        });
    } else if let Some(size) = size {
        let extents = if src_meta.is_file() {
            data_extents(src_file, size)
        } else {
            vec![(0, size)]
        };
        let tasks = plan(size, chunk, &extents);
        let cfr = opts.cache == CacheMode::Keep && !block_dst && src_meta.is_file();
        report.method = if cfr { "copy_file_range" } else { "chunks" };
        let shared = Shared {
            tasks: &tasks,
            done_chunks: &done_chunks,
            readback: &readback,
            next: AtomicU64::new(0),
            done_bytes: AtomicU64::new(0),
            data_bytes: AtomicU64::new(0),
            holes_bytes: AtomicU64::new(0),
            resumed_bytes: AtomicU64::new(0),
            resume_rejected: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            journal,
            started: Instant::now(),
            total: size,
        };
        let use_cfr = AtomicBool::new(cfr);
        std::thread::scope(|s| {
            for _ in 0..opts.depth.max(1).min(tasks.len().max(1)) {
                s.spawn(|| {
                    let r = copy_worker(
                        &shared, &reader, &writer, src_file, &dst_file, opts, chunk, block_dst,
                        &use_cfr, progress,
                    );
                    if let Err(e) = r {
                        shared.failed.store(true, Ordering::Relaxed);
                        shared
                            .error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                });
            }
        });
        if let Some(e) = shared.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        if !use_cfr.load(Ordering::Relaxed) && cfr {
            report.method = "chunks";
        }
        report.bytes = size;
        report.data_bytes = shared.data_bytes.into_inner();
        report.holes_bytes = shared.holes_bytes.into_inner();
        report.resumed_bytes = shared.resumed_bytes.into_inner();
        report.resume_rejected_chunks = shared.resume_rejected.into_inner();
    } else {
        report.method = "stream";
        let (bytes, sum) = copy_stream(src_file, src, &writer, chunk, opts, progress)?;
        report.bytes = bytes;
        report.data_bytes = bytes;
        if !block_dst {
            dst_file
                .set_len(bytes)
                .map_err(io_err("truncate", dst_write_path, None))?;
        }
        src_sum = sum;
    }
    report.read_path = reader.used.names();
    report.write_path = writer.used.names();

    // Make it durable, then drop what the copy left in the cache.
    if opts.sync {
        dst_file
            .sync_all()
            .map_err(io_err("fsync", dst_write_path, None))?;
    } else if opts.cache != CacheMode::Keep {
        // Pages must be clean to be dropped.
        sys::sync_range(&dst_file, 0, 0, true).map_err(io_err(
            "sync_file_range",
            dst_write_path,
            None,
        ))?;
    }
    if opts.cache != CacheMode::Keep {
        let _ = sys::evict_range(&dst_file, 0, 0);
    }
    if opts.cache == CacheMode::Drop && !stream {
        let _ = sys::evict_range(src_file, 0, 0);
    }
    // Verify before the destination gets its name: a copy that does not
    // match never appears complete.
    if opts.verify {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| match &src_sum {
                Some(sum) => Ok(sum.clone()),
                None => checksum(src_file, src, report.bytes, opts),
            });
            let b = checksum(&dst_file, dst_write_path, report.bytes, opts);
            (a.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), b)
        });
        let (a, b) = (a?, b?);
        if a != b {
            return Err(Error::Mismatch {
                path: report.dst.clone(),
                src: a,
                dst: b,
            });
        }
        report.checksum = Some(a);
    }
    if let (Target::InDir { dir, name, path }, Some(guard)) = (&target, guard) {
        if opts.preserve {
            preserve(&dst_file, src_meta).map_err(io_err(
                "set the mode and times of",
                dst_write_path,
                None,
            ))?;
        }
        // renameat replaces whatever is at the name (a link included) and
        // follows nothing.
        rustix::fs::renameat(dir, place::os(&guard.name), dir, name.as_os_str())
            .map_err(|e| Error::io("rename into place", path, None, e.into()))?;
        guard.finish();
        if opts.sync {
            rustix::fs::fsync(dir)
                .map_err(|e| Error::io("fsync the directory of", path, None, e.into()))?;
        }
    }

    if !stream {
        report.src_cached_after = cached_pages(src_file);
    }
    report.dst_cached_after = if block_dst {
        residency::of_range(&dst_file, 0, report.bytes)
            .ok()
            .and_then(|s| s.known().map(|r| r.cached))
    } else {
        cached_pages(&dst_file)
    };
    report.elapsed = started.elapsed();
    Ok(report)
}

/// `cp -p` for one file: the source's mode (setuid, setgid and sticky only
/// when the caller owns the source) and its access and modification times.
fn preserve(dst: &File, src: &fs::Metadata) -> io::Result<()> {
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

/// State the copying threads share.
struct Shared<'a> {
    tasks: &'a [Task],
    /// Chunks an interrupted copy finished, with what they held.
    done_chunks: &'a HashMap<u64, ChunkSum>,
    /// Reads the destination back.
    readback: &'a SrcReader<'a>,
    next: AtomicU64,
    done_bytes: AtomicU64,
    data_bytes: AtomicU64,
    holes_bytes: AtomicU64,
    resumed_bytes: AtomicU64,
    resume_rejected: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    journal: Option<&'a Journal>,
    started: Instant,
    total: u64,
}

#[allow(clippy::too_many_arguments)]
fn copy_worker(
    sh: &Shared<'_>,
    reader: &SrcReader<'_>,
    writer: &DstWriter<'_>,
    src: &File,
    dst: &File,
    opts: &CopyOptions,
    chunk: u64,
    block_dst: bool,
    use_cfr: &AtomicBool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<()> {
    let mut buf = AlignedBuf::new(chunk as usize, 4096);
    let zeroes = vec![0u8; ZERO_BLOCK as usize];
    let mut windows = VecDeque::new();
    let result = (|| -> Result<()> {
        loop {
            if sh.failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let i = sh.next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some(task) = sh.tasks.get(i) else {
                return Ok(());
            };
            if let Some(sum) = sh.done_chunks.get(&task.offset) {
                // Kept only if the temporary file still holds what the
                // journal says was written there.
                let b = &mut buf.as_mut_slice()[..task.len as usize];
                let holds = sh.readback.read_exact_at(b, task.offset).is_ok()
                    && match sum {
                        ChunkSum::Hole => is_zero(b),
                        ChunkSum::Xxh3(h) => xxh3_64(b) == *h,
                    };
                if holds {
                    sh.resumed_bytes.fetch_add(task.len, Ordering::Relaxed);
                    report_progress(sh, task.len, progress);
                    continue;
                }
                sh.resume_rejected.fetch_add(1, Ordering::Relaxed);
                if !block_dst {
                    // Redone below, where the copy leaves holes unwritten:
                    // the old bytes must go (a block device has its
                    // zeroes written).
                    writer.make_zero(
                        Zeroing::Hole,
                        task.offset,
                        task.len,
                        &zeroes,
                        &mut windows,
                    )?;
                }
            }
            if let Some(rate) = opts.bwlimit {
                // Pace against the bytes finished so far plus this chunk
                // (with several threads, up to `depth` chunks run ahead).
                let planned = sh.done_bytes.load(Ordering::Relaxed) + task.len;
                let due = Duration::from_secs_f64(planned as f64 / rate.max(1) as f64);
                let now = sh.started.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let mut data = 0;
            let mut covered = 0;
            // What the journal will say the chunk holds: its bytes, with
            // zeroes for the source's holes.
            let mut sum = sh.journal.map(|_| Xxh3::new());
            let mut hashed_to = task.offset;
            for &(off, len) in &task.data {
                covered += len;
                if let Some(h) = sum.as_mut() {
                    hash_zeroes(h, off - hashed_to, &zeroes);
                    hashed_to = off + len;
                }
                if use_cfr.load(Ordering::Relaxed) {
                    match copy_range(src, dst, off, len) {
                        Ok(()) => {
                            data += len;
                            if let Some(h) = sum.as_mut() {
                                let b = &mut buf.as_mut_slice()[..len as usize];
                                sh.readback.read_exact_at(b, off)?;
                                h.update(b);
                            }
                            continue;
                        }
                        Err(e)
                            if matches!(
                                e.raw_os_error(),
                                Some(libc::EXDEV | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
                            ) =>
                        {
                            use_cfr.store(false, Ordering::Relaxed);
                        }
                        Err(e) => {
                            return Err(Error::io("copy_file_range", writer.path, Some(off), e))
                        }
                    }
                }
                let b = &mut buf.as_mut_slice()[..len as usize];
                reader.read_exact_at(b, off)?;
                if let Some(h) = sum.as_mut() {
                    h.update(b);
                }
                data += write_sparse(
                    writer,
                    b,
                    off,
                    opts.sparse,
                    block_dst,
                    &zeroes,
                    &mut windows,
                    &sh.holes_bytes,
                )?;
            }
            // The chunk's holes in the source.
            let holes = task.len - covered;
            if holes > 0 {
                sh.holes_bytes.fetch_add(holes, Ordering::Relaxed);
                if block_dst {
                    let mut at = task.offset;
                    for &(off, len) in &task.data {
                        if off > at {
                            writer.make_zero(
                                Zeroing::Range,
                                at,
                                off - at,
                                &zeroes,
                                &mut windows,
                            )?;
                        }
                        at = off + len;
                    }
                    if at < task.offset + task.len {
                        writer.make_zero(
                            Zeroing::Range,
                            at,
                            task.offset + task.len - at,
                            &zeroes,
                            &mut windows,
                        )?;
                    }
                }
            }
            sh.data_bytes.fetch_add(data, Ordering::Relaxed);
            if let (Some(j), Some(mut h)) = (sh.journal, sum) {
                let line = if task.data.is_empty() {
                    ChunkSum::Hole
                } else {
                    hash_zeroes(&mut h, task.offset + task.len - hashed_to, &zeroes);
                    ChunkSum::Xxh3(h.digest())
                };
                j.done(task.offset, line)
                    .map_err(io_err("write", j.path(), None))?;
            }
            report_progress(sh, task.len, progress);
        }
    })();
    let drained = writer.drain(&mut windows);
    result.and(drained)
}

/// Feeds `n` zero bytes to `h`.
fn hash_zeroes(h: &mut Xxh3, mut n: u64, zeroes: &[u8]) {
    while n > 0 {
        let k = n.min(zeroes.len() as u64);
        h.update(&zeroes[..k as usize]);
        n -= k;
    }
}

fn report_progress(sh: &Shared<'_>, n: u64, progress: &(dyn Fn(Progress) + Sync)) {
    let done = sh.done_bytes.fetch_add(n, Ordering::Relaxed) + n;
    progress(Progress {
        done,
        total: Some(sh.total),
    });
}

fn copy_range(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let mut so = offset + done;
        let mut doff = so;
        match rustix::fs::copy_file_range(
            src,
            Some(&mut so),
            dst,
            Some(&mut doff),
            (len - done) as usize,
        ) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the source ended early (truncated during the copy?)",
                ))
            }
            Ok(n) => done += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes `buf` (file bytes at `offset`), leaving 64 KiB blocks of zeroes
/// as holes (zeroed on a block device). Returns the bytes written.
#[allow(clippy::too_many_arguments)]
fn write_sparse(
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
            }
        } else {
            writer.write_all_at(&buf[i..j], at, windows)?;
            written += (j - i) as u64;
        }
        i = j;
    }
    Ok(written)
}

fn is_zero(b: &[u8]) -> bool {
    let (head, body, tail) = // SAFETY: u128 has no invalid bit patterns.
        unsafe { b.align_to::<u128>() };
    head.iter().all(|&x| x == 0) && body.iter().all(|&x| x == 0) && tail.iter().all(|&x| x == 0)
}

/// Copies a stream (pipe, socket, character device) in order; returns the
/// bytes copied and, when verifying, the BLAKE3 of what was read.
fn copy_stream(
    src: &File,
    src_path: &Path,
    writer: &DstWriter<'_>,
    chunk: u64,
    opts: &CopyOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<(u64, Option<String>)> {
    let mut buf = vec![0u8; chunk as usize];
    let mut windows = VecDeque::new();
    let mut hasher = opts.verify.then(blake3::Hasher::new);
    let mut offset = 0u64;
    let mut src = src;
    let result = (|| -> Result<()> {
        loop {
            let mut filled = 0;
            while filled < buf.len() {
                match src.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(Error::io("read", src_path, Some(offset + filled as u64), e))
                    }
                }
            }
            if filled == 0 {
                return Ok(());
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&buf[..filled]);
            }
            writer.write_all_at(&buf[..filled], offset, &mut windows)?;
            offset += filled as u64;
            progress(Progress {
                done: offset,
                total: None,
            });
        }
    })();
    let drained = writer.drain(&mut windows);
    result.and(drained)?;
    Ok((
        offset,
        hasher.map(|h| format!("blake3:{}", h.finalize().to_hex())),
    ))
}

/// `blake3:HEX` of the file at `path` (the whole of it, or of a block
/// device), read as a copy in `opts.cache` mode reads: by default without
/// disturbing the page cache.
pub fn checksum_file(path: &Path, opts: &CopyOptions) -> Result<String> {
    let file = File::open(path).map_err(io_err("open", path, None))?;
    let len = rustix::fs::seek(&file, rustix::fs::SeekFrom::End(0))
        .map_err(|e| Error::io("seek", path, None, e.into()))?;
    checksum(&file, path, len, opts)
}

/// BLAKE3 of the first `len` bytes of `file`, read without disturbing the
/// cache (as the copy reads).
fn checksum(file: &File, path: &Path, len: u64, opts: &CopyOptions) -> Result<String> {
    let reader = SrcReader::new(file, path, opts);
    let mut hasher = blake3::Hasher::new();
    let mut buf = AlignedBuf::new(4 << 20, 4096);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        let b = &mut buf.as_mut_slice()[..n];
        reader.read_exact_at(b, at)?;
        hasher.update(b);
        at += n as u64;
    }
    Ok(format!("blake3:{}", hasher.finalize().to_hex()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_splits_extents_at_chunk_boundaries() {
        let t = plan(10, 4, &[(1, 2), (5, 4)]);
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.offset, t.len, t.data.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 4, vec![(1, 2)]),
                (4, 4, vec![(5, 3)]),
                (8, 2, vec![(8, 1)]),
            ]
        );
        let t = plan(8, 4, &[]);
        assert!(t.iter().all(|t| t.data.is_empty()));
        assert_eq!(t.len(), 2);
        assert!(plan(0, 4, &[]).is_empty());
    }

    #[test]
    fn a_corrupted_write_fails_verification_and_no_destination_appears() {
        let dir = tempfile::tempdir_in(crate::testdata::scratch_root()).unwrap();
        let src = dir.path().join("src");
        crate::testdata::write_file(&src, 3 * (1 << 20) + 7).unwrap();
        let dst = dir.path().join("dst");
        let corrupt = CopyOptions {
            verify: true,
            corrupt_write_at: Some(1_234_567),
            ..CopyOptions::default()
        };
        match copy(&src, &dst, &corrupt, &|_| {}) {
            Err(Error::Mismatch { .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(!dst.exists(), "a destination that does not match appeared");
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".ahead-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // Without verification the same fault goes unseen: that is what
        // `verify` is for.
        let unverified = CopyOptions {
            verify: false,
            ..corrupt
        };
        copy(&src, &dst, &unverified, &|_| {}).unwrap();
        assert_ne!(fs::read(&src).unwrap(), fs::read(&dst).unwrap());
    }

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[0u8; 1000][3..]));
        let mut b = vec![0u8; 70_000];
        b[69_999] = 1;
        assert!(!is_zero(&b));
        assert!(is_zero(&[]));
    }
}
