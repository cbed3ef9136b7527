//! The copy engine behind `ahead copy`: parallel, sparse-aware, safe against
//! interruption, and by default neutral to the kernel's page cache.
//!
//! What "neutral" means (nbdcopy's page-cache patches,
//! docs/references.md, taken further): after
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
//!
//! Why this is a room of the library and not a crate of its own: it reads
//! no page through [`crate::Engine`], its cache or its policies (a copy
//! reads each byte once, in chunks the size of the device's largest
//! request: there is nothing to read ahead or keep), but it is built on
//! the library's other rooms — the residency record and counts
//! ([`crate::residency`]), the system calls of `sys`, the descriptor walk
//! ([`crate::walk`]) for trees, and objects' ranged GETs
//! ([`crate::remote`]) for an `s3://` source — and it is part of what the
//! library offers Rust callers, beside `ahead copy`. A crate of its own
//! would have to make those rooms' internals public API to reach them.

mod journal;
mod place;
mod tree;

#[cfg(feature = "remote")]
pub use object::{download, download_object, upload, upload_object};
pub use tree::{copy_tree, TreeReport};

mod dest;
#[cfg(feature = "remote")]
mod object;
mod plan;
mod run;
mod source;
mod stream;
mod verify;
mod worker;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use crate::{sys, Error, Result};
pub use journal::StateDir;
use place::Source;

use plan::check_options;
pub use plan::MAX_CHUNK_BYTES;
use run::copy_to;
pub use verify::checksum_file;

/// What the copy does to the kernel's page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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
    /// Set from elsewhere (a SIGINT handler) to stop the copy between
    /// chunks: it ends with an `Interrupted` error. A resumable copy keeps
    /// its temporary file and journal for `--resume`, as after a kill; one
    /// that cannot be resumed (a stream, no state directory) removes them.
    pub cancel: Option<std::sync::Arc<AtomicBool>>,
    /// Fault injection for the crate's own tests of `verify`.
    #[cfg(test)]
    pub(crate) write_fault: Option<crate::io::fault::WriteFault>,
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
            cancel: None,
            #[cfg(test)]
            write_fault: None,
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

/// What a copy moved, how long it took, and the page cache on both sides:
/// what a file's copy ([`CopyReport`]) and a tree's ([`TreeReport`], the
/// sums of its files') report alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
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
    /// Source pages cached before (`None`: not visible; for a tree, the
    /// sum over the files that showed all three counts).
    pub src_cached_before: Option<u64>,
    /// Source pages cached after.
    pub src_cached_after: Option<u64>,
    /// Destination pages cached after.
    pub dst_cached_after: Option<u64>,
}

impl Totals {
    /// Adds a file's copy to these totals (a tree's; `elapsed` is left
    /// to the caller, a tree's wall time not being its files' sum).
    /// Whether its page-cache counts were known and added.
    pub(crate) fn add(&mut self, file: &Totals) -> bool {
        self.bytes += file.bytes;
        self.data_bytes += file.data_bytes;
        self.holes_bytes += file.holes_bytes;
        self.resumed_bytes += file.resumed_bytes;
        let (Some(b), Some(a), Some(d)) = (
            file.src_cached_before,
            file.src_cached_after,
            file.dst_cached_after,
        ) else {
            return false;
        };
        let add = |sum: &mut Option<u64>, n: u64| *sum = Some(sum.unwrap_or(0) + n);
        add(&mut self.src_cached_before, b);
        add(&mut self.src_cached_after, a);
        add(&mut self.dst_cached_after, d);
        true
    }
}

/// What a copy did.
#[derive(Clone, Debug, Default)]
pub struct CopyReport {
    /// The destination actually written (after resolving a directory).
    pub dst: PathBuf,
    /// Its bytes, time and page-cache counts.
    pub totals: Totals,
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
/// An object's chunk: one ranged GET each. AWS's performance guidelines
/// name 8 and 16 MB as typical sizes for byte-range fetches.
const OBJECT_CHUNK: u64 = 8 << 20;
/// An object has no mode: its copy is made as curl -o and `aws s3 cp` make
/// theirs, 0666 less the umask.
const OBJECT_MODE: u32 = 0o666;

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

/// Whether the caller asked the copy to stop.
fn cancelled(opts: &CopyOptions) -> bool {
    opts.cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
}

/// The error a cancelled copy ends with.
fn interrupted(path: &Path) -> Error {
    Error::io(
        "copy",
        path,
        None,
        io::Error::new(io::ErrorKind::Interrupted, "interrupted"),
    )
}

fn refused(path: &Path, why: impl Into<String>) -> Error {
    Error::Refused {
        path: path.to_path_buf(),
        why: why.into(),
    }
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
    (buf.as_ptr() as usize).is_multiple_of(align)
        && offset.is_multiple_of(align as u64)
        && buf.len().is_multiple_of(align)
}

/// Whether a flagged preadv2/pwritev2 failed because the flag is not
/// supported here (rather than for a real reason).
fn unsupported(e: &Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
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

#[cfg(test)]
mod tests {
    use super::dest::is_zero;
    use super::plan::{interleave, plan, Task};
    use super::*;
    use std::fs;

    #[test]
    fn interleave_spreads_device_reads_and_keeps_each_kind_in_order() {
        let tasks = |n: u64| plan(n * 4, 4, &[(0, n * 4)]);
        let order = |t: &[Task]| t.iter().map(|t| t.offset / 4).collect::<Vec<_>>();
        // First half cached: the two halves alternate.
        let t = interleave(tasks(8), |t| t.offset >= 16);
        assert_eq!(order(&t), vec![4, 0, 5, 1, 6, 2, 7, 3]);
        // One read among four: it goes to the middle, not to an end.
        let t = interleave(tasks(4), |t| t.offset == 0);
        assert_eq!(order(&t), vec![1, 0, 2, 3]);
        // One kind only: file order.
        assert_eq!(order(&interleave(tasks(5), |_| true)), vec![0, 1, 2, 3, 4]);
        assert_eq!(order(&interleave(tasks(5), |_| false)), vec![0, 1, 2, 3, 4]);
        assert!(interleave(Vec::new(), |_| true).is_empty());
        // Any split: every task once, each kind ascending.
        for n in 1..40u64 {
            for m in 1..n {
                let t = interleave(tasks(n), |t| (t.offset / 4) % m == 0);
                let mut seen = order(&t);
                let reads: Vec<_> = seen.iter().copied().filter(|i| i % m == 0).collect();
                let free: Vec<_> = seen.iter().copied().filter(|i| i % m != 0).collect();
                assert!(reads.windows(2).all(|w| w[0] < w[1]));
                assert!(free.windows(2).all(|w| w[0] < w[1]));
                seen.sort_unstable();
                assert_eq!(seen, (0..n).collect::<Vec<_>>());
            }
        }
    }

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
            write_fault: Some(crate::io::fault::WriteFault::Corrupt(1_234_567)),
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
    fn eio_and_enospc_on_the_destination_end_the_copy_and_remove_the_temporary_file() {
        use crate::io::fault::WriteFault;
        let dir = tempfile::tempdir_in(crate::testdata::scratch_root()).unwrap();
        let src = dir.path().join("src");
        crate::testdata::write_file(&src, 6 << 20).unwrap();
        let dst = dir.path().join("dst");
        for (errno, depth) in [(libc::EIO, 1), (libc::ENOSPC, 4), (libc::EIO, 4)] {
            let opts = CopyOptions {
                reflink: false,
                depth,
                chunk: Some(1 << 20),
                write_fault: Some(WriteFault::Fail((3 << 20) + 5, errno)),
                ..CopyOptions::default()
            };
            match copy(&src, &dst, &opts, &|_| {}) {
                Err(Error::Io {
                    op, path, source, ..
                }) => {
                    assert_eq!(op, "write");
                    assert_eq!(source.raw_os_error(), Some(errno));
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    assert!(name.starts_with(".dst.ahead-"), "{name}");
                }
                other => panic!("{other:?}"),
            }
            assert!(!dst.exists(), "a failed copy left a destination");
            let left: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .filter(|n| n != "src")
                .collect();
            assert!(left.is_empty(), "{left:?}");
        }
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
