//! A disk tier under the engine's memory cache for objects: chunks of
//! object data kept in files under a directory, shared by every process
//! that names the same directory, so that an object read twice is fetched
//! once (a second epoch of training, a query run again, the workers of a
//! DataLoader).
//!
//! # Layout
//!
//! The tier lives in `DIR/ahead-tier-v1/` (made 0700; the caller's own,
//! written by no one else, or it is refused). An object's version is named
//! by a 128-bit hash of the store's name, the URL, the ETag and the size,
//! and has two files there:
//!
//! * `NAME.dat`: the object's bytes at their own offsets, a sparse file
//!   written in chunks of [`CHUNK`] bytes with O_DIRECT, so that neither
//!   writing the tier nor reading it back leaves the data in the host's
//!   page cache (where the file system refuses O_DIRECT, each write and
//!   read is followed by `POSIX_FADV_DONTNEED`);
//! * `NAME.idx`: a header (its identity, and its place in the eviction
//!   queues) and one entry per chunk: the chunk's length and an xxh3
//!   checksum of its bytes, seeded by the object's identity and the chunk's
//!   index, so that bytes of another chunk or object do not pass either.
//!
//! # Never wrong
//!
//! A chunk's entry is written after its bytes, and every read checks the
//! bytes against it: a process killed mid-write leaves bytes without an
//! entry, or an entry whose bytes do not match, and either is a miss that
//! is fetched again (the entry is then cleared). Two processes that fetch
//! the same chunk write the same bytes (the same version of the object).
//! A full disk stops admission until an eviction pass frees space; any
//! other error of the tier's files is a miss, and reads go on from the
//! store. An object without an ETag is never kept (it could change under
//! the same name).
//!
//! # Bounded, and scan-resistant
//!
//! The bytes of all `.dat` files together are held under the tier's size
//! (what each process adds is counted at once; all of them are counted by
//! a scan, under an flock(2) of `lock`, when that count passes the bound
//! and every sixteenth of it). Eviction is S3-FIFO (Yang et al., SOSP
//! 2023) at the grain of an object version: a version new to the tier
//! enters a small FIFO queue (a tenth of the size); one opened again while
//! there moves to the main queue when it reaches the small queue's head,
//! one that was not is dropped and remembered as a ghost (its header
//! alone), and a ghost opened again enters the main queue at once. The
//! main queue is a FIFO with reinsertion: an object opened again since it
//! was last at the head goes round once more. So a one-off scan passes
//! through the small queue without pushing out what every epoch reads.
//!
//! `foyer`, a hybrid memory and disk cache, was weighed for this and not
//! taken: its disk engine owns its device or files for one process,
//! while this tier is shared by every process that reads the same objects
//! (forked workers, several CLI processes and a mount at once).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use crate::io::AlignedBuf;

/// The tier's chunk: 64 KiB. A window of the engine (4 MiB GETs) is many
/// chunks; a 4 KiB random read fetches the one chunk around it, so that
/// it too is kept (16 times its bytes, about 0.7 ms more of a 90 MB/s
/// connection beside its 30 ms first byte).
pub const CHUNK: u64 = 64 << 10;
/// The index's header, in bytes.
const HEADER: usize = 64;
/// One chunk's entry in the index: checksum, length, mark.
const ENTRY: usize = 16;
const MAGIC: &[u8; 8] = b"AHEADTR1";
/// An entry's mark: written last, after the checksum and the length.
const VALID: u32 = 0xA4EA_D001;
/// The small queue's share of the size: one tenth, as S3-FIFO's authors
/// found best across their traces.
pub(crate) const SMALL_SHARE: u64 = 10;
/// Ghosts kept (headers of versions dropped from the small queue).
pub(crate) const GHOSTS: usize = 4096;
/// An eviction pass takes the tier down to this share of its size
/// (19/20), so that passes are not run at every admission.
pub(crate) const AFTER_PASS: (u64, u64) = (19, 20);
/// O_DIRECT's alignment for the tier's reads and writes.
const ALIGN: usize = 4096;
/// Without a bound given, the tier may take this share of the space free
/// when it opens: a half. mountpoint-s3 keeps 5% of the disk free instead;
/// on a disk already past 95% (this machine's is at 90%, with reserved
/// blocks) that left nothing.
const DEFAULT_SHARE_OF_FREE: u64 = 2;
/// The subdirectory of the caller's directory that holds the tier.
const SUBDIR: &str = "ahead-tier-v1";

/// The tier's counters, over every object it served.
#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub(crate) chunks_hit: AtomicU64,
    pub(crate) chunks_missed: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) discarded: AtomicU64,
    pub(crate) evicted: AtomicU64,
}

/// A disk tier in a directory (see the module's documentation).
pub struct DiskTier {
    dir: OwnedFd,
    path: PathBuf,
    limit: u64,
    /// The bytes of the tier as last counted, plus what this process
    /// added since.
    used: AtomicU64,
    /// Bytes this process added since its last count.
    since_scan: AtomicU64,
    /// The disk was full: no admission until a pass frees space.
    full: AtomicBool,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("path", &self.path)
            .field("limit", &self.limit)
            .finish()
    }
}

/// What an engine did with its disk tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Chunks read from the tier, whole and matching their checksums.
    pub chunks_hit: u64,
    /// Chunks looked for and not found (or found damaged).
    pub chunks_missed: u64,
    /// Bytes read from the tier.
    pub bytes_read: u64,
    /// Bytes written to it.
    pub bytes_written: u64,
    /// Chunks whose bytes did not match their checksum, dropped.
    pub discarded: u64,
    /// Object versions this process's eviction passes dropped.
    pub evicted: u64,
}

/// What a tier holds now, counted from its files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierUsage {
    /// Bytes on disk: object data, and the indexes of every version
    /// (ghosts' too).
    pub bytes: u64,
    /// Object versions with data.
    pub objects: u64,
    /// Versions remembered without data (ghosts).
    pub ghosts: u64,
}

impl DiskTier {
    /// Opens (making it if need be) the tier in `dir`, holding at most
    /// `limit` bytes, or, if `None`, half the space free under `dir` now
    /// (`DEFAULT_SHARE_OF_FREE`). A disk that fills up anyway stops
    /// admission until an eviction pass frees space.
    /// `dir` must be a directory the caller owns that no one else may
    /// write: another user who could write there could plant a chunk and
    /// its checksum.
    pub fn open(dir: &Path, limit: Option<u64>) -> io::Result<Arc<DiskTier>> {
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
        match rustix::fs::mkdir(dir, Mode::RWXU) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(named(e.into())),
        }
        // The one link followed is the caller's own path, and only when it
        // belongs to the caller or to root (as fs.protected_symlinks has
        // it): a link another user planted at DIR is refused.
        let st = rustix::fs::lstat(dir).map_err(|e| named(e.into()))?;
        let euid = rustix::process::geteuid().as_raw();
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
            && st.st_uid != euid
            && st.st_uid != 0
        {
            return Err(named(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("a link owned by uid {}, not by the caller", st.st_uid),
            )));
        }
        let top = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| named(e.into()))?;
        private(&top).map_err(named)?;
        match rustix::fs::mkdirat(&top, SUBDIR, Mode::RWXU) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(named(e.into())),
        }
        let sub = rustix::fs::openat(
            &top,
            SUBDIR,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| named(e.into()))?;
        private(&sub).map_err(named)?;
        let limit = match limit {
            Some(l) => l,
            None => {
                let st = rustix::fs::fstatvfs(&sub).map_err(|e| named(e.into()))?;
                st.f_bavail * st.f_frsize / DEFAULT_SHARE_OF_FREE
            }
        };
        let tier = DiskTier {
            dir: sub,
            path: dir.join(SUBDIR),
            limit,
            used: AtomicU64::new(0),
            since_scan: AtomicU64::new(0),
            full: AtomicBool::new(false),
            counters: Counters::default(),
        };
        let usage = tier.scan().map_err(named)?;
        tier.used.store(usage.bytes, Ordering::Relaxed);
        Ok(Arc::new(tier))
    }

    /// The tier's directory (`DIR/ahead-tier-v1`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size bound in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What it holds now, counted from its files.
    pub fn usage(&self) -> io::Result<TierUsage> {
        self.scan()
    }

    /// What this process's engine did with it so far.
    pub fn stats(&self) -> TierStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TierStats {
            chunks_hit: get(&c.chunks_hit),
            chunks_missed: get(&c.chunks_missed),
            bytes_read: get(&c.bytes_read),
            bytes_written: get(&c.bytes_written),
            discarded: get(&c.discarded),
            evicted: get(&c.evicted),
        }
    }

    /// The version of an object named by `identity` (the store's name and
    /// the URL), `etag` and `size`, opened for reading and keeping chunks;
    /// `None` where the tier cannot hold it now (its directory gone or
    /// unwritable: reads go on from the store).
    pub(crate) fn object(
        self: &Arc<Self>,
        identity: &str,
        etag: &str,
        size: u64,
    ) -> Option<Arc<TierObject>> {
        TierObject::open(self.clone(), identity, etag, size).ok()
    }

    /// Counts `bytes` just added; runs an eviction pass if the tier may
    /// now be over its bound, or this process added a sixteenth of it
    /// since it last counted everyone's.
    fn added(&self, bytes: u64) {
        let used = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let since = self.since_scan.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if used > self.limit || since > self.limit / 16 {
            self.pass();
        }
    }

    /// One eviction pass, unless another process is running one.
    fn pass(&self) {
        let Ok(lock) = rustix::fs::openat(
            &self.dir,
            "lock",
            OFlags::CREATE | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        ) else {
            return;
        };
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return;
        }
        self.since_scan.store(0, Ordering::Relaxed);
        if let Ok(left) = super::evict::pass(self) {
            self.used.store(left, Ordering::Relaxed);
            if left < self.limit {
                self.full.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Counts the tier's files.
    fn scan(&self) -> io::Result<TierUsage> {
        let mut u = TierUsage::default();
        for o in super::evict::list(self)? {
            if o.header.ghost {
                u.ghosts += 1;
            } else {
                u.objects += 1;
            }
            u.bytes += o.bytes;
        }
        Ok(u)
    }

    pub(crate) fn dir(&self) -> &OwnedFd {
        &self.dir
    }
}

/// Refuses a directory that is not the caller's alone to write.
fn private(fd: &OwnedFd) -> io::Result<()> {
    let st = rustix::fs::fstat(fd)?;
    let euid = rustix::process::geteuid().as_raw();
    if st.st_uid != euid || st.st_mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the cache directory must be the caller's (uid {euid}) and writable by no one else \
                 (it is uid {}'s, mode {:o})",
                st.st_uid,
                st.st_mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// An index's header: whose it is and where it stands in the queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) key: u128,
    pub(crate) size: u64,
    /// In the main queue (else the small one).
    pub(crate) main: bool,
    /// Opened again since it entered its queue, or last went round.
    pub(crate) freq: u8,
    /// Dropped from the small queue unused: its header alone.
    pub(crate) ghost: bool,
    /// When it entered its queue (nanoseconds since the epoch).
    pub(crate) inserted: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&CHUNK.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..40].copy_from_slice(&self.key.to_le_bytes());
        b[40] = self.main as u8;
        b[41] = self.freq;
        b[42] = self.ghost as u8;
        b[48..56].copy_from_slice(&self.inserted.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER || &b[..8] != MAGIC || b[8..16] != CHUNK.to_le_bytes() {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(Header {
            size: u64_at(16),
            key: u128::from_le_bytes(b[24..40].try_into().unwrap_or_default()),
            main: b[40] != 0,
            freq: b[41],
            ghost: b[42] != 0,
            inserted: u64_at(48),
        })
    }

    pub(crate) fn read(fd: &OwnedFd) -> Option<Header> {
        let mut b = [0u8; HEADER];
        let n = rustix::io::pread(fd, &mut b, 0).ok()?;
        Header::decode(&b[..n])
    }

    pub(crate) fn write(&self, fd: &OwnedFd) -> io::Result<()> {
        let b = self.encode();
        let n = rustix::io::pwrite(fd, &b, 0)?;
        if n == b.len() {
            Ok(())
        } else {
            Err(io::Error::other("short write of a tier index's header"))
        }
    }
}

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One object version in the tier: its data and index files.
pub(crate) struct TierObject {
    tier: Arc<DiskTier>,
    key: u128,
    size: u64,
    data: OwnedFd,
    index: OwnedFd,
    /// The data file takes O_DIRECT (else reads and writes are dropped
    /// from the page cache after the fact).
    direct: bool,
}

impl TierObject {
    fn open(
        tier: Arc<DiskTier>,
        identity: &str,
        etag: &str,
        size: u64,
    ) -> io::Result<Arc<TierObject>> {
        let key = xxhash_rust::xxh3::xxh3_128(format!("{identity}\0{etag}\0{size}").as_bytes());
        let stem = format!("{key:032x}");
        let flags = OFlags::CREATE | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::RUSR | Mode::WUSR;
        let index = rustix::fs::openat(tier.dir(), format!("{stem}.idx"), flags, mode)?;
        let found = Header::read(&index).filter(|h| h.key == key && h.size == size);
        let header = match found {
            // Opened again: it counts, for the queues.
            Some(h) if !h.ghost => Header {
                freq: h.freq.saturating_add(1).min(3),
                ..h
            },
            // A ghost comes back into the main queue; a new version (or an
            // index that is not this one's) starts in the small queue.
            // Either way its data file is new: entries another process
            // left are dropped with the rest.
            other => {
                rustix::fs::ftruncate(&index, 0)?;
                Header {
                    key,
                    size,
                    main: other.is_some(),
                    freq: 0,
                    ghost: false,
                    inserted: now_ns(),
                }
            }
        };
        header.write(&index)?;
        let name = format!("{stem}.dat");
        let (data, direct) =
            match rustix::fs::openat(tier.dir(), &name, flags | OFlags::DIRECT, mode) {
                Ok(fd) => (fd, true),
                Err(rustix::io::Errno::INVAL) => {
                    (rustix::fs::openat(tier.dir(), &name, flags, mode)?, false)
                }
                Err(e) => return Err(e.into()),
            };
        Ok(Arc::new(TierObject {
            tier,
            key,
            size,
            data,
            index,
            direct,
        }))
    }

    /// The object's size.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Chunk `c`'s length (the last one may be short).
    fn chunk_len(&self, c: u64) -> u64 {
        CHUNK.min(self.size.saturating_sub(c * CHUNK))
    }

    fn checksum(&self, c: u64, bytes: &[u8]) -> u64 {
        let seed = (self.key as u64) ^ (self.key >> 64) as u64 ^ c;
        xxhash_rust::xxh3::xxh3_64_with_seed(bytes, seed)
    }

    /// Chunks `first..end` read from the tier into `out` (their bytes at
    /// `(c - first) * CHUNK`); for each, whether it was there and whole.
    /// A chunk whose bytes do not match its entry is discarded.
    pub(crate) fn read(&self, first: u64, end: u64, out: &mut [u8]) -> Vec<bool> {
        let n = end.saturating_sub(first) as usize;
        let mut ok = vec![false; n];
        let mut entries = vec![0u8; n * ENTRY];
        let at = (HEADER + first as usize * ENTRY) as u64;
        let got = read_full(&self.index, &mut entries, at).unwrap_or(0);
        let entry = |i: usize| -> Option<(u64, u64)> {
            let e = entries
                .get(i * ENTRY..(i + 1) * ENTRY)
                .filter(|_| (i + 1) * ENTRY <= got)?;
            let mark = u32::from_le_bytes(e[12..16].try_into().ok()?);
            let sum = u64::from_le_bytes(e[..8].try_into().ok()?);
            let len = u32::from_le_bytes(e[8..12].try_into().ok()?) as u64;
            (mark == VALID).then_some((sum, len))
        };
        // Runs of chunks with entries, one read each.
        let mut i = 0;
        while i < n {
            if entry(i).is_none() {
                i += 1;
                continue;
            }
            let start = i;
            while i < n && entry(i).is_some() {
                i += 1;
            }
            let c0 = first + start as u64;
            let bytes: u64 = (start..i).map(|j| self.chunk_len(first + j as u64)).sum();
            let mut buf = AlignedBuf::new(bytes as usize, ALIGN);
            let Ok(read) = read_full(&self.data, buf.as_mut_slice(), c0 * CHUNK) else {
                continue;
            };
            self.drop_cached(c0 * CHUNK, bytes);
            for (j, got) in ok.iter_mut().enumerate().take(i).skip(start) {
                let c = first + j as u64;
                let len = self.chunk_len(c);
                let off = ((c - c0) * CHUNK) as usize;
                let Some((sum, want)) = entry(j) else {
                    continue;
                };
                let whole = want == len && off + len as usize <= read;
                let bytes = &buf.as_slice()[off..off + len as usize];
                if whole && self.checksum(c, bytes) == sum {
                    let o = j * CHUNK as usize;
                    out[o..o + len as usize].copy_from_slice(bytes);
                    *got = true;
                } else {
                    self.discard(c);
                }
            }
        }
        let hits = ok.iter().filter(|&&k| k).count() as u64;
        let c = &self.tier.counters;
        c.chunks_hit.fetch_add(hits, Ordering::Relaxed);
        c.chunks_missed
            .fetch_add(n as u64 - hits, Ordering::Relaxed);
        let bytes: u64 = (0..n)
            .filter(|&j| ok[j])
            .map(|j| self.chunk_len(first + j as u64))
            .sum();
        c.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        ok
    }

    /// Clears chunk `c`'s entry: its bytes did not match.
    fn discard(&self, c: u64) {
        self.tier.counters.discarded.fetch_add(1, Ordering::Relaxed);
        let _ = rustix::io::pwrite(
            &self.index,
            &[0u8; ENTRY],
            (HEADER + c as usize * ENTRY) as u64,
        );
    }

    /// Keeps chunks from `first` on, whose bytes `bytes` holds one after
    /// another (whole chunks; the object's last may be short): their bytes
    /// in one write, then their entries in one. Errors are counted, never
    /// returned: the tier is a cache.
    pub(crate) fn admit(&self, first: u64, bytes: &[u8]) {
        if self.tier.full.load(Ordering::Relaxed) {
            return;
        }
        // Only whole chunks (each as long as the object lets it be).
        let mut len = 0usize;
        let mut entries = Vec::new();
        for (k, part) in bytes.chunks(CHUNK as usize).enumerate() {
            let c = first + k as u64;
            if part.len() as u64 != self.chunk_len(c) {
                break;
            }
            let mut e = [0u8; ENTRY];
            e[..8].copy_from_slice(&self.checksum(c, part).to_le_bytes());
            e[8..12].copy_from_slice(&(part.len() as u32).to_le_bytes());
            e[12..16].copy_from_slice(&VALID.to_le_bytes());
            entries.extend_from_slice(&e);
            len += part.len();
        }
        if len == 0 {
            return;
        }
        let mut buf = AlignedBuf::new(len, ALIGN);
        buf.as_mut_slice()[..len].copy_from_slice(&bytes[..len]);
        if let Err(e) = write_full(&self.data, buf.as_slice(), first * CHUNK) {
            if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
                self.tier.full.store(true, Ordering::Relaxed);
            }
            return;
        }
        self.drop_cached(first * CHUNK, buf.len() as u64);
        // The entries after the bytes they vouch for.
        if write_full(
            &self.index,
            &entries,
            (HEADER + first as usize * ENTRY) as u64,
        )
        .is_err()
        {
            return;
        }
        self.tier
            .counters
            .bytes_written
            .fetch_add(len as u64, Ordering::Relaxed);
        self.tier.added(len as u64);
    }

    /// Leaves the page cache as it was where O_DIRECT could not be used.
    fn drop_cached(&self, offset: u64, len: u64) {
        if !self.direct {
            let _ = crate::sys::fadvise(&self.data, offset, len, crate::sys::Advice::DontNeed);
        }
    }
}

/// Reads until `buf` is full or the end of the file; the bytes read.
fn read_full(fd: impl AsFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd.as_fd(), &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            // A short read at the end of an O_DIRECT file: going on from
            // an unaligned offset would be refused.
            Ok(n) if n % ALIGN != 0 => return Ok(done + n),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

fn write_full(fd: impl AsFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pwrite(fd.as_fd(), &buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
