//! I/O backends: where the cache's reads go.
//!
//! One trait, [`Backend`], with buffers passed by ownership: a [`ReadOp`]
//! carries its memory into the backend, and the completion callback gets it
//! back with the result, so no borrow crosses the asynchronous gap. Three
//! real backends implement it:
//!
//! * [`Uring`] — io_uring, one ring per backend, a completion thread,
//!   vectored reads straight into the cache's frames, bounded queue depth;
//! * [`Pool`] — `preadv` on a bounded pool of threads, for kernels
//!   without io_uring (or where it is disabled);
//! * [`Requests`] — for sources whose reads are requests (objects): each
//!   source starts its own where it can, a [`Pool`] reads the rest.
//!
//! [`fault::Fault`] wraps any of them to inject errors, short reads and
//! delays (the tests' and `ahead stress`'s).
//!
//! All have the same semantics, checked by one conformance suite: a read
//! returns `Ok(n)` with `n == len` unless it reached the end of the file, in
//! which case `n` is the number of bytes before the end; short reads that are
//! not at the end are continued inside the backend, `EINTR`/`EAGAIN` are
//! retried, and any other error is returned as it is.

mod buf;
pub mod fault;
mod pool;
mod requests;
mod uring;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

pub use buf::{AlignedBuf, Arena, HugeChoice, HugePages, PROBE_MIN};
pub use pool::Pool;
pub use requests::Requests;
pub use uring::Uring;

/// The unit O_DIRECT transfers in: a read that stops at an offset that is
/// not a multiple of it stopped at the end of the file.
const SECTOR: usize = 512;

/// The memory one read fills.
pub enum IoBuf {
    /// One aligned buffer.
    Owned(AlignedBuf),
    /// Frames of the cache's arena, filled in order. Only the crate can
    /// make one: which frame the kernel may write is the cache's page state
    /// machine's decision, and no safe code outside it may aim a read at a
    /// frame.
    Frames(FrameBuf),
}

/// Frames of an arena that one read fills (see [`IoBuf::Frames`]).
pub struct FrameBuf {
    /// The arena the frames belong to (kept alive by the read).
    arena: Arc<Arena>,
    /// The frames, one page each.
    frames: Vec<u32>,
}

impl FrameBuf {
    /// Frames `frames` of `arena`: the caller owns their contents until the
    /// read completes (a frame being read is not pinned, lent or read).
    pub(crate) fn new(arena: Arc<Arena>, frames: Vec<u32>) -> FrameBuf {
        FrameBuf { arena, frames }
    }

    /// The arena they belong to.
    pub(crate) fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }
}

impl IoBuf {
    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        match self {
            IoBuf::Owned(b) => b.len(),
            IoBuf::Frames(f) => f.arena.frame_size() * f.frames.len(),
        }
    }

    /// Copies `data` into the buffer from byte `skip` on (clipped to its
    /// capacity); the bytes copied. For a source that gets its bytes in
    /// memory (an object's response body, chunk by chunk) rather than
    /// reading into the buffer.
    pub fn fill_at(&mut self, skip: usize, data: &[u8]) -> usize {
        if skip >= self.capacity() {
            return 0;
        }
        let iov = self.iovecs(skip, data.len());
        let mut at = 0;
        for v in &iov {
            let n = v.iov_len.min(data.len() - at);
            // SAFETY: the iovec points into this buffer, which `&mut self`
            // holds alone; `n` bytes fit in it and in `data` past `at`.
            unsafe {
                std::ptr::copy_nonoverlapping(data[at..].as_ptr(), v.iov_base.cast::<u8>(), n)
            };
            at += n;
        }
        at
    }

    /// The iovecs covering bytes `[skip, skip + len)` of the buffer.
    fn iovecs(&mut self, skip: usize, len: usize) -> Vec<libc::iovec> {
        let end = (skip + len).min(self.capacity());
        match self {
            IoBuf::Owned(b) => vec![libc::iovec {
                // SAFETY: skip < capacity (end > skip when called), inside the buffer.
                iov_base: unsafe { b.as_mut_ptr().add(skip) }.cast(),
                iov_len: end - skip,
            }],
            IoBuf::Frames(FrameBuf { arena, frames }) => {
                let fs = arena.frame_size();
                let mut v: Vec<libc::iovec> = Vec::with_capacity(frames.len());
                let mut at = skip;
                while at < end {
                    let frame = frames[at / fs];
                    let within = at % fs;
                    let n = (fs - within).min(end - at);
                    // SAFETY: within < frame size, inside the frame.
                    let base = unsafe { arena.frame_ptr(frame).add(within) };
                    match v.last_mut() {
                        // Frames next to each other in the arena: one iovec.
                        Some(last)
                            if (last.iov_base as usize).checked_add(last.iov_len)
                                == Some(base as usize) =>
                        {
                            last.iov_len += n
                        }
                        _ => v.push(libc::iovec {
                            iov_base: base.cast(),
                            iov_len: n,
                        }),
                    }
                    at += n;
                }
                v
            }
        }
    }
}

/// Where a read's bytes come from: the one abstraction every backend reads
/// through, and the seam for a second kind of source.
///
/// * A **file** is read by its descriptor: io_uring and the pread pool take
///   it from [`ReadSource::fd`]. `Arc<OwnedFd>` is this kind.
/// * A source **without a descriptor** (an object in a store, read by
///   ranged requests with their own latency and concurrency) answers `None`
///   and reads itself in [`ReadSource::read_at`]. The fd backends still
///   serve it, in the thread that submits (the pool) or finds it (io_uring
///   reads it at once); a backend of its own, built for its latency, is
///   what such a source is meant to have.
///
/// The cache above keys pages by an opened source's number, whatever its
/// kind, and the policies see only pages: neither knows which kind it is.
pub trait ReadSource: Send + Sync {
    /// The descriptor to read with, for a file.
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// Reads into `buf` at `offset`, in the calling thread, with the
    /// backends' semantics: fewer bytes than asked only at the end of the
    /// source. `flags` are preadv2(2)'s `RWF_*`, which a source without a
    /// descriptor ignores. A file is read by the backends through its
    /// descriptor and never calls this.
    fn read_at(&self, buf: &mut [u8], offset: u64, flags: i32) -> io::Result<usize>;
    /// Reads the bytes at `offset` into `parts` one after another, with
    /// [`ReadSource::read_at`]'s semantics over their total. The default
    /// reads each part in turn; a source whose requests cost a round trip
    /// (an object) makes it one request.
    fn read_parts(&self, parts: &mut [&mut [u8]], offset: u64, flags: i32) -> io::Result<usize> {
        let mut done = 0;
        for part in parts.iter_mut() {
            let n = self.read_at(part, offset + done as u64, flags)?;
            done += n;
            if n < part.len() {
                break;
            }
        }
        Ok(done)
    }
    /// For a source whose reads are requests to a server: starts `op`
    /// without holding a thread while it waits, and calls `done` when it
    /// completes, as [`Backend::submit`] would. The default has no such
    /// path and gives `op` and `done` back, for a backend to read them
    /// itself.
    fn start(&self, op: ReadOp, done: Completion) -> Result<(), (ReadOp, Completion)> {
        Err((op, done))
    }
    /// What the source is now: its size, and a tag that changes whenever
    /// its contents may have (a file: its modification and change times;
    /// an object: its ETag). [`crate::File::refresh`] compares them.
    fn version(&self) -> io::Result<Version>;
    /// Whether its reads are requests to a server rather than a device's
    /// reads: such a source is read on the engine's request backend
    /// ([`Requests`]), which lets it [`ReadSource::start`] its own, and
    /// its reads do not teach the engine its device's costs
    /// ([`crate::Engine::device_cost`]). The default: a device.
    fn by_request(&self) -> bool {
        false
    }
    /// What reading it costs, as the readahead policies weigh speculation
    /// ([`crate::ra::DeviceCost`], in pages of `page_size`), where the
    /// source knows. Asked at each decision of the policy, so it may
    /// change as the engine learns (an object store's requests in flight).
    /// The default, `None`: a device, whose costs are the policies'
    /// measured defaults.
    fn cost(&self, page_size: u64) -> Option<crate::ra::DeviceCost> {
        let _ = page_size;
        None
    }
}

/// A source's size and a tag of its contents, as [`ReadSource::version`]
/// gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// Size in bytes.
    pub size: u64,
    /// Changes whenever the contents may have.
    pub tag: u128,
}

impl ReadSource for OwnedFd {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64, flags: i32) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match crate::sys::pread_flags(self, &mut buf[done..], offset + done as u64, flags) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn version(&self) -> io::Result<Version> {
        let st = rustix::fs::fstat(self)?;
        let size = if rustix::fs::FileType::from_raw_mode(st.st_mode)
            == rustix::fs::FileType::BlockDevice
        {
            rustix::fs::seek(self, rustix::fs::SeekFrom::End(0))?
        } else {
            st.st_size as u64
        };
        let ns = |s: i64, n: i64| (s as i128 * 1_000_000_000 + n as i128) as u64 as u128;
        // A writer cannot set the change time back; both times, exactly.
        #[allow(clippy::unnecessary_cast)] // the fields' widths vary by architecture
        let tag = ns(st.st_mtime as i64, st.st_mtime_nsec as i64) << 64
            | ns(st.st_ctime as i64, st.st_ctime_nsec as i64);
        Ok(Version { size, tag })
    }
}

/// One read: `len` bytes of `source` at `offset` into `buf`.
pub struct ReadOp {
    /// What is read (a file: its descriptor), kept open until the read
    /// completes.
    pub source: Arc<dyn ReadSource>,
    /// Byte offset in the file (aligned for O_DIRECT files).
    pub offset: u64,
    /// Bytes to read; at most `buf.capacity()`.
    pub len: usize,
    /// Where the bytes go.
    pub buf: IoBuf,
    /// preadv2(2) flags (`RWF_*`), 0 for a plain read: the Uncached mode
    /// reads with `RWF_DONTCACHE`. Backends pass them through.
    pub flags: i32,
    /// The data is known not to be cached (a Buffered read whose
    /// non-blocking probe missed): io_uring hands it to its workers at once
    /// (IOSQE_ASYNC) instead of first trying it on the submitting thread,
    /// as PostgreSQL does once several reads are in flight. The pool
    /// ignores it.
    pub known_miss: bool,
}

/// Called once with the operation and its result when a read completes:
/// `Ok(n)` bytes read, fewer than asked only at the end of the file.
pub type Completion = Box<dyn FnOnce(ReadOp, io::Result<usize>) + Send>;

/// An I/O backend.
pub trait Backend: Send + Sync {
    /// Its name, for reports.
    fn name(&self) -> &'static str;
    /// How many reads it keeps in flight at most.
    fn depth(&self) -> usize;
    /// Starts `op`. `done` runs on a backend thread when it completes. Blocks
    /// while `depth()` reads are already in flight.
    fn submit(&self, op: ReadOp, done: Completion);
    /// Reads `op` in the calling thread, with the same semantics (demand
    /// reads: the reader waits anyway). [`read_blocking`] unless a backend
    /// has a reason to differ (the fault injector does).
    fn read_now(&self, op: &mut ReadOp) -> io::Result<usize> {
        read_blocking(op)
    }
    /// Offers the cache's arena for registered (fixed-buffer) reads of its
    /// frames; whether the backend took it. The default declines.
    fn attach(&self, _arena: &Arc<Arena>) -> bool {
        false
    }
    /// Reads sent as fixed-buffer reads so far (0 for a backend without
    /// them).
    fn fixed_reads(&self) -> u64 {
        0
    }
}

/// Runs a read's completion on a backend thread without letting a panic in
/// it unwind into that thread: a backend whose completion thread died would
/// leave every later read waiting forever. The panic has been reported by
/// the panic hook; the backend goes on with its other reads.
fn run_completion(done: Completion, op: ReadOp, result: io::Result<usize>) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| done(op, result)));
}

/// What to do after a read call on `fd` returned `n` bytes, `done` bytes
/// into an operation of `len`: `None` when finished (complete, or at the
/// end of the file), else the new `done` to continue from.
///
/// Only a read of 0 bytes is the end of the file — except on an O_DIRECT
/// descriptor, where a read stops short of a sector boundary only at the
/// end of the file (and a continuation at that unaligned offset would be
/// refused). A buffered descriptor (the fallback on FUSE, NFS, tmpfs) may
/// return short reads anywhere: they are continued, never taken for the
/// end. Whether `fd` is O_DIRECT is asked only in that rare case.
fn continue_after(done: usize, n: usize, len: usize, fd: Option<BorrowedFd<'_>>) -> Option<usize> {
    let total = done + n;
    if n == 0 || total >= len || (!total.is_multiple_of(SECTOR) && fd.is_some_and(is_direct)) {
        None
    } else {
        Some(total)
    }
}

/// Whether `fd` was opened with O_DIRECT (fcntl(2) F_GETFL; assumed so if
/// the kernel will not say, which stops rather than risks a refused read).
fn is_direct(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_getfl(fd).map_or(true, |f| f.contains(rustix::fs::OFlags::DIRECT))
}

/// Reads `op` in the calling thread with preadv2(2), with the backends'
/// semantics. Demand reads use this: the reader waits anyway, and doing the
/// read itself spares a hand-off to another thread. A backend of the
/// caller's own ([`crate::Engine::with_backend`]) serves its reads with it
/// too: it is the one way outside the crate to fill an [`IoBuf::Frames`].
pub fn read_blocking(op: &mut ReadOp) -> io::Result<usize> {
    let Some(fd) = op.source.fd().map(|fd| fd.as_raw_fd()) else {
        return read_by_source(op);
    };
    let mut done = 0;
    loop {
        let iov = op.buf.iovecs(done, op.len - done);
        // SAFETY: the iovecs point into `op.buf`, which `op` owns and which
        // nobody else touches while the read runs (`&mut op`).
        let n = unsafe {
            libc::preadv2(
                fd,
                iov.as_ptr(),
                iov.len() as libc::c_int,
                (op.offset + done as u64) as libc::off_t,
                op.flags,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => return Err(err),
            }
        }
        match continue_after(done, n as usize, op.len, op.source.fd()) {
            None => return Ok(done + n as usize),
            Some(d) => done = d,
        }
    }
}

/// A read of a source without a descriptor: [`ReadSource::read_at`] into
/// each part of the buffer in turn, stopping at the source's end.
fn read_by_source(op: &mut ReadOp) -> io::Result<usize> {
    let source = op.source.clone();
    let iov = op.buf.iovecs(0, op.len);
    // SAFETY: each iovec points into `op.buf`, which `op` owns and which
    // nobody else touches while the read runs (`&mut op`); the iovecs do
    // not overlap, and the slices live only for this read.
    let mut parts: Vec<&mut [u8]> = iov
        .iter()
        .map(|v| unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len) })
        .collect();
    source.read_parts(&mut parts, op.offset, op.flags)
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BackendKind {
    /// io_uring if the kernel has it, else the thread pool.
    #[default]
    Auto,
    /// io_uring (an error if the kernel lacks it).
    Uring,
    /// The thread pool.
    Pool,
}

impl std::str::FromStr for BackendKind {
    type Err = crate::ParseError;
    fn from_str(s: &str) -> Result<Self, crate::ParseError> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "uring" | "io_uring" => Ok(BackendKind::Uring),
            "pool" => Ok(BackendKind::Pool),
            _ => Err(crate::ParseError::new("backend", s, "auto, uring or pool")),
        }
    }
}

/// Builds a backend of `kind` with `depth` reads in flight at most.
pub fn new_backend(kind: BackendKind, depth: usize) -> io::Result<Arc<dyn Backend>> {
    match kind {
        BackendKind::Pool => Ok(Arc::new(pool::Pool::new(depth))),
        BackendKind::Uring => Ok(Arc::new(uring::Uring::new(depth)?)),
        BackendKind::Auto => match uring::Uring::new(depth) {
            Ok(u) => Ok(Arc::new(u)),
            Err(_) => Ok(Arc::new(pool::Pool::new(depth))),
        },
    }
}

#[cfg(test)]
mod conformance;

#[cfg(test)]
mod short_reads {
    use super::*;

    #[test]
    fn a_short_buffered_read_mid_file_is_continued_not_taken_for_the_end() {
        let dir = tempfile::tempdir_in(crate::testdata::scratch_root()).unwrap();
        let p = dir.path().join("f");
        crate::testdata::write_file(&p, 64 << 10).unwrap();
        let buffered = crate::testdata::open_read(&p, false).unwrap();
        let b = buffered.as_fd();
        // FUSE or NFS may stop at any byte: go on from there.
        assert_eq!(continue_after(0, 1000, 8192, Some(b)), Some(1000));
        assert_eq!(continue_after(4096, 100, 8192, Some(b)), Some(4196));
        // Only a read of nothing is the end; a complete read is complete.
        assert_eq!(continue_after(1000, 0, 8192, Some(b)), None);
        assert_eq!(continue_after(4096, 4096, 8192, Some(b)), None);
        match crate::testdata::open_read(&p, true) {
            Ok(direct) => {
                let d = direct.as_fd();
                // O_DIRECT stops off a sector boundary only at the end.
                assert_eq!(continue_after(0, 1000, 8192, Some(d)), None);
                assert_eq!(continue_after(0, 4096, 8192, Some(d)), Some(4096));
            }
            Err(e) => eprintln!("SKIP O_DIRECT half: {e}"),
        }
    }
}
