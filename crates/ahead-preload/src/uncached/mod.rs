//! The uncached mode: a program's reads and writes of regular files leave
//! the page cache as they found it.
//!
//! * **`RWF_DONTCACHE`** (Linux 6.14): each read or write is made as the
//!   same `preadv2`/`pwritev2` with the flag added (offset -1 where the
//!   program used the file position, which `preadv2` then uses and moves
//!   exactly as `read` would). Pages the call brings in leave with it;
//!   pages cached before stay.
//! * **Elsewhere** (the flag refused, or `AHEAD_RUN_DONTCACHE=0`), reads:
//!   the pages of the request are looked at with `mincore` just before the
//!   read and only those that were not cached are dropped after it
//!   (`POSIX_FADV_DONTNEED`), with the kernel's readahead off for the
//!   descriptor (`POSIX_FADV_RANDOM`). Pages up to `LOOK_PAST` (16 MiB) beyond
//!   the read are looked at and dropped the same way, as the kernel's
//!   readahead can still bring them in. Writes: every [`FLUSH_EVERY`] bytes, and at close, the file's
//!   dirty pages are written back (`sync_file_range`) and dropped, as
//!   Debian's `nocache` and Linus Torvalds' streaming-write recipe do.
//! * `copy_file_range` copies inside the kernel, through the cache: here it
//!   becomes a loop of the reads and writes above, with the same result,
//!   offsets and file positions.

use libc::{c_int, c_void, iovec, off64_t, size_t, ssize_t};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

use crate::helper::{self, Kind};
use crate::hooks::{real, Pos};
use crate::Slot;

mod snapshot;

pub(crate) use snapshot::SnapSlot;

/// The write fallback flushes and drops a file's dirty pages this often.
pub const FLUSH_EVERY: u64 = 8 << 20;
/// mmap by system call: the library's own mappings must not go through
/// its `mmap` hook (which counts the program's mappings of files).
///
/// # Safety
/// As mmap(2).
unsafe fn raw_mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    // SAFETY: the caller's arguments, as mmap takes them; -1 on error is
    // MAP_FAILED.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
}

fn off_arg(pos: Pos) -> i64 {
    match pos {
        Pos::At(o) => o,
        Pos::Current => -1,
    }
}

fn refused(r: ssize_t) -> bool {
    r < 0 && matches!(crate::errno(), libc::EOPNOTSUPP | libc::EINVAL)
}

/// The call made as `preadv2`/`pwritev2` with RWF_DONTCACHE added, where
/// the descriptor takes it: `None` if it does not (then the descriptor is
/// marked, errno is as it was, and the caller falls back).
fn with_dontcache(
    kind: Kind,
    fd: c_int,
    slot: &Slot,
    gen: u32,
    pos: Pos,
    iov: &[iovec],
    flags: c_int,
) -> Option<ssize_t> {
    if !crate::dontcache_allowed() || slot.no_dontcache.load(Ordering::Relaxed) != 0 {
        return None;
    }
    type Rw = unsafe extern "C" fn(c_int, *const iovec, c_int, i64, c_int) -> ssize_t;
    let f: Option<Rw> = match kind {
        Kind::Write => real!(pwritev2: fn(c_int, *const iovec, c_int, i64, c_int) -> ssize_t),
        _ => real!(preadv2: fn(c_int, *const iovec, c_int, i64, c_int) -> ssize_t),
    };
    let e = crate::errno();
    let r = match f {
        // SAFETY: the program's own buffers, as the original call had them.
        Some(f) => unsafe {
            f(
                fd,
                iov.as_ptr(),
                iov.len() as c_int,
                off_arg(pos),
                flags | libc::RWF_DONTCACHE,
            )
        },
        None => {
            crate::set_errno(libc::EOPNOTSUPP);
            -1
        }
    };
    if refused(r) {
        slot.no_dontcache.store(1, Ordering::Relaxed);
        crate::set_errno(e);
        return None;
    }
    if r > 0 {
        let e2 = crate::errno();
        count(kind, fd, gen, r);
        crate::set_errno(e2);
    }
    Some(r)
}

/// A read of a regular file in uncached mode.
pub(crate) fn read(
    fd: c_int,
    slot: &Slot,
    gen: u32,
    pos: Pos,
    iov: &[iovec],
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    if iov.is_empty() {
        return call();
    }
    if let Some(r) = with_dontcache(Kind::Read, fd, slot, gen, pos, iov, flags) {
        return r;
    }
    // The fallback.
    let e = crate::errno();
    let offset = match pos {
        Pos::At(o) => Some(o as u64),
        Pos::Current => helper::position(fd),
    };
    let len: u64 = iov.iter().map(|i| i.iov_len as u64).sum();
    let Some(offset) = offset else {
        crate::set_errno(e);
        return call();
    };
    if slot.no_dontcache.swap(2, Ordering::Relaxed) != 2 {
        fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM);
    }
    if slot.snap.ensure(fd) {
        crate::set_errno(e);
        let r = call();
        if r > 0 {
            let e = crate::errno();
            slot.snap.read(fd, gen, offset, r as u64);
            count(Kind::Read, fd, gen, r);
            crate::set_errno(e);
        }
        return r;
    }
    // No snapshot (a file too large for one): residency of the read's
    // pages just before it.
    crate::set_errno(e);
    let r = snapshot::around_read(fd, offset, len, call);
    if r > 0 {
        let e = crate::errno();
        count(Kind::Read, fd, gen, r);
        crate::set_errno(e);
    }
    r
}

fn fadvise(fd: c_int, off: u64, len: u64, advice: c_int) {
    // SAFETY: advice on the program's descriptor; it changes no data.
    unsafe { libc::posix_fadvise(fd, off as i64, len as i64, advice) };
}

/// At exit: the final pass for descriptors still open.
pub(crate) fn at_exit() {
    for fd in 0..crate::SLOTS as c_int {
        if let Some(s) = crate::slot(fd) {
            if s.snap.state.load(Ordering::Acquire) == 1 {
                s.snap.finish(fd, s.gen.load(Ordering::Acquire));
            }
        }
    }
}

fn count(kind: Kind, fd: c_int, gen: u32, r: ssize_t) {
    // The offset is not needed for the counters.
    helper::note(kind, fd, gen, 0, r as u64);
}

/// A write of a regular file in uncached mode.
pub(crate) fn write(
    fd: c_int,
    slot: &Slot,
    gen: u32,
    pos: Pos,
    iov: &[iovec],
    flags: c_int,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    if iov.is_empty() {
        return call();
    }
    if let Some(r) = with_dontcache(Kind::Write, fd, slot, gen, pos, iov, flags) {
        return r;
    }
    let r = call();
    if r > 0 {
        let e = crate::errno();
        count(Kind::Write, fd, gen, r);
        let total = slot.unflushed.fetch_add(r as u64, Ordering::Relaxed) + r as u64;
        if total >= FLUSH_EVERY {
            slot.unflushed.store(0, Ordering::Relaxed);
            flush_and_drop(fd);
        }
        crate::set_errno(e);
    }
    r
}

/// Writes back a file's dirty pages, waits, and drops its cached pages.
fn flush_and_drop(fd: c_int) {
    // SAFETY: writeback and advice on the program's descriptor.
    unsafe {
        libc::sync_file_range(
            fd,
            0,
            0,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// Before a descriptor closes: the read fallback's final pass, and what
/// the write fallback left dirty goes.
pub(crate) fn closing(fd: c_int) {
    let Some(s) = crate::slot(fd) else { return };
    s.snap.finish(fd, s.gen.load(Ordering::Acquire));
    if s.unflushed.swap(0, Ordering::Relaxed) > 0 {
        flush_and_drop(fd);
    }
}

/// `copy_file_range` between two regular files, made of uncached reads and
/// writes: the same bytes, return value, offsets and positions.
pub(crate) fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    _original: impl FnOnce() -> ssize_t,
) -> ssize_t {
    const BUF: usize = 1 << 20;
    // SAFETY: an anonymous private buffer, unmapped before return.
    let buf = unsafe {
        raw_mmap(
            std::ptr::null_mut(),
            BUF,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if buf == libc::MAP_FAILED {
        return _original();
    }
    // The offsets, read without faulting where the program's pointers are
    // bad (the kernel then answers EFAULT to the call itself).
    let read_off = |p: *mut off64_t| -> Option<Option<i64>> {
        if p.is_null() {
            return Some(None);
        }
        let mut v: i64 = 0;
        crate::bufs::copy_from_program(p as *const c_void, &mut v as *mut i64 as *mut c_void, 8)
            .then_some(Some(v))
    };
    let (Some(mut pin), Some(mut pout)) = (read_off(off_in), read_off(off_out)) else {
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(buf, BUF) };
        return _original();
    };
    let mut done: u64 = 0;
    let mut result: ssize_t = 0;
    while (done as usize) < len {
        let want = (len - done as usize).min(BUF);
        let iov = [iovec {
            iov_base: buf,
            iov_len: want,
        }];
        // SAFETY: reads into our buffer through the hooked read path.
        let r = unsafe {
            match pin {
                Some(o) => crate::hooks::pread64(fd_in, buf, want, o),
                None => crate::hooks::read(fd_in, buf, want),
            }
        };
        let _ = iov;
        if r < 0 {
            if done == 0 {
                result = -1;
            }
            break;
        }
        if r == 0 {
            break;
        }
        let mut written = 0usize;
        let mut failed = false;
        while written < r as usize {
            // SAFETY: writes from our buffer through the hooked write path.
            let w = unsafe {
                let p = (buf as *const u8).add(written) as *const c_void;
                match pout {
                    Some(o) => {
                        crate::hooks::pwrite64(fd_out, p, r as usize - written, o + written as i64)
                    }
                    None => crate::hooks::write(fd_out, p, r as usize - written),
                }
            };
            if w <= 0 {
                failed = true;
                break;
            }
            written += w as usize;
        }
        if let Some(o) = pin.as_mut() {
            *o += written as i64;
        }
        if let Some(o) = pout.as_mut() {
            *o += written as i64;
        }
        if written < r as usize && pin.is_none() {
            // Give back what was read but not written.
            let back = (r as usize - written) as i64;
            // SAFETY: moves the program's file position back by what it
            // did not copy, as copy_file_range would not have read it.
            let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd_in) };
            let _ = rustix::fs::seek(bfd, rustix::fs::SeekFrom::Current(-back));
        }
        done += written as u64;
        if failed {
            if done == 0 {
                result = -1;
            }
            break;
        }
    }
    let e = crate::errno();
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(buf, BUF) };
    for (p, v) in [(off_in, pin), (off_out, pout)] {
        if let Some(v) = v {
            crate::bufs::copy_to_program(&v as *const i64 as *const c_void, p as *mut c_void, 8);
        }
    }
    crate::set_errno(e);
    if result < 0 {
        -1
    } else {
        done as ssize_t
    }
}
